//! [`TinyEnv`]: a small, fast environment whose tasks reward writing a function once and
//! reusing it, for unit tests of the RL loop (an episode takes well under a millisecond).
//!
//! Rules:
//! - A scenario is an operation and a seed; its 3 tasks apply the same operation to
//!   different lists of numbers. Ids: `tiny/<operation>/<seed>` and `.../t1` to `/t3`;
//!   [`tiny_scenarios`] lists them, and any id of that form is a valid task.
//! - Agent code runs in the same Starlark sandbox as the built-in world, with one app:
//!   `apis.tiny.numbers(name=...)` returns the task's list called `name`, and
//!   `apis.tiny.submit(answer=...)` submits the answer and ends the episode.
//! - Checks: the answer was submitted, and it is right (numbers compared exactly).
//!   Score = fraction of the two; pass = both.
//! - Episodes end on submit, at the turn limit (default 3), or on a response without
//!   code. Steps report `defined`, `saved` and `used` exactly like
//!   [`WorldEnv`](crate::environment::WorldEnv).
//!
//! Why it rewards reuse: the operation takes a few lines of code, and the list is only
//! reachable through the API, so a function of the list's name (`tiny_<operation>`)
//! written in task 1 solves tasks 2 and 3 in one short turn. Combined with the
//! skill-integrated reward (which pays a bonus when `used` names a skill saved by the
//! chain's first task), a policy that saves and calls a function earns more.
//! [`TinyEnv::expert_response`] writes such a response.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::OnceLock;

use serde_json::{json, Map, Value};

use crate::sandbox::{ApiError, ApiHost, ApiSpec, Limits, ParamSpec, ParamType, Sandbox};
use crate::turn::{load_library, used_and_saved};
use sage_core::env::{Reset, StepResult};
use sage_core::skill::{parse_response, Origin, Skill};
use sage_core::{Environment, Evaluation, Scenario, Task};

/// The operations, with how instructions describe them.
pub const OPERATIONS: [(&str, &str); 5] = [
    ("sum_of_squares", "the sum of the squares of"),
    ("count_even", "how many even numbers there are among"),
    ("max_minus_min", "the largest minus the smallest of"),
    ("sum_of_odd", "the sum of the odd numbers among"),
    (
        "sum_above_ten",
        "the sum of the numbers greater than 10 among",
    ),
];

/// Numbers in each task's list.
const LIST_LENGTH: usize = 12;

/// The Starlark body that computes each operation over `numbers`.
fn operation_code(operation: &str) -> &'static str {
    match operation {
        "sum_of_squares" => "sum([n * n for n in numbers])",
        "count_even" => "len([n for n in numbers if n % 2 == 0])",
        "max_minus_min" => "max(numbers) - min(numbers)",
        "sum_of_odd" => "sum([n for n in numbers if n % 2 == 1])",
        _ => "sum([n for n in numbers if n > 10])",
    }
}

/// The answer of `operation` on `numbers`.
fn apply(operation: &str, numbers: &[i64]) -> i64 {
    match operation {
        "sum_of_squares" => numbers.iter().map(|n| n * n).sum(),
        "count_even" => numbers.iter().filter(|n| *n % 2 == 0).count() as i64,
        "max_minus_min" => numbers.iter().max().unwrap_or(&0) - numbers.iter().min().unwrap_or(&0),
        "sum_of_odd" => numbers.iter().filter(|n| *n % 2 == 1).sum(),
        _ => numbers.iter().filter(|n| **n > 10).sum(),
    }
}

/// A tiny task, decoded from its id.
#[derive(Clone, Debug, PartialEq, Eq)]
struct TinyTask {
    operation: &'static str,
    list_name: String,
    numbers: Vec<i64>,
}

impl TinyTask {
    /// Decodes `tiny/<operation>/<seed>/t<k>`.
    fn from_id(id: &str) -> Option<TinyTask> {
        let mut parts = id.split('/');
        let (tiny, operation, seed, index) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if tiny != "tiny" || parts.next().is_some() {
            return None;
        }
        let (operation, _) = OPERATIONS.iter().find(|(name, _)| *name == operation)?;
        let seed: u64 = seed.parse().ok()?;
        let index: u64 = index.strip_prefix('t')?.parse().ok()?;
        let mut state =
            seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ index.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let mut next = || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let z = (state ^ (state >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb) >> 33
        };
        let list_name = format!("list_{}", next() % 1000);
        let numbers = (0..LIST_LENGTH).map(|_| (next() % 30) as i64).collect();
        Some(TinyTask {
            operation,
            list_name,
            numbers,
        })
    }

    fn instruction(&self) -> String {
        let description = OPERATIONS
            .iter()
            .find(|(name, _)| *name == self.operation)
            .map_or("", |(_, d)| d);
        format!(
            "Compute {description} the numbers in the list \"{}\" (read it with apis.tiny.numbers(name=...)) and submit the result with apis.tiny.submit(answer=...).",
            self.list_name
        )
    }
}

/// The scenarios of every operation for each seed in `seeds`.
pub fn tiny_scenarios(seeds: std::ops::Range<u64>) -> Vec<Scenario> {
    let mut scenarios = Vec::new();
    for seed in seeds {
        for (operation, _) in OPERATIONS {
            let id = format!("tiny/{operation}/{seed}");
            let tasks = (1..=3)
                .filter_map(|k| {
                    let task_id = format!("{id}/t{k}");
                    let task = TinyTask::from_id(&task_id)?;
                    Some(Task {
                        id: task_id,
                        scenario_id: id.clone(),
                        instruction: task.instruction(),
                    })
                })
                .collect();
            scenarios.push(Scenario {
                id,
                split: "tiny".to_owned(),
                tasks,
            });
        }
    }
    scenarios
}

/// The two APIs of the `tiny` app.
fn specs() -> &'static [ApiSpec; 2] {
    static SPECS: OnceLock<[ApiSpec; 2]> = OnceLock::new();
    SPECS.get_or_init(|| {
        [
            ApiSpec::new(
                "tiny",
                "numbers",
                vec![ParamSpec::required("name", ParamType::Str)],
            ),
            ApiSpec::new(
                "tiny",
                "submit",
                vec![ParamSpec::required("answer", ParamType::Any)],
            ),
        ]
    })
}

/// The `tiny` app of one episode.
struct TinyHost {
    task: TinyTask,
    submitted: Option<Value>,
}

impl ApiHost for TinyHost {
    fn spec(&self, app: &str, api: &str) -> Option<&ApiSpec> {
        specs().iter().find(|s| s.app == app && s.name == api)
    }

    fn app_names(&self) -> Vec<String> {
        vec!["tiny".to_owned()]
    }

    fn api_names(&self, app: &str) -> Vec<String> {
        specs()
            .iter()
            .filter(|s| s.app == app)
            .map(|s| s.name.clone())
            .collect()
    }

    fn call(&mut self, _app: &str, api: &str, args: Map<String, Value>) -> Result<Value, ApiError> {
        if self.submitted.is_some() {
            return Err(ApiError::new("the answer was already submitted"));
        }
        match api {
            "numbers" if args.get("name").and_then(Value::as_str) == Some(&self.task.list_name) => {
                Ok(json!(self.task.numbers))
            }
            "numbers" => Err(ApiError::new(format!(
                "no list named {:?}",
                args.get("name")
            ))),
            _ => {
                self.submitted = Some(args.get("answer").cloned().unwrap_or(Value::Null));
                Ok(json!({"message": "Answer submitted."}))
            }
        }
    }
}

/// The tiny environment's own failures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TinyError {
    /// The task id is not `tiny/<operation>/<seed>/t<k>`.
    UnknownTask(String),
    /// `step` or `evaluate` before `reset`.
    NoEpisode,
    /// `step` after the episode ended.
    EpisodeOver,
}

impl fmt::Display for TinyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TinyError::UnknownTask(id) => write!(f, "{id:?} is not a tiny task id"),
            TinyError::NoEpisode => write!(f, "no episode: call reset first"),
            TinyError::EpisodeOver => write!(f, "the episode is over"),
        }
    }
}

impl std::error::Error for TinyError {}

struct TinyEpisode {
    task: Task,
    host: TinyHost,
    turns: u32,
    done: bool,
    library: Vec<String>,
    redefined: BTreeSet<String>,
}

/// The tiny environment.
pub struct TinyEnv {
    max_turns: u32,
    sandbox: Sandbox,
    episode: Option<TinyEpisode>,
}

impl Default for TinyEnv {
    fn default() -> TinyEnv {
        TinyEnv::new(3)
    }
}

impl TinyEnv {
    /// A tiny environment with this turn limit.
    pub fn new(max_turns: u32) -> TinyEnv {
        TinyEnv {
            max_turns: max_turns.max(1),
            sandbox: Sandbox::new(Limits::default()),
            episode: None,
        }
    }

    /// The name of the skill [`TinyEnv::expert_response`] writes for a task's operation.
    pub fn skill_name(task: &Task) -> Option<String> {
        TinyTask::from_id(&task.id).map(|t| format!("tiny_{}", t.operation))
    }

    /// A correct agent response: calls the operation's skill and submits if `library`
    /// has it, otherwise defines it first.
    pub fn expert_response(task: &Task, library: &[Skill]) -> Option<String> {
        let tiny = TinyTask::from_id(&task.id)?;
        let name = format!("tiny_{}", tiny.operation);
        let call = format!("apis.tiny.submit(answer={name}({:?}))", tiny.list_name);
        if library.iter().any(|s| s.name == name) {
            return Some(format!("I can reuse `{name}`.\n\n```python\n{call}\n```"));
        }
        Some(format!(
            "I'll write a reusable function.\n\n```python\ndef {name}(list_name: str) -> int:\n    \"\"\"Applies the operation to the named list.\"\"\"\n    numbers = apis.tiny.numbers(name=list_name)\n    return {}\n\n{call}\n```",
            operation_code(tiny.operation)
        ))
    }
}

impl Environment for TinyEnv {
    type Error = TinyError;

    fn reset(&mut self, task: &Task, library: &[Skill]) -> Result<Reset, TinyError> {
        let tiny =
            TinyTask::from_id(&task.id).ok_or_else(|| TinyError::UnknownTask(task.id.clone()))?;
        self.sandbox.reset();
        let (loaded, dropped) = load_library(&mut self.sandbox, library);
        self.episode = Some(TinyEpisode {
            task: task.clone(),
            host: TinyHost {
                task: tiny,
                submitted: None,
            },
            turns: 0,
            done: false,
            library: loaded,
            redefined: BTreeSet::new(),
        });
        Ok(Reset { dropped })
    }

    fn step(&mut self, agent_text: &str) -> Result<StepResult, TinyError> {
        let episode = self.episode.as_mut().ok_or(TinyError::NoEpisode)?;
        if episode.done {
            return Err(TinyError::EpisodeOver);
        }
        episode.turns += 1;
        let response = parse_response(agent_text);
        if !response.has_code() {
            episode.done = true;
            return Ok(StepResult {
                observation: "No code block found: the episode ends.".to_owned(),
                done: true,
                had_code: false,
                ..StepResult::default()
            });
        }
        let outcome = self.sandbox.execute(&response.code, &mut episode.host);
        let origin = Origin {
            scenario_id: episode.task.scenario_id.clone(),
            task_id: episode.task.id.clone(),
        };
        let (used, saved) = used_and_saved(
            &mut self.sandbox,
            &outcome,
            &episode.library,
            &mut episode.redefined,
            &origin,
        );
        episode.done = episode.host.submitted.is_some() || episode.turns >= self.max_turns;
        Ok(StepResult {
            observation: outcome.observation(),
            done: episode.done,
            had_code: true,
            defined: outcome.defined,
            saved,
            used,
        })
    }

    fn evaluate(&mut self) -> Result<Evaluation, TinyError> {
        let episode = self.episode.as_ref().ok_or(TinyError::NoEpisode)?;
        let expected = apply(episode.host.task.operation, &episode.host.task.numbers);
        let submitted = episode.host.submitted.is_some();
        let correct = episode.host.submitted.as_ref().and_then(Value::as_i64) == Some(expected);
        let passed = usize::from(submitted) + usize::from(correct);
        Ok(Evaluation {
            score: passed as f32 / 2.0,
            passed: passed == 2,
        })
    }
}
