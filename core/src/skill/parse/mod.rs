//! The skill parser: from any model output to the code it holds, the top-level
//! function definitions in that code (the candidate skills) and the calls it makes.
//!
//! - [`parse_response`] / [`parse_response_bytes`]: find the fenced code blocks
//!   ([`find_code_blocks`]), join the Python ones in order into one program and
//!   analyze it. Text outside fences is never code: a response without a fence has no
//!   code (see [`find_code_blocks`] for the fence rules).
//! - [`parse_code`]: analyze a text that is all code.
//! - [`redefinitions`] and [`used_skills`]: compare an analysis with a
//!   [`SkillLibrary`].
//!
//! Python and Starlark share the syntax that matters here. The parser is total: on any
//! input it returns a best-effort result with [`ParseIssue`]s for what is malformed,
//! never panics, and does work linear in the input's length.

mod calls;
mod fences;
mod issue;
mod lexer;
mod program;
mod signature;

use crate::skill::{Param, SkillLibrary};
use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;
use core::ops::Range;
use hashbrown::HashSet;

pub use fences::{find_code_blocks, CodeBlock};
pub use issue::{IssueKind, ParseIssue, MAX_ISSUES};

/// A top-level function definition (`def` or `async def` at the program's base
/// indentation), with its signature as written.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FunctionDef {
    /// The function's name.
    pub name: String,
    /// The parameters, in order, without the bare `*` and `/` markers.
    pub params: Vec<Param>,
    /// How many leading parameters are positional-only (those before a `/`).
    pub positional_only: usize,
    /// The return annotation's source text, if any.
    pub returns: Option<String>,
    /// The docstring: the text between the quotes as written (escapes and
    /// indentation untouched), if the body starts with a plain string literal.
    pub docstring: Option<String>,
    /// The decorators' expressions without `@`, top to bottom.
    pub decorators: Vec<String>,
    /// Defined with `async def`.
    pub is_async: bool,
    /// Byte range of the definition in the code, from its first decorator (or `def`)
    /// to the end of its last statement (a trailing comment on that line included, the
    /// line break and any comment-only lines after it excluded).
    pub span: Range<usize>,
    /// 1-based line of the `def` keyword.
    pub line: u32,
}

impl FunctionDef {
    /// The definition's exact source, decorators included; `code` is the text it was
    /// parsed from (empty if `code` is some other text too short for the span).
    pub fn source<'a>(&self, code: &'a str) -> &'a str {
        code.get(self.span.clone()).unwrap_or("")
    }
}

/// A call of a named function: a dotted name directly followed by `(`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CallSite {
    /// The callee as a dotted name without blanks: `apis.spotify.login`, `my_skill`.
    pub callee: String,
    /// Byte range of the callee's name in the code.
    pub span: Range<usize>,
    /// 1-based line where the callee's name starts.
    pub line: u32,
    /// Index in [`CodeAnalysis::defs`] of the top-level definition the call is inside
    /// (its decorators, signature or body), if any.
    pub enclosing_def: Option<usize>,
}

/// What a program defines and calls.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CodeAnalysis {
    /// Top-level function definitions, in order (a name may appear twice).
    pub defs: Vec<FunctionDef>,
    /// Every call of a named function, in order, including calls in function bodies,
    /// nested definitions, decorators and f-string fields.
    pub calls: Vec<CallSite>,
    /// Problems in the program (lines count in the program text).
    pub issues: Vec<ParseIssue>,
}

impl CodeAnalysis {
    /// The last top-level definition of `name` (the one in force after the program
    /// runs).
    pub fn def(&self, name: &str) -> Option<&FunctionDef> {
        self.defs.iter().rev().find(|d| d.name == name)
    }

    /// Whether the program defines `name` at top level.
    pub fn defines(&self, name: &str) -> bool {
        self.def(name).is_some()
    }

    /// The calls whose callee is exactly `callee`.
    pub fn calls_to<'a>(&'a self, callee: &'a str) -> impl Iterator<Item = &'a CallSite> + 'a {
        self.calls.iter().filter(move |c| c.callee == callee)
    }
}

/// A parsed model response: its code blocks, the program they form and its analysis.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResponseAnalysis {
    /// Every fenced block, whatever its language, in order.
    pub blocks: Vec<CodeBlock>,
    /// The program: the Python blocks joined in order, each starting on a new line,
    /// with fence indentation removed. Spans in [`analysis`](Self::analysis) index it.
    pub code: String,
    /// The program's definitions, calls and issues.
    pub analysis: CodeAnalysis,
    /// Problems with the fences (lines count in the response).
    pub issues: Vec<ParseIssue>,
}

impl ResponseAnalysis {
    /// Whether the response holds any code (a Python block that is not blank).
    pub fn has_code(&self) -> bool {
        !self.code.trim().is_empty()
    }
}

/// Parses a model response: its fenced blocks, the program formed by the Python ones,
/// and that program's definitions and calls.
pub fn parse_response(text: &str) -> ResponseAnalysis {
    let blocks = find_code_blocks(text);
    let mut code = String::new();
    fences::join_python_blocks(text, &blocks, &mut code);
    let analysis = program::analyze(&code);
    let issues = blocks
        .iter()
        .filter(|b| !b.terminated)
        .map(|b| ParseIssue {
            line: b.line,
            kind: IssueKind::UnterminatedFence,
        })
        .collect();
    ResponseAnalysis {
        blocks,
        code,
        analysis,
        issues,
    }
}

/// [`parse_response`] on bytes that may not be UTF-8: they are decoded lossily (each
/// invalid sequence becomes U+FFFD), and the decoded text, which the blocks' spans
/// index, is returned with the analysis (borrowed when the bytes were valid).
pub fn parse_response_bytes(bytes: &[u8]) -> (Cow<'_, str>, ResponseAnalysis) {
    let text = String::from_utf8_lossy(bytes);
    let analysis = parse_response(&text);
    (text, analysis)
}

/// Analyzes `code`, all of which is taken as one program (no fences are looked for).
///
/// If the first line is indented, its indentation counts as the top level (with an
/// [`IssueKind::UnexpectedIndent`]), so an indented snippet still has top-level
/// definitions.
pub fn parse_code(code: &str) -> CodeAnalysis {
    program::analyze(code)
}

/// The top-level definitions in `analysis` whose name `library` already holds: skills
/// the code redefines (SAGE's "update" operation, or a duplicate).
pub fn redefinitions<'a, L: SkillLibrary + ?Sized>(
    analysis: &'a CodeAnalysis,
    library: &L,
) -> Vec<&'a FunctionDef> {
    analysis
        .defs
        .iter()
        .filter(|d| library.contains(&d.name))
        .collect()
}

/// The library skills the code uses: callee names that `library` holds and that the
/// code does not define itself, each once, in order of first call.
///
/// A skill redefined in an earlier turn of the same task is not known here; callers
/// tracking a whole task remove those names themselves.
pub fn used_skills<'a, L: SkillLibrary + ?Sized>(
    analysis: &'a CodeAnalysis,
    library: &L,
) -> Vec<&'a str> {
    let defined: HashSet<&str> = analysis.defs.iter().map(|d| d.name.as_str()).collect();
    let mut seen: HashSet<&str> = HashSet::new();
    analysis
        .calls
        .iter()
        .map(|c| c.callee.as_str())
        .filter(|name| !defined.contains(name) && library.contains(name) && seen.insert(name))
        .collect()
}
