//! The output head: full logits for sampling, and the fused logits -> log-softmax ->
//! log-prob of the targets with its per-token weighted backward. The fused pair walks
//! the rows in chunks, so at most [`LOGITS_CHUNK`] logits exist at any time; each chunk
//! is a cuBLAS GEMM into a scratch buffer followed by a row kernel
//! (`kernels/logprob.cu`), and in the backward pass two more GEMMs (into dhidden, and
//! accumulated into dlm_head).
//!
//! Targets live on the device: a target at or above V gives a NaN log-prob.

use sage_transformer::device::HeadOperands;
use sage_transformer::{MatmulShape, Tensor};

use crate::error::CudaError;
use crate::launch::{blocks_for, blocks_per_task, Arg, THREADS};
use crate::matmul::{gemm, Operand};
use crate::scratch::Scratch;
use crate::CudaBackend;
use sage_transformer::contract::{to_u32, HeadDims};

/// Most logits (`f32`) the fused head holds at once: 256 MiB, which for a 152k
/// vocabulary is chunks of 441 rows, large enough for efficient GEMMs.
const LOGITS_CHUNK: usize = 1 << 26;
/// Threads per block of the row kernel (HEAD_THREADS in logprob.cu).
const HEAD_THREADS: u32 = 512;

/// The shape of `c[m, n] = op(a) · op(b)` (see [`MatmulShape`]).
fn mm(m: usize, n: usize, k: usize, trans_a: bool, trans_b: bool, accumulate: bool) -> MatmulShape {
    MatmulShape {
        m,
        n,
        k,
        trans_a,
        trans_b,
        accumulate,
    }
}

/// The head's device-side targets, checked; `hidden` and `lm_head` are GEMM operands,
/// which the GEMM looks up (read only, so a kept bf16 copy of `lm_head` stays current;
/// `lm_head` may be frozen bf16 weights).
fn targets(b: &CudaBackend, head: &HeadOperands) -> Result<u64, CudaError> {
    b.store.address_read(head.hidden)?;
    b.store.weight_address(head.lm_head)?;
    b.store.index_address(head.targets)
}

/// Rows `start .. start + rows` of `hidden[N, D]` as a GEMM operand.
fn hidden_rows(head: &HeadOperands, start: usize, rows: usize, dim: usize) -> Operand {
    Operand::Tensor(head.hidden.slice(start * dim, rows * dim))
}

/// logp[N] = logits[n, targets[n]] - lse[n] and lse[N] = log sum_j exp(logits[n, j]),
/// logits = hidden[N, D] · lm_head[V, D]^T, chunk by chunk of rows.
pub(crate) fn logprob_forward(
    b: &mut CudaBackend,
    logp: Tensor,
    lse: Tensor,
    head: HeadOperands,
    d: HeadDims,
) -> Result<(), CudaError> {
    let op = "logprob_forward";
    let targets = targets(b, &head)?;
    let (logp, lse) = (b.store.address(logp)?, b.store.address(lse)?);
    if d.rows == 0 {
        return Ok(());
    }
    let chunk = (LOGITS_CHUNK / d.vocab.max(1)).max(1);
    let logits = b.scratch_space(Scratch::Logits, chunk.min(d.rows) * d.vocab)?;
    for start in (0..d.rows).step_by(chunk) {
        let rows = chunk.min(d.rows - start);
        // logits[rows, V] = hidden[start.., D] · lm_head^T
        gemm(
            b,
            logits,
            hidden_rows(&head, start, rows, d.dim),
            Operand::Tensor(head.lm_head),
            mm(rows, d.vocab, d.dim, false, true, false),
        )?;
        b.launch(
            "logprob_rows",
            (blocks_per_task(rows), 1),
            HEAD_THREADS,
            &[
                Arg::Ptr(logits),
                Arg::Ptr(targets + 4 * start as u64),
                Arg::Ptr(logp + 4 * start as u64),
                Arg::Ptr(lse + 4 * start as u64),
                Arg::U32(to_u32(op, "rows", rows)?),
                Arg::U32(to_u32(op, "V", d.vocab)?),
            ],
        )?;
    }
    Ok(())
}

/// Backward of sum_n weights[n] * logp[n]: with dlogits = w (onehot(target) - softmax),
/// dhidden[N, D] = dlogits · lm_head (overwritten; 0 on rows of weight 0) and
/// dlm_head[V, D] += dlogits^T · hidden (when given), chunk by chunk of rows in order.
pub(crate) fn logprob_backward(
    b: &mut CudaBackend,
    dhidden: Tensor,
    dlm_head: Option<Tensor>,
    weights: Tensor,
    lse: Tensor,
    head: HeadOperands,
    d: HeadDims,
) -> Result<(), CudaError> {
    let op = "logprob_backward";
    let targets = targets(b, &head)?;
    let dhidden = b.store.address(dhidden)?;
    let dlm_head = match dlm_head {
        Some(dlm_head) => Some(b.store.address(dlm_head)?),
        None => None,
    };
    let (weights, lse) = (b.store.address(weights)?, b.store.address(lse)?);
    if d.rows == 0 {
        return Ok(());
    }
    let chunk = (LOGITS_CHUNK / d.vocab.max(1)).max(1);
    let logits = b.scratch_space(Scratch::Logits, chunk.min(d.rows) * d.vocab)?;
    // The bf16 mode's copies: dlogits in bf16 only (two per f32 slot), which is all the
    // two GEMMs after read. Otherwise dlogits in place of the logits, in f32.
    let (kernel, dlogits, dlogits_in) = if b.writes_copies() {
        let len = (chunk.min(d.rows) * d.vocab).div_ceil(2);
        let at = b.scratch_space(Scratch::DlogitsBf16, len)?;
        ("logprob_dlogits_bf16", at, Operand::Bf16Scratch(at))
    } else {
        ("logprob_dlogits", logits, Operand::Scratch(logits))
    };
    for start in (0..d.rows).step_by(chunk) {
        let rows = chunk.min(d.rows - start);
        let hidden = hidden_rows(&head, start, rows, d.dim);
        // logits[rows, V]
        gemm(
            b,
            logits,
            hidden,
            Operand::Tensor(head.lm_head),
            mm(rows, d.vocab, d.dim, false, true, false),
        )?;
        let args = [
            Arg::Ptr(dlogits),
            Arg::Ptr(logits),
            Arg::Ptr(targets + 4 * start as u64),
            Arg::Ptr(weights + 4 * start as u64),
            Arg::Ptr(lse + 4 * start as u64),
            Arg::U32(to_u32(op, "rows", rows)?),
            Arg::U32(to_u32(op, "V", d.vocab)?),
        ];
        let grid = (blocks_for((rows * d.vocab) as u64), 1);
        b.launch(kernel, grid, THREADS, &args)?;
        // dhidden[rows, D] = dlogits · lm_head
        let dhidden_rows = dhidden + 4 * (start * d.dim) as u64;
        let shape = mm(rows, d.dim, d.vocab, false, false, false);
        let lm_head = Operand::Tensor(head.lm_head);
        gemm(b, dhidden_rows, dlogits_in, lm_head, shape)?;
        // dlm_head[V, D] += dlogits^T · hidden
        if let Some(dlm_head) = dlm_head {
            let shape = mm(d.vocab, d.dim, rows, true, false, true);
            gemm(b, dlm_head, dlogits_in, hidden, shape)?;
        }
    }
    Ok(())
}

/// out[B, V] = hidden[B, D] · lm_head[V, D]^T.
pub(crate) fn logits(
    b: &mut CudaBackend,
    out: Tensor,
    hidden: Tensor,
    lm_head: Tensor,
    dims: HeadDims,
) -> Result<(), CudaError> {
    let HeadDims { rows, dim, vocab } = dims;
    let out = b.store.address(out)?;
    let (hidden, lm_head) = (Operand::Tensor(hidden), Operand::Tensor(lm_head));
    gemm(
        b,
        out,
        hidden,
        lm_head,
        mm(rows, vocab, dim, false, true, false),
    )
}
