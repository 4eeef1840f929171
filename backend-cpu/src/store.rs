//! The buffer store: host memory ([`Floats`] for f32 buffers, vectors for index
//! buffers) indexed by [`BufferId`] / [`IndexBufferId`] (the contract's [`Slots`]), and
//! the one place that turns tensor handles into slices, checking every range and lending
//! disjoint mutable and shared slices of the same buffer to one call without `unsafe`.
//! Every write to a buffer passes here, so the store also keeps the buffers' bf16
//! copies ([`Bf16Copies`]) current or out of use.

use std::fmt;

use sage_transformer::contract::check_disjoint;
use sage_transformer::device::{BufferKind, Slots};
use sage_transformer::{BufferId, IndexBufferId, Indices, Tensor};

use crate::copies::Bf16Copies;
use crate::error::CpuError;
use crate::floats::Floats;

/// `f32` and `u32` buffers, by id (see [`Slots`]).
pub(crate) struct Store {
    f32s: Slots<Floats>,
    u32s: Slots<Vec<u32>>,
    /// The bf16 copies of frozen buffers and of trainable weights read by decoding.
    copies: Bf16Copies,
}

impl Default for Store {
    fn default() -> Store {
        Store {
            f32s: Slots::new(BufferKind::F32),
            u32s: Slots::new(BufferKind::U32),
            copies: Bf16Copies::default(),
        }
    }
}

/// Counts rather than contents: buffers may hold millions of elements.
impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("f32_buffers", &self.f32s.live().count())
            .field(
                "f32_elements",
                &self.f32s.live().map(|floats| floats.len()).sum::<usize>(),
            )
            .field("u32_buffers", &self.u32s.live().count())
            .field(
                "u32_elements",
                &self.u32s.live().map(Vec::len).sum::<usize>(),
            )
            .field("bf16_copies", &self.copies.count())
            .finish()
    }
}

/// Slices lent to one kernel call: the tensors it writes, the tensors it reads, and the
/// index tensors it reads, each in the order they were asked for.
pub(crate) type Views<'a, const W: usize, const R: usize, const I: usize> =
    ([&'a mut [f32]; W], [&'a [f32]; R], [&'a [u32]; I]);

/// A zero-filled vector of `len` elements, or [`CpuError::OutOfMemory`]. The memory comes
/// zeroed from the allocator: a large buffer is fresh pages the kernel zeroes when each is
/// first touched, so a KV cache pays only for the positions its sequences fill, not a
/// pass over its whole capacity.
pub(crate) fn zeroed<T: bytemuck::Zeroable>(len: usize) -> Result<Vec<T>, CpuError> {
    bytemuck::allocation::try_zeroed_vec(len).map_err(|()| CpuError::OutOfMemory(len))
}

/// What a disjoint piece of one buffer is lent as.
enum Piece {
    /// The whole of write tensor `i`.
    Write(usize),
    /// The union of overlapping read tensors, listed by index.
    Reads(Vec<usize>),
}

impl Store {
    /// Adds a zero-filled `f32` buffer.
    pub(crate) fn alloc(&mut self, len: usize) -> Result<BufferId, CpuError> {
        Ok(BufferId(self.f32s.insert(Floats::zeroed(len)?)?))
    }

    /// Adds a zero-filled `f32` buffer with a bf16 copy (zero too), for frozen weights:
    /// only [`Store::write`] may change it, and [`Store::views_with_bf16_copy`] lends the
    /// copy beside it.
    pub(crate) fn alloc_with_bf16_copy(&mut self, len: usize) -> Result<BufferId, CpuError> {
        let buffer = self.alloc(len)?;
        if let Err(e) = self.copies.add_frozen(buffer.0, len) {
            self.f32s.remove(buffer.0)?;
            return Err(e);
        }
        Ok(buffer)
    }

    /// Adds a zero-filled `u32` buffer.
    pub(crate) fn alloc_indices(&mut self, len: usize) -> Result<IndexBufferId, CpuError> {
        Ok(IndexBufferId(self.u32s.insert(zeroed(len)?)?))
    }

    /// Drops an `f32` buffer; its id stays invalid.
    pub(crate) fn free(&mut self, buffer: BufferId) -> Result<(), CpuError> {
        self.f32s.remove(buffer.0)?;
        self.copies.remove(buffer.0);
        Ok(())
    }

    /// Drops a `u32` buffer; its id stays invalid.
    pub(crate) fn free_indices(&mut self, buffer: IndexBufferId) -> Result<(), CpuError> {
        self.u32s.remove(buffer.0)?;
        Ok(())
    }

    /// The elements of an index tensor, mutably.
    pub(crate) fn indices_mut(&mut self, indices: Indices) -> Result<&mut [u32], CpuError> {
        let Indices {
            buffer,
            offset,
            len,
        } = indices;
        let data = self.u32s.range_mut(buffer.0, offset, len, Vec::len)?;
        Ok(&mut data[offset..offset + len])
    }

    /// Copies host data into `dst` (`src.len() == dst.len`), and into its frozen bf16
    /// copy, rounded, where its buffer has one.
    pub(crate) fn write(&mut self, dst: Tensor, src: &[f32]) -> Result<(), CpuError> {
        let ([dst_view], [], []) = lend(&mut self.f32s, &self.u32s, [dst], [], [])?;
        dst_view.copy_from_slice(src);
        self.copies.written_from_host(dst, src);
        Ok(())
    }

    /// Lends `writes` mutably and `reads` and `indices` shared, after checking that every
    /// handle is live, every range inside its buffer, that no written tensor overlaps
    /// any other tensor of the call (reads may overlap each other), and that none is
    /// written in a buffer with a bf16 copy.
    pub(crate) fn views<const W: usize, const R: usize, const I: usize>(
        &mut self,
        writes: [Tensor; W],
        reads: [Tensor; R],
        indices: [Indices; I],
    ) -> Result<Views<'_, W, R, I>, CpuError> {
        self.copies.check_kernel_writes(&writes)?;
        lend(&mut self.f32s, &self.u32s, writes, reads, indices)
    }

    /// [`Store::views`], with the current bf16 copy of `weight` (one of `reads`) where
    /// its buffer has one. With `skinny`, the call is a skinny product of `weight`, which
    /// may first make the copy of a trainable buffer ([`Bf16Copies::note_skinny_read`]).
    pub(crate) fn views_with_bf16_copy<const W: usize, const R: usize, const I: usize>(
        &mut self,
        (writes, reads, indices): ([Tensor; W], [Tensor; R], [Indices; I]),
        weight: Tensor,
        skinny: bool,
    ) -> Result<(Views<'_, W, R, I>, Option<&[u16]>), CpuError> {
        if skinny {
            let buffer = self
                .f32s
                .range(weight.buffer.0, weight.offset, weight.len, |floats| {
                    floats.len()
                })?;
            self.copies.note_skinny_read(weight, buffer);
        }
        self.copies.check_kernel_writes(&writes)?;
        let views = lend(&mut self.f32s, &self.u32s, writes, reads, indices)?;
        Ok((views, self.copies.get(weight)))
    }
}

/// [`Store::views`] over the buffers `f32s` and `u32s`, without the check of frozen
/// weights.
fn lend<'a, const W: usize, const R: usize, const I: usize>(
    f32s: &'a mut Slots<Floats>,
    u32s: &'a Slots<Vec<u32>>,
    writes: [Tensor; W],
    reads: [Tensor; R],
    indices: [Indices; I],
) -> Result<Views<'a, W, R, I>, CpuError> {
    for tensor in writes.iter().chain(reads.iter()) {
        let (id, offset, len) = (tensor.buffer.0, tensor.offset, tensor.len);
        f32s.range(id, offset, len, |floats| floats.len())?;
    }
    check_disjoint(&writes, &reads)?;

    let mut write_views: [&mut [f32]; W] = core::array::from_fn(|_| <&mut [f32]>::default());
    let mut read_views: [&[f32]; R] = [&[]; R];
    // The buffers the call touches, in increasing id order, each split off the slots.
    let mut ids: Vec<usize> = writes
        .iter()
        .chain(reads.iter())
        .filter(|t| t.len > 0)
        .map(|t| t.buffer.0 as usize)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let mut slots: &mut [Option<Floats>] = f32s.slots_mut();
    let mut first_slot = 0;
    for id in ids {
        let (_, tail) = core::mem::take(&mut slots).split_at_mut(id - first_slot);
        let Some((slot, tail)) = tail.split_first_mut() else {
            break;
        };
        slots = tail;
        first_slot = id + 1;
        let Some(data) = slot.as_deref_mut() else {
            continue;
        };
        let pieces = pieces_of(id, &writes, &reads);
        let mut rest = data;
        let mut position = 0;
        for (start, end, piece) in pieces {
            let (_, tail) = core::mem::take(&mut rest).split_at_mut(start - position);
            let (lent, tail) = tail.split_at_mut(end - start);
            rest = tail;
            position = end;
            match piece {
                Piece::Write(i) => write_views[i] = lent,
                Piece::Reads(members) => {
                    let lent: &[f32] = lent;
                    for i in members {
                        let from = reads[i].offset - start;
                        read_views[i] = &lent[from..from + reads[i].len];
                    }
                }
            }
        }
    }
    let mut index_views: [&[u32]; I] = [&[]; I];
    for (view, handle) in index_views.iter_mut().zip(indices) {
        *view = index_range(u32s, handle)?;
    }
    Ok((write_views, read_views, index_views))
}

/// The elements of an index tensor in the `u32` buffers `u32s`.
fn index_range(u32s: &Slots<Vec<u32>>, indices: Indices) -> Result<&[u32], CpuError> {
    let Indices {
        buffer,
        offset,
        len,
    } = indices;
    let data = u32s.range(buffer.0, offset, len, Vec::len)?;
    Ok(&data[offset..offset + len])
}

/// The disjoint pieces of buffer `id` that one call touches, sorted by start: each
/// non-empty write alone, and each group of overlapping non-empty reads as their union.
/// Empty tensors get no piece (they keep their empty default view).
fn pieces_of(id: usize, writes: &[Tensor], reads: &[Tensor]) -> Vec<(usize, usize, Piece)> {
    let in_buffer = |t: &Tensor| t.buffer.0 as usize == id && t.len > 0;
    let mut pieces: Vec<(usize, usize, Piece)> = writes
        .iter()
        .enumerate()
        .filter(|(_, t)| in_buffer(t))
        .map(|(i, t)| (t.offset, t.offset + t.len, Piece::Write(i)))
        .collect();
    let mut read_order: Vec<usize> = (0..reads.len()).filter(|&i| in_buffer(&reads[i])).collect();
    read_order.sort_by_key(|&i| reads[i].offset);
    for i in read_order {
        let (start, end) = (reads[i].offset, reads[i].offset + reads[i].len);
        match pieces.last_mut() {
            Some((_, group_end, Piece::Reads(members))) if start < *group_end => {
                *group_end = (*group_end).max(end);
                members.push(i);
            }
            _ => pieces.push((start, end, Piece::Reads(vec![i]))),
        }
    }
    pieces.sort_by_key(|(start, _, _)| *start);
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_allocated_where_a_written_one_was_freed_reads_zero() {
        let mut store = Store::default();
        // Small buffers, which the allocator hands out again from its free lists without
        // clearing them, and a large one, which it maps afresh.
        for len in [1 << 10, 16 << 10, 4 << 20] {
            let first = store.alloc(len).unwrap();
            store
                .write(Tensor::whole(first, len), &vec![1.0; len])
                .unwrap();
            store.free(first).unwrap();
            let second = store.alloc(len).unwrap();
            let values = store.f32s.get(second.0).unwrap();
            assert!(values.iter().all(|&x| x == 0.0), "{len} elements");
            store.free(second).unwrap();
        }
    }

    #[test]
    fn a_length_no_allocation_can_hold_is_out_of_memory_naming_it() {
        let len = usize::MAX / 2;
        let err = zeroed::<f32>(len).unwrap_err();
        assert!(matches!(err, CpuError::OutOfMemory(n) if n == len), "{err}");
        assert!(err.to_string().contains(&len.to_string()), "{err}");
    }
}
