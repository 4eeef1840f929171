//! The worker side: a process that runs an [`Interpreter`] for its parent, reading
//! [`Request`]s on standard input and writing [`Reply`]s on standard output, with API
//! calls forwarded to the parent's host through [`ProxyHost`]. It sets its own
//! address-space limit first and a CPU-time limit before every execution.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, StdinLock};
use std::os::fd::AsFd;

use serde_json::{Map, Value};

use super::protocol::{FrameReader, FrameWriter, PipeError, Reply, Request};
use super::sys::{self, Resource};
use crate::sandbox::interpreter::Interpreter;
use crate::sandbox::{ApiError, ApiHost, ApiSpec, ExecError, ExecErrorKind, Limits};

/// Exit code of a worker whose parent spoke out of turn or whose pipes broke.
const EXIT_PROTOCOL: i32 = 3;

/// Runs the worker loop until the parent closes standard input; returns the exit code.
/// `address_space_bytes` is the worker's `RLIMIT_AS`.
pub(crate) fn serve(address_space_bytes: u64) -> i32 {
    if let Err(e) = sys::ignore_interrupts() {
        eprintln!("sandbox worker: cannot ignore SIGINT: {e}");
        return EXIT_PROTOCOL;
    }
    if let Err(e) = limit_process(address_space_bytes) {
        eprintln!("sandbox worker: cannot set its process limits: {e}");
        return EXIT_PROTOCOL;
    }
    let mut input = match FrameReader::new(io::stdin().lock()) {
        Ok(input) => input,
        Err(e) => {
            eprintln!("sandbox worker: cannot read its standard input: {e}");
            return EXIT_PROTOCOL;
        }
    };
    // Frames go straight to the pipe: standard output's own buffering is bypassed.
    let output = io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .and_then(|fd| FrameWriter::new(File::from(fd)));
    let mut output = match output {
        Ok(output) => output,
        Err(e) => {
            eprintln!("sandbox worker: cannot write its standard output: {e}");
            return EXIT_PROTOCOL;
        }
    };
    let mut interpreter: Option<Interpreter> = None;
    let mut specs = SpecTable::default();
    loop {
        let request = match input.read::<Request>(None) {
            Ok(request) => request,
            Err(PipeError::Closed) => return 0,
            Err(e) => {
                eprintln!("sandbox worker: {e}");
                return EXIT_PROTOCOL;
            }
        };
        let reply = match request {
            Request::Reset {
                limits,
                executions,
                episode_api_calls,
            } => {
                interpreter = Some(Interpreter::resume(*limits, executions, episode_api_calls));
                continue;
            }
            Request::LoadSkill { source } => Reply::Loaded(match interpreter.as_mut() {
                Some(interpreter) => interpreter.load_skill(&source),
                None => Err(no_session()),
            }),
            Request::Execute {
                code,
                specs: new_specs,
            } => {
                let Some(interpreter) = interpreter.as_mut() else {
                    eprintln!("sandbox worker: an execution before any reset");
                    return EXIT_PROTOCOL;
                };
                if let Some(new_specs) = new_specs {
                    specs = SpecTable::new(new_specs);
                }
                if let Err(e) = limit_cpu_time(interpreter.limits()) {
                    eprintln!("sandbox worker: cannot set its CPU-time limit: {e}");
                    return EXIT_PROTOCOL;
                }
                let mut host = ProxyHost {
                    specs: &specs,
                    input: &mut input,
                    output: &mut output,
                };
                let outcome = interpreter.execute(&code, &mut host);
                Reply::Executed {
                    outcome: Box::new(outcome),
                    episode_api_calls: interpreter.episode_api_calls(),
                }
            }
            Request::FunctionSource { function } => Reply::Source(
                interpreter
                    .as_ref()
                    .and_then(|interpreter| interpreter.function_source(&function)),
            ),
            Request::ApiResult(_) => {
                eprintln!("sandbox worker: an API result while no call was waiting");
                return EXIT_PROTOCOL;
            }
        };
        if let Err(e) = output.write(&reply, None) {
            eprintln!("sandbox worker: cannot reply: {e}");
            return EXIT_PROTOCOL;
        }
    }
}

/// The error of a request that needs a session before the first reset.
fn no_session() -> ExecError {
    ExecError::bare(
        ExecErrorKind::Internal,
        "the sandbox worker has no session yet".to_owned(),
    )
}

/// The API signatures the parent's host publishes, as the worker last received them.
#[derive(Default)]
struct SpecTable {
    specs: Vec<ApiSpec>,
    index: HashMap<String, HashMap<String, usize>>,
    apps: Vec<String>,
}

impl SpecTable {
    fn new(specs: Vec<ApiSpec>) -> SpecTable {
        let mut index: HashMap<String, HashMap<String, usize>> = HashMap::new();
        let mut apps = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            if !index.contains_key(&spec.app) {
                apps.push(spec.app.clone());
            }
            index
                .entry(spec.app.clone())
                .or_default()
                .insert(spec.name.clone(), i);
        }
        SpecTable { specs, index, apps }
    }
}

/// The parent's host as agent code in the worker sees it: signatures from the
/// [`SpecTable`], calls sent to the parent and answered by it.
struct ProxyHost<'a> {
    specs: &'a SpecTable,
    input: &'a mut FrameReader<StdinLock<'static>>,
    output: &'a mut FrameWriter<File>,
}

impl ApiHost for ProxyHost<'_> {
    fn spec(&self, app: &str, api: &str) -> Option<&ApiSpec> {
        let i = *self.specs.index.get(app)?.get(api)?;
        self.specs.specs.get(i)
    }

    fn app_names(&self) -> Vec<String> {
        self.specs.apps.clone()
    }

    fn api_names(&self, app: &str) -> Vec<String> {
        self.specs.index.get(app).map_or_else(Vec::new, |apis| {
            let mut order: Vec<(&usize, &String)> =
                apis.iter().map(|(name, i)| (i, name)).collect();
            order.sort();
            order.into_iter().map(|(_, name)| name.clone()).collect()
        })
    }

    fn call(&mut self, app: &str, api: &str, args: Map<String, Value>) -> Result<Value, ApiError> {
        let request = Reply::ApiCall {
            app: app.to_owned(),
            api: api.to_owned(),
            args,
        };
        if let Err(e) = self.output.write(&request, None) {
            eprintln!("sandbox worker: cannot send an API call: {e}");
            std::process::exit(EXIT_PROTOCOL);
        }
        match self.input.read::<Request>(None) {
            Ok(Request::ApiResult(result)) => result.map_err(ApiError::new),
            Ok(other) => {
                eprintln!("sandbox worker: expected an API result, got {other:?}");
                std::process::exit(EXIT_PROTOCOL);
            }
            Err(e) => {
                eprintln!("sandbox worker: no API result: {e}");
                std::process::exit(EXIT_PROTOCOL);
            }
        }
    }
}

/// The worker's lifetime limit: its address space. (It needs no signal on its parent's
/// death: the parent's end of its standard input closes then, and an idle worker exits
/// on that; a busy one runs into its CPU-time limit.)
fn limit_process(address_space_bytes: u64) -> io::Result<()> {
    sys::set_soft_limit(Resource::AddressSpace, address_space_bytes)
}

/// Allows the coming execution [`Limits::cpu_backstop`] (rounded up to seconds) of CPU
/// time on top of what the worker has used so far; past it the kernel stops the worker
/// with `SIGXCPU`.
fn limit_cpu_time(limits: &Limits) -> io::Result<()> {
    let budget = limits.cpu_backstop().as_secs_f64().ceil() as u64;
    sys::set_soft_limit(Resource::CpuTime, sys::cpu_seconds_used()? + budget)
}
