//! Turning source text into something the sandbox can run: the Starlark dialect agent
//! code is written in, parsing, the checks made before anything runs, and the
//! rewriting of the `*` and `%` operators into their bounded built-ins.

use std::collections::HashMap;

use starlark::codemap::{CodeMap, Span};
use starlark::syntax::ast::{AssignOp, AstStmt, Stmt};
use starlark::syntax::{AstModule, Dialect, DialectTypes};

/// Name of the built-in that `a * b` is rewritten to (see `builtins.rs`).
pub(crate) const BOUNDED_MUL: &str = "_sandbox_mul";

/// Name of the built-in that `a % b` is rewritten to (see `builtins.rs`).
pub(crate) const BOUNDED_PERCENT: &str = "_sandbox_percent";

/// The dialect agent code is written in: Starlark with top-level statements, lambdas,
/// keyword-only arguments, type annotations (parsed, not checked) and simple
/// f-strings; no `load`.
pub(crate) fn dialect() -> Dialect {
    Dialect {
        enable_def: true,
        enable_lambda: true,
        enable_load: false,
        enable_keyword_only_arguments: true,
        enable_positional_only_arguments: false,
        enable_types: DialectTypes::ParseOnly,
        enable_load_reexport: false,
        enable_top_level_stmt: true,
        enable_f_strings: true,
        ..Dialect::Standard
    }
}

/// A top-level function definition found in parsed code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TopLevelDef {
    /// The function's name.
    pub name: String,
    /// The span of the whole `def` statement, body included.
    pub span: Span,
}

/// Parsed code, checked and rewritten, ready to evaluate.
pub(crate) struct Prepared {
    /// The module, with `*` and `%` rewritten to [`BOUNDED_MUL`] and [`BOUNDED_PERCENT`].
    pub ast: AstModule,
    /// The file's code map (shared with the module; kept for tracing and source lookup).
    pub codemap: CodeMap,
    /// Its top-level function definitions, in source order.
    pub defs: Vec<TopLevelDef>,
}

/// Why code was refused before running.
#[derive(Debug)]
pub(crate) enum PrepareError {
    /// The parser's error.
    Syntax(starlark::Error),
    /// A construct the sandbox does not support, with the span it is at.
    Unsupported {
        /// The code map of the file, to locate the span.
        codemap: CodeMap,
        /// Where.
        span: Span,
        /// What to do instead.
        message: String,
    },
}

/// Parses `source` as the file `file_name` and prepares it to run.
pub(crate) fn prepare(file_name: &str, source: &str) -> Result<Prepared, PrepareError> {
    let mut ast =
        AstModule::parse(file_name, source.to_owned(), &dialect()).map_err(PrepareError::Syntax)?;
    let codemap = ast.file_span(Span::default()).file;
    if let Some((span, op)) = find_refused_assign(ast.statement()) {
        return Err(PrepareError::Unsupported {
            codemap,
            span,
            message: format!(
                "`{op}=` is not supported in this sandbox; write `x = x {op} y` instead"
            ),
        });
    }
    let defs = top_level_statements(ast.statement())
        .into_iter()
        .filter_map(|stmt| match &stmt.node {
            Stmt::Def(def) => Some(TopLevelDef {
                name: def.name.ident.clone(),
                span: stmt.span,
            }),
            _ => None,
        })
        .collect();
    let rewrites = HashMap::from([
        ("*".to_owned(), BOUNDED_MUL.to_owned()),
        ("%".to_owned(), BOUNDED_PERCENT.to_owned()),
    ]);
    ast.replace_binary_operators(&rewrites);
    Ok(Prepared { ast, codemap, defs })
}

/// The statements at the top level of a module, in order.
fn top_level_statements(stmt: &AstStmt) -> Vec<&AstStmt> {
    match &stmt.node {
        Stmt::Statements(stmts) => stmts.iter().flat_map(top_level_statements).collect(),
        _ => vec![stmt],
    }
}

/// The span and operator of the first `x *= y` or `x %= y` anywhere in the code. They
/// are refused because an augmented assignment cannot be routed through the bounded
/// built-ins that `*` and `%` are rewritten to.
fn find_refused_assign(stmt: &AstStmt) -> Option<(Span, char)> {
    let mut pending = vec![stmt];
    while let Some(stmt) = pending.pop() {
        match &stmt.node {
            Stmt::AssignModify(_, AssignOp::Multiply, _) => return Some((stmt.span, '*')),
            Stmt::AssignModify(_, AssignOp::Percent, _) => return Some((stmt.span, '%')),
            _ => stmt.visit_stmt(|child| pending.push(child)),
        }
    }
    None
}

/// Checks that skill source is exactly one top-level function definition.
pub(crate) fn single_def(prepared: &Prepared) -> Result<&TopLevelDef, String> {
    let statements = top_level_statements(prepared.ast.statement());
    match (prepared.defs.as_slice(), statements.len()) {
        ([def], 1) => Ok(def),
        _ => Err(format!(
            "a skill must be exactly one top-level function definition, found {} statement(s) and {} definition(s)",
            statements.len(),
            prepared.defs.len()
        )),
    }
}

/// The name after the first `def` at the start of a line, for naming a skill's file
/// before it is parsed.
pub(crate) fn skill_name(source: &str) -> Option<&str> {
    let rest = source.lines().find_map(|line| line.strip_prefix("def "))?;
    let name = rest.trim_start();
    let end = name
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(name.len());
    (end > 0).then(|| &name[..end])
}
