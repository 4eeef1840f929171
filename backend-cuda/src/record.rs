//! Repeated steps as CUDA graphs ([`Kernels::repeated_step`]): a decoding step launches
//! the same few hundred kernels and GEMMs every time, with only the contents of a few
//! uploaded tables (token ids, cache lengths) changing, so the host's time per launch,
//! not the GPU's, bounds it. The backend records such a step once as a graph and
//! replays it with one launch.
//!
//! Each call first **traces** the step: it runs with every launch, GEMM and device copy
//! written down as words (kernel, grid, arguments) instead of queued, while its uploads
//! of host tables go to the stream as usual. When the words equal a recorded graph's,
//! that graph is launched: the same calls on the same addresses with the same scalars,
//! reading the tables just uploaded. Otherwise the shadows' record is put back as it was
//! before the trace, and the step is **captured** from the stream into a new graph,
//! which is kept and launched. A step that needs what a graph cannot hold (a device
//! allocation or free, a read back to the host, an upload inside a capture, two uploads
//! to one table) is refused while tracing or capturing, and then runs as ordinary
//! launches: the first step of a new cache, for instance, allocates the kept bf16 copies
//! its later steps reuse. Refusals happen before anything is allocated or freed, so
//! putting the shadows' flags back is all a retry needs.
//!
//! [`Kernels::repeated_step`]: sage_transformer::Kernels::repeated_step

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::CudaGraph;

use crate::error::CudaError;
use crate::CudaBackend;

/// Graphs kept at once: one per distinct step (batch size, split count of the
/// decoding attention); the oldest goes first.
const MAX_GRAPHS: usize = 8;
/// Failed captures in a row after which a backend stops trying.
const MAX_FAILURES_IN_ROW: u32 = 3;

/// What the stream does with the calls it is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Calls are queued (the ordinary way).
    Eager,
    /// Calls are written down, not queued; uploads are queued.
    Tracing,
    /// The stream is being captured into a graph; calls are written down too.
    Capturing,
}

/// The calls of a step being traced or captured, and why it cannot be recorded.
pub(crate) struct Recorder {
    mode: Cell<Mode>,
    /// Every call so far, as words; equal words mean equal launches.
    calls: RefCell<Vec<u64>>,
    /// Device ranges (address, bytes) uploaded during this trace.
    uploads: RefCell<Vec<(u64, usize)>>,
    /// Why this step cannot be recorded, the first reason met.
    refusal: RefCell<Option<String>>,
}

impl Default for Recorder {
    fn default() -> Recorder {
        Recorder {
            mode: Cell::new(Mode::Eager),
            calls: RefCell::new(Vec::new()),
            uploads: RefCell::new(Vec::new()),
            refusal: RefCell::new(None),
        }
    }
}

/// What a trace or capture wrote down.
struct Trace {
    calls: Vec<u64>,
    refusal: Option<String>,
}

impl Recorder {
    fn start(&self, mode: Mode) {
        self.calls.borrow_mut().clear();
        self.uploads.borrow_mut().clear();
        *self.refusal.borrow_mut() = None;
        self.mode.set(mode);
    }

    fn finish(&self) -> Trace {
        self.mode.set(Mode::Eager);
        self.uploads.borrow_mut().clear();
        Trace {
            calls: std::mem::take(&mut *self.calls.borrow_mut()),
            refusal: self.refusal.borrow_mut().take(),
        }
    }

    /// Writes down one call (a kernel, GEMM or device copy, named by `name` and
    /// described by `words`) unless the stream is eager; true when the call must not
    /// be queued (a trace).
    pub(crate) fn skips(&self, name: &str, words: impl IntoIterator<Item = u64>) -> bool {
        let mode = self.mode.get();
        if mode == Mode::Eager {
            return false;
        }
        let mut calls = self.calls.borrow_mut();
        calls.push(name_word(name));
        let count_at = calls.len();
        calls.push(0);
        calls.extend(words);
        calls[count_at] = (calls.len() - count_at - 1) as u64;
        mode == Mode::Tracing
    }

    /// Refuses `what` (an allocation, a free, a read back) unless the stream is eager.
    pub(crate) fn allow(&self, what: &str) -> Result<(), CudaError> {
        match self.mode.get() {
            Mode::Eager => Ok(()),
            _ => Err(self.refuse(format!("{what} inside the step"))),
        }
    }

    /// Checks an upload of `bytes` to device address `dst`: queued as usual while
    /// tracing (before the graph that reads it), unless it overlaps one already made in
    /// this trace (a graph would see only the last); refused while capturing.
    pub(crate) fn allow_upload(&self, dst: u64, bytes: usize) -> Result<(), CudaError> {
        match self.mode.get() {
            Mode::Eager => Ok(()),
            Mode::Capturing => Err(self.refuse("an upload from the host while capturing".into())),
            Mode::Tracing => {
                let mut uploads = self.uploads.borrow_mut();
                if uploads
                    .iter()
                    .any(|&(at, len)| at < dst + bytes as u64 && dst < at + len as u64)
                {
                    drop(uploads);
                    return Err(self.refuse("two uploads to one device range".into()));
                }
                uploads.push((dst, bytes));
                Ok(())
            }
        }
    }

    /// Notes a failed call while capturing (the capture is then abandoned), so that
    /// its reason is what the statistics report; returns the error.
    pub(crate) fn failed(&self, what: &str, error: impl Into<CudaError>) -> CudaError {
        let error = error.into();
        if self.mode.get() == Mode::Capturing {
            self.refuse(format!("{what} failed while capturing: {error}"));
        }
        error
    }

    fn refuse(&self, reason: String) -> CudaError {
        let mut refusal = self.refusal.borrow_mut();
        if refusal.is_none() {
            *refusal = Some(reason.clone());
        }
        CudaError::StepNotRecorded(reason)
    }
}

/// A kernel's or call's name as one word (FNV-1a).
fn name_word(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A recorded step: its calls as words and its graph.
struct Recording {
    calls: Vec<u64>,
    graph: CudaGraph,
}

// SAFETY: a graph is not internally synchronized, so it must not be used from two
// threads at once; it is only ever used through `&mut CudaBackend`, which is exclusive,
// and moving it to another thread with the backend is allowed.
unsafe impl Send for Recording {}

/// How the repeated steps of a backend ran, for benchmarks and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepGraphStats {
    /// Graphs captured (each also ran its step).
    pub captured: u64,
    /// Steps run by launching a graph recorded earlier.
    pub replayed: u64,
    /// Steps run as ordinary launches (recording off, refused, or failed).
    pub eager: u64,
    /// Steps traced (their calls walked on the host, no kernel launched, to find a graph
    /// that launches the same): every step while recording is on.
    pub traced: u64,
    /// Host time spent tracing them: what a replayed step costs the host before its one
    /// launch, beside the GPU's time for the graph.
    pub tracing: Duration,
    /// Whether recording is on.
    pub enabled: bool,
    /// Why the last step that was not replayed or captured could not be, if one was not.
    pub last_refusal: Option<String>,
}

/// The graphs of a backend's repeated steps and how its steps ran.
pub(crate) struct StepGraphs {
    recordings: VecDeque<Recording>,
    stats: StepGraphStats,
    failures_in_row: u32,
}

impl StepGraphs {
    /// No graphs yet; recording `enabled` or not.
    pub(crate) fn new(enabled: bool) -> StepGraphs {
        StepGraphs {
            recordings: VecDeque::new(),
            stats: StepGraphStats {
                enabled,
                ..StepGraphStats::default()
            },
            failures_in_row: 0,
        }
    }

    /// Turns recording on or off; off drops the graphs.
    pub(crate) fn set_enabled(&mut self, enabled: bool) {
        if !enabled {
            self.recordings.clear();
        }
        self.failures_in_row = 0;
        self.stats.enabled = enabled;
    }

    /// How the steps ran so far.
    pub(crate) fn stats(&self) -> StepGraphStats {
        self.stats.clone()
    }

    fn find(&self, calls: &[u64]) -> Option<&CudaGraph> {
        self.recordings
            .iter()
            .find(|r| r.calls == calls)
            .map(|r| &r.graph)
    }

    fn keep(&mut self, calls: Vec<u64>, graph: CudaGraph) {
        if self.recordings.len() == MAX_GRAPHS {
            self.recordings.pop_front();
        }
        self.recordings.push_back(Recording { calls, graph });
    }

    fn ran_eagerly(&mut self, reason: Option<String>) {
        self.stats.eager += 1;
        if reason.is_some() {
            self.stats.last_refusal = reason;
        }
    }
}

impl CudaBackend {
    /// [`Kernels::repeated_step`](sage_transformer::Kernels::repeated_step) with graphs:
    /// trace, then replay a matching graph, or capture a new one, or run eagerly (see
    /// the module's doc).
    pub(crate) fn run_repeated_step<E>(
        &mut self,
        step: &mut dyn FnMut(&mut CudaBackend) -> Result<(), E>,
    ) -> Result<Result<(), E>, CudaError> {
        if !self.graphs.stats.enabled {
            self.graphs.ran_eagerly(None);
            return Ok(step(self));
        }
        let flags = self.store.shadows.borrow().flags();
        self.gpu.recorder.start(Mode::Tracing);
        let started = Instant::now();
        let traced = step(self);
        self.graphs.stats.tracing += started.elapsed();
        self.graphs.stats.traced += 1;
        let trace = self.gpu.recorder.finish();
        let matched = match (&trace.refusal, &traced) {
            (None, Ok(())) => self.graphs.find(&trace.calls),
            _ => None,
        };
        if let Some(graph) = matched {
            // The trace left the shadows' flags as the graph's casts leave them.
            if let Err(e) = graph.launch() {
                self.store.shadows.get_mut().restore(&flags);
                return Err(e.into());
            }
            self.graphs.stats.replayed += 1;
            return Ok(Ok(()));
        }
        // Nothing the trace counted as cast was: its flags go back before any retry.
        self.store.shadows.get_mut().restore(&flags);
        if trace.refusal.is_some() {
            self.graphs.ran_eagerly(trace.refusal);
            return Ok(step(self));
        }
        if traced.is_err() {
            // The step's own error (a contract check).
            return Ok(traced);
        }
        let outcome = self.capture(step).and_then(|(calls, graph)| {
            graph
                .launch()
                .map(|()| (calls, graph))
                .map_err(|e| format!("launching the captured graph: {e}"))
        });
        match outcome {
            Ok((calls, graph)) => {
                self.graphs.keep(calls, graph);
                self.graphs.stats.captured += 1;
                self.graphs.failures_in_row = 0;
                Ok(Ok(()))
            }
            Err(reason) => {
                self.store.shadows.get_mut().restore(&flags);
                self.graphs.failures_in_row += 1;
                if self.graphs.failures_in_row >= MAX_FAILURES_IN_ROW {
                    self.graphs.set_enabled(false);
                }
                self.graphs.ran_eagerly(Some(reason));
                Ok(step(self))
            }
        }
    }

    /// Captures one run of `step` from the idle stream into a graph, or says why not.
    fn capture<E>(
        &mut self,
        step: &mut dyn FnMut(&mut CudaBackend) -> Result<(), E>,
    ) -> Result<(Vec<u64>, CudaGraph), String> {
        let stream = self.gpu.stream.clone();
        stream
            .synchronize()
            .and_then(|()| {
                stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            })
            .map_err(|e| format!("starting a capture: {e}"))?;
        self.gpu.recorder.start(Mode::Capturing);
        let ran = step(self);
        let capture = self.gpu.recorder.finish();
        // The graph holds kernel, GEMM and copy nodes only: no allocation for the
        // flag to free.
        let graph = stream
            .end_capture(CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
        if let Some(reason) = capture.refusal {
            return Err(reason);
        }
        if ran.is_err() {
            return Err("the step failed while capturing".into());
        }
        match graph {
            Ok(Some(graph)) => Ok((capture.calls, graph)),
            Ok(None) => Err("the capture produced no graph".into()),
            Err(e) => Err(format!("ending the capture: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_writes_calls_down_and_skips_them() {
        let recorder = Recorder::default();
        assert!(!recorder.skips("fill_f32", [1, 2]), "eager calls run");
        recorder.start(Mode::Tracing);
        assert!(recorder.skips("fill_f32", [1, 2]));
        assert!(recorder.skips("matmul", [3]));
        let first = recorder.finish();
        assert_eq!(first.refusal, None);
        recorder.start(Mode::Capturing);
        assert!(
            !recorder.skips("fill_f32", [1, 2]),
            "captured calls are queued"
        );
        assert!(!recorder.skips("matmul", [3]));
        assert_eq!(
            recorder.finish().calls,
            first.calls,
            "the same calls, the same words"
        );
        recorder.start(Mode::Tracing);
        recorder.skips("fill_f32", [1, 2]);
        recorder.skips("matmul", [4]);
        assert_ne!(recorder.finish().calls, first.calls, "one argument differs");
        recorder.start(Mode::Tracing);
        recorder.skips("fill_f32", [1]);
        recorder.skips("matmul", [2, 3]);
        assert_ne!(
            recorder.finish().calls,
            first.calls,
            "the same words, split otherwise"
        );
        assert_eq!(recorder.mode.get(), Mode::Eager);
    }

    #[test]
    fn what_a_graph_cannot_hold_is_refused_with_its_reason() {
        let recorder = Recorder::default();
        assert_eq!(recorder.allow("a device allocation"), Ok(()));
        assert_eq!(recorder.allow_upload(0x1000, 64), Ok(()));
        recorder.start(Mode::Tracing);
        assert_eq!(recorder.allow_upload(0x1000, 64), Ok(()));
        assert_eq!(recorder.allow_upload(0x1040, 64), Ok(()), "the next range");
        assert!(
            recorder.allow_upload(0x1020, 8).is_err(),
            "overlaps the first"
        );
        assert!(recorder.allow("a device allocation").is_err());
        let trace = recorder.finish();
        assert_eq!(
            trace.refusal.as_deref(),
            Some("two uploads to one device range"),
            "the first reason is kept"
        );
        recorder.start(Mode::Capturing);
        assert!(recorder.allow_upload(0x1000, 64).is_err());
        recorder.failed("matmul", CudaError::Blas("not supported".into()));
        assert_eq!(
            recorder.finish().refusal.as_deref(),
            Some("an upload from the host while capturing")
        );
        recorder.start(Mode::Capturing);
        recorder.failed("matmul", CudaError::Blas("not supported".into()));
        assert_eq!(
            recorder.finish().refusal.as_deref(),
            Some("matmul failed while capturing: cuda backend: cuBLAS error: not supported")
        );
        recorder.failed("matmul", CudaError::Blas("eager".into()));
        assert_eq!(
            *recorder.refusal.borrow(),
            None,
            "eager failures are not noted"
        );
    }
}
