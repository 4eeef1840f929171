//! Rewards of a chain of tasks: SAGE's skill-integrated reward, the outcome-only and
//! chain-reward ablations, and the no-code penalty.
//!
//! This module owns the mapping from the [`TaskOutcome`]s of one rollout of a chain
//! (q_1, ..., q_K) to one scalar reward per task; advantages are computed from those by
//! [`crate::grpo`].
//!
//! # Definitions
//!
//! Write `r_k` for the score of task `k` (in `[0, 1]`) and `s_k` for its success,
//! `s_k = 1[r_k = 1] * 1[task k ended with code]` ([`TaskOutcome::succeeded`]; scores
//! are compared exactly, see there). `used(k | j) = 1` when task `k` called a skill
//! saved by task `j < k`.
//!
//! A task that ended without code gets the no-code penalty (`-1.0` by default,
//! [`NO_CODE_PENALTY`]) as its whole reward, with no bonus, whatever the kind. It also
//! counts as failed (`s_k = 0`) in every bonus of the other tasks: its penalty already
//! says the response was unusable, so it cannot earn a bonus for anyone.
//!
//! Every other task gets `R_k = r_k + bonus_k`, where the bonus depends on the kind:
//!
//! - [`RewardKind::SkillIntegrated`] (SAGE, the default):
//!   - usage bonus: `s_k * 1[exists j < k: used(k | j)]`;
//!   - generation bonus: `s_k * 1[exists m > k: s_m * used(m | k)]`;
//!
//!   at most one of each per task, so `R_k <= 3` (`<= 2` at either end of the chain).
//!   For `K = 2` this is exactly SAGE's
//!   `R1 = r1 + 1[r1=1] 1[r2=1] used(q2|q1)` and `R2 = r2 + 1[r2=1] used(q2|q1)`:
//!   task 1 can use nothing, task 2 has no later task.
//! - [`RewardKind::Chain`] (ablation: bonus when the tasks succeed, whether or not a
//!   skill was responsible): `1[K >= 2] * prod_m s_m` for every task. For `K = 2`:
//!   `R1 = r1 + 1[r1=1] 1[r2=1]`, `R2 = r2 + 1[r1=1] 1[r2=1]`. A chain of one task
//!   gets no bonus, so that for `K = 1` every kind reduces to the outcome-only reward.
//! - [`RewardKind::OutcomeOnly`] (ablation): no bonus, `R_k = r_k`.
//!
//! Chains are limited to [`MAX_CHAIN_LEN`] tasks so that skill sources fit in a `u64`.

use serde::{Deserialize, Serialize};

mod error;
mod outcome;

pub use error::RewardError;
pub use outcome::TaskOutcome;

/// The reward of a task whose episode ended without code (SAGE: -1.0).
pub const NO_CODE_PENALTY: f32 = -1.0;

/// The longest chain a reward accepts (skill sources are bits of a `u64`).
pub const MAX_CHAIN_LEN: usize = 64;

/// Turns the outcomes of one rollout of a chain into one reward per task.
pub trait Reward {
    /// Writes the reward of `chain[k]` into `out[k]`. `out` must have the chain's
    /// length; on error nothing is written.
    fn rewards(&self, chain: &[TaskOutcome], out: &mut [f32]) -> Result<(), RewardError>;
}

/// Which bonus a task can earn on top of its score (see the [module docs](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RewardKind {
    /// SAGE's reward: usage and generation bonuses for skills that were reused with
    /// success.
    #[default]
    SkillIntegrated,
    /// Ablation: the score alone.
    OutcomeOnly,
    /// Ablation: a bonus for every task when all tasks of the chain succeed.
    Chain,
}

/// A reward kind together with its no-code penalty.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RewardConfig {
    /// Which bonuses apply.
    pub kind: RewardKind,
    /// The reward of a task that ended without code; must be finite.
    pub no_code_penalty: f32,
}

impl Default for RewardConfig {
    fn default() -> Self {
        RewardConfig {
            kind: RewardKind::default(),
            no_code_penalty: NO_CODE_PENALTY,
        }
    }
}

impl From<RewardKind> for RewardConfig {
    fn from(kind: RewardKind) -> Self {
        RewardConfig {
            kind,
            ..RewardConfig::default()
        }
    }
}

impl Reward for RewardKind {
    fn rewards(&self, chain: &[TaskOutcome], out: &mut [f32]) -> Result<(), RewardError> {
        RewardConfig::from(*self).rewards(chain, out)
    }
}

impl Reward for RewardConfig {
    fn rewards(&self, chain: &[TaskOutcome], out: &mut [f32]) -> Result<(), RewardError> {
        validate(chain, out.len(), self.no_code_penalty)?;
        let all_succeeded = chain.len() >= 2 && chain.iter().all(TaskOutcome::succeeded);
        for (k, (task, slot)) in chain.iter().zip(out.iter_mut()).enumerate() {
            *slot = if !task.had_code {
                self.no_code_penalty
            } else {
                let bonus = match self.kind {
                    RewardKind::OutcomeOnly => 0.0,
                    RewardKind::Chain => indicator(all_succeeded),
                    RewardKind::SkillIntegrated => {
                        skill_bonus(task, k, chain.get(k + 1..).unwrap_or_default())
                    }
                };
                task.score + bonus
            };
        }
        Ok(())
    }
}

/// Usage plus generation bonus of `task`, at chain position `k` and followed by the
/// tasks `later` (see the module docs).
fn skill_bonus(task: &TaskOutcome, k: usize, later: &[TaskOutcome]) -> f32 {
    if !task.succeeded() {
        return 0.0;
    }
    let usage = task.used_any_skill();
    let generation = later
        .iter()
        .any(|later| later.succeeded() && later.used_skill_from(k));
    indicator(usage) + indicator(generation)
}

fn indicator(condition: bool) -> f32 {
    if condition {
        1.0
    } else {
        0.0
    }
}

fn validate(chain: &[TaskOutcome], out_len: usize, penalty: f32) -> Result<(), RewardError> {
    if chain.len() > MAX_CHAIN_LEN {
        return Err(RewardError::ChainTooLong { len: chain.len() });
    }
    if out_len != chain.len() {
        return Err(RewardError::LengthMismatch {
            chain: chain.len(),
            out: out_len,
        });
    }
    if !penalty.is_finite() {
        return Err(RewardError::InvalidPenalty { penalty });
    }
    chain
        .iter()
        .enumerate()
        .try_for_each(|(k, task)| task.validate(k))
}
