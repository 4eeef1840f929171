//! Whole-tensor elementwise operations: fill, copy, `+=`, scaling, and the sum of
//! squares behind the global gradient norm.

use rayon::prelude::*;

/// Elements handed to one rayon task by the elementwise loops (and the fixed blocks of
/// the sum-of-squares reduction, so its order never depends on threads).
pub(crate) const CHUNK: usize = 1 << 14;

/// The least rows of `width` elements one rayon task of a row loop takes: about
/// [`CHUNK`] elements. A loop with no more rows than that runs on the calling thread;
/// handing it to the pool parks a caller from outside the pool until a worker is done,
/// which costs more than a few thousand floats of work (decoding a few sequences is all
/// such loops).
pub(crate) fn min_rows(width: usize) -> usize {
    (CHUNK / width.max(1)).max(1)
}

/// dst[n] = value.
pub(crate) fn fill(dst: &mut [f32], value: f32) {
    dst.par_chunks_mut(CHUNK).for_each(|d| d.fill(value));
}

/// dst[n] = src[n].
pub(crate) fn copy(dst: &mut [f32], src: &[f32]) {
    dst.par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(d, s)| d.copy_from_slice(s));
}

/// dst[n] += src[n].
pub(crate) fn add_assign(dst: &mut [f32], src: &[f32]) {
    dst.par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(d, s)| d.iter_mut().zip(s).for_each(|(d, s)| *d += s));
}

/// dst[n] *= factor.
pub(crate) fn scale(dst: &mut [f32], factor: f32) {
    dst.par_chunks_mut(CHUNK)
        .for_each(|d| d.iter_mut().for_each(|d| *d *= factor));
}

/// sum of src[n]^2, accumulated in f64: each fixed block of [`CHUNK`] elements is
/// summed on its own, then the block sums in order.
pub(crate) fn sum_squares(src: &[f32]) -> f32 {
    let blocks: Vec<f64> = src
        .par_chunks(CHUNK)
        .map(|block| block.iter().map(|&x| f64::from(x) * f64::from(x)).sum())
        .collect();
    blocks.iter().sum::<f64>() as f32
}
