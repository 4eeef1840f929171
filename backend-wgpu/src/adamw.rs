//! The AdamW optimizer step (decoupled weight decay, bias-corrected moments), with the
//! operations in the order PyTorch's `torch.optim.AdamW` applies them and the bias
//! corrections computed on the host in f64, as the CPU backend does.

use sage_transformer::{AdamWStep, Tensor};

use crate::error::WgpuError;
use crate::launch::pieces;
use crate::pipelines::{Family, Kernel};
use crate::store::Operand;
use crate::WgpuBackend;
use sage_transformer::contract::{expect_len, to_u32};

const ADAMW: Kernel = Kernel {
    family: Family::Adamw,
    entry: "adamw",
    bindings: 4,
};

/// m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2, then
/// p = p (1 - lr wd) - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps),
/// which is p -= lr (m_hat / (sqrt(v_hat) + eps) + wd p). All four tensors are [P].
pub(crate) fn adamw(
    b: &mut WgpuBackend,
    params: Tensor,
    grads: Tensor,
    m: Tensor,
    v: Tensor,
    step: AdamWStep,
) -> Result<(), WgpuError> {
    let op = "adamw";
    for (name, len) in [("grads", grads.len), ("m", m.len), ("v", v.len)] {
        expect_len(op, name, len, params.len)?;
    }
    if step.step == 0 {
        return Err(WgpuError::BadArgument(
            "adamw: `step` is 1-based, got 0".into(),
        ));
    }
    for t in [params, grads, m, v] {
        b.store.locate(Operand::F32(t))?;
    }
    let t = f64::from(step.step);
    let correction1 = 1.0 - f64::from(step.beta1).powf(t);
    let correction2_sqrt = (1.0 - f64::from(step.beta2).powf(t)).sqrt() as f32;
    let step_size = (f64::from(step.learning_rate) / correction1) as f32;
    let decay = 1.0 - step.learning_rate * step.weight_decay;
    for (start, len) in pieces(params.len, b.chunk_elements(1)) {
        let part = |t: Tensor| Operand::F32(t.slice(start, len));
        let grid = b.grid_for(op, len)?;
        b.launch(
            ADAMW,
            &[part(params), part(m), part(v), part(grads)],
            &[
                to_u32(op, "len", len)?,
                step.beta1.to_bits(),
                step.beta2.to_bits(),
                step.eps.to_bits(),
                step_size.to_bits(),
                correction2_sqrt.to_bits(),
                decay.to_bits(),
            ],
            grid,
        )?;
    }
    Ok(())
}
