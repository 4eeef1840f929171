//! Causal grouped-query attention for training over packed sequences, flash-style
//! (kernels in `kernels/attention.cu`): the forward pass walks keys in tiles with an
//! online softmax and saves the log-sum-exp; the backward pass computes
//! delta = rowsum(dout * out), then dq from query blocks and dk, dv from key blocks,
//! recomputing the probabilities from the saved log-sum-exp, so every output element
//! has one writer. Decoding against a KV cache is in `decode`.
//!
//! Query head h reads key/value head h / (H / KV). Layouts: q, out, dq [N, H*hd];
//! k, v, dk, dv [N, KV*hd]; lse [N, H].

use sage_transformer::contract::AttentionDims;
use sage_transformer::{AttentionShape, Tensor};

use crate::error::CudaError;
use crate::launch::Arg;
use crate::scratch::{IndexScratch, Scratch};
use crate::CudaBackend;
use sage_transformer::contract::{expect_len, to_u32};

/// Widest head the kernels hold in shared memory (MAX_HEAD_DIM in attention.cu and
/// decode.cu).
pub(crate) const MAX_HEAD_DIM: usize = 128;
/// Query rows per block of the forward kernel (FORWARD_ROWS in attention.cu).
const FORWARD_ROWS: usize = 16;
/// Query or key rows per block of the backward kernels (BACKWARD_ROWS).
const BACKWARD_ROWS: usize = 8;
/// Threads per block of the attention kernels (ATTN_THREADS): 4 warps.
const ATTENTION_THREADS: u32 = 128;
/// (row, head) tasks per block of the delta kernel: one per warp.
const DELTA_TASKS: usize = 4;

/// The sizes of one attention call, checked: the contract's [`AttentionDims`], and
/// heads no wider than [`MAX_HEAD_DIM`].
pub(crate) fn dims(op: &str, shape: AttentionShape) -> Result<AttentionDims, CudaError> {
    let dims = AttentionDims::new(op, shape)?;
    if dims.head_dim > MAX_HEAD_DIM {
        return Err(CudaError::TooLarge(format!(
            "{op}: heads of width {}; the CUDA kernels hold at most {MAX_HEAD_DIM}",
            dims.head_dim
        )));
    }
    if dims.heads > 65_535 {
        return Err(CudaError::TooLarge(format!(
            "{op}: {} heads exceed the grid's second dimension",
            dims.heads
        )));
    }
    Ok(dims)
}

/// The sizes every attention kernel takes after its pointers: rows, H, group, hd,
/// scale.
fn kernel_args(op: &str, dims: &AttentionDims, rows: usize) -> Result<[Arg; 5], CudaError> {
    Ok([
        Arg::U32(to_u32(op, "N", rows)?),
        Arg::U32(to_u32(op, "H", dims.heads)?),
        Arg::U32(to_u32(op, "group", dims.group)?),
        Arg::U32(to_u32(op, "hd", dims.head_dim)?),
        Arg::F32(1.0 / (dims.head_dim as f32).sqrt()),
    ])
}

/// Tokens in the batch (the last start) after checking that `seq_starts` begins at 0
/// and never decreases.
fn packed_tokens(op: &str, seq_starts: &[u32]) -> Result<usize, CudaError> {
    let ordered = seq_starts.windows(2).all(|w| w[0] <= w[1]);
    match (seq_starts.first(), seq_starts.last()) {
        (Some(0), Some(&last)) if ordered => Ok(last as usize),
        _ => Err(CudaError::BadSequences(format!(
            "{op}: seq_starts must start at 0 and never decrease, got {seq_starts:?}"
        ))),
    }
}

/// The device address of spans[N, 2] = (start, end) of each row's sequence, uploaded
/// when `seq_starts` changes.
fn spans(b: &mut CudaBackend, seq_starts: &[u32], n: usize) -> Result<u64, CudaError> {
    if b.scratch.spans_of == seq_starts {
        return b.index_scratch_space(IndexScratch::Spans, 2 * n);
    }
    let mut spans = Vec::with_capacity(2 * n);
    for w in seq_starts.windows(2) {
        for _ in w[0]..w[1] {
            spans.extend([w[0], w[1]]);
        }
    }
    let address = b
        .scratch
        .upload_indices(&b.gpu.stream, IndexScratch::Spans, &spans)?;
    b.scratch.spans_of = seq_starts.to_vec();
    Ok(address)
}

/// Blocks covering `rows` rows, `per_block` at a time.
fn row_blocks(op: &str, rows: usize, per_block: usize) -> Result<u32, CudaError> {
    Ok(to_u32(op, "row blocks", rows.div_ceil(per_block))?)
}

/// out[N, H*hd] and lse[N, H] of causal attention of q over k, v within each sequence
/// of `seq_starts`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_forward(
    b: &mut CudaBackend,
    out: Tensor,
    lse: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    seq_starts: &[u32],
    shape: AttentionShape,
) -> Result<(), CudaError> {
    let op = "attention_forward";
    let dims = dims(op, shape)?;
    let n = packed_tokens(op, seq_starts)?;
    expect_len(op, "q", q.len, n * dims.q_width)?;
    expect_len(op, "k", k.len, n * dims.kv_width)?;
    expect_len(op, "v", v.len, n * dims.kv_width)?;
    expect_len(op, "out", out.len, n * dims.q_width)?;
    expect_len(op, "lse", lse.len, n * dims.heads)?;
    let pointers = [
        Arg::Ptr(b.store.address(out)?),
        Arg::Ptr(b.store.address(lse)?),
        Arg::Ptr(b.store.address(q)?),
        Arg::Ptr(b.store.address(k)?),
        Arg::Ptr(b.store.address(v)?),
    ];
    if n == 0 {
        return Ok(());
    }
    let spans = spans(b, seq_starts, n)?;
    let mut args = pointers.to_vec();
    args.push(Arg::Ptr(spans));
    args.extend(kernel_args(op, &dims, n)?);
    let grid = (row_blocks(op, n, FORWARD_ROWS)?, dims.heads as u32);
    b.launch(op, grid, ATTENTION_THREADS, &args)
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

/// dq, dk, dv of [`attention_forward`]: delta[N, H], then the query gradient and the
/// key/value gradient kernels.
pub(crate) fn attention_backward(
    b: &mut CudaBackend,
    grads: Grads,
    saved: Saved,
    seq_starts: &[u32],
    shape: AttentionShape,
) -> Result<(), CudaError> {
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
    let a = |t: Tensor| b.store.address(t);
    let (dq, dk, dv, dout, q, k, v, out, lse) = (
        a(dq)?,
        a(dk)?,
        a(dv)?,
        a(dout)?,
        a(q)?,
        a(k)?,
        a(v)?,
        a(out)?,
        a(lse)?,
    );
    if n == 0 {
        return Ok(());
    }
    let spans = spans(b, seq_starts, n)?;
    let delta = b.scratch_space(Scratch::Delta, n * dims.heads)?;
    let tasks = n * dims.heads;
    b.launch(
        "attention_delta",
        (to_u32(op, "delta blocks", tasks.div_ceil(DELTA_TASKS))?, 1),
        ATTENTION_THREADS,
        &[
            Arg::Ptr(delta),
            Arg::Ptr(dout),
            Arg::Ptr(out),
            Arg::U32(to_u32(op, "N", n)?),
            Arg::U32(to_u32(op, "H", dims.heads)?),
            Arg::U32(to_u32(op, "hd", dims.head_dim)?),
        ],
    )?;
    let sizes = kernel_args(op, &dims, n)?;
    let mut args = vec![
        Arg::Ptr(dq),
        Arg::Ptr(q),
        Arg::Ptr(k),
        Arg::Ptr(v),
        Arg::Ptr(dout),
        Arg::Ptr(lse),
        Arg::Ptr(delta),
        Arg::Ptr(spans),
    ];
    args.extend(sizes);
    let blocks = row_blocks(op, n, BACKWARD_ROWS)?;
    b.launch(
        "attention_backward_dq",
        (blocks, dims.heads as u32),
        ATTENTION_THREADS,
        &args,
    )?;
    let mut args = vec![
        Arg::Ptr(dk),
        Arg::Ptr(dv),
        Arg::Ptr(q),
        Arg::Ptr(k),
        Arg::Ptr(v),
        Arg::Ptr(dout),
        Arg::Ptr(lse),
        Arg::Ptr(delta),
        Arg::Ptr(spans),
    ];
    args.extend(sizes);
    b.launch(
        "attention_backward_dkv",
        (blocks, dims.kv_heads as u32),
        ATTENTION_THREADS,
        &args,
    )
}
