//! The buffer store: device buffers indexed by [`BufferId`] / [`IndexBufferId`], and the
//! one place that turns a tensor handle into a checked device pointer. Buffers come
//! from cudarc's stream-ordered allocator (the driver's memory pool recycles freed
//! memory) and are zeroed on allocation; freeing is ordered after the work already
//! queued, so kernels that still read a freed buffer finish first.

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DeviceRepr, ValidAsZeroBits};
use sage_transformer::{BufferId, IndexBufferId, Indices, Tensor};

use crate::error::CudaError;

/// A live buffer: the allocation (freed when dropped), its device address and length.
struct Entry<T> {
    _memory: CudaSlice<T>,
    address: u64,
    len: usize,
}

/// A zero-filled device allocation of `len` elements (at least one) and its address.
pub(crate) fn allocate<T: DeviceRepr + ValidAsZeroBits>(
    stream: &std::sync::Arc<CudaStream>,
    len: usize,
) -> Result<(CudaSlice<T>, u64), CudaError> {
    let memory = stream.alloc_zeros::<T>(len.max(1))?;
    let address = {
        let (address, _record) = memory.device_ptr(stream);
        address
    };
    Ok((memory, address))
}

/// `f32` and `u32` device buffers; a freed id is never reused, so a stale handle fails
/// cleanly instead of reaching a newer buffer.
#[derive(Default)]
pub(crate) struct Store {
    f32s: Vec<Option<Entry<f32>>>,
    u32s: Vec<Option<Entry<u32>>>,
}

impl Store {
    /// A new zero-filled `f32` buffer of `len` elements.
    pub(crate) fn alloc(
        &mut self,
        stream: &std::sync::Arc<CudaStream>,
        len: usize,
    ) -> Result<BufferId, CudaError> {
        let id = u32::try_from(self.f32s.len()).map_err(|_| CudaError::TooManyBuffers)?;
        let (memory, address) = allocate(stream, len)?;
        self.f32s.push(Some(Entry {
            _memory: memory,
            address,
            len,
        }));
        Ok(BufferId(id))
    }

    /// A new zero-filled `u32` buffer of `len` elements.
    pub(crate) fn alloc_indices(
        &mut self,
        stream: &std::sync::Arc<CudaStream>,
        len: usize,
    ) -> Result<IndexBufferId, CudaError> {
        let id = u32::try_from(self.u32s.len()).map_err(|_| CudaError::TooManyBuffers)?;
        let (memory, address) = allocate(stream, len)?;
        self.u32s.push(Some(Entry {
            _memory: memory,
            address,
            len,
        }));
        Ok(IndexBufferId(id))
    }

    /// Releases an `f32` buffer.
    pub(crate) fn free(&mut self, buffer: BufferId) -> Result<(), CudaError> {
        match self.f32s.get_mut(buffer.0 as usize).and_then(Option::take) {
            Some(_) => Ok(()),
            None => Err(CudaError::UnknownBuffer(buffer.0)),
        }
    }

    /// Releases a `u32` buffer.
    pub(crate) fn free_indices(&mut self, buffer: IndexBufferId) -> Result<(), CudaError> {
        match self.u32s.get_mut(buffer.0 as usize).and_then(Option::take) {
            Some(_) => Ok(()),
            None => Err(CudaError::UnknownIndexBuffer(buffer.0)),
        }
    }

    /// The device address of a tensor's first element, after checking that the buffer
    /// is live and the range inside it.
    pub(crate) fn address(&self, t: Tensor) -> Result<u64, CudaError> {
        let entry = self
            .f32s
            .get(t.buffer.0 as usize)
            .and_then(Option::as_ref)
            .ok_or(CudaError::UnknownBuffer(t.buffer.0))?;
        checked("f32", t.buffer.0, t.offset, t.len, entry.len)?;
        Ok(entry.address + t.offset as u64 * 4)
    }

    /// The device address of an index range's first element, checked likewise.
    pub(crate) fn index_address(&self, i: Indices) -> Result<u64, CudaError> {
        let entry = self
            .u32s
            .get(i.buffer.0 as usize)
            .and_then(Option::as_ref)
            .ok_or(CudaError::UnknownIndexBuffer(i.buffer.0))?;
        checked("u32", i.buffer.0, i.offset, i.len, entry.len)?;
        Ok(entry.address + i.offset as u64 * 4)
    }
}

/// Fails with [`CudaError::OutOfRange`] unless `[offset, offset + len)` lies inside a
/// buffer of `buffer_len` elements.
fn checked(
    kind: &'static str,
    buffer: u32,
    offset: usize,
    len: usize,
    buffer_len: usize,
) -> Result<(), CudaError> {
    match offset.checked_add(len) {
        Some(end) if end <= buffer_len => Ok(()),
        _ => Err(CudaError::OutOfRange {
            kind,
            buffer,
            offset,
            len,
            buffer_len,
        }),
    }
}
