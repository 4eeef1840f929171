//! Problems the parser found in malformed input: [`ParseIssue`] (a line and an
//! [`IssueKind`]) and the capped log the other parser modules write them to.

use alloc::vec::Vec;
use core::fmt;

/// At most this many issues are kept for one input; a final
/// [`IssueKind::TooManyIssues`] marks that more were dropped.
pub const MAX_ISSUES: usize = 64;

/// What is wrong in a malformed response or program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IssueKind {
    /// A code fence was opened and never closed; the block runs to the end of the text.
    UnterminatedFence,
    /// A string literal was not closed before the end of its line (or of the text).
    UnterminatedString,
    /// An opening bracket was never closed.
    UnclosedBracket(char),
    /// A closing bracket with no opening bracket before it.
    UnmatchedBracket(char),
    /// A closing bracket that does not match the innermost opening one.
    MismatchedBracket {
        /// The innermost open bracket.
        open: char,
        /// The closing bracket found instead of its partner.
        close: char,
    },
    /// A backslash outside a string that is not at the end of its line.
    StrayBackslash,
    /// A line indented deeper than its block with no `:` header before it.
    UnexpectedIndent,
    /// A dedent to a column that matches no enclosing block.
    InconsistentDedent,
    /// A block header (a line ending in `:`) with no indented body after it.
    ExpectedIndentedBlock,
    /// Tabs and spaces mixed so that the block structure depends on the tab width.
    InconsistentTabs,
    /// `def` not followed by a function name.
    DefMissingName,
    /// `def name` not followed by a `(` parameter list.
    DefMissingParameters,
    /// A function header with no `:` after its parameter list.
    DefMissingColon,
    /// Something in a parameter list that is not a parameter.
    BadParameter,
    /// A decorator not followed by a `def` or `class`.
    OrphanDecorator,
    /// More than [`MAX_ISSUES`] issues were found; the rest were dropped.
    TooManyIssues,
}

impl fmt::Display for IssueKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IssueKind::UnterminatedFence => f.write_str("code fence is never closed"),
            IssueKind::UnterminatedString => f.write_str("string literal is never closed"),
            IssueKind::UnclosedBracket(c) => write!(f, "'{c}' is never closed"),
            IssueKind::UnmatchedBracket(c) => write!(f, "unmatched '{c}'"),
            IssueKind::MismatchedBracket { open, close } => {
                write!(f, "closing '{close}' does not match opening '{open}'")
            }
            IssueKind::StrayBackslash => {
                f.write_str("unexpected character after line continuation character")
            }
            IssueKind::UnexpectedIndent => f.write_str("unexpected indent"),
            IssueKind::InconsistentDedent => {
                f.write_str("unindent does not match any outer indentation level")
            }
            IssueKind::ExpectedIndentedBlock => f.write_str("expected an indented block"),
            IssueKind::InconsistentTabs => {
                f.write_str("inconsistent use of tabs and spaces in indentation")
            }
            IssueKind::DefMissingName => f.write_str("'def' is not followed by a function name"),
            IssueKind::DefMissingParameters => {
                f.write_str("function name is not followed by a '(' parameter list")
            }
            IssueKind::DefMissingColon => f.write_str("function header does not end with ':'"),
            IssueKind::BadParameter => f.write_str("invalid parameter in function header"),
            IssueKind::OrphanDecorator => {
                f.write_str("decorator is not followed by a function or class definition")
            }
            IssueKind::TooManyIssues => f.write_str("too many issues; the rest are not reported"),
        }
    }
}

/// One problem found in malformed input, with the 1-based line it is on.
///
/// Issues from code analysis count lines in the program text; issues about fences
/// count lines in the response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ParseIssue {
    /// 1-based line of the problem.
    pub line: u32,
    /// What the problem is.
    pub kind: IssueKind,
}

impl fmt::Display for ParseIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.kind)
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ParseIssue {}

/// Issues collected while parsing one input, capped at [`MAX_ISSUES`].
#[derive(Debug, Default)]
pub(super) struct IssueLog {
    issues: Vec<ParseIssue>,
}

impl IssueLog {
    /// Records an issue, or the final [`IssueKind::TooManyIssues`] once the cap is hit.
    pub(super) fn push(&mut self, line: u32, kind: IssueKind) {
        match self.issues.len() {
            n if n < MAX_ISSUES => self.issues.push(ParseIssue { line, kind }),
            MAX_ISSUES => self.issues.push(ParseIssue {
                line,
                kind: IssueKind::TooManyIssues,
            }),
            _ => {}
        }
    }

    /// The recorded issues, in the order they were found.
    pub(super) fn into_vec(self) -> Vec<ParseIssue> {
        self.issues
    }
}
