//! The output head: full logits for sampling, and the fused logits -> log-softmax ->
//! log-prob of the targets with its per-token weighted backward. The fused pair walks
//! the rows in chunks, so at most [`LOGITS_CHUNK`] logits exist at any time, and computes
//! each row the same way whatever rows share its batch or chunk.

use rayon::prelude::*;

use sage_transformer::contract::HeadDims;

use crate::error::CpuError;
use crate::math;
use crate::matmul::{gemm_parallel, gemm_parallel_packed, view, view_mut, Bf16Weight};
use crate::Precision;

/// Most logits (`f32`) the fused head holds at once: 64 MiB (341 rows of a 49,152-token
/// vocabulary; each chunk reads the whole head matrix again, so fewer chunks is faster).
const LOGITS_CHUNK: usize = 1 << 24;

/// The output head's operands, lent by the store: hidden[N, D], lm_head[V, D],
/// targets[N].
pub(crate) struct Head<'a> {
    pub(crate) hidden: &'a [f32],
    pub(crate) lm_head: &'a [f32],
    pub(crate) targets: &'a [u32],
}

/// The gradients of the output head's backward: dhidden[N, D] (overwritten) and
/// dlm_head[V, D] (accumulated).
pub(crate) struct HeadGrads<'a> {
    pub(crate) dhidden: &'a mut [f32],
    /// `None` for a frozen head: its gradient is not computed.
    pub(crate) dlm_head: Option<&'a mut [f32]>,
}

/// Fails unless every target is below the vocabulary (V).
fn check_targets(op: &'static str, targets: &[u32], vocab: usize) -> Result<(), CpuError> {
    match targets.iter().find(|&&t| t as usize >= vocab) {
        Some(&token) => Err(CpuError::TokenOutOfRange { op, token, vocab }),
        None => Ok(()),
    }
}

/// Rows of logits per chunk for a vocabulary of `vocab`.
fn chunk_rows(vocab: usize) -> usize {
    (LOGITS_CHUNK / vocab.max(1)).max(1)
}

/// logits[r, V] = hidden[r, D] · lm_head[V, D]^T for the `rows` rows of `hidden`, each
/// row computed the same way however many rows there are (packed kernels only), so that
/// a row's log-prob and gradient do not depend on its batch-mates.
fn project(
    logits: &mut [f32],
    hidden: &[f32],
    lm_head: &[f32],
    rows: usize,
    d: &HeadDims,
    precision: Precision,
) -> Result<(), CpuError> {
    gemm_parallel_packed(
        view_mut(logits, rows, d.vocab, d.vocab)?,
        view(hidden, rows, d.dim, d.dim)?,
        view(lm_head, d.vocab, d.dim, d.dim)?.reversed_axes(),
        precision,
    );
    Ok(())
}

/// logp[N] = logits[n, targets[n]] - lse[n] and lse[N] = log sum_j exp(logits[n, j]),
/// logits = hidden[N, D] · lm_head[V, D]^T, chunk by chunk of rows held in `scratch`
/// (kept by the caller between calls, so the chunk is not allocated anew each time).
pub(crate) fn logprob_forward(
    logp: &mut [f32],
    lse: &mut [f32],
    head: Head<'_>,
    d: HeadDims,
    scratch: &mut Vec<f32>,
    precision: Precision,
) -> Result<(), CpuError> {
    let Head {
        hidden,
        lm_head,
        targets,
    } = head;
    check_targets("logprob_forward", targets, d.vocab)?;
    let chunk = chunk_rows(d.vocab);
    // logits[chunk, V]
    scratch.resize(chunk.min(d.rows) * d.vocab, 0.0);
    for start in (0..d.rows).step_by(chunk) {
        let rows = chunk.min(d.rows - start);
        let logits = &mut scratch[..rows * d.vocab];
        project(
            logits,
            &hidden[start * d.dim..(start + rows) * d.dim],
            lm_head,
            rows,
            &d,
            precision,
        )?;
        logits
            .par_chunks_mut(d.vocab)
            .zip(logp[start..start + rows].par_iter_mut())
            .zip(lse[start..start + rows].par_iter_mut())
            .zip(targets[start..start + rows].par_iter())
            .for_each(|(((row, logp_n), lse_n), &target)| {
                let target_logit = row[target as usize];
                let max = math::max(row);
                *lse_n = max + math::exp_sum_in_place(row, max).ln();
                *logp_n = target_logit - *lse_n;
            });
    }
    Ok(())
}

/// Backward of sum_n weights[n] * logp[n]: with dlogits = w (onehot(target) - softmax),
/// dhidden[N, D] = dlogits · lm_head (overwritten; 0 on rows of weight 0) and
/// dlm_head[V, D] += dlogits^T · hidden (when given). Only rows of nonzero weight are computed,
/// gathered chunk by chunk; chunks are accumulated in order. The chunk's dlogits live
/// in `scratch`, kept by the caller between calls.
pub(crate) fn logprob_backward(
    grads: HeadGrads<'_>,
    weights: &[f32],
    lse: &[f32],
    head: Head<'_>,
    d: HeadDims,
    scratch: &mut Vec<f32>,
    precision: Precision,
) -> Result<(), CpuError> {
    let HeadGrads {
        dhidden,
        mut dlm_head,
    } = grads;
    let Head {
        hidden,
        lm_head,
        targets,
    } = head;
    check_targets("logprob_backward", targets, d.vocab)?;
    dhidden.fill(0.0);
    let active: Vec<usize> = (0..d.rows).filter(|&n| weights[n] != 0.0).collect();
    let chunk = chunk_rows(d.vocab).min(active.len());
    // hidden_chunk and dhidden_chunk [chunk, D]; dlogits [chunk, V] in scratch.
    let mut hidden_chunk = vec![0.0f32; chunk * d.dim];
    let mut dhidden_chunk = vec![0.0f32; chunk * d.dim];
    scratch.resize(chunk * d.vocab, 0.0);
    for rows_of_chunk in active.chunks(chunk.max(1)) {
        let rows = rows_of_chunk.len();
        let hidden_chunk = &mut hidden_chunk[..rows * d.dim];
        for (dst, &n) in hidden_chunk.chunks_exact_mut(d.dim).zip(rows_of_chunk) {
            dst.copy_from_slice(&hidden[n * d.dim..(n + 1) * d.dim]);
        }
        let dlogits = &mut scratch[..rows * d.vocab];
        project(dlogits, hidden_chunk, lm_head, rows, &d, precision)?;
        dlogits
            .par_chunks_mut(d.vocab)
            .zip(rows_of_chunk.par_iter())
            .for_each(|(row, &n)| {
                math::scaled_exp_in_place(row, lse[n], -weights[n]);
                row[targets[n] as usize] += weights[n];
            });
        let dlogits = view(dlogits, rows, d.vocab, d.vocab)?;
        let dhidden_chunk = &mut dhidden_chunk[..rows * d.dim];
        gemm_parallel(
            view_mut(dhidden_chunk, rows, d.dim, d.dim)?,
            dlogits,
            view(lm_head, d.vocab, d.dim, d.dim)?,
            (1.0, 0.0),
            precision,
            None,
        );
        for (src, &n) in dhidden_chunk.chunks_exact(d.dim).zip(rows_of_chunk) {
            dhidden[n * d.dim..(n + 1) * d.dim].copy_from_slice(src);
        }
        if let Some(dlm_head) = dlm_head.as_deref_mut() {
            gemm_parallel(
                view_mut(dlm_head, d.vocab, d.dim, d.dim)?,
                dlogits.t(),
                view(hidden_chunk, rows, d.dim, d.dim)?,
                (1.0, 1.0),
                precision,
                None,
            );
        }
    }
    Ok(())
}

/// out[B, V] = hidden[B, D] · lm_head[V, D]^T; `lm_head_bf16`, the head's bf16 copy where
/// it has one, read in its place by the skinny products of [`Precision::Bf16`].
pub(crate) fn logits(
    out: &mut [f32],
    hidden: &[f32],
    lm_head: &[f32],
    dims: HeadDims,
    precision: Precision,
    lm_head_bf16: Option<&[u16]>,
) -> Result<(), CpuError> {
    let HeadDims { rows, dim, vocab } = dims;
    let lm_head_bf16 = lm_head_bf16.map(|bits| Bf16Weight { bits, k: dim });
    // Sampling's few rows may skip packing: no gradient depends on these logits.
    gemm_parallel(
        view_mut(out, rows, vocab, vocab)?,
        view(hidden, rows, dim, dim)?,
        view(lm_head, vocab, dim, dim)?.reversed_axes(),
        (1.0, 0.0),
        precision,
        lm_head_bf16,
    );
    Ok(())
}
