//! The system prompt: the agent's rules (SAGE's skill format) and the retrieved
//! skills, shown as summaries, documented signatures or full source.

use sage_core::Skill;

/// The agent's rules in the skill format (SAGE.md, "The agent").
pub const AGENT_RULES: &str = "You complete tasks for a user by writing code that calls the apps on their phone.
Each turn, answer with short reasoning and exactly one ```python code block. The code runs in a stateful \
Starlark interpreter, a Python dialect: there is no while, try, class or import; loop with for and leave \
a loop early with break. Variables and functions persist between turns; what the code prints, or the \
error it raises, comes back to you as the next message.
Call apps as apis.<app>.<api>(name=value, ...) with keyword arguments.
Work with skills: define a function and call it right away in the same code block. When a skill of the \
library below fits the task, call it instead of writing a new one; if it fails, fix it by redefining it \
under the same name and call it again. Otherwise write a new skill: an abstract, multi-step function \
with typed parameters and a docstring that solves this kind of task in general, taking people, names, \
dates and amounts as parameters instead of hard-coding them. Never write a duplicate of an existing \
skill. Functions that run without error are saved to the library for later tasks.
When the task is done, call apis.supervisor.complete_task(answer=...) with the answer to a question, or \
apis.supervisor.complete_task() after an action.";

/// How each retrieved skill is shown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SkillView {
    /// `- signature: first docstring line`.
    #[default]
    Summary,
    /// `- signature` followed by the whole docstring, indented.
    Docstring,
    /// The skill's full source in a python code block.
    Source,
}

/// Builds system prompts: rules, then the skill library as the task sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SystemPrompt {
    rules: String,
    view: SkillView,
}

impl Default for SystemPrompt {
    fn default() -> SystemPrompt {
        SystemPrompt::new(SkillView::default())
    }
}

impl SystemPrompt {
    /// The built-in [`AGENT_RULES`] with skills shown as `view` says.
    pub fn new(view: SkillView) -> SystemPrompt {
        SystemPrompt {
            rules: AGENT_RULES.to_owned(),
            view,
        }
    }

    /// The same builder with other rules (e.g. a world's own API instructions).
    pub fn with_rules(mut self, rules: impl Into<String>) -> SystemPrompt {
        self.rules = rules.into();
        self
    }

    /// How skills are shown.
    pub fn view(&self) -> SkillView {
        self.view
    }

    /// The system prompt for a task that was given `skills`, in retrieval order.
    pub fn render(&self, skills: &[Skill]) -> String {
        let mut prompt = self.rules.clone();
        prompt.push_str("\n\nSkill library (already defined in the interpreter):");
        if skills.is_empty() {
            prompt.push_str("\n(empty)");
        }
        for skill in skills {
            prompt.push('\n');
            prompt.push_str(&self.show(skill));
        }
        prompt
    }

    /// One skill as [`Self::view`] says.
    fn show(&self, skill: &Skill) -> String {
        let doc = skill.docstring.as_deref().map(str::trim).unwrap_or("");
        match self.view {
            SkillView::Summary => match doc.lines().next() {
                Some(first) => format!("- {}: {}", skill.signature(), first.trim()),
                None => format!("- {}", skill.signature()),
            },
            SkillView::Docstring => {
                let mut shown = format!("- {}", skill.signature());
                for line in doc.lines() {
                    shown.push_str("\n    ");
                    shown.push_str(line.trim());
                }
                shown
            }
            SkillView::Source => format!("```python\n{}\n```", skill.source.trim_end()),
        }
    }
}
