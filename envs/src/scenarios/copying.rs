//! Whether an agent carried the values its instruction states into its code: the
//! diagnosis of a failure that hinges on a few copied tokens (a date, a name, an amount
//! written wrong) rather than on the code's logic.

use serde_json::Value;

use super::BuiltTask;

/// Values shorter than this are not checked: a two-character number occurs in most code
/// by chance, so its presence says nothing about copying.
const MIN_CHECKED_LEN: usize = 3;

impl BuiltTask {
    /// The parameters whose value the instruction states verbatim, with that text: a
    /// string's characters or a number's decimal form, at least three characters long.
    /// Values the instruction words differently (an amount as `$12.50`, a list) are left
    /// out, as no verbatim copy of them is expected.
    pub fn stated_values(&self) -> Vec<(&str, String)> {
        self.params
            .iter()
            .filter_map(|(name, value)| {
                let text = match value {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    _ => return None,
                };
                (text.chars().count() >= MIN_CHECKED_LEN && self.task.instruction.contains(&text))
                    .then_some((name.as_str(), text))
            })
            .collect()
    }

    /// The names of the [`stated_values`](BuiltTask::stated_values) that do not occur
    /// verbatim in `agent_text` (what the agent wrote over the episode): empty when the
    /// agent copied every value it was given, or wrote code that needs none written out.
    pub fn miscopied_values(&self, agent_text: &str) -> Vec<&str> {
        self.stated_values()
            .into_iter()
            .filter(|(_, text)| !agent_text.contains(text.as_str()))
            .map(|(name, _)| name)
            .collect()
    }
}
