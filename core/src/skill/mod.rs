//! Skills: the [`Skill`] record, the parser that finds skills in model output, and the
//! library that keeps them.
//!
//! A skill is a top-level function definition the agent wrote and ran without error,
//! with its signature, docstring, exact source and where it came from.

use alloc::string::String;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

pub mod library;
pub mod parse;

pub use library::{HashSkillLibrary, LibraryError, SkillLibrary};
pub use parse::{
    find_code_blocks, parse_code, parse_response, parse_response_bytes, redefinitions, used_skills,
    CallSite, CodeAnalysis, CodeBlock, FunctionDef, IssueKind, ParseIssue, ResponseAnalysis,
    MAX_ISSUES,
};

/// How a parameter binds its argument, as in a Python signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ParamKind {
    /// An ordinary parameter (`x`, `x: int`, `x=3`).
    Regular,
    /// A parameter after a bare `*` or after `*args`: keyword only.
    KeywordOnly,
    /// `*args`.
    VarArgs,
    /// `**kwargs`.
    KwArgs,
}

/// One parameter of a function signature, with its annotation and default as written.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Param {
    /// The parameter's name, without `*` or `**`.
    pub name: String,
    /// How the parameter binds.
    pub kind: ParamKind,
    /// The annotation's source text (`str`, `list[int]`), trimmed, if any.
    pub annotation: Option<String>,
    /// The default value's source text (`10`, `"me"`), trimmed, if any.
    pub default: Option<String>,
}

/// Where a skill was written: the scenario and task whose episode saved it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Origin {
    /// Scenario id (the 3 similar tasks of one template and seed share it).
    pub scenario_id: String,
    /// Task id, unique across the world.
    pub task_id: String,
}

/// Usage counters a library keeps for each skill.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SkillStats {
    /// Times the skill was shown to a task by retrieval.
    pub retrieved: u64,
    /// Times a task called the skill without redefining it.
    pub used: u64,
    /// Times a task that called the skill passed all its checks.
    pub used_in_success: u64,
}

/// A reusable function kept in a skill library.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skill {
    /// The function's name; unique within a library.
    pub name: String,
    /// The signature's parameters, in order.
    pub params: Vec<Param>,
    /// The docstring's text (quotes removed, common indentation kept as written).
    pub docstring: Option<String>,
    /// The exact source of the definition as the program holds it, decorators included
    /// (code from a fenced block has the fence's indentation removed).
    pub source: String,
    /// The task that saved it.
    pub origin: Origin,
    /// Usage counters.
    pub stats: SkillStats,
    /// How many times a skill of this name was replaced in its library (0 = original).
    pub revision: u32,
}

impl Skill {
    /// Builds a skill from a parsed definition and the code it was parsed from.
    ///
    /// `code` must be the text `def` was parsed from (its spans index into it).
    pub fn from_def(def: &FunctionDef, code: &str, origin: Origin) -> Skill {
        Skill {
            name: def.name.clone(),
            params: def.params.clone(),
            docstring: def.docstring.clone(),
            source: def.source(code).into(),
            origin,
            stats: SkillStats::default(),
            revision: 0,
        }
    }

    /// The signature as Python writes it: `name(a: str, b: int = 3) -> list`
    /// (the return annotation is not kept, so it is left out).
    pub fn signature(&self) -> String {
        let mut out = String::with_capacity(self.name.len() + 16 * self.params.len());
        out.push_str(&self.name);
        out.push('(');
        let mut star_written = false;
        for (i, p) in self.params.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            match p.kind {
                ParamKind::VarArgs => {
                    out.push('*');
                    star_written = true;
                }
                ParamKind::KwArgs => out.push_str("**"),
                ParamKind::KeywordOnly if !star_written => {
                    out.push_str("*, ");
                    star_written = true;
                }
                _ => {}
            }
            out.push_str(&p.name);
            if let Some(a) = &p.annotation {
                out.push_str(": ");
                out.push_str(a);
            }
            if let Some(d) = &p.default {
                out.push_str(if p.annotation.is_some() { " = " } else { "=" });
                out.push_str(d);
            }
        }
        out.push(')');
        out
    }
}
