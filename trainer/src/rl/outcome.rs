//! What the reward sees of an episode ([`TaskOutcome`]), the rewards of a batch of
//! chain rollouts, and how its groups turned out ([`GroupOutcomes`]).

use sage_core::env::EpisodeEnd;
use sage_core::reward::{Reward, RewardConfig, TaskOutcome};
use sage_core::{Skill, TaskChain};

use super::{ChainRollout, RlError};
use crate::rollout::RolloutEpisode;

/// The outcome of the episode at chain position `position`, given the library it
/// started with: its score, whether it ended with code, and the earlier positions whose
/// saved skills its code called (the sandbox traces calls at run time; a name the
/// episode redefined does not count as a use).
pub(super) fn task_outcome(
    episode: &RolloutEpisode,
    library: &[Skill],
    chain: &TaskChain,
    position: usize,
) -> TaskOutcome {
    let evaluation = &episode.episode.evaluation;
    let mut outcome = TaskOutcome::new(
        evaluation.score.clamp(0.0, 1.0),
        episode.episode.end != EpisodeEnd::NoCode,
    );
    for name in episode.episode.used_skills() {
        let source = library.iter().find(|s| s.name == name).and_then(|skill| {
            chain.tasks[..position]
                .iter()
                .position(|t| t.id == skill.origin.task_id)
        });
        if let Some(source) = source {
            outcome = outcome.using_skill_from(source);
        }
    }
    outcome
}

/// The outcomes of every rollout, laid out `[chain][rollout][position]` (the layout of
/// `core::grpo::chain_advantages`).
pub fn chain_outcomes(rollouts: &[ChainRollout]) -> Vec<TaskOutcome> {
    rollouts
        .iter()
        .flat_map(|r| r.outcomes.iter().copied())
        .collect()
}

/// The reward of every task of every rollout under `reward`, laid out like
/// [`chain_outcomes`].
pub fn chain_rewards(
    rollouts: &[ChainRollout],
    reward: &RewardConfig,
) -> Result<Vec<f32>, RlError> {
    let mut out = Vec::new();
    for rollout in rollouts {
        let mut rewards = vec![0.0f32; rollout.outcomes.len()];
        reward
            .rewards(&rollout.outcomes, &mut rewards)
            .map_err(RlError::Reward)?;
        out.extend(rewards);
    }
    Ok(out)
}

/// How the groups of a batch (each chain's `G` rollouts) turned out at one chain
/// position. GRPO learns only from groups that are neither: where every rollout
/// failed, or every one passed, all advantages are zero.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GroupOutcomes {
    /// Share of groups where at least one rollout passed (pass@G).
    pub solved_any: f32,
    /// Share of groups where every rollout passed.
    pub solved_all: f32,
}

/// The [`GroupOutcomes`] of `rollouts` (laid out `[chain][rollout]`, `group` rollouts
/// per chain) at chain position `position`.
pub fn group_outcomes(rollouts: &[ChainRollout], group: usize, position: usize) -> GroupOutcomes {
    let (mut any, mut all, mut groups) = (0usize, 0usize, 0usize);
    for chain in rollouts.chunks(group.max(1)) {
        let passed = chain
            .iter()
            .filter(|r| r.episodes[position].episode.evaluation.passed)
            .count();
        any += usize::from(passed > 0);
        all += usize::from(passed == chain.len());
        groups += 1;
    }
    let share = |count: usize| count as f32 / groups.max(1) as f32;
    GroupOutcomes {
        solved_any: share(any),
        solved_all: share(all),
    }
}
