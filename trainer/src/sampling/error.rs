//! [`SamplingError`]: why a generation call failed.

use std::fmt;

use sage_transformer::ModelError;

use super::sampler::ParamsError;

/// Why [`generate`](super::generate) failed; `E` is the backend's error.
#[derive(Debug)]
pub enum SamplingError<E> {
    /// The sampling parameters are out of range.
    Params(ParamsError),
    /// Prompt `index` has no tokens.
    EmptyPrompt {
        /// Position of the prompt in the batch.
        index: usize,
    },
    /// A prompt plus its new-token limit exceeds the model's positions.
    TooLong {
        /// Tokens in the prompt (the one with the most positions to hold).
        longest_prompt: usize,
        /// Its new-token limit.
        max_new_tokens: usize,
        /// The model's `max_position_embeddings`.
        max_positions: usize,
    },
    /// A per-prompt setting has neither one entry per prompt nor none.
    PerPrompt {
        /// The setting (`stream_keys` or `max_new_tokens_each`).
        what: &'static str,
        /// Its entries.
        got: usize,
        /// Prompts in the call.
        prompts: usize,
    },
    /// The model produced a NaN or infinite logit.
    NonFiniteLogits {
        /// Sequence of the batch.
        sequence: usize,
        /// Index of the new token being chosen.
        position: usize,
    },
    /// The model or its backend failed.
    Model(ModelError<E>),
}

impl fmt::Display for ParamsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamsError::Temperature(t) => {
                write!(f, "temperature must be finite and >= 0, got {t}")
            }
            ParamsError::TopP(p) => write!(f, "top_p must be in (0, 1], got {p}"),
        }
    }
}

impl<E: fmt::Display> fmt::Display for SamplingError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SamplingError::Params(e) => write!(f, "sampling parameters: {e}"),
            SamplingError::EmptyPrompt { index } => {
                write!(f, "prompt {index} is empty: generation needs a first token")
            }
            SamplingError::TooLong {
                longest_prompt,
                max_new_tokens,
                max_positions,
            } => write!(
                f,
                "a prompt of {longest_prompt} tokens plus max_new_tokens \
                 ({max_new_tokens}) exceeds the model's max_position_embeddings \
                 ({max_positions})"
            ),
            SamplingError::PerPrompt { what, got, prompts } => write!(
                f,
                "{what} has {got} entries for {prompts} prompts (one per prompt, or none)"
            ),
            SamplingError::NonFiniteLogits { sequence, position } => write!(
                f,
                "the model produced a non-finite logit for sequence {sequence} at new token \
                 {position}"
            ),
            SamplingError::Model(e) => write!(f, "generation: {e}"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for SamplingError<E> {}

impl<E> From<ModelError<E>> for SamplingError<E> {
    fn from(e: ModelError<E>) -> Self {
        SamplingError::Model(e)
    }
}

impl<E> From<ParamsError> for SamplingError<E> {
    fn from(e: ParamsError) -> Self {
        SamplingError::Params(e)
    }
}
