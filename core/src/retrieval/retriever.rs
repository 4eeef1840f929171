//! [`Retriever`]: one retrieval mode with its index and embedder, kept in step with a
//! skill library by its caller, answering "which skills does this task see".

use alloc::vec::Vec;

use super::embedding::{Embedder, EmbeddingIndex};
use super::error::RetrievalError;
use super::hashing::HashingEmbedder;
use super::mode::RetrievalMode;
use super::ngram::NgramIndex;
use super::scenario::same_scenario;
use super::Hit;
use crate::env::Task;
use crate::skill::{Skill, SkillLibrary};

/// A retrieval mode, its index, and the embedder the embedding modes use.
///
/// The caller [`add`](Retriever::add)s each skill as it enters the library (with the
/// instruction of the task that wrote it) and [`remove`](Retriever::remove)s it when it
/// leaves; skills indexed but missing from the library are never returned.
#[derive(Clone, Debug)]
pub struct Retriever<E = HashingEmbedder> {
    mode: RetrievalMode,
    k: usize,
    embedder: E,
    index: Index,
}

/// The index a mode needs.
#[derive(Clone, Debug)]
enum Index {
    /// No retrieval: nothing to keep.
    Nothing,
    /// Same scenario reads the library's origins directly.
    SameScenario,
    Ngram(NgramIndex),
    Embedding(EmbeddingIndex),
}

impl<E: Embedder> Retriever<E> {
    /// A retriever showing at most `k` skills per task under `mode`; `embedder` is used
    /// by the embedding modes only.
    ///
    /// # Errors
    /// [`RetrievalError::Index`] when an embedding mode meets an embedder of dimension 0.
    pub fn new(
        mode: RetrievalMode,
        k: usize,
        embedder: E,
    ) -> Result<Self, RetrievalError<E::Error>> {
        let index = match mode {
            RetrievalMode::None => Index::Nothing,
            RetrievalMode::SameScenario => Index::SameScenario,
            RetrievalMode::QueryNgram { n } => Index::Ngram(NgramIndex::new(n)),
            RetrievalMode::QueryEmbedding | RetrievalMode::SkillEmbedding => {
                Index::Embedding(EmbeddingIndex::new(embedder.dim())?)
            }
        };
        Ok(Retriever {
            mode,
            k,
            embedder,
            index,
        })
    }

    /// The mode.
    pub fn mode(&self) -> RetrievalMode {
        self.mode
    }

    /// The most skills shown per task.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Indexes `skill`, written by the task whose instruction is `origin_instruction`
    /// (skill-embedding mode embeds the skill's source instead). Replaces an entry of the
    /// same name.
    ///
    /// # Errors
    /// The embedder's failure, or the index refusing its vector.
    pub fn add(
        &mut self,
        skill: &Skill,
        origin_instruction: &str,
    ) -> Result<(), RetrievalError<E::Error>> {
        match &mut self.index {
            Index::Nothing | Index::SameScenario => {}
            Index::Ngram(index) => {
                index.insert(&skill.name, origin_instruction);
            }
            Index::Embedding(index) => {
                let text = match self.mode {
                    RetrievalMode::SkillEmbedding => skill.source.as_str(),
                    _ => origin_instruction,
                };
                let vector = self
                    .embedder
                    .embed(text)
                    .map_err(RetrievalError::Embedder)?;
                index.insert(&skill.name, &vector)?;
            }
        }
        Ok(())
    }

    /// Forgets the skill called `name`.
    pub fn remove(&mut self, name: &str) {
        match &mut self.index {
            Index::Nothing | Index::SameScenario => {}
            Index::Ngram(index) => {
                index.remove(name);
            }
            Index::Embedding(index) => {
                index.remove(name);
            }
        }
    }

    /// The skills of `library` that `task` sees, best first, without counting them.
    ///
    /// # Errors
    /// The embedder's failure, or the index refusing the query's vector.
    pub fn select<L: SkillLibrary + ?Sized>(
        &mut self,
        library: &L,
        task: &Task,
    ) -> Result<Vec<Hit>, RetrievalError<E::Error>> {
        let in_library = |name: &str| library.contains(name);
        Ok(match &self.index {
            Index::Nothing => Vec::new(),
            Index::SameScenario => same_scenario(library, task, self.k),
            Index::Ngram(index) => index.top_k_where(&task.instruction, self.k, in_library),
            Index::Embedding(index) => {
                let query = self
                    .embedder
                    .embed(&task.instruction)
                    .map_err(RetrievalError::Embedder)?;
                index.top_k_where(&query, self.k, in_library)?
            }
        })
    }

    /// As [`select`](Retriever::select), and counts one retrieval of each returned skill
    /// in `library` ([`SkillLibrary::record_retrieved`]).
    ///
    /// # Errors
    /// As [`select`](Retriever::select).
    pub fn retrieve<L: SkillLibrary + ?Sized>(
        &mut self,
        library: &mut L,
        task: &Task,
    ) -> Result<Vec<Hit>, RetrievalError<E::Error>> {
        let hits = self.select(library, task)?;
        for hit in &hits {
            library.record_retrieved(&hit.name)?;
        }
        Ok(hits)
    }
}
