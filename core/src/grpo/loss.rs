//! [`policy_loss`]: the aggregated GRPO loss of a batch of sequences, its derivative
//! with respect to every token's log-prob, and the statistics a trainer logs.

use core::ops::Range;

use super::token::{Chunk, Sums, TokenParams, CHUNK};
use super::{GrpoConfig, GrpoError, LossAggregation};

/// The per-token inputs of one batch, all sequences concatenated.
///
/// Per-token slices follow [`Policy`](crate::Policy): position `t` of sequence `s` is the
/// log-prob of the token predicted there, so a sequence of `n` tokens has `n - 1`
/// positions, and `seq_lens[s]` counts positions. Sequence `s` occupies
/// `seq_lens[0] + ... + seq_lens[s - 1] ..` plus `seq_lens[s]` in every per-token slice.
#[derive(Clone, Copy, Debug)]
pub struct TokenBatch<'a> {
    /// Log-probs under the policy being trained.
    pub logp: &'a [f32],
    /// Log-probs under the policy that sampled the tokens.
    pub logp_old: &'a [f32],
    /// Log-probs under the reference policy; required when `kl_coef > 0`, and used for
    /// the KL statistic whenever given.
    pub logp_ref: Option<&'a [f32]>,
    /// `true` for the model's own tokens; `false` (prompt, observations, padding) makes
    /// the position contribute nothing: its log-prob values are ignored, even NaN.
    pub mask: &'a [bool],
    /// Number of positions of each sequence; they must sum to `logp.len()`.
    pub seq_lens: &'a [usize],
    /// Advantage of each sequence (one per entry of `seq_lens`), finite.
    pub advantages: &'a [f32],
}

/// What [`policy_loss`] reports. The means are over unmasked tokens, whatever the
/// aggregation; they are 0 when there is none.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GrpoStats {
    /// The aggregated loss.
    pub loss: f32,
    /// Unmasked tokens in the batch.
    pub tokens: usize,
    /// Sequences with at least one unmasked token.
    pub sequences: usize,
    /// Share of tokens where the ratio clip zeroed the surrogate's gradient.
    pub clip_fraction: f32,
    /// Share of tokens where the dual clip capped the loss.
    pub dual_clip_fraction: f32,
    /// Mean ratio `exp(logp - logp_old)` (after the clamp).
    pub mean_ratio: f32,
    /// Mean k3 estimate of `KL(old || current)`, `ratio - 1 - ln(ratio)`: how far the
    /// policy moved from the one that sampled.
    pub approx_kl: f32,
    /// Mean k3 estimate of `KL(current || reference)`; 0 without reference log-probs.
    pub ref_kl: f32,
}

/// Computes the GRPO loss of `batch` under `config` and writes `d loss / d logp_t` into
/// `coef` (one per position; exactly 0 on masked positions), ready for
/// [`Policy::accumulate_gradient`](crate::Policy::accumulate_gradient).
///
/// The loss of an unmasked token with advantage `A` is
/// `-min(rho * A, clip(rho, 1 - eps_low, 1 + eps_high) * A)`, where `rho = exp(clamp(logp
/// - logp_old, -m, m))`; with a dual clip `c`, the loss of a token with `A < 0` is capped
/// at `c * |A|`; with `kl_coef = beta > 0`, `beta * k3` is added, `k3 = exp(d) - d - 1`,
/// `d = clamp(logp_ref - logp, -m, m)`. Token losses are combined by
/// [`LossAggregation`]. Derivatives are exact, including the zero derivative of a clamp
/// or clip that is active. No allocation; on error `coef` may be partly written.
pub fn policy_loss(
    config: &GrpoConfig,
    batch: &TokenBatch<'_>,
    coef: &mut [f32],
) -> Result<GrpoStats, GrpoError> {
    config.validate()?;
    validate(batch, coef.len(), config.kl_coef > 0.0)?;
    let (tokens, sequences) = count(batch);
    let params = TokenParams::new(config);
    let mut chunk = Chunk::new();
    let mut out = [0.0f32; CHUNK];
    let mut loss = 0.0f64;
    let mut totals = [0.0f64; 5];
    let mut start = 0;
    for (&len, &adv) in batch.seq_lens.iter().zip(batch.advantages) {
        let end = start + len;
        let n = count_unmasked(&batch.mask[start..end]);
        let weight = weight(config, n, tokens, sequences);
        let mut seq_loss = 0.0f64;
        let mut at = start;
        while at < end {
            let stop = end.min(at + CHUNK);
            let sums = match batch.logp_ref {
                Some(logp_ref) => run_chunk::<true>(
                    &params,
                    &mut chunk,
                    (batch, logp_ref, at..stop),
                    adv,
                    weight,
                    &mut out,
                ),
                None => run_chunk::<false>(
                    &params,
                    &mut chunk,
                    (batch, batch.logp, at..stop),
                    adv,
                    weight,
                    &mut out,
                ),
            };
            coef[at..stop].copy_from_slice(&out[..stop - at]);
            seq_loss += f64::from(sums.loss);
            let counts = [
                sums.ratio,
                sums.approx_kl,
                sums.ref_kl,
                sums.clipped,
                sums.dual_clipped,
            ];
            for (total, x) in totals.iter_mut().zip(counts) {
                *total += f64::from(x);
            }
            at = stop;
        }
        loss += f64::from(weight) * seq_loss;
        start = end;
    }
    if !(loss.is_finite() && totals.iter().all(|t| t.is_finite())) {
        return Err(GrpoError::NonFinite {
            what: "the loss (a NaN log-prob on an unmasked token?)",
        });
    }
    let mean = |sum: f64| {
        if tokens == 0 {
            0.0
        } else {
            (sum / tokens as f64) as f32
        }
    };
    Ok(GrpoStats {
        loss: loss as f32,
        tokens,
        sequences,
        mean_ratio: mean(totals[0]),
        approx_kl: mean(totals[1]),
        ref_kl: mean(totals[2]),
        clip_fraction: mean(totals[3]),
        dual_clip_fraction: mean(totals[4]),
    })
}

/// Loads the positions `range` of `batch` (with reference log-probs `logp_ref`) into
/// `chunk` and writes their weighted coefficients into the front of `out`.
#[inline(always)]
fn run_chunk<const KL: bool>(
    params: &TokenParams,
    chunk: &mut Chunk,
    (batch, logp_ref, range): (&TokenBatch<'_>, &[f32], Range<usize>),
    adv: f32,
    weight: f32,
    out: &mut [f32; CHUNK],
) -> Sums {
    chunk.load::<KL>(
        params,
        &batch.logp[range.clone()],
        &batch.logp_old[range.clone()],
        &logp_ref[range.clone()],
        &batch.mask[range],
    );
    chunk.terms::<KL>(params, adv, weight, out)
}

/// The aggregation weight of each token of a sequence with `n` unmasked tokens, in a
/// batch of `tokens` unmasked tokens over `sequences` non-empty sequences.
fn weight(config: &GrpoConfig, n: usize, tokens: usize, sequences: usize) -> f32 {
    if n == 0 {
        return 0.0;
    }
    let denom = match config.aggregation {
        LossAggregation::TokenMean => tokens as f64,
        LossAggregation::SeqMeanTokenMean => sequences as f64 * n as f64,
        LossAggregation::SeqMeanTokenSum => sequences as f64,
        LossAggregation::SeqMeanTokenSumNorm => sequences as f64 * f64::from(config.norm_length),
    };
    (1.0 / denom) as f32
}

/// Unmasked tokens and non-empty sequences of a validated batch.
fn count(batch: &TokenBatch<'_>) -> (usize, usize) {
    let (mut tokens, mut sequences, mut start) = (0, 0, 0);
    for &len in batch.seq_lens {
        let n = count_unmasked(&batch.mask[start..start + len]);
        tokens += n;
        sequences += usize::from(n > 0);
        start += len;
    }
    (tokens, sequences)
}

/// Number of `true` entries, counted in `u8` blocks so that it vectorises.
fn count_unmasked(mask: &[bool]) -> usize {
    mask.chunks(255)
        .map(|block| usize::from(block.iter().fold(0u8, |n, &m| n + u8::from(m))))
        .sum()
}

/// Checks the batch's shapes and advantages against each other and `coef_len`.
fn validate(batch: &TokenBatch<'_>, coef_len: usize, needs_ref: bool) -> Result<(), GrpoError> {
    let expected = batch.logp.len();
    let mismatch = |what, found| {
        Err(GrpoError::LengthMismatch {
            what,
            expected,
            found,
        })
    };
    if batch.logp_old.len() != expected {
        return mismatch("logp_old", batch.logp_old.len());
    }
    if batch.mask.len() != expected {
        return mismatch("mask", batch.mask.len());
    }
    if coef_len != expected {
        return mismatch("coef", coef_len);
    }
    match batch.logp_ref {
        Some(r) if r.len() != expected => return mismatch("logp_ref", r.len()),
        None if needs_ref => return Err(GrpoError::MissingReference),
        _ => {}
    }
    let total = batch
        .seq_lens
        .iter()
        .try_fold(0usize, |acc, &len| acc.checked_add(len));
    match total {
        Some(total) if total == expected => {}
        Some(total) => return mismatch("sum of seq_lens", total),
        None => return mismatch("sum of seq_lens", usize::MAX),
    }
    if batch.advantages.len() != batch.seq_lens.len() {
        return Err(GrpoError::LengthMismatch {
            what: "advantages",
            expected: batch.seq_lens.len(),
            found: batch.advantages.len(),
        });
    }
    if !batch.advantages.iter().all(|a| a.is_finite()) {
        return Err(GrpoError::NonFinite {
            what: "an advantage",
        });
    }
    Ok(())
}
