//! The AdamW optimizer step (decoupled weight decay, bias-corrected moments), with the
//! operations in the order PyTorch's `torch.optim.AdamW` applies them.

use rayon::prelude::*;
use sage_transformer::contract::AdamWScalars;

use crate::elementwise::CHUNK;

/// m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2, then
/// p = p (1 - lr wd) - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps),
/// which is p -= lr (m_hat / (sqrt(v_hat) + eps) + wd p). All four tensors are [P].
pub(crate) fn adamw(
    params: &mut [f32],
    m: &mut [f32],
    v: &mut [f32],
    grads: &[f32],
    scalars: AdamWScalars,
) {
    let AdamWScalars {
        beta1,
        beta2,
        eps,
        step_size,
        correction2_sqrt,
        decay,
    } = scalars;
    params
        .par_chunks_mut(CHUNK)
        .zip(m.par_chunks_mut(CHUNK))
        .zip(v.par_chunks_mut(CHUNK))
        .zip(grads.par_chunks(CHUNK))
        .for_each(|(((params, m), v), grads)| {
            for (((p, m), v), &g) in params
                .iter_mut()
                .zip(m.iter_mut())
                .zip(v.iter_mut())
                .zip(grads)
            {
                *m = beta1 * *m + (1.0 - beta1) * g;
                *v = beta2 * *v + (1.0 - beta2) * g * g;
                let denominator = v.sqrt() / correction2_sqrt + eps;
                *p = *p * decay - step_size * *m / denominator;
            }
        });
}
