//! An experiment's SFT stage: one model trained on one mode's expert data and saved
//! whole in `sft-MODE/model/`, its per-step log in `sft-MODE/metrics/sft.{jsonl,csv}`
//! and its loss curve in `sft-MODE/plots/sft_loss.png`. With `[run] checkpoint_every`,
//! the stage checkpoints itself on the way in `sft-MODE/checkpoints/`, so `sage experiment --resume` continues
//! an interrupted SFT from its last checkpoint (the copying recipe's SFT takes over an
//! hour on two cores) and ends with the weights of an SFT never interrupted. A stop
//! request (SIGINT or SIGTERM to `sage experiment`) saves the step under way and ends
//! the run.

use std::path::Path;

use sage_transformer::Kernels;

use super::resume::SftFinished;
use crate::checkpoint::{self, write_hf_files, CarriedFiles};
use crate::config::RunConfig;
use crate::pipeline::{
    check_resumed_lora, failed, fresh_model, plot_sft_loss, resumed_sft_policy, run_sft,
    sft_policy, PipelineError, Reporter, SftRun, SftStepSink,
};
use crate::policy::TransformerPolicy;
use crate::sft::{SftData, SftState, SftStep};
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
            let optimizer = checkpoint.optimizer.ok_or_else(|| {
                PipelineError::new(
                    "resume",
                    format!("{} holds no optimizer state", checkpoint.dir.display()),
                )
            })?;
            let policy = resumed_sft_policy(k, checkpoint.model, Some(optimizer), config, train)?;
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
    let mut sink = SftStepSink::new(
        SftRun::ExperimentStage,
        config,
        &metrics_dir,
        dirs.checkpoints.to_owned(),
        resumed_at,
        carried,
    )?;
    let mut on_step = |policy: &mut TransformerPolicy<K>, step: &SftStep, state: SftState| {
        sink.on_step(policy, tokenizer, step, state)
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
    write_hf_files(&out, tokenizer, sink.carried()).map_err(failed("sft"))?;
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
