//! The resource limits of the sandbox ([`Limits`]) and the names of the limits an
//! execution can hit ([`LimitKind`]).
//!
//! Every limit except the two on time ([`Limits::cpu_time`], [`Limits::wall_clock`]) and
//! the worker process's own ([`Limits::max_process_memory_bytes`], the kernel's CPU-time
//! backstop of [`Limits::cpu_backstop`]) is deterministic: the same code against the same
//! host hits the same limit at the same point on every run. The time limits count the
//! work the execution does, not how busy the machine is, and the process limits only bind
//! on code that escapes the deterministic ones (work or memory inside a single built-in
//! call).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Resource limits applied to every execution of a [`Sandbox`](super::Sandbox).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Ticks one execution may use; a tick is one function call or one loop iteration
    /// (`+`, `*`, `%`, `<<` and the comparisons are checked built-in calls, a tick each).
    pub max_ticks: u64,
    /// Bytes the session's Starlark heap may hold, checked before every statement and
    /// every 1,000 ticks (values persist across executions, so this bounds the episode).
    /// Executions run on a stack of 16 bytes per heap byte (at least 256 MiB), reserved
    /// but only used as deep as the code and data go. A single string larger than this
    /// (from `replace`, `join`, `format`, an f-string, `%` or a conversion to text) is
    /// refused before it is built.
    pub max_heap_bytes: usize,
    /// Nested function calls (Starlark and built-in) one execution may reach.
    pub max_call_depth: usize,
    /// API calls one execution may make (every attempt counts, failed ones included).
    pub max_api_calls_per_execution: u32,
    /// API calls the whole episode (all executions since the last reset) may make.
    pub max_api_calls_per_episode: u32,
    /// Bytes of printed output kept per execution; the rest is cut and a marker added.
    pub max_output_bytes: usize,
    /// Bytes of source code one execution or one skill may have.
    pub max_code_bytes: usize,
    /// Bytes one argument of an API call (`complete_task`'s answer among them) may take
    /// as text, measured before it is converted or sent anywhere. World data is a few
    /// KiB; this keeps a call's message to the world small whatever the heap holds.
    pub max_api_value_bytes: usize,
    /// Elements a `range()` may have and elements (or characters) a repetition
    /// (`"ab" * n`, `[x] * n`) may produce.
    pub max_sequence_len: usize,
    /// Nesting depth of data passed to or returned from an API, or converted to text
    /// (`print`, `str`, `repr`, `%`); a value converted to text may also spell out at
    /// most [`Limits::max_sequence_len`] elements.
    pub max_value_depth: usize,
    /// Bits an integer built by `*` or `<<` may have; `int()` of a string also refuses
    /// text longer than [`Limits::max_int_digits`]. Bounds the work of big-integer
    /// arithmetic, which no tick counts.
    pub max_int_bits: u64,
    /// Characters of text `int()` converts (CPython caps it at 4,300 digits too).
    pub max_int_digits: usize,
    /// CPU time the thread running one execution may spend on it before the interpreter
    /// cancels it; the deterministic limits are meant to stop ordinary runaway code long
    /// before it. Time the thread spends waiting does not count: for a core on a loaded
    /// machine, stopped by a signal, or (under process isolation) for the caller's answer
    /// to an API call. So the same code is cancelled at about the same point however busy
    /// the machine is. (Where the platform has no per-thread CPU clock, elapsed time.)
    pub cpu_time: Duration,
    /// How long the caller waits for a worker process to finish one execution before it
    /// kills the worker (process isolation only). A worker that computes is stopped by
    /// [`Limits::cpu_time`] and then by the kernel ([`Limits::cpu_backstop`]); this
    /// catches one that stops answering without computing. It counts the time the caller
    /// spends waiting on the worker, so it is set far above the CPU limit: a loaded
    /// machine stretches a second of CPU into many. The caller's own time answering the
    /// worker's API calls does not count, nor time in which the caller did not run (a
    /// run paused with `SIGSTOP`, a thread starved of a CPU for over a second).
    pub wall_clock: Duration,
    /// Address space a sandbox worker process may use besides its evaluation stack (the
    /// program itself, the interpreter's heap and any data outside it); a worker that
    /// needs more dies and its execution ends with [`LimitKind::ProcessMemory`]. Applies
    /// to process isolation only.
    pub max_process_memory_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_ticks: 1_000_000,
            max_heap_bytes: 64 << 20,
            max_call_depth: 100,
            max_api_calls_per_execution: 1_000,
            max_api_calls_per_episode: 10_000,
            max_output_bytes: 8 << 10,
            max_code_bytes: 64 << 10,
            max_api_value_bytes: 1 << 20,
            max_sequence_len: 1_000_000,
            max_value_depth: 100,
            max_int_bits: 4096,
            max_int_digits: 4300,
            cpu_time: Duration::from_secs(1),
            wall_clock: Duration::from_secs(60),
            max_process_memory_bytes: 1 << 30,
        }
    }
}

impl Limits {
    /// CPU time a worker process may use on one execution before the kernel stops it
    /// (`RLIMIT_CPU`, rounded up to whole seconds): twice [`Limits::cpu_time`] and at
    /// least one second more, so the interpreter's own cancel always gets its chance
    /// first. It binds on work inside a single built-in call, which the interpreter
    /// cannot interrupt.
    pub fn cpu_backstop(&self) -> Duration {
        self.cpu_time + self.cpu_time.max(Duration::from_secs(1))
    }
}

/// Which limit an execution exceeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LimitKind {
    /// [`Limits::max_ticks`].
    Ticks,
    /// [`Limits::max_heap_bytes`].
    Heap,
    /// [`Limits::max_call_depth`].
    CallDepth,
    /// [`Limits::max_api_calls_per_execution`].
    ApiCallsPerExecution,
    /// [`Limits::max_api_calls_per_episode`].
    ApiCallsPerEpisode,
    /// [`Limits::max_code_bytes`].
    CodeSize,
    /// [`Limits::max_api_value_bytes`].
    ApiValueSize,
    /// [`Limits::max_sequence_len`].
    SequenceLength,
    /// [`Limits::max_value_depth`].
    ValueDepth,
    /// [`Limits::max_int_bits`] or [`Limits::max_int_digits`].
    IntegerSize,
    /// [`Limits::cpu_time`]: the interpreter cancelled the execution.
    CpuTime,
    /// [`Limits::wall_clock`]: the worker process did not answer in time and was killed.
    WallClock,
    /// [`Limits::max_process_memory_bytes`]: the worker process ran out of memory.
    ProcessMemory,
    /// [`Limits::cpu_backstop`]: the kernel stopped the worker process.
    ProcessCpuTime,
}

impl LimitKind {
    /// A short description of the limit, for error messages.
    pub fn describe(self, limits: &Limits) -> String {
        match self {
            LimitKind::Ticks => format!(
                "execution budget of {} ticks (function calls and loop iterations) exceeded",
                limits.max_ticks
            ),
            LimitKind::Heap => format!("memory limit of {} bytes exceeded", limits.max_heap_bytes),
            LimitKind::CallDepth => format!(
                "call stack too deep (more than {} nested calls)",
                limits.max_call_depth
            ),
            LimitKind::ApiCallsPerExecution => format!(
                "more than {} API calls in one execution",
                limits.max_api_calls_per_execution
            ),
            LimitKind::ApiCallsPerEpisode => format!(
                "more than {} API calls in this episode",
                limits.max_api_calls_per_episode
            ),
            LimitKind::CodeSize => format!("code longer than {} bytes", limits.max_code_bytes),
            LimitKind::ApiValueSize => format!(
                "an API argument larger than {} bytes",
                limits.max_api_value_bytes
            ),
            LimitKind::SequenceLength => {
                format!("sequence longer than {} elements", limits.max_sequence_len)
            }
            LimitKind::ValueDepth => {
                format!("data nested deeper than {} levels", limits.max_value_depth)
            }
            LimitKind::IntegerSize => format!(
                "integer larger than {} bits (or text of more than {} digits given to int())",
                limits.max_int_bits, limits.max_int_digits
            ),
            LimitKind::CpuTime => format!(
                "execution cancelled after {} ms of CPU time",
                limits.cpu_time.as_millis()
            ),
            LimitKind::WallClock => format!(
                "the sandbox process gave no answer within {} ms and was killed",
                limits.wall_clock.as_millis()
            ),
            LimitKind::ProcessMemory => format!(
                "memory limit of the sandbox process ({} MiB) exceeded",
                limits.max_process_memory_bytes >> 20
            ),
            LimitKind::ProcessCpuTime => format!(
                "CPU time limit of the sandbox process ({} s per execution) exceeded",
                limits.cpu_backstop().as_secs_f64().ceil()
            ),
        }
    }
}

impl fmt::Display for LimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            LimitKind::Ticks => "ticks",
            LimitKind::Heap => "heap",
            LimitKind::CallDepth => "call depth",
            LimitKind::ApiCallsPerExecution => "API calls per execution",
            LimitKind::ApiCallsPerEpisode => "API calls per episode",
            LimitKind::CodeSize => "code size",
            LimitKind::ApiValueSize => "API argument size",
            LimitKind::SequenceLength => "sequence length",
            LimitKind::ValueDepth => "value depth",
            LimitKind::IntegerSize => "integer size",
            LimitKind::CpuTime => "CPU time",
            LimitKind::WallClock => "wall clock",
            LimitKind::ProcessMemory => "process memory",
            LimitKind::ProcessCpuTime => "process CPU time",
        };
        f.write_str(name)
    }
}
