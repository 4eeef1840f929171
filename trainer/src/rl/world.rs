//! [`WorldRl`]: RL on the built-in world or on a remote environment's `train` split: its
//! training chains, its environments and its system prompt, ready for
//! [`RlTrainer::step`].

use std::sync::Arc;

use sage_core::policy::Policy;
use sage_core::{Skill, TaskChain};
use sage_envs::environment::{EnvConfig, WorldEnv};
use sage_envs::prompt::Prompt;
use sage_envs::scenarios::{Catalog, CatalogConfig, ScenarioError, Split};

use super::{RlConfig, RlError, RlStepStats, RlTrainer};
use crate::chat::ChatTemplate;
use crate::environments::listing::ListingError;
use crate::environments::RemoteEnvs;

/// Every chain of `chain_len` consecutive tasks of every scenario of `split` in
/// `catalog` whose template `templates` names (every scenario when it is empty),
/// scenario by scenario.
pub fn world_chains(
    catalog: &Catalog,
    split: Split,
    chain_len: usize,
    templates: &[String],
) -> Vec<TaskChain> {
    catalog
        .split(split)
        .iter()
        .filter(|b| templates.is_empty() || templates.iter().any(|t| t == b.template.name))
        .flat_map(|built| built.scenario.chains(chain_len).collect::<Vec<_>>())
        .collect()
}

/// Where the training episodes run.
enum Episodes {
    /// The built-in world's training scenarios, in this process.
    Builtin {
        catalog: Arc<Catalog>,
        env_config: EnvConfig,
    },
    /// A remote environment's servers.
    Remote {
        envs: Arc<RemoteEnvs>,
        max_turns: u32,
        seed: u64,
    },
}

/// A training split as an RL problem.
pub struct WorldRl {
    episodes: Episodes,
    prompt: Prompt,
    /// The training chains (`rl.chain_len` tasks each).
    pub chains: Vec<TaskChain>,
}

impl WorldRl {
    /// Builds the training scenarios of `rl.scenario_seeds` seeds per template, after
    /// the first `rl.scenario_seed_offset` (of
    /// `rl.templates` where it names any; a name that is no training template is an
    /// error); the system prompt spells out its rules when `prompt_rules` is set (as the
    /// policy's SFT data did).
    pub fn new(rl: &RlConfig, prompt_rules: bool) -> Result<WorldRl, ScenarioError> {
        let catalog_config = CatalogConfig {
            seeds: rl.scenario_seeds,
            seed_offset: rl.scenario_seed_offset,
            ..CatalogConfig::default()
        };
        let catalog = Arc::new(Catalog::build_splits(&catalog_config, &[Split::Train])?);
        let training = catalog.split(Split::Train);
        if let Some(unknown) = rl
            .templates
            .iter()
            .find(|name| !training.iter().any(|b| b.template.name == name.as_str()))
        {
            return Err(ScenarioError::UnknownTemplate(unknown.clone()));
        }
        let chains = world_chains(&catalog, Split::Train, rl.chain_len, &rl.templates);
        Ok(WorldRl {
            episodes: Episodes::Builtin {
                catalog,
                env_config: EnvConfig {
                    max_turns: rl.rollout.max_turns.max(1),
                    ..EnvConfig::default()
                },
            },
            prompt: Prompt {
                mode: rl.prompt,
                rules: prompt_rules,
            },
            chains,
        })
    }

    /// The `train` split of the remote environment `envs` (its scenarios of the
    /// templates `rl.templates` names, when it names any: a name no scenario has is an
    /// error), whose episodes run on its servers.
    pub fn remote(
        rl: &RlConfig,
        prompt_rules: bool,
        envs: Arc<RemoteEnvs>,
    ) -> Result<WorldRl, ListingError> {
        let scenarios = envs.list(Split::Train.name())?;
        if let Some(unknown) = rl
            .templates
            .iter()
            .find(|name| !scenarios.iter().any(|s| &s.template == *name))
        {
            return Err(ListingError::UnknownTemplate(unknown.clone()));
        }
        let chains = scenarios
            .iter()
            .filter(|s| rl.templates.is_empty() || rl.templates.contains(&s.template))
            .flat_map(|s| s.scenario.chains(rl.chain_len).collect::<Vec<_>>())
            .collect();
        Ok(WorldRl {
            episodes: Episodes::Remote {
                envs,
                max_turns: rl.rollout.max_turns.max(1),
                seed: rl.seed,
            },
            prompt: Prompt {
                mode: rl.prompt,
                rules: prompt_rules,
            },
            chains,
        })
    }

    /// One step of `trainer` on this world; `reference` is the frozen policy of a KL
    /// term (required when `grpo.kl_coef > 0`).
    pub fn step<P: Policy>(
        &self,
        trainer: &mut RlTrainer,
        policy: &mut P,
        reference: Option<&mut P>,
        template: &ChatTemplate<'_>,
    ) -> Result<RlStepStats, RlError> {
        let prompt = |skills: &[Skill]| self.prompt.system(skills);
        match &self.episodes {
            Episodes::Builtin {
                catalog,
                env_config,
            } => {
                let new_env = || WorldEnv::new(catalog.clone(), env_config.clone());
                trainer.step(policy, reference, &new_env, template, &prompt)
            }
            Episodes::Remote {
                envs,
                max_turns,
                seed,
            } => {
                let factory = envs.factory(*max_turns, *seed);
                trainer.step(policy, reference, &factory, template, &prompt)
            }
        }
    }
}
