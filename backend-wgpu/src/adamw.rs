//! The AdamW optimizer step (decoupled weight decay, bias-corrected moments), with the
//! operations in the order PyTorch's `torch.optim.AdamW` applies them and the bias
//! corrections the contract folds on the host in f64 ([`AdamWScalars`]), as every
//! backend applies them.

use sage_transformer::contract::{to_u32, AdamWScalars};
use sage_transformer::Tensor;

use crate::error::WgpuError;
use crate::launch::pieces;
use crate::pipelines::{Family, Kernel};
use crate::store::Operand;
use crate::WgpuBackend;

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
    scalars: AdamWScalars,
) -> Result<(), WgpuError> {
    let op = "adamw";
    for t in [params, grads, m, v] {
        b.store.locate(Operand::F32(t))?;
    }
    let AdamWScalars {
        beta1,
        beta2,
        eps,
        step_size,
        correction2_sqrt,
        decay,
    } = scalars;
    for (start, len) in pieces(params.len, b.chunk_elements(1)) {
        let part = |t: Tensor| Operand::F32(t.slice(start, len));
        let grid = b.grid_for(op, len)?;
        b.launch(
            ADAMW,
            &[part(params), part(m), part(v), part(grads)],
            &[
                to_u32(op, "len", len)?,
                beta1.to_bits(),
                beta2.to_bits(),
                eps.to_bits(),
                step_size.to_bits(),
                correction2_sqrt.to_bits(),
                decay.to_bits(),
            ],
            grid,
        )?;
    }
    Ok(())
}
