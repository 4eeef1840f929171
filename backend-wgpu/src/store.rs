//! The buffer store: device buffers indexed by [`BufferId`] / [`IndexBufferId`] (the
//! contract's [`Slots`]), a pool
//! that recycles freed buffers by size class, and the one place that turns a tensor
//! handle into a checked binding window.

use std::collections::HashMap;

use sage_transformer::device::{BufferKind, Slots};
use sage_transformer::{BufferId, IndexBufferId, Indices, Tensor};

use crate::error::WgpuError;

/// Bytes of freed buffers the pool keeps for reuse; beyond this they are dropped.
const POOL_BYTES: u64 = 512 << 20;

/// A live buffer: the device buffer (perhaps larger, from the pool) and its elements.
struct Entry {
    buffer: wgpu::Buffer,
    len: usize,
}

/// A tensor or index range that a kernel binds.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Operand {
    /// `f32` elements.
    F32(Tensor),
    /// `u32` elements.
    U32(Indices),
}

impl From<Tensor> for Operand {
    fn from(t: Tensor) -> Operand {
        Operand::F32(t)
    }
}

impl From<Indices> for Operand {
    fn from(i: Indices) -> Operand {
        Operand::U32(i)
    }
}

/// Where an operand is bound: `size` bytes from `offset` (aligned as the device wants),
/// the operand's first element being element `shift` of the window.
pub(crate) struct Window {
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) offset: u64,
    pub(crate) size: u64,
    pub(crate) shift: u32,
}

/// `f32` and `u32` device buffers, by id (see [`Slots`]), and the pool.
pub(crate) struct Store {
    f32s: Slots<Entry>,
    u32s: Slots<Entry>,
    /// Freed buffers by byte size, for reuse.
    pool: HashMap<u64, Vec<wgpu::Buffer>>,
    pooled_bytes: u64,
}

impl Default for Store {
    fn default() -> Store {
        Store {
            f32s: Slots::new(BufferKind::F32),
            u32s: Slots::new(BufferKind::U32),
            pool: HashMap::new(),
            pooled_bytes: 0,
        }
    }
}

/// A new buffer: the caller must zero it (through the command stream) when `recycled`.
pub(crate) struct Allocation {
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) recycled: bool,
}

/// Bytes of a buffer of `len` 4-byte elements: the next of four steps per power of two
/// (at most 25% slack), so that freed buffers of similar sizes are reused.
fn size_class(len: usize) -> u64 {
    let bytes = (len.max(1) as u64) * 4;
    if bytes <= 1024 {
        return bytes.div_ceil(256) * 256;
    }
    let step = (1u64 << (63 - bytes.leading_zeros())) / 4;
    bytes.div_ceil(step) * step
}

impl Store {
    /// A zero-filled buffer of `len` elements, from the pool or the device. Its size is
    /// the size class of `len`, or exactly `len` elements where the class would exceed
    /// the adapter's `max_buffer_size`.
    pub(crate) fn allocate(
        &mut self,
        device: &wgpu::Device,
        limits: &wgpu::Limits,
        len: usize,
    ) -> Result<Allocation, WgpuError> {
        let exact = (len.max(1) as u64) * 4;
        if exact > limits.max_buffer_size {
            return Err(WgpuError::TooLarge(format!(
                "a buffer of {len} elements ({exact} bytes) exceeds the adapter's \
                 max_buffer_size of {} bytes",
                limits.max_buffer_size
            )));
        }
        let class = size_class(len);
        let bytes = if class <= limits.max_buffer_size {
            class
        } else {
            exact
        };
        if let Some(buffer) = self.pool.get_mut(&bytes).and_then(Vec::pop) {
            self.pooled_bytes -= bytes;
            return Ok(Allocation {
                buffer,
                recycled: true,
            });
        }
        device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: bytes,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        match pollster::block_on(device.pop_error_scope()) {
            Some(_) => Err(WgpuError::OutOfMemory(bytes)),
            None => Ok(Allocation {
                buffer,
                recycled: false,
            }),
        }
    }

    /// Registers an `f32` buffer of `len` elements.
    pub(crate) fn insert(
        &mut self,
        buffer: wgpu::Buffer,
        len: usize,
    ) -> Result<BufferId, WgpuError> {
        Ok(BufferId(self.f32s.insert(Entry { buffer, len })?))
    }

    /// Registers a `u32` buffer of `len` elements.
    pub(crate) fn insert_indices(
        &mut self,
        buffer: wgpu::Buffer,
        len: usize,
    ) -> Result<IndexBufferId, WgpuError> {
        Ok(IndexBufferId(self.u32s.insert(Entry { buffer, len })?))
    }

    /// Releases an `f32` buffer into the pool.
    pub(crate) fn free(&mut self, buffer: BufferId) -> Result<(), WgpuError> {
        let entry = self.f32s.remove(buffer.0)?;
        self.recycle(entry.buffer);
        Ok(())
    }

    /// Releases a `u32` buffer into the pool.
    pub(crate) fn free_indices(&mut self, buffer: IndexBufferId) -> Result<(), WgpuError> {
        let entry = self.u32s.remove(buffer.0)?;
        self.recycle(entry.buffer);
        Ok(())
    }

    /// Keeps a freed buffer for reuse while the pool has room; drops it otherwise.
    fn recycle(&mut self, buffer: wgpu::Buffer) {
        let bytes = buffer.size();
        if self.pooled_bytes + bytes <= POOL_BYTES {
            self.pooled_bytes += bytes;
            self.pool.entry(bytes).or_default().push(buffer);
        }
    }

    /// The device buffer of an operand and the byte range it covers, after checking
    /// that the handle is live and the range inside the buffer.
    pub(crate) fn locate(&self, operand: Operand) -> Result<(&wgpu::Buffer, u64, u64), WgpuError> {
        let (slots, id, offset, len) = match operand {
            Operand::F32(t) => (&self.f32s, t.buffer.0, t.offset, t.len),
            Operand::U32(i) => (&self.u32s, i.buffer.0, i.offset, i.len),
        };
        let entry = slots.range(id, offset, len, |e| e.len)?;
        Ok((&entry.buffer, offset as u64 * 4, len as u64 * 4))
    }

    /// The binding window of an operand: its range widened down to the device's offset
    /// alignment (and to at least one element), within the binding size limit.
    pub(crate) fn window(
        &self,
        operand: Operand,
        limits: &wgpu::Limits,
    ) -> Result<Window, WgpuError> {
        let (buffer, start, bytes) = self.locate(operand)?;
        let align = u64::from(limits.min_storage_buffer_offset_alignment.max(4));
        let end = (start + bytes.max(4)).min(buffer.size());
        let offset = (start.min(end.saturating_sub(4)) / align) * align;
        let size = end - offset;
        if size > u64::from(limits.max_storage_buffer_binding_size) {
            return Err(WgpuError::TooLarge(format!(
                "{operand:?} spans {size} bytes, over the adapter's \
                 max_storage_buffer_binding_size of {} bytes",
                limits.max_storage_buffer_binding_size
            )));
        }
        Ok(Window {
            buffer: buffer.clone(),
            offset,
            size,
            shift: ((start - offset) / 4) as u32,
        })
    }
}

/// The sub-range `[start, start + len)` of an index range (the caller keeps it inside).
pub(crate) fn index_slice(indices: Indices, start: usize, len: usize) -> Indices {
    Indices {
        buffer: indices.buffer,
        offset: indices.offset + start,
        len,
    }
}
