//! Decoding against a KV cache (kernels in `kernels/decode.cu`): appending each
//! sequence's new key/value row, and one query per sequence attending to its cached
//! rows, one warp per (sequence, head) with an online softmax over tiles of keys. The
//! host's cache lengths are uploaded to a small device table each call.
//!
//! Layouts: caches [B, T, KV*hd] (T = capacity), new k, v [B, KV*hd], q, out [B, H*hd].

use sage_transformer::{AttentionShape, Tensor};

use crate::attention::dims;
use crate::error::CudaError;
use crate::launch::{blocks_for, Arg, THREADS};
use crate::scratch::IndexScratch;
use crate::CudaBackend;
use sage_transformer::contract::{expect_len, to_u32};

/// Writes k, v [B, KV*hd] into row lengths[b] (< capacity) of sequence b's caches
/// k_cache, v_cache [B, capacity, KV*hd].
#[allow(clippy::too_many_arguments)]
pub(crate) fn kv_cache_append(
    b: &mut CudaBackend,
    k_cache: Tensor,
    v_cache: Tensor,
    k: Tensor,
    v: Tensor,
    lengths: &[u32],
    capacity: usize,
    kv_dim: usize,
) -> Result<(), CudaError> {
    let op = "kv_cache_append";
    let batch = lengths.len();
    expect_len(op, "k", k.len, batch * kv_dim)?;
    expect_len(op, "v", v.len, batch * kv_dim)?;
    expect_len(op, "k_cache", k_cache.len, batch * capacity * kv_dim)?;
    expect_len(op, "v_cache", v_cache.len, batch * capacity * kv_dim)?;
    if let Some((s, &length)) = lengths
        .iter()
        .enumerate()
        .find(|(_, &l)| l as usize >= capacity)
    {
        return Err(CudaError::BadSequences(format!(
            "{op}: the cache of sequence {s} is full ({length} rows of {capacity})"
        )));
    }
    let pointers = [
        Arg::Ptr(b.store.address(k_cache)?),
        Arg::Ptr(b.store.address(v_cache)?),
        Arg::Ptr(b.store.address(k)?),
        Arg::Ptr(b.store.address(v)?),
    ];
    if k.len == 0 {
        return Ok(());
    }
    let rows = b
        .scratch
        .upload_indices(&b.gpu.stream, IndexScratch::Lengths, lengths)?;
    let mut args = pointers.to_vec();
    args.extend([
        Arg::Ptr(rows),
        Arg::U32(to_u32(op, "B", batch)?),
        Arg::U32(to_u32(op, "KV*hd", kv_dim)?),
        Arg::U32(to_u32(op, "T", capacity)?),
    ]);
    b.launch(op, (blocks_for(k.len as u64), 1), THREADS, &args)
}

/// out[B, H*hd]: query q[B, H*hd] of sequence b attends to rows 0..lengths[b] (at least
/// one, at most capacity) of its caches [B, capacity, KV*hd].
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_decode(
    b: &mut CudaBackend,
    out: Tensor,
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    lengths: &[u32],
    capacity: usize,
    shape: AttentionShape,
) -> Result<(), CudaError> {
    let op = "attention_decode";
    let dims = dims(op, shape)?;
    let batch = lengths.len();
    expect_len(op, "q", q.len, batch * dims.q_width)?;
    expect_len(op, "out", out.len, batch * dims.q_width)?;
    let cache = batch * capacity * dims.kv_width;
    expect_len(op, "k_cache", k_cache.len, cache)?;
    expect_len(op, "v_cache", v_cache.len, cache)?;
    if let Some((s, &length)) = lengths
        .iter()
        .enumerate()
        .find(|(_, &l)| l == 0 || l as usize > capacity)
    {
        return Err(CudaError::BadSequences(format!(
            "{op}: sequence {s} attends to {length} rows; need 1..={capacity}"
        )));
    }
    let pointers = [
        Arg::Ptr(b.store.address(out)?),
        Arg::Ptr(b.store.address(q)?),
        Arg::Ptr(b.store.address(k_cache)?),
        Arg::Ptr(b.store.address(v_cache)?),
    ];
    if batch == 0 {
        return Ok(());
    }
    let rows = b
        .scratch
        .upload_indices(&b.gpu.stream, IndexScratch::Lengths, lengths)?;
    let mut args = pointers.to_vec();
    args.extend([
        Arg::Ptr(rows),
        Arg::U32(to_u32(op, "T", capacity)?),
        Arg::U32(to_u32(op, "H", dims.heads)?),
        Arg::U32(to_u32(op, "group", dims.group)?),
        Arg::U32(to_u32(op, "hd", dims.head_dim)?),
        Arg::F32(1.0 / (dims.head_dim as f32).sqrt()),
    ]);
    let grid = (to_u32(op, "B", batch)?, dims.heads as u32);
    b.launch(op, grid, 32, &args)
}
