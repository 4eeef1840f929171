//! Parsing a function header, `def name(params) -> returns:`, from a logical line's
//! tokens: the name, each parameter's kind, annotation and default as source text,
//! the `/` marker, the return annotation, and where the body starts.

use super::calls::is_keyword;
use super::issue::{IssueKind, IssueLog};
use super::lexer::{Punct, Token, TokenKind};
use crate::skill::{Param, ParamKind};
use alloc::string::String;
use alloc::vec::Vec;
use core::ops::Range;

/// A parsed function header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Header {
    /// Byte span of the function's name.
    pub(super) name: Range<usize>,
    /// The parameters, in order.
    pub(super) params: Vec<Param>,
    /// How many leading parameters are positional-only (before a `/`).
    pub(super) positional_only: usize,
    /// The return annotation's source text.
    pub(super) returns: Option<String>,
    /// Index in the line's tokens just past the header's `:`, if it has one.
    pub(super) body: Option<usize>,
}

/// Where an annotation or default expression ends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ExprEnd {
    /// A parameter's annotation: at `,`, `=` or the closing bracket.
    Annotation,
    /// A parameter's default: at `,` or the closing bracket.
    Default,
    /// The return annotation: at `:`.
    Returns,
}

/// Steps through a line's own tokens (f-string field tokens are skipped).
struct Cursor<'t> {
    tokens: &'t [Token],
    index: usize,
}

impl<'t> Cursor<'t> {
    fn peek(&mut self) -> Option<&'t Token> {
        while let Some(token) = self.tokens.get(self.index) {
            if token.is_direct() {
                return Some(token);
            }
            self.index += 1;
        }
        None
    }

    fn bump(&mut self) -> Option<&'t Token> {
        let token = self.peek()?;
        self.index += 1;
        Some(token)
    }

    fn peek_kind(&mut self) -> Option<TokenKind> {
        self.peek().map(|t| t.kind)
    }
}

/// Parses the header whose `def` keyword is `tokens[def_index]`; `None` (with an
/// issue) when `def` has no name.
pub(super) fn parse_header(
    code: &str,
    tokens: &[Token],
    def_index: usize,
    issues: &mut IssueLog,
) -> Option<Header> {
    let line = tokens.get(def_index).map_or(1, |t| t.line);
    let mut cursor = Cursor {
        tokens,
        index: def_index.saturating_add(1),
    };
    let name = match cursor.peek() {
        Some(t) if t.kind == TokenKind::Name && !is_keyword(text(code, t)) => t.start..t.end,
        _ => {
            issues.push(line, IssueKind::DefMissingName);
            return None;
        }
    };
    cursor.bump();
    let mut header = Header {
        name,
        params: Vec::new(),
        positional_only: 0,
        returns: None,
        body: None,
    };
    let list_closed = if cursor.peek_kind() == Some(TokenKind::Open(b'(')) {
        cursor.bump();
        parse_params(code, &mut cursor, &mut header, issues)
    } else {
        issues.push(line, IssueKind::DefMissingParameters);
        false
    };
    if cursor.peek_kind() == Some(TokenKind::Punct(Punct::Arrow)) {
        cursor.bump();
        header.returns = expression(code, &mut cursor, ExprEnd::Returns);
    }
    if cursor.peek_kind() == Some(TokenKind::Punct(Punct::Colon)) {
        cursor.bump();
        header.body = Some(cursor.index);
    } else if list_closed {
        issues.push(line, IssueKind::DefMissingColon);
    }
    Some(header)
}

/// Parses parameters after the `(`; returns whether the closing bracket was found.
fn parse_params(
    code: &str,
    cursor: &mut Cursor<'_>,
    header: &mut Header,
    issues: &mut IssueLog,
) -> bool {
    let mut keyword_only = false;
    while let Some(token) = cursor.peek() {
        let kind = match token.kind {
            TokenKind::Close(_) => {
                cursor.bump();
                return true;
            }
            TokenKind::Punct(Punct::Comma) => {
                cursor.bump();
                continue;
            }
            TokenKind::Punct(Punct::Slash) => {
                cursor.bump();
                header.positional_only = header.params.len();
                continue;
            }
            TokenKind::Punct(Punct::Star) => {
                cursor.bump();
                keyword_only = true;
                if cursor.peek_kind() != Some(TokenKind::Name) {
                    continue;
                }
                ParamKind::VarArgs
            }
            TokenKind::Punct(Punct::DoubleStar) => {
                cursor.bump();
                ParamKind::KwArgs
            }
            TokenKind::Name if keyword_only => ParamKind::KeywordOnly,
            TokenKind::Name => ParamKind::Regular,
            _ => {
                issues.push(token.line, IssueKind::BadParameter);
                skip_to_separator(cursor);
                continue;
            }
        };
        match cursor.peek() {
            Some(name) if name.kind == TokenKind::Name => {
                cursor.bump();
                let param = parse_param(code, cursor, text(code, name), kind);
                header.params.push(param);
            }
            other => issues.push(
                other.map_or(token.line, |t| t.line),
                IssueKind::BadParameter,
            ),
        }
        match cursor.peek() {
            Some(t) if matches!(t.kind, TokenKind::Punct(Punct::Comma) | TokenKind::Close(_)) => {}
            Some(t) => {
                issues.push(t.line, IssueKind::BadParameter);
                skip_to_separator(cursor);
            }
            None => {}
        }
    }
    false
}

/// Parses the annotation and default that follow a parameter's name.
fn parse_param(code: &str, cursor: &mut Cursor<'_>, name: &str, kind: ParamKind) -> Param {
    let mut annotation = None;
    let mut default = None;
    if cursor.peek_kind() == Some(TokenKind::Punct(Punct::Colon)) {
        cursor.bump();
        annotation = expression(code, cursor, ExprEnd::Annotation);
    }
    if cursor.peek_kind() == Some(TokenKind::Punct(Punct::Equals)) {
        cursor.bump();
        default = expression(code, cursor, ExprEnd::Default);
    }
    Param {
        name: String::from(name),
        kind,
        annotation,
        default,
    }
}

/// Skips to the next `,` or closing bracket at this bracket depth (not consumed).
fn skip_to_separator(cursor: &mut Cursor<'_>) {
    let mut depth = 0usize;
    while let Some(token) = cursor.peek() {
        match token.kind {
            TokenKind::Open(_) => depth += 1,
            TokenKind::Close(_) if depth == 0 => return,
            TokenKind::Close(_) => depth -= 1,
            TokenKind::Punct(Punct::Comma) if depth == 0 => return,
            _ => {}
        }
        cursor.bump();
    }
}

/// Consumes an expression up to where `end` says it stops and returns its source
/// text, or `None` if it is empty.
fn expression(code: &str, cursor: &mut Cursor<'_>, end: ExprEnd) -> Option<String> {
    let mut depth = 0usize;
    let mut in_lambda = false;
    let mut span: Option<Range<usize>> = None;
    while let Some(token) = cursor.peek() {
        if depth == 0 {
            let stop = match token.kind {
                TokenKind::Close(_) => true,
                TokenKind::Punct(Punct::Comma) => end != ExprEnd::Returns && !in_lambda,
                TokenKind::Punct(Punct::Equals) => end == ExprEnd::Annotation && !in_lambda,
                TokenKind::Punct(Punct::Colon) if in_lambda => {
                    in_lambda = false;
                    false
                }
                TokenKind::Punct(Punct::Colon) => end == ExprEnd::Returns,
                TokenKind::Name => {
                    in_lambda |= text(code, token) == "lambda";
                    false
                }
                _ => false,
            };
            if stop {
                break;
            }
        }
        match token.kind {
            TokenKind::Open(_) => depth += 1,
            TokenKind::Close(_) => depth = depth.saturating_sub(1),
            _ => {}
        }
        span = Some(span.map_or(token.start, |s| s.start)..token.end);
        cursor.bump();
    }
    span.and_then(|s| code.get(s)).map(String::from)
}

/// The source text of `token`.
fn text<'c>(code: &'c str, token: &Token) -> &'c str {
    code.get(token.start..token.end).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::super::lexer::Lexer;
    use super::*;
    use alloc::vec;

    fn header(code: &str) -> (Option<Header>, Vec<IssueKind>) {
        let mut lexer = Lexer::new(code);
        let mut issues = IssueLog::default();
        let mut tokens = Vec::new();
        lexer.next_line(&mut tokens, &mut issues);
        let header = parse_header(code, &tokens, 0, &mut issues);
        let kinds = issues.into_vec().into_iter().map(|i| i.kind).collect();
        (header, kinds)
    }

    fn param(
        name: &str,
        kind: ParamKind,
        annotation: Option<&str>,
        default: Option<&str>,
    ) -> Param {
        Param {
            name: name.into(),
            kind,
            annotation: annotation.map(Into::into),
            default: default.map(Into::into),
        }
    }

    #[test]
    fn all_parameter_forms() {
        let code = "def f(a, b: int, /, c=lambda x, y: x, *args: str, d: dict[str, int] = {'k': (1, 2)}, **kw) -> list[int]: pass";
        let (header, issues) = header(code);
        let header = header.unwrap();
        assert!(issues.is_empty());
        assert_eq!(&code[header.name.clone()], "f");
        assert_eq!(header.positional_only, 2);
        assert_eq!(header.returns.as_deref(), Some("list[int]"));
        assert_eq!(
            header.params,
            vec![
                param("a", ParamKind::Regular, None, None),
                param("b", ParamKind::Regular, Some("int"), None),
                param("c", ParamKind::Regular, None, Some("lambda x, y: x")),
                param("args", ParamKind::VarArgs, Some("str"), None),
                param(
                    "d",
                    ParamKind::KeywordOnly,
                    Some("dict[str, int]"),
                    Some("{'k': (1, 2)}")
                ),
                param("kw", ParamKind::KwArgs, None, None),
            ]
        );
    }

    #[test]
    fn bad_headers_are_reported() {
        assert_eq!(header("def (x): pass").1, vec![IssueKind::DefMissingName]);
        assert_eq!(header("def f(x)\n").1, vec![IssueKind::DefMissingColon]);
        assert_eq!(header("def f:\n").1, vec![IssueKind::DefMissingParameters]);
        let (h, issues) = header("def f(1, x y, z):\n");
        assert_eq!(
            issues,
            vec![IssueKind::BadParameter, IssueKind::BadParameter]
        );
        let names: Vec<String> = h.unwrap().params.into_iter().map(|p| p.name).collect();
        assert_eq!(names, vec!["x", "z"]);
    }
}
