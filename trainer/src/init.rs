//! Random initialisation of a fresh model (for training from scratch, as the built-in
//! demo does): Qwen2's scheme, normal(0, 0.02) matrices and embeddings, unit RMSNorm
//! weights, zero biases, with the two projections that write into the residual stream
//! (`o_proj`, `down_proj`) scaled by `1 / sqrt(2 * layers)` so the stream's variance
//! does not grow with depth.

use sage_transformer::{Kernels, Transformer};

use crate::sampling::SequenceRng;

/// Standard deviation of matrices and embeddings (transformers' `initializer_range`).
pub const INIT_STD: f64 = 0.02;

/// Writes freshly drawn parameters into `model`; the same seed gives the same model.
pub fn init_params<K: Kernels>(k: &mut K, model: &Transformer, seed: u64) -> Result<(), K::Error> {
    let layers = model.config().num_hidden_layers.max(1) as f64;
    let residual_scale = 1.0 / (2.0 * layers).sqrt();
    let mut values = vec![0.0f32; model.params().len];
    for (index, (name, slot)) in model.layout().named().into_iter().enumerate() {
        let target = &mut values[slot.offset..slot.offset + slot.len];
        if name.ends_with("layernorm.weight") || name == "model.norm.weight" {
            target.fill(1.0);
        } else if name.ends_with(".bias") {
            target.fill(0.0);
        } else {
            let residual = name.ends_with("o_proj.weight") || name.ends_with("down_proj.weight");
            let std = if residual {
                INIT_STD * residual_scale
            } else {
                INIT_STD
            };
            let mut rng = SequenceRng::new(seed, index as u64);
            for value in target.iter_mut() {
                *value = (std * standard_normal(&mut rng)) as f32;
            }
        }
    }
    k.write(model.params(), &values)
}

/// One draw of a standard normal (Box-Muller, one of the pair).
fn standard_normal(rng: &mut SequenceRng) -> f64 {
    let u1 = 1.0 - rng.next_unit();
    let u2 = rng.next_unit();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}
