//! The chat an agent of the built-in world sees: the system prompt (the rules of the
//! skill format, or of plain code for the no-skill baseline, and the library skills the
//! task was given), the task as the user message, and each observation as the next
//! user message. The expert's exported trajectories use exactly these texts, so a model
//! trained on them sees the same chat in SFT and in RL.
//!
//! Roles follow ChatML: `system`, `user` (the task, then every observation, prefixed
//! with [`OBSERVATION_PREFIX`]), `assistant` (the agent's turns).

use sage_core::Skill;

use crate::names::Named;

/// The text every observation message starts with.
pub const OBSERVATION_PREFIX: &str = "Observation:\n";

/// Which rules the system prompt states; named `skills` or `direct` in settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PromptMode {
    /// The skill format: define an abstract, documented function, call it, reuse skills.
    Skills,
    /// Plain code calling the APIs directly (the no-skill baseline).
    Direct,
}

impl PromptMode {
    /// `skills` or `direct`.
    pub fn name(self) -> &'static str {
        match self {
            PromptMode::Skills => "skills",
            PromptMode::Direct => "direct",
        }
    }
}

impl Named for PromptMode {
    const WHAT: &'static str = "prompt";
    const ALL: &'static [PromptMode] = &[PromptMode::Skills, PromptMode::Direct];
    fn name(self) -> &'static str {
        PromptMode::name(self)
    }
}

crate::impl_named_text!(PromptMode);

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

/// The whole direct-mode prompt without its rules.
const DIRECT_HEADING: &str = "Plain code, no skill library.";

/// What the system prompt says: which rules, and whether it spells them out.
///
/// With `rules` off, the prompt is only the mode's one-line heading and, in the skill
/// format, the library: for a model trained from scratch on the expert's trajectories
/// the rules text is a constant it cannot read, about 340 of the 570 tokens of an
/// average demo chat; it learns the format from the examples instead. A pretrained
/// model wants the rules. Data, evaluation and RL of one model must use the same
/// prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prompt {
    /// The skill format or plain code.
    pub mode: PromptMode,
    /// Whether the rules text is included.
    pub rules: bool,
}

impl Prompt {
    /// The full prompt of `mode`, rules included.
    pub fn new(mode: PromptMode) -> Prompt {
        Prompt { mode, rules: true }
    }

    /// The system message, listing `library` (signature and first docstring line of
    /// each skill) in the skill format.
    pub fn system(&self, library: &[Skill]) -> String {
        let mut prompt = String::new();
        match (self.mode, self.rules) {
            (PromptMode::Direct, true) => {
                prompt.push_str(&format!("{COMMON_RULES}\n{DIRECT_RULES}"));
            }
            (PromptMode::Direct, false) => prompt.push_str(DIRECT_HEADING),
            (PromptMode::Skills, rules) => {
                if rules {
                    prompt.push_str(&format!("{COMMON_RULES}\n{SKILL_RULES}\n\n"));
                }
                prompt.push_str("Skill library (already defined in the interpreter):");
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
}

/// The system prompt for `mode` with its rules, listing `library`.
pub fn system_prompt(mode: PromptMode, library: &[Skill]) -> String {
    Prompt::new(mode).system(library)
}

/// The user message of a task.
pub fn task_message(instruction: &str) -> String {
    instruction.to_owned()
}

/// The user message that carries an observation.
pub fn observation_message(observation: &str) -> String {
    format!("{OBSERVATION_PREFIX}{observation}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use sage_core::skill::parse_response;
    use sage_core::Origin;

    fn skill() -> Skill {
        let parsed = parse_response(
            "```python\ndef count_songs(playlist: str):\n    \"\"\"Number of songs in a playlist.\n    More.\"\"\"\n    return 0\n```",
        );
        Skill::from_def(&parsed.analysis.defs[0], &parsed.code, Origin::default())
    }

    #[test]
    fn the_full_prompt_states_the_rules_and_lists_the_library() {
        let text = system_prompt(PromptMode::Skills, &[skill()]);
        assert!(text.starts_with(COMMON_RULES));
        assert!(text.contains(SKILL_RULES));
        assert!(text.ends_with(
            "Skill library (already defined in the interpreter):\n\
             - count_songs(playlist: str): Number of songs in a playlist."
        ));
        let direct = system_prompt(PromptMode::Direct, &[skill()]);
        assert_eq!(direct, format!("{COMMON_RULES}\n{DIRECT_RULES}"));
    }

    #[test]
    fn without_rules_only_the_library_is_left() {
        let compact = |mode| Prompt { mode, rules: false };
        assert_eq!(
            compact(PromptMode::Skills).system(&[]),
            "Skill library (already defined in the interpreter):\n(empty)"
        );
        let full = system_prompt(PromptMode::Skills, &[skill()]);
        let listed = compact(PromptMode::Skills).system(&[skill()]);
        assert!(full.ends_with(&listed), "{listed}");
        assert_eq!(
            compact(PromptMode::Direct).system(&[skill()]),
            DIRECT_HEADING
        );
    }
}
