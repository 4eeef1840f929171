//! Decoding against a KV cache: appending each sequence's new key/value row, and one
//! query per sequence attending to its cached rows.
//!
//! Layouts: caches [B, T, KV*hd] (T = capacity), new k, v [B, KV*hd], q, out [B, H*hd].

use rayon::prelude::*;
use sage_transformer::contract::{AttentionDims, CacheSizes, DecodeSizes};

use crate::elementwise::min_rows;
use crate::math;

/// Writes k, v [B, KV*hd] into row lengths[b] (< capacity) of sequence b's caches
/// k_cache, v_cache [B, capacity, KV*hd].
pub(crate) fn kv_cache_append(
    [k_cache, v_cache]: [&mut [f32]; 2],
    [k, v]: [&[f32]; 2],
    lengths: &[u32],
    sizes: CacheSizes,
) {
    let CacheSizes {
        capacity,
        width: kv_dim,
        ..
    } = sizes;
    for (b, &length) in lengths.iter().enumerate() {
        let row = (b * capacity + length as usize) * kv_dim;
        k_cache[row..row + kv_dim].copy_from_slice(&k[b * kv_dim..(b + 1) * kv_dim]);
        v_cache[row..row + kv_dim].copy_from_slice(&v[b * kv_dim..(b + 1) * kv_dim]);
    }
}

/// out[B, H*hd]: query q[B, H*hd] of sequence b attends to rows 0..lengths[b] (at least
/// one, at most capacity) of its caches [B, capacity, KV*hd]. Rayon tasks of whole
/// (sequence, head) pairs, enough of them per task to be worth handing to the pool.
pub(crate) fn attention_decode(
    out: &mut [f32],
    q: &[f32],
    [k_cache, v_cache]: [&[f32]; 2],
    lengths: &[u32],
    sizes: DecodeSizes,
) {
    let DecodeSizes { dims, cache } = sizes;
    let capacity = cache.capacity;
    let scale = dims.scale();
    let AttentionDims {
        heads,
        head_dim: hd,
        group,
        kv_width,
        ..
    } = dims;
    // A task attends one query head over its sequence's rows: about `longest * hd` work.
    let longest = lengths.iter().max().map_or(1, |&l| l as usize);
    out.par_chunks_mut(hd)
        .zip(q.par_chunks(hd))
        .enumerate()
        .with_min_len(min_rows(longest * hd))
        .for_each_init(Vec::new, |weights, (bh, (out_h, q_h))| {
            let (b, h) = (bh / heads, bh % heads);
            let length = lengths[b] as usize;
            let kv_row = |t: usize| (b * capacity + t) * kv_width + (h / group) * hd;
            weights.clear();
            weights.extend(
                (0..length).map(|t| scale * math::dot(q_h, &k_cache[kv_row(t)..kv_row(t) + hd])),
            );
            let max = math::max(weights);
            let sum = math::exp_sum_in_place(weights, max);
            out_h.fill(0.0);
            for (t, &w) in weights.iter().enumerate() {
                math::axpy(out_h, w / sum, &v_cache[kv_row(t)..kv_row(t) + hd]);
            }
        });
}
