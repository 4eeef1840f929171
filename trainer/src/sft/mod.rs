//! Supervised fine-tuning on chat trajectories (the expert's export, or any JSON lines
//! of `{role, content}` messages): the loss is the mean negative log-likelihood of the
//! agent's own tokens; prompts and observations are masked out. How the tokens of
//! different batches weigh against each other is [`SftLossWeighting`].
//!
//! - [`SftData`]: JSON lines tokenised exactly as rollouts assemble episodes;
//! - [`epoch_batches`]: length-bucketed batches under a token budget, shuffled per
//!   epoch by seed;
//! - [`SftTrainer`]: the step loop over any [`Policy`], whose whole position is a
//!   small [`SftState`] (epoch, batch, step), so a checkpoint resumes exactly;
//! - [`dev_loss`]: the same loss on held-out examples, without gradients.

mod batch;
mod data;

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::lora::LoraSettings;

use sage_core::policy::{Policy, UpdateStats};

use crate::chat::ChatError;

pub use batch::{epoch_batches, mean_agent_tokens, nll_coefficients};
pub use data::{SftData, SftExample};

/// Why SFT data could not be read.
#[derive(Debug)]
pub enum SftError {
    /// The file could not be read.
    Io {
        /// The file.
        path: PathBuf,
        /// The system's message.
        detail: String,
    },
    /// A line is not a valid chat.
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        source: ChatError,
    },
}

impl fmt::Display for SftError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SftError::Io { path, detail } => write!(f, "{}: {detail}", path.display()),
            SftError::Line { path, line, source } => {
                write!(f, "{}, line {line}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for SftError {}

/// Settings of an SFT run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SftConfig {
    /// Passes over the training data (unless `steps` is set).
    pub epochs: u64,
    /// Optimizer steps of the whole run, taken epoch after epoch over the data (the last
    /// epoch may end part-way); 0: `epochs` whole passes. Two models trained on data of
    /// different sizes get the same number of updates this way.
    pub steps: u64,
    /// Token budget of one optimizer step's batch.
    pub batch_tokens: usize,
    /// Seed of the batch order.
    pub seed: u64,
    /// How an agent token's loss weighs against those of other batches.
    pub loss_weighting: SftLossWeighting,
    /// LoRA adapters to train instead of every weight (off at rank 0).
    pub lora: LoraSettings,
}

/// How SFT weighs the loss of one agent token. Length-bucketed batches differ in how many
/// of their tokens are the agent's: a batch of long prompts with short answers (a chain's
/// later tasks, reusing a skill) holds few, one of short prompts with long answers (a
/// first task, writing the skill) holds many.
///
/// The two differ only on steps whose gradient norm stays under `[optimizer]
/// max_grad_norm`: a clipped gradient is rescaled to that norm whatever its scale, so
/// every clipped batch weighs the same under either weighting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SftLossWeighting {
    /// Each step's loss is the mean over its batch's agent tokens: every batch weighs the
    /// same, so a token weighs more in a batch with fewer agent tokens.
    #[default]
    Batch,
    /// Every agent token weighs the same: a batch's summed loss is divided by the mean
    /// agent tokens per batch of the epoch, so the mean step is as large as under `batch`.
    Token,
}

impl Default for SftConfig {
    fn default() -> SftConfig {
        SftConfig {
            epochs: 3,
            steps: 0,
            batch_tokens: 8192,
            seed: 0,
            loss_weighting: SftLossWeighting::Batch,
            lora: LoraSettings::default(),
        }
    }
}

/// Where an SFT run stands: enough to resume it exactly (batches are a function of the
/// seed and the epoch).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SftState {
    /// The current epoch (0-based).
    pub epoch: u64,
    /// The next batch of the epoch.
    pub batch: usize,
    /// Optimizer steps taken.
    pub step: u64,
}

/// What one SFT step did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SftStep {
    /// The step's number (1-based).
    pub step: u64,
    /// Epoch of the step (0-based).
    pub epoch: u64,
    /// Fraction of the run done after this step, in (0, 1].
    pub progress: f64,
    /// Mean negative log-likelihood per agent token of the batch.
    pub loss: f32,
    /// Tokens in the batch.
    pub tokens: usize,
    /// Agent (trained) tokens in the batch.
    pub agent_tokens: usize,
    /// The optimizer's report.
    pub update: UpdateStats,
}

/// The SFT step loop.
#[derive(Clone, Debug)]
pub struct SftTrainer {
    config: SftConfig,
    state: SftState,
    batches: Vec<Vec<usize>>,
    batches_per_epoch: usize,
    /// Agent tokens per batch, averaged over an epoch.
    mean_agent_tokens: f64,
}

impl SftTrainer {
    /// A run over `data` from `state` (the default state starts at the beginning).
    pub fn new(config: SftConfig, data: &SftData, state: SftState) -> SftTrainer {
        let batches = epoch_batches(
            &data.examples,
            config.batch_tokens,
            config.seed,
            state.epoch,
        );
        SftTrainer {
            batches_per_epoch: batches.len(),
            mean_agent_tokens: mean_agent_tokens(&data.examples, &batches),
            config,
            state,
            batches,
        }
    }

    /// Where the run stands.
    pub fn state(&self) -> SftState {
        self.state
    }

    /// Optimizer steps the whole run takes: `steps` where set, else `epochs` passes.
    pub fn total_steps(&self) -> u64 {
        match self.config.steps {
            0 => self.config.epochs * self.batches_per_epoch(),
            steps => steps,
        }
    }

    /// Optimizer steps of one pass over the data (the batches are the same every epoch,
    /// only their order changes).
    pub fn batches_per_epoch(&self) -> u64 {
        self.batches_per_epoch as u64
    }

    /// Runs the next batch (forward, backward, optimizer step); `None` when the run is
    /// over. `data` must be the data the trainer was created with.
    pub fn next_step<P: Policy>(
        &mut self,
        policy: &mut P,
        data: &SftData,
    ) -> Result<Option<SftStep>, P::Error> {
        if self.state.step >= self.total_steps() || self.batches.is_empty() {
            return Ok(None);
        }
        if self.state.batch >= self.batches.len() {
            self.state.epoch += 1;
            self.state.batch = 0;
            self.batches = epoch_batches(
                &data.examples,
                self.config.batch_tokens,
                self.config.seed,
                self.state.epoch,
            );
        }
        let batch: Vec<&SftExample> = self.batches[self.state.batch]
            .iter()
            .map(|&i| &data.examples[i])
            .collect();
        let agent_tokens: usize = batch.iter().map(|e| e.agent_tokens()).sum();
        let normalizer = match self.config.loss_weighting {
            SftLossWeighting::Batch => agent_tokens as f64,
            SftLossWeighting::Token => self.mean_agent_tokens,
        }
        .max(1.0);
        let coefficients = nll_coefficients(&batch, normalizer);
        let sequences: Vec<&[u32]> = batch.iter().map(|e| e.tokens.as_slice()).collect();
        let coefficient_refs: Vec<&[f32]> = coefficients.iter().map(Vec::as_slice).collect();
        let weighted = policy.accumulate_gradient(&sequences, &coefficient_refs)?;
        let loss = (f64::from(weighted) * normalizer / agent_tokens.max(1) as f64) as f32;
        let update = policy.optimizer_step()?;
        self.state.batch += 1;
        self.state.step += 1;
        Ok(Some(SftStep {
            step: self.state.step,
            epoch: self.state.epoch,
            progress: self.state.step as f64 / self.total_steps().max(1) as f64,
            loss,
            tokens: batch.iter().map(|e| e.tokens.len()).sum(),
            agent_tokens,
            update,
        }))
    }
}

/// Mean negative log-likelihood per agent token of `examples` (no gradient).
pub fn dev_loss<P: Policy>(policy: &mut P, examples: &[SftExample]) -> Result<f64, P::Error> {
    let (mut nll, mut count) = (0.0f64, 0usize);
    for chunk in examples.chunks(8) {
        let sequences: Vec<&[u32]> = chunk.iter().map(|e| e.tokens.as_slice()).collect();
        for (example, logp) in chunk.iter().zip(policy.log_probs(&sequences)?) {
            for (&mask, &lp) in example.loss_mask.iter().zip(&logp) {
                if mask {
                    nll -= f64::from(lp);
                    count += 1;
                }
            }
        }
    }
    Ok(nll / count.max(1) as f64)
}
