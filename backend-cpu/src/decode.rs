//! Decoding against a KV cache: appending each sequence's new key/value row, and one
//! query per sequence attending to its cached rows.
//!
//! Layouts: caches [B, T, KV*hd] (T = capacity), new k, v [B, KV*hd], q, out [B, H*hd].

use rayon::prelude::*;
use sage_transformer::AttentionShape;

use crate::attention::Dims;
use crate::elementwise::min_rows;
use sage_transformer::contract::expect_len;

use crate::error::CpuError;
use crate::math;

/// Writes k, v [B, KV*hd] into row lengths[b] (< capacity) of sequence b's caches
/// k_cache, v_cache [B, capacity, KV*hd].
#[allow(clippy::too_many_arguments)]
pub(crate) fn kv_cache_append(
    k_cache: &mut [f32],
    v_cache: &mut [f32],
    k: &[f32],
    v: &[f32],
    lengths: &[u32],
    capacity: usize,
    kv_dim: usize,
) -> Result<(), CpuError> {
    let op = "kv_cache_append";
    let batch = lengths.len();
    expect_len(op, "k", k.len(), batch * kv_dim)?;
    expect_len(op, "v", v.len(), batch * kv_dim)?;
    expect_len(op, "k_cache", k_cache.len(), batch * capacity * kv_dim)?;
    expect_len(op, "v_cache", v_cache.len(), batch * capacity * kv_dim)?;
    if let Some((b, &length)) = lengths
        .iter()
        .enumerate()
        .find(|(_, &l)| l as usize >= capacity)
    {
        return Err(CpuError::BadSequences(format!(
            "{op}: the cache of sequence {b} is full ({length} rows of {capacity})"
        )));
    }
    for (b, &length) in lengths.iter().enumerate() {
        let row = (b * capacity + length as usize) * kv_dim;
        k_cache[row..row + kv_dim].copy_from_slice(&k[b * kv_dim..(b + 1) * kv_dim]);
        v_cache[row..row + kv_dim].copy_from_slice(&v[b * kv_dim..(b + 1) * kv_dim]);
    }
    Ok(())
}

/// out[B, H*hd]: query q[B, H*hd] of sequence b attends to rows 0..lengths[b] (at least
/// one, at most capacity) of its caches [B, capacity, KV*hd]. Rayon tasks of whole
/// (sequence, head) pairs, enough of them per task to be worth handing to the pool.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_decode(
    out: &mut [f32],
    q: &[f32],
    k_cache: &[f32],
    v_cache: &[f32],
    lengths: &[u32],
    capacity: usize,
    shape: AttentionShape,
) -> Result<(), CpuError> {
    let op = "attention_decode";
    let dims = Dims::new(op, shape)?;
    let batch = lengths.len();
    expect_len(op, "q", q.len(), batch * dims.q_width)?;
    expect_len(op, "out", out.len(), batch * dims.q_width)?;
    expect_len(
        op,
        "k_cache",
        k_cache.len(),
        batch * capacity * dims.kv_width,
    )?;
    expect_len(
        op,
        "v_cache",
        v_cache.len(),
        batch * capacity * dims.kv_width,
    )?;
    if let Some((b, &length)) = lengths
        .iter()
        .enumerate()
        .find(|(_, &l)| l == 0 || l as usize > capacity)
    {
        return Err(CpuError::BadSequences(format!(
            "{op}: sequence {b} attends to {length} rows; need 1..={capacity}"
        )));
    }
    let Dims {
        heads,
        head_dim: hd,
        group,
        kv_width,
        scale,
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
    Ok(())
}
