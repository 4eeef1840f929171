//! The AdamW optimizer step, with the scalars the contract folded on the host
//! ([`AdamWScalars`]: the bias corrections in f64, rounded to f32). Kernel in
//! `kernels/adamw.cu`.

use sage_transformer::contract::AdamWScalars;
use sage_transformer::Tensor;

use crate::error::CudaError;
use crate::launch::{blocks_for, Arg, THREADS};
use crate::CudaBackend;

/// One AdamW step over params, m, v [P] with gradient grads [P].
pub(crate) fn adamw(
    b: &mut CudaBackend,
    [params, grads, m, v]: [Tensor; 4],
    scalars: AdamWScalars,
) -> Result<(), CudaError> {
    let op = "adamw";
    let n = params.len as u64;
    let args = [
        Arg::Ptr(b.store.address(params)?),
        Arg::Ptr(b.store.address(grads)?),
        Arg::Ptr(b.store.address(m)?),
        Arg::Ptr(b.store.address(v)?),
        Arg::U64(n),
        Arg::F32(scalars.beta1),
        Arg::F32(scalars.beta2),
        Arg::F32(scalars.eps),
        Arg::F32(scalars.step_size),
        Arg::F32(scalars.correction2_sqrt),
        Arg::F32(scalars.decay),
    ];
    if n == 0 {
        return Ok(());
    }
    b.launch(op, (blocks_for(n), 1), THREADS, &args)
}
