//! Decoding against a KV cache (kernels in `kernels/decode.cu`): appending each
//! sequence's new key/value row, and one query per sequence attending to its cached
//! rows with an online softmax over tiles of keys: one warp per (sequence, head) in
//! [`Precision::F32`], and in [`Precision::Bf16`] (the fast path) split-KV blocks per
//! (sequence, key/value head, split of 256 rows) that stage each tile once for the
//! whole group of query heads, then a merge of the splits. The host's cache lengths go
//! to small device tables, uploaded only when they change (once per decoding step, not
//! once per layer). A cache allocated in the bf16 mode holds bf16 keys and values
//! (`Kernels::alloc_kv_cache`): each kernel has a `_bf16` form that rounds the new rows
//! as it appends them and reads the cached ones as bf16; the arithmetic stays f32.
//!
//! Layouts: caches [B, T, KV*hd] (T = capacity), new k, v [B, KV*hd], q, out [B, H*hd].

use sage_transformer::contract::{CacheSizes, DecodeSizes};
use sage_transformer::{ContractError, Tensor};

use crate::attention::check_head_limits;
use crate::error::CudaError;
use crate::launch::{blocks_for, kernel_for, Arg, THREADS};
use crate::matmul::{copy_out, Precision};
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
    let ([k_cache, v_cache], bf16) = cache_pair(b, op, [k_cache, v_cache])?;
    let pointers = [
        Arg::Ptr(k_cache),
        Arg::Ptr(v_cache),
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
    let name = kernel_for(bf16, op, "kv_cache_append_bf16");
    b.launch(name, (blocks_for(k.len as u64), 1), THREADS, &args)
}

/// The addresses of a key and a value cache, and whether both hold bf16 (they must hold
/// their elements the same way, or the call is refused).
pub(crate) fn cache_pair(
    b: &CudaBackend,
    op: &str,
    caches: [Tensor; 2],
) -> Result<([u64; 2], bool), CudaError> {
    let (k_at, k_bf16) = b.store.cache_address(caches[0])?;
    let (v_at, v_bf16) = b.store.cache_address(caches[1])?;
    if k_bf16 != v_bf16 {
        let held = |bf16| if bf16 { "bf16" } else { "f32" };
        return Err(ContractError::BadArgument(format!(
            "{op}: the key cache holds {} elements and the value cache {}; both must come \
             from `alloc_kv_cache` on one backend",
            held(k_bf16),
            held(v_bf16)
        ))
        .into());
    }
    Ok(([k_at, v_at], k_bf16))
}

/// out[B, H*hd]: query q[B, H*hd] of sequence b attends to rows 0..lengths[b] (at least
/// one, at most capacity) of its caches [B, capacity, KV*hd]; out's bf16 copy too where
/// GEMMs read it ([`copy_out`]: the output projection's input).
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
    let ([k_cache, v_cache], bf16) = cache_pair(b, op, [k_cache, v_cache])?;
    let (out_at, q) = (b.store.address(out)?, b.store.address(q)?);
    if batch == 0 {
        return Ok(());
    }
    let rows = b
        .scratch
        .upload_indices_once(&b.gpu, IndexScratch::AttendedRows, lengths)?;
    let pointers = [
        Arg::Ptr(out_at),
        Arg::Ptr(copy_out(b, out)?),
        Arg::Ptr(q),
        Arg::Ptr(k_cache),
        Arg::Ptr(v_cache),
    ];
    if b.precision == Precision::Bf16 && dims.group <= SPLIT_MAX_GROUP {
        let longest = lengths.iter().copied().max().unwrap_or(1) as usize;
        let splits = longest.div_ceil(SPLIT_KEYS);
        return split_kv(b, (pointers, bf16), rows, splits, sizes);
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
    b.launch(
        kernel_for(bf16, op, "attention_decode_bf16"),
        grid,
        32,
        &args,
    )
}

/// The split-KV form of [`attention_decode`]: partial results per split of
/// [`SPLIT_KEYS`] rows into scratch, then their merge into `out`. `pointers` are out,
/// out's bf16 copy (or 0), q, k_cache and v_cache, with whether the caches hold bf16;
/// `rows` the device lengths.
fn split_kv(
    b: &mut CudaBackend,
    ([out, out_copy, q, k_cache, v_cache], bf16): ([Arg; 5], bool),
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
        kernel_for(bf16, op, "attention_decode_split_bf16"),
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
            out_copy,
            Arg::Ptr(part_acc),
            Arg::Ptr(part_ml),
            heads,
            head_dim,
            splits_arg,
        ],
    )
}
