//! The buffer store: host vectors indexed by [`BufferId`] / [`IndexBufferId`], and the
//! one place that turns tensor handles into slices, checking every range and lending
//! disjoint mutable and shared slices of the same buffer to one call without `unsafe`.

use std::fmt;

use sage_transformer::{BufferId, IndexBufferId, Indices, Tensor};

use crate::error::CpuError;

/// `f32` and `u32` buffers; a freed slot stays empty (its id is never reused, so a stale
/// handle fails cleanly instead of reaching a newer buffer).
#[derive(Default)]
pub(crate) struct Store {
    f32s: Vec<Option<Vec<f32>>>,
    u32s: Vec<Option<Vec<u32>>>,
}

/// Counts rather than contents: buffers may hold millions of elements.
impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("f32_buffers", &self.f32s.iter().flatten().count())
            .field(
                "f32_elements",
                &self.f32s.iter().flatten().map(Vec::len).sum::<usize>(),
            )
            .field("u32_buffers", &self.u32s.iter().flatten().count())
            .field(
                "u32_elements",
                &self.u32s.iter().flatten().map(Vec::len).sum::<usize>(),
            )
            .finish()
    }
}

/// Slices lent to one kernel call: the tensors it writes, the tensors it reads, and the
/// index tensors it reads, each in the order they were asked for.
pub(crate) type Views<'a, const W: usize, const R: usize, const I: usize> =
    ([&'a mut [f32]; W], [&'a [f32]; R], [&'a [u32]; I]);

/// A zero-filled vector of `len` elements, or [`CpuError::OutOfMemory`].
fn zeroed<T: Copy + Default>(len: usize) -> Result<Vec<T>, CpuError> {
    let mut data = Vec::new();
    data.try_reserve_exact(len)
        .map_err(|_| CpuError::OutOfMemory(len))?;
    data.resize(len, T::default());
    Ok(data)
}

/// The next id of a store of `slots` slots.
fn next_id(slots: usize) -> Result<u32, CpuError> {
    u32::try_from(slots).map_err(|_| CpuError::TooManyBuffers)
}

/// Fails unless `[offset, offset + len)` lies inside a buffer of `buffer_len` elements.
fn check_range(
    kind: &'static str,
    buffer: u32,
    offset: usize,
    len: usize,
    buffer_len: usize,
) -> Result<(), CpuError> {
    match offset.checked_add(len) {
        Some(end) if end <= buffer_len => Ok(()),
        _ => Err(CpuError::OutOfRange {
            kind,
            buffer,
            offset,
            len,
            buffer_len,
        }),
    }
}

/// Whether two tensors share at least one element.
fn overlaps(a: &Tensor, b: &Tensor) -> bool {
    a.buffer == b.buffer
        && a.len > 0
        && b.len > 0
        && a.offset < b.offset + b.len
        && b.offset < a.offset + a.len
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
        let id = next_id(self.f32s.len())?;
        self.f32s.push(Some(zeroed(len)?));
        Ok(BufferId(id))
    }

    /// Adds a zero-filled `u32` buffer.
    pub(crate) fn alloc_indices(&mut self, len: usize) -> Result<IndexBufferId, CpuError> {
        let id = next_id(self.u32s.len())?;
        self.u32s.push(Some(zeroed(len)?));
        Ok(IndexBufferId(id))
    }

    /// Drops an `f32` buffer; its id stays invalid.
    pub(crate) fn free(&mut self, buffer: BufferId) -> Result<(), CpuError> {
        match self.f32s.get_mut(buffer.0 as usize) {
            Some(slot @ Some(_)) => {
                *slot = None;
                Ok(())
            }
            _ => Err(CpuError::UnknownBuffer(buffer.0)),
        }
    }

    /// Drops a `u32` buffer; its id stays invalid.
    pub(crate) fn free_indices(&mut self, buffer: IndexBufferId) -> Result<(), CpuError> {
        match self.u32s.get_mut(buffer.0 as usize) {
            Some(slot @ Some(_)) => {
                *slot = None;
                Ok(())
            }
            _ => Err(CpuError::UnknownIndexBuffer(buffer.0)),
        }
    }

    /// Length of a live `f32` buffer.
    fn f32_len(&self, buffer: BufferId) -> Result<usize, CpuError> {
        match self.f32s.get(buffer.0 as usize) {
            Some(Some(data)) => Ok(data.len()),
            _ => Err(CpuError::UnknownBuffer(buffer.0)),
        }
    }

    /// The elements of an index tensor, mutably.
    pub(crate) fn indices_mut(&mut self, indices: Indices) -> Result<&mut [u32], CpuError> {
        let data = match self.u32s.get_mut(indices.buffer.0 as usize) {
            Some(Some(data)) => data,
            _ => return Err(CpuError::UnknownIndexBuffer(indices.buffer.0)),
        };
        check_range(
            "u32",
            indices.buffer.0,
            indices.offset,
            indices.len,
            data.len(),
        )?;
        Ok(&mut data[indices.offset..indices.offset + indices.len])
    }

    /// Lends `writes` mutably and `reads` and `indices` shared, after checking that every
    /// handle is live, every range inside its buffer, and that no written tensor overlaps
    /// any other tensor of the call (reads may overlap each other).
    pub(crate) fn views<const W: usize, const R: usize, const I: usize>(
        &mut self,
        writes: [Tensor; W],
        reads: [Tensor; R],
        indices: [Indices; I],
    ) -> Result<Views<'_, W, R, I>, CpuError> {
        for tensor in writes.iter().chain(reads.iter()) {
            let buffer_len = self.f32_len(tensor.buffer)?;
            check_range(
                "f32",
                tensor.buffer.0,
                tensor.offset,
                tensor.len,
                buffer_len,
            )?;
        }
        for (i, write) in writes.iter().enumerate() {
            let others = writes.iter().skip(i + 1).chain(reads.iter());
            if let Some(other) = others.into_iter().find(|other| overlaps(write, other)) {
                return Err(CpuError::Overlap(*write, *other));
            }
        }

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
        let u32s = &self.u32s;
        let mut slots: &mut [Option<Vec<f32>>] = &mut self.f32s;
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
}

/// The elements of an index tensor in the `u32` slots `u32s`.
fn index_range(u32s: &[Option<Vec<u32>>], indices: Indices) -> Result<&[u32], CpuError> {
    let data = match u32s.get(indices.buffer.0 as usize) {
        Some(Some(data)) => data,
        _ => return Err(CpuError::UnknownIndexBuffer(indices.buffer.0)),
    };
    check_range(
        "u32",
        indices.buffer.0,
        indices.offset,
        indices.len,
        data.len(),
    )?;
    Ok(&data[indices.offset..indices.offset + indices.len])
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
