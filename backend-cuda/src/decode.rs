//! Decoding against a KV cache (kernels in `kernels/decode.cu`): appending each
//! sequence's new key/value row, and one query per sequence attending to its cached
//! rows, one warp per (sequence, head) with an online softmax over tiles of keys. The
//! host's cache lengths are uploaded to a small device table each call.
//!
//! Layouts: caches [B, T, KV*hd] (T = capacity), new k, v [B, KV*hd], q, out [B, H*hd].

use sage_transformer::contract::{CacheSizes, DecodeSizes};
use sage_transformer::Tensor;

use crate::attention::check_head_limits;
use crate::error::CudaError;
use crate::launch::{blocks_for, Arg, THREADS};
use crate::scratch::IndexScratch;
use crate::CudaBackend;
use sage_transformer::contract::to_u32;

/// Writes k, v [B, KV*hd] into row lengths[b] (< capacity) of sequence b's caches
/// k_cache, v_cache [B, capacity, KV*hd].
pub(crate) fn kv_cache_append(
    b: &mut CudaBackend,
    [k_cache, v_cache]: [Tensor; 2],
    (k, v): (Tensor, Tensor),
    lengths: &[u32],
    sizes: CacheSizes,
) -> Result<(), CudaError> {
    let op = "kv_cache_append";
    let CacheSizes {
        batch,
        capacity,
        width: kv_dim,
    } = sizes;
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
pub(crate) fn attention_decode(
    b: &mut CudaBackend,
    (out, q): (Tensor, Tensor),
    [k_cache, v_cache]: [Tensor; 2],
    lengths: &[u32],
    sizes: DecodeSizes,
) -> Result<(), CudaError> {
    let op = "attention_decode";
    let DecodeSizes { dims, cache } = sizes;
    check_head_limits(op, &dims)?;
    let CacheSizes {
        batch, capacity, ..
    } = cache;
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
        Arg::F32(dims.scale()),
    ]);
    let grid = (to_u32(op, "B", batch)?, dims.heads as u32);
    b.launch(op, grid, 32, &args)
}
