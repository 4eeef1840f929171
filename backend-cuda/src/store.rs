//! The buffer store: device buffers indexed by [`BufferId`] / [`IndexBufferId`] (the
//! contract's [`Slots`]), and the one place that turns a tensor handle into a checked
//! device pointer, where it also learns which tensors may be written (for the bf16
//! shadows of `shadow`). A [`BufferId`] holds `f32` elements, or in the bf16 mode bf16
//! ones for a KV cache (`Kernels::alloc_kv_cache`) or frozen weights
//! (`Kernels::alloc_frozen`), which only the calls made for them take ([`Held`]).
//! Buffers come
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
    held: Held,
}

/// How a buffer holds its elements, and so which calls take it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Held {
    /// 4-byte `f32` (or `u32`): every buffer but the bf16 mode's caches and frozen
    /// weights. Every call takes it.
    F32,
    /// bf16 bits of a KV cache (`Kernels::alloc_kv_cache` in the bf16 mode): taken by
    /// `copy` into it (and out of it into another such cache), `kv_cache_append` and
    /// `attention_decode`.
    CacheBf16,
    /// bf16 bits of frozen weights (`Kernels::alloc_frozen` in the bf16 mode): taken by
    /// `write` from the host and by the forward kernels that read weights.
    WeightsBf16,
}

impl Held {
    /// Bytes per element.
    fn bytes(self) -> u64 {
        match self {
            Held::F32 => 4,
            Held::CacheBf16 | Held::WeightsBf16 => 2,
        }
    }

    /// Whether a call that takes `f32` buffers and, if any, those held as `bf16` takes
    /// this one (`Ok(true)` when it holds bf16), or its refusal naming `buffer`.
    fn admitted(self, bf16: Option<Held>, buffer: u32) -> Result<bool, CudaError> {
        match self {
            Held::F32 => Ok(false),
            held if Some(held) == bf16 => Ok(true),
            held => Err(held.refused(buffer)),
        }
    }

    /// The refusal of a call that does not take buffers held this way (a bf16 kind).
    fn refused(self, buffer: u32) -> CudaError {
        let why = match self {
            Held::F32 => "holds f32 elements where bf16 ones were required",
            Held::CacheBf16 => {
                "is a KV cache held in bf16: only `copy` (into it, or out of it into \
                 another such cache), `kv_cache_append` and `attention_decode` take it"
            }
            Held::WeightsBf16 => {
                "holds frozen weights in bf16: only `write` from the host and the forward \
                 kernels that read weights (`matmul`, `embedding_forward`, \
                 `rmsnorm_forward`, `add_bias`, `logits`, `logprob_forward`) take it"
            }
        };
        ContractError::BadArgument(format!("buffer {buffer} {why}")).into()
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

/// `f32` (or bf16: [`Held`]) and `u32` device buffers, by id (see [`Slots`]), and the
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
        self.alloc_held(gpu, len, Held::F32)
    }

    /// A new zero-filled buffer of `len` elements held as `held`.
    pub(crate) fn alloc_held(
        &mut self,
        gpu: &Gpu,
        len: usize,
        held: Held,
    ) -> Result<BufferId, CudaError> {
        let (memory, address) = allocate::<u8>(gpu, len * held.bytes() as usize)?;
        let id = self.f32s.insert(Entry {
            _memory: memory,
            address,
            len,
            held,
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
            held: Held::F32,
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
    /// Takes `f32` buffers only.
    pub(crate) fn address_read(&self, t: Tensor) -> Result<u64, CudaError> {
        let (address, held) = self.lookup(t)?;
        held.admitted(None, t.buffer.0)?;
        Ok(address)
    }

    /// The device address of a tensor a KV-cache kernel writes or reads, and whether its
    /// buffer holds bf16 (a bf16 mode cache) rather than `f32`. An `f32` tensor counts as
    /// written, as with [`Store::address`].
    pub(crate) fn cache_address(&self, t: Tensor) -> Result<(u64, bool), CudaError> {
        self.address_or(t, Held::CacheBf16, true)
    }

    /// The device address of a tensor a copy reads, and whether its buffer holds bf16
    /// (a bf16 mode KV cache) rather than `f32`; shadows stay current.
    pub(crate) fn cache_read_address(&self, t: Tensor) -> Result<(u64, bool), CudaError> {
        self.address_or(t, Held::CacheBf16, false)
    }

    /// The device address of weights a forward kernel reads, and whether its buffer
    /// holds bf16 (frozen weights of the bf16 mode) rather than `f32`; shadows stay
    /// current, as with [`Store::address_read`].
    pub(crate) fn weight_address(&self, t: Tensor) -> Result<(u64, bool), CudaError> {
        self.address_or(t, Held::WeightsBf16, false)
    }

    /// The device address of a tensor written from the host, and whether it holds
    /// frozen bf16 weights; an `f32` tensor counts as written.
    pub(crate) fn host_write_address(&self, t: Tensor) -> Result<(u64, bool), CudaError> {
        self.address_or(t, Held::WeightsBf16, true)
    }

    /// `t`'s address for a call that takes `f32` buffers and those held as `bf16`, and
    /// whether it is the latter; an `f32` tensor counts as written when `writes`.
    fn address_or(&self, t: Tensor, bf16: Held, writes: bool) -> Result<(u64, bool), CudaError> {
        let (address, held) = self.lookup(t)?;
        let is_bf16 = held.admitted(Some(bf16), t.buffer.0)?;
        if writes && !is_bf16 {
            self.shadows.borrow_mut().written(span(t));
        }
        Ok((address, is_bf16))
    }

    /// A tensor's address and how its buffer holds elements, checked, with no effect on
    /// the shadows.
    fn lookup(&self, t: Tensor) -> Result<(u64, Held), CudaError> {
        let entry = self.f32s.range(t.buffer.0, t.offset, t.len, |e| e.len)?;
        Ok((
            entry.address + t.offset as u64 * entry.held.bytes(),
            entry.held,
        ))
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

#[cfg(test)]
mod tests {
    use super::Held;

    /// Each call takes f32 buffers and its own bf16 kind, and refuses the other bf16
    /// kind by naming the buffer and what takes it.
    #[test]
    fn each_call_takes_f32_and_only_its_own_bf16_buffers() {
        let calls = [None, Some(Held::CacheBf16), Some(Held::WeightsBf16)];
        for bf16 in calls {
            assert!(!Held::F32.admitted(bf16, 3).unwrap(), "{bf16:?}");
            for held in [Held::CacheBf16, Held::WeightsBf16] {
                let got = held.admitted(bf16, 3);
                if Some(held) == bf16 {
                    assert!(got.unwrap());
                } else {
                    let why = got.unwrap_err().to_string();
                    let names = match held {
                        Held::CacheBf16 => "buffer 3 is a KV cache held in bf16",
                        _ => "buffer 3 holds frozen weights in bf16",
                    };
                    assert!(why.contains(names), "{why}");
                }
            }
        }
        assert_eq!(
            [Held::F32, Held::CacheBf16, Held::WeightsBf16].map(Held::bytes),
            [4, 2, 2]
        );
    }
}
