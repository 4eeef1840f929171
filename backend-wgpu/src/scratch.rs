//! Buffers the backend keeps for itself between calls: reduction partials, the
//! attention backward's row statistics, one chunk of logits, the embedding backward's
//! position links, and small index and table data built on the host (attention spans,
//! cache lengths, RoPE frequencies), the latter re-uploaded only when their inputs
//! change.

use sage_transformer::{BufferId, IndexBufferId, Indices, Kernels, Tensor};

use crate::error::WgpuError;
use crate::WgpuBackend;

/// An `f32` scratch buffer, by purpose.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Scratch {
    /// Block sums of the sum of squares, every level of the tree.
    Sums,
    /// Column sums of blocks of rows (RMSNorm weight and bias gradients).
    ColumnPartials,
    /// delta[N, H] of the attention backward.
    Delta,
    /// One chunk of logits [rows, V] of the output head.
    Logits,
    /// The unused log-sum-exp [B, H] of a decoding step.
    DecodeLse,
    /// RoPE inverse frequencies [hd / 2].
    RopeFrequencies,
}

/// A `u32` scratch buffer, by purpose.
#[derive(Clone, Copy, Debug)]
pub(crate) enum IndexScratch {
    /// Attention spans of a packed batch: keys per query [N, 2], then queries per key.
    TrainingSpans,
    /// Key spans of a decoding step [B, 2].
    DecodeSpans,
    /// Filled cache rows per sequence [B].
    CacheLengths,
    /// The embedding backward's position links [2, N].
    EmbeddingLinks,
}

/// The scratch buffers and what the cached ones were built from.
#[derive(Default)]
pub(crate) struct ScratchBuffers {
    f32s: [Option<(BufferId, usize)>; 6],
    u32s: [Option<(IndexBufferId, usize)>; 4],
    /// `seq_starts` of the spans in [`IndexScratch::TrainingSpans`].
    pub(crate) spans_of: Vec<u32>,
    /// (theta bits, head_dim) of the table in [`Scratch::RopeFrequencies`].
    pub(crate) rope_of: Option<(u32, usize)>,
}

impl WgpuBackend {
    /// The first `len` elements of an `f32` scratch buffer, grown as needed (its
    /// contents are left from earlier use).
    pub(crate) fn scratch(&mut self, which: Scratch, len: usize) -> Result<Tensor, WgpuError> {
        let slot = which as usize;
        if let Some((buffer, capacity)) = self.scratch.f32s[slot] {
            if capacity >= len {
                return Ok(Tensor {
                    buffer,
                    offset: 0,
                    len,
                });
            }
            self.scratch.f32s[slot] = None;
            self.free(buffer)?;
        }
        let buffer = self.alloc(len)?;
        self.scratch.f32s[slot] = Some((buffer, len));
        Ok(Tensor::whole(buffer, len))
    }

    /// An index scratch buffer holding `data` (uploaded in command order).
    pub(crate) fn index_scratch(
        &mut self,
        which: IndexScratch,
        data: &[u32],
    ) -> Result<Indices, WgpuError> {
        let indices = self.index_space(which, data.len())?;
        self.write_indices(indices, data)?;
        Ok(indices)
    }

    /// The first `len` elements of an index scratch buffer, grown as needed (its
    /// contents are left from earlier use), for a kernel to fill.
    pub(crate) fn index_space(
        &mut self,
        which: IndexScratch,
        len: usize,
    ) -> Result<Indices, WgpuError> {
        let slot = which as usize;
        if let Some((buffer, capacity)) = self.scratch.u32s[slot] {
            if capacity >= len {
                return Ok(Indices {
                    buffer,
                    offset: 0,
                    len,
                });
            }
            self.scratch.u32s[slot] = None;
            self.free_indices(buffer)?;
        }
        let buffer = self.alloc_indices(len)?;
        self.scratch.u32s[slot] = Some((buffer, len));
        Ok(Indices::whole(buffer, len))
    }

    /// The current contents' handle of an index scratch buffer of `len` elements.
    pub(crate) fn cached_indices(&self, which: IndexScratch, len: usize) -> Option<Indices> {
        match self.scratch.u32s[which as usize] {
            Some((buffer, capacity)) if capacity >= len => Some(Indices {
                buffer,
                offset: 0,
                len,
            }),
            _ => None,
        }
    }
}
