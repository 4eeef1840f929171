//! [`RetrievalMode`]: which of SAGE's retrieval modes a run uses, as a trainer config or
//! a command line names it.

use alloc::string::{String, ToString};
use core::fmt;
use core::num::NonZeroUsize;
use core::str::FromStr;
use serde::{Deserialize, Serialize};

/// How the skills shown to a task are chosen (SAGE.md, "Retrieval").
///
/// Serde writes it in snake case: `"same_scenario"`, `{"query_ngram": {"n": 2}}`,
/// `"query_embedding"`, `"skill_embedding"`, `"none"`. [`Display`](fmt::Display) and
/// [`FromStr`] use `same-scenario`, `query-ngram:2` (a bare `query-ngram` means n = 2),
/// `query-embedding`, `skill-embedding` and `none`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetrievalMode {
    /// Skills written by other tasks of the task's scenario (the paper's main setting).
    #[default]
    SameScenario,
    /// Jaccard similarity of word `n`-grams between the task's instruction and the
    /// instruction of the task that wrote each skill.
    QueryNgram {
        /// The n-gram length in words.
        n: NonZeroUsize,
    },
    /// Cosine similarity of the task's instruction embedding and the embedding of the
    /// instruction of the task that wrote each skill.
    QueryEmbedding,
    /// Cosine similarity of the task's instruction embedding and each skill's source
    /// embedding.
    SkillEmbedding,
    /// No skill is shown.
    None,
}

impl RetrievalMode {
    /// The n-gram length a bare `query-ngram` stands for.
    pub const DEFAULT_NGRAM: NonZeroUsize = NonZeroUsize::MIN.saturating_add(1);
}

impl fmt::Display for RetrievalMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetrievalMode::SameScenario => f.write_str("same-scenario"),
            RetrievalMode::QueryNgram { n } => write!(f, "query-ngram:{n}"),
            RetrievalMode::QueryEmbedding => f.write_str("query-embedding"),
            RetrievalMode::SkillEmbedding => f.write_str("skill-embedding"),
            RetrievalMode::None => f.write_str("none"),
        }
    }
}

impl FromStr for RetrievalMode {
    type Err = ParseModeError;

    fn from_str(text: &str) -> Result<RetrievalMode, ParseModeError> {
        let mode = match text {
            "same-scenario" => RetrievalMode::SameScenario,
            "query-ngram" => RetrievalMode::QueryNgram {
                n: RetrievalMode::DEFAULT_NGRAM,
            },
            "query-embedding" => RetrievalMode::QueryEmbedding,
            "skill-embedding" => RetrievalMode::SkillEmbedding,
            "none" => RetrievalMode::None,
            _ => {
                let n = text
                    .strip_prefix("query-ngram:")
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| ParseModeError {
                        input: text.to_string(),
                    })?;
                RetrievalMode::QueryNgram { n }
            }
        };
        Ok(mode)
    }
}

/// A text that names no [`RetrievalMode`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseModeError {
    /// The text given.
    pub input: String,
}

impl fmt::Display for ParseModeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown retrieval mode `{}` (expected same-scenario, query-ngram[:N] with N >= 1, \
             query-embedding, skill-embedding or none)",
            self.input
        )
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ParseModeError {}
