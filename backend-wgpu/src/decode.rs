//! Decoding against a KV cache: appending each sequence's new key/value row, and one
//! query per sequence attending to its cached rows, through the training forward
//! kernel with spans that point into the cache.
//!
//! Layouts: caches [B, T, KV*hd] (T = capacity), new k, v [B, KV*hd], q, out [B, H*hd].

use sage_transformer::contract::{to_u32, CacheSizes, DecodeSizes};
use sage_transformer::Tensor;

use crate::attention::{check_head_dim, kernel_params, FORWARD};
use crate::error::WgpuError;
use crate::pipelines::{Family, Kernel};
use crate::scratch::{IndexScratch, Scratch};
use crate::WgpuBackend;

const APPEND: Kernel = Kernel {
    family: Family::Attention,
    entry: "kv_cache_append",
    bindings: 5,
};

/// Writes k, v [B, KV*hd] into row lengths[b] (< capacity) of sequence b's caches
/// k_cache, v_cache [B, capacity, KV*hd].
pub(crate) fn kv_cache_append(
    b: &mut WgpuBackend,
    [k_cache, v_cache]: [Tensor; 2],
    k: Tensor,
    v: Tensor,
    lengths: &[u32],
    sizes: CacheSizes,
) -> Result<(), WgpuError> {
    let op = "kv_cache_append";
    let CacheSizes {
        batch,
        capacity,
        width: kv_dim,
    } = sizes;
    if k.len == 0 {
        return Ok(());
    }
    let rows = b.index_scratch(IndexScratch::CacheLengths, lengths)?;
    let grid = b.grid_for(op, k.len)?;
    b.launch(
        APPEND,
        &[
            k_cache.into(),
            v_cache.into(),
            k.into(),
            v.into(),
            rows.into(),
        ],
        &[
            to_u32(op, "B", batch)?,
            to_u32(op, "KV*hd", kv_dim)?,
            to_u32(op, "T", capacity)?,
        ],
        grid,
    )
}

/// out[B, H*hd]: query q[B, H*hd] of sequence b attends to rows 0..lengths[b] (at least
/// one, at most capacity) of its caches [B, capacity, KV*hd].
pub(crate) fn attention_decode(
    b: &mut WgpuBackend,
    out: Tensor,
    q: Tensor,
    [k_cache, v_cache]: [Tensor; 2],
    lengths: &[u32],
    sizes: DecodeSizes,
) -> Result<(), WgpuError> {
    let op = "attention_decode";
    let DecodeSizes { dims, cache } = sizes;
    check_head_dim(op, &dims)?;
    let CacheSizes {
        batch, capacity, ..
    } = cache;
    if batch == 0 {
        return Ok(());
    }
    // spans[B, 2] = (first cache row of sequence b, rows to attend).
    let mut spans = Vec::with_capacity(2 * batch);
    for (s, &length) in lengths.iter().enumerate() {
        spans.extend([to_u32(op, "B*T", s * capacity)?, length]);
    }
    let spans = b.index_scratch(IndexScratch::DecodeSpans, &spans)?;
    let lse = b.scratch(Scratch::DecodeLse, batch * dims.heads)?;
    let grid = b.grid(op, batch * dims.heads)?;
    b.launch(
        FORWARD,
        &[
            out.into(),
            lse.into(),
            q.into(),
            k_cache.into(),
            v_cache.into(),
            q.into(),
            lse.into(),
            lse.into(),
            spans.into(),
        ],
        &kernel_params(op, &dims, batch)?,
        grid,
    )
}
