//! The [`Policy`] trait: what a trainer needs from a model. Any model can implement
//! it, including one behind an HTTP API (which implements generation only).
//!
//! Sequences are token ids (`u32`). For a sequence `tokens` of length `n`, position `i`
//! of a per-token quantity (log-prob, coefficient) refers to predicting `tokens[i + 1]`
//! from `tokens[..=i]`, so per-token slices have length `n - 1`.

use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

/// How to sample continuations.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SamplingParams {
    /// Softmax temperature; 0 means greedy (argmax).
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; 0 disables.
    pub top_k: u32,
    /// Keep the smallest set of tokens whose probability reaches `top_p`; 1 disables.
    pub top_p: f32,
    /// Stop after this many new tokens.
    pub max_new_tokens: u32,
    /// Generation stops after any of these tokens (it is included in the output).
    pub stop_tokens: Vec<u32>,
    /// Seed of the sampler; the same seed and inputs give the same tokens.
    pub seed: u64,
    /// The random stream of each prompt, when not empty (one key per prompt):
    /// prompt `i` draws from the stream of `(seed, stream_keys[i])` instead of
    /// `(seed, i)`. A caller that keys a sequence by what it is (a rollout, a turn)
    /// rather than by its place in the batch keeps its randomness however the batch
    /// is formed.
    #[serde(default)]
    pub stream_keys: Vec<u64>,
    /// A limit per prompt, when not empty (one per prompt): prompt `i` stops after
    /// `min(max_new_tokens, max_new_tokens_each[i])` new tokens.
    #[serde(default)]
    pub max_new_tokens_each: Vec<u32>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            max_new_tokens: 1500,
            stop_tokens: Vec::new(),
            seed: 0,
            stream_keys: Vec::new(),
            max_new_tokens_each: Vec::new(),
        }
    }
}

/// Why a generation stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StopReason {
    /// A stop token was produced.
    StopToken,
    /// `max_new_tokens` was reached.
    Length,
}

/// One sampled continuation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Generation {
    /// The new tokens (a stop token, if any, is the last one).
    pub tokens: Vec<u32>,
    /// Log-prob of each new token under the sampling distribution before temperature,
    /// top-k and top-p were applied (the policy's own probability).
    pub logprobs: Vec<f32>,
    /// Why it stopped.
    pub stop: StopReason,
}

/// Statistics of one optimizer step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UpdateStats {
    /// Global L2 norm of the gradient before clipping.
    pub grad_norm: f32,
    /// Learning rate used for the step.
    pub learning_rate: f32,
    /// The gradient was not finite, so nothing was applied (the step does not count).
    #[serde(default)]
    pub skipped: bool,
}

/// A trainable (or generation-only) language model. Implementations must guarantee:
///
/// - `generate` returns one [`Generation`] per prompt, in order, and is deterministic
///   for a fixed seed on a deterministic backend;
/// - `log_probs` and `accumulate_gradient` use the same forward computation, so that
///   ratios of new to old log-probs are exactly 1 before any update;
/// - gradients accumulate across `accumulate_gradient` calls until `optimizer_step`,
///   which applies them and zeroes them.
///
/// A generation-only policy returns an error from the training methods.
pub trait Policy {
    /// The policy's failure (out of memory, a bad shape, an unsupported call): an error
    /// that can cross threads and be kept as the source of a caller's error.
    type Error: core::error::Error + Send + Sync + 'static;

    /// Samples a continuation of every prompt (all in one batch where possible).
    fn generate(
        &mut self,
        prompts: &[&[u32]],
        params: &SamplingParams,
    ) -> Result<Vec<Generation>, Self::Error>;

    /// For each sequence, the log-prob of every token given its prefix (length `n - 1`).
    fn log_probs(&mut self, sequences: &[&[u32]]) -> Result<Vec<Vec<f32>>, Self::Error>;

    /// Adds the gradient of `sum_s sum_i coefficients[s][i] * logp[s][i]` to the
    /// accumulated gradient; `coefficients[s]` has length `sequences[s].len() - 1`, with
    /// zeros on masked (prompt, observation) positions. Returns the weighted sum.
    fn accumulate_gradient(
        &mut self,
        sequences: &[&[u32]],
        coefficients: &[&[f32]],
    ) -> Result<f32, Self::Error>;

    /// Applies the accumulated gradient (with the policy's optimizer and clipping) and
    /// zeroes it.
    fn optimizer_step(&mut self) -> Result<UpdateStats, Self::Error>;

    /// Says that every chat the policy has generated for so far has ended, so nothing it
    /// keeps to continue them (a transformer's KV caches) will be used again. By default
    /// nothing is kept and this does nothing.
    fn chats_ended(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}
