//! [`ExecContext`]: the state of one execution that built-in functions and the
//! statement hook share (limits, lent host, printed output, API calls, call trace), and
//! [`Output`], the truncating buffer behind `print`.
// `#[derive(ProvidesStaticType)]` implements starlark's `unsafe trait` of that name
// (a type-id marker), which the crate's `deny(unsafe_code)` counts; no unsafe code is
// written here.
#![allow(unsafe_code)]

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use starlark::eval::Evaluator;
use starlark::values::ProvidesStaticType;

use super::api::ApiCall;
use super::clock::CpuClock;
use super::error::ExecErrorKind;
use super::host_slot::HostSlot;
use super::limits::Limits;
use super::trace::{CallTrace, FileTable};

/// Everything one execution's built-ins and hook need; reached from built-ins through
/// `Evaluator::extra`.
#[derive(ProvidesStaticType)]
pub(crate) struct ExecContext {
    /// The limits in force.
    pub limits: Limits,
    /// The host agent code's API calls go to.
    pub host: HostSlot,
    /// The session's files, for tracing.
    pub files: Rc<RefCell<FileTable>>,
    /// What the statements revealed about top-level functions.
    pub trace: RefCell<CallTrace>,
    /// Printed output.
    pub output: RefCell<Output>,
    /// API calls made, in order, failed attempts included.
    pub api_calls: RefCell<Vec<ApiCall>>,
    /// API calls the episode made before this execution.
    pub episode_calls_before: u32,
    /// The kind and message of the error sandbox code raised, if it raised one (the
    /// interpreter may report a different error after it, e.g. its own cancel check).
    pub failure: Cell<Option<(ExecErrorKind, String)>>,
    /// The CPU time the execution has spent, against [`Limits::cpu_time`].
    pub cpu: CpuClock,
    /// Ticks charged by built-ins for the work their inputs cost (see `work.rs`), on top
    /// of the interpreter's own.
    pub native_work: Cell<u64>,
    /// Bytes the session's dicts and sets hold outside the heap, about (see `work.rs`):
    /// what earlier executions left, plus the entries this one recorded. At the end of
    /// the execution, what the session carries into the next.
    pub off_heap_bytes: Cell<u64>,
}

impl ExecContext {
    /// A fresh context for one execution, in a session whose dicts and sets hold about
    /// `off_heap_bytes` outside the heap.
    pub(crate) fn new(
        limits: &Limits,
        files: Rc<RefCell<FileTable>>,
        episode_calls_before: u32,
        off_heap_bytes: u64,
    ) -> ExecContext {
        ExecContext {
            limits: limits.clone(),
            host: HostSlot::default(),
            files,
            trace: RefCell::new(CallTrace::default()),
            output: RefCell::new(Output::new(limits.max_output_bytes)),
            api_calls: RefCell::new(Vec::new()),
            episode_calls_before,
            failure: Cell::new(None),
            cpu: CpuClock::start(limits.cpu_time),
            native_work: Cell::new(0),
            off_heap_bytes: Cell::new(off_heap_bytes),
        }
    }

    /// Bytes the session's data holds, about: `heap_bytes` (the interpreter's heap) plus
    /// what its dicts and sets hold outside it.
    pub(crate) fn memory_held(&self, heap_bytes: usize) -> u64 {
        (heap_bytes as u64).saturating_add(self.off_heap_bytes.get())
    }

    /// The message of a CPU-time cancel, with the time the execution has spent.
    pub(crate) fn cpu_time_message(&self) -> String {
        format!(
            "execution cancelled after {} ms of CPU time (the limit is {} ms)",
            self.cpu.spent().as_millis(),
            self.limits.cpu_time.as_millis()
        )
    }

    /// The context of the execution `eval` runs.
    pub(crate) fn of<'a>(eval: &Evaluator<'_, 'a, '_>) -> starlark::Result<&'a ExecContext> {
        eval.extra
            .and_then(|extra| extra.downcast_ref::<ExecContext>())
            .ok_or_else(|| {
                starlark::Error::new_native(SandboxError(
                    "the sandbox context is missing".to_owned(),
                ))
            })
    }

    /// Records that sandbox code raises an error of `kind`, and builds the error.
    pub(crate) fn raise(&self, kind: ExecErrorKind, message: String) -> starlark::Error {
        self.failure.set(Some((kind, message.clone())));
        starlark::Error::new_native(SandboxError(message))
    }
}

/// An error raised by the sandbox's own built-ins.
#[derive(Debug)]
pub(crate) struct SandboxError(pub String);

impl std::fmt::Display for SandboxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SandboxError {}

/// Printed output, cut at a byte limit.
pub(crate) struct Output {
    text: String,
    max_bytes: usize,
    dropped_bytes: usize,
}

impl Output {
    /// An empty buffer keeping at most `max_bytes`.
    pub(crate) fn new(max_bytes: usize) -> Output {
        Output {
            text: String::new(),
            max_bytes,
            dropped_bytes: 0,
        }
    }

    /// Appends `s`, keeping only what fits (cut on a character boundary).
    pub(crate) fn push(&mut self, s: &str) {
        let room = self.max_bytes.saturating_sub(self.text.len());
        if s.len() <= room && self.dropped_bytes == 0 {
            self.text.push_str(s);
            return;
        }
        let mut cut = room.min(s.len());
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        if self.dropped_bytes == 0 {
            self.text.push_str(&s[..cut]);
            self.dropped_bytes += s.len() - cut;
        } else {
            self.dropped_bytes += s.len();
        }
    }

    /// The kept text, with a marker saying how much was cut, and whether anything was.
    pub(crate) fn finish(self) -> (String, bool) {
        let mut text = self.text;
        if self.dropped_bytes == 0 {
            return (text, false);
        }
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!(
            "[output truncated: {} more bytes not shown]\n",
            self.dropped_bytes
        ));
        (text, true)
    }
}

#[cfg(test)]
mod tests {
    use super::Output;

    #[test]
    fn output_is_cut_on_char_boundaries_with_a_marker() {
        let mut out = Output::new(5);
        out.push("abc");
        out.push("déf");
        out.push("ghi");
        let (text, truncated) = out.finish();
        assert!(truncated);
        assert_eq!(text, "abcd\n[output truncated: 6 more bytes not shown]\n");
    }

    #[test]
    fn short_output_is_kept_whole() {
        let mut out = Output::new(100);
        out.push("hello\n");
        assert_eq!(out.finish(), ("hello\n".to_owned(), false));
    }
}
