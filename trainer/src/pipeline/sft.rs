//! The SFT stage: a fresh model, the SFT data tokenised (with a check of the rollout
//! limits against its longest turn), and supervised fine-tuning with a per-step hook.

use std::path::Path;
use std::time::Instant;

use sage_transformer::{Kernels, ModelConfig, Transformer};

use super::{failed, start_lora, PipelineError, Reporter};
use crate::chat::ChatTemplate;
use crate::config::RunConfig;
use crate::eval::EvalConfig;
use crate::init::init_params;
use crate::optim::{AdamW, AdamWConfig};
use crate::policy::TransformerPolicy;
use crate::rl::RlConfig;
use crate::sft::{dev_loss, SftConfig, SftData, SftState, SftStep, SftTrainer};
use crate::tokenizer::Tokenizer;

/// Called after every SFT step with the policy, the step and the trainer's state from
/// which the run would resume (the CLI logs metrics and saves checkpoints there).
pub type SftHook<'a, K> =
    dyn FnMut(&mut TransformerPolicy<K>, &SftStep, SftState) -> Result<(), PipelineError> + 'a;

/// A freshly initialised model of the shape `model` (seeded by `seed`), its vocabulary
/// that of `tokenizer`.
pub fn fresh_model<K: Kernels>(
    k: &mut K,
    model: &ModelConfig,
    seed: u64,
    tokenizer: &Tokenizer,
) -> Result<Transformer, PipelineError> {
    let mut model_config = model.clone();
    model_config.vocab_size = tokenizer.vocab_size();
    let model = Transformer::new(k, model_config).map_err(failed("model"))?;
    init_params(k, &model, seed).map_err(failed("model"))?;
    Ok(model)
}

/// The trainable policy of an SFT run from the start: `[sft.lora]`'s adapters put on
/// `model` (none at rank 0) and AdamW with `config`'s schedule spread over the run's
/// steps on `train`; returns it with that step count.
pub fn sft_policy<K: Kernels>(
    mut k: K,
    mut model: Transformer,
    config: &RunConfig,
    train: &SftData,
    reporter: &mut dyn Reporter,
) -> Result<(TransformerPolicy<K>, u64), PipelineError> {
    let sft = &config.sft;
    start_lora(
        &mut k, &mut model, &sft.lora, "sft.lora", sft.seed, reporter,
    )?;
    let (schedule, total) = sft_schedule(config, train);
    let policy = TransformerPolicy::trainable(k, model, schedule)
        .map_err(failed("model"))?
        .with_max_batch_tokens(config.run.max_batch_tokens);
    Ok((policy, total))
}

/// The trainable policy of an SFT run resumed from a checkpoint's `model` and
/// `optimizer` (its moments and step count kept, `config`'s schedule spread over the
/// whole run on `train`, also when the run resumes with more epochs); a fresh AdamW when
/// the checkpoint held none.
pub fn resumed_sft_policy<K: Kernels>(
    k: K,
    model: Transformer,
    optimizer: Option<AdamW>,
    config: &RunConfig,
    train: &SftData,
) -> Result<TransformerPolicy<K>, PipelineError> {
    let (schedule, _) = sft_schedule(config, train);
    let policy = match optimizer {
        Some(mut optimizer) => {
            optimizer.set_config(schedule).map_err(failed("resume"))?;
            TransformerPolicy::with_optimizer(k, model, optimizer)
        }
        None => TransformerPolicy::trainable(k, model, schedule).map_err(failed("model"))?,
    };
    Ok(policy.with_max_batch_tokens(config.run.max_batch_tokens))
}

/// `config`'s optimizer with its schedule spread over the steps of a whole SFT run on
/// `train`, and that step count.
fn sft_schedule(config: &RunConfig, train: &SftData) -> (AdamWConfig, u64) {
    let mut schedule = config.optimizer.clone();
    let total = SftTrainer::new(config.sft.clone(), train, SftState::default()).total_steps();
    schedule.resolve_total_steps(total);
    (schedule, total)
}

/// Loads SFT data from a JSON-lines file, tokenised with the model's limit.
pub fn load_sft_data(
    path: &Path,
    template: &ChatTemplate<'_>,
    reporter: &mut dyn Reporter,
) -> Result<SftData, PipelineError> {
    let data = SftData::load(path, template).map_err(failed("sft data"))?;
    if data.examples.is_empty() {
        return Err(PipelineError::new(
            "sft data",
            format!("{} holds no usable trajectory", path.display()),
        ));
    }
    if data.too_long > 0 {
        reporter.info(&format!(
            "{}: {} trajectories over {} tokens skipped",
            path.display(),
            data.too_long,
            template.max_len()
        ));
    }
    Ok(data)
}

/// What is wrong with the rollout limits for a model trained on `data`: one line per
/// per-turn token limit (`[eval.rollout]`, and `[rl.rollout]` when `with_rl`) below the
/// longest agent turn of the data. A model that learnt such a turn is cut off before
/// its code block ends and fails the task, which hides what it learnt.
pub fn turn_limit_warnings(
    data: &SftData,
    eval: &EvalConfig,
    rl: Option<&RlConfig>,
) -> Vec<String> {
    let mut limits = vec![("[eval.rollout]", eval.rollout.max_new_tokens)];
    if let Some(rl) = rl {
        limits.push(("[rl.rollout]", rl.rollout.max_new_tokens));
    }
    limits
        .into_iter()
        .filter(|&(_, limit)| (limit as usize) < data.longest_agent_turn)
        .map(|(section, limit)| {
            format!(
                "{section} max_new_tokens = {limit} is below the longest agent turn of the \
                 SFT data ({} tokens): such turns will be cut off",
                data.longest_agent_turn
            )
        })
        .collect()
}

/// Logs [`turn_limit_warnings`] as warnings.
pub fn warn_turn_limits(data: &SftData, eval: &EvalConfig, rl: Option<&RlConfig>) {
    for warning in turn_limit_warnings(data, eval, rl) {
        tracing::warn!("{warning}");
    }
}

/// What an SFT run reports at its end.
#[derive(Clone, Debug)]
pub struct SftSummary {
    /// Optimizer steps taken in this process.
    pub steps: u64,
    /// Mean loss of the last 10 steps.
    pub final_loss: f32,
    /// Dev loss at the end (when dev data was given).
    pub dev_loss: Option<f64>,
    /// Training tokens per second over the run.
    pub tokens_per_second: f64,
    /// Steps skipped for a non-finite gradient.
    pub skipped_steps: u64,
}

/// Trains `policy` on `train` from `state` until the configured epochs are done,
/// reporting every step; returns the summary and the final state.
pub fn run_sft<K: Kernels>(
    policy: &mut TransformerPolicy<K>,
    sft: &SftConfig,
    train: &SftData,
    dev: Option<&SftData>,
    state: SftState,
    reporter: &mut dyn Reporter,
    on_step: &mut SftHook<'_, K>,
) -> Result<(SftSummary, SftState), PipelineError> {
    reporter.stage("sft");
    let mut trainer = SftTrainer::new(sft.clone(), train, state);
    reporter.sft_started(state.step, trainer.total_steps());
    let started = Instant::now();
    let (mut tokens, mut steps, mut skipped) = (0usize, 0u64, 0u64);
    let mut recent: Vec<f32> = Vec::new();
    while let Some(step) = trainer.next_step(policy, train).map_err(failed("sft"))? {
        tokens += step.tokens;
        steps += 1;
        skipped += u64::from(step.update.skipped);
        recent.push(step.loss);
        if recent.len() > 10 {
            recent.remove(0);
        }
        let rate = tokens as f64 / started.elapsed().as_secs_f64().max(1e-9);
        reporter.sft_step(&step, rate);
        on_step(policy, &step, trainer.state())?;
    }
    let dev_loss = match dev {
        Some(dev) => Some(dev_loss(policy, &dev.examples).map_err(failed("dev loss"))?),
        None => None,
    };
    let summary = SftSummary {
        steps,
        final_loss: recent.iter().sum::<f32>() / recent.len().max(1) as f32,
        dev_loss,
        tokens_per_second: tokens as f64 / started.elapsed().as_secs_f64().max(1e-9),
        skipped_steps: skipped,
    };
    Ok((summary, trainer.state()))
}
