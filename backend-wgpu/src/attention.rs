//! Causal grouped-query attention for training: forward and backward over packed
//! sequences, flash-style (one workgroup per query row and head walks its keys in
//! blocks with an online softmax; the backward pass recomputes probabilities from the
//! saved log-sum-exp, with one workgroup per key row and key/value head for dk and dv,
//! so every output has one writer). Decoding against a KV cache is in `decode`.
//!
//! Query head h reads key/value head h / (H / KV). Layouts: q, out, dq [N, H*hd];
//! k, v, dk, dv [N, KV*hd]; lse [N, H].

use sage_transformer::contract::{to_u32, AttentionDims, AttentionSizes};
use sage_transformer::device::{AttentionGrads, AttentionSaved};
use sage_transformer::{Indices, Tensor};

use crate::error::WgpuError;
use crate::pipelines::{Family, Kernel};
use crate::scratch::{IndexScratch, Scratch};
use crate::store::index_slice;
use crate::WgpuBackend;

pub(crate) const FORWARD: Kernel = Kernel {
    family: Family::Attention,
    entry: "attention_forward",
    bindings: 9,
};
const DELTA: Kernel = Kernel {
    family: Family::Attention,
    entry: "attention_delta",
    bindings: 3,
};
const BACKWARD_DQ: Kernel = Kernel {
    family: Family::Attention,
    entry: "attention_backward_dq",
    bindings: 9,
};
const BACKWARD_DKV: Kernel = Kernel {
    family: Family::Attention,
    entry: "attention_backward_dkv",
    bindings: 9,
};

/// Widest head the kernels hold in workgroup memory (MAX_HEAD_DIM in attention.wgsl).
pub(crate) const MAX_HEAD_DIM: usize = 256;

/// Fails unless the heads of `dims` (checked by the contract) are no wider than
/// [`MAX_HEAD_DIM`].
pub(crate) fn check_head_dim(op: &str, dims: &AttentionDims) -> Result<(), WgpuError> {
    if dims.head_dim > MAX_HEAD_DIM {
        return Err(WgpuError::TooLarge(format!(
            "{op}: heads of width {}; the wgpu kernels hold at most {MAX_HEAD_DIM}",
            dims.head_dim
        )));
    }
    Ok(())
}

/// The attention kernels' sizes after the rows: H, group, hd, scale.
pub(crate) fn kernel_params(
    op: &str,
    dims: &AttentionDims,
    rows: usize,
) -> Result<[u32; 5], WgpuError> {
    Ok([
        to_u32(op, "rows", rows)?,
        to_u32(op, "H", dims.heads)?,
        to_u32(op, "group", dims.group)?,
        to_u32(op, "hd", dims.head_dim)?,
        dims.scale().to_bits(),
    ])
}

/// The spans of a packed batch [2, N, 2]: for each query row the keys it sees (its
/// sequence's start and its causal prefix length), then for each key row the queries
/// that see it (itself to the end of its sequence). Uploaded when `seq_starts` changes.
fn training_spans(b: &mut WgpuBackend, seq_starts: &[u32], n: usize) -> Result<Indices, WgpuError> {
    if b.scratch.spans_of == seq_starts {
        if let Some(spans) = b.cached_indices(IndexScratch::TrainingSpans, 4 * n) {
            return Ok(spans);
        }
    }
    let mut keys = Vec::with_capacity(2 * n);
    let mut queries = Vec::with_capacity(2 * n);
    for w in seq_starts.windows(2) {
        for row in w[0]..w[1] {
            keys.extend([w[0], row - w[0] + 1]);
            queries.extend([row, w[1] - row]);
        }
    }
    keys.extend(queries);
    let spans = b.index_scratch(IndexScratch::TrainingSpans, &keys)?;
    b.scratch.spans_of = seq_starts.to_vec();
    Ok(spans)
}

/// out[N, H*hd] and lse[N, H] of causal attention of q over k, v within each sequence
/// of `seq_starts`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_forward(
    b: &mut WgpuBackend,
    out: Tensor,
    lse: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    seq_starts: &[u32],
    sizes: AttentionSizes,
) -> Result<(), WgpuError> {
    let op = "attention_forward";
    let AttentionSizes { tokens: n, dims } = sizes;
    check_head_dim(op, &dims)?;
    if n == 0 {
        return Ok(());
    }
    let spans = training_spans(b, seq_starts, n)?;
    let grid = b.grid(op, n * dims.heads)?;
    b.launch(
        FORWARD,
        &[
            out.into(),
            lse.into(),
            q.into(),
            k.into(),
            v.into(),
            q.into(),
            lse.into(),
            lse.into(),
            index_slice(spans, 0, 2 * n).into(),
        ],
        &kernel_params(op, &dims, n)?,
        grid,
    )
}

/// dq, dk, dv of [`attention_forward`]: delta[N, H] = rowwise dout·out per head, then
/// the query gradient and the key/value gradient kernels.
pub(crate) fn attention_backward(
    b: &mut WgpuBackend,
    grads: AttentionGrads,
    saved: AttentionSaved,
    seq_starts: &[u32],
    sizes: AttentionSizes,
) -> Result<(), WgpuError> {
    let op = "attention_backward";
    let AttentionSizes { tokens: n, dims } = sizes;
    check_head_dim(op, &dims)?;
    let AttentionGrads { dq, dk, dv } = grads;
    let AttentionSaved {
        dout,
        q,
        k,
        v,
        out,
        lse,
    } = saved;
    if n == 0 {
        return Ok(());
    }
    let spans = training_spans(b, seq_starts, n)?;
    let delta = b.scratch(Scratch::Delta, n * dims.heads)?;
    let grid = b.grid_for(op, n * dims.heads)?;
    b.launch(
        DELTA,
        &[delta.into(), dout.into(), out.into()],
        &[
            to_u32(op, "N", n)?,
            to_u32(op, "H", dims.heads)?,
            to_u32(op, "hd", dims.head_dim)?,
        ],
        grid,
    )?;
    let grid = b.grid(op, n * dims.heads)?;
    b.launch(
        BACKWARD_DQ,
        &[
            dq.into(),
            dq.into(),
            q.into(),
            k.into(),
            v.into(),
            dout.into(),
            lse.into(),
            delta.into(),
            index_slice(spans, 0, 2 * n).into(),
        ],
        &kernel_params(op, &dims, n)?,
        grid,
    )?;
    let grid = b.grid(op, n * (dims.heads / dims.group))?;
    b.launch(
        BACKWARD_DKV,
        &[
            dk.into(),
            dv.into(),
            q.into(),
            k.into(),
            v.into(),
            dout.into(),
            lse.into(),
            delta.into(),
            index_slice(spans, 2 * n, 2 * n).into(),
        ],
        &kernel_params(op, &dims, n)?,
        grid,
    )
}
