//! Expert data: the built-in world's scripted expert run over a split, kept by
//! rejection sampling (scenarios whose tasks all pass) and written as chat JSON lines
//! that [`SftData`](crate::sft::SftData) reads.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use sage_envs::environment::{EnvConfig, WorldEnv};
use sage_envs::expert::{Expert, ExpertConfig, ExpertMode, TrajectoryRecord};
use sage_envs::sandbox::Limits;
use sage_envs::scenarios::{Catalog, CatalogConfig, Split};

use crate::files::write_atomic;
use crate::text;

/// Most seeds per template: the splits' seed ranges start 1000 apart.
pub const MAX_SEEDS: u64 = 1000;

/// Which trajectories to produce.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExpertDataConfig {
    /// The split whose scenarios the expert solves (`train`, `dev`, ...).
    #[serde(with = "text")]
    pub split: Split,
    /// Scenario seeds per template (more seeds: more worlds, people and values).
    pub seeds: u64,
    /// Style variants per scenario (different wordings, names and mistakes).
    pub variants: u64,
    /// `skills` (SAGE's format), `direct` (plain API calls, the no-skill baseline) or
    /// `mixed` (some scenarios each way, all under the skill prompt, so that writing and
    /// reusing a skill are the policy's choice).
    #[serde(with = "text")]
    pub mode: ExpertMode,
    /// `mixed`: the share of scenarios solved in skill style, in [0, 1].
    pub skill_share: f64,
    /// `mixed`: the share of later tasks of skill-style scenarios that write plain code
    /// although their library lists the skill, in [0, 1].
    pub rewrite_share: f64,
    /// Whether a task that reuses a skill binds the task's values to the parameter
    /// names first (a line each, as the task that wrote the skill does) and then calls
    /// the skill with the names; off (the default), the call passes the values as
    /// literals.
    pub bound_reuse: bool,
    /// Share of scenarios whose first attempt holds a deliberate mistake, fixed in the
    /// next turn (the mistaken turn is exported with weight 0: SFT trains on the fix,
    /// not on the mistake).
    pub mistake_rate: f64,
    /// Whether the expert reads the API docs before writing new code (off: shorter
    /// trajectories, for small models trained on a CPU).
    pub read_docs: bool,
    /// Whether scenarios differ in style (names, docstrings, wordings); off, every
    /// scenario of a template is solved one canonical way (for small models).
    pub varied_style: bool,
    /// Whether the system prompt spells out the agent's rules; off, it only lists the
    /// skill library (for a model trained from scratch, which learns the format from
    /// the trajectories). Evaluation and RL use the same prompt as the data.
    pub prompt_rules: bool,
}

impl Default for ExpertDataConfig {
    fn default() -> ExpertDataConfig {
        ExpertDataConfig {
            split: Split::Train,
            seeds: 5,
            variants: 1,
            mode: ExpertMode::Skills,
            skill_share: 0.5,
            rewrite_share: 0.25,
            bound_reuse: false,
            mistake_rate: 0.2,
            read_docs: true,
            varied_style: true,
            prompt_rules: true,
        }
    }
}

/// Why expert data could not be produced.
#[derive(Debug)]
pub enum DataError {
    /// A setting is out of range.
    Config(String),
    /// The world or the expert failed.
    World(String),
    /// Writing the file failed.
    Io(String),
}

impl fmt::Display for DataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataError::Config(e) => write!(f, "expert data config: {e}"),
            DataError::World(e) => write!(f, "expert data: {e}"),
            DataError::Io(e) => write!(f, "writing expert data: {e}"),
        }
    }
}

impl std::error::Error for DataError {}

/// The kept trajectories and the count of rejected scenarios.
#[derive(Clone, Debug, Default)]
pub struct ExpertData {
    /// One record per task of every kept scenario.
    pub records: Vec<TrajectoryRecord>,
    /// Scenarios kept.
    pub kept: usize,
    /// Scenarios dropped because a task failed.
    pub dropped: usize,
    /// (template, seed) pairs with no scenario: the template found no parameters in
    /// that seed's world.
    pub skipped: usize,
}

impl ExpertDataConfig {
    /// Checks the seed and variant counts and the shares.
    pub fn validate(&self) -> Result<(), DataError> {
        if self.seeds == 0 || self.variants == 0 {
            return Err(DataError::Config(
                "seeds and variants must be at least 1".into(),
            ));
        }
        if self.seeds > MAX_SEEDS {
            return Err(DataError::Config(format!(
                "seeds must be at most {MAX_SEEDS} (more would reach the held-out seeds of iid)"
            )));
        }
        for (name, share) in [
            ("mistake_rate", self.mistake_rate),
            ("skill_share", self.skill_share),
            ("rewrite_share", self.rewrite_share),
        ] {
            if !(0.0..=1.0).contains(&share) {
                return Err(DataError::Config(format!("{name} must be in [0, 1]")));
            }
        }
        Ok(())
    }
}

/// How long the expert's data step waits for a sandbox worker's answer before it kills
/// it (the default is a minute). The expert's code is the templates' own solutions, so
/// a worker that does not answer has been starved of a CPU by other work, not run away,
/// and one killed worker fails the whole data step. (A run paused with `SIGSTOP` needs
/// no longer timer: the kill timer leaves out time in which the caller did not run.)
const EXPERT_WALL_CLOCK: Duration = Duration::from_secs(3600);

/// The environment the expert's scenarios run in: the default one, with the expert's
/// longer wait on its workers.
fn expert_env_config() -> EnvConfig {
    EnvConfig {
        limits: Limits {
            wall_clock: EXPERT_WALL_CLOCK,
            ..Limits::default()
        },
        ..EnvConfig::default()
    }
}

/// Runs the expert over the configured split.
pub fn expert_data(config: &ExpertDataConfig) -> Result<ExpertData, DataError> {
    config.validate()?;
    let (split, mode) = (config.split, config.mode);
    let catalog_config = CatalogConfig {
        seeds: config.seeds,
        iid_seeds: config.seeds,
        ..CatalogConfig::default()
    };
    let catalog = Catalog::build_splits(&catalog_config, &[split])
        .map_err(|e| DataError::World(e.to_string()))?;
    let catalog = Arc::new(catalog);
    let mut data = ExpertData {
        skipped: catalog.skipped().len(),
        ..ExpertData::default()
    };
    for variant in 0..config.variants {
        let expert = Expert::new(ExpertConfig {
            mode,
            variant,
            mistake_rate: config.mistake_rate,
            read_docs: config.read_docs,
            varied_style: config.varied_style,
            prompt_rules: config.prompt_rules,
            skill_share: config.skill_share,
            rewrite_share: config.rewrite_share,
            bound_reuse: config.bound_reuse,
        });
        // A scenario's run depends on the scenario alone (its style is drawn from it),
        // so the scenarios are solved in parallel, each worker through an environment
        // of its own, and their records (None: the run failed) kept in catalog order:
        // the same data on any number of threads.
        let kept: Vec<Result<Option<Vec<TrajectoryRecord>>, DataError>> = catalog
            .scenarios()
            .par_iter()
            .map_init(
                || WorldEnv::new(catalog.clone(), expert_env_config()),
                |env, scenario| {
                    let env = env.as_mut().map_err(|e| DataError::World(e.to_string()))?;
                    let run = expert
                        .solve(env, scenario)
                        .map_err(|e| DataError::World(e.to_string()))?;
                    Ok(run.passed().then(|| run.records()))
                },
            )
            .collect();
        for records in kept {
            match records? {
                Some(records) => {
                    data.kept += 1;
                    data.records.extend(records);
                }
                None => data.dropped += 1,
            }
        }
    }
    Ok(data)
}

/// Writes `records` as JSON lines to `path` (through a temporary file, renamed into
/// place, so a killed process leaves no half-written file).
pub fn write_records(path: &Path, records: &[TrajectoryRecord]) -> Result<(), DataError> {
    let mut text = String::new();
    for record in records {
        text.push_str(&record.to_json_line());
        text.push('\n');
    }
    write_atomic(path, text.as_bytes())
        .map_err(|e| DataError::Io(format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The data does not depend on how many threads solve the scenarios: one thread and
    /// three give the same records in the same order (mixed mode with mistakes and two
    /// style variants, so every per-scenario choice is exercised).
    #[test]
    fn expert_data_is_the_same_on_any_number_of_threads() {
        let config = ExpertDataConfig {
            seeds: 2,
            variants: 2,
            mode: ExpertMode::Mixed,
            ..ExpertDataConfig::default()
        };
        let on = |threads| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("a thread pool")
                .install(|| expert_data(&config).expect("expert data"))
        };
        let (one, three) = (on(1), on(3));
        let lines = |data: &ExpertData| -> Vec<String> {
            data.records.iter().map(|r| r.to_json_line()).collect()
        };
        assert!(one.kept > 20, "{} scenarios kept", one.kept);
        assert_eq!((one.kept, one.dropped), (three.kept, three.dropped));
        assert_eq!(lines(&one), lines(&three));
    }
}
