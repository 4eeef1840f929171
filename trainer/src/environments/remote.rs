//! [`RemoteEnv`]: an [`Environment`] served over HTTP by another process, in AppWorld's
//! environment-server protocol (see `docs/remote-env.md`).
//!
//! An episode is `POST /initialize` for its task, then each library skill's source sent
//! to `POST /execute` (as SAGE loads skills: by running their definitions in the new
//! world; a skill whose definition fails is dropped with the server's output as the
//! reason), then one `/execute` per agent turn with the code of the agent's response and
//! `POST /task_completed` to learn whether the episode is over, and `POST /evaluate`.
//!
//! What a turn defined, saved and used is read from the code itself: the functions its
//! code defines are saved when the execution did not fail (an output starting with
//! `Execution failed`, AppWorld's marker), with the source the agent wrote; the library
//! skills its code calls count as used. A server that knows more (`sage serve-world`)
//! adds a `sage` field to its `/execute` reply with the run-time facts: `failed`, the
//! functions that ran without error (`saved`) and the library skills whose body ran
//! (`used`); the skills' sources still come from the agent's code.
//!
//! Every failure of the server (down, slow past the call or episode limit, an error
//! status, a malformed or oversized reply) is a [`RemoteError`] naming the URL, which
//! the rollout engine turns into a failed episode.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use sage_core::env::{DroppedSkill, Reset, StepResult};
use sage_core::skill::{parse_code, parse_response, Origin, Skill};
use sage_core::{Environment, Evaluation, Task};
use sage_envs::environment::{no_code_result, EMPTY_OUTPUT_OBSERVATION};

use super::http::{CallError, CallLimits, Server};

/// The start of an `/execute` output that reports a failed execution (AppWorld's).
pub const EXECUTION_FAILED: &str = "Execution failed";

/// Settings of the episodes a [`RemoteEnv`] runs.
#[derive(Clone, Debug, PartialEq)]
pub struct RemoteSettings {
    /// Limits of each call.
    pub call: CallLimits,
    /// Time one episode may take, from `/initialize` to `/evaluate`.
    pub episode_timeout: Duration,
    /// Agent turns an episode may take (sent as `max_interactions`).
    pub max_turns: u32,
    /// The `experiment_name` sent to `/initialize`.
    pub experiment_name: String,
    /// The `random_seed` sent to `/initialize`.
    pub random_seed: u64,
}

/// Why a remote environment failed.
#[derive(Clone, Debug, PartialEq)]
pub enum RemoteError {
    /// A call failed.
    Call(CallError),
    /// The episode ran past its time limit.
    EpisodeTimeout {
        /// The server.
        url: String,
        /// The task.
        task_id: String,
        /// The limit, in seconds.
        seconds: f64,
    },
    /// `step` or `evaluate` before any `reset`.
    NoEpisode,
    /// `step` after the episode ended.
    EpisodeOver,
    /// A reply's `output` is not what the endpoint returns.
    Reply {
        /// The URL called.
        url: String,
        /// What was expected.
        expected: &'static str,
    },
}

impl fmt::Display for RemoteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemoteError::Call(e) => write!(f, "{e}"),
            RemoteError::EpisodeTimeout {
                url,
                task_id,
                seconds,
            } => write!(
                f,
                "{url}: task {task_id} ran past its {seconds} s ([env] episode_timeout_s)"
            ),
            RemoteError::NoEpisode => write!(f, "no episode: call reset first"),
            RemoteError::EpisodeOver => {
                write!(f, "the episode is over: call reset to start another")
            }
            RemoteError::Reply { url, expected } => {
                write!(f, "{url}: malformed reply: its output is not {expected}")
            }
        }
    }
}

impl std::error::Error for RemoteError {}

impl From<CallError> for RemoteError {
    fn from(e: CallError) -> Self {
        RemoteError::Call(e)
    }
}

/// The running episode.
struct Episode {
    task: Task,
    started: Instant,
    turns: u32,
    done: bool,
    /// Library skills loaded.
    library: Vec<String>,
    /// Library names the episode redefined: calls to them no longer count as used.
    redefined: BTreeSet<String>,
    /// The source of each function the episode defined, the last definition winning.
    defined: BTreeMap<String, String>,
}

/// One environment server's worlds as an [`Environment`].
pub struct RemoteEnv {
    server: Server,
    settings: RemoteSettings,
    episode: Option<Episode>,
}

impl RemoteEnv {
    /// An environment on the server at `url`.
    pub fn new(url: &str, settings: RemoteSettings) -> RemoteEnv {
        RemoteEnv {
            server: Server::new(url, settings.call.clone()),
            settings,
            episode: None,
        }
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        self.server.url()
    }

    /// The episode, once it is still within its time.
    fn running(&mut self) -> Result<&mut Episode, RemoteError> {
        let url = self.server.url().to_owned();
        let limit = self.settings.episode_timeout;
        let episode = self.episode.as_mut().ok_or(RemoteError::NoEpisode)?;
        if episode.started.elapsed() > limit {
            return Err(RemoteError::EpisodeTimeout {
                url,
                task_id: episode.task.id.clone(),
                seconds: limit.as_secs_f64(),
            });
        }
        Ok(episode)
    }

    /// Runs `code` in the episode's world: the reply's fields.
    fn execute(
        &mut self,
        task_id: &str,
        code: &str,
        library: bool,
    ) -> Result<Map<String, Value>, RemoteError> {
        let body = json!({ "task_id": task_id, "code": code, "library": library });
        Ok(self.server.post("/execute", &body, false)?)
    }

    /// Closes the current episode's world, if any, as a courtesy: its failure changes
    /// nothing.
    fn close(&mut self) {
        if let Some(episode) = self.episode.take() {
            let body = json!({ "task_id": episode.task.id });
            if let Err(e) = self.server.post("/close", &body, false) {
                tracing::debug!("closing task {}: {e}", episode.task.id);
            }
        }
    }
}

impl Drop for RemoteEnv {
    fn drop(&mut self) {
        self.close();
    }
}

/// The `output` of `/execute` as text.
fn output_text(reply: &Map<String, Value>) -> String {
    match reply.get("output") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// The names in `reply.sage[field]`, when the server reports them.
fn traced(reply: &Map<String, Value>, field: &str) -> Option<Vec<String>> {
    let names = reply.get("sage")?.get(field)?.as_array()?;
    Some(
        names
            .iter()
            .filter_map(|n| n.as_str().map(str::to_owned))
            .collect(),
    )
}

/// Whether the execution failed: the server's `sage.failed`, or AppWorld's marker.
fn failed(reply: &Map<String, Value>, output: &str) -> bool {
    reply
        .get("sage")
        .and_then(|s| s.get("failed"))
        .and_then(Value::as_bool)
        .unwrap_or_else(|| output.trim_start().starts_with(EXECUTION_FAILED))
}

impl Environment for RemoteEnv {
    type Error = RemoteError;

    fn reset(&mut self, task: &Task, library: &[Skill]) -> Result<Reset, RemoteError> {
        self.close();
        let body = json!({
            "task_id": task.id,
            "experiment_name": self.settings.experiment_name,
            "max_interactions": self.settings.max_turns,
            "timeout_seconds": self.settings.call.timeout.as_secs(),
            "random_seed": self.settings.random_seed,
        });
        self.server.post("/initialize", &body, true)?;
        self.episode = Some(Episode {
            task: task.clone(),
            started: Instant::now(),
            turns: 0,
            done: false,
            library: Vec::new(),
            redefined: BTreeSet::new(),
            defined: BTreeMap::new(),
        });
        let mut dropped = Vec::new();
        for skill in library {
            self.running()?;
            if !parse_code(&skill.source).defines(&skill.name) {
                dropped.push(DroppedSkill {
                    name: skill.name.clone(),
                    reason: format!("its source does not define `{}`", skill.name),
                });
                continue;
            }
            let reply = self.execute(&task.id, &skill.source, true)?;
            let output = output_text(&reply);
            if failed(&reply, &output) {
                dropped.push(DroppedSkill {
                    name: skill.name.clone(),
                    reason: output,
                });
            } else if let Some(episode) = self.episode.as_mut() {
                episode.library.push(skill.name.clone());
            }
        }
        Ok(Reset { dropped })
    }

    fn step(&mut self, agent_text: &str) -> Result<StepResult, RemoteError> {
        let max_turns = self.settings.max_turns;
        let episode = self.running()?;
        if episode.done {
            return Err(RemoteError::EpisodeOver);
        }
        episode.turns += 1;
        let response = parse_response(agent_text);
        if !response.has_code() {
            episode.done = true;
            return Ok(no_code_result());
        }
        let task_id = episode.task.id.clone();
        let reply = self.execute(&task_id, &response.code, false)?;
        let output = output_text(&reply);
        let failed = failed(&reply, &output);
        let body = json!({ "task_id": task_id });
        let completed = self.server.post("/task_completed", &body, true)?;
        let url = self.server.url().to_owned();
        let completed =
            completed
                .get("output")
                .and_then(Value::as_bool)
                .ok_or(RemoteError::Reply {
                    url,
                    expected: "true or false (/task_completed)",
                })?;
        let episode = self.running()?;
        let analysis = &response.analysis;
        let defined: Vec<String> = analysis.defs.iter().map(|d| d.name.clone()).collect();
        for def in &analysis.defs {
            let source = def.source(&response.code).to_owned();
            episode.defined.insert(def.name.clone(), source);
            if episode.library.contains(&def.name) {
                episode.redefined.insert(def.name.clone());
            }
        }
        let used = traced(&reply, "used").unwrap_or_else(|| {
            episode
                .library
                .iter()
                .filter(|name| analysis.calls_to(name).next().is_some())
                .cloned()
                .collect()
        });
        let used = used
            .into_iter()
            .filter(|name| !episode.redefined.contains(name))
            .collect();
        let saved_names = match traced(&reply, "saved") {
            Some(names) => names,
            None if failed => Vec::new(),
            None => defined.clone(),
        };
        let origin = Origin {
            scenario_id: episode.task.scenario_id.clone(),
            task_id: episode.task.id.clone(),
        };
        let saved = saved_names
            .iter()
            .filter_map(|name| {
                let source = episode.defined.get(name)?;
                let parsed = parse_code(source);
                Some(Skill::from_def(parsed.def(name)?, source, origin.clone()))
            })
            .collect();
        episode.done = completed || episode.turns >= max_turns;
        Ok(StepResult {
            observation: if output.is_empty() {
                EMPTY_OUTPUT_OBSERVATION.to_owned()
            } else {
                output
            },
            done: episode.done,
            had_code: true,
            defined,
            saved,
            used,
        })
    }

    fn evaluate(&mut self) -> Result<Evaluation, RemoteError> {
        let task_id = self.running()?.task.id.clone();
        let body = json!({ "task_id": task_id, "suppress_errors": true, "report": false });
        let reply = self.server.post("/evaluate", &body, true)?;
        let url = format!("{}/evaluate", self.server.url());
        evaluation(reply.get("output")).ok_or(RemoteError::Reply {
            url,
            expected:
                "an evaluation (success, and pass_count and num_tests or passes and failures)",
        })
    }
}

/// An `/evaluate` output: `success` and the share of tests passed, from `pass_count`
/// and `num_tests` or from the lengths of `passes` and `failures` (AppWorld's report).
fn evaluation(output: Option<&Value>) -> Option<Evaluation> {
    let output = output?;
    let passed = output.get("success")?.as_bool()?;
    let count = |field: &str| output.get(field).and_then(Value::as_array).map(Vec::len);
    let (passes, total) = match (
        output.get("pass_count").and_then(Value::as_u64),
        output.get("num_tests").and_then(Value::as_u64),
    ) {
        (Some(passes), Some(total)) => (passes as usize, total as usize),
        _ => {
            let (passes, failures) = (count("passes")?, count("failures")?);
            (passes, passes + failures)
        }
    };
    let score = if total == 0 {
        if passed {
            1.0
        } else {
            0.0
        }
    } else {
        (passes.min(total) as f32) / total as f32
    };
    Some(Evaluation { score, passed })
}
