//! Walking a program's logical lines to build its [`CodeAnalysis`]: which lines are
//! top-level definitions (with their decorators, docstrings and extent) and which top-
//! level definition each call is inside.

use super::calls::scan_calls;
use super::issue::{IssueKind, IssueLog};
use super::lexer::{Lexer, LogicalLine, Punct, Token, TokenKind};
use super::signature::parse_header;
use super::{CallSite, CodeAnalysis, FunctionDef};
use alloc::string::String;
use alloc::vec::Vec;

/// Analyzes a whole program.
pub(super) fn analyze(code: &str) -> CodeAnalysis {
    let mut issues = IssueLog::default();
    let mut lexer = Lexer::new(code);
    let mut tokens = Vec::with_capacity(64);
    let mut walker = Walker::default();
    while let Some(line) = lexer.next_line(&mut tokens, &mut issues) {
        walker.line(code, line, &tokens, &mut issues);
    }
    walker.finish(&mut issues);
    CodeAnalysis {
        defs: walker.defs,
        calls: walker.calls,
        issues: issues.into_vec(),
    }
}

/// What a top-level logical line starts.
enum Statement {
    /// `@decorator`.
    Decorator,
    /// A function definition whose `def` keyword is the token at this index.
    Def(usize),
    /// A class definition.
    Class,
    /// Anything else.
    Other,
}

/// Top-level decorators waiting for the definition they decorate.
struct Decorators {
    /// Where the first one starts.
    start: usize,
    /// The first one's line.
    line: u32,
    /// Their expressions, without `@`.
    texts: Vec<String>,
    /// Index of the first call found in them.
    first_call: usize,
}

/// The state of the walk over logical lines.
#[derive(Default)]
struct Walker {
    defs: Vec<FunctionDef>,
    calls: Vec<CallSite>,
    /// The top-level definition whose body the walk is in.
    current: Option<usize>,
    /// The definition whose next line, if indented, may be its docstring.
    awaiting_docstring: Option<usize>,
    decorators: Option<Decorators>,
}

impl Walker {
    fn line(&mut self, code: &str, line: LogicalLine, tokens: &[Token], issues: &mut IssueLog) {
        let Some(first) = tokens.first() else {
            return;
        };
        let awaiting_docstring = self.awaiting_docstring.take();
        if line.depth > 0 {
            self.drop_decorators(issues);
            if let Some(def) = self.current.and_then(|i| self.defs.get_mut(i)) {
                def.span.end = line.end;
                if awaiting_docstring == self.current {
                    def.docstring = docstring(code, tokens);
                }
            }
            scan_calls(code, tokens, self.current, &mut self.calls);
            return;
        }
        self.current = None;
        match statement(code, tokens) {
            Statement::Decorator => {
                let first_call = self.calls.len();
                let decorators = self.decorators.get_or_insert(Decorators {
                    start: first.start,
                    line: first.line,
                    texts: Vec::new(),
                    first_call,
                });
                decorators.texts.push(decorator_text(code, tokens));
                scan_calls(code, tokens, Some(self.defs.len()), &mut self.calls);
            }
            Statement::Def(def_index) => self.def(code, line, tokens, def_index, issues),
            Statement::Class => {
                if let Some(decorators) = self.decorators.take() {
                    self.unassign_calls_from(decorators.first_call);
                }
                scan_calls(code, tokens, None, &mut self.calls);
            }
            Statement::Other => {
                self.drop_decorators(issues);
                scan_calls(code, tokens, None, &mut self.calls);
            }
        }
    }

    /// Records the top-level definition on this line.
    fn def(
        &mut self,
        code: &str,
        line: LogicalLine,
        tokens: &[Token],
        def_index: usize,
        issues: &mut IssueLog,
    ) {
        let decorators = self.decorators.take();
        let Some(header) = parse_header(code, tokens, def_index, issues) else {
            if let Some(decorators) = decorators {
                self.unassign_calls_from(decorators.first_call);
            }
            scan_calls(code, tokens, None, &mut self.calls);
            return;
        };
        let index = self.defs.len();
        let same_line_body = header
            .body
            .and_then(|body| tokens.get(body..))
            .filter(|rest| !rest.is_empty());
        let docstring = same_line_body.and_then(|body| docstring(code, body));
        if same_line_body.is_none() {
            self.awaiting_docstring = Some(index);
        }
        let def_token = tokens.get(def_index);
        let start = decorators
            .as_ref()
            .map(|d| d.start)
            .or_else(|| tokens.first().map(|t| t.start))
            .unwrap_or(line.end);
        self.defs.push(FunctionDef {
            name: String::from(code.get(header.name).unwrap_or("")),
            params: header.params,
            positional_only: header.positional_only,
            returns: header.returns,
            docstring,
            decorators: decorators.map(|d| d.texts).unwrap_or_default(),
            is_async: def_index > 0,
            span: start..line.end,
            line: def_token.map_or(1, |t| t.line),
        });
        self.current = Some(index);
        scan_calls(code, tokens, Some(index), &mut self.calls);
    }

    /// Reports pending decorators that decorate nothing.
    fn drop_decorators(&mut self, issues: &mut IssueLog) {
        if let Some(decorators) = self.decorators.take() {
            issues.push(decorators.line, IssueKind::OrphanDecorator);
            self.unassign_calls_from(decorators.first_call);
        }
    }

    /// Marks the calls from index `first` on as outside any definition.
    fn unassign_calls_from(&mut self, first: usize) {
        for call in self.calls.get_mut(first..).unwrap_or(&mut []) {
            call.enclosing_def = None;
        }
    }

    fn finish(&mut self, issues: &mut IssueLog) {
        self.drop_decorators(issues);
    }
}

/// Classifies a top-level logical line by its first tokens.
fn statement(code: &str, tokens: &[Token]) -> Statement {
    let word = |i: usize| {
        tokens
            .get(i)
            .filter(|t| t.kind == TokenKind::Name)
            .and_then(|t| code.get(t.start..t.end))
    };
    match tokens.first().map(|t| t.kind) {
        Some(TokenKind::Punct(Punct::At)) => Statement::Decorator,
        _ => match (word(0), word(1)) {
            (Some("def"), _) => Statement::Def(0),
            (Some("async"), Some("def")) => Statement::Def(1),
            (Some("class"), _) => Statement::Class,
            _ => Statement::Other,
        },
    }
}

/// A decorator line's expression without its `@`.
fn decorator_text(code: &str, tokens: &[Token]) -> String {
    let mut direct = tokens.iter().skip(1).filter(|t| t.is_direct());
    let start = direct.next().map(|t| t.start);
    let end = tokens.iter().rev().find(|t| t.is_direct()).map(|t| t.end);
    match (start, end) {
        (Some(start), Some(end)) => String::from(code.get(start..end).unwrap_or("")),
        _ => String::new(),
    }
}

/// The docstring, if the statement in `tokens` is a bare string literal (or several,
/// implicitly concatenated): the text between the quotes, as written.
fn docstring(code: &str, tokens: &[Token]) -> Option<String> {
    let mut text: Option<String> = None;
    for token in tokens.iter().filter(|t| t.is_direct()) {
        match token.kind {
            TokenKind::Str(info) if !info.formatted && !info.bytes => {
                let content = code.get(info.content(token.start..token.end)).unwrap_or("");
                text.get_or_insert_with(String::new).push_str(content);
            }
            TokenKind::Punct(Punct::Semicolon) => break,
            _ => return None,
        }
    }
    text
}
