//! The SwiGLU activation of the MLP, silu(gate) * up, and its backward.

use sage_transformer::Tensor;

use crate::error::WgpuError;
use crate::pipelines::{Family, Kernel};
use crate::WgpuBackend;
use sage_transformer::contract::to_u32;

const FORWARD: Kernel = Kernel {
    family: Family::Swiglu,
    entry: "swiglu_forward",
    bindings: 5,
};
const BACKWARD: Kernel = Kernel {
    family: Family::Swiglu,
    entry: "swiglu_backward",
    bindings: 5,
};

/// out[N, I] = silu(gate[N, I]) * up[N, I], silu(g) = g * sigmoid(g).
pub(crate) fn swiglu_forward(
    b: &mut WgpuBackend,
    out: Tensor,
    gate: Tensor,
    up: Tensor,
) -> Result<(), WgpuError> {
    let op = "swiglu_forward";
    if out.len == 0 {
        return Ok(());
    }
    let grid = b.grid_for(op, out.len)?;
    b.launch(
        FORWARD,
        &[out.into(), out.into(), gate.into(), gate.into(), up.into()],
        &[to_u32(op, "len", out.len)?],
        grid,
    )
}

/// dgate[N, I] = dout * up * sigmoid(g) * (1 + g * (1 - sigmoid(g))) and
/// dup[N, I] = dout * silu(g), from dout[N, I], gate (g) and up [N, I].
pub(crate) fn swiglu_backward(
    b: &mut WgpuBackend,
    dgate: Tensor,
    dup: Tensor,
    dout: Tensor,
    gate: Tensor,
    up: Tensor,
) -> Result<(), WgpuError> {
    let op = "swiglu_backward";
    if dout.len == 0 {
        return Ok(());
    }
    let grid = b.grid_for(op, dout.len)?;
    b.launch(
        BACKWARD,
        &[
            dgate.into(),
            dup.into(),
            dout.into(),
            gate.into(),
            up.into(),
        ],
        &[to_u32(op, "len", dout.len)?],
        grid,
    )
}
