//! Matrix multiplication and the linear layer's bias. GEMM runs matrixmultiply's packed
//! kernels (AVX2/FMA picked at run time) through ndarray's safe strided views, so
//! transposed operands are read in place; parallelism is ours: the output is split into
//! a few blocks run by rayon. Each element of `c` is summed over `k` in the same order
//! however it is split, so results do not depend on the number of threads.

use ndarray::linalg::general_mat_mul;
use ndarray::{ArrayView2, ArrayViewMut2, Axis, ShapeBuilder};
use rayon::prelude::*;
use sage_core::transformer::MatmulShape;

use crate::error::{expect_len, rows_of, CpuError};
use crate::norm::column_sums;

/// Below this many multiply-adds a GEMM runs on the calling thread.
const SERIAL_MACS: usize = 1 << 20;

/// Split points of parallel GEMM blocks are multiples of this (whole micro-tiles).
const SPLIT_ALIGN: usize = 64;

/// A row-major `[rows, cols]` view of `data` whose rows are `row_stride` apart.
pub(crate) fn view(
    data: &[f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
) -> Result<ArrayView2<'_, f32>, CpuError> {
    ArrayView2::from_shape((rows, cols).strides((row_stride, 1)), data)
        .map_err(|e| CpuError::Shape(format!("matrix view [{rows}, {cols}] / {row_stride}: {e}")))
}

/// A mutable row-major `[rows, cols]` view of `data` whose rows are `row_stride` apart.
pub(crate) fn view_mut(
    data: &mut [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
) -> Result<ArrayViewMut2<'_, f32>, CpuError> {
    ArrayViewMut2::from_shape((rows, cols).strides((row_stride, 1)), data)
        .map_err(|e| CpuError::Shape(format!("matrix view [{rows}, {cols}] / {row_stride}: {e}")))
}

/// c[m, n] = alpha * a[m, k] · b[k, n] + beta * c on the calling thread (with beta 0,
/// `c` is not read).
pub(crate) fn gemm(
    c: &mut ArrayViewMut2<'_, f32>,
    a: &ArrayView2<'_, f32>,
    b: &ArrayView2<'_, f32>,
    alpha: f32,
    beta: f32,
) {
    general_mat_mul(alpha, a, b, beta, c);
}

/// [`gemm`], with the larger side of `c` halved recursively into blocks run in parallel,
/// down to `depth` halvings or [`SERIAL_MACS`] per block.
fn gemm_split(
    mut c: ArrayViewMut2<'_, f32>,
    a: ArrayView2<'_, f32>,
    b: ArrayView2<'_, f32>,
    alpha: f32,
    beta: f32,
    depth: u32,
) {
    let ((m, n), k) = (c.dim(), a.ncols());
    let half = |len: usize| (len / 2).next_multiple_of(SPLIT_ALIGN);
    let splittable = |len: usize| len >= 2 * SPLIT_ALIGN;
    if depth == 0 || m * n * k <= SERIAL_MACS || !(splittable(m) || splittable(n)) {
        gemm(&mut c, &a, &b, alpha, beta);
    } else if m >= n && splittable(m) {
        let (c_top, c_bottom) = c.split_at(Axis(0), half(m));
        let (a_top, a_bottom) = a.split_at(Axis(0), half(m));
        rayon::join(
            || gemm_split(c_top, a_top, b, alpha, beta, depth - 1),
            || gemm_split(c_bottom, a_bottom, b, alpha, beta, depth - 1),
        );
    } else {
        let (c_left, c_right) = c.split_at(Axis(1), half(n));
        let (b_left, b_right) = b.split_at(Axis(1), half(n));
        rayon::join(
            || gemm_split(c_left, a, b_left, alpha, beta, depth - 1),
            || gemm_split(c_right, a, b_right, alpha, beta, depth - 1),
        );
    }
}

/// [`gemm`] on all of rayon's threads: about two blocks per thread.
pub(crate) fn gemm_parallel(
    c: ArrayViewMut2<'_, f32>,
    a: ArrayView2<'_, f32>,
    b: ArrayView2<'_, f32>,
    alpha: f32,
    beta: f32,
) {
    let depth = (2 * rayon::current_num_threads())
        .next_power_of_two()
        .trailing_zeros();
    gemm_split(c, a, b, alpha, beta, depth);
}

/// c[m, n] (+)= op(a)[m, k] · op(b)[k, n]: `a` holds [k, m] when `trans_a`, `b` holds
/// [n, k] when `trans_b`.
pub(crate) fn matmul(
    c: &mut [f32],
    a: &[f32],
    b: &[f32],
    shape: MatmulShape,
) -> Result<(), CpuError> {
    let MatmulShape { m, n, k, .. } = shape;
    expect_len("matmul", "a", a.len(), m * k)?;
    expect_len("matmul", "b", b.len(), k * n)?;
    expect_len("matmul", "c", c.len(), m * n)?;
    let a = if shape.trans_a {
        view(a, k, m, m)?.reversed_axes()
    } else {
        view(a, m, k, k)?
    };
    let b = if shape.trans_b {
        view(b, n, k, k)?.reversed_axes()
    } else {
        view(b, k, n, n)?
    };
    let c = view_mut(c, m, n, n)?;
    let beta = if shape.accumulate { 1.0 } else { 0.0 };
    gemm_parallel(c, a, b, 1.0, beta);
    Ok(())
}

/// out[N, C] += bias[C] on every row.
pub(crate) fn add_bias(out: &mut [f32], bias: &[f32]) -> Result<(), CpuError> {
    rows_of("add_bias", "out", out.len(), bias.len())?;
    out.par_chunks_mut(bias.len()).for_each(|row| {
        for (o, b) in row.iter_mut().zip(bias) {
            *o += b;
        }
    });
    Ok(())
}

/// dbias[C] += sum over rows of dout[N, C].
pub(crate) fn bias_backward(dbias: &mut [f32], dout: &[f32]) -> Result<(), CpuError> {
    let width = dbias.len();
    let rows = rows_of("bias_backward", "dout", dout.len(), width)?;
    column_sums(dbias, rows, |n, partial| {
        for (p, g) in partial.iter_mut().zip(&dout[n * width..(n + 1) * width]) {
            *p += g;
        }
    });
    Ok(())
}
