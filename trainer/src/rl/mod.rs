//! SAGE reinforcement learning: sequential rollout over chains of tasks, the
//! skill-integrated reward, and the GRPO policy update.
//!
//! One RL step takes a batch of [`TaskChain`]s (K tasks of one scenario each) and:
//!
//! 1. [`rollout_chains`]: runs `G` rollouts of every chain. Rollout `i` solves task 1
//!    with an empty library; the skills its episode saved (functions that ran without
//!    error) become its library for task 2, and so on. Libraries never cross
//!    rollouts. All `G x chains` episodes of one chain position generate together.
//! 2. [`chain_outcomes`] and [`chain_rewards`]: each task's outcome as the reward sees it
//!    (score, ended with code, which earlier positions' skills it called, traced at run
//!    time by the sandbox), then the reward of `core::reward` ([`RewardConfig`]).
//! 3. [`update_policy`]: advantages per chain position across the `G` rollouts
//!    (`core::grpo::chain_advantages`), log-probs recomputed by the policy in the forward
//!    computation of the update, per-token coefficients from `core::grpo::policy_loss`
//!    (prompt and observation tokens masked), one optimizer step.
//!
//! [`RlTrainer`] loops over steps with health statistics ([`RlStepStats`]) and stops a
//! run whose updates keep failing (non-finite loss or gradient). `[rl] apply_updates =
//! false` makes the same loop the run's update-off control, and [`control_gap`] says
//! how a run's curves compare with it.

mod chain;
mod control;
mod outcome;
mod trainer;
mod update;
mod world;

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::lora::LoraSettings;
use sage_core::grpo::{GrpoConfig, GrpoError};
use sage_core::reward::{RewardConfig, RewardError};
use sage_core::TaskChain;
use sage_envs::names::Named;
use sage_envs::prompt::PromptMode;

use crate::optim::{AdamWConfig, LrSchedule};
use crate::rollout::{Cause, RolloutConfig, RolloutError};

pub use chain::{rollout_chains, ChainRollout};
pub use control::{control_gap, ControlGap};
pub use outcome::{chain_outcomes, chain_rewards, group_outcomes, GroupOutcomes};
pub use trainer::{informative_chains, RlState, RlStepStats, RlTrainer};
pub use update::{update_policy, NotApplied, UpdateOptions, UpdateReport};
pub use world::{world_chains, WorldRl};

/// Settings of SAGE's RL stage. The defaults are SAGE's where the paper gives them
/// (K = 2, G = 8, the skill-integrated reward, clip 0.2, mean-centred advantages,
/// sequence-mean token-mean loss), scaled down in batch size for a CPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RlConfig {
    /// Tasks per chain (K): consecutive tasks of one scenario.
    pub chain_len: usize,
    /// Rollouts per chain (G).
    pub rollouts: usize,
    /// Chains per step; every step makes `chains_per_step * rollouts * chain_len`
    /// episodes.
    pub chains_per_step: usize,
    /// Optimizer steps of the run.
    pub steps: u64,
    /// `sage train` saves a checkpoint every this many steps (0: after the last only),
    /// after the last step, and after the step at which a SIGINT or SIGTERM stops it.
    pub checkpoint_every: u64,
    /// Learning rate of the RL stage, constant after `warmup_steps` (AdamW's other
    /// settings come from the run's `[optimizer]` section).
    pub learning_rate: f32,
    /// Steps of linear warm-up of the learning rate from `learning_rate / warmup_steps`
    /// (0: none). AdamW's moments start at zero in RL, so its first steps move every
    /// parameter by about the learning rate, whatever the gradient's size.
    pub warmup_steps: u64,
    /// Optimizer steps per batch of rollouts (1: SAGE's strictly on-policy update;
    /// `n > 1`: PPO-style, each step on every `n`-th sequence, the ratio clip active).
    pub minibatches: usize,
    /// Apply the updates. `false` runs the update-off control: the identical loop
    /// (same chains, same random streams, same rewards and advantages) without any
    /// optimizer step, the baseline every RL result is measured against.
    pub apply_updates: bool,
    /// Seeds per training template of the built-in world whose scenarios give the
    /// training chains.
    pub scenario_seeds: u64,
    /// Training seeds skipped before the first RL scenario (0: RL draws the first
    /// `scenario_seeds`). An SFT model's expert data covers the first `[data] seeds`
    /// training seeds, so an offset of at least that gives RL scenarios whose worlds and
    /// values the model has not memorized, where success must come from reading the
    /// instruction. At most 1000 together with `scenario_seeds`.
    pub scenario_seed_offset: u64,
    /// Training templates whose scenarios give the chains (empty: every one). A
    /// narrower set visits each of its templates more often in the same steps.
    pub templates: Vec<String>,
    /// The reward: kind (`SkillIntegrated`, `OutcomeOnly`, `Chain`) and no-code penalty.
    pub reward: RewardConfig,
    /// The GRPO loss and advantages.
    pub grpo: GrpoConfig,
    /// Turns, token limits and sampling of the rollouts.
    pub rollout: RolloutConfig,
    /// The system prompt's rules: `skills` (SAGE) or `direct` (the no-skill baseline).
    #[serde(with = "crate::text")]
    pub prompt: PromptMode,
    /// Which chains the update trains on: `off` (every chain of the step), `drop` (only
    /// the informative ones: a chain whose rollouts earned the same reward at every
    /// position has no advantage and only dilutes the loss), or `resample` (drop, then
    /// roll out further chains, `chains_per_step` at a time, until `chains_per_step`
    /// informative ones are found or `max_extra_chains` more were drawn: DAPO's dynamic
    /// sampling). The step's statistics are always those of its first
    /// `chains_per_step` chains. Under a KL term (`grpo.kl_coef > 0`) the chains left
    /// out no longer add to it either.
    #[serde(with = "crate::text")]
    pub dynamic_sampling: DynamicSampling,
    /// The most chains a `resample` step rolls out beyond `chains_per_step`. Every step
    /// sets aside `chains_per_step + max_extra_chains` chains of the shuffled order
    /// (`chains_per_step` without `resample`), drawn or not, so a run and its update-off
    /// control (which never draws extra chains: it trains on nothing) see the same
    /// chains at every step whatever the filter keeps.
    pub max_extra_chains: usize,
    /// Failed updates in a row (non-finite loss or gradient) that stop the run.
    pub max_failed_in_row: u32,
    /// Seed of the chain order and of sampling.
    pub seed: u64,
    /// LoRA adapters to train instead of every weight (off at rank 0).
    pub lora: LoraSettings,
}

impl Default for RlConfig {
    fn default() -> RlConfig {
        RlConfig {
            chain_len: 2,
            rollouts: 8,
            chains_per_step: 4,
            steps: 20,
            checkpoint_every: 5,
            learning_rate: 1e-4,
            warmup_steps: 0,
            minibatches: 1,
            apply_updates: true,
            scenario_seeds: 5,
            scenario_seed_offset: 0,
            templates: Vec::new(),
            reward: RewardConfig::default(),
            grpo: GrpoConfig::default(),
            rollout: RolloutConfig::default(),
            prompt: PromptMode::Skills,
            dynamic_sampling: DynamicSampling::Off,
            max_extra_chains: 8,
            max_failed_in_row: 5,
            seed: 0,
            lora: LoraSettings::default(),
        }
    }
}

impl RlConfig {
    /// The optimizer of the RL stage: `base` (the run's AdamW settings) at this
    /// configuration's learning rate, after its warm-up. The schedule counts optimizer
    /// steps, so with `minibatches = n` the warm-up spans `warmup_steps / n` RL steps.
    pub fn optimizer(&self, base: &AdamWConfig) -> AdamWConfig {
        let schedule = if self.warmup_steps == 0 {
            LrSchedule::Constant {
                lr: self.learning_rate,
            }
        } else {
            // A cosine from the peak to the same floor is flat after the warm-up.
            LrSchedule::WarmupCosine {
                peak_lr: self.learning_rate,
                min_lr: self.learning_rate,
                warmup_steps: self.warmup_steps,
                total_steps: self.warmup_steps,
            }
        };
        AdamWConfig {
            schedule,
            ..base.clone()
        }
    }

    /// Chains each step sets aside from the shuffled order: `chains_per_step`, and
    /// `max_extra_chains` more under `resample`.
    pub fn chains_set_aside(&self) -> usize {
        match self.dynamic_sampling {
            DynamicSampling::Resample => self.chains_per_step + self.max_extra_chains,
            DynamicSampling::Off | DynamicSampling::Drop => self.chains_per_step,
        }
    }

    /// The options of every update of the run.
    pub fn update_options(&self) -> UpdateOptions {
        UpdateOptions {
            apply: self.apply_updates,
            minibatches: self.minibatches,
        }
    }

    /// How many of RL's training seeds are among the first `data_seeds`, those an SFT
    /// model's expert data was built from: on those scenarios its success includes
    /// values it memorized rather than read from the instruction.
    pub fn seeds_in_sft_data(&self, data_seeds: u64) -> u64 {
        let end = self
            .scenario_seed_offset
            .saturating_add(self.scenario_seeds);
        end.min(data_seeds)
            .saturating_sub(self.scenario_seed_offset)
    }

    /// Checks every setting against its documented range.
    pub fn validate(&self) -> Result<(), RlError> {
        let invalid = |what: &str| Err(RlError::Config(what.to_owned()));
        if self.chain_len == 0 || self.chain_len > sage_core::reward::MAX_CHAIN_LEN {
            return invalid("chain_len must be in 1..=64");
        }
        if self.rollouts == 0 {
            return invalid("rollouts must be at least 1");
        }
        if self.chains_per_step == 0 {
            return invalid("chains_per_step must be at least 1");
        }
        if !(self.learning_rate > 0.0 && self.learning_rate.is_finite()) {
            return invalid("learning_rate must be finite and > 0");
        }
        if self.minibatches == 0 {
            return invalid("minibatches must be at least 1");
        }
        let sampling = &self.rollout;
        if sampling.temperature != 1.0 || sampling.top_k != 0 || sampling.top_p != 1.0 {
            return Err(RlError::Config(format!(
                "rollout sampling must be the policy's own distribution (temperature 1, \
                 top_k 0, top_p 1), got temperature {}, top_k {}, top_p {}: the update \
                 scores tokens under that distribution, so any other would train on \
                 samples it did not score",
                sampling.temperature, sampling.top_k, sampling.top_p
            )));
        }
        if self.scenario_seeds == 0 {
            return invalid("scenario_seeds must be at least 1");
        }
        if self.dynamic_sampling == DynamicSampling::Resample && self.max_extra_chains == 0 {
            return invalid(
                "dynamic_sampling = \"resample\" needs max_extra_chains >= 1 (with 0 it is \"drop\")",
            );
        }
        if self.max_failed_in_row == 0 {
            return invalid("max_failed_in_row must be at least 1");
        }
        if !self.reward.no_code_penalty.is_finite() {
            return invalid("reward.no_code_penalty must be finite");
        }
        self.grpo
            .validate()
            .map_err(|e| RlError::Config(format!("grpo: {e}")))
    }
}

/// Which chains an RL update trains on (`[rl] dynamic_sampling`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DynamicSampling {
    /// Every chain of the step.
    Off,
    /// The step's informative chains only (rewards that differ between its rollouts).
    Drop,
    /// The informative chains, with further chains rolled out to replace the others.
    Resample,
}

impl Named for DynamicSampling {
    const WHAT: &'static str = "dynamic_sampling";
    const ALL: &'static [DynamicSampling] = &[
        DynamicSampling::Off,
        DynamicSampling::Drop,
        DynamicSampling::Resample,
    ];
    fn name(self) -> &'static str {
        match self {
            DynamicSampling::Off => "off",
            DynamicSampling::Drop => "drop",
            DynamicSampling::Resample => "resample",
        }
    }
}

sage_envs::impl_named_text!(DynamicSampling);

/// Why an RL step or run failed.
#[derive(Debug)]
pub enum RlError {
    /// A setting is out of range.
    Config(String),
    /// A chain does not have the configured number of tasks.
    ChainLength {
        /// The chain's scenario.
        scenario_id: String,
        /// Tasks it has.
        tasks: usize,
        /// Tasks the configuration asks for.
        expected: usize,
    },
    /// No chain to train on.
    NoChains,
    /// The rollouts failed (a policy or environment failure, not an agent mistake).
    Rollout(RolloutError),
    /// The policy failed outside rollouts (log-probs, gradient, optimizer step).
    Policy(Cause),
    /// The frozen reference policy of the KL term failed.
    Reference(Cause),
    /// The reward rejected the outcomes.
    Reward(RewardError),
    /// The GRPO math rejected its inputs (advantages, the loss).
    Grpo(GrpoError),
    /// Too many updates in a row failed; the last good state is intact.
    Diverged {
        /// Failed updates in a row.
        failed: u32,
        /// The step of the last failure.
        step: u64,
    },
}

impl fmt::Display for RlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RlError::Config(what) => write!(f, "rl config: {what}"),
            RlError::ChainLength {
                scenario_id,
                tasks,
                expected,
            } => write!(
                f,
                "chain of scenario {scenario_id:?} has {tasks} tasks, chain_len is {expected}"
            ),
            RlError::NoChains => {
                write!(f, "no chains to train on (no scenario has chain_len tasks)")
            }
            RlError::Rollout(e) => write!(f, "rollout: {e}"),
            RlError::Policy(e) => write!(f, "policy: {e}"),
            RlError::Reference(e) => write!(f, "reference policy: {e}"),
            RlError::Reward(e) => write!(f, "reward: {e}"),
            RlError::Grpo(e) => write!(f, "grpo: {e}"),
            RlError::Diverged { failed, step } => write!(
                f,
                "{failed} updates in a row had a non-finite loss or gradient (last at step \
                 {step}); stopping with the last good state intact (lower the learning rate?)"
            ),
        }
    }
}

impl std::error::Error for RlError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RlError::Rollout(e) => Some(e),
            RlError::Policy(e) | RlError::Reference(e) => Some(e.as_ref()),
            RlError::Reward(e) => Some(e),
            RlError::Grpo(e) => Some(e),
            RlError::Config(_)
            | RlError::ChainLength { .. }
            | RlError::NoChains
            | RlError::Diverged { .. } => None,
        }
    }
}

impl From<RolloutError> for RlError {
    fn from(e: RolloutError) -> RlError {
        RlError::Rollout(e)
    }
}

/// Checks that every chain has `chain_len` tasks.
fn check_chains(chains: &[TaskChain], chain_len: usize) -> Result<(), RlError> {
    if chains.is_empty() {
        return Err(RlError::NoChains);
    }
    match chains.iter().find(|c| c.tasks.len() != chain_len) {
        Some(chain) => Err(RlError::ChainLength {
            scenario_id: chain.scenario_id.clone(),
            tasks: chain.tasks.len(),
            expected: chain_len,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;
    use std::io;

    #[test]
    fn a_policy_failure_stays_reachable_through_the_error_chain() {
        let error = RlError::Rollout(RolloutError::Policy(Box::new(io::Error::other("gpu lost"))));
        let rollout = error.source().expect("the rollout error is the source");
        let cause = rollout.source().expect("the policy's error is its source");
        let io_error = cause
            .downcast_ref::<io::Error>()
            .expect("kept whole, not as text");
        assert_eq!(io_error.to_string(), "gpu lost");
        assert_eq!(error.to_string(), "rollout: policy: gpu lost");
        let grpo = RlError::Grpo(GrpoError::MissingReference);
        assert!(grpo.source().unwrap().downcast_ref::<GrpoError>().is_some());
    }
}
