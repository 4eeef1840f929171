//! Scalar building blocks shared by the kernels, written so the compiler vectorises
//! them: a polynomial `exp`, dot products / sums with fixed lane accumulators (a fixed
//! summation order, so results never depend on threads), and softmax rows run through
//! [`vectorized`], which compiles them for AVX2 where the CPU has it.

/// Lanes of the accumulators below: one AVX register of `f32`, two SSE registers.
const LANES: usize = 8;

/// `e^x` to about 1 ulp for finite `x` (Cephes-style: 2^n · p(r) with |r| <= ln2/2);
/// 0 below -87.3 (including -inf), +inf above 88.3 (where the true value is already
/// above 2e38), NaN for NaN. Free of branches and float-to-int casts, so loops over it
/// vectorise, unlike `f32::exp`.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const LOWEST: f32 = -87.3;
    const HIGHEST: f32 = 88.3;
    // Adding 1.5 * 2^23 rounds to an integer n, held in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    let clamped = x.clamp(LOWEST, HIGHEST);
    let shifted = clamped * LOG2E + ROUND;
    let n = shifted - ROUND;
    let n_bits = shifted.to_bits().wrapping_sub(ROUND.to_bits()) as i32;
    let r = clamped - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4_f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let poly = p * r * r + r + 1.0;
    // 2^n from its exponent bits; n is in [-126, 127].
    let two_n = f32::from_bits(((n_bits + 127) << 23) as u32);
    let value = poly * two_n;
    let value = if x < LOWEST { 0.0 } else { value };
    if x > HIGHEST {
        f32::INFINITY
    } else {
        value
    }
}

/// The logistic function 1 / (1 + e^-x).
#[inline(always)]
pub(crate) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// `sum_i a[i] * b[i]` over the common length, in a fixed order.
#[inline]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let len = a.len().min(b.len());
    let (a, b) = (&a[..len], &b[..len]);
    let mut acc = [0.0f32; LANES];
    let (a_body, a_tail) = a.split_at(len - len % LANES);
    let (b_body, b_tail) = b.split_at(len - len % LANES);
    for (x, y) in a_body.chunks_exact(LANES).zip(b_body.chunks_exact(LANES)) {
        for lane in 0..LANES {
            acc[lane] += x[lane] * y[lane];
        }
    }
    let mut total = reduce(acc);
    for (x, y) in a_tail.iter().zip(b_tail) {
        total += x * y;
    }
    total
}

/// `sum_i a[i] * b[i] * c[i]` over the common length, in a fixed order.
#[inline]
pub(crate) fn dot3(a: &[f32], b: &[f32], c: &[f32]) -> f32 {
    let len = a.len().min(b.len()).min(c.len());
    let body = len - len % LANES;
    let mut acc = [0.0f32; LANES];
    let lanes = a[..body]
        .chunks_exact(LANES)
        .zip(b[..body].chunks_exact(LANES));
    for ((x, y), z) in lanes.zip(c[..body].chunks_exact(LANES)) {
        for lane in 0..LANES {
            acc[lane] += x[lane] * y[lane] * z[lane];
        }
    }
    let tail = a[body..len].iter().zip(&b[body..len]).zip(&c[body..len]);
    tail.fold(reduce(acc), |total, ((x, y), z)| total + x * y * z)
}

/// `sum_i a[i]^2`, in a fixed order.
#[inline]
pub(crate) fn sum_squares(a: &[f32]) -> f32 {
    dot(a, a)
}

/// The largest element (-inf for none), in a fixed order.
#[inline]
pub(crate) fn max(a: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let body = a.len() - a.len() % LANES;
    for x in a[..body].chunks_exact(LANES) {
        for lane in 0..LANES {
            acc[lane] = acc[lane].max(x[lane]);
        }
    }
    a[body..].iter().fold(
        acc.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)),
        |m, &x| m.max(x),
    )
}

/// Runs `op` compiled for the widest vector instructions the CPU offers (AVX2 where
/// present, through pulp's run-time dispatch): the loops of its `#[inline(always)]` body
/// vectorise with them. Results do not depend on the path taken: only the number of
/// lanes processed at once changes, never the operations or their order.
#[inline]
pub(crate) fn vectorized<Op: pulp::WithSimd>(op: Op) -> Op::Output {
    pulp::Arch::new().dispatch(op)
}

/// Replaces each a[i] by e^(a[i] - shift) and returns their sum, in a fixed order.
#[inline]
pub(crate) fn exp_sum_in_place(a: &mut [f32], shift: f32) -> f32 {
    vectorized(ExpSum(a, shift))
}

/// [`exp_sum_in_place`] as a vectorised operation.
struct ExpSum<'a>(&'a mut [f32], f32);

impl pulp::WithSimd for ExpSum<'_> {
    type Output = f32;

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) -> f32 {
        let ExpSum(a, shift) = self;
        let mut acc = [0.0f32; LANES];
        let body = a.len() - a.len() % LANES;
        let (head, tail) = a.split_at_mut(body);
        for x in head.chunks_exact_mut(LANES) {
            for lane in 0..LANES {
                x[lane] = exp(x[lane] - shift);
                acc[lane] += x[lane];
            }
        }
        let mut total = reduce(acc);
        for x in tail {
            *x = exp(*x - shift);
            total += *x;
        }
        total
    }
}

/// Replaces each a[i] by factor * e^(a[i] - shift).
#[inline]
pub(crate) fn scaled_exp_in_place(a: &mut [f32], shift: f32, factor: f32) {
    vectorized(ScaledExp(a, shift, factor));
}

/// [`scaled_exp_in_place`] as a vectorised operation.
struct ScaledExp<'a>(&'a mut [f32], f32, f32);

impl pulp::WithSimd for ScaledExp<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let ScaledExp(a, shift, factor) = self;
        for x in a.iter_mut() {
            *x = factor * exp(*x - shift);
        }
    }
}

/// From scaled scores `p` and the gradient `ds` of their softmax probabilities (held
/// in the same places): p[i] = e^(p[i] - lse), then ds[i] = p[i] * (ds[i] - delta),
/// the gradient of the scores, where delta = sum_i p[i] * ds[i] (computed elsewhere).
#[inline]
pub(crate) fn softmax_backward_in_place(p: &mut [f32], ds: &mut [f32], lse: f32, delta: f32) {
    vectorized(SoftmaxBackward(p, ds, lse, delta));
}

/// [`softmax_backward_in_place`] as a vectorised operation.
struct SoftmaxBackward<'a>(&'a mut [f32], &'a mut [f32], f32, f32);

impl pulp::WithSimd for SoftmaxBackward<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let SoftmaxBackward(p, ds, lse, delta) = self;
        for (p, ds) in p.iter_mut().zip(ds.iter_mut()) {
            *p = exp(*p - lse);
            *ds = *p * (*ds - delta);
        }
    }
}

/// `y += alpha * x` over the common length.
#[inline]
pub(crate) fn axpy(y: &mut [f32], alpha: f32, x: &[f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += alpha * x;
    }
}

/// The lanes of an accumulator added pairwise.
#[inline(always)]
fn reduce(acc: [f32; LANES]) -> f32 {
    let quad = [
        acc[0] + acc[4],
        acc[1] + acc[5],
        acc[2] + acc[6],
        acc[3] + acc[7],
    ];
    (quad[0] + quad[2]) + (quad[1] + quad[3])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_matches_std_to_a_few_ulp() {
        let mut x = -90.0f32;
        while x < 88.0 {
            let (got, want) = (exp(x), x.exp());
            let tolerance = 4.0 * f32::EPSILON * want + f32::MIN_POSITIVE;
            assert!(
                (got - want).abs() <= tolerance || (x < -87.0 && got < 1e-37),
                "exp({x}) = {got}, std says {want}"
            );
            x += 0.0137;
        }
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(f32::NAN).is_nan());
    }

    #[test]
    fn dot_covers_the_tail() {
        let a: Vec<f32> = (0..19).map(|i| i as f32).collect();
        let want: f32 = a.iter().map(|x| x * x).sum();
        assert_eq!(dot(&a, &a), want);
        let want: f32 = a.iter().map(|x| x * x * x).sum();
        assert_eq!(dot3(&a, &a, &a), want);
    }
}
