//! The buffer store: device buffers indexed by [`BufferId`] / [`IndexBufferId`] (the
//! contract's [`Slots`]), and the one place that turns a tensor handle into a checked
//! device pointer. Buffers come
//! from cudarc's stream-ordered allocator (the driver's memory pool recycles freed
//! memory) and are zeroed on allocation; freeing is ordered after the work already
//! queued, so kernels that still read a freed buffer finish first.

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DeviceRepr, ValidAsZeroBits};
use sage_transformer::device::{BufferKind, Slots};
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

/// `f32` and `u32` device buffers, by id (see [`Slots`]).
pub(crate) struct Store {
    f32s: Slots<Entry<f32>>,
    u32s: Slots<Entry<u32>>,
}

impl Default for Store {
    fn default() -> Store {
        Store {
            f32s: Slots::new(BufferKind::F32),
            u32s: Slots::new(BufferKind::U32),
        }
    }
}

impl Store {
    /// A new zero-filled `f32` buffer of `len` elements.
    pub(crate) fn alloc(
        &mut self,
        stream: &std::sync::Arc<CudaStream>,
        len: usize,
    ) -> Result<BufferId, CudaError> {
        let (memory, address) = allocate(stream, len)?;
        let id = self.f32s.insert(Entry {
            _memory: memory,
            address,
            len,
        })?;
        Ok(BufferId(id))
    }

    /// A new zero-filled `u32` buffer of `len` elements.
    pub(crate) fn alloc_indices(
        &mut self,
        stream: &std::sync::Arc<CudaStream>,
        len: usize,
    ) -> Result<IndexBufferId, CudaError> {
        let (memory, address) = allocate(stream, len)?;
        let id = self.u32s.insert(Entry {
            _memory: memory,
            address,
            len,
        })?;
        Ok(IndexBufferId(id))
    }

    /// Releases an `f32` buffer.
    pub(crate) fn free(&mut self, buffer: BufferId) -> Result<(), CudaError> {
        self.f32s.remove(buffer.0)?;
        Ok(())
    }

    /// Releases a `u32` buffer.
    pub(crate) fn free_indices(&mut self, buffer: IndexBufferId) -> Result<(), CudaError> {
        self.u32s.remove(buffer.0)?;
        Ok(())
    }

    /// The device address of a tensor's first element, after checking that the buffer
    /// is live and the range inside it.
    pub(crate) fn address(&self, t: Tensor) -> Result<u64, CudaError> {
        let entry = self.f32s.range(t.buffer.0, t.offset, t.len, |e| e.len)?;
        Ok(entry.address + t.offset as u64 * 4)
    }

    /// The device address of an index range's first element, checked likewise.
    pub(crate) fn index_address(&self, i: Indices) -> Result<u64, CudaError> {
        let entry = self.u32s.range(i.buffer.0, i.offset, i.len, |e| e.len)?;
        Ok(entry.address + i.offset as u64 * 4)
    }
}
