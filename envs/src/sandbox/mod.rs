//! The code sandbox: runs agent code (Starlark, a deterministic Python dialect) in a
//! session that keeps variables and functions across the turns of an episode, under
//! resource limits, against the world's apps behind an [`ApiHost`].
//!
//! - [`Sandbox`]: the session's owner. [`Sandbox::reset`] starts a fresh session,
//!   [`Sandbox::load_skill`] defines a library skill in it, [`Sandbox::execute`] runs
//!   one turn's code and reports an [`ExecOutcome`].
//! - [`Limits`] / [`LimitKind`]: the resource limits (`limits.rs`).
//! - [`ApiHost`] and the signatures it publishes, with the shared argument check
//!   [`bind_args`] (`api.rs`); the `apis` object agent code calls them through
//!   (`apis.rs`); JSON <-> Starlark conversion (`values.rs`).
//! - Tracing of which top-level functions were defined, called and completed
//!   ([`FunctionRef`], `trace.rs`); errors and short tracebacks ([`ExecError`],
//!   `error.rs`).
//! - Internals: the dialect, parsing and operator rewriting (`source.rs`), built-ins
//!   (`builtins.rs`), bounded conversion of values to text (`text.rs`), running one
//!   piece of code (`run.rs`), the per-execution shared state (`context.rs`), the
//!   session future (`session.rs`) and the lent host (`host_slot.rs`).
//!
//! Agent code sees the Starlark standard built-ins (plus `map`, `filter`, `partial`,
//! `set`, and Python's `sum`), `print`, and `apis`. There is no I/O, no `load`, no
//! clock and no randomness: the same code against the same host gives the same outcome,
//! ticks included. Starlark is not Python: there is no `while`, `try`, `class`,
//! `import` or `**`; strings are not iterable (`s.elems()`); f-strings take plain names
//! only (`f"{x}"`); a name used but never defined fails the whole code before it runs.
//! The sandbox also refuses `*=` and `%=`. A `Sandbox` is not `Send` (the interpreter's
//! values are not); create one per thread.

mod api;
mod apis;
mod builtins;
mod context;
mod error;
mod host_slot;
mod limits;
mod run;
mod session;
mod source;
mod text;
mod trace;
mod values;

use std::cell::RefCell;
use std::rc::Rc;

pub use api::{
    bind_args, json_type_name, ApiCall, ApiError, ApiHost, ApiSpec, ArgProblem, BindError,
    ParamSpec, ParamType,
};
pub use error::{ExecError, ExecErrorKind};
pub use limits::{LimitKind, Limits};
pub use trace::{FunctionOrigin, FunctionRef};

use context::ExecContext;
use run::{Job, JobResult};
use session::Session;
use trace::{DefKey, FileTable};

/// What one execution did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecOutcome {
    /// Index of this execution in the episode (0 = first after reset); functions it
    /// defined have origin [`FunctionOrigin::Execution`] with this index.
    pub execution: u32,
    /// Printed output, cut at [`Limits::max_output_bytes`] with a marker line.
    pub output: String,
    /// The output was cut.
    pub output_truncated: bool,
    /// The error that ended the execution, if any.
    pub error: Option<ExecError>,
    /// Top-level functions whose `def` ran in this execution, in order.
    pub defined: Vec<String>,
    /// Top-level functions (from any earlier code, the library included) whose body ran
    /// during this execution, first call first.
    pub called: Vec<FunctionRef>,
    /// Of `called`, those that returned normally every time: candidates to save as
    /// skills (SAGE saves a function that ran without error).
    pub completed: Vec<FunctionRef>,
    /// API calls, in order, failed attempts included.
    pub api_calls: Vec<ApiCall>,
    /// Ticks used (function calls and loop iterations).
    pub ticks: u64,
}

impl ExecOutcome {
    /// The text returned to the agent: the printed output, then the traceback if the
    /// execution failed.
    pub fn observation(&self) -> String {
        match &self.error {
            None => self.output.clone(),
            Some(error) if self.output.is_empty() => error.traceback.clone(),
            Some(error) => {
                let separator = if self.output.ends_with('\n') {
                    ""
                } else {
                    "\n"
                };
                format!("{}{separator}{}", self.output, error.traceback)
            }
        }
    }

    /// The execution ran to the end without error.
    pub fn succeeded(&self) -> bool {
        self.error.is_none()
    }

    /// An outcome for a failure of the sandbox itself.
    fn internal(execution: u32, message: &str) -> ExecOutcome {
        ExecOutcome {
            execution,
            output: String::new(),
            output_truncated: false,
            error: Some(ExecError::bare(ExecErrorKind::Internal, message.to_owned())),
            defined: Vec::new(),
            called: Vec::new(),
            completed: Vec::new(),
            api_calls: Vec::new(),
            ticks: 0,
        }
    }
}

/// A Starlark session for one episode: runs code under [`Limits`], keeping variables and
/// functions between executions until [`Sandbox::reset`].
pub struct Sandbox {
    limits: Limits,
    session: Session,
    files: Rc<RefCell<FileTable>>,
    executions: u32,
    episode_api_calls: u32,
}

impl Sandbox {
    /// A sandbox with a fresh session.
    pub fn new(limits: Limits) -> Sandbox {
        Sandbox {
            limits,
            session: Session::new(),
            files: Rc::new(RefCell::new(FileTable::default())),
            executions: 0,
            episode_api_calls: 0,
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Starts a fresh session: no variables, no functions, no library skills, and the
    /// episode's counters (executions, API calls) back to zero.
    pub fn reset(&mut self) {
        self.session = Session::new();
        self.files = Rc::new(RefCell::new(FileTable::default()));
        self.executions = 0;
        self.episode_api_calls = 0;
    }

    /// Executions run since the last reset.
    pub fn executions(&self) -> u32 {
        self.executions
    }

    /// Defines a library skill in the session. `source` must be exactly one top-level
    /// function definition; it cannot call APIs while loading. Returns the function's
    /// name, or the error that kept it from loading (the session is unchanged then).
    pub fn load_skill(&mut self, source: &str) -> Result<String, ExecError> {
        let ctx = Rc::new(self.context());
        let file_name = match source::skill_name(source) {
            Some(name) => format!("<skill {name}>"),
            None => "<skill>".to_owned(),
        };
        let job = Job {
            file_name,
            source: source.to_owned(),
            origin: FunctionOrigin::Library,
            skill: true,
            ctx: ctx.clone(),
        };
        if let Some(error) = self.run(job, None).error {
            return Err(error);
        }
        let defined = ctx.trace.borrow().defined().first().copied();
        defined
            .map(|key| ctx.files.borrow().function(key).name)
            .ok_or_else(|| {
                ExecError::bare(
                    ExecErrorKind::Internal,
                    "the skill defined no function".to_owned(),
                )
            })
    }

    /// Runs one turn's code against `host` and reports what it did. Never fails: errors
    /// in the code, exceeded limits and API errors are part of the outcome, and the
    /// session stays usable.
    pub fn execute(&mut self, code: &str, host: &mut dyn ApiHost) -> ExecOutcome {
        let execution = self.executions;
        self.executions += 1;
        let ctx = Rc::new(self.context());
        let job = Job {
            file_name: format!("<turn {}>", execution + 1),
            source: code.to_owned(),
            origin: FunctionOrigin::Execution(execution),
            skill: false,
            ctx: ctx.clone(),
        };
        let result = self.run(job, Some(host));
        let Ok(ctx) = Rc::try_unwrap(ctx) else {
            return ExecOutcome::internal(execution, "the execution's state is still in use");
        };
        let api_calls = ctx.api_calls.into_inner();
        self.episode_api_calls = self
            .episode_api_calls
            .saturating_add(api_calls.len() as u32);
        let trace = ctx.trace.into_inner();
        let files = ctx.files.borrow();
        let functions = |keys: &[DefKey]| {
            keys.iter()
                .map(|&key| files.function(key))
                .collect::<Vec<_>>()
        };
        let (output, output_truncated) = ctx.output.into_inner().finish();
        ExecOutcome {
            execution,
            output,
            output_truncated,
            defined: functions(trace.defined())
                .into_iter()
                .map(|f| f.name)
                .collect(),
            called: functions(trace.called()),
            completed: functions(&trace.completed(result.error.is_some())),
            error: result.error,
            api_calls,
            ticks: result.ticks,
        }
    }

    /// The exact source of `function`'s definition (its last definition in that code),
    /// if the session ran it.
    pub fn function_source(&self, function: &FunctionRef) -> Option<String> {
        self.files.borrow().source_of(function).map(str::to_owned)
    }

    /// A context for the next job.
    fn context(&self) -> ExecContext {
        ExecContext::new(&self.limits, self.files.clone(), self.episode_api_calls)
    }

    /// Runs a job; if the interpreter breaks, replaces the session and reports it.
    fn run(&mut self, job: Job, host: Option<&mut dyn ApiHost>) -> JobResult {
        match self.session.run(job, host) {
            Some(result) => result,
            None => {
                self.session = Session::new();
                self.files = Rc::new(RefCell::new(FileTable::default()));
                JobResult::failed(ExecError::bare(
                    ExecErrorKind::Internal,
                    "the interpreter failed; the session was restarted and earlier definitions are lost".to_owned(),
                ))
            }
        }
    }
}
