//! The scenarios of a split of a remote environment: listed by the server itself
//! (`GET /scenarios/{split}`, what `sage serve-world` and the Python example serve), or
//! read from a directory of task-id files (`<split>.txt`, one id per line: AppWorld's
//! `data/datasets` layout), grouped into scenarios by the id before its last `_`
//! (`82e2fac_1`, `82e2fac_2` and `82e2fac_3` are one scenario), with each task's
//! instruction from `GET /tasks/{id}`.

use std::fmt;
use std::path::{Path, PathBuf};

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::Value;

use sage_core::{Scenario, Task};

use super::http::{CallError, Server};

/// A scenario of a remote environment and the template it was drawn from (the server's
/// name for its kind of task; `remote` when it gives none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteScenario {
    /// The scenario and its tasks.
    pub scenario: Scenario,
    /// Its template.
    pub template: String,
}

/// Why a split could not be listed.
#[derive(Debug)]
pub enum ListingError {
    /// A call failed.
    Call(CallError),
    /// No task-id file for the split.
    NoFile {
        /// The files looked for.
        tried: Vec<PathBuf>,
    },
    /// A task-id file could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        error: std::io::Error,
    },
    /// The server's listing is not what the protocol says.
    Malformed {
        /// What is wrong.
        detail: String,
    },
    /// `[rl] templates` names a template no scenario of the split has.
    UnknownTemplate(String),
    /// The split has no tasks.
    Empty {
        /// The split.
        split: String,
    },
}

impl fmt::Display for ListingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListingError::Call(e) => write!(f, "{e}"),
            ListingError::NoFile { tried } => {
                let tried: Vec<String> = tried.iter().map(|p| p.display().to_string()).collect();
                write!(f, "no task-id file: tried {}", tried.join(", "))
            }
            ListingError::Read { path, error } => write!(f, "{}: {error}", path.display()),
            ListingError::Malformed { detail } => write!(f, "malformed task listing: {detail}"),
            ListingError::UnknownTemplate(name) => {
                write!(f, "no scenario of the server's template `{name}`")
            }
            ListingError::Empty { split } => write!(f, "the split {split} has no tasks"),
        }
    }
}

impl std::error::Error for ListingError {}

impl From<CallError> for ListingError {
    fn from(e: CallError) -> Self {
        ListingError::Call(e)
    }
}

/// The template of a scenario whose server names none.
pub const UNNAMED_TEMPLATE: &str = "remote";

/// The scenarios of `split`: from the task-id files of `tasks_dir` when given, else
/// from `server`'s listing.
pub fn list_split(
    server: &Server,
    split: &str,
    tasks_dir: Option<&Path>,
) -> Result<Vec<RemoteScenario>, ListingError> {
    let scenarios = match tasks_dir {
        Some(dir) => from_task_ids(server, split, dir)?,
        None => from_server(server, split)?,
    };
    if scenarios.iter().all(|s| s.scenario.tasks.is_empty()) {
        return Err(ListingError::Empty {
            split: split.to_owned(),
        });
    }
    Ok(scenarios)
}

/// `GET /scenarios/{split}`: `[{"id", "template"?, "tasks": [{"id", "instruction"}]}]`.
fn from_server(server: &Server, split: &str) -> Result<Vec<RemoteScenario>, ListingError> {
    let reply = server.get(&format!("/scenarios/{}", percent_encode(split)))?;
    let malformed = |detail: &str| ListingError::Malformed {
        detail: format!("{}/scenarios/{split}: {detail}", server.url()),
    };
    let listed = reply
        .get("output")
        .and_then(Value::as_array)
        .ok_or_else(|| malformed("its output is not a list of scenarios"))?;
    let mut scenarios = Vec::with_capacity(listed.len());
    for entry in listed {
        let id = entry
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| malformed("a scenario has no string \"id\""))?;
        let template = entry
            .get("template")
            .and_then(Value::as_str)
            .unwrap_or(UNNAMED_TEMPLATE);
        let tasks = entry
            .get("tasks")
            .and_then(Value::as_array)
            .ok_or_else(|| malformed(&format!("scenario {id} has no \"tasks\" list")))?;
        let tasks = tasks
            .iter()
            .map(|task| {
                let field = |name: &str| task.get(name).and_then(Value::as_str).map(str::to_owned);
                match (field("id"), field("instruction")) {
                    (Some(task_id), Some(instruction)) => Ok(Task {
                        id: task_id,
                        scenario_id: id.to_owned(),
                        instruction,
                    }),
                    _ => Err(malformed(&format!(
                        "a task of scenario {id} lacks a string \"id\" or \"instruction\""
                    ))),
                }
            })
            .collect::<Result<Vec<Task>, ListingError>>()?;
        scenarios.push(RemoteScenario {
            scenario: Scenario {
                id: id.to_owned(),
                split: split.to_owned(),
                tasks,
            },
            template: template.to_owned(),
        });
    }
    Ok(scenarios)
}

/// The ids of `dir/<split>.txt` (or with `-` written `_`), grouped into scenarios, each
/// task's instruction from `GET /tasks/{id}`.
fn from_task_ids(
    server: &Server,
    split: &str,
    dir: &Path,
) -> Result<Vec<RemoteScenario>, ListingError> {
    let tried: Vec<PathBuf> = [split.to_owned(), split.replace('-', "_")]
        .iter()
        .map(|name| dir.join(format!("{name}.txt")))
        .collect();
    let path = tried
        .iter()
        .find(|p| p.is_file())
        .ok_or_else(|| ListingError::NoFile {
            tried: tried.clone(),
        })?;
    let text = std::fs::read_to_string(path).map_err(|error| ListingError::Read {
        path: path.clone(),
        error,
    })?;
    let mut scenarios: Vec<RemoteScenario> = Vec::new();
    for id in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let scenario_id = id.rsplit_once('_').map_or(id, |(scenario, _)| scenario);
        let reply = server.get(&format!("/tasks/{}", percent_encode(id)))?;
        let instruction = reply
            .get("output")
            .and_then(|o| o.get("instruction"))
            .and_then(Value::as_str)
            .ok_or_else(|| ListingError::Malformed {
                detail: format!(
                    "{}/tasks/{id}: its output has no string \"instruction\"",
                    server.url()
                ),
            })?;
        let task = Task {
            id: id.to_owned(),
            scenario_id: scenario_id.to_owned(),
            instruction: instruction.to_owned(),
        };
        match scenarios.last_mut() {
            Some(last) if last.scenario.id == scenario_id => last.scenario.tasks.push(task),
            _ => scenarios.push(RemoteScenario {
                scenario: Scenario {
                    id: scenario_id.to_owned(),
                    split: split.to_owned(),
                    tasks: vec![task],
                },
                template: UNNAMED_TEMPLATE.to_owned(),
            }),
        }
    }
    Ok(scenarios)
}

/// The bytes a URL path segment keeps as they are: `A-Z a-z 0-9 - _ . ~`.
const PATH_SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `text` as one URL path segment, every other byte written `%XX`.
pub fn percent_encode(text: &str) -> String {
    utf8_percent_encode(text, PATH_SEGMENT).to_string()
}

/// The inverse of [`percent_encode`]: `None` when the bytes are not UTF-8.
pub fn percent_decode(text: &str) -> Option<String> {
    percent_decode_str(text)
        .decode_utf8()
        .ok()
        .map(|t| t.into_owned())
}
