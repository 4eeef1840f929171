//! Why a tokenizer could not be loaded, trained, saved, or could not encode or decode.

use std::fmt;
use std::path::PathBuf;

/// Every tokenizer failure; the message names the file or the text at fault.
#[derive(Debug)]
pub enum TokenizerError {
    /// A `tokenizer.json` could not be read (missing file, no permission).
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A `tokenizer.json` is not a tokenizer the `tokenizers` crate understands
    /// (corrupt JSON, unknown model type).
    Parse {
        /// The file, when the JSON came from one.
        path: Option<PathBuf>,
        /// The parser's message.
        message: String,
    },
    /// A ChatML special token is missing from the vocabulary.
    MissingSpecialToken {
        /// The file, when the tokenizer came from one.
        path: Option<PathBuf>,
        /// The token's text, e.g. `<|im_end|>`.
        token: &'static str,
    },
    /// A training setting is out of range.
    Config {
        /// The setting.
        field: &'static str,
        /// What it must be.
        requirement: String,
    },
    /// Training the BPE model failed.
    Train(String),
    /// Writing `tokenizer.json` failed.
    Write {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// Encoding a text failed.
    Encode(String),
    /// Encoding plain text produced a ChatML special token, which the tokenizer's own
    /// vocabulary allows but the chat format forbids.
    SpecialTokenInText {
        /// The special token's text.
        token: String,
    },
    /// A token id is outside the vocabulary.
    UnknownId {
        /// The id.
        id: u32,
        /// The vocabulary size (every valid id is below it).
        vocab_size: usize,
    },
    /// Decoding failed.
    Decode(String),
}

/// `path` as text, or `<memory>` for a tokenizer that came from no file.
fn origin(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map_or_else(|| "<memory>".to_owned(), |p| p.display().to_string())
}

impl fmt::Display for TokenizerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenizerError::Read { path, source } => {
                write!(f, "cannot read tokenizer file {}: {source}", path.display())
            }
            TokenizerError::Parse { path, message } => write!(
                f,
                "tokenizer file {} is not a valid tokenizer.json: {message}",
                origin(path)
            ),
            TokenizerError::MissingSpecialToken { path, token } => write!(
                f,
                "tokenizer {} lacks the ChatML special token {token}",
                origin(path)
            ),
            TokenizerError::Config { field, requirement } => {
                write!(f, "tokenizer training: `{field}` must be {requirement}")
            }
            TokenizerError::Train(message) => write!(f, "tokenizer training failed: {message}"),
            TokenizerError::Write { path, message } => {
                write!(
                    f,
                    "cannot write tokenizer file {}: {message}",
                    path.display()
                )
            }
            TokenizerError::Encode(message) => write!(f, "cannot encode text: {message}"),
            TokenizerError::SpecialTokenInText { token } => write!(
                f,
                "encoding plain text produced the special token {token}; this tokenizer's \
                 vocabulary maps text onto a ChatML control token"
            ),
            TokenizerError::UnknownId { id, vocab_size } => write!(
                f,
                "token id {id} is outside the vocabulary of {vocab_size} tokens"
            ),
            TokenizerError::Decode(message) => write!(f, "cannot decode tokens: {message}"),
        }
    }
}

impl std::error::Error for TokenizerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TokenizerError::Read { source, .. } => Some(source),
            _ => None,
        }
    }
}
