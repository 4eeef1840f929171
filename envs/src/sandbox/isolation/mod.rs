//! Process isolation: agent code runs in a worker process (`worker.rs`) under its own
//! address-space and CPU-time limits, with a kill timer in the caller, so that no
//! program can abort, hang or flood the caller, whatever it does inside the
//! interpreter. The caller keeps the world: the worker reaches the caller's
//! [`ApiHost`] through API-call messages (`protocol.rs`), and each call runs whole in
//! the caller, so a worker's death never leaves the world half-changed.
//!
//! [`WorkerSandbox`] is the caller's side. When its worker dies or overruns, the
//! execution ends with a limit error that says so, the worker is replaced by a fresh
//! one (the session's variables are lost; the library skills are loaded again and the
//! episode's counters carried over), and the process-wide count
//! [`stopped_workers`] goes up. Idle workers wait in a pool (`process.rs`) between
//! episodes, so a reset costs one message, not a process start.

mod deadline;
mod process;
mod protocol;
mod sys;
mod worker;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

pub use process::{serve_worker_if_asked, worker_program, WORKER_ARG, WORKER_ENV};

use deadline::Deadline;
use process::{give_back, take_idle, Death, Worker};
use protocol::{PipeError, Reply, Request};

use super::session::eval_stack_bytes;
use super::{
    ApiCall, ApiHost, ApiSpec, ExecError, ExecErrorKind, ExecOutcome, FunctionRef, Limits,
};

/// Executions stopped by killing or losing their worker process, in this process.
static STOPPED_WORKERS: AtomicU64 = AtomicU64::new(0);

/// How many executions, in this whole process, ended because their worker process
/// died or was killed (memory, CPU time, the kill timer or a crash).
pub fn stopped_workers() -> u64 {
    STOPPED_WORKERS.load(Ordering::Relaxed)
}

/// The caller's side of a sandbox session that runs in a worker process.
pub(crate) struct WorkerSandbox {
    limits: Limits,
    program: PathBuf,
    worker: Option<Worker>,
    /// Executions since the last reset.
    executions: u32,
    /// API calls since the last reset.
    episode_api_calls: u32,
    /// Sources of the library skills loaded since the last reset, to load again into a
    /// replacement worker.
    library: Vec<String>,
}

impl WorkerSandbox {
    /// A sandbox whose sessions run in workers started from `program`; starts (or takes
    /// from the pool) its first worker now, so a program that cannot start fails here.
    pub(crate) fn start(limits: Limits, program: PathBuf) -> std::io::Result<WorkerSandbox> {
        let mut sandbox = WorkerSandbox {
            limits,
            program,
            worker: None,
            executions: 0,
            episode_api_calls: 0,
            library: Vec::new(),
        };
        sandbox.reset_worker()?;
        Ok(sandbox)
    }

    /// The limits in force.
    pub(crate) fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Executions since the last reset.
    pub(crate) fn executions(&self) -> u32 {
        self.executions
    }

    /// Starts a fresh session: no variables, functions or skills, counters at zero.
    pub(crate) fn reset(&mut self) {
        self.executions = 0;
        self.episode_api_calls = 0;
        self.library.clear();
        if self.reset_worker().is_err() {
            // The next request starts another worker and reports if that fails too.
            self.worker = None;
        }
    }

    /// Defines a library skill in the session; see
    /// [`Sandbox::load_skill`](super::Sandbox::load_skill).
    pub(crate) fn load_skill(&mut self, source: &str) -> Result<String, ExecError> {
        let result = self.load_into_worker(source);
        if result.is_ok() {
            self.library.push(source.to_owned());
        }
        result
    }

    /// Runs one turn's code against `host`; see
    /// [`Sandbox::execute`](super::Sandbox::execute).
    pub(crate) fn execute(&mut self, code: &str, host: &mut dyn ApiHost) -> ExecOutcome {
        let execution = self.executions;
        let start = Instant::now();
        let mut served = Vec::new();
        let ended = self.converse_execute(code, host, &mut served, start);
        self.executions = execution + 1;
        match ended {
            Ok((outcome, episode_api_calls)) => {
                self.episode_api_calls = episode_api_calls;
                outcome
            }
            Err(stop) => {
                self.episode_api_calls = self.episode_api_calls.saturating_add(served.len() as u32);
                STOPPED_WORKERS.fetch_add(1, Ordering::Relaxed);
                let error = self.stop_error(stop, start);
                ExecOutcome {
                    execution,
                    output: String::new(),
                    output_truncated: false,
                    error: Some(error),
                    defined: Vec::new(),
                    called: Vec::new(),
                    completed: Vec::new(),
                    api_calls: served,
                    ticks: 0,
                }
            }
        }
    }

    /// The source of `function`'s definition, if the session (still) has it.
    pub(crate) fn function_source(&mut self, function: &FunctionRef) -> Option<String> {
        let worker = self.worker.as_mut()?;
        let request = Request::FunctionSource {
            function: function.clone(),
        };
        let deadline = Deadline::after(self.limits.wall_clock);
        let reply = worker
            .input
            .write(&request, Some(&deadline))
            .ok()
            .and_then(|()| worker.output.read::<Reply>(Some(&deadline)).ok());
        match reply {
            Some(Reply::Source(source)) => source,
            _ => {
                self.discard_worker();
                None
            }
        }
    }

    /// Sends the session's reset to the worker, starting one if there is none.
    fn reset_worker(&mut self) -> std::io::Result<()> {
        let reset = Request::Reset {
            limits: Box::new(self.limits.clone()),
            executions: self.executions,
            episode_api_calls: self.episode_api_calls,
        };
        let deadline = Deadline::after(self.limits.wall_clock);
        if let Some(worker) = self.worker.as_mut() {
            if worker.input.write(&reset, Some(&deadline)).is_ok() {
                return Ok(());
            }
            self.discard_worker();
        }
        let address_space = self.address_space();
        let mut worker = match take_idle(&self.program, address_space) {
            Some(worker) => worker,
            None => Worker::spawn(self.program.clone(), address_space)?,
        };
        worker
            .input
            .write(&reset, Some(&deadline))
            .map_err(|e| std::io::Error::other(format!("the new worker took no reset: {e}")))?;
        self.worker = Some(worker);
        Ok(())
    }

    /// A worker holding this episode's session: the current one, or a fresh one with
    /// the counters carried over and the library loaded again.
    fn ready_worker(&mut self) -> Result<&mut Worker, Stop> {
        if self.worker.is_none() {
            self.reset_worker()
                .map_err(|e| Stop::CannotStart(e.to_string()))?;
            for source in self.library.clone() {
                if let Err(error) = self.load_into_worker(&source) {
                    return Err(Stop::CannotStart(format!(
                        "a library skill no longer loads: {}",
                        error.message
                    )));
                }
            }
        }
        self.worker
            .as_mut()
            .ok_or_else(|| Stop::CannotStart("no worker".to_owned()))
    }

    /// Loads one skill into the worker and reads its reply.
    fn load_into_worker(&mut self, source: &str) -> Result<String, ExecError> {
        let deadline = Deadline::after(self.limits.wall_clock);
        let source = bounded_code(source, self.limits.max_code_bytes);
        let stop = match self.ready_worker() {
            Ok(worker) => {
                let request = Request::LoadSkill {
                    source: source.to_owned(),
                };
                let sent = worker.input.write(&request, Some(&deadline));
                match sent.and_then(|()| worker.output.read::<Reply>(Some(&deadline))) {
                    Ok(Reply::Loaded(result)) => return result,
                    Ok(other) => Stop::Protocol(format!("it replied {other:?}")),
                    Err(PipeError::TimedOut) => self.kill_worker(true),
                    Err(_) => self.kill_worker(false),
                }
            }
            Err(stop) => stop,
        };
        if let Stop::Protocol(_) = stop {
            self.discard_worker();
        }
        Err(ExecError::bare(
            ExecErrorKind::Internal,
            format!(
                "the skill could not be loaded: {}",
                stop.describe(&self.limits)
            ),
        ))
    }

    /// Sends the execution and serves its API calls until its outcome arrives.
    fn converse_execute(
        &mut self,
        code: &str,
        host: &mut dyn ApiHost,
        served: &mut Vec<ApiCall>,
        start: Instant,
    ) -> Result<(ExecOutcome, u32), Stop> {
        let deadline = Deadline::starting(start, self.limits.wall_clock);
        let code = bounded_code(code, self.limits.max_code_bytes);
        let worker = self.ready_worker()?;
        // The table goes to the worker only when it differs from the one it has.
        let specs = match &worker.specs {
            Some(known) if api_specs(host).eq(known.iter()) => None,
            _ => Some(api_specs(host).cloned().collect::<Vec<_>>()),
        };
        // Code over the size limit is refused by the worker as it would be in-process;
        // it is sent only as far as needed to see that.
        let request = Request::Execute {
            code: code.to_owned(),
            specs: specs.clone(),
        };
        if let Err(error) = worker.input.write(&request, Some(&deadline)) {
            return Err(self.kill_worker(matches!(error, PipeError::TimedOut)));
        }
        if specs.is_some() {
            worker.specs = specs;
        }
        loop {
            let worker = self.worker.as_mut().ok_or(Stop::Lost)?;
            let reply = match worker.output.read::<Reply>(Some(&deadline)) {
                Ok(reply) => reply,
                Err(PipeError::TimedOut) => return Err(self.kill_worker(true)),
                Err(_) => return Err(self.kill_worker(false)),
            };
            match reply {
                Reply::ApiCall { app, api, args } => {
                    let result = deadline
                        .not_waiting(|| host.call(&app, &api, args))
                        .map_err(|e| e.message);
                    served.push(ApiCall {
                        app,
                        api,
                        error: result.as_ref().err().cloned(),
                    });
                    let answer = Request::ApiResult(result);
                    if let Err(error) = worker.input.write(&answer, Some(&deadline)) {
                        return Err(self.kill_worker(matches!(error, PipeError::TimedOut)));
                    }
                }
                Reply::Executed {
                    outcome,
                    episode_api_calls,
                } => return Ok((*outcome, episode_api_calls)),
                other => {
                    self.discard_worker();
                    return Err(Stop::Protocol(format!("it replied {other:?}")));
                }
            }
        }
    }

    /// Ends the current worker and says why it ended.
    fn kill_worker(&mut self, for_time: bool) -> Stop {
        match self.worker.take() {
            Some(worker) => Stop::Died(worker.death(for_time)),
            None => Stop::Lost,
        }
    }

    /// Ends the current worker without asking why.
    fn discard_worker(&mut self) {
        if let Some(worker) = self.worker.take() {
            let _ = worker.death(false);
        }
    }

    /// `RLIMIT_AS` of this sandbox's workers: their evaluation stack plus the memory
    /// limit.
    fn address_space(&self) -> u64 {
        let stack = eval_stack_bytes(self.limits.max_heap_bytes) as u64;
        stack.saturating_add(self.limits.max_process_memory_bytes as u64)
    }

    /// The error an execution stopped by `stop` ends with.
    fn stop_error(&self, stop: Stop, start: Instant) -> ExecError {
        let elapsed = start.elapsed().as_millis();
        let kind = match &stop {
            Stop::Died(Death::Limit(limit)) => ExecErrorKind::Limit(*limit),
            _ => ExecErrorKind::Internal,
        };
        let message = format!(
            "your code was stopped after {elapsed} ms: {}. The sandbox was restarted: variables \
             and functions defined in earlier turns are gone (library skills are loaded again)",
            stop.describe(&self.limits)
        );
        ExecError::bare(kind, message)
    }
}

impl Drop for WorkerSandbox {
    fn drop(&mut self) {
        if let Some(worker) = self.worker.take() {
            give_back(worker);
        }
    }
}

/// Why an execution ended without an outcome from its worker.
enum Stop {
    /// The worker died or was killed.
    Died(Death),
    /// The worker broke the protocol.
    Protocol(String),
    /// No worker could be started.
    CannotStart(String),
    /// The worker went missing mid-conversation.
    Lost,
}

impl Stop {
    fn describe(&self, limits: &Limits) -> String {
        match self {
            Stop::Died(Death::Limit(limit)) => limit.describe(limits),
            Stop::Died(Death::Crash(how)) => format!("the sandbox process crashed ({how})"),
            Stop::Protocol(what) => format!("the sandbox process misbehaved ({what})"),
            Stop::CannotStart(why) => format!("no sandbox process could be started ({why})"),
            Stop::Lost => "the sandbox process was lost".to_owned(),
        }
    }
}

/// `code`, or when it is longer than `max_code_bytes`, its shortest prefix (ending on
/// a character boundary) that is still longer: enough for the worker to refuse it with
/// the size limit's error, as the in-process sandbox does, without sending all of it.
fn bounded_code(code: &str, max_code_bytes: usize) -> &str {
    if code.len() <= max_code_bytes {
        return code;
    }
    let end = (max_code_bytes + 1..=code.len())
        .find(|&end| code.is_char_boundary(end))
        .unwrap_or(code.len());
    &code[..end]
}

/// Every API signature `host` publishes, app by app.
fn api_specs(host: &dyn ApiHost) -> impl Iterator<Item = &ApiSpec> {
    host.app_names().into_iter().flat_map(move |app| {
        host.api_names(&app)
            .into_iter()
            .filter_map(move |api| host.spec(&app, &api))
    })
}
