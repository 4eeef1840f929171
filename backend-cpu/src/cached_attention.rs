//! Attention of query rows against KV caches when several rows read one sequence (a
//! prefill continued from the cache): each sequence's rows, in tiles, attend to its
//! cached rows through the GEMMs of the training attention, so a tile reads each cached
//! row once for all its queries instead of once per query as a decoding step does.
//!
//! Layouts: q, out [R, H*hd]; caches [B, T, KV*hd]; row r reads sequence
//! `sequences[r]`, its first `attended[r]` rows.

use rayon::prelude::*;
use sage_transformer::contract::{AttentionDims, DecodeSizes};

use crate::attention::{causal_weights_row, QUERY_TILE};
use crate::error::CpuError;
use crate::matmul::{gemm, view, view_mut};

/// The query rows of one sequence that one task attends: at most [`QUERY_TILE`].
struct Tile {
    sequence: usize,
    /// Rows of q and out, in the order the call gave them.
    rows: Vec<usize>,
}

/// Scratch of one task, for the `group` query heads of one key/value head stacked
/// head-major (stacked row hh * rows + i is the tile's row i of the group's head hh):
/// queries and outputs [group*rows, hd], scores [group*rows, keys].
#[derive(Default)]
struct Scratch {
    queries: Vec<f32>,
    scores: Vec<f32>,
    outputs: Vec<f32>,
}

/// out[R, H*hd]: query row r of q attends to rows 0..attended[r] of sequence
/// sequences[r]'s caches. A rayon task owns a tile of one sequence's rows, all heads;
/// the tiles' outputs are then written to their rows.
pub(crate) fn attention_cached(
    out: &mut [f32],
    q: &[f32],
    caches: [&[f32]; 2],
    sequences: &[u32],
    attended: &[u32],
    sizes: DecodeSizes,
) -> Result<(), CpuError> {
    let DecodeSizes { dims, cache } = sizes;
    let mut rows_of: Vec<Vec<usize>> = vec![Vec::new(); cache.batch];
    for (r, &sequence) in sequences.iter().enumerate() {
        rows_of[sequence as usize].push(r);
    }
    let tiles: Vec<Tile> = rows_of
        .into_iter()
        .enumerate()
        .flat_map(|(sequence, rows)| {
            let tiles: Vec<Vec<usize>> = rows.chunks(QUERY_TILE).map(<[usize]>::to_vec).collect();
            tiles.into_iter().map(move |rows| Tile { sequence, rows })
        })
        .collect();
    let span = cache.capacity * cache.width;
    let outputs: Vec<Vec<f32>> = tiles
        .par_iter()
        .map_init(Scratch::default, |scratch, tile| {
            let first = tile.sequence * span;
            let cached = caches.map(|c| &c[first..first + span]);
            attend_tile(dims, scratch, tile, q, cached, attended)
        })
        .collect::<Result<_, _>>()?;
    let width = dims.q_width;
    for (tile, output) in tiles.iter().zip(outputs) {
        for (&r, row) in tile.rows.iter().zip(output.chunks_exact(width)) {
            out[r * width..(r + 1) * width].copy_from_slice(row);
        }
    }
    Ok(())
}

/// One tile: its rows' outputs [rows, H*hd], every head, from the sequence's cached
/// keys and values [T, KV*hd]: out = (W · v) / sum with the weights W of
/// [`causal_weights_row`] over each row's attended keys.
fn attend_tile(
    dims: AttentionDims,
    scratch: &mut Scratch,
    tile: &Tile,
    q: &[f32],
    [keys, values]: [&[f32]; 2],
    attended: &[u32],
) -> Result<Vec<f32>, CpuError> {
    let AttentionDims {
        heads,
        head_dim: hd,
        group,
        q_width,
        kv_width,
        ..
    } = dims;
    let rows = tile.rows.len();
    let (stacked, longest) = (
        group * rows,
        tile.rows
            .iter()
            .map(|&r| attended[r] as usize)
            .max()
            .unwrap_or(0),
    );
    let Scratch {
        queries,
        scores,
        outputs,
    } = scratch;
    queries.resize(stacked * hd, 0.0);
    scores.resize(stacked * longest, 0.0);
    outputs.resize(stacked * hd, 0.0);
    let mut out = vec![0.0; rows * q_width];
    let mut inv_sums = vec![0.0; stacked];
    for g in 0..heads / group {
        let first_head = g * group;
        // queries[hh * rows + i] = head first_head + hh of the tile's row i.
        for (i, stacked_row) in queries.chunks_exact_mut(hd).enumerate() {
            let at = tile.rows[i % rows] * q_width + (first_head + i / rows) * hd;
            stacked_row.copy_from_slice(&q[at..at + hd]);
        }
        let k_g = view(&keys[g * hd..], longest, hd, kv_width)?;
        let v_g = view(&values[g * hd..], longest, hd, kv_width)?;
        gemm(
            &mut view_mut(scores, stacked, longest, longest)?,
            &view(queries, stacked, hd, hd)?,
            &k_g.t(),
            dims.scale(),
            0.0,
        );
        for (i, (row, inv_sum)) in scores
            .chunks_exact_mut(longest)
            .zip(inv_sums.iter_mut())
            .enumerate()
        {
            let last = attended[tile.rows[i % rows]] as usize - 1;
            *inv_sum = causal_weights_row(row, last).1;
        }
        gemm(
            &mut view_mut(outputs, stacked, hd, hd)?,
            &view(scores, stacked, longest, longest)?,
            &v_g,
            1.0,
            0.0,
        );
        for (i, (output, &inv_sum)) in outputs.chunks_exact(hd).zip(&inv_sums).enumerate() {
            let at = (i % rows) * q_width + (first_head + i / rows) * hd;
            for (o, &x) in out[at..at + hd].iter_mut().zip(output) {
                *o = x * inv_sum;
            }
        }
    }
    Ok(out)
}
