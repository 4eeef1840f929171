//! The AdamW optimizer step (decoupled weight decay, bias-corrected moments), with the
//! operations in the order PyTorch's `torch.optim.AdamW` applies them.

use rayon::prelude::*;
use sage_transformer::AdamWStep;

use crate::elementwise::CHUNK;
use sage_transformer::contract::expect_len;

use crate::error::CpuError;

/// m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2, then
/// p = p (1 - lr wd) - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps),
/// which is p -= lr (m_hat / (sqrt(v_hat) + eps) + wd p). All four tensors are [P].
pub(crate) fn adamw(
    params: &mut [f32],
    m: &mut [f32],
    v: &mut [f32],
    grads: &[f32],
    step: AdamWStep,
) -> Result<(), CpuError> {
    let len = params.len();
    for (name, got) in [("grads", grads.len()), ("m", m.len()), ("v", v.len())] {
        expect_len("adamw", name, got, len)?;
    }
    if step.step == 0 {
        return Err(CpuError::BadArgument(
            "adamw: `step` is 1-based, got 0".into(),
        ));
    }
    let t = f64::from(step.step);
    let correction1 = 1.0 - f64::from(step.beta1).powf(t);
    let correction2_sqrt = (1.0 - f64::from(step.beta2).powf(t)).sqrt();
    let step_size = (f64::from(step.learning_rate) / correction1) as f32;
    let correction2_sqrt = correction2_sqrt as f32;
    let decay = 1.0 - step.learning_rate * step.weight_decay;
    let AdamWStep {
        beta1, beta2, eps, ..
    } = step;
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
    Ok(())
}
