//! The loss of each token and its derivative with respect to the token's log-prob: the
//! clipped surrogate (with optional dual clip) plus the optional k3 KL term. This is
//! the innermost step of [`policy_loss`](super::policy_loss).
//!
//! Tokens are processed in chunks of [`CHUNK`], in three passes so that two of them
//! vectorise: loading (log-differences, clamped, masked positions zeroed), the `exp`s
//! (a branch-free polynomial, [`exp_reduced`], so this pass vectorises too), and the
//! branch-free surrogate arithmetic over lanes of [`LANES`] tokens with one
//! accumulator per lane.

use super::GrpoConfig;

/// Tokens per chunk (a multiple of [`LANES`]).
pub(crate) const CHUNK: usize = 256;
/// Tokens per lane group of the arithmetic pass.
const LANES: usize = 8;

/// Per-token constants derived from a validated [`GrpoConfig`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct TokenParams {
    /// Lower clip bound of the ratio, `1 - eps_low`.
    low: f32,
    /// Upper clip bound of the ratio, `1 + eps_high`.
    high: f32,
    /// Dual clip constant.
    dual: Option<f32>,
    /// KL weight.
    beta: f32,
    /// Clamp of log-differences before `exp`.
    max_log: f32,
}

impl TokenParams {
    /// The constants of `config`, which must have been validated.
    pub(crate) fn new(config: &GrpoConfig) -> Self {
        TokenParams {
            low: 1.0 - config.clip_eps_low,
            high: 1.0 + config.clip_eps_high,
            dual: config.dual_clip,
            beta: config.kl_coef,
            max_log: config.max_log_ratio,
        }
    }
}

/// Sums over the unmasked tokens of a chunk; the counts are exact (at most [`CHUNK`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Sums {
    /// Token losses.
    pub(crate) loss: f32,
    /// Ratios.
    pub(crate) ratio: f32,
    /// `ratio - 1 - ln(ratio)`.
    pub(crate) approx_kl: f32,
    /// k3 KL to the reference.
    pub(crate) ref_kl: f32,
    /// Tokens on the clipped branch.
    pub(crate) clipped: f32,
    /// Tokens capped by the dual clip.
    pub(crate) dual_clipped: f32,
}

/// One chunk's inputs, reduced to what the arithmetic pass reads. Masked and padding
/// positions hold neutral finite values, so their (discarded) arithmetic stays finite.
#[derive(Clone, Debug)]
pub(crate) struct Chunk {
    /// 1 for an unmasked token, 0 otherwise.
    mask: [f32; CHUNK],
    /// `logp - logp_old`, unclamped.
    log_ratio: [f32; CHUNK],
    /// The clamped log-ratio, then (after the `exp` pass) the ratio.
    ratio: [f32; CHUNK],
    /// `logp_ref - logp`, unclamped.
    ref_diff: [f32; CHUNK],
    /// The clamped reference difference, then its `exp`.
    ref_exp: [f32; CHUNK],
}

/// `x` clamped to `[-m, m]`, NaN kept as NaN.
#[inline(always)]
fn clamp_log(x: f32, m: f32) -> f32 {
    if x > m {
        m
    } else if x < -m {
        -m
    } else {
        x
    }
}

/// `e^x` for `|x| <= 87`, within 2 ulp of the exact value and exactly 1 at 0, written
/// without branches or calls so that a loop over it vectorises (which `libm::expf`
/// does not). `x = n ln 2 + r` with `|r| <= ln 2 / 2` (ln 2 split in two parts so the
/// reduction is exact), `e^r` by its Taylor polynomial of degree 7 (truncation error
/// below `r^8 / 8! < 5e-9` relative), and `2^n` built from its exponent bits.
#[inline(always)]
fn exp_reduced(x: f32) -> f32 {
    const LOG2_E: f32 = core::f32::consts::LOG2_E;
    const LN2_HIGH: f32 = 0.693_359_4;
    const LN2_LOW: f32 = -2.121_944_4e-4;
    // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer in plain f32
    // arithmetic (valid far beyond |x log2 e| <= 126).
    const ROUND: f32 = 12_582_912.0;
    let n = (x * LOG2_E + ROUND) - ROUND;
    let r = (x - n * LN2_HIGH) - n * LN2_LOW;
    let poly = 1.0
        + r * (1.0
            + r * (1.0 / 2.0
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    let two_to_n = f32::from_bits(((n as i32 + 127) as u32) << 23);
    poly * two_to_n
}

/// Replaces every exponent (already clamped to `[-80, 80]`) by its `exp`.
fn exp_in_place(values: &mut [f32; CHUNK]) {
    for v in values {
        *v = exp_reduced(*v);
    }
}

impl Chunk {
    /// An empty chunk (every position masked).
    pub(crate) fn new() -> Self {
        Chunk {
            mask: [0.0; CHUNK],
            log_ratio: [0.0; CHUNK],
            ratio: [1.0; CHUNK],
            ref_diff: [0.0; CHUNK],
            ref_exp: [1.0; CHUNK],
        }
    }

    /// Loads up to [`CHUNK`] positions (all slices of one length) and computes their
    /// `exp`s; the rest of the chunk is masked. With `KL` unset `logp_ref` is not read
    /// and the reference arrays keep their neutral values.
    pub(crate) fn load<const KL: bool>(
        &mut self,
        p: &TokenParams,
        logp: &[f32],
        logp_old: &[f32],
        logp_ref: &[f32],
        mask: &[bool],
    ) {
        let n = CHUNK
            .min(logp.len())
            .min(logp_old.len())
            .min(logp_ref.len())
            .min(mask.len());
        let (logp, logp_old, logp_ref, mask) =
            (&logp[..n], &logp_old[..n], &logp_ref[..n], &mask[..n]);
        // Vectorisable pass: masked positions become exactly 0 through a bit mask (a
        // select would keep a NaN there out of `0 * NaN`).
        for i in 0..n {
            let keep = u32::from(mask[i]).wrapping_neg();
            let x = f32::from_bits((logp[i] - logp_old[i]).to_bits() & keep);
            self.mask[i] = f32::from(u8::from(mask[i]));
            self.log_ratio[i] = x;
            self.ratio[i] = clamp_log(x, p.max_log);
            if KL {
                let d = f32::from_bits((logp_ref[i] - logp[i]).to_bits() & keep);
                self.ref_diff[i] = d;
                self.ref_exp[i] = clamp_log(d, p.max_log);
            }
        }
        for i in n..CHUNK {
            self.mask[i] = 0.0;
            self.log_ratio[i] = 0.0;
            self.ratio[i] = 0.0;
            self.ref_diff[i] = 0.0;
            self.ref_exp[i] = 0.0;
        }
        exp_in_place(&mut self.ratio);
        if KL {
            exp_in_place(&mut self.ref_exp);
        }
    }

    /// Writes `weight * d loss_t / d logp_t` of every position into `out` (exactly 0 on
    /// masked ones) for advantage `adv`, and returns the chunk's sums. With `KL` set,
    /// adds `beta * k3`, `k3 = exp(d) - d - 1`, `d` the clamped reference difference.
    pub(crate) fn terms<const KL: bool>(
        &self,
        p: &TokenParams,
        adv: f32,
        weight: f32,
        out: &mut [f32; CHUNK],
    ) -> Sums {
        // The dual clip caps the loss of a negative advantage at c |A|.
        let cap = match p.dual {
            Some(c) if adv < 0.0 => -adv * c,
            _ => f32::INFINITY,
        };
        let mut acc = [[0.0f32; LANES]; 6];
        let lanes = self
            .mask
            .chunks_exact(LANES)
            .zip(self.log_ratio.chunks_exact(LANES))
            .zip(self.ratio.chunks_exact(LANES))
            .zip(self.ref_diff.chunks_exact(LANES))
            .zip(self.ref_exp.chunks_exact(LANES))
            .zip(out.chunks_exact_mut(LANES));
        for (((((m, x), r), d), e), o) in lanes {
            for j in 0..LANES {
                let (m, r) = (m[j], r[j]);
                let inside = x[j].abs() <= p.max_log;
                let log_ratio = clamp_log(x[j], p.max_log);
                // loss = -min(r A, clip(r) A) = max(-r A, -clip(r) A).
                let unclipped = -adv * r;
                let clipped_loss = -adv
                    * if r < p.low {
                        p.low
                    } else if r > p.high {
                        p.high
                    } else {
                        r
                    };
                let clipped = clipped_loss > unclipped;
                let mut loss = if clipped { clipped_loss } else { unclipped };
                let mut grad = if clipped || !inside { 0.0 } else { unclipped };
                let dual = loss > cap;
                if dual {
                    loss = cap;
                    grad = 0.0;
                }
                if KL {
                    let dc = clamp_log(d[j], p.max_log);
                    let k3 = e[j] - dc - 1.0;
                    loss += p.beta * k3;
                    if d[j].abs() <= p.max_log {
                        grad += p.beta * (1.0 - e[j]);
                    }
                    acc[3][j] += m * k3;
                }
                o[j] = if m > 0.0 { grad * weight } else { 0.0 };
                acc[0][j] += m * loss;
                acc[1][j] += m * r;
                acc[2][j] += m * (r - 1.0 - log_ratio);
                acc[4][j] += if clipped { m } else { 0.0 };
                acc[5][j] += if dual { m } else { 0.0 };
            }
        }
        let [loss, ratio, approx_kl, ref_kl, clipped, dual_clipped] =
            acc.map(|lane| lane.iter().sum());
        Sums {
            loss,
            ratio,
            approx_kl,
            ref_kl,
            clipped,
            dual_clipped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::exp_reduced;

    /// Against the f64 exponential over the whole clamp range: at most 2 ulp of the
    /// exact value (an ulp being the spacing of f32 at the exact value), exactly 1 at 0.
    #[test]
    fn exp_reduced_is_within_two_ulp() {
        assert_eq!(exp_reduced(0.0), 1.0);
        let mut worst = 0.0f64;
        for i in -800_000..=800_000 {
            let x = i as f32 * 1e-4;
            let exact = libm::exp(f64::from(x));
            let ulp = libm::exp2(libm::floor(libm::log2(exact)) - 23.0);
            worst = worst.max((f64::from(exp_reduced(x)) - exact).abs() / ulp);
        }
        assert!(worst <= 2.0, "worst error {worst} ulp");
    }
}
