//! Picking each row's next token where the logits are (kernel in `kernels/choose.cu`):
//! greedy, or a draw from the temperature-scaled softmax at a uniform number the host
//! drew, by the rule of `sage_transformer::sampling::choose`; only the (token,
//! log-probability) pairs are read back.

use sage_transformer::contract::{to_u32, ChoiceSizes};
use sage_transformer::Tensor;

use crate::error::CudaError;
use crate::launch::Arg;
use crate::scratch::IndexScratch;
use crate::CudaBackend;

/// Threads per block (CHOOSE_THREADS in choose.cu): one block per row.
const CHOOSE_THREADS: u32 = 256;

/// The uniform number `u` (in [0, 1)) as the f32 the kernel reads: rounded down, so it
/// stays below 1.
fn kernel_uniform(u: f64) -> u32 {
    let rounded = u as f32;
    let below_one = if f64::from(rounded) > u {
        f32::from_bits(rounded.to_bits() - 1)
    } else {
        rounded
    };
    below_one.to_bits()
}

/// choices[B, 2] from logits[B, V] (see `Kernels::choose_tokens`).
pub(crate) fn choose_tokens(
    b: &mut CudaBackend,
    choices: Tensor,
    logits: Tensor,
    uniforms: &[f64],
    sizes: ChoiceSizes,
) -> Result<(), CudaError> {
    let op = "choose_tokens";
    let (choices, logits) = (b.store.address(choices)?, b.store.address(logits)?);
    let greedy = sizes.temperature == 0.0;
    let bits: Vec<u32> = if greedy {
        vec![0; sizes.rows]
    } else {
        uniforms.iter().map(|&u| kernel_uniform(u)).collect()
    };
    let uniforms = b
        .scratch
        .upload_indices(&b.gpu, IndexScratch::Uniforms, &bits)?;
    let inverse_temperature = if greedy { 0.0 } else { 1.0 / sizes.temperature };
    b.launch(
        op,
        (to_u32(op, "rows", sizes.rows)?, 1),
        CHOOSE_THREADS,
        &[
            Arg::Ptr(choices),
            Arg::Ptr(logits),
            Arg::Ptr(uniforms),
            Arg::U32(to_u32(op, "vocab", sizes.vocab)?),
            Arg::F32(inverse_temperature),
            Arg::U32(u32::from(greedy)),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::kernel_uniform;

    #[test]
    fn a_uniform_number_rounds_down_below_one() {
        let largest_below_one = 1.0 - f64::EPSILON / 2.0;
        assert!(f32::from_bits(kernel_uniform(largest_below_one)) < 1.0);
        assert_eq!(f32::from_bits(kernel_uniform(0.5)), 0.5);
        assert_eq!(f32::from_bits(kernel_uniform(0.0)), 0.0);
        let u = 0.123_456_789_012_345_f64;
        assert!(f64::from(f32::from_bits(kernel_uniform(u))) <= u);
    }
}
