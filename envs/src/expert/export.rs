//! The expert's trajectories as chat JSON lines: one [`TrajectoryRecord`] per task, with
//! the messages in ChatML roles (`system`, `user` for the task and for every
//! observation, `assistant` for the agent's turns; see [`crate::prompt`]) and the ids
//! and outcome needed to filter them (rejection sampling keeps passed scenarios).

use serde::Serialize;

use super::{ScenarioRun, TaskRun};

/// One chat message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: &'static str,
    /// The text.
    pub content: String,
    /// `Some(0)` on an agent turn that is context, not a target: the expert's deliberate
    /// mistake, which a model fine-tuned on the chat sees mended but is not taught to
    /// make. Absent (a target) otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<u8>,
}

impl ChatMessage {
    /// A system message.
    pub fn system(content: String) -> ChatMessage {
        ChatMessage {
            role: "system",
            content,
            weight: None,
        }
    }

    /// A user message (the task, or an observation).
    pub fn user(content: String) -> ChatMessage {
        ChatMessage {
            role: "user",
            content,
            weight: None,
        }
    }

    /// An agent turn.
    pub fn assistant(content: String) -> ChatMessage {
        ChatMessage {
            role: "assistant",
            content,
            weight: None,
        }
    }

    /// An agent turn that is context, not a target (weight 0): a fine-tuned model sees
    /// it but is not trained to write it.
    pub fn assistant_context(content: String) -> ChatMessage {
        ChatMessage {
            weight: Some(0),
            ..ChatMessage::assistant(content)
        }
    }
}

/// One task's trajectory with its ids and outcome: one JSON line of the export.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TrajectoryRecord {
    /// The task's id.
    pub task_id: String,
    /// Its scenario's id.
    pub scenario_id: String,
    /// The split.
    pub split: String,
    /// The template.
    pub template: String,
    /// `skills` or `direct`.
    pub mode: &'static str,
    /// Fraction of checks passed.
    pub score: f32,
    /// Whether every check passed.
    pub passed: bool,
    /// Whether every task of the scenario passed.
    pub scenario_passed: bool,
    /// Agent turns.
    pub steps: usize,
    /// Library skills the task was given.
    pub library: Vec<String>,
    /// Library skills it called.
    pub used_skills: Vec<String>,
    /// Skills it saved.
    pub saved_skills: Vec<String>,
    /// The chat.
    pub messages: Vec<ChatMessage>,
}

impl TrajectoryRecord {
    /// The record of `task` in `scenario`.
    pub fn new(scenario: &ScenarioRun, task: &TaskRun) -> TrajectoryRecord {
        TrajectoryRecord {
            task_id: task.task_id.clone(),
            scenario_id: scenario.scenario_id.clone(),
            split: scenario.split.clone(),
            template: scenario.template.to_owned(),
            mode: scenario.mode.name(),
            score: task.evaluation.score,
            passed: task.evaluation.passed,
            scenario_passed: scenario.passed(),
            steps: task.steps,
            library: task.library.clone(),
            used_skills: task.used.clone(),
            saved_skills: task.saved.iter().map(|s| s.name.clone()).collect(),
            messages: task.messages.clone(),
        }
    }

    /// The record as one line of JSON (no trailing newline).
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}
