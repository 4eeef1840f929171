//! PLACEHOLDER owned by the parser helper: replaced wholesale.
use crate::skill::{Param, SkillLibrary};
use alloc::string::String;
use alloc::vec::Vec;
use core::ops::Range;

/// A code block found in a model response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeBlock {
    /// Byte range of the code inside the response.
    pub span: Range<usize>,
}
/// A top-level function definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionDef {
    /// Name.
    pub name: String,
    /// Params.
    pub params: Vec<Param>,
    /// Docstring.
    pub docstring: Option<String>,
    /// Span in code.
    pub span: Range<usize>,
}
impl FunctionDef {
    /// Source text of the definition.
    pub fn source<'a>(&self, code: &'a str) -> &'a str {
        code.get(self.span.clone()).unwrap_or("")
    }
}
/// A call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallSite {
    /// Callee.
    pub name: String,
}
/// An issue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseIssue {
    /// Line.
    pub line: u32,
}
/// Analysis of code.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CodeAnalysis {
    /// Defs.
    pub defs: Vec<FunctionDef>,
}
/// Analysis of a response.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResponseAnalysis {
    /// Blocks.
    pub blocks: Vec<CodeBlock>,
}
/// Finds code blocks.
pub fn find_code_blocks(_text: &str) -> Vec<CodeBlock> {
    Vec::new()
}
/// Parses code.
pub fn parse_code(_code: &str) -> CodeAnalysis {
    CodeAnalysis::default()
}
/// Parses a response.
pub fn parse_response(_text: &str) -> ResponseAnalysis {
    ResponseAnalysis::default()
}
/// Redefinitions.
pub fn redefinitions<'a, L: SkillLibrary + ?Sized>(
    analysis: &'a CodeAnalysis,
    library: &L,
) -> Vec<&'a FunctionDef> {
    let _ = library;
    analysis.defs.iter().collect()
}
