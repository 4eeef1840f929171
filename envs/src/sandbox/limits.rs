//! The resource limits of the sandbox ([`Limits`]) and the names of the limits an
//! execution can hit ([`LimitKind`]).
//!
//! Every limit except [`Limits::wall_clock`] is deterministic: the same code against the
//! same host hits the same limit at the same point on every run.

use std::fmt;
use std::time::Duration;

/// Resource limits applied to every execution of a [`Sandbox`](super::Sandbox).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Ticks one execution may use; a tick is one function call or one loop iteration.
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
    /// Elements a `range()` may have and elements (or characters) a repetition
    /// (`"ab" * n`, `[x] * n`) may produce.
    pub max_sequence_len: usize,
    /// Nesting depth of data passed to or returned from an API, or converted to text
    /// (`print`, `str`, `repr`, `%`); a value converted to text may also spell out at
    /// most [`Limits::max_sequence_len`] elements.
    pub max_value_depth: usize,
    /// Last-resort cancel of one execution after this much wall-clock time; the other
    /// limits are meant to stop ordinary runaway code long before it.
    pub wall_clock: Duration,
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
            max_sequence_len: 1_000_000,
            max_value_depth: 100,
            wall_clock: Duration::from_secs(1),
        }
    }
}

/// Which limit an execution exceeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
    /// [`Limits::max_sequence_len`].
    SequenceLength,
    /// [`Limits::max_value_depth`].
    ValueDepth,
    /// [`Limits::wall_clock`].
    WallClock,
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
            LimitKind::SequenceLength => {
                format!("sequence longer than {} elements", limits.max_sequence_len)
            }
            LimitKind::ValueDepth => {
                format!("data nested deeper than {} levels", limits.max_value_depth)
            }
            LimitKind::WallClock => format!(
                "execution cancelled after {} ms of wall-clock time",
                limits.wall_clock.as_millis()
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
            LimitKind::SequenceLength => "sequence length",
            LimitKind::ValueDepth => "value depth",
            LimitKind::WallClock => "wall clock",
        };
        f.write_str(name)
    }
}
