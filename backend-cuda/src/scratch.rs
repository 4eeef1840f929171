//! The backend's own device buffers: scratch space that kernels share between the calls
//! of one operation (partial sums, a chunk of logits, bf16 copies of GEMM operands) and
//! small index tables uploaded from the host (sequence spans, cache lengths). Each slot
//! grows to the largest size asked of it and is reused: every use is ordered on the one
//! stream, so a later call cannot overwrite what an earlier kernel still reads.

use cudarc::driver::{result as driver_result, CudaSlice};

use crate::device::Gpu;
use crate::error::CudaError;
use crate::store::allocate;

/// A purpose of `f32` scratch space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scratch {
    /// Per-block partial sums (the sum of squares, in f64, and its result).
    Partials,
    /// Per-row-block column sums of the weight and bias gradients.
    Columns,
    /// One chunk of the output head's logits.
    Logits,
    /// The bf16 mode's logit gradients of one chunk, in bf16 (two per `f32` element).
    DlogitsBf16,
    /// The attention backward pass's delta [N, H].
    Delta,
    /// RoPE's inverse frequencies [hd / 2].
    RopeFrequencies,
    /// bf16 copy of a GEMM's first operand (two per `f32` element).
    Bf16A,
    /// bf16 copy of a GEMM's second operand.
    Bf16B,
    /// Split-KV decoding's partial results [B, H, S, hd + 2].
    DecodePartials,
    /// The tensor-core attention backward's key and value gradients per query head,
    /// dk_heads then dv_heads, [N, H*hd] each (summed over each group afterwards).
    DkvHeads,
}

/// A purpose of `u32` scratch space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IndexScratch {
    /// The training attention's spans [N, 2].
    Spans,
    /// The embedding backward pass's links [2, N].
    Links,
    /// The cache row [B] each sequence's new key/value row goes to.
    AppendRows,
    /// Cached rows [B] each decoding query attends to.
    AttendedRows,
    /// The uniform numbers [B] of a token choice, as f32 bits.
    Uniforms,
}

const F32_SLOTS: usize = 10;
const U32_SLOTS: usize = 5;

/// One growable allocation.
struct Slot<T> {
    memory: Option<CudaSlice<T>>,
    address: u64,
    len: usize,
}

impl<T> Default for Slot<T> {
    fn default() -> Slot<T> {
        Slot {
            memory: None,
            address: 0,
            len: 0,
        }
    }
}

impl<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits> Slot<T> {
    /// The address of at least `len` elements, growing the slot when needed.
    fn reserve(&mut self, gpu: &Gpu, len: usize) -> Result<u64, CudaError> {
        if self.memory.is_none() || self.len < len {
            // Freeing the old slot is a stream call too: refused before it.
            gpu.recorder.allow("a scratch allocation")?;
            self.memory = None;
            let (memory, address) = allocate::<T>(gpu, len)?;
            self.memory = Some(memory);
            self.address = address;
            self.len = len.max(1);
        }
        Ok(self.address)
    }
}

/// Every scratch slot, and what the cached ones hold.
#[derive(Default)]
pub(crate) struct ScratchBuffers {
    f32s: [Slot<f32>; F32_SLOTS],
    u32s: [Slot<u32>; U32_SLOTS],
    /// The `seq_starts` whose spans the `Spans` slot holds.
    pub(crate) spans_of: Vec<u32>,
    /// What [`ScratchBuffers::upload_indices_once`] last put in each `u32` slot.
    uploaded: [Option<Vec<u32>>; U32_SLOTS],
    /// The (theta bits, head_dim) whose frequencies the `RopeFrequencies` slot holds.
    pub(crate) rope_of: Option<(u32, usize)>,
}

impl ScratchBuffers {
    /// The address of at least `len` elements of `f32` scratch for `which`.
    pub(crate) fn space(
        &mut self,
        gpu: &Gpu,
        which: Scratch,
        len: usize,
    ) -> Result<u64, CudaError> {
        self.f32s[which as usize].reserve(gpu, len)
    }

    /// The address of at least `len` elements of `u32` scratch for `which`.
    pub(crate) fn index_space(
        &mut self,
        gpu: &Gpu,
        which: IndexScratch,
        len: usize,
    ) -> Result<u64, CudaError> {
        self.u32s[which as usize].reserve(gpu, len)
    }

    /// Uploads `data` into the `u32` scratch `which` and returns its address.
    pub(crate) fn upload_indices(
        &mut self,
        gpu: &Gpu,
        which: IndexScratch,
        data: &[u32],
    ) -> Result<u64, CudaError> {
        let address = self.index_space(gpu, which, data.len())?;
        upload(gpu, address, data)?;
        Ok(address)
    }

    /// [`ScratchBuffers::upload_indices`], skipped when the slot already holds `data`
    /// from the last call for it (a decoding step's every layer passes the same cache
    /// lengths: one upload per step, not two per layer). Only this function writes
    /// the slots it is used for.
    pub(crate) fn upload_indices_once(
        &mut self,
        gpu: &Gpu,
        which: IndexScratch,
        data: &[u32],
    ) -> Result<u64, CudaError> {
        if self.uploaded[which as usize].as_deref() == Some(data) {
            return self.index_space(gpu, which, data.len());
        }
        self.uploaded[which as usize] = None;
        let address = self.upload_indices(gpu, which, data)?;
        self.uploaded[which as usize] = Some(data.to_vec());
        Ok(address)
    }

    /// Uploads `data` into the `f32` scratch `which` and returns its address.
    pub(crate) fn upload(
        &mut self,
        gpu: &Gpu,
        which: Scratch,
        data: &[f32],
    ) -> Result<u64, CudaError> {
        let address = self.space(gpu, which, data.len())?;
        upload(gpu, address, data)?;
        Ok(address)
    }
}

/// Queues a copy of host `data` to device address `dst` on the stream. The driver
/// stages pageable host memory before returning, so `data` may be dropped afterwards.
/// While a step is traced it is queued all the same (the graph that replays the step
/// reads it); while one is captured it is refused (`record`).
pub(crate) fn upload<T>(gpu: &Gpu, dst: u64, data: &[T]) -> Result<(), CudaError> {
    if data.is_empty() {
        return Ok(());
    }
    gpu.recorder
        .allow_upload(dst, std::mem::size_of_val(data))?;
    gpu.ctx.bind_to_thread()?;
    // SAFETY: `dst` is the address of a live allocation of at least `data.len()`
    // elements of T (checked by the store or reserved by a scratch slot).
    unsafe { driver_result::memcpy_htod_async(dst, data, gpu.stream.cu_stream()) }?;
    Ok(())
}

/// Copies `dst.len()` elements from device address `src` to the host, waiting for the
/// stream first; refused while a step is traced or captured.
pub(crate) fn download<T>(gpu: &Gpu, dst: &mut [T], src: u64) -> Result<(), CudaError> {
    gpu.recorder.allow("a read back to the host")?;
    if dst.is_empty() {
        return gpu.stream.synchronize().map_err(CudaError::from);
    }
    gpu.ctx.bind_to_thread()?;
    // SAFETY: `src` is the address of a live allocation of at least `dst.len()` elements
    // of T (checked by the store); the stream is synchronized before `dst` is read.
    unsafe { driver_result::memcpy_dtoh_async(dst, src, gpu.stream.cu_stream()) }?;
    gpu.stream.synchronize()?;
    Ok(())
}
