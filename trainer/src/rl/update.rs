//! [`update_policy`]: the GRPO update on a batch of chain rollouts.
//!
//! Every episode is one sequence (its whole chat); only the agent's own tokens carry
//! loss. Advantages are per chain position across the chain's rollouts. The old
//! log-probs are recomputed by the policy with the forward computation of the update
//! itself, so before the first step every ratio is exactly 1; the sampler's own
//! log-probs are only compared with them, as a health check of the sampler. Sequences
//! whose coefficients are all zero (zero advantage, no KL term) are left out of the
//! backward pass: they would add nothing.
//!
//! By default the batch makes one optimizer step (SAGE: strictly on-policy). With
//! `minibatches = n > 1` it makes `n`, each on every `n`-th sequence, PPO-style: every
//! step after the first sees ratios away from 1, and the clip bounds how far it goes.
//! After the last step the trained sequences are scored again, so the report says how
//! far the update moved the policy on its own rollouts ([`UpdateReport::step_kl`]) and
//! in which direction ([`UpdateReport::logp_change_positive`] against
//! [`UpdateReport::logp_change_negative`]). The update-off control
//! (`UpdateOptions::apply = false`) returns before any of it.

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use sage_core::grpo::{
    chain_advantages, policy_loss, weight_negative_advantages, GrpoConfig, GrpoError, TokenBatch,
};
use sage_core::policy::Policy;

use super::{ChainRollout, RlError};

/// What one update did. With several minibatches, the loss, clip fraction, KL
/// estimates and gradient norm are means over them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UpdateReport {
    /// The GRPO loss of the batch.
    pub loss: f32,
    /// Share of (chain, position) groups whose rewards were all equal (advantage 0).
    pub zero_advantage_groups: f32,
    /// Sequences that took part in the backward pass.
    pub trained_sequences: usize,
    /// Agent tokens in the batch (all sequences).
    pub agent_tokens: usize,
    /// Tokens (prompt and observations included) run through the backward pass.
    pub backward_tokens: usize,
    /// Share of agent tokens whose ratio the clip cut off.
    pub clip_fraction: f32,
    /// Mean k3 estimate of KL(sampling policy || current policy).
    pub approx_kl: f32,
    /// Mean k3 estimate of KL(current policy || reference); 0 without a reference.
    pub ref_kl: f32,
    /// Mean |sampled log-prob - recomputed log-prob| over the trained agent tokens: how
    /// far the sampler's numbers are from the trainer's (ideally ~1e-6).
    pub logprob_mismatch: f32,
    /// Global gradient norm before clipping (0 when no step was taken).
    pub grad_norm: f32,
    /// Learning rate of the step.
    pub learning_rate: f32,
    /// Mean k3 estimate, over the trained agent tokens, of KL(policy before the update
    /// || policy after it): how far the update moved the policy on its own rollouts.
    #[serde(default)]
    pub step_kl: f32,
    /// Mean change of the log-prob of an agent token over the update, in sequences of
    /// positive advantage (what the update should raise).
    #[serde(default)]
    pub logp_change_positive: f32,
    /// The same in sequences of negative advantage (what it should lower). The mean of
    /// the two is the update's drift, the half-difference its signal.
    #[serde(default)]
    pub logp_change_negative: f32,
    /// Why no optimizer step was applied, if none was.
    pub not_applied: Option<NotApplied>,
}

/// Why an update applied no optimizer step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum NotApplied {
    /// Every advantage (or every coefficient) was 0: nothing to learn from.
    NoSignal,
    /// The loss or the gradient was not finite (the run counts these).
    NonFinite(String),
    /// The update-off control: rollouts and rewards as usual, no step by design.
    Control,
}

impl fmt::Display for NotApplied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotApplied::NoSignal => write!(f, "every coefficient is 0 (no learning signal)"),
            NotApplied::NonFinite(what) => write!(f, "non-finite {what}"),
            NotApplied::Control => write!(f, "update-off control"),
        }
    }
}

/// How an update runs, beyond the GRPO loss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpdateOptions {
    /// Take optimizer steps; `false` makes the update-off control, which computes the
    /// advantages and nothing else.
    pub apply: bool,
    /// Optimizer steps per batch, each on every `minibatches`-th sequence (at least 1).
    pub minibatches: usize,
}

impl Default for UpdateOptions {
    /// One step on the whole batch (SAGE's strictly on-policy update).
    fn default() -> UpdateOptions {
        UpdateOptions {
            apply: true,
            minibatches: 1,
        }
    }
}

/// One sequence of the batch.
struct Sequence<'a> {
    tokens: &'a [u32],
    mask: &'a [bool],
    advantage: f32,
    sampled_logprobs: &'a [f32],
}

/// Computes advantages from `rewards` (laid out `[chain][rollout][position]`, as
/// [`chain_rewards`](super::chain_rewards) returns them), the GRPO coefficients of every
/// agent token, accumulates the gradient and takes the optimizer steps of `options`.
/// `reference` is the frozen policy of the KL term, required when `grpo.kl_coef > 0`.
///
/// A non-finite loss or gradient is not an error: that step is not applied and the
/// report says why, so the caller can count failures.
pub fn update_policy<P: Policy>(
    policy: &mut P,
    reference: Option<&mut P>,
    rollouts: &[ChainRollout],
    rewards: &[f32],
    rollouts_per_chain: usize,
    grpo: &GrpoConfig,
    options: UpdateOptions,
) -> Result<UpdateReport, RlError> {
    let chain_len = rollouts.first().map_or(0, |r| r.episodes.len());
    if rollouts.iter().any(|r| r.episodes.len() != chain_len)
        || rewards.len() != rollouts.len() * chain_len
    {
        return Err(RlError::Grpo(GrpoError::LengthMismatch {
            what: "rewards (one per task of every rollout, all of one chain length)",
            expected: rollouts.len() * chain_len,
            found: rewards.len(),
        }));
    }
    let mut advantages = vec![0.0f32; rewards.len()];
    chain_advantages(
        rewards,
        rollouts_per_chain,
        chain_len,
        grpo.normalize_std,
        grpo.std_eps,
        &mut advantages,
    )
    .map_err(RlError::Grpo)?;
    weight_negative_advantages(&mut advantages, grpo.negative_weight);
    let sequences: Vec<Sequence<'_>> = rollouts
        .iter()
        .flat_map(|r| &r.episodes)
        .zip(&advantages)
        .map(|(episode, &advantage)| Sequence {
            tokens: episode.chat.tokens(),
            mask: &episode.chat.agent_mask()[1..],
            advantage,
            sampled_logprobs: &episode.logprobs,
        })
        .collect();
    let mut report = UpdateReport {
        zero_advantage_groups: zero_advantage_share(rewards, rollouts_per_chain, chain_len),
        agent_tokens: sequences.iter().map(|s| count(s.mask)).sum(),
        ..UpdateReport::default()
    };
    if !options.apply {
        report.not_applied = Some(NotApplied::Control);
        return Ok(report);
    }
    let with_kl = grpo.kl_coef > 0.0;
    if with_kl && reference.is_none() {
        return Err(RlError::Config(
            "grpo.kl_coef > 0 needs a reference policy".to_owned(),
        ));
    }
    // The sequences whose log-probs matter: all of them under a KL term, otherwise
    // those with a non-zero advantage (the others get zero coefficients anyway).
    let needed: Vec<usize> = (0..sequences.len())
        .filter(|&i| with_kl || sequences[i].advantage != 0.0)
        .collect();
    if needed.is_empty() {
        report.not_applied = Some(NotApplied::NoSignal);
        return Ok(report);
    }
    let logp_old = scores(policy, &sequences, &needed).map_err(policy_failed)?;
    report.logprob_mismatch = logprob_mismatch(&sequences, &needed, &logp_old);
    let logp_ref = match reference {
        Some(reference) if with_kl => Some(
            scores(reference, &sequences, &needed).map_err(|e| RlError::Reference(Box::new(e)))?,
        ),
        _ => None,
    };

    let minibatches = options.minibatches.max(1);
    let mut trained_any = false;
    for part in 0..minibatches {
        let members: Vec<usize> = (part..sequences.len()).step_by(minibatches).collect();
        let scored: Vec<usize> = needed
            .iter()
            .copied()
            .filter(|&i| i % minibatches == part)
            .collect();
        if scored.is_empty() {
            continue;
        }
        // The first step's policy is the sampling one; later steps score again.
        let logp = if part == 0 {
            None
        } else {
            Some(scores(policy, &sequences, &scored).map_err(policy_failed)?)
        };
        let current = logp.as_ref().unwrap_or(&logp_old);
        let step = minibatch_step(
            policy,
            &sequences,
            &members,
            Scores {
                current,
                old: &logp_old,
                reference: logp_ref.as_ref(),
            },
            grpo,
        )?;
        let Some(step) = step else { continue };
        trained_any = true;
        let n = minibatches as f32;
        report.loss += step.loss / n;
        report.clip_fraction += step.clip_fraction / n;
        report.approx_kl += step.approx_kl / n;
        report.ref_kl += step.ref_kl / n;
        report.grad_norm += step.grad_norm / n;
        report.learning_rate = step.learning_rate;
        report.trained_sequences += step.trained_sequences;
        report.backward_tokens += step.backward_tokens;
        if let Some(why) = step.not_applied {
            report.not_applied = Some(why);
            return Ok(report);
        }
    }
    if !trained_any {
        report.not_applied = Some(NotApplied::NoSignal);
        return Ok(report);
    }
    let logp_new = scores(policy, &sequences, &needed).map_err(policy_failed)?;
    movement(&mut report, &sequences, &needed, &logp_old, &logp_new);
    Ok(report)
}

/// Per-token log-probs of the `needed` sequences, keyed by sequence index.
type ScoreMap = HashMap<usize, Vec<f32>>;

/// The log-probs a minibatch step reads: under the policy now, the policy that sampled
/// and the reference.
struct Scores<'a> {
    current: &'a ScoreMap,
    old: &'a ScoreMap,
    reference: Option<&'a ScoreMap>,
}

/// A policy's failure as an [`RlError`], kept whole.
fn policy_failed<E: std::error::Error + Send + Sync + 'static>(e: E) -> RlError {
    RlError::Policy(Box::new(e))
}

/// The log-probs of sequences `which` under `policy`.
fn scores<P: Policy>(
    policy: &mut P,
    sequences: &[Sequence<'_>],
    which: &[usize],
) -> Result<ScoreMap, P::Error> {
    let tokens: Vec<&[u32]> = which.iter().map(|&i| sequences[i].tokens).collect();
    let logp = policy.log_probs(&tokens)?;
    Ok(which.iter().copied().zip(logp).collect())
}

/// The loss, gradient and optimizer step of the sequences `members`; sequences without
/// scores (zero advantage, no KL) take part with zero coefficients, so they count in
/// the aggregation's sequence count as in a one-step update. `None` when no
/// coefficient is nonzero.
fn minibatch_step<P: Policy>(
    policy: &mut P,
    sequences: &[Sequence<'_>],
    members: &[usize],
    scores: Scores<'_>,
    grpo: &GrpoConfig,
) -> Result<Option<UpdateReport>, RlError> {
    let mut report = UpdateReport::default();
    // Flat per-token arrays over the members; a sequence without scores has log-prob 0
    // (finite, ratio 1) and advantage 0, so its loss and coefficients are 0.
    let seq_lens: Vec<usize> = members.iter().map(|&i| sequences[i].mask.len()).collect();
    let starts: Vec<usize> = seq_lens
        .iter()
        .scan(0, |at, &len| {
            let start = *at;
            *at += len;
            Some(start)
        })
        .collect();
    let total: usize = seq_lens.iter().sum();
    let mut logp = vec![0.0f32; total];
    let mut logp_old = vec![0.0f32; total];
    let mut logp_ref = scores.reference.map(|_| vec![0.0f32; total]);
    let mut seq_advantages = Vec::with_capacity(members.len());
    for (slot, &i) in members.iter().enumerate() {
        let range = starts[slot]..starts[slot] + seq_lens[slot];
        match (scores.current.get(&i), scores.old.get(&i)) {
            (Some(current), Some(old)) => {
                logp[range.clone()].copy_from_slice(current);
                logp_old[range.clone()].copy_from_slice(old);
                seq_advantages.push(sequences[i].advantage);
            }
            _ => seq_advantages.push(0.0),
        }
        if let (Some(flat), Some(values)) =
            (logp_ref.as_mut(), scores.reference.and_then(|r| r.get(&i)))
        {
            flat[range].copy_from_slice(values);
        }
    }
    let mask: Vec<bool> = members
        .iter()
        .flat_map(|&i| sequences[i].mask.iter().copied())
        .collect();
    let batch = TokenBatch {
        logp: &logp,
        logp_old: &logp_old,
        logp_ref: logp_ref.as_deref(),
        mask: &mask,
        seq_lens: &seq_lens,
        advantages: &seq_advantages,
    };
    let mut coef = vec![0.0f32; total];
    let stats = match policy_loss(grpo, &batch, &mut coef) {
        Ok(stats) => stats,
        Err(GrpoError::NonFinite { what }) => {
            report.not_applied = Some(NotApplied::NonFinite(what.to_owned()));
            return Ok(Some(report));
        }
        Err(e) => return Err(RlError::Grpo(e)),
    };
    report.loss = stats.loss;
    report.clip_fraction = stats.clip_fraction;
    report.approx_kl = stats.approx_kl;
    report.ref_kl = stats.ref_kl;

    let trained: Vec<usize> = (0..members.len())
        .filter(|&slot| {
            coef[starts[slot]..starts[slot] + seq_lens[slot]]
                .iter()
                .any(|&c| c != 0.0)
        })
        .collect();
    if trained.is_empty() {
        return Ok(None);
    }
    let trained_tokens: Vec<&[u32]> = trained
        .iter()
        .map(|&slot| sequences[members[slot]].tokens)
        .collect();
    let trained_coef: Vec<&[f32]> = trained
        .iter()
        .map(|&slot| &coef[starts[slot]..starts[slot] + seq_lens[slot]])
        .collect();
    policy
        .accumulate_gradient(&trained_tokens, &trained_coef)
        .map_err(policy_failed)?;
    report.trained_sequences = trained.len();
    report.backward_tokens = trained_tokens.iter().map(|t| t.len()).sum();
    let step = policy.optimizer_step().map_err(policy_failed)?;
    report.grad_norm = step.grad_norm;
    report.learning_rate = step.learning_rate;
    if step.skipped {
        report.not_applied = Some(NotApplied::NonFinite("gradient".to_owned()));
    }
    Ok(Some(report))
}

/// Fills the report's [`UpdateReport::step_kl`] and log-prob changes from the agent
/// tokens' log-probs before (`old`) and after (`new`) the update.
fn movement(
    report: &mut UpdateReport,
    sequences: &[Sequence<'_>],
    needed: &[usize],
    old: &ScoreMap,
    new: &ScoreMap,
) {
    // [kl, change in A > 0, change in A < 0] as (sum, tokens).
    let mut sums = [(0.0f64, 0usize); 3];
    for &i in needed {
        let (Some(before), Some(after)) = (old.get(&i), new.get(&i)) else {
            continue;
        };
        let sequence = &sequences[i];
        for ((&m, &b), &a) in sequence.mask.iter().zip(before).zip(after) {
            if !m {
                continue;
            }
            let d = f64::from(a) - f64::from(b);
            sums[0].0 += d.exp() - 1.0 - d;
            sums[0].1 += 1;
            let side = if sequence.advantage > 0.0 {
                Some(1)
            } else if sequence.advantage < 0.0 {
                Some(2)
            } else {
                None
            };
            if let Some(side) = side {
                sums[side].0 += d;
                sums[side].1 += 1;
            }
        }
    }
    let mean = |(sum, n): (f64, usize)| if n == 0 { 0.0 } else { (sum / n as f64) as f32 };
    report.step_kl = mean(sums[0]);
    report.logp_change_positive = mean(sums[1]);
    report.logp_change_negative = mean(sums[2]);
}

/// Number of `true` entries.
fn count(mask: &[bool]) -> usize {
    mask.iter().filter(|&&m| m).count()
}

/// Share of (chain, position) groups whose `rollouts` rewards are all equal.
fn zero_advantage_share(rewards: &[f32], rollouts: usize, chain_len: usize) -> f32 {
    let chain_size = rollouts * chain_len;
    if chain_size == 0 || rewards.is_empty() {
        return 0.0;
    }
    let chains = rewards.len() / chain_size;
    let mut flat = 0;
    for chain in rewards.chunks(chain_size) {
        for position in 0..chain_len {
            let first = chain[position];
            if (0..rollouts).all(|i| chain[i * chain_len + position] == first) {
                flat += 1;
            }
        }
    }
    flat as f32 / (chains * chain_len) as f32
}

/// Mean absolute difference between the sampler's log-probs and the recomputed ones
/// over the agent tokens of the `needed` sequences.
fn logprob_mismatch(sequences: &[Sequence<'_>], needed: &[usize], logp: &ScoreMap) -> f32 {
    let mut sum = 0.0f64;
    let mut tokens = 0usize;
    for &i in needed {
        let Some(recomputed) = logp.get(&i) else {
            continue;
        };
        let sequence = &sequences[i];
        let agent = sequence
            .mask
            .iter()
            .zip(recomputed)
            .filter(|(&m, _)| m)
            .map(|(_, &l)| l);
        for (sampled, recomputed) in sequence.sampled_logprobs.iter().zip(agent) {
            sum += f64::from((sampled - recomputed).abs());
            tokens += 1;
        }
    }
    if tokens == 0 {
        0.0
    } else {
        (sum / tokens as f64) as f32
    }
}
