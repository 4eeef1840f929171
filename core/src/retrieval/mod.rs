//! Retrieval: which skills of a library a task is shown.
//!
//! This module owns the four retrieval modes of SAGE (see [`RetrievalMode`]) and the
//! indices behind them:
//! - same scenario ([`same_scenario`]): skills written by other tasks of the task's
//!   scenario;
//! - query n-gram ([`NgramIndex`]): Jaccard similarity of word n-grams between the new
//!   task's instruction and the instruction of the task that wrote each skill;
//! - query embedding and skill embedding ([`EmbeddingIndex`] over an [`Embedder`]):
//!   cosine similarity between the new instruction's embedding and the embedding of
//!   each skill's origin instruction, or of each skill's source.
//!
//! [`Retriever`] ties a mode, an index and an embedder together for a trainer. Every
//! query returns [`Hit`]s (skill name and score), best first; ties are broken by the
//! order entries were added, earlier first, so results are deterministic. Counting
//! retrievals in the library is done by [`Retriever::retrieve`] only; the lower-level
//! functions leave it to the caller.

mod embedding;
mod error;
mod hashing;
mod mode;
mod ngram;
mod retriever;
mod scenario;
mod topk;
mod words;

use alloc::string::String;
use serde::{Deserialize, Serialize};

pub use embedding::{cosine, Embedder, EmbeddingIndex};
pub use error::{IndexError, RetrievalError};
pub use hashing::HashingEmbedder;
pub use mode::{ParseModeError, RetrievalMode};
pub use ngram::{jaccard, NgramIndex};
pub use retriever::Retriever;
pub use scenario::same_scenario;
pub use words::words;

/// One retrieved skill: its name and how well it matches the query.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    /// The skill's name.
    pub name: String,
    /// The similarity: Jaccard in `[0, 1]`, cosine in `[-1, 1]`, or 1 for same scenario.
    pub score: f32,
}
