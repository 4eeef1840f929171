//! [`CheckpointError`]: why a checkpoint could not be written, listed or loaded; every
//! case names the file or directory at fault.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::tokenizer::TokenizerError;
use crate::weights::WeightsError;

/// A checkpoint that cannot be written, listed or loaded.
#[derive(Debug)]
pub enum CheckpointError {
    /// A file or directory could not be created, read, written, renamed or removed.
    Io {
        /// The file or directory.
        file: PathBuf,
        /// What was being done, e.g. `cannot write`.
        action: &'static str,
        /// The operating system's error.
        source: io::Error,
    },
    /// The directory holds no `checkpoint.json`: it was never completely written.
    Incomplete {
        /// The directory.
        dir: PathBuf,
    },
    /// A file the checkpoint's manifest promises is not there.
    Missing {
        /// The missing file.
        file: PathBuf,
    },
    /// A JSON part (`state.json`, `library.json`, `checkpoint.json`) is malformed, or
    /// could not be serialised.
    Json {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The model's weights or `config.json` could not be written or read.
    Weights(WeightsError),
    /// `tokenizer.json` could not be written or read.
    Tokenizer(TokenizerError),
    /// `optimizer.bin` is truncated, corrupt or of an unknown format.
    CorruptOptimizer {
        /// The file.
        file: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// The optimizer's moments do not have one value per model parameter.
    MomentLength {
        /// The optimizer state's file.
        file: PathBuf,
        /// Values in each moment.
        moments: usize,
        /// Parameters of the model.
        params: usize,
    },
    /// The tokenizer has ids the model cannot embed (its vocabulary is larger than the
    /// model's).
    VocabMismatch {
        /// The tokenizer's file.
        file: PathBuf,
        /// Tokens in the tokenizer's vocabulary.
        tokenizer_vocab: usize,
        /// Rows of the model's embedding table.
        model_vocab: usize,
    },
    /// The optimizer could not be exported or rebuilt (backend failure, or an
    /// overriding config out of range).
    Optimizer {
        /// The optimizer state's file.
        file: PathBuf,
        /// What was being done, e.g. `cannot restore the optimizer from`.
        action: &'static str,
        /// The optimizer's error.
        detail: String,
    },
}

impl CheckpointError {
    /// An I/O failure of `action` on `file`.
    pub(crate) fn io(action: &'static str, file: &Path, source: io::Error) -> CheckpointError {
        CheckpointError::Io {
            file: file.to_path_buf(),
            action,
            source,
        }
    }

    /// A malformed or unserialisable JSON `file`.
    pub(crate) fn json(file: &Path, detail: impl fmt::Display) -> CheckpointError {
        CheckpointError::Json {
            file: file.to_path_buf(),
            detail: detail.to_string(),
        }
    }

    /// A corrupt optimizer state `file`.
    pub(crate) fn corrupt(file: &Path, problem: impl fmt::Display) -> CheckpointError {
        CheckpointError::CorruptOptimizer {
            file: file.to_path_buf(),
            problem: problem.to_string(),
        }
    }
}

impl fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckpointError::Io {
                file,
                action,
                source,
            } => write!(f, "{action} {}: {source}", file.display()),
            CheckpointError::Incomplete { dir } => write!(
                f,
                "{}: not a complete checkpoint (it has no checkpoint.json)",
                dir.display()
            ),
            CheckpointError::Missing { file } => {
                write!(f, "{}: missing from the checkpoint", file.display())
            }
            CheckpointError::Json { file, detail } => write!(f, "{}: {detail}", file.display()),
            CheckpointError::Weights(e) => write!(f, "checkpoint model: {e}"),
            CheckpointError::Tokenizer(e) => write!(f, "checkpoint tokenizer: {e}"),
            CheckpointError::CorruptOptimizer { file, problem } => {
                write!(f, "{}: corrupt optimizer state: {problem}", file.display())
            }
            CheckpointError::MomentLength {
                file,
                moments,
                params,
            } => write!(
                f,
                "{}: the optimizer's moments hold {moments} values but the model has {params} \
                 parameters",
                file.display()
            ),
            CheckpointError::VocabMismatch {
                file,
                tokenizer_vocab,
                model_vocab,
            } => write!(
                f,
                "{}: the tokenizer has {tokenizer_vocab} tokens but the model embeds only \
                 {model_vocab}",
                file.display()
            ),
            CheckpointError::Optimizer {
                file,
                action,
                detail,
            } => write!(f, "{action} {}: {detail}", file.display()),
        }
    }
}

impl std::error::Error for CheckpointError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CheckpointError::Io { source, .. } => Some(source),
            CheckpointError::Weights(e) => Some(e),
            CheckpointError::Tokenizer(e) => Some(e),
            _ => None,
        }
    }
}

impl From<WeightsError> for CheckpointError {
    fn from(e: WeightsError) -> Self {
        CheckpointError::Weights(e)
    }
}

impl From<TokenizerError> for CheckpointError {
    fn from(e: TokenizerError) -> Self {
        CheckpointError::Tokenizer(e)
    }
}
