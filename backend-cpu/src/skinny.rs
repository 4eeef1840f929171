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
//! more rows two at a time against eight (the tile's columns stay in L1 while every
//! pair of rows passes over them, so `b` is read from memory once; four rows by four
//! columns, with half the streams in flight, decoded 3 to 16 SmolLM2 sequences 1.1-1.3x
//! slower). On a CPU with 16 vector registers (AVX2) the tiles are half as wide, and
//! more than two rows go four by two.
//!
//! The columns may also be bf16 (a frozen weight's copy in the bf16 precision): half
//! the bytes to stream, widened to f32 a tile at a time into a buffer that stays in
//! cache, then multiplied as f32 columns are.

use pulp::Simd;

/// A row or column split into whole vectors and the scalar tail.
type Split<'a, S> = (&'a [<S as Simd>::f32s], &'a [f32]);

/// The columns of `b`, every one `k` long.
#[derive(Clone, Copy)]
pub(crate) enum Columns<'a> {
    /// f32 columns.
    F32(&'a [&'a [f32]]),
    /// bf16 values (their bits) of a weight stored `[n, k]`: column `j` is
    /// `bits[j * k..(j + 1) * k]`. Each tile's columns are widened to f32 before its dot
    /// products, so a dot is the one of the f32 kernel on the rounded weight, to the bit.
    Bf16 {
        /// [n, k]
        bits: &'a [u16],
        /// The depth.
        k: usize,
    },
}

impl Columns<'_> {
    /// The number of columns.
    pub(crate) fn len(&self) -> usize {
        match self {
            Columns::F32(columns) => columns.len(),
            Columns::Bf16 { bits, k } => bits.len().checked_div(*k).unwrap_or(0),
        }
    }
}

/// dots[i, j] = a_rows[i] · b_columns[j], every row and column `k` long.
pub(crate) struct SkinnyDots<'a> {
    /// [m, n], row-major.
    pub(crate) dots: &'a mut [f32],
    /// m rows of k.
    pub(crate) a_rows: &'a [&'a [f32]],
    /// n columns of k.
    pub(crate) b_columns: Columns<'a>,
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
        if a_rows.is_empty() || b_columns.len() == 0 {
            return;
        }
        // Accumulators, the tile's column vectors and a row vector fit the registers.
        let wide = S::REGISTER_COUNT >= 32;
        match (a_rows.len(), wide) {
            (1, true) => column_tiles::<S, 1, 8>(simd, dots, a_rows, b_columns),
            (1, false) => column_tiles::<S, 1, 4>(simd, dots, a_rows, b_columns),
            (_, true) => column_tiles::<S, 2, 8>(simd, dots, a_rows, b_columns),
            (2, false) => column_tiles::<S, 2, 4>(simd, dots, a_rows, b_columns),
            (_, false) => column_tiles::<S, 4, 2>(simd, dots, a_rows, b_columns),
        }
    }
}

/// [`SkinnyDots`] in tiles of `C` columns, each against every row `R` rows at a time.
/// Columns past the end repeat the last column; their results are dropped.
#[inline(always)]
fn column_tiles<S: Simd, const R: usize, const C: usize>(
    simd: S,
    dots: &mut [f32],
    a_rows: &[&[f32]],
    b: Columns<'_>,
) {
    let n = b.len();
    let split_rows =
        || -> Vec<Split<'_, S>> { a_rows.iter().map(|row| S::as_simd_f32s(row)).collect() };
    match b {
        Columns::F32(columns) => {
            let a = split_rows();
            let b: Vec<Split<'_, S>> = columns.iter().map(|c| S::as_simd_f32s(c)).collect();
            for j0 in (0..n).step_by(C) {
                let tile = std::array::from_fn(|c| b[(j0 + c).min(n - 1)]);
                row_tiles::<S, R, C>(simd, dots, &a, tile, (j0, n));
            }
        }
        Columns::Bf16 { bits, k } => {
            let pairs: Option<Vec<&[u32]>> = (0..n)
                .map(|j| bytemuck::try_cast_slice(&bits[j * k..(j + 1) * k]).ok())
                .collect();
            match pairs {
                Some(pairs) if k % 2 == 0 => {
                    pair_column_tiles::<S, R, C>(simd, dots, a_rows, &pairs)
                }
                _ => widened_column_tiles::<S, R, C>(simd, dots, &split_rows(), bits, k),
            }
        }
    }
}

/// [`column_tiles`] of bf16 columns of any depth or alignment: each tile's columns
/// widened to f32 into a buffer that stays in cache, then multiplied as f32 columns.
#[inline(always)]
fn widened_column_tiles<S: Simd, const R: usize, const C: usize>(
    simd: S,
    dots: &mut [f32],
    a: &[Split<'_, S>],
    bits: &[u16],
    k: usize,
) {
    let n = bits.len() / k;
    // [C, k]: the tile's columns widened to f32 (exact: a bf16 is an f32's top half).
    let mut widened = vec![0.0f32; C * k];
    for j0 in (0..n).step_by(C) {
        let width = C.min(n - j0);
        let tile_bits = &bits[j0 * k..(j0 + width) * k];
        for (wide, &half) in widened.iter_mut().zip(tile_bits) {
            *wide = f32::from_bits(u32::from(half) << 16);
        }
        let tile = std::array::from_fn(|c| S::as_simd_f32s(&widened[c.min(width - 1) * k..][..k]));
        row_tiles::<S, R, C>(simd, dots, a, tile, (j0, n));
    }
}

/// [`column_tiles`] of bf16 columns of even depth that start on a 4-byte boundary, read
/// as 32-bit lanes each holding two depth steps (the even one in the low half): a
/// vector of lanes gives the even steps' f32 values by a shift and the odd steps' by a
/// mask, in registers, so the weight is streamed once at half the bytes. Each row of
/// `a` is first reordered to match: per block of a vector of lanes, its even steps, then
/// its odd. An element's sums run block by block (even, then odd), then the vector sum,
/// then the tail in order: the same whatever its tile.
#[inline(always)]
fn pair_column_tiles<S: Simd, const R: usize, const C: usize>(
    simd: S,
    dots: &mut [f32],
    a_rows: &[&[f32]],
    columns: &[&[u32]],
) {
    let (m, n) = (a_rows.len(), columns.len());
    let columns: Vec<(&[S::u32s], &[u32])> = columns.iter().map(|c| S::as_simd_u32s(c)).collect();
    let blocks = columns[0].0.len();
    let lanes = core::mem::size_of::<S::f32s>() / core::mem::size_of::<f32>();
    // [m, 2 * lanes * blocks]: each row's blocks, even steps first; then the tails.
    let width = 2 * lanes * blocks;
    let mut reordered = vec![0.0f32; m * width];
    if width > 0 {
        for (out, row) in reordered.chunks_exact_mut(width).zip(a_rows) {
            for (out, block) in out
                .chunks_exact_mut(2 * lanes)
                .zip(row.chunks_exact(2 * lanes))
            {
                let (even, odd) = out.split_at_mut(lanes);
                for (q, pair) in block.chunks_exact(2).enumerate() {
                    even[q] = pair[0];
                    odd[q] = pair[1];
                }
            }
        }
    }
    let a: Vec<Split<'_, S>> = (0..m)
        .map(|i| {
            let vectors = S::as_simd_f32s(&reordered[i * width..(i + 1) * width]).0;
            (vectors, &a_rows[i][width..])
        })
        .collect();
    let shift = simd.splat_u32s(16);
    let high_half = simd.splat_u32s(0xffff_0000);
    for j0 in (0..n).step_by(C) {
        let js: [usize; C] = std::array::from_fn(|c| (j0 + c).min(n - 1));
        let tile: [&[S::u32s]; C] = js.map(|j| &columns[j].0[..blocks]);
        for i0 in (0..m).step_by(R) {
            let is: [usize; R] = std::array::from_fn(|r| (i0 + r).min(m - 1));
            let rows: [&[S::f32s]; R] = is.map(|i| &a[i].0[..2 * blocks]);
            let mut acc = [[simd.splat_f32s(0.0); C]; R];
            // Plain loops: a closure here would not be compiled for the vector level,
            // and the shift and mask would become calls.
            let (mut even, mut odd) = ([simd.splat_f32s(0.0); C], [simd.splat_f32s(0.0); C]);
            for q in 0..blocks {
                for c in 0..C {
                    let pair = tile[c][q];
                    even[c] = simd.transmute_f32s_u32s(simd.wrapping_dyn_shl_u32s(pair, shift));
                    odd[c] = simd.transmute_f32s_u32s(simd.and_u32s(pair, high_half));
                }
                for (acc_row, row) in acc.iter_mut().zip(&rows) {
                    let (x_even, x_odd) = (row[2 * q], row[2 * q + 1]);
                    for c in 0..C {
                        acc_row[c] = simd.mul_add_f32s(x_even, even[c], acc_row[c]);
                        acc_row[c] = simd.mul_add_f32s(x_odd, odd[c], acc_row[c]);
                    }
                }
            }
            let column_tail = |c: usize| {
                columns[js[c]].1.iter().flat_map(|&pair| {
                    [
                        f32::from_bits(pair << 16),
                        f32::from_bits(pair & 0xffff_0000),
                    ]
                })
            };
            store_tile(simd, dots, &acc, &a, (i0, m), (j0, n), column_tail);
        }
    }
}

/// dots[i, j0 + c] = a[i] · tile[c] for every row, in register tiles of `R` rows by
/// the `C` columns of `tile` (columns `j0 + c >= n` are repeats and are not written).
/// Rows past the end repeat the last row; their results are dropped.
#[inline(always)]
fn row_tiles<S: Simd, const R: usize, const C: usize>(
    simd: S,
    dots: &mut [f32],
    a: &[Split<'_, S>],
    tile: [Split<'_, S>; C],
    (j0, n): (usize, usize),
) {
    let m = a.len();
    // Every row and column has the same k, so the same number of vectors.
    let len = tile[0].0.len();
    let columns: [&[S::f32s]; C] = tile.map(|column| &column.0[..len]);
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
        let column_tail = |c: usize| tile[c].1.iter().copied();
        store_tile(simd, dots, &acc, a, (i0, m), (j0, n), column_tail);
    }
}

/// dots[i0 + r, j0 + c] from the accumulators of a register tile: each one's vector
/// sum, then the scalar tails of its row of `a` and of its column (`column_tail(c)`),
/// in order. Rows `i0 + r >= m` and columns `j0 + c >= n` are repeats, not written.
#[inline(always)]
fn store_tile<S: Simd, const R: usize, const C: usize, T: Iterator<Item = f32>>(
    simd: S,
    dots: &mut [f32],
    acc: &[[S::f32s; C]; R],
    a: &[Split<'_, S>],
    (i0, m): (usize, usize),
    (j0, n): (usize, usize),
    column_tail: impl Fn(usize) -> T,
) {
    for (r, acc_row) in acc.iter().enumerate().take(m.saturating_sub(i0)) {
        let i = i0 + r;
        for (c, &acc_rc) in acc_row.iter().enumerate().take(n.saturating_sub(j0)) {
            let tail = a[i].1.iter().zip(column_tail(c));
            dots[i * n + j0 + c] = tail.fold(simd.reduce_sum_f32s(acc_rc), |t, (x, y)| t + x * y);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_inputs::random;

    /// dots[m, n] of `a` [m, k] and the columns `b` at vector level `simd`.
    fn columns_dots_at<S: Simd>(simd: S, a: &[f32], b: Columns<'_>, k: usize) -> Vec<f32> {
        let a_rows: Vec<&[f32]> = a.chunks_exact(k).collect();
        let mut dots = vec![f32::NAN; a_rows.len() * b.len()];
        simd.vectorize(SkinnyDots {
            dots: &mut dots,
            a_rows: &a_rows,
            b_columns: b,
        });
        dots
    }

    /// `columns_dots_at` at every vector level this CPU has, each named.
    fn columns_at_every_level(
        a: &[f32],
        b: Columns<'_>,
        k: usize,
    ) -> Vec<(&'static str, Vec<f32>)> {
        let mut levels = vec![("scalar", columns_dots_at(pulp::Scalar::new(), a, b, k))];
        #[cfg(target_arch = "x86_64")]
        {
            if let Some(simd) = pulp::x86::V3::try_new() {
                levels.push(("avx2", columns_dots_at(simd, a, b, k)));
            }
            if let Some(simd) = pulp::x86::V4::try_new() {
                levels.push(("avx512", columns_dots_at(simd, a, b, k)));
            }
        }
        levels
    }

    /// dots[m, n] of `a` [m, k] and the f32 `b` [n, k] at every vector level.
    fn at_every_level(a: &[f32], b: &[f32], k: usize) -> Vec<(&'static str, Vec<f32>)> {
        let columns: Vec<&[f32]> = b.chunks_exact(k).collect();
        columns_at_every_level(a, Columns::F32(&columns), k)
    }

    /// dots[m, n] of `a` [m, k] and the bf16 bits `b` [n, k] at every vector level.
    fn bf16_at_every_level(a: &[f32], b: &[u16], k: usize) -> Vec<(&'static str, Vec<f32>)> {
        columns_at_every_level(a, Columns::Bf16 { bits: b, k }, k)
    }

    /// Fails unless every dots[i, j] agrees with the float64 dot product of row i of
    /// `a` [m, k] and column j of `b` [n, k] to 1e-5 of the sum of the terms'
    /// magnitudes; returns how many it checked.
    fn check_against_float64(
        level: &str,
        dots: &[f32],
        a: &[f32],
        b: &[f32],
        (m, n, k): (usize, usize, usize),
    ) -> usize {
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
            }
        }
        m * n
    }

    /// Every tile shape (one row, two, and more, with rows and columns past the ends) and depths
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
                checked += check_against_float64(level, &dots, &a, &b, (m, n, k));
            }
        }
        assert!(checked > 1000);
    }

    /// bf16 bits of `len` random values, in a `u32`-backed buffer (4-byte aligned),
    /// and the same values widened to f32.
    fn random_bf16(len: usize, seed: u64) -> (Vec<u32>, Vec<f32>) {
        let halves: Vec<u16> = random(len, seed)
            .iter()
            .map(|&x| crate::bf16::bf16_bits(x) as u16)
            .collect();
        let mut lanes = vec![0u32; len.div_ceil(2) + 1];
        bytemuck::cast_slice_mut::<u32, u16>(&mut lanes)[..len].copy_from_slice(&halves);
        let widened = halves
            .iter()
            .map(|&h| f32::from_bits(u32::from(h) << 16))
            .collect();
        (lanes, widened)
    }

    /// bf16 columns that cannot be read as lanes of two (an odd depth, or a start off a
    /// 4-byte boundary) are widened a tile at a time: at every vector level and tile
    /// shape, the f32 kernel's dots of the widened columns, to the bit (the widening is
    /// exact and the sums run in the same order).
    #[test]
    fn widened_bf16_columns_match_the_f32_kernel_to_the_bit() {
        let mut checked = 0;
        for (m, n, k, misaligned) in [
            (1, 1, 1, false),
            (1, 13, 17, false),
            (2, 9, 16, true),
            (3, 8, 100, true),
            (5, 33, 15, false),
            (32, 19, 33, false),
        ] {
            let a = random(m * k, 7 + m as u64);
            let (lanes, widened) = random_bf16(n * k + 1, 9 + n as u64);
            let start = usize::from(misaligned);
            let bits = &bytemuck::cast_slice::<u32, u16>(&lanes)[start..start + n * k];
            let widened = &widened[start..start + n * k];
            for ((level, from_bits), (_, from_f32)) in bf16_at_every_level(&a, bits, k)
                .into_iter()
                .zip(at_every_level(&a, widened, k))
            {
                for (e, (x, y)) in from_bits.iter().zip(&from_f32).enumerate() {
                    assert_eq!(x.to_bits(), y.to_bits(), "{level} {m}x{n}x{k}: element {e}");
                    checked += 1;
                }
            }
        }
        assert!(checked > 1000);
    }

    /// Aligned bf16 columns of even depth, read as lanes of two: every tile shape and
    /// depths with and without whole blocks and a tail agree with a float64 dot product
    /// of the widened values to 1e-5 of the sum of the terms' magnitudes (f32 sums of at
    /// most 200 terms in [-1, 1)), and an element is the same to the bit computed alone.
    #[test]
    fn bf16_lanes_match_float64_and_do_not_depend_on_the_tile() {
        let mut checked = 0;
        for (m, n, k) in [
            (1, 1, 2),
            (1, 13, 64),
            (2, 9, 36),
            (3, 8, 100),
            (5, 33, 16),
            (32, 19, 200),
        ] {
            let a = random(m * k, 3 + m as u64);
            let (lanes, widened) = random_bf16(n * k, 5 + n as u64);
            let bits = &bytemuck::cast_slice::<u32, u16>(&lanes)[..n * k];
            let batched = bf16_at_every_level(&a, bits, k);
            for (level, dots) in &batched {
                checked += check_against_float64(level, dots, &a, &widened, (m, n, k));
            }
            let (i, j) = (m - 1, n / 2);
            let column = &bits[j * k..(j + 1) * k];
            let alone = bf16_at_every_level(&a[i * k..(i + 1) * k], column, k);
            for ((level, all), (_, one)) in batched.iter().zip(&alone) {
                assert_eq!(
                    all[i * n + j].to_bits(),
                    one[0].to_bits(),
                    "{level} {m}x{n}x{k}"
                );
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
