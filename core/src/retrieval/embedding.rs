//! Embedding retrieval: the [`Embedder`] trait a text-embedding model implements, the
//! [`cosine`] similarity, and [`EmbeddingIndex`], an exact cosine top-k over stored
//! vectors.
//!
//! A zero vector (stored or queried) has cosine 0 with everything. Vectors must have the
//! index's dimension and finite components.

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Ordering;
use hashbrown::HashMap;

use super::error::IndexError;
use super::topk::TopK;
use super::Hit;

/// Turns a text into a fixed-length vector (a sentence-embedding model, or
/// [`HashingEmbedder`](super::HashingEmbedder) when there is none).
pub trait Embedder {
    /// The embedder's own failure (a model or a connection failing).
    type Error;

    /// Length of every vector [`embed`](Embedder::embed) returns.
    fn dim(&self) -> usize;

    /// The embedding of `text`, of length [`dim`](Embedder::dim).
    fn embed(&mut self, text: &str) -> Result<Vec<f32>, Self::Error>;

    /// The embeddings of `texts`, in order. The default embeds one text at a time;
    /// batched models override it.
    fn embed_batch(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, Self::Error> {
        texts.iter().map(|text| self.embed(text)).collect()
    }
}

impl<E: Embedder + ?Sized> Embedder for &mut E {
    type Error = E::Error;

    fn dim(&self) -> usize {
        (**self).dim()
    }

    fn embed(&mut self, text: &str) -> Result<Vec<f32>, Self::Error> {
        (**self).embed(text)
    }

    fn embed_batch(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, Self::Error> {
        (**self).embed_batch(texts)
    }
}

/// The cosine similarity of `a` and `b`, in `[-1, 1]`; 0 when either is zero.
///
/// # Errors
/// [`IndexError::DimensionMismatch`] when the lengths differ,
/// [`IndexError::NonFinite`] when a component is NaN or infinite.
pub fn cosine(a: &[f32], b: &[f32]) -> Result<f32, IndexError> {
    let dim = a.len();
    Ok(clamped_dot(&unit(a, dim)?, &unit(b, dim)?))
}

/// Stored vectors, scaled to unit length, and an exact cosine top-k over them.
///
/// Entries keep the position they were first added at (replacing an entry keeps it),
/// which breaks ties in [`top_k`](EmbeddingIndex::top_k). A query is an exact scan of
/// every stored vector; a removed entry leaves its zeroed slot behind.
#[derive(Clone, Debug)]
pub struct EmbeddingIndex {
    dim: usize,
    vectors: Vec<f32>,
    names: Vec<Option<String>>,
    slots: HashMap<String, usize>,
}

impl EmbeddingIndex {
    /// An empty index of `dim`-dimensional vectors.
    ///
    /// # Errors
    /// [`IndexError::ZeroDimension`] when `dim` is 0.
    pub fn new(dim: usize) -> Result<EmbeddingIndex, IndexError> {
        if dim == 0 {
            return Err(IndexError::ZeroDimension);
        }
        Ok(EmbeddingIndex {
            dim,
            vectors: Vec::new(),
            names: Vec::new(),
            slots: HashMap::new(),
        })
    }

    /// The vectors' dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of indexed skills.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// No skill is indexed.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// A skill called `name` is indexed.
    pub fn contains(&self, name: &str) -> bool {
        self.slots.contains_key(name)
    }

    /// Indexes skill `name` under `vector`; an entry of the same name is replaced in
    /// place. Returns whether one was.
    ///
    /// # Errors
    /// [`IndexError::DimensionMismatch`] or [`IndexError::NonFinite`]; the index is then
    /// unchanged.
    pub fn insert(&mut self, name: &str, vector: &[f32]) -> Result<bool, IndexError> {
        let vector = unit(vector, self.dim)?;
        let replaced = self.slots.get(name).copied();
        let slot = replaced.unwrap_or(self.names.len());
        if replaced.is_none() {
            self.slots.insert(name.into(), slot);
            self.names.push(Some(name.into()));
            self.vectors.extend_from_slice(&vector);
        } else if let Some(stored) = self.vectors.chunks_exact_mut(self.dim).nth(slot) {
            stored.copy_from_slice(&vector);
        }
        Ok(replaced.is_some())
    }

    /// Removes skill `name`. Returns whether it was indexed.
    pub fn remove(&mut self, name: &str) -> bool {
        let Some(slot) = self.slots.remove(name) else {
            return false;
        };
        if let Some(held) = self.names.get_mut(slot) {
            *held = None;
        }
        if let Some(stored) = self.vectors.chunks_exact_mut(self.dim).nth(slot) {
            stored.fill(0.0);
        }
        true
    }

    /// The at most `k` skills whose vectors are most cosine-similar to `query`, best
    /// first; ties go to the entry added first.
    ///
    /// # Errors
    /// [`IndexError::DimensionMismatch`] or [`IndexError::NonFinite`] for the query.
    pub fn top_k(&self, query: &[f32], k: usize) -> Result<Vec<Hit>, IndexError> {
        self.top_k_where(query, k, |_| true)
    }

    /// As [`top_k`](EmbeddingIndex::top_k), over the skills for which `keep(name)` holds
    /// (asked only of skills that would enter the top `k`).
    ///
    /// # Errors
    /// As [`top_k`](EmbeddingIndex::top_k).
    pub fn top_k_where(
        &self,
        query: &[f32],
        k: usize,
        mut keep: impl FnMut(&str) -> bool,
    ) -> Result<Vec<Hit>, IndexError> {
        let query = unit(query, self.dim)?;
        let mut top = TopK::new(k);
        for (slot, (stored, name)) in self
            .vectors
            .chunks_exact(self.dim)
            .zip(&self.names)
            .enumerate()
        {
            if let Some(name) = name {
                top.offer(Cosine(clamped_dot(&query, stored)), slot, || keep(name));
            }
        }
        Ok(top
            .into_sorted()
            .into_iter()
            .filter_map(|(Cosine(score), slot)| {
                let name = self.names.get(slot)?.as_ref()?;
                Some(Hit {
                    name: name.clone(),
                    score,
                })
            })
            .collect())
    }
}

/// `vector` scaled to unit length (zero stays zero), checked against `dim`.
fn unit(vector: &[f32], dim: usize) -> Result<Vec<f32>, IndexError> {
    if vector.len() != dim {
        return Err(IndexError::DimensionMismatch {
            expected: dim,
            found: vector.len(),
        });
    }
    if vector.iter().any(|x| !x.is_finite()) {
        return Err(IndexError::NonFinite);
    }
    let norm = libm::sqrt(vector.iter().map(|&x| f64::from(x) * f64::from(x)).sum());
    if norm == 0.0 {
        return Ok(vec![0.0; dim]);
    }
    Ok(vector
        .iter()
        .map(|&x| (f64::from(x) / norm) as f32)
        .collect())
}

/// The dot product of two unit (or zero) vectors of equal length, clamped to `[-1, 1]`
/// against rounding. Eight independent sums let the compiler vectorise it.
fn clamped_dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (a_chunks, b_chunks) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a_chunks
        .remainder()
        .iter()
        .zip(b_chunks.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for lane in 0..8 {
            lanes[lane] += x[lane] * y[lane];
        }
    }
    (lanes.iter().sum::<f32>() + tail).clamp(-1.0, 1.0)
}

/// A finite cosine score, totally ordered.
#[derive(Clone, Copy, Debug)]
struct Cosine(f32);

impl Ord for Cosine {
    fn cmp(&self, other: &Cosine) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl PartialOrd for Cosine {
    fn partial_cmp(&self, other: &Cosine) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Cosine {
    fn eq(&self, other: &Cosine) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Cosine {}
