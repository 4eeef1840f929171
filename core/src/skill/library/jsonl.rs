//! The JSON lines exchange format of a skill library: one `{"task_id", "name",
//! "function"}` object per line.

use alloc::string::String;
use serde::Serialize;
use serde_json::{Map, Value};

use super::{HashSkillLibrary, JsonlProblem, LibraryError, SkillLibrary};
use crate::skill::{parse_code, Origin, Skill, SkillStats};

/// One exported line, fields in the order they are written.
#[derive(Serialize)]
struct Line<'a> {
    task_id: &'a str,
    name: &'a str,
    function: &'a str,
}

/// Writes `skills` as JSON lines, each terminated by `\n`.
pub(super) fn write(skills: &[Skill]) -> String {
    let mut out = String::new();
    for skill in skills {
        let line = Line {
            task_id: &skill.origin.task_id,
            name: &skill.name,
            function: &skill.source,
        };
        // Serializing three strings to JSON cannot fail.
        out.push_str(&serde_json::to_string(&line).unwrap_or_default());
        out.push('\n');
    }
    out
}

/// Reads JSON lines into a library; see [`HashSkillLibrary::from_jsonl`].
pub(super) fn read(
    text: &str,
    mut scenario_of: impl FnMut(&str) -> String,
) -> Result<HashSkillLibrary, LibraryError> {
    let mut library = HashSkillLibrary::new();
    for (index, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let bad = |problem| LibraryError::BadJsonlLine {
            line: index + 1,
            problem,
        };
        let skill = parse_line(raw, &mut scenario_of).map_err(bad)?;
        if library.contains(&skill.name) {
            return Err(bad(JsonlProblem::DuplicateName { name: skill.name }));
        }
        library.insert(skill)?;
    }
    Ok(library)
}

/// One line as a skill.
fn parse_line(
    raw: &str,
    scenario_of: &mut impl FnMut(&str) -> String,
) -> Result<Skill, JsonlProblem> {
    let value: Value = serde_json::from_str(raw).map_err(|err| JsonlProblem::InvalidJson {
        message: alloc::format!("{err}"),
    })?;
    let object = value.as_object().ok_or(JsonlProblem::NotAnObject)?;
    let task_id = string_field(object, "task_id")?;
    let name = string_field(object, "name")?;
    let function = string_field(object, "function")?;
    if name.is_empty() {
        return Err(JsonlProblem::EmptyName);
    }
    let analysis = parse_code(function);
    let def = analysis
        .def(name)
        .ok_or_else(|| JsonlProblem::NotDefined { name: name.into() })?;
    Ok(Skill {
        name: name.into(),
        params: def.params.clone(),
        docstring: def.docstring.clone(),
        source: function.into(),
        origin: Origin {
            scenario_id: scenario_of(task_id),
            task_id: task_id.into(),
        },
        stats: SkillStats::default(),
        revision: 0,
    })
}

/// The string value of a required field.
fn string_field<'a>(
    object: &'a Map<String, Value>,
    field: &'static str,
) -> Result<&'a str, JsonlProblem> {
    object
        .get(field)
        .ok_or(JsonlProblem::MissingField { field })?
        .as_str()
        .ok_or(JsonlProblem::NotAString { field })
}
