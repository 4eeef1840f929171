//! [`update_policy`]: one GRPO step on a batch of chain rollouts.
//!
//! Every episode is one sequence (its whole chat); only the agent's own tokens carry
//! loss. Advantages are per chain position across the chain's rollouts. The old
//! log-probs are recomputed by the policy with the forward computation of the update
//! itself, so before the step every ratio is exactly 1 (the update is strictly
//! on-policy); the sampler's own log-probs are only compared with them, as a health
//! check of the sampler. Sequences whose coefficients are all zero (zero advantage, no
//! KL term) are left out of the backward pass: they would add nothing.

use std::fmt;

use serde::{Deserialize, Serialize};

use sage_core::grpo::{chain_advantages, policy_loss, GrpoConfig, GrpoError, TokenBatch};
use sage_core::policy::Policy;

use super::{ChainRollout, RlError};

/// What one update did.
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
}

impl fmt::Display for NotApplied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotApplied::NoSignal => write!(f, "every coefficient is 0 (no learning signal)"),
            NotApplied::NonFinite(what) => write!(f, "non-finite {what}"),
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
/// agent token, accumulates the gradient and takes one optimizer step. `reference` is
/// the frozen policy of the KL term, required when `grpo.kl_coef > 0`.
///
/// A non-finite loss or gradient is not an error: nothing is applied and the report
/// says why, so the caller can count failures.
pub fn update_policy<P: Policy>(
    policy: &mut P,
    reference: Option<&mut P>,
    rollouts: &[ChainRollout],
    rewards: &[f32],
    rollouts_per_chain: usize,
    grpo: &GrpoConfig,
) -> Result<UpdateReport, RlError> {
    let chain_len = rollouts.first().map_or(0, |r| r.episodes.len());
    if rollouts.iter().any(|r| r.episodes.len() != chain_len)
        || rewards.len() != rollouts.len() * chain_len
    {
        return Err(RlError::Math(format!(
            "{} rewards for {} rollouts of {chain_len} tasks",
            rewards.len(),
            rollouts.len()
        )));
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
    .map_err(|e| RlError::Math(format!("advantages: {e}")))?;
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
    let with_kl = grpo.kl_coef > 0.0;
    // The sequences whose log-probs matter: all of them under a KL term, otherwise
    // those with a non-zero advantage (the others get zero coefficients anyway).
    let needed: Vec<usize> = (0..sequences.len())
        .filter(|&i| with_kl || sequences[i].advantage != 0.0)
        .collect();
    if needed.is_empty() {
        report.not_applied = Some(NotApplied::NoSignal);
        return Ok(report);
    }
    let needed_tokens: Vec<&[u32]> = needed.iter().map(|&i| sequences[i].tokens).collect();
    let logp_needed = policy
        .log_probs(&needed_tokens)
        .map_err(|e| RlError::Policy(e.to_string()))?;
    let ref_needed = match (with_kl, reference) {
        (false, _) => None,
        (true, Some(reference)) => Some(
            reference
                .log_probs(&needed_tokens)
                .map_err(|e| RlError::Policy(format!("reference: {e}")))?,
        ),
        (true, None) => {
            return Err(RlError::Config(
                "grpo.kl_coef > 0 needs a reference policy".to_owned(),
            ))
        }
    };
    report.logprob_mismatch = logprob_mismatch(&sequences, &needed, &logp_needed);

    // Flat per-token arrays over all sequences; sequences left out have log-prob 0
    // (finite, ratio 1) and advantage 0, so their loss and coefficients are 0.
    let seq_lens: Vec<usize> = sequences.iter().map(|s| s.mask.len()).collect();
    let total: usize = seq_lens.iter().sum();
    let mut logp = vec![0.0f32; total];
    let mut logp_ref = ref_needed.as_ref().map(|_| vec![0.0f32; total]);
    let starts: Vec<usize> = seq_lens
        .iter()
        .scan(0, |at, &len| {
            let start = *at;
            *at += len;
            Some(start)
        })
        .collect();
    for (n, &i) in needed.iter().enumerate() {
        let range = starts[i]..starts[i] + seq_lens[i];
        logp[range.clone()].copy_from_slice(&logp_needed[n]);
        if let (Some(flat), Some(values)) = (logp_ref.as_mut(), ref_needed.as_ref()) {
            flat[range].copy_from_slice(&values[n]);
        }
    }
    let mask: Vec<bool> = sequences
        .iter()
        .flat_map(|s| s.mask.iter().copied())
        .collect();
    let seq_advantages: Vec<f32> = sequences.iter().map(|s| s.advantage).collect();
    let batch = TokenBatch {
        logp: &logp,
        logp_old: &logp,
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
            return Ok(report);
        }
        Err(e) => return Err(RlError::Math(format!("grpo loss: {e}"))),
    };
    report.loss = stats.loss;
    report.clip_fraction = stats.clip_fraction;
    report.approx_kl = stats.approx_kl;
    report.ref_kl = stats.ref_kl;

    let trained: Vec<usize> = needed
        .iter()
        .copied()
        .filter(|&i| {
            coef[starts[i]..starts[i] + seq_lens[i]]
                .iter()
                .any(|&c| c != 0.0)
        })
        .collect();
    if trained.is_empty() {
        report.not_applied = Some(NotApplied::NoSignal);
        return Ok(report);
    }
    let trained_tokens: Vec<&[u32]> = trained.iter().map(|&i| sequences[i].tokens).collect();
    let trained_coef: Vec<&[f32]> = trained
        .iter()
        .map(|&i| &coef[starts[i]..starts[i] + seq_lens[i]])
        .collect();
    policy
        .accumulate_gradient(&trained_tokens, &trained_coef)
        .map_err(|e| RlError::Policy(e.to_string()))?;
    report.trained_sequences = trained.len();
    report.backward_tokens = trained_tokens.iter().map(|t| t.len()).sum();
    let step = policy
        .optimizer_step()
        .map_err(|e| RlError::Policy(e.to_string()))?;
    report.grad_norm = step.grad_norm;
    report.learning_rate = step.learning_rate;
    if step.skipped {
        report.not_applied = Some(NotApplied::NonFinite("gradient".to_owned()));
    }
    Ok(report)
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
fn logprob_mismatch(sequences: &[Sequence<'_>], needed: &[usize], logp: &[Vec<f32>]) -> f32 {
    let mut sum = 0.0f64;
    let mut tokens = 0usize;
    for (&i, recomputed) in needed.iter().zip(logp) {
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
