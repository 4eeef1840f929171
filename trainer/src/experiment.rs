//! The paper-style experiment: the arms of SAGE's comparison trained from the same data
//! with the same seeds and budget, evaluated on the same splits, and summarised per
//! split and arm as mean and spread over seeds.
//!
//! One SFT run on the expert's skill trajectories (and one on its plain-code trajectories
//! when the no-skill baseline is in) starts every arm that builds on it; the seeds vary
//! what comes after (the order of the training chains and the sampling of rollouts, and
//! of evaluation when its temperature is above 0), so an arm without RL evaluated
//! greedily has no spread:
//!
//! | arm | SFT data | RL | evaluation |
//! | --- | --- | --- | --- |
//! | `sft-only` | skills | none | skill prompt, same-scenario library |
//! | `sft-direct` | plain code | none | plain-code prompt, no library |
//! | `sage` | skills | skill-integrated reward, K = `[rl] chain_len` | as above |
//! | `sage-outcome-only` | skills | outcome-only reward | as above |
//! | `sage-chain-reward` | skills | chain reward | as above |
//! | `sage-k3` | skills | skill-integrated reward, K = 3 | as above |
//! | `sage-kl` (not run by default) | skills | as `sage`, plus a k3 KL term of weight 0.04 to the frozen SFT model | as above |
//! | `grpo-no-skills` | plain code | outcome-only reward, plain-code prompt, K = 1 | plain-code prompt, no library |
//!
//! Every RL arm takes `[rl] steps` optimizer steps of `[rl] chains_per_step` chains;
//! the K = 3 and K = 1 arms take as many chains per step as `sage` has tasks per step
//! divided by their K (rounded up), so every arm sees about the same number of tasks.
//!
//! With `[experiment] controls` (the default) every RL arm first runs its update-off
//! control: the same loop under the same seed without optimizer steps. The second
//! table gives each arm's sampled success and reward over the last third of its steps
//! against its control's, and its greedy `iid` SGC against its SFT start's (`sft-only`,
//! or `sft-direct` for GRPO without skills).
//!
//! This module holds the settings (the arms and `[experiment]`); the runner is
//! [`crate::pipeline::experiment`].

use serde::{Deserialize, Serialize};

use sage_core::retrieval::RetrievalMode;
use sage_core::reward::RewardKind;
use sage_envs::expert::ExpertMode;
use sage_envs::names::Named;
use sage_envs::prompt::PromptMode;

use crate::eval::EvalConfig;
use crate::optim::LrSchedule;
use crate::rl::RlConfig;
use crate::text;

/// One arm of the comparison (see the [module docs](self)), named in settings by
/// [`Arm::name`] (`FromStr`, `Display`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arm {
    /// The SFT model on skill trajectories, without RL.
    SftOnly,
    /// The SFT model on plain-code trajectories, without RL: GRPO-no-skills' start.
    SftDirect,
    /// SAGE: RL with sequential rollout and the skill-integrated reward.
    Sage,
    /// SAGE's rollout with the outcome-only reward.
    OutcomeOnly,
    /// SAGE's rollout with the chain reward.
    ChainReward,
    /// SAGE with chains of three tasks.
    SageK3,
    /// SAGE with a k3 KL penalty of weight [`Arm::KL_COEF`] to its frozen SFT start.
    SageKl,
    /// GRPO without a skill library, from SFT on plain-code trajectories.
    GrpoNoSkills,
}

impl Arm {
    /// Every arm, in table order.
    pub const ALL: [Arm; 8] = [
        Arm::SftOnly,
        Arm::SftDirect,
        Arm::GrpoNoSkills,
        Arm::Sage,
        Arm::OutcomeOnly,
        Arm::ChainReward,
        Arm::SageK3,
        Arm::SageKl,
    ];

    /// The arms an experiment runs unless told otherwise: every arm but `sage-kl`, which
    /// SAGE.md offers as an option rather than part of the method, and which costs a
    /// forward pass of the reference model per update.
    pub const DEFAULT: [Arm; 7] = [
        Arm::SftOnly,
        Arm::SftDirect,
        Arm::GrpoNoSkills,
        Arm::Sage,
        Arm::OutcomeOnly,
        Arm::ChainReward,
        Arm::SageK3,
    ];

    /// The weight of the `sage-kl` arm's k3 KL term (the value DeepSeekMath's GRPO used).
    pub const KL_COEF: f32 = 0.04;

    /// The arm's name in configurations and tables.
    pub fn name(self) -> &'static str {
        match self {
            Arm::SftOnly => "sft-only",
            Arm::SftDirect => "sft-direct",
            Arm::Sage => "sage",
            Arm::OutcomeOnly => "sage-outcome-only",
            Arm::ChainReward => "sage-chain-reward",
            Arm::SageK3 => "sage-k3",
            Arm::SageKl => "sage-kl",
            Arm::GrpoNoSkills => "grpo-no-skills",
        }
    }

    /// The arm has an RL stage (every arm but the SFT models alone).
    pub fn trains(self) -> bool {
        !matches!(self, Arm::SftOnly | Arm::SftDirect)
    }

    /// The arm without RL that this arm starts from.
    pub fn sft_start(self) -> Arm {
        match self {
            Arm::SftDirect | Arm::GrpoNoSkills => Arm::SftDirect,
            _ => Arm::SftOnly,
        }
    }

    /// The expert data mode of the arm's SFT: `direct` for the plain-code arms,
    /// `skill_data` (`skills` or `mixed`) for the others.
    pub fn sft_mode(self, skill_data: ExpertMode) -> ExpertMode {
        if self.sft_start() == Arm::SftDirect {
            ExpertMode::Direct
        } else {
            skill_data
        }
    }

    /// The arm's RL settings derived from the run's; `None` for an arm without RL.
    pub fn rl_config(self, base: &RlConfig) -> Option<RlConfig> {
        if !self.trains() {
            return None;
        }
        let tasks_per_step = base.chains_per_step * base.chain_len;
        let with_chain_len = |chain_len: usize| RlConfig {
            chain_len,
            chains_per_step: tasks_per_step.div_ceil(chain_len),
            ..base.clone()
        };
        let mut rl = match self {
            Arm::SftOnly | Arm::SftDirect | Arm::Sage | Arm::OutcomeOnly | Arm::ChainReward => {
                base.clone()
            }
            Arm::SageK3 => with_chain_len(3),
            Arm::SageKl => {
                let mut rl = base.clone();
                rl.grpo.kl_coef = Arm::KL_COEF;
                rl
            }
            Arm::GrpoNoSkills => RlConfig {
                prompt: PromptMode::Direct,
                ..with_chain_len(1)
            },
        };
        rl.reward.kind = match self {
            Arm::OutcomeOnly | Arm::GrpoNoSkills => RewardKind::OutcomeOnly,
            Arm::ChainReward => RewardKind::Chain,
            _ => RewardKind::SkillIntegrated,
        };
        Some(rl)
    }

    /// The arm's evaluation settings derived from the run's.
    pub fn eval_config(self, base: &EvalConfig) -> EvalConfig {
        match self.sft_start() {
            Arm::SftDirect => EvalConfig {
                prompt: PromptMode::Direct,
                modes: vec![RetrievalMode::None],
                ..base.clone()
            },
            _ => base.clone(),
        }
    }
}

impl Named for Arm {
    const WHAT: &'static str = "arm";
    const ALL: &'static [Arm] = &Arm::ALL;
    fn name(self) -> &'static str {
        Arm::name(self)
    }
}

sage_envs::impl_named_text!(Arm);

/// Settings of `sage experiment`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExperimentConfig {
    /// Seeds per arm (RL chain order and sampling; the SFT models are shared unless
    /// `sft_per_seed`).
    pub seeds: u64,
    /// Train the SFT models (and their anneals) once per seed, seed S with `[run] seed`
    /// and `[sft] seed` plus S, in `seed-S/sft-MODE/`, each seed's arms starting from its
    /// own, trained just before them (a long run finishes whole seeds as it goes): the ±
    /// over seeds then holds how much a second SFT run of the recipe moves every row.
    /// Off: one SFT model per mode, shared by every seed.
    pub sft_per_seed: bool,
    /// Give every SFT model the same number of optimizer steps: as many as `[sft]
    /// epochs` take on the larger data of `skill_data` and `direct`, whatever the arms
    /// (the other model sees more passes over its own), and every anneal likewise with
    /// `[experiment.anneal] epochs`. Off: each model takes `epochs` passes over its own
    /// data, so the plain-code model, whose answers write out what a skill call names,
    /// gets more updates.
    pub equal_sft_steps: bool,
    /// The arms, by name (see [`Arm::name`]).
    #[serde(with = "text::list")]
    pub arms: Vec<Arm>,
    /// Run every RL arm's update-off control beside it (same seed, no optimizer step).
    pub controls: bool,
    /// The expert data of the skill arms' SFT: `skills` (every scenario in skill style)
    /// or `mixed` (`[data] skill_share` of them, the rest in plain code, all under the
    /// skill prompt: writing and reusing a skill become the policy's choice).
    #[serde(with = "text")]
    pub skill_data: ExpertMode,
    /// A Hugging Face model directory (e.g. one `sage import` wrote) that both SFT
    /// models start from, with its tokenizer; empty: fresh models of `[model]` and a
    /// tokenizer trained on the expert data.
    pub init: String,
    /// More SFT after each SFT model, at a low learning rate, that the arms start from
    /// instead (off at `epochs = 0`).
    pub anneal: SftAnneal,
    /// Run only this seed (below `seeds`) of every arm, e.g. one process per seed in
    /// copies of the run directory; `None` runs them all. Set by `sage experiment
    /// --only-seed`, never read from or written to a file: a later `--resume` without
    /// it gathers every seed's arms into one table.
    #[serde(skip)]
    pub only_seed: Option<u64>,
}

impl Default for ExperimentConfig {
    fn default() -> ExperimentConfig {
        ExperimentConfig {
            seeds: 3,
            sft_per_seed: false,
            equal_sft_steps: false,
            arms: Arm::DEFAULT.to_vec(),
            controls: true,
            skill_data: ExpertMode::Skills,
            init: String::new(),
            anneal: SftAnneal::default(),
            only_seed: None,
        }
    }
}

/// `[experiment.anneal]`: each SFT model trained `epochs` passes more over its data,
/// from its saved weights with a fresh AdamW, under a warmup-cosine schedule of its own
/// from `peak_lr` down to `min_lr` (what `sage sft --init MODEL` with that schedule
/// does). The main schedule's floor leaves a model at a tenth of its peak rate; in the
/// 840-seed mechanism run, ending lower made both models copy the instruction's
/// numbers far more often (docs/results.md).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SftAnneal {
    /// Passes over the data (0: no anneal; the arms start from the SFT models).
    pub epochs: u64,
    /// The learning rate at the end of the warmup.
    pub peak_lr: f32,
    /// The learning rate at the last step.
    pub min_lr: f32,
    /// Steps of linear warmup.
    pub warmup_steps: u64,
}

impl Default for SftAnneal {
    fn default() -> SftAnneal {
        SftAnneal {
            epochs: 0,
            peak_lr: 3e-4,
            min_lr: 3e-5,
            warmup_steps: 20,
        }
    }
}

impl SftAnneal {
    /// The anneal's schedule over its own steps.
    pub fn schedule(&self) -> LrSchedule {
        LrSchedule::WarmupCosine {
            peak_lr: self.peak_lr,
            min_lr: self.min_lr,
            warmup_steps: self.warmup_steps,
            total_steps: 0,
        }
    }
}

impl ExperimentConfig {
    /// The model directory the SFT models start from, if `init` names one.
    pub fn init_dir(&self) -> Option<&std::path::Path> {
        (!self.init.is_empty()).then(|| std::path::Path::new(&self.init))
    }

    /// Checks the seed count, that some arm is named, the chosen seed, and the skill data
    /// mode.
    pub fn validate(&self) -> Result<(), String> {
        if self.seeds == 0 {
            return Err("seeds must be at least 1".to_owned());
        }
        if self.arms.is_empty() {
            return Err("arms must name at least one arm".to_owned());
        }
        if let Some(seed) = self.only_seed.filter(|&seed| seed >= self.seeds) {
            return Err(format!(
                "only_seed {seed} is not below the seed count {} (seeds count from 0)",
                self.seeds
            ));
        }
        if self.skill_data == ExpertMode::Direct {
            return Err(
                "skill_data must be skills or mixed (direct is the sft-direct arm's)".to_owned(),
            );
        }
        let anneal = &self.anneal;
        let rate = |lr: f32| lr.is_finite() && lr > 0.0;
        if anneal.epochs > 0 && !(rate(anneal.peak_lr) && rate(anneal.min_lr)) {
            return Err(format!(
                "anneal: peak_lr ({}) and min_lr ({}) must be positive",
                anneal.peak_lr, anneal.min_lr
            ));
        }
        if anneal.epochs > 0 && anneal.min_lr > anneal.peak_lr {
            return Err(format!(
                "anneal: min_lr ({}) is above peak_lr ({})",
                anneal.min_lr, anneal.peak_lr
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An anneal needs positive rates that decay; off, its rates are not looked at.
    #[test]
    fn an_anneal_is_checked_only_when_on() {
        let mut config = ExperimentConfig::default();
        config.anneal.min_lr = 0.0;
        assert_eq!(config.validate(), Ok(()));
        config.anneal.epochs = 1;
        let error = config.validate().unwrap_err();
        assert!(error.contains("must be positive"), "{error}");
        config.anneal.min_lr = 1e-3;
        let error = config.validate().unwrap_err();
        assert!(error.contains("min_lr (0.001) is above peak_lr"), "{error}");
        config.anneal.min_lr = 3e-5;
        assert_eq!(config.validate(), Ok(()));
    }
}
