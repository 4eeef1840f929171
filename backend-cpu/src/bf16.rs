//! The bf16 arithmetic of the packed GEMM ([`Precision::Bf16`](crate::Precision)):
//! operands rounded to bf16 (to nearest, ties to even) as they are packed, products
//! summed in f32.
//!
//! Where the CPU has AVX-512 BF16 (Zen 4 and later, Cooper Lake and Sapphire Rapids
//! and later), a packed panel holds pairs of bf16 values, two depth steps in each
//! 32-bit lane, and the micro-kernel is one `vdpbf16ps` per pair of depth steps: twice
//! the multiply-adds of an f32 FMA per instruction. That instruction adds the pair's
//! second product to the sum first, then its first, each product exact and each sum
//! rounded to f32 (measured on Zen 4: bit-equal to two FMAs in that order on 100,000
//! random pairs). Elsewhere a panel holds the rounded values as f32 with each pair's
//! two depth steps swapped, and the f32 micro-kernel computes the same sums in the same
//! order, so both give the same bits (but for subnormals, which the instruction reads
//! as zero).
//!
//! The one `unsafe` of this crate is here: the call into the kernel compiled for
//! AVX-512 BF16, made only after the CPU said it has it.
#![allow(unsafe_code)]

/// Columns of one micro-tile of the AVX-512 BF16 kernel (two vectors of 16 floats).
pub(crate) const TILE_COLUMNS: usize = 32;

/// The bits of `x` rounded to bf16, to nearest with ties to even (a NaN stays a quiet
/// NaN), in the low half. Branch-free, so that packing loops vectorise.
#[inline(always)]
pub(crate) fn bf16_bits(x: f32) -> u32 {
    let bits = x.to_bits();
    // Wraps only for NaNs with a high payload, whose result the select below discards.
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16;
    let nan = (bits >> 16) | 0x40;
    if bits & 0x7fff_ffff > 0x7f80_0000 {
        nan
    } else {
        rounded
    }
}

/// `x` rounded to bf16, as the f32 of the same value.
#[inline(always)]
pub(crate) fn round_to_bf16(x: f32) -> f32 {
    f32::from_bits(bf16_bits(x) << 16)
}

/// One lane of the pair layout: `low` (depth step 2q) and `high` (step 2q + 1) rounded
/// to bf16, in the low and the high half of a 32-bit lane.
#[inline(always)]
pub(crate) fn pair(low: f32, high: f32) -> f32 {
    f32::from_bits(bf16_bits(high) << 16 | bf16_bits(low))
}

/// Rewrites a packed panel `[depth][width]` of f32 as `[depth / 2, rounded up][width]`
/// lanes of two bf16 values ([`pair`]: zero past the depth), at the front of the same
/// slice. Inlined, so that it vectorises at its caller's vector level.
#[inline(always)]
pub(crate) fn into_pairs(panel: &mut [f32], width: usize, depth: usize) {
    for q in 0..depth.div_ceil(2) {
        let has_high = 2 * q + 1 < depth;
        if q == 0 {
            let (lanes, rest) = panel.split_at_mut(width);
            if has_high {
                for (lane, &high) in lanes.iter_mut().zip(&rest[..width]) {
                    *lane = pair(*lane, high);
                }
            } else {
                lanes.iter_mut().for_each(|lane| *lane = pair(*lane, 0.0));
            }
        } else {
            // Lane row q goes where depth step q was, which an earlier lane row read.
            let (front, back) = panel.split_at_mut(2 * q * width);
            let lanes = &mut front[q * width..(q + 1) * width];
            if has_high {
                let (low, high) = back[..2 * width].split_at(width);
                for ((lane, &low), &high) in lanes.iter_mut().zip(low).zip(high) {
                    *lane = pair(low, high);
                }
            } else {
                for (lane, &low) in lanes.iter_mut().zip(&back[..width]) {
                    *lane = pair(low, 0.0);
                }
            }
        }
    }
}

/// Rounds a packed panel `[depth][width]` to bf16 in place and swaps the depth steps of
/// each pair (2q + 1 before 2q), so that the f32 micro-kernel sums in the order of
/// `vdpbf16ps`. Inlined, as [`into_pairs`] is.
#[inline(always)]
pub(crate) fn into_swapped_pairs(panel: &mut [f32], width: usize, depth: usize) {
    panel[..depth * width]
        .iter_mut()
        .for_each(|x| *x = round_to_bf16(*x));
    for q in 0..depth / 2 {
        let (first, second) = panel[2 * q * width..(2 * q + 2) * width].split_at_mut(width);
        first.swap_with_slice(second);
    }
}

/// Proof that this CPU has AVX-512 BF16: the only way to the kernel compiled for it.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, Debug)]
pub(crate) struct DotInstruction(());

/// Proof that this CPU has AVX-512 BF16: none exists off x86-64.
#[cfg(not(target_arch = "x86_64"))]
#[derive(Clone, Copy, Debug)]
pub(crate) enum DotInstruction {}

impl DotInstruction {
    /// The proof, where the CPU has AVX-512 BF16.
    pub(crate) fn detect() -> Option<DotInstruction> {
        #[cfg(target_arch = "x86_64")]
        {
            let has = std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bf16");
            has.then_some(DotInstruction(()))
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            None
        }
    }

    /// The sums of one `MR x 32` tile from panels in [`into_pairs`]' layout: `a` holds
    /// lanes of MR rows, `b` as many lanes of 32 columns.
    pub(crate) fn tile<const MR: usize>(
        self,
        a: &[[f32; MR]],
        b: &[[f32; TILE_COLUMNS]],
    ) -> [[f32; TILE_COLUMNS]; MR] {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: `self` exists only where the CPU has the features `dot_tile` is
            // compiled for, and `dot_tile` reads only through references.
            unsafe { dot_tile(a, b) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (a, b);
            match self {}
        }
    }
}

/// The micro-kernel of [`DotInstruction::tile`]: tile[r][j] = sum over lanes q of
/// `a[q][r] . b[q][j]`, each a two-term bf16 dot product, in order of q.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
fn dot_tile<const MR: usize>(
    a: &[[f32; MR]],
    b: &[[f32; TILE_COLUMNS]],
) -> [[f32; TILE_COLUMNS]; MR] {
    use std::arch::x86_64::{
        __m512, __m512bh, _mm512_dpbf16_ps, _mm512_loadu_ps, _mm512_set1_ps, _mm512_setzero_ps,
        _mm512_storeu_ps,
    };

    /// A vector's 16 lanes as 32 bf16 values.
    fn as_bf16(lanes: __m512) -> __m512bh {
        // SAFETY: both are 64 bytes of plain data, any bits valid in either.
        unsafe { std::mem::transmute::<__m512, __m512bh>(lanes) }
    }
    let mut tile = [[_mm512_setzero_ps(); 2]; MR];
    for (a_q, b_q) in a.iter().zip(b) {
        // SAFETY: each load reads 16 floats of the 32 in `b_q`.
        let b_q = unsafe {
            [
                as_bf16(_mm512_loadu_ps(b_q.as_ptr())),
                as_bf16(_mm512_loadu_ps(b_q.as_ptr().add(16))),
            ]
        };
        for (row, &pair) in tile.iter_mut().zip(a_q) {
            let pair = as_bf16(_mm512_set1_ps(pair));
            row[0] = _mm512_dpbf16_ps(row[0], pair, b_q[0]);
            row[1] = _mm512_dpbf16_ps(row[1], pair, b_q[1]);
        }
    }
    let mut sums = [[0.0f32; TILE_COLUMNS]; MR];
    for (out, row) in sums.iter_mut().zip(&tile) {
        // SAFETY: each store writes 16 floats of the 32 in `out`.
        unsafe {
            _mm512_storeu_ps(out.as_mut_ptr(), row[0]);
            _mm512_storeu_ps(out.as_mut_ptr().add(16), row[1]);
        }
    }
    sums
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_inputs::random;

    /// Ties go to the even neighbour, halfway cases in both directions, and values
    /// already in bf16 stay as they are.
    #[test]
    fn rounds_to_nearest_even() {
        let cases = [
            (0x3f80_0000, 0x3f80), // 1.0, exact
            (0x3f80_8000, 0x3f80), // a tie, to even (down)
            (0x3f81_8000, 0x3f82), // a tie, to even (up)
            (0x3f80_8001, 0x3f81), // just past the tie
            (0xbf80_7fff, 0xbf80), // just below the tie, negative
            (0x7f7f_ffff, 0x7f80), // the largest f32 rounds to infinity
            (0xff80_0000, 0xff80), // -infinity stays
        ];
        for (bits, rounded) in cases {
            assert_eq!(bf16_bits(f32::from_bits(bits)), rounded, "{bits:#x}");
        }
        assert!(round_to_bf16(f32::NAN).is_nan());
        // A NaN whose payload sits only in the low half stays a NaN, and one whose
        // rounding would carry past the top bit too.
        assert!(round_to_bf16(f32::from_bits(0x7f80_0001)).is_nan());
        assert!(round_to_bf16(f32::from_bits(0xffff_ffff)).is_nan());
        for x in random(10_000, 5) {
            let x = x * 1e3;
            assert_eq!(
                bf16_bits(x),
                u32::from(half::bf16::from_f32(x).to_bits()),
                "{x}"
            );
        }
    }

    /// The pair layout holds each column's depth steps two to a lane, low half first,
    /// the odd last step paired with zero.
    #[test]
    fn pairs_hold_two_depth_steps_a_lane() {
        let (width, depth) = (3, 5);
        let values = random(width * depth, 3);
        let mut panel = values.clone();
        into_pairs(&mut panel, width, depth);
        for q in 0..3 {
            for j in 0..width {
                let bits = panel[q * width + j].to_bits();
                let low = f32::from_bits(bits << 16);
                let high = f32::from_bits(bits & 0xffff_0000);
                assert_eq!(low, round_to_bf16(values[2 * q * width + j]));
                let second = if 2 * q + 1 < depth {
                    round_to_bf16(values[(2 * q + 1) * width + j])
                } else {
                    0.0
                };
                assert_eq!(high, second);
            }
        }
    }

    /// The AVX-512 BF16 kernel and the swapped f32 order give the same bits, on an even
    /// and an odd depth (where the CPU has the instruction).
    #[test]
    fn the_dot_instruction_sums_in_the_swapped_order() {
        const MR: usize = 4;
        for depth in [7, 64] {
            let a = random(depth * MR, 11);
            let b = random(depth * TILE_COLUMNS, 12);
            let mut a_pairs = a.clone();
            let mut b_pairs = b.clone();
            into_pairs(&mut a_pairs, MR, depth);
            into_pairs(&mut b_pairs, TILE_COLUMNS, depth);
            let lanes = depth.div_ceil(2);
            let a_lanes = a_pairs[..lanes * MR].as_chunks::<MR>().0;
            let b_lanes = b_pairs[..lanes * TILE_COLUMNS]
                .as_chunks::<TILE_COLUMNS>()
                .0;
            let Some(dot) = DotInstruction::detect() else {
                eprintln!("SKIPPED: this CPU has no AVX-512 BF16");
                return;
            };
            let tile = dot.tile(a_lanes, b_lanes);
            let (mut a_swapped, mut b_swapped) = (a, b);
            into_swapped_pairs(&mut a_swapped, MR, depth);
            into_swapped_pairs(&mut b_swapped, TILE_COLUMNS, depth);
            for (r, row) in tile.iter().enumerate() {
                for (j, &value) in row.iter().enumerate() {
                    let sum = (0..depth).fold(0.0f32, |sum, p| {
                        a_swapped[p * MR + r].mul_add(b_swapped[p * TILE_COLUMNS + j], sum)
                    });
                    assert_eq!(value.to_bits(), sum.to_bits(), "depth {depth} [{r}][{j}]");
                }
            }
        }
    }
}
