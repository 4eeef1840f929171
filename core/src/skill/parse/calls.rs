//! Finding call sites in a logical line's tokens: a dotted name (`apis.spotify.login`,
//! `my_skill`) directly followed by `(`.
//!
//! Only callees that are plain dotted names count: in `x[0].f()`, `"s".join()` or
//! `g().h()` the attribute call `f`, `join` or `h` has no name of its own and is left
//! out (`g` is found). Keywords (`if (`, `return (`) and the names after `def` and
//! `class` are not calls.

use super::lexer::{is_name_byte, Punct, Token, TokenKind};
use super::CallSite;
use alloc::string::String;
use alloc::vec::Vec;
use core::ops::Range;

/// Where the scan is in a possible callee.
#[derive(Clone)]
enum State {
    /// Not in a dotted name.
    Idle,
    /// In a dotted name spanning `span`, which started on `line`; `dotted` once it
    /// has a `.` (a single word may still turn out to be a keyword).
    Name {
        span: Range<usize>,
        line: u32,
        dotted: bool,
    },
    /// After a dotted name and a `.`.
    NameDot { span: Range<usize>, line: u32 },
    /// After a `.` that follows something other than a name.
    Attribute,
}

/// Appends the calls in `tokens` (one logical line of `code`) to `calls`, all marked as
/// inside the top-level definition `enclosing_def`.
///
/// Keywords are only looked up where it matters (a word before `(` or before another
/// word), which keeps the scan cheap.
pub(super) fn scan_calls(
    code: &str,
    tokens: &[Token],
    enclosing_def: Option<usize>,
    calls: &mut Vec<CallSite>,
) {
    let word = |span: &Range<usize>| code.get(span.clone()).unwrap_or("");
    let mut state = State::Idle;
    let mut field = 0;
    for token in tokens {
        if token.field != field {
            field = token.field;
            state = State::Idle;
        }
        state = match (token.kind, state) {
            (TokenKind::Name, State::NameDot { span, line }) => State::Name {
                span: span.start..token.end,
                line,
                dotted: true,
            },
            (TokenKind::Name, State::Attribute) => State::Idle,
            (
                TokenKind::Name,
                State::Name {
                    span,
                    dotted: false,
                    ..
                },
            ) if matches!(word(&span), "def" | "class") => State::Idle,
            (TokenKind::Name, _) => State::Name {
                span: token.start..token.end,
                line: token.line,
                dotted: false,
            },
            (TokenKind::Punct(Punct::Dot), State::Name { span, line, .. }) => {
                State::NameDot { span, line }
            }
            (TokenKind::Punct(Punct::Dot), _) => State::Attribute,
            (TokenKind::Open(b'('), State::Name { span, line, dotted }) => {
                if dotted || !is_keyword(word(&span)) {
                    calls.push(CallSite {
                        callee: callee_text(code, span.clone()),
                        span,
                        line,
                        enclosing_def,
                    });
                }
                State::Idle
            }
            _ => State::Idle,
        };
    }
}

/// The dotted name in `code[span]` with any blanks, line continuations and comments
/// between its parts removed.
fn callee_text(code: &str, span: Range<usize>) -> String {
    let text = code.get(span).unwrap_or("");
    if text.bytes().all(|b| is_name_byte(b) || b == b'.') {
        return String::from(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut in_comment = false;
    for c in text.chars() {
        match c {
            '\n' | '\r' => in_comment = false,
            _ if in_comment => {}
            '#' => in_comment = true,
            _ if c.is_ascii_whitespace() || c == '\\' => {}
            _ => out.push(c),
        }
    }
    out
}

/// Whether `word` is a Python keyword (soft keywords such as `match` are names).
pub(super) fn is_keyword(word: &str) -> bool {
    matches!(
        word,
        "False"
            | "None"
            | "True"
            | "and"
            | "as"
            | "assert"
            | "async"
            | "await"
            | "break"
            | "class"
            | "continue"
            | "def"
            | "del"
            | "elif"
            | "else"
            | "except"
            | "finally"
            | "for"
            | "from"
            | "global"
            | "if"
            | "import"
            | "in"
            | "is"
            | "lambda"
            | "nonlocal"
            | "not"
            | "or"
            | "pass"
            | "raise"
            | "return"
            | "try"
            | "while"
            | "with"
            | "yield"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callee_text_drops_layout_between_parts() {
        let code = "apis . spotify. # c\n  login";
        assert_eq!(callee_text(code, 0..code.len()), "apis.spotify.login");
    }

    #[test]
    fn keywords() {
        assert!(is_keyword("return"));
        assert!(!is_keyword("print"));
        assert!(!is_keyword("match"));
    }
}
