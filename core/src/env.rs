//! The [`Environment`] trait a world implements, and the records that cross it: tasks,
//! scenarios, chains of tasks, and the turns and episodes a rollout produces.

use alloc::string::String;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

use crate::skill::Skill;

/// One task: an instruction the agent must carry out in the world.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Task {
    /// Unique id of the task across the world (stable across runs).
    pub id: String,
    /// Id of the scenario the task belongs to.
    pub scenario_id: String,
    /// The instruction shown to the agent as the user message.
    pub instruction: String,
}

/// A scenario: similar tasks (the paper: 3) that share structure, so a skill written
/// for one is worth reusing in the others.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Scenario {
    /// Unique id of the scenario.
    pub id: String,
    /// The split it belongs to (`train`, `dev`, `test-normal`, ...), as the world names it.
    pub split: String,
    /// Its tasks, in order; every task's `scenario_id` equals `id`.
    pub tasks: Vec<Task>,
}

impl Scenario {
    /// The chains of `k` consecutive tasks of this scenario: for 3 tasks and `k = 2`,
    /// `(t1, t2)` and `(t2, t3)`. Empty when `k` is 0 or exceeds the task count.
    pub fn chains(&self, k: usize) -> impl Iterator<Item = TaskChain> + '_ {
        let windows = if k == 0 {
            [].windows(1)
        } else {
            self.tasks.windows(k)
        };
        windows.map(|w| TaskChain {
            scenario_id: self.id.clone(),
            tasks: w.to_vec(),
        })
    }
}

/// A training example of sequential rollout: tasks of one scenario solved in order,
/// each seeing the skills saved by the earlier ones.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TaskChain {
    /// The scenario every task comes from.
    pub scenario_id: String,
    /// The tasks, in the order they are solved (K of them).
    pub tasks: Vec<Task>,
}

/// A skill the environment refused to load at reset, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DroppedSkill {
    /// The skill's name.
    pub name: String,
    /// The error its definition raised, as the interpreter reported it.
    pub reason: String,
}

/// What [`Environment::reset`] reports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reset {
    /// Library skills that failed to load and are not available in this episode.
    pub dropped: Vec<DroppedSkill>,
}

/// What one agent turn did, as [`Environment::step`] reports it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    /// The observation returned to the agent: printed output, or a short traceback.
    pub observation: String,
    /// The episode is over (task completed, turn limit, or a turn without code).
    pub done: bool,
    /// The agent's text contained code that was executed.
    pub had_code: bool,
    /// Names of top-level functions the turn defined.
    pub defined: Vec<String>,
    /// Functions that ran without error this turn: the candidates to save as skills,
    /// with their origin set to the current task.
    pub saved: Vec<Skill>,
    /// Names of library skills the turn's code actually called (traced at run time),
    /// excluding names the episode redefined.
    pub used: Vec<String>,
}

/// The outcome of a task, as [`Environment::evaluate`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    /// Fraction of the task's checks that passed, in `[0, 1]`.
    pub score: f32,
    /// All checks passed.
    pub passed: bool,
}

/// A world an agent acts in. Implementations must guarantee:
///
/// - `reset` starts a fresh episode of `task`: no state of an earlier episode leaks
///   into it except what the world itself keeps by design, and the given skills are
///   loaded into the agent's interpreter before the first turn (those that fail to
///   load are dropped and reported, never silently kept);
/// - `step` never panics on any agent text (malformed code, endless loops, huge
///   allocations): it returns the problem as the observation and stays usable;
/// - `evaluate` depends only on the world state and the answer given, never on
///   what the agent claims, and may be called once the episode is over.
///
/// Errors are for the environment itself failing (a bug, a lost connection), not for
/// the agent's mistakes.
pub trait Environment {
    /// The environment's own failure: an error that can cross threads and be kept as
    /// the source of a caller's error.
    type Error: core::error::Error + Send + Sync + 'static;

    /// Starts an episode of `task` with `library` loaded into the interpreter.
    fn reset(&mut self, task: &Task, library: &[Skill]) -> Result<Reset, Self::Error>;

    /// Executes one agent turn (reasoning and a code block) and reports what happened.
    fn step(&mut self, agent_text: &str) -> Result<StepResult, Self::Error>;

    /// Scores the current episode's task against the world state.
    fn evaluate(&mut self) -> Result<Evaluation, Self::Error>;
}

/// One turn of an episode: what the agent wrote and what came back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    /// The agent's text.
    pub agent_text: String,
    /// Tokens the policy generated for this turn.
    pub generated_tokens: u32,
    /// What the environment reported.
    pub result: StepResult,
}

/// Why an episode ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EpisodeEnd {
    /// The environment said the episode is done after a turn with code (typically the
    /// agent called the completion API).
    Completed,
    /// The agent answered without any code: the paper's no-code case.
    NoCode,
    /// The turn limit was reached.
    TurnLimit,
    /// The environment itself failed (a lost connection, a server error): the episode
    /// says nothing about the agent, and its evaluation is a fail.
    EnvironmentFailed,
}

/// A whole episode: one task, the library it was given, and its turns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Episode {
    /// The task.
    pub task: Task,
    /// Names of the library skills the task was given (after drops at reset).
    pub library: Vec<String>,
    /// The turns, in order.
    pub turns: Vec<Turn>,
    /// Why it ended.
    pub end: EpisodeEnd,
    /// The evaluation of the task at the end.
    pub evaluation: Evaluation,
}

impl Episode {
    /// Agent turns taken.
    pub fn steps(&self) -> usize {
        self.turns.len()
    }

    /// Tokens generated over all turns.
    pub fn generated_tokens(&self) -> u64 {
        self.turns
            .iter()
            .map(|t| u64::from(t.generated_tokens))
            .sum()
    }

    /// Any turn contained executed code.
    pub fn had_code(&self) -> bool {
        self.turns.iter().any(|t| t.result.had_code)
    }

    /// Names of library skills called during the episode, first use first, no repeats.
    pub fn used_skills(&self) -> Vec<&str> {
        let mut used: Vec<&str> = Vec::new();
        for name in self.turns.iter().flat_map(|t| &t.result.used) {
            if !used.contains(&name.as_str()) {
                used.push(name);
            }
        }
        used
    }

    /// Skills saved by the episode, the last definition of each name winning.
    pub fn saved_skills(&self) -> Vec<&Skill> {
        let mut saved: Vec<&Skill> = Vec::new();
        for skill in self.turns.iter().flat_map(|t| &t.result.saved) {
            match saved.iter_mut().find(|s| s.name == skill.name) {
                Some(slot) => *slot = skill,
                None => saved.push(skill),
            }
        }
        saved
    }
}
