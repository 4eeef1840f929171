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
/// one, at most capacity) of its caches [B, capacity, KV*hd].
///
/// A rayon task attends some of one sequence's key/value heads with all their query
/// heads, reading each cached row once for all of them: all its key/value heads where
/// there are sequences enough to keep every thread busy (so a task walks its cache rows
/// from end to end), one each where there are not. Each head's result is the same either
/// way.
pub(crate) fn attention_decode(
    out: &mut [f32],
    q: &[f32],
    [k_cache, v_cache]: [&[f32]; 2],
    lengths: &[u32],
    sizes: DecodeSizes,
) {
    let DecodeSizes { dims, cache } = sizes;
    let capacity = cache.capacity;
    let AttentionDims {
        kv_heads,
        head_dim: hd,
        group,
        kv_width,
        ..
    } = dims;
    let kv_per_task = if lengths.len() >= 2 * rayon::current_num_threads() {
        kv_heads
    } else {
        1
    };
    // The query heads of a key/value head, and the key/value heads of a sequence, are
    // adjacent in q and out.
    let task_width = kv_per_task * group * hd;
    let tasks_per_sequence = kv_heads / kv_per_task;
    // A task's work is about `longest * task_width`.
    let longest = lengths.iter().max().map_or(1, |&l| l as usize);
    out.par_chunks_mut(task_width)
        .zip(q.par_chunks(task_width))
        .enumerate()
        .with_min_len(min_rows(longest * task_width))
        .for_each_init(Scratch::default, |scratch, (task, (out, q))| {
            let (b, part) = (task / tasks_per_sequence, task % tasks_per_sequence);
            let first = b * capacity * kv_width + part * kv_per_task * hd;
            let length = lengths[b] as usize;
            math::vectorized(HeadsAttention {
                out,
                q,
                keys: &k_cache[first..],
                values: &v_cache[first..],
                row_stride: kv_width,
                scratch,
                length,
                dims: (kv_per_task, group, hd),
                scale: dims.scale(),
            });
        });
}

/// Some of one sequence's key/value heads, with their query heads, attending to the
/// sequence's cached rows, as a vectorised operation. Each query head's scores, softmax
/// and weighted sum are computed as that head alone would: the same sums in the same
/// order.
struct HeadsAttention<'a> {
    /// [kv, group, hd]
    out: &'a mut [f32],
    /// [kv, group, hd]
    q: &'a [f32],
    /// The cached keys from the first key/value head's first row on: row t of key/value
    /// head g starts at `t * row_stride + g * hd`.
    keys: &'a [f32],
    /// The cached values, as `keys`.
    values: &'a [f32],
    /// Elements from one cached row to the next (KV * hd).
    row_stride: usize,
    /// Kept by the task between calls.
    scratch: &'a mut Scratch,
    /// Cached rows attended.
    length: usize,
    /// Key/value heads, query heads per key/value head, head width.
    dims: (usize, usize, usize),
    scale: f32,
}

/// A decoding attention task's buffers, kept between its calls.
#[derive(Default)]
struct Scratch {
    /// [kv * group, length]: scores, then unnormalised weights.
    weights: Vec<f32>,
    /// [kv * group]: each head's sum of weights.
    sums: Vec<f32>,
}

impl pulp::WithSimd for HeadsAttention<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        let HeadsAttention {
            out,
            q,
            keys,
            values,
            row_stride,
            scratch: Scratch { weights, sums },
            length,
            dims: (kv, group, hd),
            scale,
        } = self;
        // The hd values of key/value head g in cached row t.
        let at = |t: usize, g: usize| t * row_stride + g * hd..t * row_stride + (g + 1) * hd;
        // weights[h, t], h = g * group + (query head within the group)
        weights.clear();
        weights.resize(kv * group * length, 0.0);
        for t in 0..length {
            for (g, q_g) in q.chunks_exact(group * hd).enumerate() {
                let key = &keys[at(t, g)];
                for (r, q_h) in q_g.chunks_exact(hd).enumerate() {
                    weights[(g * group + r) * length + t] = scale * dot(simd, q_h, key);
                }
            }
        }
        sums.clear();
        sums.extend(weights.chunks_exact_mut(length).map(|w| {
            let max = math::max(w);
            math::exp_sum_in_place(w, max)
        }));
        out.fill(0.0);
        for t in 0..length {
            for (g, out_g) in out.chunks_exact_mut(group * hd).enumerate() {
                let value = &values[at(t, g)];
                for (r, out_h) in out_g.chunks_exact_mut(hd).enumerate() {
                    let h = g * group + r;
                    math::axpy(out_h, weights[h * length + t] / sums[h], value);
                }
            }
        }
    }
}

/// `sum_i a[i] * b[i]` over the common length: a vector accumulator of fused multiply-adds,
/// its sum, then the scalar tail, in that order.
#[inline(always)]
fn dot<S: pulp::Simd>(simd: S, a: &[f32], b: &[f32]) -> f32 {
    let len = a.len().min(b.len());
    let ((a_body, a_tail), (b_body, b_tail)) =
        (S::as_simd_f32s(&a[..len]), S::as_simd_f32s(&b[..len]));
    let acc = a_body
        .iter()
        .zip(b_body)
        .fold(simd.splat_f32s(0.0), |acc, (&x, &y)| {
            simd.mul_add_f32s(x, y, acc)
        });
    let tail = a_tail.iter().zip(b_tail);
    tail.fold(simd.reduce_sum_f32s(acc), |total, (x, y)| total + x * y)
}
