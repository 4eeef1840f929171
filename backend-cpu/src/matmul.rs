//! Matrix multiplication and the linear layer's bias. GEMM takes ndarray's safe strided
//! views, so transposed operands are read in place, and runs the packed kernels of
//! [`crate::gemm`] (AVX-512 or AVX2 picked at run time); products of a few rows with a
//! transposed weight (decoding) skip packing and run as the vector dot products of
//! [`crate::skinny`] instead, split into a few blocks run by rayon. Each element of `c` is computed the same way
//! however the product is split, so results do not depend on the number of threads.

use ndarray::linalg::general_mat_mul;
use ndarray::{ArrayView2, ArrayViewMut2, Axis, ShapeBuilder};
use rayon::prelude::*;
use sage_transformer::MatmulShape;

use crate::elementwise::min_rows;
use sage_transformer::contract::Rows;
use sage_transformer::ContractError;

use crate::error::CpuError;
use crate::gemm::gemm_packed;
use crate::math::vectorized;
use crate::norm::column_sums;
use crate::skinny::{Columns, SkinnyDots};
use crate::Precision;

/// Below this many multiply-adds a GEMM runs on the calling thread.
const SERIAL_MACS: usize = 1 << 20;

/// Below this many multiply-adds a skinny product runs on the calling thread. Lower than
/// [`SERIAL_MACS`]: a skinny product streams `b` from memory once, at a few multiply-adds
/// per float read, so it is bound by memory bandwidth, which two threads draw more of.
const SKINNY_SERIAL_MACS: usize = 1 << 16;

/// Split points of parallel unpacked GEMM blocks are multiples of this.
const SPLIT_ALIGN: usize = 64;

/// A row-major `[rows, cols]` view of `data` whose rows are `row_stride` apart.
pub(crate) fn view(
    data: &[f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
) -> Result<ArrayView2<'_, f32>, CpuError> {
    ArrayView2::from_shape((rows, cols).strides((row_stride, 1)), data).map_err(|e| {
        CpuError::Contract(ContractError::Shape(format!(
            "matrix view [{rows}, {cols}] / {row_stride}: {e}"
        )))
    })
}

/// A mutable row-major `[rows, cols]` view of `data` whose rows are `row_stride` apart.
pub(crate) fn view_mut(
    data: &mut [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
) -> Result<ArrayViewMut2<'_, f32>, CpuError> {
    ArrayViewMut2::from_shape((rows, cols).strides((row_stride, 1)), data).map_err(|e| {
        CpuError::Contract(ContractError::Shape(format!(
            "matrix view [{rows}, {cols}] / {row_stride}: {e}"
        )))
    })
}

/// How a product is computed. Chosen once per product, so that every block of a product
/// split across threads takes the same path (and results never depend on threads).
#[derive(Clone, Copy)]
enum Path {
    /// [`gemm_skinny`]: at most [`SKINNY_ROWS`] rows, `a` rows and `b` columns contiguous
    /// (a batch of tokens times a weight stored `[n, k]`).
    Skinny,
    /// [`gemm_packed`]'s packed kernels.
    Packed,
}

impl Path {
    fn of(c: &ArrayViewMut2<'_, f32>, a: &ArrayView2<'_, f32>, b: &ArrayView2<'_, f32>) -> Path {
        let a_rows_contiguous = a.ncols() <= 1 || a.strides()[1] == 1;
        let b_columns_contiguous = b.nrows() <= 1 || b.strides()[0] == 1;
        if c.nrows() <= SKINNY_ROWS && a_rows_contiguous && b_columns_contiguous {
            Path::Skinny
        } else {
            Path::Packed
        }
    }
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
    let path = Path::of(c, a, b);
    gemm_on(path, c, a, b, alpha, beta);
}

/// [`gemm`] along a given path.
fn gemm_on(
    path: Path,
    c: &mut ArrayViewMut2<'_, f32>,
    a: &ArrayView2<'_, f32>,
    b: &ArrayView2<'_, f32>,
    alpha: f32,
    beta: f32,
) {
    match path {
        Path::Skinny => gemm_unpacked(c, a, SkinnyB::F32(*b), alpha, beta),
        Path::Packed => packed(c, a, b, (alpha, beta), false, Precision::F32),
    }
}

/// [`gemm_packed`] on the rows of `c` where they are contiguous, ndarray's general
/// product (in f32) where they are not.
fn packed(
    c: &mut ArrayViewMut2<'_, f32>,
    a: &ArrayView2<'_, f32>,
    b: &ArrayView2<'_, f32>,
    (alpha, beta): (f32, f32),
    parallel: bool,
    precision: Precision,
) {
    let rows: Option<Vec<&mut [f32]>> = c
        .rows_mut()
        .into_iter()
        .map(|row| row.into_slice())
        .collect();
    match rows {
        Some(rows) => gemm_packed(rows, a, b, (alpha, beta), parallel, precision),
        None => general_mat_mul(alpha, a, b, beta, c),
    }
}

/// The `b` of a skinny product: f32 columns, or the bf16 copy of a weight stored `[n, k]`.
#[derive(Clone, Copy)]
enum SkinnyB<'a> {
    /// `b[k, n]`, any strides.
    F32(ArrayView2<'a, f32>),
    /// The weight's bf16 copy.
    Bf16(Bf16Weight<'a>),
}

impl<'a> SkinnyB<'a> {
    /// Columns `..j` and `j..`.
    fn split_columns(self, j: usize) -> (SkinnyB<'a>, SkinnyB<'a>) {
        match self {
            SkinnyB::F32(b) => {
                let (left, right) = b.split_at(Axis(1), j);
                (SkinnyB::F32(left), SkinnyB::F32(right))
            }
            SkinnyB::Bf16(Bf16Weight { bits, k }) => {
                let (left, right) = bits.split_at(j * k);
                (
                    SkinnyB::Bf16(Bf16Weight { bits: left, k }),
                    SkinnyB::Bf16(Bf16Weight { bits: right, k }),
                )
            }
        }
    }
}

/// The bf16 copy of a weight stored `[n, k]` (its values' bits, row-major), which the
/// skinny products of [`Precision::Bf16`] stream in place of the f32 weight: half the
/// bytes of a memory-bound product.
#[derive(Clone, Copy)]
pub(crate) struct Bf16Weight<'a> {
    /// [n, k]
    pub(crate) bits: &'a [u16],
    /// The depth.
    pub(crate) k: usize,
}

impl<'a> Bf16Weight<'a> {
    /// The weight's columns for [`SkinnyDots`].
    fn columns(self) -> Columns<'a> {
        Columns::Bf16 {
            bits: self.bits,
            k: self.k,
        }
    }
}

/// [`gemm_skinny`] where `a`'s rows and `b`'s columns are contiguous (a copy of `a` in
/// standard layout against a bf16 `b`), ndarray's general product where they are not.
fn gemm_unpacked(
    c: &mut ArrayViewMut2<'_, f32>,
    a: &ArrayView2<'_, f32>,
    b: SkinnyB<'_>,
    alpha: f32,
    beta: f32,
) {
    match b {
        SkinnyB::F32(b) => {
            let a_rows: Option<Vec<&[f32]>> =
                a.rows().into_iter().map(|row| row.to_slice()).collect();
            let b_columns: Option<Vec<&[f32]>> = b
                .columns()
                .into_iter()
                .map(|column| column.to_slice())
                .collect();
            match (a_rows, b_columns) {
                (Some(a_rows), Some(b_columns)) => {
                    gemm_skinny(c, &a_rows, Columns::F32(&b_columns), alpha, beta)
                }
                _ => general_mat_mul(alpha, a, &b, beta, c),
            }
        }
        SkinnyB::Bf16(weight) => {
            // Every row of a standard layout is contiguous: none is filtered out.
            let a = a.as_standard_layout();
            let a_rows: Vec<&[f32]> = a
                .rows()
                .into_iter()
                .filter_map(|row| row.to_slice())
                .collect();
            gemm_skinny(c, &a_rows, weight.columns(), alpha, beta)
        }
    }
}

/// Whether a [`matmul`] of `shape` multiplies a weight stored `[n, k]` on the skinny
/// kernel (so that, in [`Precision::Bf16`], it may read the weight's bf16 copy).
pub(crate) fn is_skinny_weight_product(shape: &MatmulShape) -> bool {
    shape.trans_b && !shape.trans_a && shape.m <= SKINNY_ROWS
}

/// Most rows of `c` for which [`gemm`] skips packing. Packing `b` reads and writes all of
/// it, every call; a decoding step's weights are too big to stay in cache between steps,
/// so up to here the skinny kernel, which reads `b` once, is the faster
/// (`transformer_bench decode`: a step of 16 SmolLM2 sequences 2.1x faster, of 64 1.3x;
/// 32 rows of the tiny model's, whose weights stay in cache, 1.2x, 64 of them 0.86x).
pub(crate) const SKINNY_ROWS: usize = 32;

/// c[i, j] = alpha * (a_rows[i] · b_columns[j]) + beta * c[i, j] without packing: dot
/// products of contiguous rows, in the register tiles of [`SkinnyDots`].
fn gemm_skinny(
    c: &mut ArrayViewMut2<'_, f32>,
    a_rows: &[&[f32]],
    b_columns: Columns<'_>,
    alpha: f32,
    beta: f32,
) {
    let n = b_columns.len();
    // dots[m, n]
    let mut dots = vec![0.0f32; a_rows.len() * n];
    vectorized(SkinnyDots {
        dots: &mut dots,
        a_rows,
        b_columns,
    });
    for ((i, j), c_ij) in c.indexed_iter_mut() {
        let product = alpha * dots[i * n + j];
        *c_ij = if beta == 0.0 {
            product
        } else {
            product + beta * *c_ij
        };
    }
}

/// [`gemm_unpacked`], with the larger side of `c` halved recursively (at multiples of
/// [`SPLIT_ALIGN`]) into blocks run in parallel, down to `depth` halvings or
/// [`SKINNY_SERIAL_MACS`] per block.
fn gemm_split(
    mut c: ArrayViewMut2<'_, f32>,
    a: ArrayView2<'_, f32>,
    b: SkinnyB<'_>,
    alpha: f32,
    beta: f32,
    depth: u32,
) {
    let ((m, n), k) = (c.dim(), a.ncols());
    let half = |len: usize| len / 2 / SPLIT_ALIGN * SPLIT_ALIGN;
    let splittable = |len: usize| len >= 2 * SPLIT_ALIGN;
    if depth == 0 || m * n * k <= SKINNY_SERIAL_MACS || !(splittable(m) || splittable(n)) {
        gemm_unpacked(&mut c, &a, b, alpha, beta);
    } else if m >= n && splittable(m) {
        let (c_top, c_bottom) = c.split_at(Axis(0), half(m));
        let (a_top, a_bottom) = a.split_at(Axis(0), half(m));
        rayon::join(
            || gemm_split(c_top, a_top, b, alpha, beta, depth - 1),
            || gemm_split(c_bottom, a_bottom, b, alpha, beta, depth - 1),
        );
    } else {
        let (c_left, c_right) = c.split_at(Axis(1), half(n));
        let (b_left, b_right) = b.split_columns(half(n));
        rayon::join(
            || gemm_split(c_left, a, b_left, alpha, beta, depth - 1),
            || gemm_split(c_right, a, b_right, alpha, beta, depth - 1),
        );
    }
}

/// Halvings of a parallel product: about two blocks per thread.
fn split_depth() -> u32 {
    (2 * rayon::current_num_threads())
        .next_power_of_two()
        .trailing_zeros()
}

/// [`gemm`] on all of rayon's threads, the packed products with the arithmetic of
/// `precision`. A skinny product, of at most [`SKINNY_ROWS`] rows, streams its weight
/// once and would pay to round it what bf16 saves: it multiplies in f32, reading
/// `b_bf16` (the bf16 copy of `b`, a weight stored `[n, k]`; only [`Precision::Bf16`]
/// makes copies) in place of `b` where it is given.
pub(crate) fn gemm_parallel<'b>(
    mut c: ArrayViewMut2<'_, f32>,
    a: ArrayView2<'_, f32>,
    b: ArrayView2<'b, f32>,
    (alpha, beta): (f32, f32),
    precision: Precision,
    b_bf16: Option<Bf16Weight<'b>>,
) {
    match Path::of(&c, &a, &b) {
        Path::Skinny => {
            let b = b_bf16.map_or(SkinnyB::F32(b), SkinnyB::Bf16);
            gemm_split(c, a, b, alpha, beta, split_depth())
        }
        Path::Packed => {
            let parallel = worth_threads(&c, &a);
            packed(&mut c, &a, &b, (alpha, beta), parallel, precision)
        }
    }
}

/// [`gemm_parallel`] through the packed kernels however few the rows, so that each row
/// of `c` comes out the same whatever rows are computed beside it (the output head
/// scores some rows of a batch or all of them, with equal results).
pub(crate) fn gemm_parallel_packed(
    mut c: ArrayViewMut2<'_, f32>,
    a: ArrayView2<'_, f32>,
    b: ArrayView2<'_, f32>,
    precision: Precision,
) {
    let parallel = worth_threads(&c, &a);
    packed(&mut c, &a, &b, (1.0, 0.0), parallel, precision);
}

/// Whether a product of `c`'s shape over `a`'s depth is worth rayon's hand-off: more
/// than [`SERIAL_MACS`] multiply-adds.
fn worth_threads(c: &ArrayViewMut2<'_, f32>, a: &ArrayView2<'_, f32>) -> bool {
    c.nrows() * c.ncols() * a.ncols() > SERIAL_MACS
}

/// c[m, n] (+)= op(a)[m, k] · op(b)[k, n]: `a` holds [k, m] when `trans_a`, `b` holds
/// [n, k] when `trans_b`; products of more than [`SKINNY_ROWS`] rows with the
/// arithmetic of `precision`. `b_bf16`, `b`'s bf16 copy where it has one, is read by
/// the skinny products of [`Precision::Bf16`] when `trans_b` ([`gemm_parallel`]).
pub(crate) fn matmul(
    c: &mut [f32],
    a: &[f32],
    b: &[f32],
    shape: MatmulShape,
    precision: Precision,
    b_bf16: Option<&[u16]>,
) -> Result<(), CpuError> {
    let MatmulShape { m, n, k, .. } = shape;
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
    let b_bf16 = b_bf16
        .filter(|_| shape.trans_b)
        .map(|bits| Bf16Weight { bits, k });
    let c = view_mut(c, m, n, n)?;
    let beta = if shape.accumulate { 1.0 } else { 0.0 };
    gemm_parallel(c, a, b, (1.0, beta), precision, b_bf16);
    Ok(())
}

/// out[N, C] += bias[C] on every row.
pub(crate) fn add_bias(out: &mut [f32], bias: &[f32]) {
    out.par_chunks_mut(bias.len())
        .with_min_len(min_rows(bias.len()))
        .for_each(|row| {
            for (o, b) in row.iter_mut().zip(bias) {
                *o += b;
            }
        });
}

/// dbias[C] += sum over rows of dout[N, C].
pub(crate) fn bias_backward(dbias: &mut [f32], dout: &[f32], rows: Rows) {
    let Rows { rows, width } = rows;
    column_sums(dbias, rows, |n, partial| {
        for (p, g) in partial.iter_mut().zip(&dout[n * width..(n + 1) * width]) {
            *p += g;
        }
    });
}
