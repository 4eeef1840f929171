//! Evaluation of a policy on the built-in world: per split and per retrieval mode, the
//! metrics of SAGE.md (TGC, SGC, average steps and generated tokens per task, skill
//! usage and success skill usage rates, library size, distinct skills used).
//!
//! Tasks run in waves: the first task of every scenario together, then every second
//! task, and so on, so a task sees the skills saved by the earlier tasks (of its own
//! scenario for `same-scenario`, of any scenario for the query modes, none for
//! `none`). Skills enter the library when the task that defined them ran them without
//! error, whether or not the task passed.

use std::fmt::{self, Write as _};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use sage_core::retrieval::{RetrievalMode, Retriever};
use sage_core::skill::{HashSkillLibrary, SkillLibrary};
use sage_core::{Policy, Skill};
use sage_envs::environment::{EnvConfig, WorldEnv};
use sage_envs::prompt::{Prompt, PromptMode};
use sage_envs::scenarios::{BuiltScenario, Catalog, CatalogConfig, Split};

use crate::chat::ChatTemplate;
use crate::rollout::{
    run_episodes, EnvFactory, EpisodeRequest, RolloutConfig, RolloutEpisode, RolloutError,
};
use crate::text;

mod summary;

pub use summary::{template_metrics, wilson_interval, Interval, TemplateMetrics};

/// The metrics of one split under one retrieval mode.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EvalMetrics {
    /// The split.
    pub split: String,
    /// The retrieval mode.
    pub mode: String,
    /// Tasks run.
    pub tasks: usize,
    /// Scenarios run.
    pub scenarios: usize,
    /// Task goal completion: % of tasks whose checks all pass.
    pub tgc: f64,
    /// Scenario goal completion: % of scenarios whose tasks all pass.
    pub sgc: f64,
    /// The 95% Wilson interval of `tgc` over the tasks.
    #[serde(default)]
    pub tgc_interval: Interval,
    /// The 95% Wilson interval of `sgc` over the scenarios.
    #[serde(default)]
    pub sgc_interval: Interval,
    /// Agent turns per task.
    pub avg_steps: f64,
    /// Generated tokens per task.
    pub avg_tokens: f64,
    /// % of tasks with a non-empty library that called one of its skills.
    pub skill_usage: f64,
    /// % of those tasks (with a library, using a skill) that passed.
    pub success_skill_usage: f64,
    /// % of tasks started with an empty library that saved a skill (a function that ran
    /// without error): under same-scenario retrieval, the first tasks' choice to write
    /// one. Measured at `[eval.rollout] temperature = 1` it is the policy's sampled
    /// rate.
    #[serde(default)]
    pub skill_writing: f64,
    /// % of tasks whose agent text states every value the instruction states verbatim
    /// (names, dates, descriptions; `BuiltTask::stated_values`): how well the policy
    /// copies.
    #[serde(default)]
    pub values_copied: f64,
    /// % of the failed tasks that left out or miswrote one of those values: the share of
    /// failures that hinge on copying rather than on the code's logic.
    #[serde(default)]
    pub failures_miscopied: f64,
    /// Whether `values_copied` and `failures_miscopied` were measured: only the
    /// built-in world's tasks say which values their instructions state.
    #[serde(default = "measured")]
    pub copying_measured: bool,
    /// % of tasks that ended on a response without code.
    pub no_code: f64,
    /// Tasks whose environment failed (a remote server down or too slow): counted as
    /// failed tasks, and named in each task's `environment_error`.
    #[serde(default)]
    pub environment_errors: usize,
    /// Skills in the library at the end (summed over scenarios for same-scenario).
    pub library_size: usize,
    /// Distinct skill names ever called from a library.
    pub distinct_skills_used: usize,
    /// The rates of each template, in the order the split lists them.
    #[serde(default)]
    pub templates: Vec<TemplateMetrics>,
}

/// Reports written before `copying_measured` came from the built-in world.
fn measured() -> bool {
    true
}

/// One task's outcome, for the JSON report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskOutcome {
    /// The task's id.
    pub task_id: String,
    /// Passed all checks.
    pub passed: bool,
    /// Fraction of checks passed.
    pub score: f32,
    /// Agent turns.
    pub steps: usize,
    /// Generated tokens.
    pub tokens: u64,
    /// Skills it was given.
    pub library: Vec<String>,
    /// Library skills it called.
    pub used: Vec<String>,
    /// Skills it saved.
    pub saved: Vec<String>,
    /// Parameters whose value the instruction states but the agent's text does not
    /// (`BuiltTask::miscopied_values`).
    #[serde(default)]
    pub miscopied: Vec<String>,
    /// The environment's own failure that ended the task, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment_error: Option<String>,
    /// The agent's turns and what came back, in order.
    pub turns: Vec<TurnText>,
}

/// One turn of an evaluated task, as text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnText {
    /// What the agent wrote.
    pub agent: String,
    /// The observation it got back.
    pub observation: String,
}

/// Settings of an evaluation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvalConfig {
    /// Splits to evaluate (`iid`, `test-normal`, ...).
    #[serde(with = "text::list")]
    pub splits: Vec<Split>,
    /// Retrieval modes (`same-scenario`, `query-ngram`, `none`, ...).
    #[serde(with = "text::list")]
    pub modes: Vec<RetrievalMode>,
    /// Scenarios evaluated per split, in catalog order (0: all of them). The catalog
    /// lists a seed's scenarios template by template, then the next seed's.
    pub max_scenarios: usize,
    /// Held-out seeds of every training template in `iid` (each seed gives one scenario
    /// of each template): 2 gives 50 scenarios, 4 gives 100 (a few template-seed pairs
    /// find no task and are left out).
    pub iid_seeds: u64,
    /// Skills shown per task.
    pub top_k: usize,
    /// `skills` (SAGE's prompt) or `direct` (the no-skill baseline's).
    #[serde(with = "text")]
    pub prompt: PromptMode,
    /// Rollout settings (greedy by default).
    pub rollout: RolloutConfig,
    /// Seed of sampling (when the temperature is above 0).
    pub seed: u64,
}

impl Default for EvalConfig {
    fn default() -> EvalConfig {
        EvalConfig {
            splits: vec![Split::Iid, Split::TestNormal],
            modes: vec![RetrievalMode::SameScenario],
            max_scenarios: 0,
            iid_seeds: CatalogConfig::default().iid_seeds,
            top_k: 5,
            prompt: PromptMode::Skills,
            rollout: RolloutConfig {
                temperature: 0.0,
                ..RolloutConfig::default()
            },
            seed: 0,
        }
    }
}

/// Why an evaluation failed.
#[derive(Debug)]
pub enum EvalError {
    /// A setting names no split, mode or prompt.
    Config(String),
    /// A rollout failed.
    Rollout(RolloutError),
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EvalError::Config(e) => write!(f, "evaluation config: {e}"),
            EvalError::Rollout(e) => write!(f, "evaluation: {e}"),
        }
    }
}

impl std::error::Error for EvalError {}

impl From<RolloutError> for EvalError {
    fn from(e: RolloutError) -> Self {
        EvalError::Rollout(e)
    }
}

/// The libraries of an evaluation: one per scenario for same-scenario retrieval, one
/// shared otherwise.
struct Libraries {
    per_scenario: bool,
    libraries: Vec<HashSkillLibrary>,
    retriever: Retriever,
}

impl Libraries {
    fn new(mode: RetrievalMode, scenarios: usize, top_k: usize) -> Result<Libraries, EvalError> {
        let per_scenario = mode == RetrievalMode::SameScenario;
        let count = if per_scenario { scenarios } else { 1 };
        let retriever = Retriever::new(mode, top_k, Default::default())
            .map_err(|e| EvalError::Config(format!("retrieval: {e}")))?;
        Ok(Libraries {
            per_scenario,
            libraries: (0..count).map(|_| HashSkillLibrary::new()).collect(),
            retriever,
        })
    }

    fn library(&mut self, scenario: usize) -> &mut HashSkillLibrary {
        let index = if self.per_scenario { scenario } else { 0 };
        &mut self.libraries[index]
    }

    /// The skills task `task` of scenario `scenario` sees, best first.
    fn select(&mut self, scenario: usize, task: &sage_core::Task) -> Vec<Skill> {
        let index = if self.per_scenario { scenario } else { 0 };
        let library = &mut self.libraries[index];
        let hits = self.retriever.retrieve(library, task).unwrap_or_default();
        hits.iter()
            .filter_map(|hit| library.get(&hit.name).cloned())
            .collect()
    }

    /// Adds the skills an episode saved, and counts the library skills it used.
    fn record(&mut self, scenario: usize, episode: &RolloutEpisode) {
        let passed = episode.episode.evaluation.passed;
        let instruction = episode.episode.task.instruction.clone();
        for name in episode.episode.used_skills() {
            let _ = self.library(scenario).record_used(name, passed);
        }
        for skill in episode.episode.saved_skills() {
            let skill = skill.clone();
            if self.library(scenario).insert(skill.clone()).is_ok() {
                let _ = self.retriever.add(&skill, &instruction);
            }
        }
    }

    fn size(&self) -> usize {
        self.libraries.iter().map(|l| l.skills().len()).sum()
    }
}

/// A scenario to evaluate: its tasks, its template's name, and, from the built-in
/// world, what it was built from (to tell which stated values a task's agent miscopied).
#[derive(Clone, Debug)]
pub struct EvalScenario {
    /// The scenario and its tasks.
    pub scenario: sage_core::Scenario,
    /// Its template's name (the per-template table's rows).
    pub template: String,
    /// The built-in world's scenario, when it is one.
    pub built: Option<Arc<BuiltScenario>>,
}

/// Runs `split` of the built-in world under `mode` and returns its metrics and every
/// task's outcome; the system prompt spells out its rules when `prompt_rules` is set (as
/// the model's SFT data did).
#[allow(clippy::too_many_arguments)]
pub fn evaluate_split<P: Policy>(
    policy: &mut P,
    catalog: &Arc<Catalog>,
    template: &ChatTemplate<'_>,
    split: Split,
    mode: RetrievalMode,
    config: &EvalConfig,
    prompt_rules: bool,
    on_wave: &mut dyn FnMut(usize, usize),
) -> Result<(EvalMetrics, Vec<TaskOutcome>), EvalError> {
    let scenarios: Vec<EvalScenario> = catalog
        .split(split)
        .into_iter()
        .map(|built| EvalScenario {
            scenario: built.scenario.clone(),
            template: built.template.name.to_owned(),
            built: Some(built.clone()),
        })
        .collect();
    let env_config = EnvConfig {
        max_turns: config.rollout.max_turns.max(1),
        ..EnvConfig::default()
    };
    let new_env = || WorldEnv::new(catalog.clone(), env_config.clone());
    let run = EvalRun {
        split: split.name(),
        mode,
        config,
        prompt_rules,
    };
    evaluate_scenarios(policy, &scenarios, &new_env, template, &run, on_wave)
}

/// What an evaluation of one split under one retrieval mode runs with.
#[derive(Clone, Copy, Debug)]
pub struct EvalRun<'a> {
    /// The split's name.
    pub split: &'a str,
    /// The retrieval mode.
    pub mode: RetrievalMode,
    /// The settings.
    pub config: &'a EvalConfig,
    /// Whether the system prompt spells out the world's rules.
    pub prompt_rules: bool,
}

/// Runs `scenarios` (the first `max_scenarios` of them) in environments from `envs`
/// under `run`'s retrieval mode, and returns the metrics and every task's outcome.
pub fn evaluate_scenarios<P: Policy, F: EnvFactory + ?Sized>(
    policy: &mut P,
    scenarios: &[EvalScenario],
    envs: &F,
    template: &ChatTemplate<'_>,
    run: &EvalRun<'_>,
    on_wave: &mut dyn FnMut(usize, usize),
) -> Result<(EvalMetrics, Vec<TaskOutcome>), EvalError> {
    let config = run.config;
    let prompt = Prompt {
        mode: config.prompt,
        rules: run.prompt_rules,
    };
    let mut scenarios: Vec<&EvalScenario> = scenarios.iter().collect();
    if config.max_scenarios > 0 {
        scenarios.truncate(config.max_scenarios);
    }
    let mut libraries = Libraries::new(run.mode, scenarios.len(), config.top_k)?;
    let tasks_of = |s: &EvalScenario| s.scenario.tasks.len();
    let waves = scenarios.iter().map(|s| tasks_of(s)).max().unwrap_or(0);
    let mut outcomes: Vec<Vec<RolloutEpisode>> = (0..scenarios.len()).map(|_| Vec::new()).collect();
    let prompt = |skills: &[Skill]| prompt.system(skills);
    for wave in 0..waves {
        on_wave(wave, waves);
        let members: Vec<usize> = (0..scenarios.len())
            .filter(|&s| wave < tasks_of(scenarios[s]))
            .collect();
        let given: Vec<Vec<Skill>> = members
            .iter()
            .map(|&s| libraries.select(s, &scenarios[s].scenario.tasks[wave]))
            .collect();
        let requests: Vec<EpisodeRequest<'_>> = members
            .iter()
            .zip(&given)
            .map(|(&s, library)| EpisodeRequest {
                task: &scenarios[s].scenario.tasks[wave],
                library,
            })
            .collect();
        let mut envs = envs
            .make_for(requests.len())
            .map_err(|e| RolloutError::Environment(Box::new(e)))?;
        let seed = config.seed ^ (wave as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let episodes = run_episodes(
            policy,
            &mut envs,
            template,
            &prompt,
            &requests,
            &config.rollout,
            seed,
        )?;
        for (&s, episode) in members.iter().zip(episodes) {
            libraries.record(s, &episode);
            outcomes[s].push(episode);
        }
    }
    // One entry per task, in the order of `outcomes.iter().flatten()`.
    let miscopied: Vec<Vec<String>> = outcomes
        .iter()
        .zip(&scenarios)
        .flat_map(|(episodes, scenario)| {
            episodes
                .iter()
                .map(|e| miscopied_values(scenario.built.as_deref(), e))
        })
        .collect();
    let templates: Vec<&str> = scenarios.iter().map(|s| s.template.as_str()).collect();
    let mut metrics = summarize(
        (run.split, run.mode),
        (&templates, &outcomes),
        &miscopied,
        libraries.size(),
    );
    metrics.copying_measured = scenarios.iter().all(|s| s.built.is_some());
    let tasks = outcomes
        .iter()
        .flatten()
        .zip(miscopied)
        .map(|(e, miscopied)| TaskOutcome {
            task_id: e.episode.task.id.clone(),
            passed: e.episode.evaluation.passed,
            score: e.episode.evaluation.score,
            steps: e.episode.steps(),
            tokens: e.episode.generated_tokens(),
            library: e.episode.library.clone(),
            used: e
                .episode
                .used_skills()
                .into_iter()
                .map(str::to_owned)
                .collect(),
            saved: e
                .episode
                .saved_skills()
                .into_iter()
                .map(|s| s.name.clone())
                .collect(),
            miscopied,
            environment_error: e.environment_error.clone(),
            turns: e
                .episode
                .turns
                .iter()
                .map(|t| TurnText {
                    agent: t.agent_text.clone(),
                    observation: t.result.observation.clone(),
                })
                .collect(),
        })
        .collect();
    Ok((metrics, tasks))
}

/// The names of the values `episode`'s instruction states that its agent turns do not
/// (none known outside the built-in world).
fn miscopied_values(scenario: Option<&BuiltScenario>, episode: &RolloutEpisode) -> Vec<String> {
    let Some(scenario) = scenario else {
        return Vec::new();
    };
    let agent = episode
        .episode
        .turns
        .iter()
        .map(|t| t.agent_text.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    scenario
        .task(&episode.episode.task.id)
        .map(|task| {
            task.miscopied_values(&agent)
                .into_iter()
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The metrics of finished scenarios (each a list of its tasks' episodes, beside the
/// name of its template), with the values each task miscopied (in the order of the
/// scenarios' episodes, flattened).
fn summarize(
    (split, mode): (&str, RetrievalMode),
    (templates, scenarios): (&[&str], &[Vec<RolloutEpisode>]),
    miscopied: &[Vec<String>],
    library_size: usize,
) -> EvalMetrics {
    let episodes: Vec<&RolloutEpisode> = scenarios.iter().flatten().collect();
    let tasks = episodes.len();
    let percent = |count: usize, of: usize| 100.0 * count as f64 / of.max(1) as f64;
    let passed = episodes
        .iter()
        .filter(|e| e.episode.evaluation.passed)
        .count();
    let scenarios_passed = scenarios
        .iter()
        .filter(|s| !s.is_empty() && s.iter().all(|e| e.episode.evaluation.passed))
        .count();
    let with_library: Vec<&&RolloutEpisode> = episodes
        .iter()
        .filter(|e| !e.episode.library.is_empty())
        .collect();
    let using: Vec<&&&RolloutEpisode> = with_library
        .iter()
        .filter(|e| !e.episode.used_skills().is_empty())
        .collect();
    let using_passed = using.iter().filter(|e| e.episode.evaluation.passed).count();
    let fresh: Vec<&&RolloutEpisode> = episodes
        .iter()
        .filter(|e| e.episode.library.is_empty())
        .collect();
    let writing = fresh
        .iter()
        .filter(|e| !e.episode.saved_skills().is_empty())
        .count();
    let copied = miscopied.iter().filter(|m| m.is_empty()).count();
    let failed_miscopied = episodes
        .iter()
        .zip(miscopied)
        .filter(|(e, m)| !e.episode.evaluation.passed && !m.is_empty())
        .count();
    let mut distinct: Vec<&str> = episodes
        .iter()
        .flat_map(|e| e.episode.used_skills())
        .collect();
    distinct.sort_unstable();
    distinct.dedup();
    EvalMetrics {
        split: split.to_owned(),
        mode: mode.to_string(),
        tasks,
        scenarios: scenarios.len(),
        tgc: percent(passed, tasks),
        sgc: percent(scenarios_passed, scenarios.len()),
        tgc_interval: wilson_interval(passed as f64 / tasks.max(1) as f64, tasks),
        sgc_interval: wilson_interval(
            scenarios_passed as f64 / scenarios.len().max(1) as f64,
            scenarios.len(),
        ),
        avg_steps: episodes.iter().map(|e| e.episode.steps()).sum::<usize>() as f64
            / tasks.max(1) as f64,
        avg_tokens: episodes
            .iter()
            .map(|e| e.episode.generated_tokens())
            .sum::<u64>() as f64
            / tasks.max(1) as f64,
        skill_usage: percent(using.len(), with_library.len()),
        success_skill_usage: percent(using_passed, using.len()),
        skill_writing: percent(writing, fresh.len()),
        values_copied: percent(copied, tasks),
        failures_miscopied: percent(failed_miscopied, tasks - passed),
        copying_measured: true,
        environment_errors: episodes
            .iter()
            .filter(|e| e.environment_error.is_some())
            .count(),
        no_code: percent(
            episodes
                .iter()
                .filter(|e| e.episode.end == sage_core::env::EpisodeEnd::NoCode)
                .count(),
            tasks,
        ),
        library_size,
        distinct_skills_used: distinct.len(),
        templates: template_metrics(templates, scenarios, miscopied),
    }
}

/// The metrics as an aligned text table, one row per split and mode.
pub fn metrics_table(rows: &[EvalMetrics]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<15} {:<15} {:>6} {:>7} {:>7} {:>6} {:>7} {:>7} {:>9} {:>8} {:>8} {:>8} {:>8} {:>11}",
        "split",
        "retrieval",
        "tasks",
        "TGC %",
        "SGC %",
        "steps",
        "tokens",
        "usage %",
        "succ.use %",
        "no-code%",
        "library",
        "write %",
        "copied %",
        "fail.copy %"
    );
    for m in rows {
        let (copied, failed_copying) = if m.copying_measured {
            (
                format!("{:.1}", m.values_copied),
                format!("{:.1}", m.failures_miscopied),
            )
        } else {
            ("-".to_owned(), "-".to_owned())
        };
        let _ = writeln!(
            out,
            "{:<15} {:<15} {:>6} {:>7.1} {:>7.1} {:>6.2} {:>7.0} {:>7.1} {:>9.1} {:>8.1} {:>8} {:>8.1} {:>8} {:>11}",
            m.split,
            m.mode,
            m.tasks,
            m.tgc,
            m.sgc,
            m.avg_steps,
            m.avg_tokens,
            m.skill_usage,
            m.success_skill_usage,
            m.no_code,
            m.library_size,
            m.skill_writing,
            copied,
            failed_copying
        );
    }
    out
}
