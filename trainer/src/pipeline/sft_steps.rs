//! What an SFT run records of its steps, for `sage sft`, `sage demo` and each SFT stage of
//! `sage experiment` alike: one row per step in `sft.{jsonl,csv}` (kept up to the
//! checkpoint a resumed run starts from), a checkpoint every `[run] checkpoint_every`
//! steps and at a stop request (SIGINT or SIGTERM, see [`crate::interrupt`]), which then
//! ends the run with an error saying where the checkpoint is; and the loss curve.

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

use sage_transformer::Kernels;

use super::{failed, write_chart, PipelineError, Reporter};
use crate::checkpoint::{self, CarriedFiles, CheckpointParts};
use crate::config::RunConfig;
use crate::interrupt;
use crate::metrics::{read_series, KeepRows, LineChart, MetricValue, MetricsLog};
use crate::policy::TransformerPolicy;
use crate::sft::{SftState, SftStep};
use crate::tokenizer::Tokenizer;

/// Which run the steps belong to: what its last step leaves, and which command continues
/// it after a stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SftRun {
    /// `sage sft` or `sage demo`: the last step is saved as a checkpoint, the run's
    /// product; `sage sft --resume` continues a stopped run.
    Standalone,
    /// An SFT stage of `sage experiment`: its model is saved whole after the last step,
    /// so that step is not checkpointed; `sage experiment --resume` continues it.
    ExperimentStage,
}

/// Logs every step of an SFT run and saves its checkpoints.
pub struct SftStepSink {
    run: SftRun,
    metrics: MetricsLog,
    checkpoints: PathBuf,
    /// Steps between checkpoints (0: none but the last, as `run` has it, and at a stop).
    every: u64,
    keep: Option<NonZeroUsize>,
    /// The Hugging Face files of the model the run started from, if it started from one.
    carried: Option<CarriedFiles>,
}

impl SftStepSink {
    /// A sink writing `metrics_dir/sft.{jsonl,csv}` (on resume from the checkpoint of step
    /// `resumed_at`, the rows up to that step are kept) and checkpoints in `checkpoints`
    /// at `config`'s `[run]` cadence, each keeping `carried`.
    pub fn new(
        run: SftRun,
        config: &RunConfig,
        metrics_dir: &Path,
        checkpoints: PathBuf,
        resumed_at: Option<u64>,
        carried: Option<CarriedFiles>,
    ) -> Result<SftStepSink, PipelineError> {
        let metrics = match resumed_at {
            Some(step) => MetricsLog::resume(
                metrics_dir,
                "sft",
                &KeepRows::UpTo {
                    column: "step".to_owned(),
                    last: step as f64,
                },
            ),
            None => MetricsLog::create(metrics_dir, "sft"),
        }
        .map_err(failed("metrics"))?;
        Ok(SftStepSink {
            run,
            metrics,
            checkpoints,
            every: config.run.checkpoint_every,
            keep: NonZeroUsize::new(config.run.keep_checkpoints),
            carried,
        })
    }

    /// The Hugging Face files its checkpoints keep.
    pub fn carried(&self) -> Option<&CarriedFiles> {
        self.carried.as_ref()
    }

    /// Logs `step`, then saves the checkpoint of `state` when one is due or a stop was
    /// requested; after a stop (but at the last step) the run ends here with an error
    /// that says where the checkpoint is.
    pub fn on_step<K: Kernels>(
        &mut self,
        policy: &mut TransformerPolicy<K>,
        tokenizer: &Tokenizer,
        step: &SftStep,
        state: SftState,
    ) -> Result<(), PipelineError> {
        self.log(step)?;
        let last = step.progress >= 1.0;
        let stopping = interrupt::stop_requested() && !last;
        let due = if last {
            self.run == SftRun::Standalone
        } else {
            stopping || (self.every > 0 && step.step % self.every == 0)
        };
        if due {
            self.save(policy, tokenizer, state)?;
        }
        if stopping {
            let command = match self.run {
                SftRun::Standalone => "sage sft",
                SftRun::ExperimentStage => "sage experiment",
            };
            return Err(PipelineError::new(
                "sft",
                format!(
                    "stopped on request after step {}; its checkpoint is in {}: `{command} \
                     --resume` (with the same settings) continues from there",
                    step.step,
                    self.checkpoints.display()
                ),
            ));
        }
        Ok(())
    }

    /// One step's row: step, epoch, loss, gradient norm, learning rate, tokens, agent
    /// tokens and whether the update was skipped.
    fn log(&mut self, step: &SftStep) -> Result<(), PipelineError> {
        self.metrics
            .log(&[
                ("step", MetricValue::from(step.step)),
                ("epoch", MetricValue::from(step.epoch)),
                ("loss", MetricValue::Float(f64::from(step.loss))),
                (
                    "grad_norm",
                    MetricValue::Float(f64::from(step.update.grad_norm)),
                ),
                (
                    "lr",
                    MetricValue::Float(f64::from(step.update.learning_rate)),
                ),
                ("tokens", MetricValue::from(step.tokens as u64)),
                ("agent_tokens", MetricValue::from(step.agent_tokens as u64)),
                ("skipped", MetricValue::from(u64::from(step.update.skipped))),
            ])
            .map_err(failed("metrics"))
    }

    /// Saves the policy as the checkpoint of `state.step`.
    fn save<K: Kernels>(
        &self,
        policy: &mut TransformerPolicy<K>,
        tokenizer: &Tokenizer,
        state: SftState,
    ) -> Result<(), PipelineError> {
        let (k, model, optimizer) = policy.parts_mut();
        let parts = CheckpointParts {
            model,
            optimizer: optimizer.map(|o| &*o),
            tokenizer,
            state: &state,
            library: None,
            carried: self.carried.as_ref(),
        };
        checkpoint::save(k, &self.checkpoints, state.step, &parts, self.keep)
            .map_err(failed("checkpoint"))?;
        Ok(())
    }
}

/// Draws the loss curve of the SFT log `jsonl` (what [`SftStepSink`] wrote) as the PNG
/// `png`.
pub fn plot_sft_loss(
    jsonl: &Path,
    png: &Path,
    reporter: &mut dyn Reporter,
) -> Result<(), PipelineError> {
    let series = read_series(jsonl, "step", &["loss"]).map_err(failed("plot"))?;
    let chart = LineChart {
        title: "SFT loss (mean NLL per agent token)",
        x_label: "step",
        y_label: "loss",
        series: &series,
        width: 800,
        height: 480,
    };
    write_chart(png, &chart, "loss curve", reporter)
}
