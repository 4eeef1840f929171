//! Matrix multiplication through cuBLAS: `c[m, n] (+)= op(a) · op(b)` on row-major
//! buffers, computed as the column-major product `c^T = op(b)^T · op(a)^T` so that no
//! operand is copied. In [`Precision::F32`] it is `cublasSgemm` in default math mode
//! (true f32, no TF32); in [`Precision::Bf16`] both operands are first cast to bf16 in
//! scratch buffers and `cublasGemmEx` multiplies them on tensor cores, accumulating and
//! writing `c` in f32.

use std::ffi::c_void;

use cudarc::cublas::result as blas;
use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use sage_transformer::{MatmulShape, Tensor};

use crate::elementwise::cast_bf16;
use crate::error::{to_i32, CudaError};
use crate::scratch::Scratch;
use crate::CudaBackend;

/// The arithmetic of the backend's GEMMs and training attention (every other kernel
/// computes in f32).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    /// f32 operands, f32 arithmetic: the mode the parity tests run in.
    #[default]
    F32,
    /// bf16 copies of both GEMM operands, and attention's products of tiles on tensor
    /// cores with bf16 operands (`kernels/flash.cu`), all with f32 accumulation and f32
    /// output; weights, activations, gradients and optimizer state stay f32 in memory.
    Bf16,
}

/// c[m, n] (+)= op(a)[m, k] · op(b)[k, n]: `a` holds [k, m] when `trans_a`, `b` holds
/// [n, k] when `trans_b`.
pub(crate) fn matmul(
    b: &mut CudaBackend,
    c: Tensor,
    a: Tensor,
    bm: Tensor,
    shape: MatmulShape,
) -> Result<(), CudaError> {
    let (ca, aa, ba) = (
        b.store.address(c)?,
        b.store.address(a)?,
        b.store.address(bm)?,
    );
    gemm(b, ca, aa, ba, shape)
}

/// The GEMM of [`matmul`] on checked device addresses.
pub(crate) fn gemm(
    b: &mut CudaBackend,
    c: u64,
    a: u64,
    bm: u64,
    shape: MatmulShape,
) -> Result<(), CudaError> {
    let op = "matmul";
    let MatmulShape {
        m,
        n,
        k,
        trans_a,
        trans_b,
        accumulate,
    } = shape;
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        // An empty sum: c = 0, or unchanged when accumulating.
        if !accumulate {
            b.gpu.ctx.bind_to_thread()?;
            // SAFETY: `c` addresses m * n checked elements.
            unsafe {
                cudarc::driver::result::memset_d8_async(c, 0, m * n * 4, b.gpu.stream.cu_stream())
            }?;
        }
        return Ok(());
    }
    // Column-major: C^T [n, m] = op(B)^T [n, k] · op(A)^T [k, m].
    let operation = |t: bool| {
        if t {
            cublasOperation_t::CUBLAS_OP_T
        } else {
            cublasOperation_t::CUBLAS_OP_N
        }
    };
    let (cm, cn, ck) = (
        to_i32(op, "n", n)?,
        to_i32(op, "m", m)?,
        to_i32(op, "k", k)?,
    );
    let ld_b = to_i32(op, "ld b", if trans_b { k } else { n })?;
    let ld_a = to_i32(op, "ld a", if trans_a { m } else { k })?;
    let (alpha, beta) = (1.0f32, if accumulate { 1.0f32 } else { 0.0 });
    b.gpu.ctx.bind_to_thread()?;
    let handle = *b.gpu.blas.handle();
    match b.precision {
        Precision::F32 => {
            // SAFETY: a, b and c address live ranges of m*k, k*n and m*n f32 elements
            // (checked by the caller); the leading dimensions describe those layouts.
            unsafe {
                blas::sgemm(
                    handle,
                    operation(trans_b),
                    operation(trans_a),
                    cm,
                    cn,
                    ck,
                    &alpha,
                    bm as *const f32,
                    ld_b,
                    a as *const f32,
                    ld_a,
                    &beta,
                    c as *mut f32,
                    cm,
                )
            }?;
        }
        Precision::Bf16 => {
            // bf16 copies: two per f32 slot of scratch.
            let a16 = b.scratch_space(Scratch::Bf16A, (m * k).div_ceil(2))?;
            let b16 = b.scratch_space(Scratch::Bf16B, (k * n).div_ceil(2))?;
            cast_bf16(b, a16, a, m * k)?;
            cast_bf16(b, b16, bm, k * n)?;
            // SAFETY: as above, with a16 and b16 holding bf16 copies of a and b.
            unsafe {
                blas::gemm_ex(
                    handle,
                    operation(trans_b),
                    operation(trans_a),
                    cm,
                    cn,
                    ck,
                    &alpha as *const f32 as *const c_void,
                    b16 as *const c_void,
                    cudaDataType::CUDA_R_16BF,
                    ld_b,
                    a16 as *const c_void,
                    cudaDataType::CUDA_R_16BF,
                    ld_a,
                    &beta as *const f32 as *const c_void,
                    c as *mut c_void,
                    cudaDataType::CUDA_R_32F,
                    cm,
                    cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            }?;
        }
    }
    Ok(())
}
