//! Why a chat episode could not be built or extended.

use std::fmt;

use crate::tokenizer::TokenizerError;

/// Every chat failure. A failed push leaves the episode as it was.
#[derive(Debug)]
pub enum ChatError {
    /// Encoding or decoding a message failed.
    Tokenizer(TokenizerError),
    /// The episode would exceed the template's token limit.
    TooLong {
        /// The length the episode would have reached.
        len: usize,
        /// The limit.
        max_len: usize,
    },
    /// A push came out of turn: an agent turn while an observation is due, or the
    /// other way round.
    OutOfTurn {
        /// What the episode was waiting for.
        expected: &'static str,
        /// What was pushed.
        got: &'static str,
    },
    /// Generated tokens hold `<|im_end|>` before their last position: a turn cannot
    /// close and go on.
    EndInsideTurn {
        /// Position of the early `<|im_end|>` within the generated tokens.
        position: usize,
    },
    /// A conversation does not follow `system, user, (assistant, user)*, [assistant]`.
    Conversation {
        /// Index of the message at fault.
        index: usize,
        /// What is wrong with it.
        problem: String,
    },
    /// A JSON line of chat messages could not be read.
    Json(String),
}

impl fmt::Display for ChatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChatError::Tokenizer(e) => write!(f, "{e}"),
            ChatError::TooLong { len, max_len } => write!(
                f,
                "chat episode would be {len} tokens, over the limit of {max_len}"
            ),
            ChatError::OutOfTurn { expected, got } => {
                write!(f, "chat episode expects {expected} next, got {got}")
            }
            ChatError::EndInsideTurn { position } => write!(
                f,
                "generated tokens hold <|im_end|> at position {position}, before their end"
            ),
            ChatError::Conversation { index, problem } => {
                write!(f, "conversation message {index}: {problem}")
            }
            ChatError::Json(message) => write!(f, "chat messages JSON: {message}"),
        }
    }
}

impl std::error::Error for ChatError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ChatError::Tokenizer(e) => Some(e),
            _ => None,
        }
    }
}

impl From<TokenizerError> for ChatError {
    fn from(e: TokenizerError) -> ChatError {
        ChatError::Tokenizer(e)
    }
}
