//! Decoding against a KV cache (kernels in `kernels/decode.cu`): appending each
//! sequence's new key/value row, and one query per sequence attending to its cached
//! rows with an online softmax over tiles of keys: one warp per (sequence, head) in
//! [`Precision::F32`], and in [`Precision::Bf16`] (the fast path) split-KV blocks per
//! (sequence, key/value head, split of 256 rows) that stage each tile once for the
//! whole group of query heads, then a merge of the splits. The host's cache lengths go
//! to small device tables, uploaded only when they change (once per decoding step, not
//! once per layer).
//!
//! Layouts: caches [B, T, KV*hd] (T = capacity), new k, v [B, KV*hd], q, out [B, H*hd].

use sage_transformer::contract::{CacheSizes, DecodeSizes};
use sage_transformer::Tensor;

use crate::attention::check_head_limits;
use crate::error::CudaError;
use crate::launch::{blocks_for, Arg, THREADS};
use crate::matmul::Precision;
use crate::scratch::{IndexScratch, Scratch};
use crate::CudaBackend;

/// Cached rows per split of the split-KV kernel (SPLIT_KEYS in decode.cu).
const SPLIT_KEYS: usize = 256;
/// Threads per block of the split-KV kernel (SPLIT_THREADS).
const SPLIT_THREADS: u32 = 128;
/// Widest group of query heads per key/value head it holds (SPLIT_MAX_GROUP); wider
/// groups take the one-warp kernel.
const SPLIT_MAX_GROUP: usize = 16;
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
        .upload_indices_once(&b.gpu, IndexScratch::AppendRows, lengths)?;
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
        .upload_indices_once(&b.gpu, IndexScratch::AttendedRows, lengths)?;
    if b.precision == Precision::Bf16 && dims.group <= SPLIT_MAX_GROUP {
        let longest = lengths.iter().copied().max().unwrap_or(1) as usize;
        return split_kv(b, pointers, rows, longest.div_ceil(SPLIT_KEYS), sizes);
    }
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

/// The split-KV form of [`attention_decode`]: partial results per split of
/// [`SPLIT_KEYS`] rows into scratch, then their merge into `out`. `pointers` are out, q,
/// k_cache and v_cache; `rows` the device lengths.
fn split_kv(
    b: &mut CudaBackend,
    [out, q, k_cache, v_cache]: [Arg; 4],
    rows: u64,
    splits: usize,
    sizes: DecodeSizes,
) -> Result<(), CudaError> {
    let op = "attention_decode_split";
    let DecodeSizes { dims, cache } = sizes;
    let parts = cache.batch * dims.heads * splits;
    let partials = b.scratch_space(Scratch::DecodePartials, parts * (dims.head_dim + 2))?;
    let (part_acc, part_ml) = (partials, partials + 4 * (parts * dims.head_dim) as u64);
    let head_dim = Arg::U32(to_u32(op, "hd", dims.head_dim)?);
    let (heads, splits_arg) = (
        Arg::U32(to_u32(op, "H", dims.heads)?),
        Arg::U32(to_u32(op, "splits", splits)?),
    );
    b.launch(
        op,
        (
            to_u32(op, "B * splits", cache.batch * splits)?,
            to_u32(op, "KV", dims.kv_heads)?,
        ),
        SPLIT_THREADS,
        &[
            Arg::Ptr(part_acc),
            Arg::Ptr(part_ml),
            q,
            k_cache,
            v_cache,
            Arg::Ptr(rows),
            Arg::U32(to_u32(op, "T", cache.capacity)?),
            heads,
            Arg::U32(to_u32(op, "group", dims.group)?),
            head_dim,
            splits_arg,
            Arg::F32(dims.scale()),
        ],
    )?;
    b.launch(
        "attention_decode_combine",
        (to_u32(op, "B", cache.batch)?, to_u32(op, "H", dims.heads)?),
        32,
        &[
            out,
            Arg::Ptr(part_acc),
            Arg::Ptr(part_ml),
            heads,
            head_dim,
            splits_arg,
        ],
    )
}
