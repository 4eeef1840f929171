//! [`WorldEnv`]: the built-in world as a [`sage_core::Environment`]. It runs the tasks
//! of a [`Catalog`]: each episode starts from a fresh copy of the task's world and a
//! fresh sandbox session with the given library skills loaded; each turn's code runs in
//! the sandbox against that world; evaluation compares the world's diff and the answer
//! given to `complete_task` with the task's expected outcome (see
//! [`scenarios::evaluate`](crate::scenarios::evaluate)).
//!
//! Per turn it reports which top-level functions the code defined, which functions of
//! this episode ran without error (returned as [`Skill`]s to save, with the source the
//! sandbox ran and the task as origin), and which library skills actually ran (traced at
//! run time, so a name that only appears in the code does not count; a library skill
//! the episode redefined stops counting from the turn that redefined it).
//!
//! Episodes end when `complete_task` was called, at the turn limit, or on a response
//! without code (the paper's no-code case: `had_code == false`, `done == true`).

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use crate::sandbox::{Isolation, IsolationError, Limits, Sandbox};
use crate::scenarios::{evaluate, Catalog, Report, ScenarioError, TaskRef};
use crate::turn::{load_library, used_and_saved};
use crate::world::{Db, World};
use sage_core::env::{Reset, StepResult};
use sage_core::skill::{parse_response, Origin, Skill};
use sage_core::{Environment, Evaluation, Task};

/// What the agent sees after a response without code.
pub const NO_CODE_OBSERVATION: &str =
    "No code block found in the response: the episode ends. Answer with a ```python block.";

/// What a turn without code reports: the episode ends (the paper's no-code case).
pub fn no_code_result() -> StepResult {
    StepResult {
        observation: NO_CODE_OBSERVATION.to_owned(),
        done: true,
        had_code: false,
        ..StepResult::default()
    }
}

/// What the agent sees after code that printed nothing and raised no error.
pub const EMPTY_OUTPUT_OBSERVATION: &str = "(the code ran without error and printed nothing)";

/// What the agent is told, after the error, when the execution that called
/// `complete_task` was stopped by the sandbox.
pub const WITHDRAWN_OBSERVATION: &str =
    "\nThe task is not complete: the code that called complete_task was stopped before it ended.";

/// Settings of a [`WorldEnv`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvConfig {
    /// Turns an episode may take; the turn that reaches it ends the episode.
    pub max_turns: u32,
    /// The sandbox's resource limits.
    pub limits: Limits,
    /// Where agent code runs: in a worker process (the default: [`WorldEnv::new`] fails
    /// when there is no worker program), or in-process (an explicit opt-in for trusted
    /// code and tests).
    pub isolation: Isolation,
}

impl Default for EnvConfig {
    fn default() -> EnvConfig {
        EnvConfig {
            max_turns: 20,
            limits: Limits::default(),
            isolation: Isolation::default(),
        }
    }
}

/// The environment's own failures (never the agent's mistakes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnvError {
    /// The task is not in the catalog.
    UnknownTask(ScenarioError),
    /// `step` or `evaluate` before any `reset`.
    NoEpisode,
    /// `step` after the episode ended.
    EpisodeOver,
    /// No sandbox worker process for agent code (the message says how to provide one).
    Isolation(IsolationError),
}

impl fmt::Display for EnvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EnvError::UnknownTask(e) => write!(f, "unknown task: {e}"),
            EnvError::NoEpisode => write!(f, "no episode: call reset first"),
            EnvError::EpisodeOver => write!(f, "the episode is over: call reset to start another"),
            EnvError::Isolation(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for EnvError {}

/// The running episode.
struct Episode {
    task: TaskRef,
    world: World,
    before: Db,
    turns: u32,
    done: bool,
    library: Vec<String>,
    redefined: BTreeSet<String>,
}

/// The built-in world's tasks as an [`Environment`].
pub struct WorldEnv {
    catalog: Arc<Catalog>,
    config: EnvConfig,
    sandbox: Sandbox,
    episode: Option<Episode>,
}

impl WorldEnv {
    /// An environment over the tasks of `catalog`. With [`Isolation::Process`] (the
    /// default) it needs a sandbox worker program and fails with
    /// [`EnvError::Isolation`], saying how to provide one, when there is none: a program
    /// that builds environments calls `sage_envs::sandbox::serve_worker_if_asked()`
    /// first thing in `main`.
    pub fn new(catalog: Arc<Catalog>, config: EnvConfig) -> Result<WorldEnv, EnvError> {
        let sandbox = Sandbox::with_isolation(config.limits.clone(), config.isolation)
            .map_err(EnvError::Isolation)?;
        Ok(WorldEnv {
            catalog,
            config,
            sandbox,
            episode: None,
        })
    }

    /// The catalog it runs.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// Its settings.
    pub fn config(&self) -> &EnvConfig {
        &self.config
    }

    /// Where agent code runs.
    pub fn isolation(&self) -> Isolation {
        self.sandbox.isolation()
    }

    /// The current episode's task, if any.
    pub fn task(&self) -> Option<&TaskRef> {
        self.episode.as_ref().map(|e| &e.task)
    }

    /// The current episode's world, if any.
    pub fn world(&self) -> Option<&World> {
        self.episode.as_ref().map(|e| &e.world)
    }

    /// Names of the library skills loaded at reset.
    pub fn library(&self) -> &[String] {
        self.episode.as_ref().map_or(&[], |e| &e.library)
    }

    /// Turns taken in the current episode.
    pub fn turns(&self) -> u32 {
        self.episode.as_ref().map_or(0, |e| e.turns)
    }

    /// Whether the current episode is over.
    pub fn is_done(&self) -> bool {
        self.episode.as_ref().is_some_and(|e| e.done)
    }

    /// Every check of the current task, with its outcome.
    pub fn report(&self) -> Result<Report, EnvError> {
        let episode = self.episode.as_ref().ok_or(EnvError::NoEpisode)?;
        let built = episode.task.task();
        Ok(evaluate(
            episode.task.scenario().template.kind,
            &built.expected,
            &episode.world.diff_since(&episode.before),
            episode.world.completion(),
        ))
    }
}

impl Environment for WorldEnv {
    type Error = EnvError;

    fn reset(&mut self, task: &Task, library: &[Skill]) -> Result<Reset, EnvError> {
        let task_ref = self.catalog.task(&task.id).map_err(EnvError::UnknownTask)?;
        let mut world = (*task_ref.scenario().world).clone();
        world.start_episode();
        let before = world.snapshot();
        self.sandbox.reset();
        let (loaded, dropped) = load_library(&mut self.sandbox, library);
        self.episode = Some(Episode {
            task: task_ref,
            world,
            before,
            turns: 0,
            done: false,
            library: loaded,
            redefined: BTreeSet::new(),
        });
        Ok(Reset { dropped })
    }

    fn step(&mut self, agent_text: &str) -> Result<StepResult, EnvError> {
        let episode = self.episode.as_mut().ok_or(EnvError::NoEpisode)?;
        if episode.done {
            return Err(EnvError::EpisodeOver);
        }
        let response = parse_response(agent_text);
        if !response.has_code() {
            episode.turns += 1;
            episode.done = true;
            return Ok(no_code_result());
        }
        self.run_code(&response.code)
    }

    fn evaluate(&mut self) -> Result<Evaluation, EnvError> {
        self.report().map(|r| r.evaluation())
    }
}

impl WorldEnv {
    /// Runs `code` as one agent turn (what [`Environment::step`] does with the code of
    /// a response): for a caller that has the code already, such as `sage serve-world`.
    pub fn run_code(&mut self, code: &str) -> Result<StepResult, EnvError> {
        let max_turns = self.config.max_turns;
        let episode = self.episode.as_mut().ok_or(EnvError::NoEpisode)?;
        if episode.done {
            return Err(EnvError::EpisodeOver);
        }
        episode.turns += 1;
        let was_complete = episode.world.is_complete();
        let outcome = self.sandbox.execute(code, &mut episode.world);
        // A stopped execution never completes the task, whatever it called first.
        let withdrawn = !was_complete && episode.world.is_complete() && outcome.stopped();
        if withdrawn {
            episode.world.withdraw_completion();
        }
        episode.done = episode.world.is_complete() || episode.turns >= max_turns;
        let built = episode.task.task();
        let origin = Origin {
            scenario_id: built.task.scenario_id.clone(),
            task_id: built.task.id.clone(),
        };
        let (used, saved) = used_and_saved(
            &mut self.sandbox,
            &outcome,
            &episode.library,
            &mut episode.redefined,
            &origin,
        );
        let mut observation = outcome.observation();
        if observation.is_empty() {
            observation = EMPTY_OUTPUT_OBSERVATION.to_owned();
        }
        if withdrawn {
            observation.push_str(WITHDRAWN_OBSERVATION);
        }
        Ok(StepResult {
            observation,
            done: episode.done,
            had_code: true,
            defined: outcome.defined,
            saved,
            used,
        })
    }

    /// Loads one more library skill into the running episode (what [`Environment::reset`]
    /// does with each skill it is given): `Ok(Ok(name))` once loaded, `Ok(Err(reason))`
    /// when its definition fails and it is not loaded.
    pub fn load_skill(&mut self, source: &str) -> Result<Result<String, String>, EnvError> {
        let episode = self.episode.as_mut().ok_or(EnvError::NoEpisode)?;
        Ok(match self.sandbox.load_skill(source) {
            Ok(name) => {
                if !episode.library.contains(&name) {
                    episode.library.push(name.clone());
                }
                Ok(name)
            }
            Err(error) => Err(error.message),
        })
    }
}
