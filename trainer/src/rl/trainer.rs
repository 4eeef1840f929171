//! [`RlTrainer`]: the RL step loop over a fixed set of training chains, whose whole
//! position is a small [`RlState`], with the health statistics of every step.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use sage_core::env::EpisodeEnd;
use sage_core::policy::Policy;
use sage_core::{Skill, TaskChain};

use super::{
    chain_rewards, check_chains, group_outcomes, rollout_chains, update_policy, ChainRollout,
    DynamicSampling, NotApplied, RlConfig, RlError, UpdateReport,
};
use crate::chat::ChatTemplate;
use crate::metrics::{MetricValue, MetricsError, MetricsLog};
use crate::rollout::{EnvFactory, RolloutError};
use crate::sampling::SequenceRng;

/// Where a run is: enough to resume it exactly (with the model and optimizer).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RlState {
    /// Steps taken (applied or not).
    pub step: u64,
    /// Passes over the training chains started.
    pub epoch: u64,
    /// The next chain of the current pass, in its shuffled order.
    pub next_chain: usize,
    /// Updates in a row that were not applied because of a non-finite value.
    pub failed_in_row: u32,
    /// Such updates over the whole run.
    pub failed_total: u64,
}

/// The health of one step: rewards, skills, the update, and throughput.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RlStepStats {
    /// The step (1-based).
    pub step: u64,
    /// Mean reward per chain position.
    pub reward_mean: Vec<f32>,
    /// Population standard deviation of the rewards per chain position.
    pub reward_std: Vec<f32>,
    /// Share of episodes per chain position whose task passed.
    pub success: Vec<f32>,
    /// Share of episodes that saved at least one skill.
    pub skill_generation: f32,
    /// Share of episodes per chain position that saved at least one skill (at position
    /// 1, with an empty library: the choice to write one).
    #[serde(default)]
    pub skill_writing: Vec<f32>,
    /// Share of groups (one chain's `G` rollouts) per chain position where at least one
    /// rollout passed: pass@G. `solved_any - success` is the success that sharpening
    /// the policy onto answers it already samples could add; a group where none passed
    /// has no advantage and teaches nothing.
    #[serde(default)]
    pub solved_any: Vec<f32>,
    /// Share of groups per chain position where every rollout passed (no advantage
    /// either: nothing left to learn there).
    #[serde(default)]
    pub solved_all: Vec<f32>,
    /// Share of the step's first `chains_per_step` chains whose rollouts earned the same
    /// reward at every position: no advantage, nothing to learn (what `[rl]
    /// dynamic_sampling` leaves out).
    #[serde(default)]
    pub uninformative_chains: f32,
    /// Chains whose rollouts the step ran: `chains_per_step`, and the extra ones of
    /// `dynamic_sampling = "resample"`.
    #[serde(default)]
    pub chains_rolled_out: u64,
    /// Chains the update trained on (every one rolled out, without dynamic sampling).
    #[serde(default)]
    pub chains_trained: u64,
    /// Episodes whose environment failed (a server down or timing out): their chains
    /// are left out of the update, whatever `dynamic_sampling` says.
    #[serde(default)]
    pub failed_episodes: u64,
    /// Share of the episodes given a non-empty library that called one of its skills.
    pub skill_usage: f32,
    /// Share of episodes that ended without code.
    pub no_code: f32,
    /// Mean agent turns per episode.
    pub steps: f32,
    /// Mean generated tokens per episode.
    pub generated_tokens: f32,
    /// Mean `-log p` of the sampled tokens: an estimate of the policy's entropy.
    pub entropy: f32,
    /// Share of agent turns cut off at their new-token limit.
    #[serde(default)]
    pub truncated_turns: f32,
    /// Agent executions whose sandbox worker process was killed or died during the
    /// step's rollouts (memory, CPU time, the kill timer); counted process-wide.
    #[serde(default)]
    pub stopped_sandboxes: u64,
    /// The update.
    pub update: UpdateReport,
    /// Generated tokens per second of the rollouts.
    pub rollout_tokens_per_s: f32,
    /// Tokens per second of the update (log-prob pass plus backward pass).
    pub update_tokens_per_s: f32,
}

impl RlStepStats {
    /// Appends the statistics to `log` as one row (see [`RlStepStats::metrics_row`]).
    pub fn log_to(&self, log: &mut MetricsLog) -> Result<(), MetricsError> {
        let row = self.metrics_row();
        let row: Vec<(&str, MetricValue)> =
            row.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
        log.log(&row)
    }

    /// The statistics as one metrics row (per-position values as `NAME_k`, 1-based;
    /// `success_all` and `reward_all` average them over positions).
    pub fn metrics_row(&self) -> Vec<(String, MetricValue)> {
        let mut row = vec![
            ("step".to_owned(), MetricValue::UInt(self.step)),
            (
                "stopped_sandboxes".to_owned(),
                MetricValue::UInt(self.stopped_sandboxes),
            ),
        ];
        let mean = |values: &[f32]| values.iter().sum::<f32>() / values.len().max(1) as f32;
        row.push((
            "success_all".to_owned(),
            MetricValue::Float(f64::from(mean(&self.success))),
        ));
        row.push((
            "reward_all".to_owned(),
            MetricValue::Float(f64::from(mean(&self.reward_mean))),
        ));
        row.push((
            "solved_any_all".to_owned(),
            MetricValue::Float(f64::from(mean(&self.solved_any))),
        ));
        row.push((
            "uninformative_chains".to_owned(),
            MetricValue::Float(f64::from(self.uninformative_chains)),
        ));
        row.push((
            "chains_rolled_out".to_owned(),
            MetricValue::UInt(self.chains_rolled_out),
        ));
        row.push((
            "failed_episodes".to_owned(),
            MetricValue::UInt(self.failed_episodes),
        ));
        row.push((
            "chains_trained".to_owned(),
            MetricValue::UInt(self.chains_trained),
        ));
        let per_position = [
            ("reward_mean", &self.reward_mean),
            ("reward_std", &self.reward_std),
            ("success", &self.success),
            ("skill_writing", &self.skill_writing),
            ("solved_any", &self.solved_any),
            ("solved_all", &self.solved_all),
        ];
        for (name, values) in per_position {
            for (k, &v) in values.iter().enumerate() {
                row.push((
                    format!("{name}_{}", k + 1),
                    MetricValue::Float(f64::from(v)),
                ));
            }
        }
        let u = &self.update;
        let floats = [
            ("skill_generation", self.skill_generation),
            ("skill_usage", self.skill_usage),
            ("no_code", self.no_code),
            ("steps", self.steps),
            ("generated_tokens", self.generated_tokens),
            ("entropy", self.entropy),
            ("truncated_turns", self.truncated_turns),
            ("loss", u.loss),
            ("zero_advantage_groups", u.zero_advantage_groups),
            ("clip_fraction", u.clip_fraction),
            ("approx_kl", u.approx_kl),
            ("ref_kl", u.ref_kl),
            ("logprob_mismatch", u.logprob_mismatch),
            ("grad_norm", u.grad_norm),
            ("step_kl", u.step_kl),
            ("logp_change_positive", u.logp_change_positive),
            ("logp_change_negative", u.logp_change_negative),
            ("learning_rate", u.learning_rate),
            ("rollout_tokens_per_s", self.rollout_tokens_per_s),
            ("update_tokens_per_s", self.update_tokens_per_s),
        ];
        row.extend(
            floats
                .into_iter()
                .map(|(name, v)| (name.to_owned(), MetricValue::Float(f64::from(v)))),
        );
        row.push((
            "applied".to_owned(),
            MetricValue::UInt(u64::from(u.not_applied.is_none())),
        ));
        row
    }
}

/// The RL loop: which chains each step trains on, and the failure count.
pub struct RlTrainer {
    config: RlConfig,
    chains: Vec<TaskChain>,
    state: RlState,
}

impl RlTrainer {
    /// A trainer over `chains` (each of `config.chain_len` tasks) from `state`
    /// (`RlState::default()` for a fresh run).
    pub fn new(
        config: RlConfig,
        chains: Vec<TaskChain>,
        state: RlState,
    ) -> Result<RlTrainer, RlError> {
        config.validate()?;
        check_chains(&chains, config.chain_len)?;
        Ok(RlTrainer {
            config,
            chains,
            state,
        })
    }

    /// The run's position.
    pub fn state(&self) -> &RlState {
        &self.state
    }

    /// The configuration.
    pub fn config(&self) -> &RlConfig {
        &self.config
    }

    /// All configured steps are taken.
    pub fn finished(&self) -> bool {
        self.state.step >= self.config.steps
    }

    /// The chains set aside for the next step ([`RlConfig::chains_set_aside`]): the
    /// next ones of a per-pass shuffled order.
    fn next_chains(&mut self) -> Vec<TaskChain> {
        let wanted = self.config.chains_set_aside();
        let mut batch = Vec::with_capacity(wanted);
        let mut order = shuffled(self.chains.len(), self.config.seed, self.state.epoch);
        while batch.len() < wanted {
            if self.state.next_chain >= self.chains.len() {
                self.state.epoch += 1;
                self.state.next_chain = 0;
                order = shuffled(self.chains.len(), self.config.seed, self.state.epoch);
            }
            batch.push(self.chains[order[self.state.next_chain]].clone());
            self.state.next_chain += 1;
        }
        batch
    }

    /// Takes one step: rollouts, rewards, update. `new_env` makes the environments
    /// (one per rollout, or as many as its capacity); `reference` is the frozen policy
    /// of a KL term. An update that is not applied because of a non-finite value is
    /// counted; too many in a row is [`RlError::Diverged`]. Chains with an episode whose
    /// environment failed are left out of the update.
    pub fn step<P: Policy, F: EnvFactory + ?Sized>(
        &mut self,
        policy: &mut P,
        reference: Option<&mut P>,
        new_env: &F,
        template: &ChatTemplate<'_>,
        system_prompt: &dyn Fn(&[Skill]) -> String,
    ) -> Result<RlStepStats, RlError> {
        let set_aside = self.next_chains();
        let (first, extra) = set_aside.split_at(self.config.chains_per_step);
        let seed = self.config.seed ^ self.state.step.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let started = Instant::now();
        let stopped_before = sage_envs::sandbox::stopped_workers();
        let mut wave = Wave {
            policy: &mut *policy,
            new_env,
            template,
            system_prompt,
            config: &self.config,
        };
        let (rollouts, rewards) = wave.roll_out(first, seed)?;
        let informative = informative_chains(&rewards, self.config.rollouts, self.config.chain_len);
        let mut stats = step_stats(
            &rollouts,
            &rewards,
            self.config.chain_len,
            self.config.rollouts,
        );
        let mut generated = generated_tokens(&rollouts);
        let mut failed_episodes = failed_episodes(&rollouts);
        let mut batch = TrainingBatch::new(&self.config);
        let kept = match self.config.dynamic_sampling {
            DynamicSampling::Off => vec![true; informative.len()],
            DynamicSampling::Drop | DynamicSampling::Resample => informative.clone(),
        };
        batch.add_kept(rollouts, rewards, &kept);
        let mut rolled_out = first.len();
        // Only a run that trains draws more: the control's update is off anyway.
        if self.config.dynamic_sampling == DynamicSampling::Resample && self.config.apply_updates {
            let mut wave_index = 0u64;
            for more in extra.chunks(self.config.chains_per_step) {
                if batch.chains() >= self.config.chains_per_step {
                    break;
                }
                wave_index += 1;
                let (rollouts, rewards) =
                    wave.roll_out(more, seed ^ wave_index.wrapping_mul(0xd1b5_4a32_d192_ed03))?;
                let informative =
                    informative_chains(&rewards, self.config.rollouts, self.config.chain_len);
                generated += generated_tokens(&rollouts);
                failed_episodes += self::failed_episodes(&rollouts);
                rolled_out += more.len();
                batch.add_kept(rollouts, rewards, &informative);
            }
            batch.keep_first(self.config.chains_per_step);
        }
        let rollout_seconds = started.elapsed().as_secs_f32();
        let stopped_sandboxes = sage_envs::sandbox::stopped_workers() - stopped_before;
        let started = Instant::now();
        let update = if batch.chains() == 0 {
            // No chain of the step had a reward that differed between its rollouts.
            UpdateReport {
                zero_advantage_groups: 1.0,
                not_applied: Some(if self.config.apply_updates {
                    NotApplied::NoSignal
                } else {
                    NotApplied::Control
                }),
                ..UpdateReport::default()
            }
        } else {
            update_policy(
                policy,
                reference,
                &batch.rollouts,
                &batch.rewards,
                self.config.rollouts,
                &self.config.grpo,
                self.config.update_options(),
            )?
        };
        let update_seconds = started.elapsed().as_secs_f32();
        self.state.step += 1;
        if let Some(why @ NotApplied::NonFinite(_)) = &update.not_applied {
            self.state.failed_in_row += 1;
            self.state.failed_total += 1;
            tracing::warn!("rl step {}: update not applied: {why}", self.state.step);
            if self.state.failed_in_row >= self.config.max_failed_in_row {
                return Err(RlError::Diverged {
                    failed: self.state.failed_in_row,
                    step: self.state.step,
                });
            }
        } else {
            self.state.failed_in_row = 0;
        }
        stats.step = self.state.step;
        stats.stopped_sandboxes = stopped_sandboxes;
        stats.uninformative_chains =
            informative.iter().filter(|&&i| !i).count() as f32 / informative.len().max(1) as f32;
        stats.chains_rolled_out = rolled_out as u64;
        stats.chains_trained = batch.chains() as u64;
        stats.failed_episodes = failed_episodes;
        stats.rollout_tokens_per_s = per_second(generated as f32, rollout_seconds);
        // The update runs a log-prob pass and a backward pass (itself a forward and a
        // backward) over the trained sequences.
        stats.update_tokens_per_s = per_second(update.backward_tokens as f32, update_seconds);
        stats.update = update;
        Ok(stats)
    }
}

/// What a step's waves of rollouts need: the policy, the environments' maker, the chat.
struct Wave<'a, 't, P, F: ?Sized> {
    policy: &'a mut P,
    new_env: &'a F,
    template: &'a ChatTemplate<'t>,
    system_prompt: &'a dyn Fn(&[Skill]) -> String,
    config: &'a RlConfig,
}

impl<P: Policy, F: EnvFactory + ?Sized> Wave<'_, '_, P, F> {
    /// `G` rollouts of every chain of `chains` (fresh environments) and their rewards.
    fn roll_out(
        &mut self,
        chains: &[TaskChain],
        seed: u64,
    ) -> Result<(Vec<ChainRollout>, Vec<f32>), RlError> {
        let rollouts_per_chain = self.config.rollouts;
        let mut envs = self
            .new_env
            .make_for(chains.len() * rollouts_per_chain)
            .map_err(|e| RlError::Rollout(RolloutError::Environment(Box::new(e))))?;
        let rollouts = rollout_chains(
            self.policy,
            &mut envs,
            self.template,
            self.system_prompt,
            chains,
            rollouts_per_chain,
            &self.config.rollout,
            seed,
        )?;
        let rewards = chain_rewards(&rollouts, &self.config.reward)?;
        Ok((rollouts, rewards))
    }
}

/// The chains an update trains on, laid out as [`update_policy`] reads them.
struct TrainingBatch {
    /// `[chain][rollout]`.
    rollouts: Vec<ChainRollout>,
    /// `[chain][rollout][position]`.
    rewards: Vec<f32>,
    /// Rollouts per chain (G).
    group: usize,
    /// Tasks per chain (K).
    chain_len: usize,
}

impl TrainingBatch {
    /// An empty batch of chains of `config`'s shape.
    fn new(config: &RlConfig) -> TrainingBatch {
        TrainingBatch {
            rollouts: Vec::new(),
            rewards: Vec::new(),
            group: config.rollouts,
            chain_len: config.chain_len,
        }
    }

    /// Chains held.
    fn chains(&self) -> usize {
        self.rollouts.len() / self.group
    }

    /// Adds the chains of a wave whose `kept` flag is set and none of whose episodes
    /// had its environment fail.
    fn add_kept(&mut self, rollouts: Vec<ChainRollout>, rewards: Vec<f32>, kept: &[bool]) {
        let group = self.group;
        let mut kept = kept.to_vec();
        for (index, rollout) in rollouts.iter().enumerate() {
            if rollout
                .episodes
                .iter()
                .any(|e| e.episode.end == EpisodeEnd::EnvironmentFailed)
            {
                kept[index / group] = false;
            }
        }
        self.rollouts.extend(
            rollouts
                .into_iter()
                .enumerate()
                .filter(|(index, _)| kept[index / group])
                .map(|(_, rollout)| rollout),
        );
        for (chain, chunk) in rewards.chunks(group * self.chain_len).enumerate() {
            if kept[chain] {
                self.rewards.extend_from_slice(chunk);
            }
        }
    }

    /// Keeps the first `chains` chains.
    fn keep_first(&mut self, chains: usize) {
        self.rollouts.truncate(chains * self.group);
        self.rewards.truncate(chains * self.group * self.chain_len);
    }
}

/// Per chain of a wave (rewards laid out `[chain][rollout][position]`): whether its
/// rollouts' rewards differ at some position, so that its advantages are not all 0.
pub fn informative_chains(
    rewards: &[f32],
    rollouts_per_chain: usize,
    chain_len: usize,
) -> Vec<bool> {
    let per_chain = (rollouts_per_chain * chain_len).max(1);
    rewards
        .chunks(per_chain)
        .map(|chain| {
            (0..chain_len).any(|position| {
                let mut values = chain.iter().skip(position).step_by(chain_len.max(1));
                let first = values.next();
                values.any(|v| Some(v) != first)
            })
        })
        .collect()
}

/// Episodes of `rollouts` whose environment failed.
fn failed_episodes(rollouts: &[ChainRollout]) -> u64 {
    rollouts
        .iter()
        .flat_map(|r| &r.episodes)
        .filter(|e| e.episode.end == EpisodeEnd::EnvironmentFailed)
        .count() as u64
}

/// Tokens the agent generated over every episode of `rollouts`.
fn generated_tokens(rollouts: &[ChainRollout]) -> u64 {
    rollouts
        .iter()
        .flat_map(|r| &r.episodes)
        .map(|e| e.episode.generated_tokens())
        .sum()
}

/// `amount / seconds`, 0 for an empty interval.
fn per_second(amount: f32, seconds: f32) -> f32 {
    if seconds > 0.0 {
        amount / seconds
    } else {
        0.0
    }
}

/// A permutation of `0..n`, fixed by `seed` and `epoch`.
fn shuffled(n: usize, seed: u64, epoch: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = SequenceRng::new(seed, epoch);
    for i in (1..n).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

/// The statistics of a step's rollouts, laid out `[chain][rollout]` with `group` rollouts
/// per chain (the update and throughput are filled in by the caller).
fn step_stats(
    rollouts: &[ChainRollout],
    rewards: &[f32],
    chain_len: usize,
    group: usize,
) -> RlStepStats {
    let mut stats = RlStepStats::default();
    for position in 0..chain_len {
        let groups = group_outcomes(rollouts, group, position);
        stats.solved_any.push(groups.solved_any);
        stats.solved_all.push(groups.solved_all);
        let values: Vec<f32> = rewards
            .iter()
            .skip(position)
            .step_by(chain_len)
            .copied()
            .collect();
        let n = values.len().max(1) as f32;
        let mean = values.iter().sum::<f32>() / n;
        let variance = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
        stats.reward_mean.push(mean);
        stats.reward_std.push(variance.sqrt());
        let passed = rollouts
            .iter()
            .filter(|r| r.episodes[position].episode.evaluation.passed)
            .count();
        stats
            .success
            .push(passed as f32 / rollouts.len().max(1) as f32);
        let writing = rollouts
            .iter()
            .filter(|r| !r.episodes[position].episode.saved_skills().is_empty())
            .count();
        stats
            .skill_writing
            .push(writing as f32 / rollouts.len().max(1) as f32);
    }
    let episodes: Vec<_> = rollouts.iter().flat_map(|r| &r.episodes).collect();
    let share = |count: usize, of: usize| count as f32 / of.max(1) as f32;
    let total = episodes.len();
    stats.skill_generation = share(
        episodes
            .iter()
            .filter(|e| !e.episode.saved_skills().is_empty())
            .count(),
        total,
    );
    let with_library: Vec<_> = episodes
        .iter()
        .filter(|e| !e.episode.library.is_empty())
        .collect();
    stats.skill_usage = share(
        with_library
            .iter()
            .filter(|e| !e.episode.used_skills().is_empty())
            .count(),
        with_library.len(),
    );
    stats.no_code = share(
        episodes
            .iter()
            .filter(|e| e.episode.end == EpisodeEnd::NoCode)
            .count(),
        total,
    );
    let turns: usize = episodes.iter().map(|e| e.episode.steps()).sum();
    stats.steps = share(turns, total);
    stats.truncated_turns = share(
        episodes.iter().map(|e| e.truncated_turns as usize).sum(),
        turns,
    );
    let generated: u64 = episodes.iter().map(|e| e.episode.generated_tokens()).sum();
    stats.generated_tokens = generated as f32 / total.max(1) as f32;
    let (neg_logp, sampled) = episodes
        .iter()
        .flat_map(|e| &e.logprobs)
        .fold((0.0f64, 0usize), |(sum, n), &l| (sum - f64::from(l), n + 1));
    stats.entropy = if sampled == 0 {
        0.0
    } else {
        (neg_logp / sampled as f64) as f32
    };
    stats
}
