//! [`WeightsError`]: everything that can go wrong reading or writing a checkpoint,
//! each case naming the file and, where there is one, the tensor.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// A checkpoint that cannot be read or written.
#[derive(Debug)]
pub enum WeightsError {
    /// A file could not be read or written.
    Io {
        /// The file.
        file: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// A safetensors file or a shard index is malformed (truncated, corrupt header, ...).
    Format {
        /// The file.
        file: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// `config.json` is malformed or describes a model this project cannot run.
    Config {
        /// The file.
        file: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// A tensor the model needs is not in the checkpoint.
    MissingTensor {
        /// The tensor's Hugging Face name.
        tensor: String,
        /// The file (or shard index) that should hold it.
        file: PathBuf,
    },
    /// The checkpoint holds a tensor the model has no place for.
    UnexpectedTensor {
        /// The tensor's name.
        tensor: String,
        /// The file (or shard index) that lists it.
        file: PathBuf,
    },
    /// A tensor's shape differs from the one the configuration implies.
    Shape {
        /// The tensor's name.
        tensor: String,
        /// The file holding it.
        file: PathBuf,
        /// The shape the configuration implies.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// A tensor is stored in a dtype other than F32, BF16 or F16.
    Dtype {
        /// The tensor's name.
        tensor: String,
        /// The file holding it.
        file: PathBuf,
        /// The dtype in the file, as safetensors names it.
        dtype: String,
    },
    /// A shard named by the index does not exist.
    MissingShard {
        /// The missing shard.
        shard: PathBuf,
        /// The index naming it.
        index: PathBuf,
    },
    /// The configuration ties the embeddings but `lm_head.weight` differs from
    /// `model.embed_tokens.weight`.
    TiedMismatch {
        /// The file holding `lm_head.weight`.
        file: PathBuf,
    },
    /// The compute backend failed while moving parameters.
    Backend {
        /// What was being moved.
        context: String,
        /// The backend's error.
        detail: String,
    },
}

impl WeightsError {
    pub(crate) fn io(file: &Path, source: io::Error) -> WeightsError {
        WeightsError::Io {
            file: file.to_path_buf(),
            source,
        }
    }

    pub(crate) fn format(file: &Path, detail: impl fmt::Display) -> WeightsError {
        WeightsError::Format {
            file: file.to_path_buf(),
            detail: detail.to_string(),
        }
    }

    pub(crate) fn config(file: &Path, detail: impl fmt::Display) -> WeightsError {
        WeightsError::Config {
            file: file.to_path_buf(),
            detail: detail.to_string(),
        }
    }

    pub(crate) fn backend(context: impl fmt::Display, detail: impl fmt::Display) -> WeightsError {
        WeightsError::Backend {
            context: context.to_string(),
            detail: detail.to_string(),
        }
    }
}

impl fmt::Display for WeightsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WeightsError::Io { file, source } => write!(f, "{}: {source}", file.display()),
            WeightsError::Format { file, detail } => {
                write!(f, "{}: not a valid file: {detail}", file.display())
            }
            WeightsError::Config { file, detail } => write!(f, "{}: {detail}", file.display()),
            WeightsError::MissingTensor { tensor, file } => {
                write!(f, "{}: tensor `{tensor}` is missing", file.display())
            }
            WeightsError::UnexpectedTensor { tensor, file } => write!(
                f,
                "{}: tensor `{tensor}` is not a parameter of this model",
                file.display()
            ),
            WeightsError::Shape {
                tensor,
                file,
                expected,
                found,
            } => write!(
                f,
                "{}: tensor `{tensor}` has shape {found:?}, the config implies {expected:?}",
                file.display()
            ),
            WeightsError::Dtype {
                tensor,
                file,
                dtype,
            } => write!(
                f,
                "{}: tensor `{tensor}` is stored as {dtype}; only F32, BF16 and F16 are supported",
                file.display()
            ),
            WeightsError::MissingShard { shard, index } => write!(
                f,
                "{}: shard {} does not exist",
                index.display(),
                shard.display()
            ),
            WeightsError::TiedMismatch { file } => write!(
                f,
                "{}: the config ties the embeddings, but `lm_head.weight` differs from \
                 `model.embed_tokens.weight`",
                file.display()
            ),
            WeightsError::Backend { context, detail } => {
                write!(f, "backend failed while {context}: {detail}")
            }
        }
    }
}

impl std::error::Error for WeightsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WeightsError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
