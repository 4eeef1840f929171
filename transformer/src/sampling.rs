//! Picking a token from one row of logits by the rules a backend may run on the device
//! ([`Kernels::choose_tokens`](crate::Kernels::choose_tokens)): the greedy choice, or a
//! draw from the temperature-scaled distribution, taken in id order at a given uniform
//! number. Written once, in f64, for the host path every backend can fall back on and
//! for the trainer's sampler, which adds top-k and top-p on top of the same pieces.

/// A token picked from a row of logits, and its log-probability under the unscaled
/// softmax of that row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenChoice {
    /// The token id.
    pub token: u32,
    /// `log softmax(logits)[token]`.
    pub logprob: f32,
}

/// The id of the highest logit, the lowest id among equals (-0 and +0 are equal).
pub fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (id, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = id;
        }
    }
    best
}

/// The unnormalised weight exp((logit - max) / temperature) of a logit, given the row's
/// maximum and 1 / temperature, in f64.
#[inline(always)]
pub fn scaled_weight(logit: f32, max: f32, inverse_temperature: f64) -> f64 {
    exp((f64::from(logit) - f64::from(max)) * inverse_temperature)
}

/// `e^x` in f64 to a few ulp (2^n · e^r with |r| <= ln2/2, e^r by its Taylor series to
/// the 13th power, whose remainder is below 1e-17 of it); 0 below -708 (where the true
/// value is a subnormal, under 3e-308), +inf above 709, NaN for NaN. Free of branches
/// and of calls, so a loop over a row of logits vectorises where `libm::exp`, a call
/// per value, does not.
#[inline(always)]
fn exp(x: f64) -> f64 {
    const LOG2E: f64 = core::f64::consts::LOG2_E;
    // ln 2 split so that n * LN2_HI is exact for |n| < 2^20.
    const LN2_HI: f64 = 6.931_471_803_691_238e-1;
    const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
    const LOWEST: f64 = -708.0;
    const HIGHEST: f64 = 709.0;
    // Adding 1.5 * 2^52 rounds to an integer n, held in the low mantissa bits.
    const ROUND: f64 = 6_755_399_441_055_744.0;
    let clamped = x.clamp(LOWEST, HIGHEST);
    let shifted = clamped * LOG2E + ROUND;
    let n = shifted - ROUND;
    let n_bits = shifted.to_bits().wrapping_sub(ROUND.to_bits()) as i64;
    let r = clamped - n * LN2_HI - n * LN2_LO;
    // Horner's rule over 1 / k!, k = 13 down to 2.
    let mut p = 1.0 / 6_227_020_800.0;
    p = p * r + 1.0 / 479_001_600.0;
    p = p * r + 1.0 / 39_916_800.0;
    p = p * r + 1.0 / 3_628_800.0;
    p = p * r + 1.0 / 362_880.0;
    p = p * r + 1.0 / 40_320.0;
    p = p * r + 1.0 / 5_040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    let poly = p * r * r + r + 1.0;
    // 2^n from its exponent bits; n is in [-1022, 1023].
    let two_n = f64::from_bits(((n_bits + 1023) << 52) as u64);
    let value = if x < LOWEST { 0.0 } else { poly * two_n };
    // A product rather than a branch: LLVM turns `if x > HIGHEST { inf } else { value }`
    // into a jump around the polynomial, and the loop no longer vectorises.
    value * if x > HIGHEST { f64::INFINITY } else { 1.0 }
}

/// Partial sums a long sum of a row is kept in: term i goes to partial i mod
/// `SUM_LANES`, the partials are added in order, then the terms past the last whole
/// group of `SUM_LANES`. A fixed order, whatever the vector width, that vectorises.
const SUM_LANES: usize = 8;

/// The sum of `term(x)` over `items`, in [`SUM_LANES`] partial sums. The terms are
/// computed a block at a time into a buffer and summed from it: a loop that only maps
/// vectorises where one that also adds into the partials does not.
#[inline(always)]
fn lane_sum<T: Copy>(items: &[T], term: impl Fn(T) -> f64) -> f64 {
    const BLOCK: usize = 64;
    let mut partials = [0.0f64; SUM_LANES];
    let mut terms = [0.0f64; BLOCK];
    let whole = items.len() - items.len() % SUM_LANES;
    for block in items[..whole].chunks(BLOCK) {
        let terms = &mut terms[..block.len()];
        for (t, &x) in terms.iter_mut().zip(block) {
            *t = term(x);
        }
        for group in terms.chunks_exact(SUM_LANES) {
            for (partial, &t) in partials.iter_mut().zip(group) {
                *partial += t;
            }
        }
    }
    let total = partials.iter().fold(0.0, |sum, &p| sum + p);
    items[whole..].iter().fold(total, |sum, &x| sum + term(x))
}

/// The index of `weights` (non-negative, finite, not all zero) whose interval of the
/// running sum, in index order, holds `unit` (in [0, 1)) times the total: index i is
/// drawn with probability `weights[i] / total`. `None` only when rounding leaves the
/// target past the last weight.
pub fn draw(weights: &[f64], unit: f64) -> Option<usize> {
    let total: f64 = weights.iter().sum();
    let target = unit * total;
    let mut cumulative = 0.0;
    weights.iter().position(|&w| {
        cumulative += w;
        cumulative > target
    })
}

/// `log softmax(row)[token]`, accumulated in f64.
#[inline(always)]
pub fn log_softmax_at(row: &[f32], token: usize) -> f64 {
    let max = f64::from(row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)));
    let sum = lane_sum(row, |x| exp(f64::from(x) - max));
    f64::from(row[token]) - max - libm::log(sum)
}

/// The token of `row` that [`Kernels::choose_tokens`](crate::Kernels::choose_tokens)
/// picks: [`argmax`] when `temperature` is 0, else the [`draw`] at `unit` from the
/// [`scaled_weight`]s (the last id when rounding runs past them). `None` when the row
/// is empty or holds a logit that is not finite.
///
/// At temperature 1 the weights are the terms of the log-softmax's sum, so their sum
/// gives the log-probability, to the bit what [`log_softmax_at`] gives, with one
/// exponential per logit instead of two.
#[inline(always)]
pub fn choose(row: &[f32], temperature: f32, unit: f64) -> Option<TokenChoice> {
    if row.is_empty() || !row.iter().all(|x| x.is_finite()) {
        return None;
    }
    let (token, logprob) = if temperature == 0.0 {
        let token = argmax(row);
        (token, log_softmax_at(row, token))
    } else {
        sample(row, temperature, unit)
    };
    Some(TokenChoice {
        token: token as u32,
        logprob: logprob as f32,
    })
}

/// [`choose`]'s draw from a row of finite logits at a temperature above 0, and the
/// drawn token's log-probability.
#[inline(always)]
fn sample(row: &[f32], temperature: f32, unit: f64) -> (usize, f64) {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    let inverse = 1.0 / f64::from(temperature);
    let weights: alloc::vec::Vec<f64> = row
        .iter()
        .map(|&x| scaled_weight(x, max, inverse))
        .collect();
    let token = draw(&weights, unit).unwrap_or(row.len() - 1);
    let logprob = if inverse == 1.0 {
        let total = lane_sum(&weights, |w| w);
        f64::from(row[token]) - f64::from(max) - libm::log(total)
    } else {
        log_softmax_at(row, token)
    };
    (token, logprob)
}

/// [`choose`]'s pick as the two numbers [`Kernels::choose_tokens`](crate::Kernels::choose_tokens)
/// writes for a row: the token id and its log-probability, or (-1, NaN) where the row
/// has no choice.
#[inline(always)]
pub fn choice_numbers(row: &[f32], temperature: f32, unit: f64) -> [f32; 2] {
    match choose(row, temperature, unit) {
        Some(choice) => [choice.token as f32, choice.logprob],
        None => [-1.0, f32::NAN],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The polynomial exponential within 4 ulp of libm's over the range the rule feeds
    /// it (logit minus the row's maximum, times 1 / temperature: 0 and below) and past
    /// it, on 200,001 points plus the ends; exactly 1 at 0, 0 below -708 and at -inf,
    /// +inf above 709, NaN for NaN. 4 ulp: the Taylor remainder is below 1e-17 and
    /// Horner's rounding adds a few; a wrong coefficient or reduction is off by far
    /// more.
    #[test]
    fn exp_is_libm_s_to_a_few_ulp() {
        let points = (0..=200_000)
            .map(|i| -720.0 + 730.0 * f64::from(i) / 200_000.0)
            .chain([-708.0, -1e-300, 1e-300, 0.5, 709.0]);
        for x in points {
            let (got, want) = (exp(x), libm::exp(x));
            if x < -708.0 {
                assert_eq!(got, 0.0, "{x}");
                continue;
            }
            let ulp = f64::from_bits(want.to_bits() + 1) - want;
            assert!(
                (got - want).abs() <= 4.0 * ulp,
                "exp({x}) = {got:e}, libm {want:e}"
            );
        }
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(f64::NEG_INFINITY), 0.0);
        assert_eq!(exp(710.0), f64::INFINITY);
        assert_eq!(exp(f64::INFINITY), f64::INFINITY);
        assert!(exp(f64::NAN).is_nan());
    }

    #[test]
    fn greedy_takes_the_lowest_of_equal_maxima_and_its_log_probability() {
        let row = [0.5, 2.0, -1.0, 2.0];
        let choice = choose(&row, 0.0, 0.99).unwrap();
        assert_eq!(choice.token, 1);
        let sum: f64 = row.iter().map(|&x| (f64::from(x) - 2.0).exp()).sum();
        assert!((f64::from(choice.logprob) + sum.ln()).abs() < 1e-6);
    }

    #[test]
    fn a_draw_walks_the_running_sum_in_id_order() {
        // Temperature 1 over logits ln 1, ln 2, ln 1: weights 0.5, 1, 0.5 of total 2.
        let row = [0.0, core::f32::consts::LN_2, 0.0];
        let token = |unit| choose(&row, 1.0, unit).unwrap().token;
        assert_eq!(
            [
                token(0.0),
                token(0.24),
                token(0.26),
                token(0.74),
                token(0.76)
            ],
            [0, 0, 1, 1, 2]
        );
        // A high temperature flattens the weights toward a third each.
        assert_eq!(choose(&row, 1000.0, 0.34).unwrap().token, 1);
    }

    /// At temperature 1 the log-probability comes from the draw's own weights: the
    /// same bits as [`log_softmax_at`] over rows of every spread (the reuse sums the
    /// same terms in the same order; a wrong term, order or maximum moves the last
    /// bits or more), and at another temperature it is still the unscaled one.
    #[test]
    fn the_log_probability_at_temperature_one_is_the_log_softmax_to_the_bit() {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32
        };
        for (rows, spread) in [(20, 1.0f32), (20, 8.0), (20, 40.0)] {
            for r in 0..rows {
                let row: alloc::vec::Vec<f32> =
                    (0..1000 + r).map(|_| (next() - 0.5) * spread).collect();
                let unit = f64::from(next());
                let at_one = choose(&row, 1.0, unit).unwrap();
                let expected = log_softmax_at(&row, at_one.token as usize) as f32;
                assert_eq!(
                    at_one.logprob.to_bits(),
                    expected.to_bits(),
                    "spread {spread}"
                );
                let hot = choose(&row, 1.7, unit).unwrap();
                let expected = log_softmax_at(&row, hot.token as usize) as f32;
                assert_eq!(hot.logprob.to_bits(), expected.to_bits(), "temperature 1.7");
            }
        }
    }

    #[test]
    fn a_row_with_a_non_finite_logit_has_no_choice() {
        assert_eq!(choose(&[0.0, f32::NAN], 1.0, 0.5), None);
        assert_eq!(choose(&[f32::INFINITY], 0.0, 0.5), None);
        assert_eq!(choose(&[], 0.0, 0.5), None);
    }
}
