//! The stages of a run, as functions the CLI and the example programs share: expert
//! data, tokenizer, model, SFT, RL (`rl.rs`), evaluation, the whole demo, the
//! experiment over seeds (`experiment/`), and opening the backend a run names
//! (`backend.rs`). Each stage reads its section of a [`RunConfig`], writes its outputs under the run directory and reports
//! progress to a [`Reporter`].
//!
//! Run directory layout: `data/{train,dev}.jsonl`, `tokenizer.json`, `checkpoints/`,
//! `metrics/sft.{jsonl,csv}`, `plots/sft_loss.png`, `eval.json`.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use sage_core::Policy;
use sage_envs::scenarios::{Catalog, CatalogConfig, Split};
use sage_transformer::{Kernels, ModelConfig, Transformer};

use crate::chat::ChatTemplate;
use crate::config::{RunConfig, TokenizerSection};
use crate::data::{expert_data, write_records, ExpertDataConfig};
use crate::eval::{evaluate_split, metrics_table, EvalConfig, EvalMetrics, TaskOutcome};
use crate::files::write_atomic;
use crate::init::init_params;
use crate::metrics::{plot_line_chart, LineChart};
use crate::policy::TransformerPolicy;
use crate::rl::RlConfig;
use crate::sft::{dev_loss, SftConfig, SftData, SftState, SftStep, SftTrainer};
use crate::tokenizer::Tokenizer;

mod backend;
pub mod experiment;
mod rl;

pub use backend::{run_on_backend, BackendJob};
pub use rl::{run_rl, RlHook, RlInputs};

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

/// Called after every SFT step with the policy, the step and the trainer's state from
/// which the run would resume (the CLI logs metrics and saves checkpoints there).
pub type SftHook<'a, K> =
    dyn FnMut(&mut TransformerPolicy<K>, &SftStep, SftState) -> Result<(), PipelineError> + 'a;

/// An [`SftHook`] of the demo, which also gets the tokenizer the demo trained.
pub type DemoHook<'a, K> = dyn FnMut(&mut TransformerPolicy<K>, &Tokenizer, &SftStep, SftState) -> Result<(), PipelineError>
    + 'a;

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

/// The files of the prepared data.
#[derive(Clone, Debug)]
pub struct DataFiles {
    /// Training trajectories.
    pub train: PathBuf,
    /// Held-out trajectories (the dev split) for the dev loss.
    pub dev: PathBuf,
}

/// Runs the expert over the training split and the dev split and writes both under
/// `dir/data/`.
pub fn prepare_data(
    config: &ExpertDataConfig,
    dir: &Path,
    reporter: &mut dyn Reporter,
) -> Result<DataFiles, PipelineError> {
    reporter.stage("expert data");
    let files = DataFiles {
        train: dir.join("data").join("train.jsonl"),
        dev: dir.join("data").join("dev.jsonl"),
    };
    let train = expert_data(config).map_err(failed("data"))?;
    write_records(&files.train, &train.records).map_err(failed("data"))?;
    let dev_config = ExpertDataConfig {
        split: Split::Dev,
        seeds: config.seeds.min(4),
        variants: 1,
        ..config.clone()
    };
    let dev = expert_data(&dev_config).map_err(failed("data"))?;
    write_records(&files.dev, &dev.records).map_err(failed("data"))?;
    reporter.info(&format!(
        "expert: {} training scenarios kept ({} rejected, {} template-seed pairs without one), {} trajectories -> {}; {} dev trajectories",
        train.kept,
        train.dropped,
        train.skipped,
        train.records.len(),
        files.train.display(),
        dev.records.len()
    ));
    Ok(files)
}

/// Trains a byte-level BPE on the message contents of a JSON-lines file and saves it
/// as `dir/tokenizer.json`.
pub fn train_tokenizer(
    settings: &TokenizerSection,
    train: &Path,
    dir: &Path,
    reporter: &mut dyn Reporter,
) -> Result<Tokenizer, PipelineError> {
    reporter.stage("tokenizer");
    let text = fs::read_to_string(train)
        .map_err(|e| PipelineError::new("tokenizer", format!("{}: {e}", train.display())))?;
    let mut contents = Vec::new();
    for (index, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let messages = crate::chat::messages_from_json_line(line).map_err(|e| {
            PipelineError::new(
                "tokenizer",
                format!("{}, line {}: {e}", train.display(), index + 1),
            )
        })?;
        contents.extend(messages.into_iter().map(|m| m.content));
    }
    let tokenizer =
        Tokenizer::train(contents.iter(), &settings.train_config()).map_err(failed("tokenizer"))?;
    fs::create_dir_all(dir).map_err(failed("tokenizer"))?;
    let path = tokenizer.save_to_dir(dir).map_err(failed("tokenizer"))?;
    reporter.info(&format!(
        "tokenizer: {} tokens -> {}",
        tokenizer.vocab_size(),
        path.display()
    ));
    Ok(tokenizer)
}

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

/// One split under one retrieval mode: its metrics and its tasks.
#[derive(Clone, Debug, serde::Serialize)]
pub struct EvalReport {
    /// The metrics.
    pub metrics: EvalMetrics,
    /// Every task's outcome.
    pub tasks: Vec<TaskOutcome>,
}

/// Evaluates `policy` on every split and retrieval mode of `eval` in the built-in world
/// (the system prompt with the world's rules when `prompt_rules`), prints the table
/// through `reporter`, and writes `out` as JSON when given.
pub fn run_eval<P: Policy>(
    policy: &mut P,
    eval: &EvalConfig,
    prompt_rules: bool,
    template: &ChatTemplate<'_>,
    out: Option<&Path>,
    reporter: &mut dyn Reporter,
) -> Result<Vec<EvalReport>, PipelineError> {
    reporter.stage("evaluation");
    let (splits, modes) = (&eval.splits, &eval.modes);
    let catalog =
        Arc::new(Catalog::build_splits(&CatalogConfig::default(), splits).map_err(failed("eval"))?);
    let template = template
        .clone()
        .with_max_len(eval.rollout.max_episode_tokens);
    let mut reports = Vec::new();
    for &split in splits {
        for &mode in modes {
            let mode_name = mode.to_string();
            let (metrics, tasks) = evaluate_split(
                policy,
                &catalog,
                &template,
                split,
                mode,
                eval,
                prompt_rules,
                &mut |wave, waves| reporter.eval_wave(split.name(), &mode_name, wave, waves),
            )
            .map_err(failed("eval"))?;
            reports.push(EvalReport { metrics, tasks });
        }
    }
    let rows: Vec<EvalMetrics> = reports.iter().map(|r| r.metrics.clone()).collect();
    reporter.result(&metrics_table(&rows));
    if let Some(out) = out {
        let json = serde_json::to_string_pretty(&reports).map_err(failed("eval"))?;
        write_atomic(out, json.as_bytes())
            .map_err(|e| PipelineError::new("eval", format!("{}: {e}", out.display())))?;
        reporter.info(&format!("evaluation written to {}", out.display()));
    }
    Ok(reports)
}

/// What `sage demo` produced.
#[derive(Clone, Debug)]
pub struct DemoReport {
    /// The SFT summary.
    pub sft: SftSummary,
    /// The evaluation, per split and mode.
    pub eval: Vec<EvalReport>,
    /// Wall-clock seconds of the whole pipeline.
    pub seconds: f64,
}

/// The whole demo on backend `k`: expert data, tokenizer, a fresh model, SFT, then
/// evaluation, everything under `config.run.dir`. `on_step` sees every SFT step with
/// the run's tokenizer (the CLI saves checkpoints and metrics there).
pub fn run_demo<K: Kernels>(
    mut k: K,
    config: &RunConfig,
    reporter: &mut dyn Reporter,
    on_step: &mut DemoHook<'_, K>,
) -> Result<(DemoReport, TransformerPolicy<K>, Tokenizer), PipelineError> {
    let started = Instant::now();
    let dir = config.run.dir.clone();
    let files = prepare_data(&config.data, &dir, reporter)?;
    let tokenizer = train_tokenizer(&config.tokenizer, &files.train, &dir, reporter)?;
    let template = ChatTemplate::new(&tokenizer)
        .map_err(failed("tokenizer"))?
        .with_max_len(config.model.max_position_embeddings);
    let train = load_sft_data(&files.train, &template, reporter)?;
    let dev = load_sft_data(&files.dev, &template, reporter)?;
    warn_turn_limits(&train, &config.eval, None);
    let model = fresh_model(&mut k, &config.model, config.run.seed, &tokenizer)?;
    let mut optimizer = config.optimizer.clone();
    let total = SftTrainer::new(config.sft.clone(), &train, SftState::default()).total_steps();
    optimizer.resolve_total_steps(total);
    let mut policy = TransformerPolicy::trainable(k, model, optimizer)
        .map_err(failed("model"))?
        .with_max_batch_tokens(config.run.max_batch_tokens);
    reporter.info(&format!(
        "model: {} parameters; sft: {} trajectories, {} tokens ({} trained), {} steps",
        policy.model().params().len,
        train.examples.len(),
        train.tokens(),
        train
            .examples
            .iter()
            .map(|e| e.agent_tokens())
            .sum::<usize>(),
        total
    ));
    let mut with_tokenizer = |policy: &mut TransformerPolicy<K>, step: &SftStep, state| {
        on_step(policy, &tokenizer, step, state)
    };
    let (sft, _) = run_sft(
        &mut policy,
        &config.sft,
        &train,
        Some(&dev),
        SftState::default(),
        reporter,
        &mut with_tokenizer,
    )?;
    reporter.info(&format!(
        "sft: final loss {:.4}, dev loss {:.4}, {:.0} tokens/s",
        sft.final_loss,
        sft.dev_loss.unwrap_or(f64::NAN),
        sft.tokens_per_second
    ));
    let eval = run_eval(
        &mut policy,
        &config.eval,
        config.data.prompt_rules,
        &template,
        Some(&dir.join("eval.json")),
        reporter,
    )?;
    Ok((
        DemoReport {
            sft,
            eval,
            seconds: started.elapsed().as_secs_f64(),
        },
        policy,
        tokenizer,
    ))
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
