//! An experiment's SFT stage: one model trained on one mode's expert data and saved
//! whole in `sft-MODE/model/`, its per-step log in `sft-MODE/metrics/sft.{jsonl,csv}`
//! and its loss curve in `sft-MODE/plots/sft_loss.png`. With `[run] checkpoint_every`,
//! the stage checkpoints itself on the way in `sft-MODE/checkpoints/`, so `sage experiment --resume` continues
//! an interrupted SFT from its last checkpoint (the copying recipe's SFT takes over an
//! hour on two cores) and ends with the weights of an SFT never interrupted. A stop
//! request (SIGINT or SIGTERM to `sage experiment`) saves the step under way and ends
//! the run.

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

use sage_transformer::Kernels;

use super::resume::SftFinished;
use crate::checkpoint::{self, write_hf_files, CarriedFiles, CheckpointParts};
use crate::config::RunConfig;
use crate::interrupt;
use crate::metrics::MetricsLog;
use crate::pipeline::{
    check_resumed_lora, failed, fresh_model, log_sft_step, plot_sft_loss, run_sft, sft_metrics,
    sft_policy, PipelineError, Reporter,
};
use crate::policy::TransformerPolicy;
use crate::sft::{SftData, SftState, SftStep, SftTrainer};
use crate::tokenizer::Tokenizer;
use crate::weights::{load_model, save_adapters, save_model, SaveOptions};

/// Where an SFT stage writes.
#[derive(Clone, Copy)]
pub(super) struct SftDirs<'a> {
    /// The stage's directory, `sft-MODE/`: the finished model goes in `model/`, the
    /// per-step log in `metrics/`, the loss curve in `plots/`.
    pub stage: &'a Path,
    /// The checkpoints the stage saves on its way and resumes from.
    pub checkpoints: &'a Path,
}

/// Trains a model on `train`, a fresh one or `[experiment] init`'s, or continues the
/// last checkpoint in `dirs.checkpoints`, and saves it in `dirs.stage/model` with the
/// tokenizer and the Hugging Face files (the init model's own, where it has them);
/// returns the backend, emptied, and the training's summary.
pub(super) fn sft<K: Kernels>(
    mut k: K,
    config: &RunConfig,
    tokenizer: &Tokenizer,
    (train, dev): (&SftData, &SftData),
    dirs: SftDirs<'_>,
    reporter: &mut dyn Reporter,
) -> Result<(K, SftFinished), PipelineError> {
    let init = config.experiment.init_dir();
    let carried = init
        .map(|init| CarriedFiles::read(init).map_err(failed("init")))
        .transpose()?;
    let resumed = checkpoint::load_latest::<K, SftState>(&mut k, dirs.checkpoints, None)
        .map_err(failed("resume"))?;
    let resumed_at = resumed.as_ref().map(|checkpoint| checkpoint.step);
    let (mut policy, state) = match resumed {
        Some(checkpoint) => {
            reporter.info(&format!(
                "sft: continuing from {} (step {})",
                checkpoint.dir.display(),
                checkpoint.step
            ));
            check_resumed_lora(&checkpoint.model, &config.sft.lora, "sft.lora")?;
            let mut optimizer = checkpoint.optimizer.ok_or_else(|| {
                PipelineError::new(
                    "resume",
                    format!("{} holds no optimizer state", checkpoint.dir.display()),
                )
            })?;
            let mut schedule = config.optimizer.clone();
            schedule.resolve_total_steps(
                SftTrainer::new(config.sft.clone(), train, SftState::default()).total_steps(),
            );
            optimizer.set_config(schedule).map_err(failed("resume"))?;
            let policy = TransformerPolicy::with_optimizer(k, checkpoint.model, optimizer)
                .with_max_batch_tokens(config.run.max_batch_tokens);
            (policy, checkpoint.state)
        }
        None => {
            let model = match init {
                Some(init) => load_model(&mut k, init).map_err(failed("init"))?,
                None => fresh_model(&mut k, &config.model, config.run.seed, tokenizer)?,
            };
            let (policy, _) = sft_policy(k, model, config, train, reporter)?;
            (policy, SftState::default())
        }
    };
    let metrics_dir = dirs.stage.join("metrics");
    let mut recorder = StepRecorder {
        metrics: sft_metrics(&metrics_dir, resumed_at)?,
        checkpoints: dirs.checkpoints.to_owned(),
        every: config.run.checkpoint_every,
        keep: NonZeroUsize::new(config.run.keep_checkpoints),
        tokenizer,
        carried: carried.as_ref(),
    };
    let mut on_step = |policy: &mut TransformerPolicy<K>, step: &SftStep, state: SftState| {
        recorder.on_step(policy, step, state)
    };
    let (summary, _) = run_sft(
        &mut policy,
        &config.sft,
        train,
        Some(dev),
        state,
        reporter,
        &mut on_step,
    )?;
    reporter.info(&format!(
        "sft: final loss {:.4}, dev loss {:.4}",
        summary.final_loss,
        summary.dev_loss.unwrap_or(f64::NAN)
    ));
    let out = dirs.stage.join("model");
    let (k, model, _) = policy.parts_mut();
    save_model(k, model, &out, &SaveOptions::default()).map_err(failed("sft"))?;
    tokenizer.save_to_dir(&out).map_err(failed("sft"))?;
    write_hf_files(&out, tokenizer, carried.as_ref()).map_err(failed("sft"))?;
    save_adapters(k, model, &out).map_err(failed("sft"))?;
    // The curve comes after the model, so a failed plot never costs the training.
    let png = dirs.stage.join("plots").join("sft_loss.png");
    plot_sft_loss(&metrics_dir.join("sft.jsonl"), &png, reporter)?;
    let finished = SftFinished {
        final_loss: f64::from(summary.final_loss),
        dev_loss: summary.dev_loss,
    };
    Ok((policy.into_backend().map_err(failed("sft"))?, finished))
}

/// Logs every step of an SFT stage and saves its checkpoints: every `every` steps, and
/// at a stop request.
struct StepRecorder<'a> {
    metrics: MetricsLog,
    checkpoints: PathBuf,
    /// Steps between checkpoints (0: only at a stop request).
    every: u64,
    keep: Option<NonZeroUsize>,
    tokenizer: &'a Tokenizer,
    carried: Option<&'a CarriedFiles>,
}

impl StepRecorder<'_> {
    /// Logs `step`, then saves the checkpoint of `state` when one is due or a stop was
    /// requested, and ends the run with an error saying where it is if a stop was. The
    /// last step saves nothing: the finished model is saved whole.
    fn on_step<K: Kernels>(
        &mut self,
        policy: &mut TransformerPolicy<K>,
        step: &SftStep,
        state: SftState,
    ) -> Result<(), PipelineError> {
        log_sft_step(&mut self.metrics, step)?;
        if step.progress >= 1.0 {
            return Ok(());
        }
        let stopping = interrupt::stop_requested();
        if stopping || (self.every > 0 && step.step % self.every == 0) {
            let (k, model, optimizer) = policy.parts_mut();
            let parts = CheckpointParts {
                model,
                optimizer: optimizer.map(|o| &*o),
                tokenizer: self.tokenizer,
                state: &state,
                library: None,
                carried: self.carried,
            };
            checkpoint::save(k, &self.checkpoints, state.step, &parts, self.keep)
                .map_err(failed("checkpoint"))?;
        }
        if stopping {
            return Err(PipelineError::new(
                "sft",
                format!(
                    "stopped on request after step {}; its checkpoint is in {}: `sage \
                     experiment --resume` (with the same settings) continues from there",
                    step.step,
                    self.checkpoints.display()
                ),
            ));
        }
        Ok(())
    }
}
