//! The code sandbox: runs agent code (Starlark, a deterministic Python dialect) in a
//! session that keeps variables and functions across the turns of an episode, under
//! resource limits, against the world's apps behind an [`ApiHost`].
//!
//! - [`Sandbox`]: the session's owner. [`Sandbox::reset`] starts a fresh session,
//!   [`Sandbox::load_skill`] defines a library skill in it, [`Sandbox::execute`] runs
//!   one turn's code and reports an [`ExecOutcome`]. [`Isolation`] says where the
//!   session runs: in a worker process (`isolation/`, the default of the built-in
//!   world) or in the caller's process (`interpreter.rs`).
//! - [`Limits`] / [`LimitKind`]: the resource limits (`limits.rs`).
//! - [`ApiHost`] and the signatures it publishes, with the shared argument check
//!   [`bind_args`] (`api.rs`); the `apis` object agent code calls them through
//!   (`apis.rs`); JSON <-> Starlark conversion (`values.rs`).
//! - Tracing of which top-level functions were defined, called and completed
//!   ([`FunctionRef`], `trace.rs`); errors and short tracebacks ([`ExecError`],
//!   `error.rs`).
//! - Internals: the dialect, parsing and operator rewriting (`source.rs`), built-ins
//!   (`builtins.rs`), the names of the built-ins rewriting targets (`rewrites.rs`), bounded conversion of values to text (`text.rs`), running one
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
//!
//! In-process, the interpreter's own limits are all there is: a built-in call that
//! allocates outside the interpreter's heap or never returns takes the caller with it.
//! Under [`Isolation::Process`] such code only costs its worker process, which the
//! caller kills or replaces; the execution ends with an error that says what happened.

mod api;
mod apis;
mod builtins;
mod charged;
mod clock;
mod context;
mod error;
mod host_slot;
mod interpreter;
#[cfg(target_os = "linux")]
mod isolation;
mod limits;
mod rewrites;
mod run;
mod session;
mod source;
mod text;
mod trace;
mod values;
mod work;

use serde::{Deserialize, Serialize};

pub use api::{
    bind_args, json_type_name, ApiCall, ApiError, ApiHost, ApiSpec, ArgProblem, BindError,
    ParamSpec, ParamType,
};
pub use clock::thread_cpu_time;
pub use error::{ExecError, ExecErrorKind};
#[cfg(target_os = "linux")]
pub use isolation::{
    serve_worker_if_asked, stopped_workers, worker_program, WORKER_ARG, WORKER_ENV,
};
pub use limits::{LimitKind, Limits};
#[cfg(not(target_os = "linux"))]
pub use no_isolation::{serve_worker_if_asked, stopped_workers};
pub use trace::{FunctionOrigin, FunctionRef};

pub(crate) use source::literal_defaults;

use interpreter::Interpreter;
#[cfg(target_os = "linux")]
use isolation::WorkerSandbox;

/// What one execution did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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

    /// The sandbox stopped the execution before its end: a limit was reached (ticks,
    /// memory, time, sizes, a worker process killed) or the sandbox itself failed; an
    /// error raised by the code or an API is not a stop.
    pub fn stopped(&self) -> bool {
        self.error.as_ref().is_some_and(|error| {
            matches!(
                error.kind,
                ExecErrorKind::Limit(_) | ExecErrorKind::Internal
            )
        })
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

/// Where a [`Sandbox`] runs agent code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Isolation {
    /// In a worker process with its own memory and CPU-time limits, killed and replaced
    /// when it overruns (Linux). Making such a sandbox fails with an [`IsolationError`]
    /// when there is no worker program (see [`worker_program`]).
    #[default]
    Process,
    /// In the caller's process, an explicit opt-in for tests, fuzzing and trusted code:
    /// no process start, no messages, but a hostile built-in call that escapes the
    /// interpreter's limits can abort or hang the caller.
    InProcess,
}

/// A Starlark session for one episode: runs code under [`Limits`], keeping variables and
/// functions between executions until [`Sandbox::reset`].
pub struct Sandbox {
    runner: Runner,
}

/// The session, where it runs.
enum Runner {
    InProcess(Interpreter),
    #[cfg(target_os = "linux")]
    Worker(WorkerSandbox),
}

impl Sandbox {
    /// A sandbox that runs code in the caller's process ([`Isolation::InProcess`]).
    pub fn new(limits: Limits) -> Sandbox {
        Sandbox {
            runner: Runner::InProcess(Interpreter::new(limits)),
        }
    }

    /// A sandbox that runs code where `isolation` says. [`Isolation::Process`] needs a
    /// worker program (see [`worker_program`]): without one, or when it cannot start,
    /// this fails with an [`IsolationError`] that says how to provide one. It never
    /// falls back to running code in-process.
    pub fn with_isolation(limits: Limits, isolation: Isolation) -> Result<Sandbox, IsolationError> {
        match isolation {
            Isolation::InProcess => Ok(Sandbox::new(limits)),
            Isolation::Process => Sandbox::isolated(limits),
        }
    }

    /// A sandbox that runs code in worker processes started from `program` (a program
    /// that calls [`serve_worker_if_asked`] first thing, such as `sage-sandbox-worker`).
    /// Fails when the first worker cannot start; never falls back to in-process.
    #[cfg(target_os = "linux")]
    pub fn with_worker_program(
        limits: Limits,
        program: impl Into<std::path::PathBuf>,
    ) -> std::io::Result<Sandbox> {
        Ok(Sandbox {
            runner: Runner::Worker(WorkerSandbox::start(limits, program.into())?),
        })
    }

    #[cfg(target_os = "linux")]
    fn isolated(limits: Limits) -> Result<Sandbox, IsolationError> {
        let Some(program) = worker_program() else {
            return Err(IsolationError::new(
                "no sandbox worker program was found".to_owned(),
            ));
        };
        match WorkerSandbox::start(limits, program.clone()) {
            Ok(worker) => Ok(Sandbox {
                runner: Runner::Worker(worker),
            }),
            Err(e) => Err(IsolationError::new(format!(
                "the sandbox worker {} could not start: {e}",
                program.display()
            ))),
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn isolated(_limits: Limits) -> Result<Sandbox, IsolationError> {
        Err(IsolationError {
            message: "process isolation is implemented for Linux only; choose \
                      `Isolation::InProcess` to run trusted code in-process"
                .to_owned(),
        })
    }

    /// Where this sandbox runs code.
    pub fn isolation(&self) -> Isolation {
        match &self.runner {
            Runner::InProcess(_) => Isolation::InProcess,
            #[cfg(target_os = "linux")]
            Runner::Worker(_) => Isolation::Process,
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        match &self.runner {
            Runner::InProcess(interpreter) => interpreter.limits(),
            #[cfg(target_os = "linux")]
            Runner::Worker(worker) => worker.limits(),
        }
    }

    /// Starts a fresh session: no variables, no functions, no library skills, and the
    /// episode's counters (executions, API calls) back to zero.
    pub fn reset(&mut self) {
        match &mut self.runner {
            Runner::InProcess(interpreter) => interpreter.reset(),
            #[cfg(target_os = "linux")]
            Runner::Worker(worker) => worker.reset(),
        }
    }

    /// Executions run since the last reset.
    pub fn executions(&self) -> u32 {
        match &self.runner {
            Runner::InProcess(interpreter) => interpreter.executions(),
            #[cfg(target_os = "linux")]
            Runner::Worker(worker) => worker.executions(),
        }
    }

    /// Defines a library skill in the session. `source` must be exactly one top-level
    /// function definition; it cannot call APIs while loading. Returns the function's
    /// name, or the error that kept it from loading (the session is unchanged then).
    pub fn load_skill(&mut self, source: &str) -> Result<String, ExecError> {
        match &mut self.runner {
            Runner::InProcess(interpreter) => interpreter.load_skill(source),
            #[cfg(target_os = "linux")]
            Runner::Worker(worker) => worker.load_skill(source),
        }
    }

    /// Runs one turn's code against `host` and reports what it did. Never fails: errors
    /// in the code, exceeded limits, API errors and (isolated) a killed worker are part
    /// of the outcome, and the sandbox stays usable.
    pub fn execute(&mut self, code: &str, host: &mut dyn ApiHost) -> ExecOutcome {
        match &mut self.runner {
            Runner::InProcess(interpreter) => interpreter.execute(code, host),
            #[cfg(target_os = "linux")]
            Runner::Worker(worker) => worker.execute(code, host),
        }
    }

    /// The exact source of `function`'s definition (its last definition in that code),
    /// if the session ran it.
    pub fn function_source(&mut self, function: &FunctionRef) -> Option<String> {
        match &mut self.runner {
            Runner::InProcess(interpreter) => interpreter.function_source(function),
            #[cfg(target_os = "linux")]
            Runner::Worker(worker) => worker.function_source(function),
        }
    }
}

/// Why a sandbox with [`Isolation::Process`] could not be made. Its message says how to
/// provide a worker program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IsolationError {
    /// What went wrong and what to do about it.
    pub message: String,
}

impl IsolationError {
    /// The error for `problem`, followed by the ways to provide a worker.
    #[cfg(target_os = "linux")]
    fn new(problem: String) -> IsolationError {
        IsolationError {
            message: format!(
                "{problem}. Agent code runs in a worker process by default; provide one: call \
                 `sage_envs::sandbox::serve_worker_if_asked();` first thing in `main` (the \
                 program then serves as its own worker), or set {WORKER_ENV} to a \
                 `sage-sandbox-worker` binary (`cargo build --release -p sage-envs --bin \
                 sage-sandbox-worker`), or choose `Isolation::InProcess` to run trusted code \
                 in-process"
            ),
        }
    }
}

impl std::fmt::Display for IsolationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for IsolationError {}

/// Stand-ins for the isolation entry points where process isolation is not implemented.
#[cfg(not(target_os = "linux"))]
mod no_isolation {
    /// Does nothing: there are no worker processes on this platform.
    pub fn serve_worker_if_asked() {}

    /// Always 0: there are no worker processes on this platform.
    pub fn stopped_workers() -> u64 {
        0
    }
}
