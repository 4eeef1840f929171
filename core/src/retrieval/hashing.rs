//! [`HashingEmbedder`]: a model-free [`Embedder`] by feature hashing, so the embedding
//! retrieval modes work without any model.

use alloc::vec;
use alloc::vec::Vec;
use core::convert::Infallible;
use core::num::NonZeroUsize;

use super::embedding::Embedder;
use super::error::IndexError;
use super::words::{ngram_hashes, word_hashes};

/// Embeds a text as its word 1-grams to `max_n`-grams (as
/// [`words`](super::words) splits them), each hashed to one of `dim` buckets with a
/// hashed sign (+1 or -1), then scaled to unit length. Deterministic: the same text gives
/// the same vector on every run and platform. A text without words embeds to zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashingEmbedder {
    dim: usize,
    max_n: NonZeroUsize,
}

impl HashingEmbedder {
    /// The dimension of [`HashingEmbedder::default`].
    pub const DEFAULT_DIM: usize = 256;

    /// An embedder into `dim` buckets over word n-grams of length 1 to `max_n`.
    ///
    /// # Errors
    /// [`IndexError::ZeroDimension`] when `dim` is 0.
    pub fn new(dim: usize, max_n: NonZeroUsize) -> Result<HashingEmbedder, IndexError> {
        if dim == 0 {
            return Err(IndexError::ZeroDimension);
        }
        Ok(HashingEmbedder { dim, max_n })
    }

    /// The longest n-gram hashed.
    pub fn max_n(&self) -> NonZeroUsize {
        self.max_n
    }
}

impl Default for HashingEmbedder {
    /// 256 buckets over word unigrams and bigrams.
    fn default() -> HashingEmbedder {
        HashingEmbedder {
            dim: HashingEmbedder::DEFAULT_DIM,
            max_n: NonZeroUsize::MIN.saturating_add(1),
        }
    }
}

impl Embedder for HashingEmbedder {
    type Error = Infallible;

    fn dim(&self) -> usize {
        self.dim
    }

    fn embed(&mut self, text: &str) -> Result<Vec<f32>, Infallible> {
        let words = word_hashes(text);
        let mut grams = Vec::new();
        for n in 1..=self.max_n.get() {
            ngram_hashes(&words, n, &mut grams);
        }
        let mut vector = vec![0f32; self.dim];
        for gram in grams {
            let bucket = (gram % self.dim as u64) as usize;
            let sign = if gram >> 63 == 0 { 1.0 } else { -1.0 };
            if let Some(component) = vector.get_mut(bucket) {
                *component += sign;
            }
        }
        let norm = libm::sqrt(vector.iter().map(|&x| f64::from(x) * f64::from(x)).sum());
        if norm > 0.0 {
            for component in &mut vector {
                *component = (f64::from(*component) / norm) as f32;
            }
        }
        Ok(vector)
    }
}
