//! Turning source text into something the sandbox can run: the Starlark dialect agent
//! code is written in, parsing, the checks made before anything runs, and the
//! rewriting into bounded or charged built-ins of the `+`, `*`, `%`, `<<`, comparison
//! and dict/set operators, of the methods in `BOUNDED_METHODS`, of calls of `int` and
//! of the collection constructors, of f-strings, subscripts, slices, dict literals and
//! dict comprehensions.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use starlark::codemap::{CodeMap, Span};
use starlark::syntax::ast::{
    AssignOp, AssignTarget, AstAssignTarget, AstExpr, AstStmt, Clause, Expr, Parameter, Stmt,
};
use starlark::syntax::{AstModule, Dialect, DialectTypes};

use super::builtins::globals;
use super::error::clip_name;
use super::rewrites::{
    BOUNDED_ADD, BOUNDED_COMPARISONS, BOUNDED_INT, BOUNDED_METHOD, BOUNDED_METHODS, BOUNDED_MUL,
    BOUNDED_PERCENT, BOUNDED_SHIFT, CHARGED_BUILTIN, CHARGED_BUILTINS, CHECKED_ENTRIES,
    CHECKED_FSTRING, CHECKED_KEY, CHECKED_SLICE, COLLECTION_OPERATORS,
};
use super::trace::TopLevelDef;

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

/// Parsed code, checked and rewritten, ready to evaluate.
pub(crate) struct Prepared {
    /// The module, with `*` and `%` rewritten to [`BOUNDED_MUL`] and [`BOUNDED_PERCENT`],
    /// and string-building method calls and f-strings to [`BOUNDED_METHOD`] and
    /// [`CHECKED_FSTRING`] (its code map holds the rewritten text, with every line where
    /// it was).
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
    let ast =
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
    if let Some((span, name)) = find_method_value(ast.statement()) {
        return Err(PrepareError::Unsupported {
            codemap,
            span,
            message: format!(
                "`.{name}` can only be called here, e.g. `text.{name}(...)`; it cannot be kept as a value"
            ),
        });
    }
    if let Some((span, name)) = find_builtin_value(ast.statement()) {
        return Err(PrepareError::Unsupported {
            codemap,
            span,
            message: format!(
                "`{name}` can only be called here, e.g. `{name}(...)`; it cannot be kept as a value"
            ),
        });
    }
    if let Some((span, message)) = find_refused_binding(ast.statement()) {
        return Err(PrepareError::Unsupported {
            codemap,
            span,
            message,
        });
    }
    let original = top_level_defs(&ast, &codemap);
    // Rewriting never adds, removes or moves top-level statements, so the definitions
    // of the rewritten module pair up with the original ones. Code whose rewriting
    // fails is refused: run as written, it would escape every bound the rewriting adds.
    let (mut ast, codemap, defs) = match bound_text_builders(&ast, source) {
        None => (ast, codemap, original),
        Some(text) => {
            let paired = AstModule::parse(file_name, text, &dialect())
                .ok()
                .and_then(|rewritten| {
                    let rewritten_map = rewritten.file_span(Span::default()).file;
                    let defs = top_level_defs(&rewritten, &rewritten_map);
                    (defs.len() == original.len()).then(|| {
                        let defs = defs
                            .into_iter()
                            .zip(original)
                            .map(|(def, orig)| TopLevelDef {
                                source: orig.source,
                                ..def
                            })
                            .collect();
                        (rewritten, rewritten_map, defs)
                    })
                });
            match paired {
                Some(prepared) => prepared,
                None => {
                    return Err(PrepareError::Unsupported {
                        codemap,
                        span: Span::default(),
                        message: "the sandbox could not prepare this code for its limits; \
                                  write it more plainly (one expression per line, no unusual \
                                  parentheses)"
                            .to_owned(),
                    })
                }
            }
        }
    };
    let mut rewrites = HashMap::from([
        ("*".to_owned(), BOUNDED_MUL.to_owned()),
        ("%".to_owned(), BOUNDED_PERCENT.to_owned()),
        ("<<".to_owned(), BOUNDED_SHIFT.to_owned()),
        ("+".to_owned(), BOUNDED_ADD.to_owned()),
    ]);
    rewrites.extend(
        BOUNDED_COMPARISONS
            .iter()
            .chain(&COLLECTION_OPERATORS)
            .map(|&(op, builtin)| (op.to_owned(), builtin.to_owned())),
    );
    ast.replace_binary_operators(&rewrites);
    Ok(Prepared { ast, codemap, defs })
}

/// The top-level function definitions of `ast`, in source order.
fn top_level_defs(ast: &AstModule, codemap: &CodeMap) -> Vec<TopLevelDef> {
    top_level_statements(ast.statement())
        .into_iter()
        .filter_map(|stmt| match &stmt.node {
            Stmt::Def(def) => Some(TopLevelDef {
                name: def.name.ident.clone(),
                span: stmt.span,
                source: codemap.source_span(stmt.span).to_owned(),
            }),
            _ => None,
        })
        .collect()
}

/// The byte range of a span.
fn range(span: Span) -> (usize, usize) {
    (span.begin().get() as usize, span.end().get() as usize)
}

/// One change to the source text: `text` replaces the bytes `begin..end` (inserted
/// there when they are equal). `order` is the pre-order position of the node that made
/// it, outer nodes first.
struct Edit {
    begin: usize,
    end: usize,
    text: String,
    order: usize,
}

/// Where the parser put things in the source: comments and literals, whose text is not
/// code and may hold any character.
struct Layout<'a> {
    source: &'a [u8],
    /// Comment spans, sorted.
    comments: Vec<(usize, usize)>,
    /// End of each comment or literal, by its start.
    opaque: HashMap<usize, usize>,
}

impl Layout<'_> {
    /// The start of the comment holding byte `pos`, if one does.
    fn comment_start(&self, pos: usize) -> Option<usize> {
        let after = self.comments.partition_point(|&(begin, _)| begin <= pos);
        let &(begin, end) = self.comments.get(after.checked_sub(1)?)?;
        (pos < end).then_some(begin)
    }

    /// The last `.` of code in `from..to`.
    fn last_dot(&self, from: usize, to: usize) -> Option<usize> {
        let mut dot = None;
        let mut i = from;
        while i < to {
            if let Some(&end) = self.opaque.get(&i) {
                i = end.max(i + 1);
                continue;
            }
            if self.source[i] == b'.' {
                dot = Some(i);
            }
            i += 1;
        }
        dot
    }

    /// The `[` that opens a subscript whose object's span ends at `from`: the first
    /// character of code after it that is not a space, a line continuation or a `)`
    /// closing parentheses around the object.
    fn bracket_after(&self, from: usize) -> Option<usize> {
        let mut i = from;
        while i < self.source.len() {
            if let Some(&end) = self.opaque.get(&i) {
                i = end.max(i + 1);
                continue;
            }
            match self.source[i] {
                b'[' => return Some(i),
                b')' | b'\\' => i += 1,
                c if c.is_ascii_whitespace() => i += 1,
                _ => return None,
            }
        }
        None
    }

    /// Where the receiver of a method really starts. The parser's span of an expression
    /// leaves out parentheses around it (or around its first part), so the `)` found
    /// between `begin` and the method's `.` without an `(` there are matched by going
    /// back from `begin`.
    fn receiver_start(&self, begin: usize, dot: usize) -> Option<usize> {
        let (mut depth, mut lowest) = (0i64, 0i64);
        let mut i = begin;
        while i < dot {
            if let Some(&end) = self.opaque.get(&i) {
                i = end.max(i + 1);
                continue;
            }
            match self.source[i] {
                b'(' => depth += 1,
                b')' => {
                    depth -= 1;
                    lowest = lowest.min(depth);
                }
                _ => {}
            }
            i += 1;
        }
        let mut start = begin;
        for _ in 0..-lowest {
            loop {
                let before = start.checked_sub(1)?;
                if let Some(comment) = self.comment_start(before) {
                    start = comment;
                } else if self.source[before].is_ascii_whitespace() || self.source[before] == b'\\'
                {
                    start = before;
                } else {
                    break;
                }
            }
            let before = start.checked_sub(1)?;
            if self.source[before] != b'(' {
                return None;
            }
            start = before;
        }
        Some(start)
    }
}

/// Every expression of the module, each before its children.
fn all_expressions(stmt: &AstStmt) -> Vec<&AstExpr> {
    let mut found = Vec::new();
    let mut pending = Vec::new();
    stmt.visit_expr(|expr| pending.push(expr));
    pending.reverse();
    while let Some(expr) = pending.pop() {
        found.push(expr);
        let mut children = Vec::new();
        expr.visit_expr(|child| children.push(child));
        pending.extend(children.into_iter().rev());
    }
    found
}

/// The first use of one of [`BOUNDED_METHODS`] as a value (`f = s.replace`) rather than
/// called on the spot: only direct calls can be routed through [`BOUNDED_METHOD`].
fn find_method_value(stmt: &AstStmt) -> Option<(Span, &'static str)> {
    let expressions = all_expressions(stmt);
    let called: HashSet<(usize, usize)> = expressions
        .iter()
        .filter_map(|expr| match &expr.node {
            Expr::Call(callee, _) => Some(range(callee.span)),
            _ => None,
        })
        .collect();
    expressions.iter().find_map(|expr| match &expr.node {
        Expr::Dot(_, name) if !called.contains(&range(expr.span)) => BOUNDED_METHODS
            .iter()
            .find(|&&method| method == name.node.as_str())
            .map(|&method| (expr.span, method)),
        _ => None,
    })
}

/// The edits that wrap the text at `begin..end` in a call of `builtin`.
fn wrap(edits: &mut Vec<Edit>, (begin, end): (usize, usize), builtin: &str, order: usize) {
    edits.push(Edit {
        begin,
        end: begin,
        text: format!("{builtin}("),
        order,
    });
    edits.push(Edit {
        begin: end,
        end,
        text: ")".to_owned(),
        order,
    });
}

/// Every statement of the module, each before the statements it holds.
fn all_statements(stmt: &AstStmt) -> Vec<&AstStmt> {
    let mut found = Vec::new();
    let mut pending = vec![stmt];
    while let Some(stmt) = pending.pop() {
        found.push(stmt);
        let mut children = Vec::new();
        stmt.visit_stmt(|child| children.push(child));
        pending.extend(children.into_iter().rev());
    }
    found
}

/// The byte ranges of the module's type annotations (of parameters, return values and
/// annotated assignments): a name there is a type, not a value, and an index there
/// (`list[str]`) is not a lookup.
fn annotation_ranges(stmt: &AstStmt) -> Vec<(usize, usize)> {
    let mut ranges = Vec::new();
    for stmt in all_statements(stmt) {
        match &stmt.node {
            Stmt::Def(def) => {
                for param in &def.params {
                    if let Parameter::Normal(_, Some(ty), _)
                    | Parameter::Args(_, Some(ty))
                    | Parameter::KwArgs(_, Some(ty)) = &param.node
                    {
                        ranges.push(range(ty.span));
                    }
                }
                ranges.extend(def.return_type.iter().map(|ty| range(ty.span)));
            }
            Stmt::Assign(assign) => ranges.extend(assign.ty.iter().map(|ty| range(ty.span))),
            _ => {}
        }
    }
    ranges
}

/// Whether the byte range `inner` lies inside one of `ranges`.
fn within(ranges: &[(usize, usize)], inner: (usize, usize)) -> bool {
    ranges
        .iter()
        .any(|&(begin, end)| begin <= inner.0 && inner.1 <= end)
}

/// The first use of one of [`CHARGED_BUILTINS`] as a value (`f = set`) rather than
/// called on the spot or named in an annotation: only direct calls can be charged.
fn find_builtin_value(stmt: &AstStmt) -> Option<(Span, &'static str)> {
    let expressions = all_expressions(stmt);
    let called: HashSet<(usize, usize)> = expressions
        .iter()
        .filter_map(|expr| match &expr.node {
            Expr::Call(callee, _) => Some(range(callee.span)),
            _ => None,
        })
        .collect();
    let annotations = annotation_ranges(stmt);
    expressions.iter().find_map(|expr| match &expr.node {
        Expr::Identifier(ident)
            if !called.contains(&range(expr.span)) && !within(&annotations, range(expr.span)) =>
        {
            CHARGED_BUILTINS
                .iter()
                .find(|&&name| name == ident.node.ident)
                .map(|&name| (expr.span, name))
        }
        _ => None,
    })
}

/// The indices of the subscripts assigned to (`d[k] = v`, `d[k] += 1`, `for d[k] in
/// xs`, in statements and in comprehensions).
fn assigned_indices<'a>(stmt: &'a AstStmt, expressions: &[&'a AstExpr]) -> Vec<&'a AstExpr> {
    let mut targets: Vec<&AstAssignTarget> = Vec::new();
    for stmt in all_statements(stmt) {
        match &stmt.node {
            Stmt::Assign(assign) => targets.push(&assign.lhs),
            Stmt::AssignModify(lhs, _, _) => targets.push(lhs),
            Stmt::For(for_loop) => targets.push(&for_loop.var),
            _ => {}
        }
    }
    for expr in expressions {
        if let Expr::ListComprehension(_, first, clauses)
        | Expr::DictComprehension(_, first, clauses) = &expr.node
        {
            targets.push(&first.var);
            targets.extend(clauses.iter().filter_map(|clause| match clause {
                Clause::For(for_clause) => Some(&for_clause.var),
                Clause::If(_) => None,
            }));
        }
    }
    let mut indices = Vec::new();
    while let Some(target) = targets.pop() {
        match &target.node {
            AssignTarget::Index(object_index) => indices.push(&object_index.1),
            AssignTarget::Tuple(items) => targets.extend(items),
            AssignTarget::Dot(..) | AssignTarget::Identifier(_) => {}
        }
    }
    indices
}

/// `source` rewritten so that calls of [`BOUNDED_METHODS`] go through
/// [`BOUNDED_METHOD`] and f-strings through [`CHECKED_FSTRING`], with every line where
/// it was; `None` when nothing needs rewriting. A call whose receiver cannot be located
/// in the text is left as it is.
fn bound_text_builders(ast: &AstModule, source: &str) -> Option<String> {
    let expressions = all_expressions(ast.statement());
    let mut comments: Vec<(usize, usize)> = ast.comments().iter().map(|&s| range(s)).collect();
    comments.sort_unstable();
    let mut opaque: HashMap<usize, usize> = comments.iter().copied().collect();
    for expr in &expressions {
        if matches!(expr.node, Expr::Literal(_) | Expr::FString(_)) {
            let (begin, end) = range(expr.span);
            opaque.insert(begin, end);
        }
    }
    let layout = Layout {
        source: source.as_bytes(),
        comments,
        opaque,
    };
    let annotations = annotation_ranges(ast.statement());
    // An expression's own edits have order 2i + 1 (i: its pre-order position); wrapping
    // it in a call has order 2i, so the wrapper lands outside its own edits and inside
    // its parent's.
    let position: HashMap<*const AstExpr, usize> = expressions
        .iter()
        .enumerate()
        .map(|(i, expr)| (*expr as *const AstExpr, i))
        .collect();
    let mut edits = Vec::new();
    let wrap_key = |edits: &mut Vec<Edit>, key: &AstExpr| {
        if matches!(key.node, Expr::Literal(_)) || within(&annotations, range(key.span)) {
            return;
        }
        let order = 2 * position.get(&(key as *const AstExpr)).copied().unwrap_or(0);
        wrap(edits, range(key.span), CHECKED_KEY, order);
    };
    // `{...}` -> `_sandbox_entries({...})`, outside the dict's own edits (order - 1).
    let wrap_entries = |edits: &mut Vec<Edit>, dict: &AstExpr, order: usize| {
        if !within(&annotations, range(dict.span)) {
            wrap(edits, range(dict.span), CHECKED_ENTRIES, order - 1);
        }
    };
    for key in assigned_indices(ast.statement(), &expressions) {
        wrap_key(&mut edits, key);
    }
    for (index, expr) in expressions.iter().enumerate() {
        let order = 2 * index + 1;
        match &expr.node {
            Expr::Index(object_index) => wrap_key(&mut edits, &object_index.1),
            Expr::Index2(object_indices) => {
                wrap_key(&mut edits, &object_indices.1);
                wrap_key(&mut edits, &object_indices.2);
            }
            Expr::Dict(entries) => {
                for (key, _) in entries {
                    wrap_key(&mut edits, key);
                }
                if !entries.is_empty() {
                    wrap_entries(&mut edits, expr, order);
                }
            }
            Expr::DictComprehension(key_value, _, _) => {
                wrap_key(&mut edits, &key_value.0);
                wrap_entries(&mut edits, expr, order);
            }
            Expr::Slice(object, ..) => {
                // `x[a:b]` -> `_sandbox_sliced(x)[a:b]`.
                let (object_begin, object_end) = range(object.span);
                let Some(bracket) = layout.bracket_after(object_end) else {
                    continue;
                };
                let Some(start) = layout.receiver_start(object_begin, bracket) else {
                    continue;
                };
                wrap(&mut edits, (start, bracket), CHECKED_SLICE, order);
            }
            Expr::Call(callee, call) => {
                if let Expr::Identifier(ident) = &callee.node {
                    let name = ident.node.ident.as_str();
                    let (begin, end) = range(callee.span);
                    if name == "int" {
                        edits.push(Edit {
                            begin,
                            end,
                            text: BOUNDED_INT.to_owned(),
                            order,
                        });
                    } else if CHARGED_BUILTINS.contains(&name) {
                        // `set(xs)` -> `_sandbox_builtin("set", xs)`.
                        edits.push(Edit {
                            begin,
                            end,
                            text: CHARGED_BUILTIN.to_owned(),
                            order,
                        });
                        let (args_begin, text) = match call.args.first() {
                            Some(arg) => (range(arg.span).0, format!("\"{name}\", ")),
                            None => (range(expr.span).1 - 1, format!("\"{name}\"")),
                        };
                        edits.push(Edit {
                            begin: args_begin,
                            end: args_begin,
                            text,
                            order,
                        });
                    }
                    continue;
                }
                let Expr::Dot(receiver, name) = &callee.node else {
                    continue;
                };
                if !BOUNDED_METHODS.contains(&name.node.as_str()) {
                    continue;
                }
                let (receiver_begin, receiver_end) = range(receiver.span);
                let Some(dot) = layout.last_dot(receiver_end, range(name.span).0) else {
                    continue;
                };
                let Some(start) = layout.receiver_start(receiver_begin, dot) else {
                    continue;
                };
                let args_begin = match call.args.first() {
                    Some(arg) => range(arg.span).0,
                    None => range(expr.span).1 - 1,
                };
                let mut text = format!(", \"{}\"", name.node);
                if !call.args.is_empty() {
                    text.push_str(", ");
                }
                let newlines = source[dot..args_begin].matches('\n').count();
                text.push_str(&"\n".repeat(newlines));
                edits.push(Edit {
                    begin: start,
                    end: start,
                    text: format!("{BOUNDED_METHOD}("),
                    order,
                });
                edits.push(Edit {
                    begin: dot,
                    end: args_begin,
                    text,
                    order,
                });
            }
            Expr::FString(fstring) => {
                let names: Vec<&str> = fstring
                    .node
                    .expressions
                    .iter()
                    .filter_map(|e| match &e.node {
                        Expr::Identifier(ident) => Some(ident.node.ident.as_str()),
                        _ => None,
                    })
                    .collect();
                if names.is_empty() {
                    continue;
                }
                let (begin, end) = range(expr.span);
                edits.push(Edit {
                    begin,
                    end: begin,
                    text: format!("({CHECKED_FSTRING}({}) or ", names.join(", ")),
                    order,
                });
                edits.push(Edit {
                    begin: end,
                    end,
                    text: ")".to_owned(),
                    order,
                });
            }
            _ => {}
        }
    }
    if edits.is_empty() {
        return None;
    }
    // From the end backwards, so earlier positions stay valid. At one position a
    // replacement goes first (its text ends up after the insertions there), then
    // insertions from the innermost node out (the outermost ends up first).
    edits.sort_by(|a, b| {
        b.begin
            .cmp(&a.begin)
            .then_with(|| (b.end > b.begin).cmp(&(a.end > a.begin)))
            .then_with(|| b.order.cmp(&a.order))
    });
    let mut text = source.to_owned();
    for edit in edits {
        text.replace_range(edit.begin..edit.end, &edit.text);
    }
    Some(text)
}

/// The statements at the top level of a module, in order.
fn top_level_statements(stmt: &AstStmt) -> Vec<&AstStmt> {
    match &stmt.node {
        Stmt::Statements(stmts) => stmts.iter().flat_map(top_level_statements).collect(),
        _ => vec![stmt],
    }
}

/// The span and operator of the first `x *= y`, `x %= y` or `x <<= y` anywhere in the
/// code. They are refused because an augmented assignment cannot be routed through the
/// bounded built-ins that `*`, `%` and `<<` are rewritten to.
fn find_refused_assign(stmt: &AstStmt) -> Option<(Span, &'static str)> {
    let mut pending = vec![stmt];
    while let Some(stmt) = pending.pop() {
        match &stmt.node {
            Stmt::AssignModify(_, AssignOp::Multiply, _) => return Some((stmt.span, "*")),
            Stmt::AssignModify(_, AssignOp::Percent, _) => return Some((stmt.span, "%")),
            Stmt::AssignModify(_, AssignOp::LeftShift, _) => return Some((stmt.span, "<<")),
            _ => stmt.visit_stmt(|child| pending.push(child)),
        }
    }
    None
}

/// Names of the sandbox's globals (built-ins, `apis` and the internal `_sandbox_*`
/// helpers).
fn global_names() -> &'static HashSet<String> {
    static NAMES: OnceLock<HashSet<String>> = OnceLock::new();
    NAMES.get_or_init(|| globals().names().map(|n| n.as_str().to_owned()).collect())
}

/// Why a module-level name may not be bound, if it may not: it would replace one of the
/// sandbox's globals for the rest of the session (and, in a saved skill, for every
/// later task), or it starts with `_` (reserved for the sandbox; `_` alone is allowed).
fn refused_name(name: &str) -> Option<String> {
    if global_names().contains(name) && !name.starts_with('_') {
        Some(format!(
            "`{name}` is a built-in name; a top-level definition or variable cannot replace it, choose another name"
        ))
    } else if name.starts_with('_') && name != "_" {
        Some(format!(
            "top-level names starting with `_` are reserved for the sandbox; rename `{}`",
            clip_name(name)
        ))
    } else {
        None
    }
}

/// The first module-level binding (a `def`, an assignment or a loop variable outside any
/// function) whose name [`refused_name`] refuses, with the message.
fn find_refused_binding(stmt: &AstStmt) -> Option<(Span, String)> {
    let mut pending = vec![stmt];
    while let Some(stmt) = pending.pop() {
        let mut targets = Vec::new();
        match &stmt.node {
            Stmt::Def(def) => {
                if let Some(message) = refused_name(&def.name.ident) {
                    return Some((def.name.span, message));
                }
            }
            Stmt::Assign(assign) => targets.push(&assign.lhs),
            Stmt::AssignModify(lhs, _, _) => targets.push(lhs),
            Stmt::For(for_loop) => {
                targets.push(&for_loop.var);
                pending.push(&for_loop.body);
            }
            _ => stmt.visit_stmt(|child| pending.push(child)),
        }
        while let Some(target) = targets.pop() {
            match &target.node {
                AssignTarget::Identifier(ident) => {
                    if let Some(message) = refused_name(&ident.ident) {
                        return Some((target.span, message));
                    }
                }
                AssignTarget::Tuple(items) => targets.extend(items),
                AssignTarget::Index(_) | AssignTarget::Dot(..) => {}
            }
        }
    }
    None
}

/// Checks that every default value in a skill's signature is a literal (a number, a
/// string, `None`, `True`, `False`, or a list, tuple or dict of them): a default is
/// evaluated when the skill is loaded into every later task, so it must not compute.
pub(crate) fn literal_defaults(source: &str) -> Result<(), String> {
    let ast = AstModule::parse("<skill>", source.to_owned(), &dialect())
        .map_err(|e| e.without_diagnostic().to_string())?;
    for stmt in top_level_statements(ast.statement()) {
        let Stmt::Def(def) = &stmt.node else {
            continue;
        };
        for param in &def.params {
            if let Parameter::Normal(name, _, Some(default)) = &param.node {
                if !is_literal(default) {
                    return Err(format!(
                        "the default value of `{}` in skill `{}` is not a literal (a number, string, None, True, False, or a list, tuple or dict of them)",
                        clip_name(&name.ident),
                        clip_name(&def.name.ident)
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Whether `expr` is a literal value (see [`literal_defaults`]).
fn is_literal(expr: &AstExpr) -> bool {
    match &expr.node {
        Expr::Literal(_) => true,
        Expr::Identifier(ident) => matches!(ident.node.ident.as_str(), "None" | "True" | "False"),
        Expr::Minus(inner) | Expr::Plus(inner) => matches!(inner.node, Expr::Literal(_)),
        Expr::List(items) | Expr::Tuple(items) => items.iter().all(is_literal),
        Expr::Dict(pairs) => pairs.iter().all(|(k, v)| is_literal(k) && is_literal(v)),
        _ => false,
    }
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

#[cfg(test)]
mod tests {
    use super::{bound_text_builders, dialect};
    use starlark::syntax::AstModule;

    fn rewrite(source: &str) -> Option<String> {
        let ast = AstModule::parse("t.star", source.to_owned(), &dialect()).unwrap();
        bound_text_builders(&ast, source)
    }

    #[test]
    fn string_builders_are_rewritten_in_place() {
        assert_eq!(rewrite("x = a.isdigit()"), None);
        assert_eq!(
            rewrite("x = a.replace(b, c)").unwrap(),
            "x = _sandbox_method(a, \"replace\", b, c)"
        );
        assert_eq!(
            rewrite("x = ((a) + \")\").join(b.format()) # (").unwrap(),
            "x = _sandbox_method(((a) + \")\"), \"join\", _sandbox_method(b, \"format\")) # ("
        );
        assert_eq!(
            rewrite("x = f'{y}'.replace(\n  'a', y)").unwrap(),
            "x = _sandbox_method((_sandbox_fstring(y) or f'{y}'), \"replace\", \n'a', y)"
        );
        assert_eq!(
            rewrite("x = a.replace(b, c).join(d)").unwrap(),
            "x = _sandbox_method(_sandbox_method(a, \"replace\", b, c), \"join\", d)"
        );
    }

    #[test]
    fn collection_work_is_rewritten_in_place() {
        assert_eq!(rewrite("x = d['a'][0]"), None);
        assert_eq!(
            rewrite("x = set(a) | set()").unwrap(),
            "x = _sandbox_builtin(\"set\", a) | _sandbox_builtin(\"set\")"
        );
        assert_eq!(
            rewrite("d[k] = d[k, j]").unwrap(),
            "d[_sandbox_key(k)] = d[_sandbox_key(k), _sandbox_key(j)]"
        );
        assert_eq!(
            rewrite("x = {k: v for k, v in p}\ny = {(a): 1, 'b': 2}").unwrap(),
            "x = _sandbox_entries({_sandbox_key(k): v for k, v in p})\n\
             y = _sandbox_entries({(_sandbox_key(a)): 1, 'b': 2})"
        );
        assert_eq!(
            rewrite("x = (a)[1:] + b.c[::2]").unwrap(),
            "x = _sandbox_sliced((a))[1:] + _sandbox_sliced(b.c)[::2]"
        );
        assert_eq!(
            rewrite("for m[i] in d.get(k):\n    pass").unwrap(),
            "for m[_sandbox_key(i)] in _sandbox_method(d, \"get\", k):\n    pass"
        );
        // Annotations are types, not lookups.
        assert_eq!(
            rewrite("def f(x: list[str]) -> dict[str, int]:\n    return dict(x)").unwrap(),
            "def f(x: list[str]) -> dict[str, int]:\n    return _sandbox_builtin(\"dict\", x)"
        );
    }
}
