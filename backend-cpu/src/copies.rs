//! bf16 copies of weight buffers, which the skinny products of `Precision::Bf16` (a
//! decoding step's) stream in place of the f32 values: half the bytes of a product
//! bound by them. Two kinds, by buffer id:
//! - a frozen buffer's copy (`Kernels::alloc_frozen`: a model loaded for inference) is
//!   made with the buffer and written with it by the host; no kernel may write the
//!   buffer, so the copy is always current;
//! - a trainable buffer's copy (a policy's weights between optimizer steps) is made when
//!   a skinny product reads the same tensor of it a second time with no write to the
//!   buffer in between (a decoding step's weight read again by the next step), and is
//!   dropped from use by any write to the buffer. A training step's small forward reads
//!   each weight once before the optimizer writes it, so it never pays for a copy.
//!
//! A copy holds two bf16 values a `u32` lane, so that an even range of it starts on a
//! 4-byte boundary and a product can read it as lanes of two.

use std::collections::{HashMap, HashSet};

use rayon::prelude::*;
use sage_transformer::{ContractError, Tensor};

use crate::bf16::bf16_bits;
use crate::error::CpuError;
use crate::store::zeroed;

/// Elements rounded per rayon task when a copy is made.
const ROUNDING_CHUNK: usize = 1 << 16;

/// A trainable buffer's copy and what decides when it is made.
#[derive(Default)]
struct Shadow {
    /// [len.div_ceil(2)] lanes; empty until first made.
    lanes: Vec<u32>,
    /// Whether `lanes` holds the buffer's values as they are.
    current: bool,
    /// The offsets of the tensors skinny products read since the buffer was written.
    read: HashSet<usize>,
}

/// The bf16 copies of the store's buffers.
#[derive(Default)]
pub(crate) struct Bf16Copies {
    /// Frozen buffers' copies, by buffer id.
    frozen: HashMap<u32, Vec<u32>>,
    /// Trainable buffers' copies, by buffer id, once a skinny product has read them.
    shadows: HashMap<u32, Shadow>,
}

/// `values` rounded to bf16 into `lanes`, two a lane (the even element in the low
/// half; zero past the end).
fn round_into(lanes: &mut [u32], values: &[f32]) {
    lanes
        .par_chunks_mut(ROUNDING_CHUNK / 2)
        .zip(values.par_chunks(ROUNDING_CHUNK))
        .for_each(|(lanes, values)| {
            for (lane, pair) in lanes.iter_mut().zip(values.chunks(2)) {
                let high = pair.get(1).map_or(0, |&x| bf16_bits(x));
                *lane = high << 16 | bf16_bits(pair[0]);
            }
        });
}

impl Bf16Copies {
    /// How many buffers have a copy made (frozen, and trainable ones current or not).
    pub(crate) fn count(&self) -> usize {
        self.frozen.len()
            + self
                .shadows
                .values()
                .filter(|s| !s.lanes.is_empty())
                .count()
    }

    /// Gives frozen buffer `id` of `len` elements its copy (zero, as the buffer is).
    pub(crate) fn add_frozen(&mut self, id: u32, len: usize) -> Result<(), CpuError> {
        self.frozen.insert(id, zeroed(len.div_ceil(2))?);
        Ok(())
    }

    /// Forgets buffer `id`'s copy (the buffer is freed).
    pub(crate) fn remove(&mut self, id: u32) {
        self.frozen.remove(&id);
        self.shadows.remove(&id);
    }

    /// The host wrote `src` into `dst`: a frozen copy takes the rounded values, a
    /// trainable one is no longer current.
    pub(crate) fn written_from_host(&mut self, dst: Tensor, src: &[f32]) {
        if let Some(lanes) = self.frozen.get_mut(&dst.buffer.0) {
            let halves = bytemuck::cast_slice_mut::<u32, u16>(lanes);
            for (bits, &x) in halves[dst.offset..dst.offset + dst.len].iter_mut().zip(src) {
                *bits = bf16_bits(x) as u16;
            }
        }
        self.written(&[dst]);
    }

    /// A kernel is about to write `writes`: fails if one lies in a frozen buffer (its
    /// copy would go stale); trainable copies of the buffers written stop being current.
    pub(crate) fn check_kernel_writes(&mut self, writes: &[Tensor]) -> Result<(), CpuError> {
        if let Some(t) = writes
            .iter()
            .find(|t| t.len > 0 && self.frozen.contains_key(&t.buffer.0))
        {
            return Err(CpuError::Contract(ContractError::BadArgument(format!(
                "buffer {} holds frozen weights (`alloc_frozen`): only `write` from the host \
                 may change it, not a kernel",
                t.buffer.0
            ))));
        }
        self.written(writes);
        Ok(())
    }

    /// Marks the trainable copies of the buffers of `writes` stale.
    fn written(&mut self, writes: &[Tensor]) {
        if self.shadows.is_empty() {
            return;
        }
        for t in writes.iter().filter(|t| t.len > 0) {
            if let Some(shadow) = self.shadows.get_mut(&t.buffer.0) {
                shadow.current = false;
                shadow.read.clear();
            }
        }
    }

    /// A skinny product is about to read `weight`, a tensor of the buffer whose elements
    /// are `buffer`: makes that buffer's copy current if this is the second read of
    /// `weight` since the buffer was last written. Where the copy cannot be allocated,
    /// none is made (the product reads the f32 values).
    pub(crate) fn note_skinny_read(&mut self, weight: Tensor, buffer: &[f32]) {
        if self.frozen.contains_key(&weight.buffer.0) {
            return;
        }
        let shadow = self.shadows.entry(weight.buffer.0).or_default();
        if shadow.current || shadow.read.insert(weight.offset) {
            return;
        }
        let len = buffer.len().div_ceil(2);
        if shadow.lanes.len() != len {
            let Ok(lanes) = zeroed(len) else {
                return;
            };
            shadow.lanes = lanes;
        }
        round_into(&mut shadow.lanes, buffer);
        shadow.current = true;
    }

    /// `tensor`'s bf16 values, where its buffer has a current copy.
    pub(crate) fn get(&self, tensor: Tensor) -> Option<&[u16]> {
        let lanes = match self.frozen.get(&tensor.buffer.0) {
            Some(lanes) => lanes,
            None => {
                let shadow = self.shadows.get(&tensor.buffer.0)?;
                if !shadow.current {
                    return None;
                }
                &shadow.lanes
            }
        };
        bytemuck::cast_slice(lanes).get(tensor.offset..tensor.offset + tensor.len)
    }
}
