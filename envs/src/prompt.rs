//! The chat an agent of the built-in world sees: the system prompt (the rules of the
//! skill format, or of plain code for the no-skill baseline, and the library skills the
//! task was given), the task as the user message, and each observation as the next
//! user message. The expert's exported trajectories use exactly these texts, so a model
//! trained on them sees the same chat in SFT and in RL.
//!
//! Roles follow ChatML: `system`, `user` (the task, then every observation, prefixed
//! with [`OBSERVATION_PREFIX`]), `assistant` (the agent's turns).

use sage_core::Skill;

/// The text every observation message starts with.
pub const OBSERVATION_PREFIX: &str = "Observation:\n";

/// Which rules the system prompt states.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PromptMode {
    /// The skill format: define an abstract, documented function, call it, reuse skills.
    Skills,
    /// Plain code calling the APIs directly (the no-skill baseline).
    Direct,
}

const COMMON_RULES: &str = "You complete tasks for a user by writing code that calls the apps on their phone.
Each turn, answer with a short thought and exactly one ```python code block. The code runs in a stateful \
Starlark interpreter (a Python dialect: no while, try, class, import or **; strings are not iterable, \
use s.elems(); f-strings take plain names only). Variables and functions persist between turns; what the \
code prints comes back to you.
Apps are called as apis.<app>.<api>(name=value, ...) with keyword arguments. Look APIs up with \
apis.api_docs.show_app_descriptions(), apis.api_docs.show_api_descriptions(app_name=...) and \
apis.api_docs.show_api_doc(app_name=..., api_name=...). The supervisor app holds the user's profile, \
addresses, payment cards and app passwords (apis.supervisor.show_account_passwords()); log in with \
apis.<app>.login(username=..., password=...) and pass the access token to the app's other APIs. List APIs \
return one page at a time (page_index, page_limit up to 20): read every page.
When the task is done, call apis.supervisor.complete_task(answer=...) with the answer for a question, or \
apis.supervisor.complete_task() for an action. Change nothing the task does not ask for.";

const SKILL_RULES: &str = "Work with skills: define a function with typed parameters and a docstring that solves \
this kind of task in general (log in inside it, take people, titles and values as parameters, hard-code \
nothing of this task), then call it. Functions that run without error are saved to your skill library. \
When a library skill fits the task, call it instead of writing a new one; if it fails, fix it by \
redefining it; never duplicate an existing skill.";

const DIRECT_RULES: &str =
    "Write plain code that calls the APIs directly and prints what you need.";

/// The system prompt for `mode`, listing `library` (signature and docstring of each).
pub fn system_prompt(mode: PromptMode, library: &[Skill]) -> String {
    let mut prompt = format!("{COMMON_RULES}\n");
    match mode {
        PromptMode::Direct => prompt.push_str(DIRECT_RULES),
        PromptMode::Skills => {
            prompt.push_str(SKILL_RULES);
            prompt.push_str("\n\nSkill library (already defined in the interpreter):");
            if library.is_empty() {
                prompt.push_str("\n(empty)");
            }
            for skill in library {
                prompt.push_str(&format!("\n- {}", skill.signature()));
                if let Some(doc) = &skill.docstring {
                    let first = doc.trim().lines().next().unwrap_or("");
                    prompt.push_str(&format!(": {first}"));
                }
            }
        }
    }
    prompt
}

/// The user message of a task.
pub fn task_message(instruction: &str) -> String {
    instruction.to_owned()
}

/// The user message that carries an observation.
pub fn observation_message(observation: &str) -> String {
    format!("{OBSERVATION_PREFIX}{observation}")
}
