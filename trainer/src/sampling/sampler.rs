//! [`Sampler`]: picks one token from a row of logits, greedily or by sampling the
//! temperature-scaled distribution truncated by top-k, then top-p.
//!
//! Truncation follows the usual order: temperature, then top-k (the k highest
//! logits), then top-p on the distribution renormalised over those k (the smallest
//! prefix, by decreasing probability, whose mass reaches `top_p`). Ties in the ranking
//! go to the lowest token id, so greedy decoding, top-k = 1 and a tiny top-p all pick
//! the same token.

use core::cmp::Ordering;

use sage_core::policy::SamplingParams;
use sage_transformer::sampling::{argmax, draw, log_softmax_at, scaled_weight, TokenChoice};

use super::rng::SequenceRng;

/// The first prefix length tried when top-p needs the ranked candidates; it doubles
/// until the prefix holds the requested mass, so a peaked distribution never pays
/// for sorting the whole vocabulary.
const FIRST_TOP_P_PREFIX: usize = 64;

/// Why sampling parameters were refused.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ParamsError {
    /// `temperature` is negative or not finite.
    Temperature(f32),
    /// `top_p` is not in (0, 1].
    TopP(f32),
}

/// The checked sampling rule of one generation call.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sampler {
    /// 0 means greedy.
    temperature: f64,
    /// 0 means no top-k truncation.
    top_k: usize,
    /// 1 means no top-p truncation.
    top_p: f64,
}

impl Sampler {
    /// Checks the temperature and top-p of `params`.
    pub(crate) fn new(params: &SamplingParams) -> Result<Sampler, ParamsError> {
        let t = params.temperature;
        if !(t.is_finite() && t >= 0.0) {
            return Err(ParamsError::Temperature(t));
        }
        let p = params.top_p;
        if !(p > 0.0 && p <= 1.0) {
            return Err(ParamsError::TopP(p));
        }
        Ok(Sampler {
            temperature: f64::from(t),
            top_k: usize::try_from(params.top_k).unwrap_or(usize::MAX),
            top_p: f64::from(p),
        })
    }

    /// The temperature (0: greedy) when the rule is one a backend can run where the
    /// logits are ([`sage_transformer::Kernels::choose_tokens`]: no top-k or top-p
    /// truncation below the `vocab` logits), so that only the choices leave it.
    pub(crate) fn on_device(&self, vocab: usize) -> Option<f32> {
        let untruncated = (self.top_k == 0 || self.top_k >= vocab) && self.top_p >= 1.0;
        (self.temperature == 0.0 || untruncated).then_some(self.temperature as f32)
    }

    /// Picks a token of `logits` (one row, V entries) with `rng`; `None` when a logit
    /// is not finite or the row is empty. Greedy decoding draws nothing from `rng`.
    pub(crate) fn choose(&self, logits: &[f32], rng: &mut SequenceRng) -> Option<TokenChoice> {
        if logits.is_empty() || !logits.iter().all(|x| x.is_finite()) {
            return None;
        }
        let token = if self.temperature == 0.0 {
            argmax(logits)
        } else {
            self.sample(logits, rng)
        };
        let logprob = log_softmax_at(logits, token) as f32;
        Some(TokenChoice {
            token: token as u32,
            logprob,
        })
    }

    /// Draws from the scaled, truncated distribution of finite `logits`.
    fn sample(&self, logits: &[f32], rng: &mut SequenceRng) -> usize {
        let max = logits.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
        let inv_t = 1.0 / self.temperature;
        let weight = |id: usize| scaled_weight(logits[id], max, inv_t);
        let vocab = logits.len();
        let top_k = if self.top_k == 0 {
            vocab
        } else {
            self.top_k.min(vocab)
        };
        if top_k == vocab && self.top_p >= 1.0 {
            let weights: Vec<f64> = (0..vocab).map(weight).collect();
            return draw(&weights, rng.next_unit()).unwrap_or(vocab - 1);
        }
        let mut ranked: Vec<usize> = (0..vocab).collect();
        let by_rank = |a: &usize, b: &usize| rank_order(logits, *a, *b);
        let kept = if self.top_p >= 1.0 {
            sort_prefix(&mut ranked, top_k, by_rank);
            top_k
        } else {
            let mass: f64 = if top_k == vocab {
                (0..vocab).map(weight).sum()
            } else {
                sort_prefix(&mut ranked, top_k, by_rank);
                ranked[..top_k].iter().map(|&id| weight(id)).sum()
            };
            nucleus_len(&mut ranked, top_k, self.top_p * mass, weight, by_rank)
        };
        let weights: Vec<f64> = ranked[..kept].iter().map(|&id| weight(id)).collect();
        let pick = draw(&weights, rng.next_unit()).unwrap_or(kept - 1);
        ranked[pick]
    }
}

/// Higher logit first, then lower id: a strict total order on the ids of finite
/// logits (-0 and +0 count as equal, as in [`argmax`]).
fn rank_order(logits: &[f32], a: usize, b: usize) -> Ordering {
    logits[b]
        .partial_cmp(&logits[a])
        .unwrap_or(Ordering::Equal)
        .then(a.cmp(&b))
}

/// Puts the `len` first elements of `ids` by `order` at the front, sorted.
fn sort_prefix(ids: &mut [usize], len: usize, order: impl Fn(&usize, &usize) -> Ordering) {
    if len == 0 {
        return;
    }
    if len < ids.len() {
        ids.select_nth_unstable_by(len - 1, &order);
    }
    ids[..len].sort_unstable_by(&order);
}

/// The length of the shortest ranked prefix, among the first `limit` ids, whose
/// weight reaches `target`; sorts `ids` as far as that prefix (at least one id).
fn nucleus_len(
    ids: &mut [usize],
    limit: usize,
    target: f64,
    weight: impl Fn(usize) -> f64,
    order: impl Fn(&usize, &usize) -> Ordering + Copy,
) -> usize {
    let mut sorted = FIRST_TOP_P_PREFIX.min(limit);
    loop {
        sort_prefix(&mut ids[..limit], sorted, order);
        let mut cumulative = 0.0;
        for (i, &id) in ids[..sorted].iter().enumerate() {
            cumulative += weight(id);
            if cumulative >= target {
                return i + 1;
            }
        }
        if sorted == limit {
            return limit;
        }
        sorted = (2 * sorted).min(limit);
    }
}
