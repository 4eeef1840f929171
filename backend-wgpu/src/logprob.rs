//! The output head: full logits for sampling, and the fused logits -> log-softmax ->
//! log-prob of the targets with its per-token weighted backward. The fused pair walks
//! the rows in chunks, so at most [`LOGITS_CHUNK`] logits exist at any time; each chunk
//! is a GEMM into a scratch buffer followed by a row kernel, and in the backward pass
//! two more GEMMs (into dhidden, and accumulated into dlm_head).
//!
//! Targets live on the device: a target at or above V gives a NaN log-prob (the model
//! checks targets on the host before they get here).

use sage_transformer::contract::{to_u32, HeadDims};
use sage_transformer::device::HeadOperands;
use sage_transformer::{MatmulShape, Tensor};

use crate::error::WgpuError;
use crate::matmul::matmul;
use crate::pipelines::{Family, Kernel};
use crate::scratch::Scratch;
use crate::store::{index_slice, Operand};
use crate::WgpuBackend;

const ROWS: Kernel = Kernel {
    family: Family::Logprob,
    entry: "logprob_rows",
    bindings: 4,
};
const DLOGITS: Kernel = Kernel {
    family: Family::Logprob,
    entry: "logprob_dlogits",
    bindings: 4,
};

/// Most logits (`f32`) the fused head holds at once: 16 MiB.
const LOGITS_CHUNK: usize = 1 << 22;

/// Rows of logits per chunk: within [`LOGITS_CHUNK`] and the binding size limit.
fn chunk_rows(b: &WgpuBackend, op: &str, vocab: usize) -> Result<usize, WgpuError> {
    let by_binding = b.chunk_elements(1) / vocab.max(1);
    if by_binding == 0 {
        return Err(WgpuError::TooLarge(format!(
            "{op}: one row of {vocab} logits exceeds the adapter's binding size limit"
        )));
    }
    Ok((LOGITS_CHUNK / vocab.max(1)).clamp(1, by_binding))
}

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

/// logp[N] = logits[n, targets[n]] - lse[n] and lse[N] = log sum_j exp(logits[n, j]),
/// logits = hidden[N, D] · lm_head[V, D]^T, chunk by chunk of rows.
pub(crate) fn logprob_forward(
    b: &mut WgpuBackend,
    logp: Tensor,
    lse: Tensor,
    head: HeadOperands,
    d: HeadDims,
) -> Result<(), WgpuError> {
    let op = "logprob_forward";
    let HeadOperands {
        hidden,
        lm_head,
        targets,
    } = head;
    b.store.locate(Operand::U32(targets))?;
    if d.rows == 0 {
        return Ok(());
    }
    let chunk = chunk_rows(b, op, d.vocab)?;
    let scratch = b.scratch(Scratch::Logits, chunk.min(d.rows) * d.vocab)?;
    for start in (0..d.rows).step_by(chunk) {
        let rows = chunk.min(d.rows - start);
        // logits[rows, V]
        let logits = scratch.slice(0, rows * d.vocab);
        let hidden_rows = hidden.slice(start * d.dim, rows * d.dim);
        matmul(
            b,
            logits,
            hidden_rows,
            lm_head,
            mm(rows, d.vocab, d.dim, false, true, false),
        )?;
        let grid = b.grid(op, rows)?;
        b.launch(
            ROWS,
            &[
                logits.into(),
                index_slice(targets, start, rows).into(),
                logp.slice(start, rows).into(),
                lse.slice(start, rows).into(),
            ],
            &[to_u32(op, "rows", rows)?, to_u32(op, "V", d.vocab)?],
            grid,
        )?;
    }
    Ok(())
}

/// Backward of sum_n weights[n] * logp[n]: with dlogits = w (onehot(target) - softmax),
/// dhidden[N, D] = dlogits · lm_head (overwritten; 0 on rows of weight 0) and
/// dlm_head[V, D] += dlogits^T · hidden (when given), chunk by chunk of rows in order.
pub(crate) fn logprob_backward(
    b: &mut WgpuBackend,
    dhidden: Tensor,
    dlm_head: Option<Tensor>,
    weights: Tensor,
    lse: Tensor,
    head: HeadOperands,
    d: HeadDims,
) -> Result<(), WgpuError> {
    let op = "logprob_backward";
    b.store.locate(Operand::U32(head.targets))?;
    if d.rows == 0 {
        return Ok(());
    }
    let chunk = chunk_rows(b, op, d.vocab)?;
    let scratch = b.scratch(Scratch::Logits, chunk.min(d.rows) * d.vocab)?;
    for start in (0..d.rows).step_by(chunk) {
        let rows = chunk.min(d.rows - start);
        // dlogits[rows, V], made in place from the logits.
        let dlogits = scratch.slice(0, rows * d.vocab);
        let hidden_rows = head.hidden.slice(start * d.dim, rows * d.dim);
        let shape = mm(rows, d.vocab, d.dim, false, true, false);
        matmul(b, dlogits, hidden_rows, head.lm_head, shape)?;
        let grid = b.grid_for(op, rows * d.vocab)?;
        b.launch(
            DLOGITS,
            &[
                dlogits.into(),
                index_slice(head.targets, start, rows).into(),
                weights.slice(start, rows).into(),
                lse.slice(start, rows).into(),
            ],
            &[to_u32(op, "rows", rows)?, to_u32(op, "V", d.vocab)?],
            grid,
        )?;
        let dhidden_rows = dhidden.slice(start * d.dim, rows * d.dim);
        let shape = mm(rows, d.dim, d.vocab, false, false, false);
        matmul(b, dhidden_rows, dlogits, head.lm_head, shape)?;
        if let Some(dlm_head) = dlm_head {
            let shape = mm(d.vocab, d.dim, rows, true, false, true);
            matmul(b, dlm_head, dlogits, hidden_rows, shape)?;
        }
    }
    Ok(())
}

/// out[B, V] = hidden[B, D] · lm_head[V, D]^T with B, V and D from `dims`.
pub(crate) fn logits(
    b: &mut WgpuBackend,
    out: Tensor,
    hidden: Tensor,
    lm_head: Tensor,
    dims: HeadDims,
) -> Result<(), WgpuError> {
    let HeadDims { rows, dim, vocab } = dims;
    matmul(
        b,
        out,
        hidden,
        lm_head,
        mm(rows, vocab, dim, false, true, false),
    )
}
