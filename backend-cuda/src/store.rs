//! The buffer store: device buffers indexed by [`BufferId`] / [`IndexBufferId`] (the
//! contract's [`Slots`]), and the one place that turns a tensor handle into a checked
//! device pointer, where it also learns which tensors may be written (for the bf16
//! shadows of `shadow`). A [`BufferId`] holds `f32` elements, or bf16 ones for a KV
//! cache allocated in the bf16 mode (`Kernels::alloc_kv_cache`), which only the cache's
//! own kernels take ([`Store::cache_address`]). Buffers come
//! from cudarc's stream-ordered allocator (the driver's memory pool recycles freed
//! memory) and are zeroed on allocation; freeing is ordered after the work already
//! queued, so kernels that still read a freed buffer finish first.

use std::cell::RefCell;

use cudarc::driver::{CudaSlice, DevicePtr, DeviceRepr, ValidAsZeroBits};
use sage_transformer::device::{BufferKind, Slots};
use sage_transformer::{BufferId, ContractError, IndexBufferId, Indices, Tensor};

use crate::device::Gpu;
use crate::error::CudaError;
use crate::shadow::{Shadows, Span};

/// Most bf16 elements the shadows keep (4 GiB): a 0.5B-parameter model's weights
/// several times over; tensors past it are cast into scratch for each GEMM.
const SHADOW_BUDGET_ELEMENTS: usize = 1 << 31;

/// A live buffer: the allocation (freed when dropped), its device address, length and
/// how it holds elements.
struct Entry<T> {
    _memory: CudaSlice<T>,
    address: u64,
    len: usize,
    element: Element,
}

/// How a buffer holds its elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Element {
    /// 4-byte `f32` (or `u32`): every buffer but a bf16 KV cache.
    F32,
    /// 2-byte bf16 bits: a KV cache allocated in the bf16 mode.
    Bf16,
}

impl Element {
    /// Bytes per element.
    pub(crate) fn bytes(self) -> u64 {
        match self {
            Element::F32 => 4,
            Element::Bf16 => 2,
        }
    }
}

/// A zero-filled device allocation of `len` elements (at least one) and its address;
/// refused while a step is traced or captured (`record`).
pub(crate) fn allocate<T: DeviceRepr + ValidAsZeroBits>(
    gpu: &Gpu,
    len: usize,
) -> Result<(CudaSlice<T>, u64), CudaError> {
    gpu.recorder.allow("a device allocation")?;
    let memory = gpu.stream.alloc_zeros::<T>(len.max(1))?;
    let address = {
        let (address, _record) = memory.device_ptr(&gpu.stream);
        address
    };
    Ok((memory, address))
}

/// `f32` (or bf16 KV-cache) and `u32` device buffers, by id (see [`Slots`]), and the
/// bf16 shadows of their tensors.
pub(crate) struct Store {
    f32s: Slots<Entry<u8>>,
    u32s: Slots<Entry<u32>>,
    /// Marked stale through `address`, which takes `&self` as every kernel's operand
    /// lookup does.
    pub(crate) shadows: RefCell<Shadows<CudaSlice<u16>>>,
}

impl Default for Store {
    fn default() -> Store {
        Store {
            f32s: Slots::new(BufferKind::F32),
            u32s: Slots::new(BufferKind::U32),
            shadows: RefCell::new(Shadows::new(SHADOW_BUDGET_ELEMENTS)),
        }
    }
}

impl Store {
    /// A new zero-filled `f32` buffer of `len` elements.
    pub(crate) fn alloc(&mut self, gpu: &Gpu, len: usize) -> Result<BufferId, CudaError> {
        self.insert(gpu, len, Element::F32)
    }

    /// A new zero-filled KV-cache buffer of `len` bf16 elements.
    pub(crate) fn alloc_bf16_cache(
        &mut self,
        gpu: &Gpu,
        len: usize,
    ) -> Result<BufferId, CudaError> {
        self.insert(gpu, len, Element::Bf16)
    }

    /// A new zero-filled buffer of `len` elements held as `element`.
    fn insert(&mut self, gpu: &Gpu, len: usize, element: Element) -> Result<BufferId, CudaError> {
        let (memory, address) = allocate::<u8>(gpu, len * element.bytes() as usize)?;
        let id = self.f32s.insert(Entry {
            _memory: memory,
            address,
            len,
            element,
        })?;
        Ok(BufferId(id))
    }

    /// A new zero-filled `u32` buffer of `len` elements.
    pub(crate) fn alloc_indices(
        &mut self,
        gpu: &Gpu,
        len: usize,
    ) -> Result<IndexBufferId, CudaError> {
        let (memory, address) = allocate(gpu, len)?;
        let id = self.u32s.insert(Entry {
            _memory: memory,
            address,
            len,
            element: Element::F32,
        })?;
        Ok(IndexBufferId(id))
    }

    /// Releases an `f32` buffer and the shadows of its tensors.
    pub(crate) fn free(&mut self, buffer: BufferId) -> Result<(), CudaError> {
        self.f32s.remove(buffer.0)?;
        drop(self.shadows.get_mut().forget(buffer.0));
        Ok(())
    }

    /// Releases a `u32` buffer.
    pub(crate) fn free_indices(&mut self, buffer: IndexBufferId) -> Result<(), CudaError> {
        self.u32s.remove(buffer.0)?;
        Ok(())
    }

    /// The device address of a tensor's first element, after checking that the buffer
    /// is live and the range inside it. The tensor counts as written: the bf16 shadows
    /// it overlaps go stale. Every operand lookup goes through here unless it is a read
    /// known not to write ([`Store::address_read`]).
    pub(crate) fn address(&self, t: Tensor) -> Result<u64, CudaError> {
        let address = self.address_read(t)?;
        self.shadows.borrow_mut().written(span(t));
        Ok(address)
    }

    /// [`Store::address`] for a tensor the caller only reads (a GEMM's operands, the
    /// output head's weights, the embedding table), which leaves its shadows current.
    /// Refuses a bf16 KV cache: f32 kernels cannot read it.
    pub(crate) fn address_read(&self, t: Tensor) -> Result<u64, CudaError> {
        match self.lookup(t)? {
            (address, Element::F32) => Ok(address),
            (_, Element::Bf16) => Err(ContractError::BadArgument(format!(
                "buffer {} is a KV cache held in bf16: only `copy` into it, \
                 `kv_cache_append` and `attention_decode` take it",
                t.buffer.0
            ))
            .into()),
        }
    }

    /// The device address of a tensor of a KV cache (or of any buffer a cache kernel
    /// writes) and how its buffer holds elements, checked likewise. An `f32` tensor
    /// counts as written, as with [`Store::address`]; a bf16 cache has no shadows.
    pub(crate) fn cache_address(&self, t: Tensor) -> Result<(u64, Element), CudaError> {
        let (address, element) = self.lookup(t)?;
        if element == Element::F32 {
            self.shadows.borrow_mut().written(span(t));
        }
        Ok((address, element))
    }

    /// A tensor's address and element, checked, with no effect on the shadows.
    fn lookup(&self, t: Tensor) -> Result<(u64, Element), CudaError> {
        let entry = self.f32s.range(t.buffer.0, t.offset, t.len, |e| e.len)?;
        let element = entry.element;
        Ok((entry.address + t.offset as u64 * element.bytes(), element))
    }

    /// The device address of an index range's first element, checked likewise.
    pub(crate) fn index_address(&self, i: Indices) -> Result<u64, CudaError> {
        let entry = self.u32s.range(i.buffer.0, i.offset, i.len, |e| e.len)?;
        Ok(entry.address + i.offset as u64 * 4)
    }
}

/// Where `t` lies, for the shadows.
pub(crate) fn span(t: Tensor) -> Span {
    Span {
        buffer: t.buffer.0,
        offset: t.offset,
        len: t.len,
    }
}
