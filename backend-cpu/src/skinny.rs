//! The skinny GEMM of the CPU backend: `c = alpha * a · b + beta * c` for a few rows of
//! `a` (a decoding step's tokens) against a `b` whose columns are contiguous (a weight
//! stored `[n, k]`), without packing. Each element of `c` is one dot product of a row of
//! `a` and a column of `b`: vector accumulators over the depth, then their sum and the
//! scalar tail, always in that order, so an element's value does not depend on the tile
//! that computes it, on the other rows or columns, or on how the product is split.
//!
//! Decoding reads every weight once per step at a few multiply-adds per float, so the
//! kernel is bound by memory: its tile is shaped by the rows there are. One row runs
//! against eight columns at a time (eight streams of `b` in flight, no repeated row),
//! two rows against eight, more rows four by four (each column of the tile stays in L1
//! while every group of rows passes over it, so `b` is read from memory once). On a
//! CPU with 16 vector registers (AVX2) the tiles are half as wide.

use pulp::Simd;

/// A row or column split into whole vectors and the scalar tail.
type Split<'a, S> = (&'a [<S as Simd>::f32s], &'a [f32]);

/// dots[i, j] = a_rows[i] · b_columns[j], every row and column `k` long.
pub(crate) struct SkinnyDots<'a> {
    /// [m, n], row-major.
    pub(crate) dots: &'a mut [f32],
    /// m rows of k.
    pub(crate) a_rows: &'a [&'a [f32]],
    /// n columns of k.
    pub(crate) b_columns: &'a [&'a [f32]],
}

impl pulp::WithSimd for SkinnyDots<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let SkinnyDots {
            dots,
            a_rows,
            b_columns,
        } = self;
        if a_rows.is_empty() || b_columns.is_empty() {
            return;
        }
        let a: Vec<Split<'_, S>> = a_rows.iter().map(|row| S::as_simd_f32s(row)).collect();
        let b: Vec<Split<'_, S>> = b_columns
            .iter()
            .map(|column| S::as_simd_f32s(column))
            .collect();
        // Accumulators, the tile's column vectors and a row vector fit the registers.
        let wide = S::REGISTER_COUNT >= 32;
        match (a.len(), wide) {
            (1, true) => tiles::<S, 1, 8>(simd, dots, &a, &b),
            (1, false) => tiles::<S, 1, 4>(simd, dots, &a, &b),
            (2, true) => tiles::<S, 2, 8>(simd, dots, &a, &b),
            (2, false) => tiles::<S, 2, 4>(simd, dots, &a, &b),
            (_, true) => tiles::<S, 4, 4>(simd, dots, &a, &b),
            (_, false) => tiles::<S, 4, 2>(simd, dots, &a, &b),
        }
    }
}

/// [`SkinnyDots`] in tiles of `R` rows by `C` columns. Rows past the end repeat the last
/// row and columns past the end the last column; their results are dropped.
#[inline(always)]
fn tiles<S: Simd, const R: usize, const C: usize>(
    simd: S,
    dots: &mut [f32],
    a: &[Split<'_, S>],
    b: &[Split<'_, S>],
) {
    let (m, n) = (a.len(), b.len());
    // Every row and column has the same k, so the same number of vectors.
    let len = b[0].0.len();
    for j0 in (0..n).step_by(C) {
        let js: [usize; C] = std::array::from_fn(|c| (j0 + c).min(n - 1));
        let columns: [&[S::f32s]; C] = js.map(|j| &b[j].0[..len]);
        for i0 in (0..m).step_by(R) {
            let is: [usize; R] = std::array::from_fn(|r| (i0 + r).min(m - 1));
            let rows: [&[S::f32s]; R] = is.map(|i| &a[i].0[..len]);
            let mut acc = [[simd.splat_f32s(0.0); C]; R];
            for p in 0..len {
                let column_vectors: [S::f32s; C] = std::array::from_fn(|c| columns[c][p]);
                for (acc_row, row) in acc.iter_mut().zip(&rows) {
                    let x = row[p];
                    for (acc_rc, &y) in acc_row.iter_mut().zip(&column_vectors) {
                        *acc_rc = simd.mul_add_f32s(x, y, *acc_rc);
                    }
                }
            }
            for (r, (acc_row, &i)) in acc.iter().zip(&is).enumerate() {
                if i0 + r >= m {
                    break;
                }
                for (c, (&acc_rc, &j)) in acc_row.iter().zip(&js).enumerate() {
                    if j0 + c >= n {
                        break;
                    }
                    let tail = a[i].1.iter().zip(b[j].1);
                    dots[i * n + j] =
                        tail.fold(simd.reduce_sum_f32s(acc_rc), |t, (x, y)| t + x * y);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_inputs::random;

    /// dots[m, n] of `a` [m, k] and `b` [n, k] at vector level `simd`.
    fn dots_at<S: Simd>(simd: S, a: &[f32], b: &[f32], k: usize) -> Vec<f32> {
        let a_rows: Vec<&[f32]> = a.chunks_exact(k).collect();
        let b_columns: Vec<&[f32]> = b.chunks_exact(k).collect();
        let mut dots = vec![f32::NAN; a_rows.len() * b_columns.len()];
        simd.vectorize(SkinnyDots {
            dots: &mut dots,
            a_rows: &a_rows,
            b_columns: &b_columns,
        });
        dots
    }

    /// `dots_at` at every vector level this CPU has, each named.
    fn at_every_level(a: &[f32], b: &[f32], k: usize) -> Vec<(&'static str, Vec<f32>)> {
        let mut levels = vec![("scalar", dots_at(pulp::Scalar::new(), a, b, k))];
        #[cfg(target_arch = "x86_64")]
        {
            if let Some(simd) = pulp::x86::V3::try_new() {
                levels.push(("avx2", dots_at(simd, a, b, k)));
            }
            if let Some(simd) = pulp::x86::V4::try_new() {
                levels.push(("avx512", dots_at(simd, a, b, k)));
            }
        }
        levels
    }

    /// Every tile shape (1, 2 and 4 rows, with rows and columns past the ends) and depths
    /// with and without a scalar tail agree with a float64 dot product to 1e-5 of the sum
    /// of the terms' magnitudes (f32 sums of at most 100 terms in [-1, 1)).
    #[test]
    fn dots_match_float64_at_every_vector_level() {
        let mut checked = 0;
        for (m, n, k) in [
            (1, 1, 1),
            (1, 13, 17),
            (2, 9, 16),
            (3, 8, 100),
            (5, 33, 15),
            (8, 7, 64),
            (32, 19, 33),
        ] {
            let (a, b) = (random(m * k, 3 + m as u64), random(n * k, 5 + n as u64));
            for (level, dots) in at_every_level(&a, &b, k) {
                for i in 0..m {
                    for j in 0..n {
                        let terms = (0..k).map(|p| a[i * k + p] as f64 * b[j * k + p] as f64);
                        let want: f64 = terms.clone().sum();
                        let scale: f64 = terms.map(f64::abs).sum();
                        let got = dots[i * n + j] as f64;
                        assert!(
                            (got - want).abs() <= 1e-5 * scale.max(1e-30),
                            "{level} {m}x{n}x{k} [{i}, {j}]: {got} against {want}"
                        );
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 1000);
    }

    /// An element is the same to the bit whether its row and column are computed alone or
    /// in a tile of any shape beside others.
    #[test]
    fn an_element_does_not_depend_on_its_tile() {
        let (m, n, k) = (7, 11, 37);
        let (a, b) = (random(m * k, 11), random(n * k, 12));
        let batched = at_every_level(&a, &b, k);
        for i in 0..m {
            for j in 0..n {
                let alone = at_every_level(&a[i * k..(i + 1) * k], &b[j * k..(j + 1) * k], k);
                for ((level, all), (_, one)) in batched.iter().zip(&alone) {
                    assert_eq!(
                        all[i * n + j].to_bits(),
                        one[0].to_bits(),
                        "{level} [{i}, {j}]"
                    );
                }
            }
        }
    }
}
