//! The model's errors: a bad configuration, a malformed batch, or a backend failure.

use core::fmt;

use crate::config::ConfigError;
use crate::kernels::Kernels;

/// Why a model call failed.
#[derive(Debug)]
pub enum ModelError<E> {
    /// The configuration does not describe a model.
    Config(ConfigError),
    /// The inputs do not fit the model (lengths, token ids, sequence offsets).
    Input(InputError),
    /// The backend failed.
    Backend(E),
}

/// A malformed batch or decoding request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InputError {
    /// The batch has no tokens.
    Empty,
    /// Two per-token inputs differ in length.
    LengthMismatch {
        /// What was being compared.
        what: &'static str,
        /// The expected length.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// A token id is not below the vocabulary size.
    TokenOutOfVocab {
        /// Position in the batch.
        index: usize,
        /// The token id.
        token: u32,
    },
    /// `seq_starts` does not start at 0, end at N and increase strictly.
    BadSeqStarts,
    /// No forward pass has run, so there is nothing to differentiate or read.
    NoForward,
    /// The backward pass was given a nonzero weight on a row that the forward pass did
    /// not score ([`Transformer::forward_scored`](super::Transformer::forward_scored)).
    WeightOnUnscoredRow {
        /// Position in the batch.
        index: usize,
    },
    /// A KV cache is full.
    CacheFull {
        /// The cache's capacity in tokens per sequence.
        capacity: usize,
    },
    /// A prompt adds no token to what its sequence's KV cache already holds, so a
    /// prefill has no row to compute its next token from.
    NothingNew {
        /// The sequence (row of the cache).
        sequence: usize,
        /// Tokens its cache holds.
        cached: u32,
    },
    /// LoRA adapters that cannot be put on this model (the reason).
    Lora(alloc::string::String),
    /// A backward pass, optimizer step or adapters asked of a model whose weights are
    /// frozen ([`Transformer::new_frozen`](super::Transformer::new_frozen)).
    Frozen,
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputError::Empty => write!(f, "the batch has no tokens"),
            InputError::LengthMismatch {
                what,
                expected,
                got,
            } => write!(f, "{what}: expected length {expected}, got {got}"),
            InputError::TokenOutOfVocab { index, token } => {
                write!(
                    f,
                    "token {token} at position {index} is outside the vocabulary"
                )
            }
            InputError::BadSeqStarts => write!(
                f,
                "seq_starts must start at 0, end at the token count and increase strictly"
            ),
            InputError::NoForward => write!(f, "no forward pass has run on this batch"),
            InputError::Lora(why) => write!(f, "LoRA adapters: {why}"),
            InputError::Frozen => write!(
                f,
                "the model's weights are frozen for inference (`Transformer::new_frozen`): it \
                 has no gradients, optimizer steps or adapters"
            ),
            InputError::WeightOnUnscoredRow { index } => write!(
                f,
                "the backward weight at position {index} is not 0, but the forward pass did not score that row"
            ),
            InputError::CacheFull { capacity } => {
                write!(f, "the KV cache is full ({capacity} tokens per sequence)")
            }
            InputError::NothingNew { sequence, cached } => write!(
                f,
                "sequence {sequence}'s prompt has no token beyond the {cached} its KV cache holds"
            ),
        }
    }
}

impl<E: fmt::Display> fmt::Display for ModelError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelError::Config(e) => write!(f, "{e}"),
            ModelError::Input(e) => write!(f, "model input: {e}"),
            ModelError::Backend(e) => write!(f, "backend: {e}"),
        }
    }
}

#[cfg(feature = "std")]
impl<E: fmt::Debug + fmt::Display> std::error::Error for ModelError<E> {}

pub(crate) type Result<T, K> = core::result::Result<T, ModelError<<K as Kernels>::Error>>;

pub(crate) fn backend<E>(e: E) -> ModelError<E> {
    ModelError::Backend(e)
}

pub(crate) fn input<E>(e: InputError) -> ModelError<E> {
    ModelError::Input(e)
}

/// `Ok` when `got == expected`, else the [`InputError::LengthMismatch`] naming `what`.
pub(crate) fn same_len<E>(
    what: &'static str,
    expected: usize,
    got: usize,
) -> core::result::Result<(), ModelError<E>> {
    if got == expected {
        Ok(())
    } else {
        Err(input(InputError::LengthMismatch {
            what,
            expected,
            got,
        }))
    }
}
