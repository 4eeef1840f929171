//! The stages of a run, one module each, as functions the CLI and the example programs
//! share: expert data (`data.rs`), the tokenizer (`tokenizer.rs`), a fresh model and
//! SFT (`sft.rs`, its step log and checkpoints in `sft_steps.rs`), RL's one loop
//! (`rl.rs`), evaluation (`eval.rs`), the whole demo
//! (`demo.rs`), the experiment over seeds (`experiment/`), and opening the backend a run
//! names (`backend.rs`). Each stage takes only its own settings (a section of the
//! [`RunConfig`](crate::config::RunConfig); the demo and the experiment, which run every
//! stage, take the whole), writes its outputs under the run directory and reports
//! progress to a [`Reporter`]. This module holds what they share: [`PipelineError`],
//! the [`Reporter`], and chart writing.
//!
//! Run directory layout: `data/{train,dev}.jsonl`, `tokenizer.json`, `checkpoints/`,
//! `metrics/sft.{jsonl,csv}`, `plots/sft_loss.png`, `eval.json`.

use std::fmt;
use std::fs;
use std::path::Path;

use crate::metrics::{plot_line_chart, LineChart};
use crate::sft::SftStep;

mod backend;
mod data;
mod demo;
mod eval;
pub mod experiment;
mod lora;
mod rl;
mod sft;
mod sft_steps;
mod tokenizer;

pub use backend::{run_on_backend, BackendJob};
pub use data::{prepare_data, DataFiles};
pub use demo::{run_demo, DemoHook, DemoReport};
pub use eval::{run_eval, EvalReport};
pub use lora::{check_resumed_lora, start_lora};
pub use rl::{run_rl, RlHook, RlInputs};
pub use sft::{
    fresh_model, load_sft_data, resumed_sft_policy, run_sft, sft_policy, turn_limit_warnings,
    warn_turn_limits, SftHook, SftSummary,
};
pub use sft_steps::{plot_sft_loss, SftRun, SftStepSink};
pub use tokenizer::train_tokenizer;

/// A stage failed: which, why, and the error that caused it (its
/// [`source`](std::error::Error::source)) when there is one.
#[derive(Debug)]
pub struct PipelineError {
    /// The stage (`data`, `tokenizer`, `model`, `sft`, `eval`, ...).
    pub stage: &'static str,
    /// What went wrong.
    pub message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl PipelineError {
    /// A failure of `stage` that `message` describes, with no underlying error.
    pub fn new(stage: &'static str, message: impl Into<String>) -> PipelineError {
        PipelineError {
            stage,
            message: message.into(),
            source: None,
        }
    }
}

impl fmt::Display for PipelineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.stage, self.message)
    }
}

impl std::error::Error for PipelineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// Wraps an error as a failure of `stage`, keeping it as the failure's source.
pub fn failed<E>(stage: &'static str) -> impl Fn(E) -> PipelineError
where
    E: std::error::Error + Send + Sync + 'static,
{
    move |e| PipelineError {
        stage,
        message: e.to_string(),
        source: Some(Box::new(e)),
    }
}

/// Where a run reports progress (a terminal with progress bars, a log, a test).
pub trait Reporter {
    /// A stage begins.
    fn stage(&mut self, name: &str);
    /// A line worth showing.
    fn info(&mut self, message: &str);
    /// A result the run exists for (the metrics table): standard output.
    fn result(&mut self, text: &str) {
        println!("{text}");
    }
    /// SFT begins with this many optimizer steps to go (of `total`).
    fn sft_started(&mut self, done: u64, total: u64);
    /// One SFT step finished; `tokens_per_second` over the run so far.
    fn sft_step(&mut self, step: &SftStep, tokens_per_second: f64);
    /// Evaluation of `split` under `mode` reached task wave `wave` of `waves`.
    fn eval_wave(&mut self, split: &str, mode: &str, wave: usize, waves: usize);
    /// RL run `label` (`rl`, or an experiment arm) finished step `step` of `steps`
    /// (after its progress line went to [`Reporter::info`]).
    fn rl_step(&mut self, label: &str, step: u64, steps: u64) {
        let _ = (label, step, steps);
    }
}

/// A [`Reporter`] that prints plain lines to standard error (every `every`-th SFT
/// step).
#[derive(Clone, Debug)]
pub struct PrintReporter {
    /// Print every this many SFT steps.
    pub every: u64,
}

impl Reporter for PrintReporter {
    fn stage(&mut self, name: &str) {
        eprintln!("== {name}");
    }
    fn info(&mut self, message: &str) {
        eprintln!("{message}");
    }
    fn sft_started(&mut self, done: u64, total: u64) {
        eprintln!("sft: {done} of {total} steps done");
    }
    fn sft_step(&mut self, step: &SftStep, tokens_per_second: f64) {
        if step.step % self.every.max(1) == 0 || step.progress >= 1.0 {
            eprintln!(
                "sft step {} loss {:.4} grad norm {:.2} lr {:.2e} {:.0} tokens/s",
                step.step,
                step.loss,
                step.update.grad_norm,
                step.update.learning_rate,
                tokens_per_second
            );
        }
    }
    fn eval_wave(&mut self, split: &str, mode: &str, wave: usize, waves: usize) {
        eprintln!("eval {split} / {mode}: tasks {} of {waves}", wave + 1);
    }
}

/// Writes `chart` as a PNG at `path` (creating its directory) and reports it as `what`.
pub fn write_chart(
    path: &Path,
    chart: &LineChart<'_>,
    what: &str,
    reporter: &mut dyn Reporter,
) -> Result<(), PipelineError> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(failed("plot"))?;
    }
    let report = plot_line_chart(path, chart).map_err(failed("plot"))?;
    reporter.info(&format!("{what}: {}", report.path.display()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;
    use std::io;

    #[test]
    fn a_failure_keeps_its_cause_as_its_source() {
        let failure = failed("data")(io::Error::new(io::ErrorKind::NotFound, "gone"));
        assert_eq!(failure.to_string(), "data: gone");
        let cause = failure.source().and_then(|e| e.downcast_ref::<io::Error>());
        assert_eq!(cause.map(io::Error::kind), Some(io::ErrorKind::NotFound));
        assert!(PipelineError::new("data", "no scenarios")
            .source()
            .is_none());
    }
}
