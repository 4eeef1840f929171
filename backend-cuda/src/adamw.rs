//! The AdamW optimizer step; the host folds the bias corrections into two scalars
//! exactly as the CPU backend does (in f64, then rounded to f32). Kernel in
//! `kernels/adamw.cu`.

use sage_transformer::{AdamWStep, Tensor};

use crate::error::CudaError;
use crate::launch::{blocks_for, Arg, THREADS};
use crate::CudaBackend;
use sage_transformer::contract::expect_len;

/// One AdamW step over params, m, v [P] with gradient grads [P].
pub(crate) fn adamw(
    b: &mut CudaBackend,
    params: Tensor,
    grads: Tensor,
    m: Tensor,
    v: Tensor,
    step: AdamWStep,
) -> Result<(), CudaError> {
    let op = "adamw";
    for (name, len) in [("grads", grads.len), ("m", m.len), ("v", v.len)] {
        expect_len(op, name, len, params.len)?;
    }
    if step.step == 0 {
        return Err(CudaError::BadArgument(
            "adamw: `step` is 1-based, got 0".into(),
        ));
    }
    let t = f64::from(step.step);
    let correction1 = 1.0 - f64::from(step.beta1).powf(t);
    let correction2_sqrt = (1.0 - f64::from(step.beta2).powf(t)).sqrt() as f32;
    let step_size = (f64::from(step.learning_rate) / correction1) as f32;
    let decay = 1.0 - step.learning_rate * step.weight_decay;
    let n = params.len as u64;
    let args = [
        Arg::Ptr(b.store.address(params)?),
        Arg::Ptr(b.store.address(grads)?),
        Arg::Ptr(b.store.address(m)?),
        Arg::Ptr(b.store.address(v)?),
        Arg::U64(n),
        Arg::F32(step.beta1),
        Arg::F32(step.beta2),
        Arg::F32(step.eps),
        Arg::F32(step_size),
        Arg::F32(correction2_sqrt),
        Arg::F32(decay),
    ];
    if n == 0 {
        return Ok(());
    }
    b.launch(op, (blocks_for(n), 1), THREADS, &args)
}
