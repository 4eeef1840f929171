//! LoRA settings of SFT and RL (`[sft.lora]`, `[rl.lora]`) and the adapters' start: with a
//! rank above 0 the run trains rank-`r` adapters on the frozen model
//! (`sage_transformer::lora`) instead of every weight.

use serde::{Deserialize, Serialize};

use sage_transformer::{AdapterLayout, Kernels, LoraConfig, Projection, Transformer};

use crate::sampling::SequenceRng;

/// `[sft.lora]` or `[rl.lora]`: the adapters a run trains, or none (rank 0).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoraSettings {
    /// The adapters' rank r; 0 trains every weight instead.
    pub rank: usize,
    /// The update is `(alpha / rank) · B·A`.
    pub alpha: f32,
    /// The adapted projections of every layer, by their module names (`q_proj`, `k_proj`,
    /// `v_proj`, `o_proj`, `gate_proj`, `up_proj`, `down_proj`).
    pub targets: Vec<String>,
}

impl Default for LoraSettings {
    /// Off (rank 0); when a rank is set: alpha 16 and every projection.
    fn default() -> LoraSettings {
        LoraSettings {
            rank: 0,
            alpha: 16.0,
            targets: Projection::ALL
                .iter()
                .map(|p| p.name().to_owned())
                .collect(),
        }
    }
}

impl LoraSettings {
    /// The adapters' config, `None` when the rank is 0; an unknown projection name, a
    /// projection named twice, no target or an alpha that is not positive is an error
    /// naming it.
    pub fn config(&self) -> Result<Option<LoraConfig>, String> {
        if self.rank == 0 {
            return Ok(None);
        }
        let targets = self
            .targets
            .iter()
            .map(|name| {
                Projection::from_name(name).ok_or_else(|| {
                    let known: Vec<&str> = Projection::ALL.iter().map(|p| p.name()).collect();
                    format!("unknown target `{name}` (one of {})", known.join(", "))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let config = LoraConfig {
            rank: self.rank,
            alpha: self.alpha,
            targets,
        };
        config.validate()?;
        Ok(Some(config))
    }
}

/// The adapters' first values: each `A[r, in]` uniform in `±1/sqrt(in)` (PEFT's
/// default), each `B` zero, so that the adapted model starts as the model; the same
/// seed gives the same values.
pub fn initial_adapters(layout: &AdapterLayout, seed: u64) -> Vec<f32> {
    let mut values = vec![0.0f32; layout.total];
    for (index, adapter) in layout.adapters.iter().enumerate() {
        let bound = 1.0 / (adapter.in_dim() as f64).sqrt();
        let mut rng = SequenceRng::new(seed, index as u64);
        let a = &mut values[adapter.a.offset..adapter.a.offset + adapter.a.len];
        for value in a {
            *value = ((2.0 * rng.next_unit() - 1.0) * bound) as f32;
        }
    }
    values
}

/// Puts the adapters of `settings` on `model` (nothing at rank 0); returns whether it
/// did. The model's current weights become the frozen ones.
pub fn apply_lora<K: Kernels>(
    k: &mut K,
    model: &mut Transformer,
    settings: &LoraSettings,
    seed: u64,
) -> Result<bool, String> {
    let Some(config) = settings.config()? else {
        return Ok(false);
    };
    let layout = AdapterLayout::new(model.layout(), &config);
    let initial = initial_adapters(&layout, seed);
    model
        .enable_lora(k, config, &initial)
        .map_err(|e| e.to_string())?;
    Ok(true)
}
