//! Whole-tensor elementwise operations (fill, copy, `+=`, scaling), the two-stage sum
//! of squares behind the global gradient norm, and the bf16 cast of GEMM operands (and
//! of keys and values copied into a bf16 KV cache).
//! Kernels in `kernels/elementwise.cu`.

use cudarc::driver::result as driver_result;
use sage_transformer::{ContractError, Tensor};

use crate::error::CudaError;
use crate::launch::{blocks_for, Arg, THREADS};
use crate::scratch::{download, Scratch};
use crate::CudaBackend;

/// Most blocks of the sum of squares' first stage: the partials then fit one block of
/// the second stage in a few passes. The count depends on the length alone, so the
/// summation order (and the result) is the same on every run.
const SUM_BLOCKS: u64 = 1024;

/// dst[n] = value.
pub(crate) fn fill(b: &mut CudaBackend, dst: Tensor, value: f32) -> Result<(), CudaError> {
    let address = b.store.address(dst)?;
    if dst.len == 0 {
        return Ok(());
    }
    let n = dst.len as u64;
    b.launch(
        "fill_f32",
        (blocks_for(n), 1),
        THREADS,
        &[Arg::Ptr(address), Arg::F32(value), Arg::U64(n)],
    )
}

/// dst[n] = src[n], a device-to-device copy on the stream; into a KV cache held in bf16
/// (`Store::cache_address`) from an `f32` buffer, the cast to bf16; from one such cache
/// into another (`Transformer::retain_sequences`), the bf16 bits as they are.
pub(crate) fn copy(b: &mut CudaBackend, dst: Tensor, src: Tensor) -> Result<(), CudaError> {
    let ((to, to_bf16), (from, from_bf16)) = (
        b.store.cache_address(dst)?,
        b.store.cache_read_address(src)?,
    );
    if from_bf16 && !to_bf16 {
        return Err(ContractError::BadArgument(format!(
            "buffer {} is a KV cache held in bf16: it is copied only into another such \
             cache, not into f32 buffer {}",
            src.buffer.0, dst.buffer.0
        ))
        .into());
    }
    if dst.len == 0 {
        return Ok(());
    }
    if to_bf16 && !from_bf16 {
        return cast_bf16(b, to, from, dst.len);
    }
    // f32 into f32, or bf16 bits from one cache into another.
    if b.gpu
        .recorder
        .skips("memcpy_dtod", [to, from, dst.len as u64])
    {
        return Ok(());
    }
    let element_bytes = if from_bf16 { 2 } else { 4 };
    b.gpu.ctx.bind_to_thread()?;
    // SAFETY: both ranges were checked against live buffers and do not overlap.
    unsafe {
        driver_result::memcpy_dtod_async(
            to,
            from,
            dst.len * element_bytes,
            b.gpu.stream.cu_stream(),
        )
    }?;
    Ok(())
}

/// dst[n] += src[n].
pub(crate) fn add_assign(b: &mut CudaBackend, dst: Tensor, src: Tensor) -> Result<(), CudaError> {
    let (to, from) = (b.store.address(dst)?, b.store.address(src)?);
    if dst.len == 0 {
        return Ok(());
    }
    let n = dst.len as u64;
    b.launch(
        "add_assign_f32",
        (blocks_for(n), 1),
        THREADS,
        &[Arg::Ptr(to), Arg::Ptr(from), Arg::U64(n)],
    )
}

/// dst[n] *= factor.
pub(crate) fn scale(b: &mut CudaBackend, dst: Tensor, factor: f32) -> Result<(), CudaError> {
    let address = b.store.address(dst)?;
    if dst.len == 0 {
        return Ok(());
    }
    let n = dst.len as u64;
    b.launch(
        "scale_f32",
        (blocks_for(n), 1),
        THREADS,
        &[Arg::Ptr(address), Arg::F32(factor), Arg::U64(n)],
    )
}

/// The sum of src[n]^2, accumulated in f64 (partials per block, then one block over the
/// partials) and read back to the host.
pub(crate) fn sum_squares(b: &mut CudaBackend, src: Tensor) -> Result<f32, CudaError> {
    let address = b.store.address(src)?;
    if src.len == 0 {
        return Ok(0.0);
    }
    let n = src.len as u64;
    let blocks = n.div_ceil(u64::from(THREADS)).clamp(1, SUM_BLOCKS) as u32;
    // partials[blocks] in f64 (two f32 slots each), then the f32 result.
    let partials = b.scratch_space(Scratch::Partials, 2 * blocks as usize + 1)?;
    let result = partials + 8 * u64::from(blocks);
    b.launch(
        "sum_squares_partial",
        (blocks, 1),
        THREADS,
        &[Arg::Ptr(partials), Arg::Ptr(address), Arg::U64(n)],
    )?;
    b.launch(
        "sum_squares_finish",
        (1, 1),
        THREADS,
        &[Arg::Ptr(result), Arg::Ptr(partials), Arg::U32(blocks)],
    )?;
    let mut sum = [0.0f32];
    download(&b.gpu, &mut sum, result)?;
    Ok(sum[0])
}

/// dst[n] = bf16(src[n]) for `n` elements at device addresses (a bf16 GEMM operand);
/// a thread per 4 elements.
pub(crate) fn cast_bf16(b: &CudaBackend, dst: u64, src: u64, n: usize) -> Result<(), CudaError> {
    if n == 0 {
        return Ok(());
    }
    let n = n as u64;
    b.launch(
        "cast_bf16",
        (blocks_for(n.div_ceil(4)), 1),
        THREADS,
        &[Arg::Ptr(dst), Arg::Ptr(src), Arg::U64(n)],
    )
}
