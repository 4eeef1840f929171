//! [`Interpreter`]: the in-process Starlark session a [`Sandbox`](super::Sandbox) runs
//! code in, either in the caller's process or inside a worker process (see
//! `isolation/`).

use std::cell::RefCell;
use std::rc::Rc;

use super::api::ApiHost;
use super::context::ExecContext;
use super::error::{ExecError, ExecErrorKind};
use super::limits::Limits;
use super::run::{Job, JobResult};
use super::session::Session;
use super::source;
use super::trace::{DefKey, FileTable, FunctionOrigin, FunctionRef};
use super::ExecOutcome;

/// The in-process interpreter session behind a [`Sandbox`](super::Sandbox): runs code under
/// [`Limits`], keeping variables and functions between executions until [`Interpreter::reset`].
pub(crate) struct Interpreter {
    limits: Limits,
    session: Session,
    files: Rc<RefCell<FileTable>>,
    executions: u32,
    episode_api_calls: u32,
    /// Bytes the session's dicts and sets hold outside the heap, about (see `work.rs`).
    off_heap_bytes: u64,
}

impl Interpreter {
    /// An interpreter with a fresh session.
    pub(crate) fn new(limits: Limits) -> Interpreter {
        Interpreter::resume(limits, 0, 0)
    }

    /// A fresh session that continues an episode whose earlier session was lost: the
    /// next execution is number `executions` and the episode has made
    /// `episode_api_calls` API calls so far.
    pub(crate) fn resume(limits: Limits, executions: u32, episode_api_calls: u32) -> Interpreter {
        Interpreter {
            limits,
            session: Session::new(),
            files: Rc::new(RefCell::new(FileTable::default())),
            executions,
            episode_api_calls,
            off_heap_bytes: 0,
        }
    }

    /// API calls the episode has made since the last reset.
    pub(crate) fn episode_api_calls(&self) -> u32 {
        self.episode_api_calls
    }

    /// The limits in force.
    pub(crate) fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Starts a fresh session: no variables, no functions, no library skills, and the
    /// episode's counters (executions, API calls) back to zero.
    pub(crate) fn reset(&mut self) {
        self.session = Session::new();
        self.files = Rc::new(RefCell::new(FileTable::default()));
        self.executions = 0;
        self.episode_api_calls = 0;
        self.off_heap_bytes = 0;
    }

    /// Executions run since the last reset.
    pub(crate) fn executions(&self) -> u32 {
        self.executions
    }

    /// Defines a library skill in the session. `source` must be exactly one top-level
    /// function definition; it cannot call APIs while loading. Returns the function's
    /// name, or the error that kept it from loading (the session is unchanged then).
    pub(crate) fn load_skill(&mut self, source: &str) -> Result<String, ExecError> {
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
        let error = self.run(job, None).error;
        self.off_heap_bytes = ctx.off_heap_bytes.get();
        if let Some(error) = error {
            return Err(error.clipped(self.limits.max_output_bytes));
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
    pub(crate) fn execute(&mut self, code: &str, host: &mut dyn ApiHost) -> ExecOutcome {
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
        self.off_heap_bytes = ctx.off_heap_bytes.get();
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
            error: result
                .error
                .map(|error| error.clipped(self.limits.max_output_bytes)),
            api_calls,
            ticks: result.ticks,
        }
    }

    /// The exact source of `function`'s definition (its last definition in that code),
    /// if the session ran it.
    pub(crate) fn function_source(&self, function: &FunctionRef) -> Option<String> {
        self.files.borrow().source_of(function).map(str::to_owned)
    }

    /// A context for the next job.
    fn context(&self) -> ExecContext {
        ExecContext::new(
            &self.limits,
            self.files.clone(),
            self.episode_api_calls,
            self.off_heap_bytes,
        )
    }

    /// Runs a job; if the interpreter breaks, replaces the session and reports it.
    fn run(&mut self, job: Job, host: Option<&mut dyn ApiHost>) -> JobResult {
        match self.session.run(job, host) {
            Some(result) => result,
            None => {
                self.session = Session::new();
                self.files = Rc::new(RefCell::new(FileTable::default()));
                self.off_heap_bytes = 0;
                JobResult::failed(ExecError::bare(
                    ExecErrorKind::Internal,
                    "the interpreter failed; the session was restarted and earlier definitions are lost".to_owned(),
                ))
            }
        }
    }
}
