//! [`rollout_chains`]: SAGE's sequential rollout of `G` rollouts per chain, each with its
//! own skill library, all episodes of one chain position generated together.

use sage_core::policy::Policy;
use sage_core::reward::TaskOutcome;
use sage_core::{Environment, Skill, TaskChain};

use super::outcome::task_outcome;
use super::{check_chains, RlError};
use crate::chat::ChatTemplate;
use crate::rollout::{run_episodes, EpisodeRequest, RolloutConfig, RolloutEpisode};

/// One rollout of one chain: an episode per task, in chain order.
#[derive(Clone, Debug)]
pub struct ChainRollout {
    /// Index of the chain in the batch.
    pub chain: usize,
    /// Index of the rollout among the chain's `G`.
    pub rollout: usize,
    /// The episodes, one per chain position.
    pub episodes: Vec<RolloutEpisode>,
    /// Each episode's outcome as the reward sees it, one per chain position.
    pub outcomes: Vec<TaskOutcome>,
    /// The rollout's library after the last task: every skill its episodes saved, the
    /// latest definition of each name.
    pub library: Vec<Skill>,
}

/// Runs `rollouts` rollouts of every chain and returns them ordered
/// `[chain][rollout]` (rollout `i` of chain `c` at `c * rollouts + i`).
///
/// `envs` must hold at least `chains.len() * rollouts` environments; environment `j`
/// runs every episode of rollout `j` in that order. Every chain must have the same
/// number of tasks. Sampling is seeded by `seed` and the chain position.
#[allow(clippy::too_many_arguments)]
pub fn rollout_chains<P: Policy, E: Environment>(
    policy: &mut P,
    envs: &mut [E],
    template: &ChatTemplate<'_>,
    system_prompt: &dyn Fn(&[Skill]) -> String,
    chains: &[TaskChain],
    rollouts: usize,
    config: &RolloutConfig,
    seed: u64,
) -> Result<Vec<ChainRollout>, RlError> {
    let chain_len = chains.first().map_or(0, |c| c.tasks.len());
    check_chains(chains, chain_len)?;
    let mut out: Vec<ChainRollout> = (0..chains.len() * rollouts)
        .map(|j| ChainRollout {
            chain: j / rollouts.max(1),
            rollout: j % rollouts.max(1),
            episodes: Vec::with_capacity(chain_len),
            outcomes: Vec::with_capacity(chain_len),
            library: Vec::new(),
        })
        .collect();
    for position in 0..chain_len {
        let requests: Vec<EpisodeRequest<'_>> = out
            .iter()
            .map(|r| EpisodeRequest {
                task: &chains[r.chain].tasks[position],
                library: &r.library,
            })
            .collect();
        let position_seed = seed ^ (position as u64 + 1).wrapping_mul(0xd6e8_feb8_6659_fd93);
        let episodes = run_episodes(
            policy,
            envs,
            template,
            system_prompt,
            &requests,
            config,
            position_seed,
        )?;
        for (rollout, episode) in out.iter_mut().zip(episodes) {
            let chain = &chains[rollout.chain];
            rollout
                .outcomes
                .push(task_outcome(&episode, &rollout.library, chain, position));
            // A skill that failed to load stays out of the chain's later tasks.
            for dropped in &episode.dropped {
                tracing::debug!(
                    "skill `{}` dropped from the library: {}",
                    dropped.name,
                    dropped.reason
                );
                rollout.library.retain(|s| s.name != dropped.name);
            }
            for skill in episode.episode.saved_skills() {
                match rollout.library.iter_mut().find(|s| s.name == skill.name) {
                    Some(slot) => *slot = skill.clone(),
                    None => rollout.library.push(skill.clone()),
                }
            }
            rollout.episodes.push(episode);
        }
    }
    Ok(out)
}
