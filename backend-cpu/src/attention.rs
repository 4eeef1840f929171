//! Causal grouped-query attention for training: forward and backward over packed
//! sequences, flash-style (scores live one tile of query rows at a time, never as a
//! whole `[T, T]` matrix; the backward pass recomputes probabilities from the saved
//! log-sum-exp). Decoding against a KV cache is in `decode`.
//!
//! Query head h reads key/value head h / (H / KV). Layouts: q, out, dq [N, H*hd];
//! k, v, dk, dv [N, KV*hd]; lse [N, H].

use rayon::prelude::*;
use sage_transformer::contract::{AttentionDims, AttentionSizes};

use crate::error::CpuError;
use crate::math;
use crate::matmul::{gemm, view, view_mut};

/// Query rows per tile: a tile's scores are `[QUERY_TILE, keys]`.
pub(crate) const QUERY_TILE: usize = 64;

/// Turns one row of a tile's scaled scores (query at position `query` of its
/// sequence, `scores` covering keys 0..) into unnormalised weights: keys after the
/// query get 0, the others exp(s - max). Returns the log-sum-exp of the visible scores
/// and the reciprocal of the weights' sum, which normalises the row's output.
pub(crate) fn causal_weights_row(scores: &mut [f32], query: usize) -> (f32, f32) {
    let (visible, masked) = scores.split_at_mut(query + 1);
    masked.fill(0.0);
    let max = math::max(visible);
    let sum = math::exp_sum_in_place(visible, max);
    (max + sum.ln(), 1.0 / sum)
}

/// Scratch of one forward task, for the `group` query heads of one key/value head
/// stacked head-major (stacked row hh * rows + r is query row r of the group's head hh):
/// queries and outputs [group*rows, hd], scores [group*rows, keys], inv_sums [group*rows].
#[derive(Default)]
struct TileScratch {
    queries: Vec<f32>,
    scores: Vec<f32>,
    outputs: Vec<f32>,
    inv_sums: Vec<f32>,
}

/// out[N, H*hd] and lse[N, H] of causal attention of q over k, v within each sequence
/// of `seq_starts`. Each rayon task owns one tile of query rows (all heads).
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_forward(
    out: &mut [f32],
    lse: &mut [f32],
    [q, k, v]: [&[f32]; 3],
    seq_starts: &[u32],
    sizes: AttentionSizes,
) -> Result<(), CpuError> {
    let dims = sizes.dims;

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
        TileScratch::default,
        |scratch, (seq_start, row_start, out_tile, lse_tile)| {
            forward_tile(
                dims, scratch, out_tile, lse_tile, q, k, v, seq_start, row_start,
            )
        },
    )
}

/// One tile of [`attention_forward`]: query rows row_start.. (as many as `lse_tile`
/// holds) of the sequence starting at `seq_start`, for every head: out = (W · v) / sum
/// with the unnormalised weights W of [`causal_weights_row`]. The query heads sharing a
/// key/value head are stacked, so each GEMM serves the whole group.
#[allow(clippy::too_many_arguments)]
fn forward_tile(
    dims: AttentionDims,
    scratch: &mut TileScratch,
    out_tile: &mut [f32],
    lse_tile: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    seq_start: usize,
    row_start: usize,
) -> Result<(), CpuError> {
    let AttentionDims {
        heads,
        head_dim: hd,
        group,
        q_width,
        kv_width,
        ..
    } = dims;
    let scale = dims.scale();
    let rows = lse_tile.len() / heads;
    let (stacked, keys) = (group * rows, row_start + rows - seq_start);
    let TileScratch {
        queries,
        scores,
        outputs,
        inv_sums,
    } = scratch;
    queries.resize(stacked * hd, 0.0);
    scores.resize(stacked * keys, 0.0);
    outputs.resize(stacked * hd, 0.0);
    inv_sums.resize(stacked, 0.0);
    for g in 0..heads / group {
        let first_head = g * group;
        gather_group(queries, q, row_start, rows, first_head, dims);
        let k_g = view(&k[seq_start * kv_width + g * hd..], keys, hd, kv_width)?;
        let v_g = view(&v[seq_start * kv_width + g * hd..], keys, hd, kv_width)?;
        let mut scores_view = view_mut(scores, stacked, keys, keys)?;
        gemm(
            &mut scores_view,
            &view(queries, stacked, hd, hd)?,
            &k_g.t(),
            scale,
            0.0,
        );
        for (i, (row, inv_sum)) in scores
            .chunks_exact_mut(keys)
            .zip(inv_sums.iter_mut())
            .enumerate()
        {
            let (r, head) = (i % rows, first_head + i / rows);
            (lse_tile[r * heads + head], *inv_sum) =
                causal_weights_row(row, row_start - seq_start + r);
        }
        gemm(
            &mut view_mut(outputs, stacked, hd, hd)?,
            &view(scores, stacked, keys, keys)?,
            &v_g,
            1.0,
            0.0,
        );
        for (i, (output, &inv_sum)) in outputs.chunks_exact(hd).zip(inv_sums.iter()).enumerate() {
            let at = (i % rows) * q_width + (first_head + i / rows) * hd;
            for (o, &x) in out_tile[at..at + hd].iter_mut().zip(output) {
                *o = x * inv_sum;
            }
        }
    }
    Ok(())
}

/// dq[N, H*hd], dk and dv [N, KV*hd] (overwritten) of [`attention_forward`], from dout
/// and the forward's q, k, v, out and lse. Each rayon task owns one key/value head of
/// one sequence and its query heads; it accumulates into its own buffers in a fixed
/// order, which are then copied out.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_backward(
    [dq, dk, dv]: [&mut [f32]; 3],
    [dout, q, k, v, out, lse]: [&[f32]; 6],
    seq_starts: &[u32],
    sizes: AttentionSizes,
) -> Result<(), CpuError> {
    let AttentionSizes { tokens: n, dims } = sizes;

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

    let AttentionDims {
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
    dims: AttentionDims,
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

/// Scratch of one backward task, for the `group` query heads of a key/value head
/// stacked head-major as in [`TileScratch`]: queries, douts and dqueries
/// [group*rows, hd]; probs and dscores [group*rows, keys].
#[derive(Default)]
struct GroupScratch {
    queries: Vec<f32>,
    douts: Vec<f32>,
    dqueries: Vec<f32>,
    probs: Vec<f32>,
    dscores: Vec<f32>,
}

/// Copies rows `first_row..first_row + rows` of the query heads `first_head..` (a
/// group) of x[N, H*hd] into stacked[group*rows, hd], head-major.
fn gather_group(
    stacked: &mut [f32],
    x: &[f32],
    first_row: usize,
    rows: usize,
    first_head: usize,
    dims: AttentionDims,
) {
    let hd = dims.head_dim;
    for (i, stacked_row) in stacked.chunks_exact_mut(hd).enumerate() {
        let at = (first_row + i % rows) * dims.q_width + (first_head + i / rows) * hd;
        stacked_row.copy_from_slice(&x[at..at + hd]);
    }
}

/// The backward pass of key/value head `g` of the sequence of `len` tokens at
/// `seq_start`, its query heads stacked, tile by tile of queries: with P = exp(S - lse)
/// and dS = P * (dout·v^T - delta): dq = scale dS·k, dk += scale dS^T·q, dv += P^T·dout.
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
    let AttentionDims {
        heads,
        head_dim: hd,
        group,
        kv_width,
        ..
    } = dims;
    let scale = dims.scale();
    let mut grads = GroupGrads {
        dq: vec![0.0; len * group * hd],
        dk: vec![0.0; len * hd],
        dv: vec![0.0; len * hd],
    };
    let mut scratch = GroupScratch::default();
    let k_g = &k[seq_start * kv_width + g * hd..];
    let v_g = &v[seq_start * kv_width + g * hd..];
    let first_head = g * group;
    for tile_start in (0..len).step_by(QUERY_TILE) {
        let rows = QUERY_TILE.min(len - tile_start);
        let (stacked, keys) = (group * rows, tile_start + rows);
        let first_row = seq_start + tile_start;
        let GroupScratch {
            queries,
            douts,
            dqueries,
            probs,
            dscores,
        } = &mut scratch;
        for buffer in [&mut *queries, &mut *douts, &mut *dqueries] {
            buffer.resize(stacked * hd, 0.0);
        }
        probs.resize(stacked * keys, 0.0);
        dscores.resize(stacked * keys, 0.0);
        gather_group(queries, q, first_row, rows, first_head, dims);
        gather_group(douts, dout, first_row, rows, first_head, dims);
        let queries = view(queries, stacked, hd, hd)?;
        let douts = view(douts, stacked, hd, hd)?;
        let k_t = view(k_g, keys, hd, kv_width)?;
        let v_t = view(v_g, keys, hd, kv_width)?;

        gemm(
            &mut view_mut(probs, stacked, keys, keys)?,
            &queries,
            &k_t.t(),
            scale,
            0.0,
        );
        gemm(
            &mut view_mut(dscores, stacked, keys, keys)?,
            &douts,
            &v_t.t(),
            1.0,
            0.0,
        );
        for (i, (p_row, ds_row)) in probs
            .chunks_exact_mut(keys)
            .zip(dscores.chunks_exact_mut(keys))
            .enumerate()
        {
            let (r, head) = (i % rows, first_head + i / rows);
            let at = (first_row + r) * heads + head;
            let (visible_p, masked_p) = p_row.split_at_mut(tile_start + r + 1);
            let (visible_ds, masked_ds) = ds_row.split_at_mut(tile_start + r + 1);
            math::softmax_backward_in_place(visible_p, visible_ds, lse[at], delta[at]);
            masked_p.fill(0.0);
            masked_ds.fill(0.0);
        }
        let probs = view(probs, stacked, keys, keys)?;
        let dscores = view(dscores, stacked, keys, keys)?;
        gemm(
            &mut view_mut(dqueries, stacked, hd, hd)?,
            &dscores,
            &k_t,
            scale,
            0.0,
        );
        gemm(
            &mut view_mut(&mut grads.dk, keys, hd, hd)?,
            &dscores.t(),
            &queries,
            scale,
            1.0,
        );
        gemm(
            &mut view_mut(&mut grads.dv, keys, hd, hd)?,
            &probs.t(),
            &douts,
            1.0,
            1.0,
        );
        // Unstack: dq row tile_start + r, columns of head hh.
        for (i, dq_row) in dqueries.chunks_exact(hd).enumerate() {
            let at = (tile_start + i % rows) * group * hd + (i / rows) * hd;
            grads.dq[at..at + hd].copy_from_slice(dq_row);
        }
    }
    Ok(grads)
}
