//! The SwiGLU activation of the MLP, silu(gate) * up, and its backward; kernels in
//! `kernels/swiglu.cu`.

use sage_transformer::Tensor;

use crate::error::CudaError;
use crate::launch::{blocks_for, Arg, THREADS};
use crate::CudaBackend;

/// out[N, I] = silu(gate[N, I]) * up[N, I].
pub(crate) fn swiglu_forward(
    b: &mut CudaBackend,
    out: Tensor,
    gate: Tensor,
    up: Tensor,
) -> Result<(), CudaError> {
    let op = "swiglu_forward";
    let n = out.len as u64;
    let args = [
        Arg::Ptr(b.store.address(out)?),
        Arg::Ptr(b.store.address(gate)?),
        Arg::Ptr(b.store.address(up)?),
        Arg::U64(n),
    ];
    if n == 0 {
        return Ok(());
    }
    b.launch(op, (blocks_for(n), 1), THREADS, &args)
}

/// dgate, dup [N, I] (overwritten) from dout[N, I] and the forward's gate and up.
pub(crate) fn swiglu_backward(
    b: &mut CudaBackend,
    dgate: Tensor,
    dup: Tensor,
    dout: Tensor,
    gate: Tensor,
    up: Tensor,
) -> Result<(), CudaError> {
    let op = "swiglu_backward";
    let n = dout.len as u64;
    let args = [
        Arg::Ptr(b.store.address(dgate)?),
        Arg::Ptr(b.store.address(dup)?),
        Arg::Ptr(b.store.address(dout)?),
        Arg::Ptr(b.store.address(gate)?),
        Arg::Ptr(b.store.address(up)?),
        Arg::U64(n),
    ];
    if n == 0 {
        return Ok(());
    }
    b.launch(op, (blocks_for(n), 1), THREADS, &args)
}
