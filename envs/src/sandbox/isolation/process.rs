//! Worker processes: finding the program that serves as a worker
//! ([`serve_worker_if_asked`], [`worker_program`]), starting one ([`Worker::spawn`]),
//! telling why one died ([`Worker::death`]), and the pool that keeps idle workers
//! warm between episodes ([`take_idle`], [`give_back`]).

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use super::protocol::{FrameReader, FrameWriter};
use super::worker;
use crate::sandbox::{ApiSpec, LimitKind};

/// The first argument that turns a program into a sandbox worker.
pub const WORKER_ARG: &str = "--sage-sandbox-worker";

/// The environment variable that names the worker program explicitly.
pub const WORKER_ENV: &str = "SAGE_SANDBOX_WORKER";

/// The worker binary's name (built from `envs/src/bin/sage-sandbox-worker.rs`).
const WORKER_BIN: &str = "sage-sandbox-worker";

/// Bytes of a dead worker's standard error kept to tell why it died.
const MAX_STDERR_BYTES: u64 = 16 << 10;

/// Set once the running program has called [`serve_worker_if_asked`]: it can serve as
/// its own worker.
static SERVES_AS_WORKER: AtomicBool = AtomicBool::new(false);

/// Makes the running program usable as its own sandbox worker. Call it first thing in
/// `main`: when the program was started as a worker (first argument [`WORKER_ARG`]) it
/// serves its parent and exits; otherwise it returns at once, and sandboxes created
/// later start copies of this program as their workers.
pub fn serve_worker_if_asked() {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() == Some(WORKER_ARG.as_ref()) {
        let address_space = args
            .next()
            .and_then(|a| a.into_string().ok())
            .and_then(|a| a.parse::<u64>().ok());
        let code = match address_space {
            Some(bytes) => worker::serve(bytes),
            None => {
                eprintln!("sandbox worker: expected `{WORKER_ARG} ADDRESS_SPACE_BYTES`");
                2
            }
        };
        std::process::exit(code);
    }
    SERVES_AS_WORKER.store(true, Ordering::Relaxed);
}

/// The program workers run: `$SAGE_SANDBOX_WORKER`, else the running program if it
/// called [`serve_worker_if_asked`], else a `sage-sandbox-worker` binary beside it (or
/// one directory up, where cargo puts test binaries in `deps/`). `None` when there is
/// none.
pub fn worker_program() -> Option<PathBuf> {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    if let Some(path) = std::env::var_os(WORKER_ENV).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let exe = std::env::current_exe().ok()?;
    if SERVES_AS_WORKER.load(Ordering::Relaxed) {
        return Some(exe);
    }
    FOUND
        .get_or_init(|| {
            let dir = exe.parent()?;
            let mut dirs = vec![dir.to_path_buf()];
            if dir.file_name().is_some_and(|name| name == "deps") {
                dirs.extend(dir.parent().map(PathBuf::from));
            }
            dirs.into_iter()
                .map(|dir| dir.join(WORKER_BIN))
                .find(|path| path.is_file())
        })
        .clone()
}

/// A live worker process and the two pipes the caller talks to it through.
pub(crate) struct Worker {
    child: Child,
    /// The worker's standard input: requests.
    pub input: FrameWriter<ChildStdin>,
    /// The worker's standard output: replies.
    pub output: FrameReader<ChildStdout>,
    /// The program it runs and its address-space limit: what the pool matches on.
    key: (PathBuf, u64),
    /// The API signatures the worker was last sent.
    pub specs: Option<Vec<ApiSpec>>,
}

/// Why a worker stopped, as the agent is told.
pub(crate) enum Death {
    /// A limit of the process: memory or CPU time.
    Limit(LimitKind),
    /// Anything else (a crash of the interpreter, a broken pipe): the description.
    Crash(String),
}

impl Worker {
    /// Starts `program` as a worker limited to `address_space` bytes; no shell is
    /// involved.
    pub(crate) fn spawn(program: PathBuf, address_space: u64) -> std::io::Result<Worker> {
        let mut child = Command::new(&program)
            .arg(WORKER_ARG)
            .arg(address_space.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let (Some(input), Some(output)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::other("the worker's pipes are missing"));
        };
        let pipes =
            FrameReader::new(output).and_then(|output| Ok((FrameWriter::new(input)?, output)));
        let (input, output) = match pipes {
            Ok(pipes) => pipes,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };
        Ok(Worker {
            child,
            input,
            output,
            key: (program, address_space),
            specs: None,
        })
    }

    /// Kills the worker (if it still runs) and tells why it ended. `killed_for_time`:
    /// the caller's kill timer fired.
    pub(crate) fn death(mut self, killed_for_time: bool) -> Death {
        let _ = self.child.kill();
        let status = self.child.wait();
        if killed_for_time {
            return Death::Limit(LimitKind::WallClock);
        }
        let mut stderr = String::new();
        if let Some(pipe) = self.child.stderr.take() {
            let _ = pipe.take(MAX_STDERR_BYTES).read_to_string(&mut stderr);
        }
        match status {
            Ok(status) => describe_exit(status, &stderr),
            Err(e) => Death::Crash(format!("its exit status is unknown ({e})")),
        }
    }

    /// Whether the process still runs.
    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Ends the process.
    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What an exit status (and the standard error before it) says about a worker's end.
fn describe_exit(status: ExitStatus, stderr: &str) -> Death {
    if stderr.contains("memory allocation of") || stderr.contains("failed to allocate") {
        return Death::Limit(LimitKind::ProcessMemory);
    }
    match status.signal() {
        Some(libc::SIGXCPU) => Death::Limit(LimitKind::ProcessCpuTime),
        Some(signal) => Death::Crash(format!("it was ended by signal {signal}")),
        None => Death::Crash(format!(
            "it exited with code {}",
            status.code().unwrap_or(-1)
        )),
    }
}

/// Idle workers, ready for the next episode.
static POOL: Mutex<Vec<Worker>> = Mutex::new(Vec::new());

/// Idle workers kept at most: an RL step holds one live session per rollout (chains x
/// rollouts, 32-128 in the shipped configurations), and its workers wait here for the
/// next step instead of being started again. An idle worker costs a few MiB.
const POOL_CAPACITY: usize = 256;

/// An idle worker of `program` with this address-space limit, if the pool has one.
pub(crate) fn take_idle(program: &Path, address_space: u64) -> Option<Worker> {
    let mut pool = POOL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    while let Some(i) = pool
        .iter()
        .position(|w| w.key.0 == program && w.key.1 == address_space)
    {
        let mut worker = pool.swap_remove(i);
        if worker.alive() {
            return Some(worker);
        }
        worker.kill();
    }
    None
}

/// Returns a healthy worker to the pool (or ends it when the pool is full).
pub(crate) fn give_back(worker: Worker) {
    let mut pool = POOL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if pool.len() < POOL_CAPACITY {
        pool.push(worker);
    } else {
        drop(pool);
        worker.kill();
    }
}
