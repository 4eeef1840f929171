//! Causal grouped-query attention for training: forward and backward over packed
//! sequences, flash-style (one workgroup per query row and head walks its keys in
//! blocks with an online softmax; the backward pass recomputes probabilities from the
//! saved log-sum-exp, with one workgroup per key row and key/value head for dk and dv,
//! so every output has one writer). Decoding against a KV cache is in `decode`.
//!
//! Query head h reads key/value head h / (H / KV). Layouts: q, out, dq [N, H*hd];
//! k, v, dk, dv [N, KV*hd]; lse [N, H].

use sage_transformer::contract::AttentionDims;
use sage_transformer::{AttentionShape, Indices, Tensor};

use crate::error::WgpuError;
use crate::pipelines::{Family, Kernel};
use crate::scratch::{IndexScratch, Scratch};
use crate::store::index_slice;
use crate::WgpuBackend;
use sage_transformer::contract::{expect_len, to_u32};

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

/// The sizes of one attention call, checked: the contract's [`AttentionDims`], and
/// heads no wider than [`MAX_HEAD_DIM`].
pub(crate) fn dims(op: &str, shape: AttentionShape) -> Result<AttentionDims, WgpuError> {
    let dims = AttentionDims::new(op, shape)?;
    if dims.head_dim > MAX_HEAD_DIM {
        return Err(WgpuError::TooLarge(format!(
            "{op}: heads of width {}; the wgpu kernels hold at most {MAX_HEAD_DIM}",
            dims.head_dim
        )));
    }
    Ok(dims)
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
        (1.0 / (dims.head_dim as f32).sqrt()).to_bits(),
    ])
}

/// Tokens in the batch (the last start) after checking that `seq_starts` begins at 0
/// and never decreases.
fn packed_tokens(op: &str, seq_starts: &[u32]) -> Result<usize, WgpuError> {
    let ordered = seq_starts.windows(2).all(|w| w[0] <= w[1]);
    match (seq_starts.first(), seq_starts.last()) {
        (Some(0), Some(&last)) if ordered => Ok(last as usize),
        _ => Err(WgpuError::BadSequences(format!(
            "{op}: seq_starts must start at 0 and never decrease, got {seq_starts:?}"
        ))),
    }
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
    shape: AttentionShape,
) -> Result<(), WgpuError> {
    let op = "attention_forward";
    let dims = dims(op, shape)?;
    let n = packed_tokens(op, seq_starts)?;
    expect_len(op, "q", q.len, n * dims.q_width)?;
    expect_len(op, "k", k.len, n * dims.kv_width)?;
    expect_len(op, "v", v.len, n * dims.kv_width)?;
    expect_len(op, "out", out.len, n * dims.q_width)?;
    expect_len(op, "lse", lse.len, n * dims.heads)?;
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

/// The gradients [`attention_backward`] writes (all overwritten).
pub(crate) struct Grads {
    /// [N, H*hd].
    pub(crate) dq: Tensor,
    /// [N, KV*hd].
    pub(crate) dk: Tensor,
    /// [N, KV*hd].
    pub(crate) dv: Tensor,
}

/// What [`attention_backward`] reads: the output gradient and the forward's tensors.
pub(crate) struct Saved {
    /// [N, H*hd].
    pub(crate) dout: Tensor,
    /// [N, H*hd].
    pub(crate) q: Tensor,
    /// [N, KV*hd].
    pub(crate) k: Tensor,
    /// [N, KV*hd].
    pub(crate) v: Tensor,
    /// [N, H*hd].
    pub(crate) out: Tensor,
    /// [N, H].
    pub(crate) lse: Tensor,
}

/// dq, dk, dv of [`attention_forward`]: delta[N, H] = rowwise dout·out per head, then
/// the query gradient and the key/value gradient kernels.
pub(crate) fn attention_backward(
    b: &mut WgpuBackend,
    grads: Grads,
    saved: Saved,
    seq_starts: &[u32],
    shape: AttentionShape,
) -> Result<(), WgpuError> {
    let op = "attention_backward";
    let dims = dims(op, shape)?;
    let n = packed_tokens(op, seq_starts)?;
    let Grads { dq, dk, dv } = grads;
    let Saved {
        dout,
        q,
        k,
        v,
        out,
        lse,
    } = saved;
    for (name, len) in [
        ("q", q.len),
        ("out", out.len),
        ("dout", dout.len),
        ("dq", dq.len),
    ] {
        expect_len(op, name, len, n * dims.q_width)?;
    }
    for (name, len) in [("k", k.len), ("v", v.len), ("dk", dk.len), ("dv", dv.len)] {
        expect_len(op, name, len, n * dims.kv_width)?;
    }
    expect_len(op, "lse", lse.len, n * dims.heads)?;
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
