//! The SwiGLU activation of the MLP, silu(gate) * up, and its backward; kernels in
//! `kernels/swiglu.cu`.

use sage_transformer::Tensor;

use crate::error::CudaError;
use crate::launch::{blocks_for, Arg, THREADS};
use crate::matmul::copy_out;
use crate::CudaBackend;

/// out[N, I] = silu(gate[N, I]) * up[N, I]; out's bf16 copy too where GEMMs read it
/// ([`copy_out`]).
pub(crate) fn swiglu_forward(
    b: &mut CudaBackend,
    out: Tensor,
    gate: Tensor,
    up: Tensor,
) -> Result<(), CudaError> {
    let op = "swiglu_forward";
    let n = out.len as u64;
    let (out_at, gate, up) = (
        b.store.address(out)?,
        b.store.address(gate)?,
        b.store.address(up)?,
    );
    if n == 0 {
        return Ok(());
    }
    let args = [
        Arg::Ptr(out_at),
        Arg::Ptr(copy_out(b, out)?),
        Arg::Ptr(gate),
        Arg::Ptr(up),
        Arg::U64(n),
    ];
    b.launch(op, (blocks_for(n), 1), THREADS, &args)
}

/// dgate, dup [N, I] (overwritten) from dout[N, I] and the forward's gate and up; their
/// bf16 copies too where GEMMs read them ([`copy_out`]).
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
    let (dgate_at, dup_at) = (b.store.address(dgate)?, b.store.address(dup)?);
    let (dout, gate, up) = (
        b.store.address(dout)?,
        b.store.address(gate)?,
        b.store.address(up)?,
    );
    if n == 0 {
        return Ok(());
    }
    let args = [
        Arg::Ptr(dgate_at),
        Arg::Ptr(dup_at),
        Arg::Ptr(copy_out(b, dgate)?),
        Arg::Ptr(copy_out(b, dup)?),
        Arg::Ptr(dout),
        Arg::Ptr(gate),
        Arg::Ptr(up),
        Arg::U64(n),
    ];
    b.launch(op, (blocks_for(n), 1), THREADS, &args)
}
