//! Shared test helpers: a seeded random source, a thin host-side wrapper around the
//! backend's buffers, the finite-difference gradient check, and rayon pools of a given
//! size.
#![allow(dead_code)]

use sage_backend_cpu::CpuBackend;
use sage_transformer::{Indices, Kernels, Tensor};

/// xorshift64*: a small seeded generator, so every test draws the same fresh inputs.
pub struct Rng(u64);

impl Rng {
    /// A generator from a nonzero seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `len` values uniform in [-scale, scale), never all zero.
    pub fn vec(&mut self, len: usize, scale: f32) -> Vec<f32> {
        (0..len)
            .map(|_| ((self.unit() * 2.0 - 1.0) * f64::from(scale)) as f32)
            .collect()
    }

    /// `len` integers uniform in [0, below).
    pub fn ints(&mut self, len: usize, below: u32) -> Vec<u32> {
        (0..len)
            .map(|_| (self.unit() * f64::from(below)) as u32)
            .collect()
    }
}

/// Allocates one buffer holding `data`.
pub fn upload(backend: &mut CpuBackend, data: &[f32]) -> Tensor {
    let buffer = backend.alloc(data.len()).unwrap();
    let tensor = Tensor::whole(buffer, data.len());
    backend.write(tensor, data).unwrap();
    tensor
}

/// Allocates one index buffer holding `data`.
pub fn upload_indices(backend: &mut CpuBackend, data: &[u32]) -> Indices {
    let buffer = backend.alloc_indices(data.len()).unwrap();
    let indices = Indices::whole(buffer, data.len());
    backend.write_indices(indices, data).unwrap();
    indices
}

/// The contents of `tensor`.
pub fn download(backend: &mut CpuBackend, tensor: Tensor) -> Vec<f32> {
    let mut out = vec![0.0; tensor.len];
    backend.read(tensor, &mut out).unwrap();
    out
}

/// sum_i r[i] * out[i] in f64: the random linear functional whose gradient is checked.
pub fn functional(r: &[f32], out: &[f32]) -> f64 {
    r.iter()
        .zip(out)
        .map(|(&a, &b)| f64::from(a) * f64::from(b))
        .sum()
}

/// Finite-difference step. With f32 forwards, rounding in L is about 6e-8 |L|, which a
/// central difference over 2h = 2e-2 turns into ~3e-6 |L| of noise, while the
/// truncation error h^2/6 f''' stays near 2e-5 for these smooth, O(1) functions.
pub const STEP: f32 = 1e-2;

/// Relative part of the gradient tolerance. Measured on these tests, the worst relative
/// error of a large entry is 8e-4 (attention's dk, where L sums 2560 terms and its f32
/// rounding dominates); 3e-3 keeps a margin while an error of 1% in a kernel fails.
pub const RELATIVE: f64 = 3e-3;

/// Absolute floor of the tolerance, as a fraction of the largest gradient entry: it
/// absorbs the rounding noise of L on entries much smaller than the rest (measured
/// worst: 9e-5 of the largest entry).
pub const FLOOR: f64 = 3e-4;

/// Checks `analytic`, the gradient of `loss` at `x`, against central differences of
/// `loss` (evaluated in f32 by the backend, summed in f64):
/// |analytic - fd| <= RELATIVE |fd| + FLOOR max|fd| element by element.
pub fn check_gradient(
    name: &str,
    x: &[f32],
    analytic: &[f32],
    mut loss: impl FnMut(&[f32]) -> f64,
) {
    assert_eq!(x.len(), analytic.len(), "{name}: gradient length");
    let mut probe = x.to_vec();
    let numeric: Vec<f64> = (0..x.len())
        .map(|i| {
            let (up, down) = (x[i] + STEP, x[i] - STEP);
            probe[i] = up;
            let loss_up = loss(&probe);
            probe[i] = down;
            let loss_down = loss(&probe);
            probe[i] = x[i];
            (loss_up - loss_down) / (f64::from(up) - f64::from(down))
        })
        .collect();
    let largest = numeric.iter().fold(0.0f64, |m, g| m.max(g.abs()));
    assert!(
        largest > 0.0,
        "{name}: the gradient is identically zero, the test is vacuous"
    );
    for (i, (&fd, &a)) in numeric.iter().zip(analytic).enumerate() {
        let tolerance = RELATIVE * fd.abs() + FLOOR * largest;
        assert!(
            (f64::from(a) - fd).abs() <= tolerance,
            "{name}[{i}]: analytic {a}, finite difference {fd} (tolerance {tolerance:e})"
        );
    }
}

/// Asserts |got - want| <= tol * max(|want|, 1e-2 max|want|) element by element: the
/// floor keeps entries that cancel to near zero from demanding more than f32 gives.
pub fn assert_close(name: &str, got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{name}: length");
    let largest = want.iter().fold(0.0f64, |m, w| m.max(w.abs()));
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let scale = w.abs().max(1e-2 * largest).max(f64::MIN_POSITIVE);
        assert!(
            (f64::from(g) - w).abs() <= tol * scale,
            "{name}[{i}]: got {g}, want {w} (relative tolerance {tol:e})"
        );
    }
}

/// Asserts |got - want| <= tol * magnitude element by element, where `magnitude[i]` is
/// the sum of the absolute values of the terms summed into want[i]: the error bound of
/// a floating-point sum, which stays meaningful where the terms cancel.
pub fn assert_close_to_magnitude(
    name: &str,
    got: &[f32],
    want: &[f64],
    magnitude: &[f64],
    tol: f64,
) {
    assert_eq!(got.len(), want.len(), "{name}: length");
    for (i, ((&g, &w), &size)) in got.iter().zip(want).zip(magnitude).enumerate() {
        assert!(
            (f64::from(g) - w).abs() <= tol * size.max(f64::MIN_POSITIVE),
            "{name}[{i}]: got {g}, want {w} (tolerance {tol:e} of the terms' magnitude {size})"
        );
    }
}

/// `f` on a rayon pool of `threads` threads.
pub fn on_threads<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    pool.install(f)
}
