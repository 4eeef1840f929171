//! RMSNorm forward and backward over rows, and the fixed-order column reduction that
//! their weight gradient (and the bias gradient) uses.

use rayon::prelude::*;

use crate::elementwise::min_rows;
use sage_transformer::contract::Rows;

use crate::math;

/// Rows per block of a column reduction: partial sums of fixed blocks are added in block
/// order, so the result is the same whatever the number of threads (and the GPU
/// backends', which use the same blocks).
const ROWS_PER_BLOCK: usize = sage_transformer::COLUMN_SUM_ROWS;

/// sum[C] += the columns of each block of rows of `rows`, through `row_term`, which adds
/// the contribution of row n (its `[C]` input) into the block's partial sum.
pub(crate) fn column_sums<F>(sum: &mut [f32], rows: usize, row_term: F)
where
    F: Fn(usize, &mut [f32]) + Sync,
{
    let width = sum.len();
    let partials: Vec<Vec<f32>> = (0..rows.div_ceil(ROWS_PER_BLOCK))
        .into_par_iter()
        .map(|block| {
            let mut partial = vec![0.0f32; width];
            let end = ((block + 1) * ROWS_PER_BLOCK).min(rows);
            for n in block * ROWS_PER_BLOCK..end {
                row_term(n, &mut partial);
            }
            partial
        })
        .collect();
    for partial in partials {
        for (s, p) in sum.iter_mut().zip(&partial) {
            *s += p;
        }
    }
}

/// out[N, D] = x[N, D] * rstd[n] * weight[D], with rstd[N] = 1 / sqrt(mean(x[n]^2) + eps).
pub(crate) fn rmsnorm_forward(
    out: &mut [f32],
    rstd: &mut [f32],
    x: &[f32],
    weight: &[f32],
    rows: Rows,
    eps: f32,
) {
    let dim = rows.width;
    out.par_chunks_mut(dim)
        .zip(rstd.par_iter_mut())
        .zip(x.par_chunks(dim))
        .with_min_len(min_rows(dim))
        .for_each(|((out_row, rstd_n), x_row)| {
            let r = 1.0 / (math::sum_squares(x_row) / dim as f32 + eps).sqrt();
            *rstd_n = r;
            for ((o, &xi), &w) in out_row.iter_mut().zip(x_row).zip(weight) {
                *o = xi * r * w;
            }
        });
}

/// dx[N, D] += r * w * dout - x * r^3 / D * sum(dout * w * x), dweight[D] += sum over rows
/// of dout * x * r, from dout[N, D], x[N, D], weight[D] and rstd (r) [N].
#[allow(clippy::too_many_arguments)]
pub(crate) fn rmsnorm_backward(
    dx: &mut [f32],
    dweight: &mut [f32],
    dout: &[f32],
    x: &[f32],
    weight: &[f32],
    rstd: &[f32],
    rows: Rows,
) {
    let Rows { rows, width: dim } = rows;
    dx.par_chunks_mut(dim)
        .zip(dout.par_chunks(dim))
        .zip(x.par_chunks(dim))
        .zip(rstd.par_iter())
        .with_min_len(min_rows(dim))
        .for_each(|(((dx_row, dout_row), x_row), &r)| {
            let weighted = math::dot3(dout_row, weight, x_row);
            let correction = weighted * r * r * r / dim as f32;
            for (((d, &g), &w), &xi) in dx_row.iter_mut().zip(dout_row).zip(weight).zip(x_row) {
                *d += r * w * g - xi * correction;
            }
        });
    column_sums(dweight, rows, |n, partial| {
        let row = n * dim..(n + 1) * dim;
        for ((p, &g), &xi) in partial.iter_mut().zip(&dout[row.clone()]).zip(&x[row]) {
            *p += g * xi * rstd[n];
        }
    });
}
