//! [`Slots`]: the handle table behind every device's buffer store. Ids are handed out
//! in order and never reused, so a stale handle fails cleanly instead of reaching a
//! newer buffer; a lookup checks that the buffer is live and the range inside it.

use alloc::vec::Vec;

use crate::contract::ContractError;

/// Which kind of buffer a table holds: `f32` tensors or `u32` indices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferKind {
    /// `f32` buffers ([`BufferId`](crate::BufferId)).
    F32,
    /// `u32` buffers ([`IndexBufferId`](crate::IndexBufferId)).
    U32,
}

impl BufferKind {
    /// `"f32"` or `"u32"`.
    pub fn name(self) -> &'static str {
        match self {
            BufferKind::F32 => "f32",
            BufferKind::U32 => "u32",
        }
    }

    /// The error for a handle of this kind that names no live buffer.
    fn unknown(self, id: u32) -> ContractError {
        match self {
            BufferKind::F32 => ContractError::UnknownBuffer(id),
            BufferKind::U32 => ContractError::UnknownIndexBuffer(id),
        }
    }
}

/// A device's buffers of one kind, by id: `T` is whatever the device keeps per buffer.
#[derive(Debug)]
pub struct Slots<T> {
    kind: BufferKind,
    /// `None` where a buffer was freed.
    entries: Vec<Option<T>>,
}

impl<T> Slots<T> {
    /// An empty table of `kind` buffers.
    pub const fn new(kind: BufferKind) -> Slots<T> {
        Slots {
            kind,
            entries: Vec::new(),
        }
    }

    /// Adds a buffer; its id, or [`ContractError::TooManyBuffers`] once 2^32 ids are out.
    pub fn insert(&mut self, entry: T) -> Result<u32, ContractError> {
        let id = u32::try_from(self.entries.len()).map_err(|_| ContractError::TooManyBuffers)?;
        self.entries.push(Some(entry));
        Ok(id)
    }

    /// The live buffer `id`.
    pub fn get(&self, id: u32) -> Result<&T, ContractError> {
        match self.entries.get(id as usize) {
            Some(Some(entry)) => Ok(entry),
            _ => Err(self.kind.unknown(id)),
        }
    }

    /// The live buffer `id`, mutably.
    pub fn get_mut(&mut self, id: u32) -> Result<&mut T, ContractError> {
        match self.entries.get_mut(id as usize) {
            Some(Some(entry)) => Ok(entry),
            _ => Err(self.kind.unknown(id)),
        }
    }

    /// Removes the live buffer `id` and returns it; the id stays invalid.
    pub fn remove(&mut self, id: u32) -> Result<T, ContractError> {
        match self.entries.get_mut(id as usize).and_then(Option::take) {
            Some(entry) => Ok(entry),
            None => Err(self.kind.unknown(id)),
        }
    }

    /// The live buffer `id` after checking that `[offset, offset + len)` lies inside
    /// it, whose length `len_of` gives.
    pub fn range(
        &self,
        id: u32,
        offset: usize,
        len: usize,
        len_of: impl Fn(&T) -> usize,
    ) -> Result<&T, ContractError> {
        let entry = self.get(id)?;
        check_range(self.kind, id, offset, len, len_of(entry))?;
        Ok(entry)
    }

    /// Like [`Slots::range`], mutably.
    pub fn range_mut(
        &mut self,
        id: u32,
        offset: usize,
        len: usize,
        len_of: impl Fn(&T) -> usize,
    ) -> Result<&mut T, ContractError> {
        let kind = self.kind;
        let entry = self.get_mut(id)?;
        check_range(kind, id, offset, len, len_of(entry))?;
        Ok(entry)
    }

    /// Every slot by id, `None` where a buffer was freed (a device that lends several
    /// buffers to one call splits this slice).
    pub fn slots_mut(&mut self) -> &mut [Option<T>] {
        &mut self.entries
    }

    /// The live buffers.
    pub fn live(&self) -> impl Iterator<Item = &T> {
        self.entries.iter().flatten()
    }
}

/// Fails with [`ContractError::OutOfRange`] unless `[offset, offset + len)` lies inside
/// a `kind` buffer `buffer` of `buffer_len` elements.
fn check_range(
    kind: BufferKind,
    buffer: u32,
    offset: usize,
    len: usize,
    buffer_len: usize,
) -> Result<(), ContractError> {
    match offset.checked_add(len) {
        Some(end) if end <= buffer_len => Ok(()),
        _ => Err(ContractError::OutOfRange {
            kind: kind.name(),
            buffer,
            offset,
            len,
            buffer_len,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn ids_are_never_reused_and_lookups_check_liveness_and_range() {
        let mut slots = Slots::new(BufferKind::U32);
        assert_eq!(slots.insert(vec![0u32; 4]), Ok(0));
        assert_eq!(slots.insert(vec![0u32; 2]), Ok(1));
        assert_eq!(slots.remove(0).map(|v| v.len()), Ok(4));
        assert_eq!(slots.get(0), Err(ContractError::UnknownIndexBuffer(0)));
        assert_eq!(slots.remove(0), Err(ContractError::UnknownIndexBuffer(0)));
        assert_eq!(slots.insert(vec![0u32; 3]), Ok(2));
        assert!(slots.range(1, 1, 1, Vec::len).is_ok());
        assert_eq!(
            slots.range(1, 1, 2, Vec::len),
            Err(ContractError::OutOfRange {
                kind: "u32",
                buffer: 1,
                offset: 1,
                len: 2,
                buffer_len: 2
            })
        );
        assert!(slots.range_mut(2, usize::MAX, 2, Vec::len).is_err());
        assert_eq!(slots.live().count(), 2);
        let floats: Slots<()> = Slots::new(BufferKind::F32);
        assert_eq!(floats.get(9), Err(ContractError::UnknownBuffer(9)));
    }
}
