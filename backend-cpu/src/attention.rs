//! Causal grouped-query attention: training forward and backward over packed sequences,
//! flash-style (scores live one tile of query rows at a time, never as a whole
//! `[T, T]` matrix; the backward pass recomputes probabilities from the saved
//! log-sum-exp), and decoding against a KV cache.
//!
//! Query head h reads key/value head h / (H / KV). Layouts: q, out, dq [N, H*hd];
//! k, v, dk, dv [N, KV*hd]; lse [N, H]; caches [B, T, KV*hd].

use rayon::prelude::*;
use sage_core::transformer::AttentionShape;

use crate::error::{expect_len, CpuError};
use crate::math;
use crate::matmul::{gemm, view, view_mut};

/// Query rows per tile: a tile's scores are `[QUERY_TILE, keys]`.
const QUERY_TILE: usize = 64;

/// The sizes of one attention call, checked.
#[derive(Clone, Copy)]
struct Dims {
    /// Query heads (H).
    heads: usize,
    /// Width of one head (hd).
    head_dim: usize,
    /// Query heads per key/value head (H / KV).
    group: usize,
    /// Elements of one row of q or out (H * hd).
    q_width: usize,
    /// Elements of one row of k or v (KV * hd).
    kv_width: usize,
    /// Score scale 1 / sqrt(hd).
    scale: f32,
}

impl Dims {
    fn new(op: &str, shape: AttentionShape) -> Result<Dims, CpuError> {
        let AttentionShape {
            heads,
            kv_heads,
            head_dim,
        } = shape;
        if heads == 0 || kv_heads == 0 || head_dim == 0 || heads % kv_heads != 0 {
            return Err(CpuError::Shape(format!(
                "{op}: {heads} heads, {kv_heads} kv heads of width {head_dim}: need positive \
                 sizes and heads a multiple of kv heads"
            )));
        }
        Ok(Dims {
            heads,
            head_dim,
            group: heads / kv_heads,
            q_width: heads * head_dim,
            kv_width: kv_heads * head_dim,
            scale: 1.0 / (head_dim as f32).sqrt(),
        })
    }
}

/// Tokens in the batch (the last start) after checking that `seq_starts` begins at 0
/// and never decreases.
fn packed_tokens(op: &str, seq_starts: &[u32]) -> Result<usize, CpuError> {
    let ordered = seq_starts.windows(2).all(|w| w[0] <= w[1]);
    match (seq_starts.first(), seq_starts.last()) {
        (Some(0), Some(&last)) if ordered => Ok(last as usize),
        _ => Err(CpuError::BadSequences(format!(
            "{op}: seq_starts must start at 0 and never decrease, got {seq_starts:?}"
        ))),
    }
}

/// Turns row r of a tile's scaled scores (query at position `query` of its sequence,
/// `scores` covering keys 0..) into probabilities: keys after the query get 0, the
/// others exp(s - lse); returns lse, the log-sum-exp of the visible scores.
fn softmax_causal_row(scores: &mut [f32], query: usize) -> f32 {
    let (visible, masked) = scores.split_at_mut(query + 1);
    masked.fill(0.0);
    let max = math::max(visible);
    let sum = math::exp_sum_in_place(visible, max);
    let inv = 1.0 / sum;
    visible.iter_mut().for_each(|p| *p *= inv);
    max + sum.ln()
}

/// out[N, H*hd] and lse[N, H] of causal attention of q over k, v within each sequence
/// of `seq_starts`. Each rayon task owns one tile of query rows (all heads).
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_forward(
    out: &mut [f32],
    lse: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    seq_starts: &[u32],
    shape: AttentionShape,
) -> Result<(), CpuError> {
    let op = "attention_forward";
    let dims = Dims::new(op, shape)?;
    let n = packed_tokens(op, seq_starts)?;
    expect_len(op, "q", q.len(), n * dims.q_width)?;
    expect_len(op, "k", k.len(), n * dims.kv_width)?;
    expect_len(op, "v", v.len(), n * dims.kv_width)?;
    expect_len(op, "out", out.len(), n * dims.q_width)?;
    expect_len(op, "lse", lse.len(), n * dims.heads)?;

    // Tiles in row order; they cover rows 0..n exactly, so out and lse split along them.
    let mut tiles = Vec::new();
    let (mut out_rest, mut lse_rest) = (out, lse);
    for bounds in seq_starts.windows(2) {
        let (seq_start, seq_end) = (bounds[0] as usize, bounds[1] as usize);
        for row_start in (seq_start..seq_end).step_by(QUERY_TILE) {
            let rows = QUERY_TILE.min(seq_end - row_start);
            let (out_tile, rest) = std::mem::take(&mut out_rest).split_at_mut(rows * dims.q_width);
            out_rest = rest;
            let (lse_tile, rest) = std::mem::take(&mut lse_rest).split_at_mut(rows * dims.heads);
            lse_rest = rest;
            tiles.push((seq_start, row_start, out_tile, lse_tile));
        }
    }
    tiles.into_par_iter().try_for_each_init(
        Vec::new,
        |scores, (seq_start, row_start, out_tile, lse_tile)| {
            forward_tile(
                dims, scores, out_tile, lse_tile, q, k, v, seq_start, row_start,
            )
        },
    )
}

/// One tile of [`attention_forward`]: query rows row_start.. (as many as `lse_tile`
/// holds) of the sequence starting at `seq_start`, for every head. `scores` is scratch.
#[allow(clippy::too_many_arguments)]
fn forward_tile(
    dims: Dims,
    scores: &mut Vec<f32>,
    out_tile: &mut [f32],
    lse_tile: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    seq_start: usize,
    row_start: usize,
) -> Result<(), CpuError> {
    let Dims {
        heads,
        head_dim: hd,
        group,
        q_width,
        kv_width,
        scale,
    } = dims;
    let rows = lse_tile.len() / heads;
    let keys = row_start + rows - seq_start;
    // scores[rows, keys]: scaled q·k, then probabilities.
    scores.resize(rows * keys, 0.0);
    for h in 0..heads {
        let kv = (h / group) * hd;
        let q_h = view(&q[row_start * q_width + h * hd..], rows, hd, q_width)?;
        let k_h = view(&k[seq_start * kv_width + kv..], keys, hd, kv_width)?;
        let v_h = view(&v[seq_start * kv_width + kv..], keys, hd, kv_width)?;
        gemm(
            &mut view_mut(scores, rows, keys, keys)?,
            &q_h,
            &k_h.t(),
            scale,
            0.0,
        );
        for (r, row) in scores.chunks_exact_mut(keys).enumerate() {
            lse_tile[r * heads + h] = softmax_causal_row(row, row_start - seq_start + r);
        }
        let mut out_h = view_mut(&mut out_tile[h * hd..], rows, hd, q_width)?;
        gemm(&mut out_h, &view(scores, rows, keys, keys)?, &v_h, 1.0, 0.0);
    }
    Ok(())
}

/// dq[N, H*hd], dk and dv [N, KV*hd] (overwritten) of [`attention_forward`], from dout
/// and the forward's q, k, v, out and lse. Each rayon task owns one key/value head of
/// one sequence and its query heads; it accumulates into its own buffers in a fixed
/// order, which are then copied out.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_backward(
    dq: &mut [f32],
    dk: &mut [f32],
    dv: &mut [f32],
    dout: &[f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &[f32],
    lse: &[f32],
    seq_starts: &[u32],
    shape: AttentionShape,
) -> Result<(), CpuError> {
    let op = "attention_backward";
    let dims = Dims::new(op, shape)?;
    let n = packed_tokens(op, seq_starts)?;
    for (name, got) in [
        ("q", q.len()),
        ("out", out.len()),
        ("dout", dout.len()),
        ("dq", dq.len()),
    ] {
        expect_len(op, name, got, n * dims.q_width)?;
    }
    for (name, got) in [
        ("k", k.len()),
        ("v", v.len()),
        ("dk", dk.len()),
        ("dv", dv.len()),
    ] {
        expect_len(op, name, got, n * dims.kv_width)?;
    }
    expect_len(op, "lse", lse.len(), n * dims.heads)?;

    // delta[N, H] = sum over the head's elements of dout * out.
    let mut delta = vec![0.0f32; n * dims.heads];
    delta
        .par_chunks_mut(dims.heads)
        .zip(
            dout.par_chunks(dims.q_width)
                .zip(out.par_chunks(dims.q_width)),
        )
        .for_each(|(delta_row, (dout_row, out_row))| {
            let heads = dout_row
                .chunks_exact(dims.head_dim)
                .zip(out_row.chunks_exact(dims.head_dim));
            for (d, (g, o)) in delta_row.iter_mut().zip(heads) {
                *d = math::dot(g, o);
            }
        });

    let kv_heads = dims.heads / dims.group;
    let tasks: Vec<(usize, usize, usize)> = seq_starts
        .windows(2)
        .filter(|w| w[1] > w[0])
        .flat_map(|w| (0..kv_heads).map(move |g| (w[0] as usize, w[1] as usize, g)))
        .collect();
    let inputs = BackwardInputs {
        dims,
        dout,
        q,
        k,
        v,
        lse,
        delta: &delta,
    };
    let grads = tasks
        .par_iter()
        .map(|&(seq_start, seq_end, g)| backward_group(&inputs, seq_start, seq_end - seq_start, g))
        .collect::<Result<Vec<GroupGrads>, CpuError>>()?;

    let Dims {
        head_dim: hd,
        group,
        q_width,
        kv_width,
        ..
    } = dims;
    for (&(seq_start, _, g), grads) in tasks.iter().zip(&grads) {
        let q_cols = g * group * hd..(g + 1) * group * hd;
        for (i, dq_row) in grads.dq.chunks_exact(group * hd).enumerate() {
            let row = (seq_start + i) * q_width;
            dq[row + q_cols.start..row + q_cols.end].copy_from_slice(dq_row);
        }
        let kv_at = |i: usize| (seq_start + i) * kv_width + g * hd;
        for (i, (dk_row, dv_row)) in grads
            .dk
            .chunks_exact(hd)
            .zip(grads.dv.chunks_exact(hd))
            .enumerate()
        {
            dk[kv_at(i)..kv_at(i) + hd].copy_from_slice(dk_row);
            dv[kv_at(i)..kv_at(i) + hd].copy_from_slice(dv_row);
        }
    }
    Ok(())
}

/// What every backward task reads.
struct BackwardInputs<'a> {
    dims: Dims,
    dout: &'a [f32],
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    lse: &'a [f32],
    delta: &'a [f32],
}

/// The gradients of one key/value head over one sequence of T tokens.
struct GroupGrads {
    /// Of its query heads, [T, group*hd].
    dq: Vec<f32>,
    /// [T, hd].
    dk: Vec<f32>,
    /// [T, hd].
    dv: Vec<f32>,
}

/// The backward pass of key/value head `g` of the sequence of `len` tokens at
/// `seq_start`: for each of its query heads and each query tile, with P = exp(S - lse),
/// dS = P * (dout·v^T - delta): dq = scale dS·k, dk += scale dS^T·q, dv += P^T·dout.
fn backward_group(
    inputs: &BackwardInputs<'_>,
    seq_start: usize,
    len: usize,
    g: usize,
) -> Result<GroupGrads, CpuError> {
    let BackwardInputs {
        dims,
        dout,
        q,
        k,
        v,
        lse,
        delta,
    } = *inputs;
    let Dims {
        heads,
        head_dim: hd,
        group,
        q_width,
        kv_width,
        scale,
    } = dims;
    let mut grads = GroupGrads {
        dq: vec![0.0; len * group * hd],
        dk: vec![0.0; len * hd],
        dv: vec![0.0; len * hd],
    };
    // probs and dscores: [QUERY_TILE, len] scratch.
    let mut probs = vec![0.0f32; QUERY_TILE * len];
    let mut dscores = vec![0.0f32; QUERY_TILE * len];
    let k_g = &k[seq_start * kv_width + g * hd..];
    let v_g = &v[seq_start * kv_width + g * hd..];
    for member in 0..group {
        let h = g * group + member;
        for tile_start in (0..len).step_by(QUERY_TILE) {
            let rows = QUERY_TILE.min(len - tile_start);
            let keys = tile_start + rows;
            let first_row = seq_start + tile_start;
            let q_t = view(&q[first_row * q_width + h * hd..], rows, hd, q_width)?;
            let dout_t = view(&dout[first_row * q_width + h * hd..], rows, hd, q_width)?;
            let k_t = view(k_g, keys, hd, kv_width)?;
            let v_t = view(v_g, keys, hd, kv_width)?;
            let (probs, dscores) = (&mut probs[..rows * keys], &mut dscores[..rows * keys]);

            gemm(
                &mut view_mut(probs, rows, keys, keys)?,
                &q_t,
                &k_t.t(),
                scale,
                0.0,
            );
            gemm(
                &mut view_mut(dscores, rows, keys, keys)?,
                &dout_t,
                &v_t.t(),
                1.0,
                0.0,
            );
            for (r, (p_row, ds_row)) in probs
                .chunks_exact_mut(keys)
                .zip(dscores.chunks_exact_mut(keys))
                .enumerate()
            {
                let at = (first_row + r) * heads + h;
                let visible = tile_start + r + 1;
                for (p, ds) in p_row[..visible].iter_mut().zip(&mut ds_row[..visible]) {
                    *p = math::exp(*p - lse[at]);
                    *ds = *p * (*ds - delta[at]);
                }
                p_row[visible..].fill(0.0);
                ds_row[visible..].fill(0.0);
            }
            let probs = view(probs, rows, keys, keys)?;
            let dscores = view(dscores, rows, keys, keys)?;
            let mut dq_t = view_mut(
                &mut grads.dq[tile_start * group * hd + member * hd..],
                rows,
                hd,
                group * hd,
            )?;
            gemm(&mut dq_t, &dscores, &k_t, scale, 0.0);
            gemm(
                &mut view_mut(&mut grads.dk, keys, hd, hd)?,
                &dscores.t(),
                &q_t,
                scale,
                1.0,
            );
            gemm(
                &mut view_mut(&mut grads.dv, keys, hd, hd)?,
                &probs.t(),
                &dout_t,
                1.0,
                1.0,
            );
        }
    }
    Ok(grads)
}

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
/// one, at most capacity) of its caches [B, capacity, KV*hd]. One rayon task per
/// (sequence, head).
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
    out.par_chunks_mut(hd)
        .zip(q.par_chunks(hd))
        .enumerate()
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
