//! Run-time tracing of top-level functions: which files the session has run
//! ([`FileTable`]), and, per execution, which top-level functions were defined, entered,
//! and still running when an error struck ([`CallTrace`]).
//!
//! Tracing is driven by the evaluator's before-statement hook: every statement executed
//! is mapped through its file and span to the top-level `def` that contains it. A
//! function counts as called when one of its statements runs, so a library skill is
//! "used" only when its own body executes, never because its name appears in the code.
//! Statements of nested functions and lambdas count for the top-level function that
//! contains them. Starlark has no `try`, so the first error ends the execution: the
//! functions on the (shadow) call stack at that moment failed, every other function
//! entered during the execution returned normally.

use serde::{Deserialize, Serialize};
use starlark::codemap::{CodeMap, CodeMapId, FileSpanRef, Span};

/// A top-level function definition found in parsed code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TopLevelDef {
    /// The function's name.
    pub name: String,
    /// The span of the whole `def` statement, body included.
    pub span: Span,
    /// The statement's source as the agent wrote it (before any rewriting).
    pub source: String,
}

/// Where a function definition came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FunctionOrigin {
    /// A library skill loaded with [`Sandbox::load_skill`](super::Sandbox::load_skill).
    Library,
    /// The code of an execution of this episode (0 = the first `execute` after reset).
    Execution(u32),
}

/// A top-level function: its name and the code that defined it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FunctionRef {
    /// The function's name.
    pub name: String,
    /// The code its definition came from.
    pub origin: FunctionOrigin,
}

/// A function as the tracer identifies it: file index and def index within the file.
pub(crate) type DefKey = (usize, usize);

/// One file run in the session: a loaded skill or the code of one execution.
struct FileEntry {
    origin: FunctionOrigin,
    codemap: CodeMap,
    /// Top-level definitions, sorted by span start (source order).
    defs: Vec<TopLevelDef>,
}

/// The files the current session has run, for mapping statements back to functions.
#[derive(Default)]
pub(crate) struct FileTable {
    files: Vec<FileEntry>,
}

impl FileTable {
    /// Registers a file; returns its index.
    pub(crate) fn add(
        &mut self,
        origin: FunctionOrigin,
        codemap: CodeMap,
        defs: Vec<TopLevelDef>,
    ) -> usize {
        self.files.push(FileEntry {
            origin,
            codemap,
            defs,
        });
        self.files.len() - 1
    }

    /// Forgets the most recently added file (its code failed before defining anything).
    pub(crate) fn pop(&mut self) {
        self.files.pop();
    }

    fn file_of(&self, id: CodeMapId) -> Option<usize> {
        self.files.iter().rposition(|f| f.codemap.id() == id)
    }

    /// The definition containing `span` in `file`, and whether `span` is the `def`
    /// statement itself rather than a statement of its body.
    fn def_at(&self, file: usize, span: Span) -> Option<(usize, bool)> {
        let defs = &self.files[file].defs;
        let after = defs.partition_point(|d| d.span.begin() <= span.begin());
        let index = after.checked_sub(1)?;
        let def = &defs[index];
        (span.end() <= def.span.end()).then_some((index, def.span == span))
    }

    /// The public name of a traced function.
    pub(crate) fn function(&self, (file, def): DefKey) -> FunctionRef {
        let entry = &self.files[file];
        FunctionRef {
            name: entry.defs[def].name.clone(),
            origin: entry.origin,
        }
    }

    /// The source of the last definition of `function` in its file, exactly as written
    /// (trailing blank lines dropped).
    pub(crate) fn source_of(&self, function: &FunctionRef) -> Option<&str> {
        self.files
            .iter()
            .filter(|f| f.origin == function.origin)
            .flat_map(|f| {
                f.defs
                    .iter()
                    .rev()
                    .find(|d| d.name == function.name)
                    .map(|d| d.source.trim_end())
            })
            .next_back()
    }
}

/// What one execution's statements revealed about top-level functions.
#[derive(Default)]
pub(crate) struct CallTrace {
    /// Functions whose statements are running, outermost first, with the call depth
    /// at which they were entered.
    shadow: Vec<(usize, DefKey)>,
    /// Functions entered, first entry first.
    called: Vec<DefKey>,
    /// Per file, per def: already in `called`.
    seen: Vec<Vec<bool>>,
    /// `def` statements of the executing file that ran, in order.
    defined: Vec<DefKey>,
    /// Last file looked up, to skip the search on consecutive statements.
    last_file: Option<(CodeMapId, usize)>,
}

impl CallTrace {
    /// Records a statement about to run at call depth `depth`.
    pub(crate) fn on_statement(&mut self, files: &FileTable, span: FileSpanRef<'_>, depth: usize) {
        let id = span.file.id();
        let file = match self.last_file {
            Some((last, file)) if last == id => Some(file),
            _ => {
                let file = files.file_of(id);
                self.last_file = file.map(|f| (id, f));
                file
            }
        };
        let current = match file.and_then(|f| files.def_at(f, span.span).map(|d| (f, d))) {
            Some((f, (def, true))) => {
                if !self.defined.contains(&(f, def)) {
                    self.defined.push((f, def));
                }
                None
            }
            Some((f, (def, false))) => Some((f, def)),
            None => None,
        };
        while let Some(&(entered, key)) = self.shadow.last() {
            if entered > depth || (entered == depth && Some(key) != current) {
                self.shadow.pop();
            } else {
                break;
            }
        }
        if let Some(key) = current {
            if self
                .shadow
                .last()
                .is_none_or(|&(entered, _)| entered < depth)
            {
                self.shadow.push((depth, key));
                self.mark_called(key);
            }
        }
    }

    fn mark_called(&mut self, (file, def): DefKey) {
        if self.seen.len() <= file {
            self.seen.resize(file + 1, Vec::new());
        }
        let flags = &mut self.seen[file];
        if flags.len() <= def {
            flags.resize(def + 1, false);
        }
        if !flags[def] {
            flags[def] = true;
            self.called.push((file, def));
        }
    }

    /// Top-level functions entered during the execution, first entry first.
    pub(crate) fn called(&self) -> &[DefKey] {
        &self.called
    }

    /// Top-level `def` statements of the executing file that ran.
    pub(crate) fn defined(&self) -> &[DefKey] {
        &self.defined
    }

    /// Entered functions that returned normally every time: all of them when the
    /// execution succeeded, otherwise those not running when the error struck.
    pub(crate) fn completed(&self, failed: bool) -> Vec<DefKey> {
        self.called
            .iter()
            .copied()
            .filter(|key| !failed || !self.shadow.iter().any(|(_, running)| running == key))
            .collect()
    }
}
