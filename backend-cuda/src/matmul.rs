//! Matrix multiplication through cuBLAS: `c[m, n] (+)= op(a) · op(b)` on row-major
//! buffers, computed as the column-major product `c^T = op(b)^T · op(a)^T` so that no
//! operand is copied. In [`Precision::F32`] it is `cublasSgemm` in default math mode
//! (true f32, no TF32); in [`Precision::Bf16`] `cublasGemmEx` multiplies bf16 copies
//! of both operands on tensor cores, accumulating and writing `c` in f32. A copy is cast
//! into scratch for the GEMM, or, for a tensor met unchanged again (a weight), kept
//! and reused until the tensor is written (`shadow`), or written by the kernel that made
//! the tensor ([`copy_out`]; the head's logit gradient, made for its two GEMMs alone, is
//! written in bf16 only); with [`Bf16Inputs::Converted`]
//! cuBLAS rounds the f32 operands to bf16 itself instead. Frozen weights of the bf16 mode
//! (`Kernels::alloc_frozen`) are bf16 already and multiply as they are. Products of one
//! input by weights held alike at equal spacing (a layer's k and v, gate and up) run as
//! one strided batched GEMM ([`matmul_shared_input`]).

use std::ffi::c_void;

use cudarc::cublas::result as blas;
use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use sage_transformer::{ContractError, MatmulShape, Tensor};

use crate::elementwise::cast_bf16;
use crate::error::{to_i32, CudaError};
use crate::scratch::Scratch;
use crate::shadow::{CopyOut, ShadowUse};
use crate::store::{allocate, span};
use crate::CudaBackend;

/// A GEMM input: a tensor of the store (read, never written, by the GEMM; in the bf16
/// mode its copy may be kept), or the address of the backend's own scratch.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Operand {
    /// A tensor the caller has not otherwise checked: the GEMM looks it up.
    Tensor(Tensor),
    /// A checked address in the backend's scratch.
    Scratch(u64),
    /// A checked address in the backend's scratch holding bf16, written so by the
    /// kernel that made it (the bf16 mode's logit gradients).
    Bf16Scratch(u64),
}

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
    /// It is also the mode of the fast decoding path (a KV cache of bf16 keys and
    /// values, split-KV decoding attention computing in f32, token choice on the
    /// device), while [`Precision::F32`] keeps every path the parity tests first passed
    /// on a GPU.
    Bf16,
}

/// How the bf16 mode's GEMMs get bf16 operands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Bf16Inputs {
    /// cuBLAS multiplies bf16 copies of both operands. The kernels that make a GEMM's
    /// input write its copy as they write it, into kept copies (`shadow`): RMSNorm
    /// (forward, and the residual gradient of its backward), SwiGLU (forward and
    /// backward), attention's output (training and decoding) and RoPE (the query and key
    /// gradients of its backward); and the output head's logit gradient, in bf16 only.
    /// Every other operand (a weight after its update, the value gradient) is cast by a
    /// kernel first, and a weight's copy is kept between GEMMs.
    #[default]
    Copies,
    /// As [`Bf16Inputs::Copies`], but every copy is made by a cast kernel before its
    /// GEMM, none by the kernel that wrote the tensor: the same values to the bit, kept
    /// for the benchmark to measure what writing the copies in place saves.
    Casts,
    /// cuBLAS reads the f32 operands and rounds them to bf16 itself
    /// (`CUBLAS_COMPUTE_32F_FAST_16BF`): no cast kernels and no kept copies, at the
    /// cost of reading every operand in f32. The same rounding, so the same results to
    /// bf16's precision; which is faster is for a benchmark to say.
    Converted,
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
    let c = b.store.address(c)?;
    gemm(b, c, Operand::Tensor(a), Operand::Tensor(bm), shape)
}

/// The address of `operand`, checked, and whether it holds bf16 (frozen weights of the
/// bf16 mode) rather than f32.
fn address(b: &CudaBackend, operand: Operand) -> Result<(u64, bool), CudaError> {
    match operand {
        Operand::Tensor(t) => b.store.weight_address(t),
        Operand::Scratch(address) => Ok((address, false)),
        Operand::Bf16Scratch(address) => Ok((address, true)),
    }
}

/// The address of a bf16 form of `operand` (`len` elements at `source`): `source` itself
/// when it holds bf16, else a bf16 copy ([`bf16_copy`]).
fn bf16_operand(
    b: &mut CudaBackend,
    operand: Operand,
    (source, holds_bf16): (u64, bool),
    len: usize,
    scratch: Scratch,
) -> Result<u64, CudaError> {
    if holds_bf16 {
        Ok(source)
    } else {
        bf16_copy(b, operand, source, len, scratch)
    }
}

/// The address of a bf16 copy of `operand` (`len` elements at f32 address `source`):
/// its kept shadow when current, else cast now, into a kept shadow or into `scratch`.
fn bf16_copy(
    b: &mut CudaBackend,
    operand: Operand,
    source: u64,
    len: usize,
    scratch: Scratch,
) -> Result<u64, CudaError> {
    let cast = |b: &mut CudaBackend, copy: u64| -> Result<u64, CudaError> {
        b.operand_casts += 1;
        cast_bf16(b, copy, source, len)?;
        Ok(copy)
    };
    let into_scratch = |b: &mut CudaBackend| -> Result<u64, CudaError> {
        // bf16 copies: two per f32 slot of scratch.
        let copy = b.scratch_space(scratch, len.div_ceil(2))?;
        cast(b, copy)
    };
    let Operand::Tensor(t) = operand else {
        return into_scratch(b);
    };
    let lookup = b.store.shadows.borrow_mut().lookup(span(t));
    match lookup {
        ShadowUse::Current(copy) => Ok(copy),
        ShadowUse::Refresh(copy) => cast(b, copy),
        ShadowUse::Keep => match allocate::<u16>(&b.gpu, len) {
            Ok((memory, copy)) => {
                cast(b, copy)?;
                b.store.shadows.borrow_mut().hold(span(t), memory, copy);
                Ok(copy)
            }
            Err(refused @ CudaError::StepNotRecorded(_)) => Err(refused),
            // No room on the device for another copy: this GEMM casts into scratch.
            Err(_) => into_scratch(b),
        },
        ShadowUse::Scratch => into_scratch(b),
    }
}

/// The address of the bf16 copy that the kernel about to write all of `t` writes beside
/// it, or 0 for none: in the bf16 mode's [`Bf16Inputs::Copies`], for a tensor that a GEMM
/// has read before ([`Shadows::produce`](crate::shadow::Shadows::produce)). Take `t`'s
/// own address first (that counts it as written), and launch right after.
pub(crate) fn copy_out(b: &mut CudaBackend, t: Tensor) -> Result<u64, CudaError> {
    if !b.writes_copies() {
        return Ok(0);
    }
    let produce = b.store.shadows.borrow_mut().produce(span(t));
    match produce {
        CopyOut::Into(copy) => Ok(copy),
        CopyOut::Keep => match allocate::<u16>(&b.gpu, t.len) {
            Ok((memory, copy)) => {
                b.store.shadows.borrow_mut().hold(span(t), memory, copy);
                Ok(copy)
            }
            Err(refused @ CudaError::StepNotRecorded(_)) => Err(refused),
            // No room on the device for another copy: its GEMMs cast as before.
            Err(_) => Ok(0),
        },
        CopyOut::None => Ok(0),
    }
}

/// The GEMM of [`matmul`] on a checked output address and its two inputs.
pub(crate) fn gemm(
    b: &mut CudaBackend,
    c: u64,
    a: Operand,
    bm: Operand,
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
    let (a_at, b_at) = (address(b, a)?, address(b, bm)?);
    let given_bf16 = a_at.1 || b_at.1;
    if given_bf16 && b.precision == Precision::F32 {
        let why = "matmul: a bf16 operand in the f32 mode";
        return Err(ContractError::BadArgument(why.into()).into());
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        // An empty sum: c = 0, or unchanged when accumulating.
        if !accumulate && !b.gpu.recorder.skips("memset_d8", [c, (m * n * 4) as u64]) {
            b.gpu.ctx.bind_to_thread()?;
            // SAFETY: `c` addresses m * n checked elements.
            unsafe {
                cudarc::driver::result::memset_d8_async(c, 0, m * n * 4, b.gpu.stream.cu_stream())
            }?;
        }
        return Ok(());
    }
    let ColumnMajor {
        cm,
        cn,
        ck,
        ld_a,
        ld_b,
    } = ColumnMajor::of(op, shape)?;
    let (alpha, beta) = (1.0f32, if accumulate { 1.0f32 } else { 0.0 });
    // bf16 operands for cuBLAS: the mode's copies, and always with an operand held in
    // bf16 (cuBLAS cannot round one f32 operand and take the other as it is).
    let copies =
        b.precision == Precision::Bf16 && (b.bf16_inputs != Bf16Inputs::Converted || given_bf16);
    let (a_in, b_in) = if copies {
        (
            bf16_operand(b, a, a_at, m * k, Scratch::Bf16A)?,
            bf16_operand(b, bm, b_at, k * n, Scratch::Bf16B)?,
        )
    } else {
        (a_at.0, b_at.0)
    };
    let words = [
        a_in,
        b_in,
        c,
        m as u64,
        n as u64,
        k as u64,
        layout_word(shape),
    ];
    if b.gpu.recorder.skips("matmul", words) {
        return Ok(());
    }
    b.gpu.ctx.bind_to_thread()?;
    let handle = *b.gpu.blas.handle();
    let ran = match b.precision {
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
                    b_at.0 as *const f32,
                    ld_b,
                    a_at.0 as *const f32,
                    ld_a,
                    &beta,
                    c as *mut f32,
                    cm,
                )
            }
        }
        Precision::Bf16 => {
            let (in_type, compute) = if copies {
                (
                    cudaDataType::CUDA_R_16BF,
                    cublasComputeType_t::CUBLAS_COMPUTE_32F,
                )
            } else {
                (
                    cudaDataType::CUDA_R_32F,
                    cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_16BF,
                )
            };
            // SAFETY: as above, with a_in and b_in holding a and b as `in_type`.
            unsafe {
                blas::gemm_ex(
                    handle,
                    operation(trans_b),
                    operation(trans_a),
                    cm,
                    cn,
                    ck,
                    &alpha as *const f32 as *const c_void,
                    b_in as *const c_void,
                    in_type,
                    ld_b,
                    a_in as *const c_void,
                    in_type,
                    ld_a,
                    &beta as *const f32 as *const c_void,
                    c as *mut c_void,
                    cudaDataType::CUDA_R_32F,
                    cm,
                    compute,
                    cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            }
        }
    };
    ran.map_err(|e| b.gpu.recorder.failed("matmul", e))
}

/// A GEMM's transposes and accumulation as one word of its recorded call.
fn layout_word(shape: MatmulShape) -> u64 {
    u64::from(shape.trans_a) | u64::from(shape.trans_b) << 1 | u64::from(shape.accumulate) << 2
}

/// `op(t)` as cuBLAS names it.
fn operation(transposed: bool) -> cublasOperation_t {
    if transposed {
        cublasOperation_t::CUBLAS_OP_T
    } else {
        cublasOperation_t::CUBLAS_OP_N
    }
}

/// A row-major GEMM's sizes as the column-major product cuBLAS computes:
/// C^T [n, m] = op(B)^T [n, k] · op(A)^T [k, m], so cuBLAS's m is our n and its first
/// operand our b.
struct ColumnMajor {
    cm: i32,
    cn: i32,
    ck: i32,
    ld_a: i32,
    ld_b: i32,
}

impl ColumnMajor {
    fn of(op: &str, shape: MatmulShape) -> Result<ColumnMajor, CudaError> {
        let MatmulShape {
            m,
            n,
            k,
            trans_a,
            trans_b,
            ..
        } = shape;
        Ok(ColumnMajor {
            cm: to_i32(op, "n", n)?,
            cn: to_i32(op, "m", m)?,
            ck: to_i32(op, "k", k)?,
            ld_a: to_i32(op, "ld a", if trans_a { m } else { k })?,
            ld_b: to_i32(op, "ld b", if trans_b { k } else { n })?,
        })
    }
}

/// c[j] (+)= op(a) · op(b[j]) for every j: one strided batched cuBLAS GEMM where every b
/// is held alike (f32 in the f32 mode, frozen bf16 weights in the bf16 mode), the b and
/// the c lie at equal, increasing spacing, and `a` is shared (stride 0); else one
/// [`matmul`] each. The addresses are looked up as [`matmul`] looks them up, so the
/// shadows see the same reads and writes.
pub(crate) fn matmul_shared_input(
    b: &mut CudaBackend,
    c: &[Tensor],
    a: Tensor,
    bm: &[Tensor],
    shape: MatmulShape,
) -> Result<(), CudaError> {
    let op = "matmul_shared_input";
    let separately = |b: &mut CudaBackend| -> Result<(), CudaError> {
        for (&c, &bm) in c.iter().zip(bm) {
            matmul(b, c, a, bm, shape)?;
        }
        Ok(())
    };
    let MatmulShape { m, n, k, .. } = shape;
    if !b.batched_gemms || c.len() < 2 || m * n * k == 0 {
        return separately(b);
    }
    let (mut weight_at, mut bf16_weights) = (Vec::with_capacity(bm.len()), 0);
    for &t in bm {
        let (at, bf16) = address(b, Operand::Tensor(t))?;
        weight_at.push(at);
        bf16_weights += usize::from(bf16);
    }
    let (bytes, in_type) = match b.precision {
        Precision::F32 if bf16_weights == 0 => (4, cudaDataType::CUDA_R_32F),
        Precision::Bf16 if bf16_weights == bm.len() => (2, cudaDataType::CUDA_R_16BF),
        _ => return separately(b),
    };
    let outputs = c
        .iter()
        .map(|&t| b.store.address(t))
        .collect::<Result<Vec<_>, _>>()?;
    let (Some(b_stride), Some(c_stride)) = (
        equal_spacing(&weight_at, bytes, k * n),
        equal_spacing(&outputs, 4, m * n),
    ) else {
        return separately(b);
    };
    let a_at = address(b, Operand::Tensor(a))?;
    let a_in = match b.precision {
        Precision::F32 => a_at.0,
        Precision::Bf16 => bf16_operand(b, Operand::Tensor(a), a_at, m * k, Scratch::Bf16A)?,
    };
    let count = to_i32(op, "count", c.len())?;
    let words = [
        a_in,
        weight_at[0],
        outputs[0],
        b_stride as u64,
        c_stride as u64,
        count as u64,
        m as u64,
        n as u64,
        k as u64,
        layout_word(shape),
    ];
    if b.gpu.recorder.skips("matmul_batched", words) {
        return Ok(());
    }
    let ColumnMajor {
        cm,
        cn,
        ck,
        ld_a,
        ld_b,
    } = ColumnMajor::of(op, shape)?;
    let (alpha, beta) = (1.0f32, if shape.accumulate { 1.0f32 } else { 0.0 });
    b.gpu.ctx.bind_to_thread()?;
    let handle = *b.gpu.blas.handle();
    // SAFETY: a addresses m*k elements of `in_type` (f32, or its bf16 copy), each b[j] =
    // weight_at[0] + j * b_stride elements k*n of `in_type`, each c[j] = outputs[0] + j *
    // c_stride elements m*n f32, all checked live ranges; the leading dimensions describe
    // those layouts, and the strides are in elements.
    let ran = unsafe {
        match b.precision {
            Precision::F32 => blas::sgemm_strided_batched(
                handle,
                operation(shape.trans_b),
                operation(shape.trans_a),
                cm,
                cn,
                ck,
                &alpha,
                weight_at[0] as *const f32,
                ld_b,
                b_stride,
                a_in as *const f32,
                ld_a,
                0,
                &beta,
                outputs[0] as *mut f32,
                cm,
                c_stride,
                count,
            ),
            Precision::Bf16 => blas::gemm_strided_batched_ex(
                handle,
                operation(shape.trans_b),
                operation(shape.trans_a),
                cm,
                cn,
                ck,
                &alpha as *const f32 as *const c_void,
                weight_at[0] as *const c_void,
                in_type,
                ld_b,
                b_stride,
                a_in as *const c_void,
                in_type,
                ld_a,
                0,
                &beta as *const f32 as *const c_void,
                outputs[0] as *mut c_void,
                cudaDataType::CUDA_R_32F,
                cm,
                c_stride,
                count,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            ),
        }
    };
    ran.map_err(|e| b.gpu.recorder.failed("matmul_batched", e))
}

/// The common spacing of `addresses`, in elements of `bytes` each, when they increase by
/// the same whole number of elements, at least `len` (so the ranges do not overlap).
fn equal_spacing(addresses: &[u64], bytes: u64, len: usize) -> Option<i64> {
    let (&first, &second) = (addresses.first()?, addresses.get(1)?);
    let step = second.checked_sub(first)?;
    let evenly = addresses
        .windows(2)
        .all(|pair| pair[1].checked_sub(pair[0]) == Some(step));
    let elements = step / bytes;
    (evenly && step % bytes == 0 && elements >= len as u64)
        .then(|| i64::try_from(elements).ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::equal_spacing;

    #[test]
    fn equal_spacing_takes_only_evenly_increasing_disjoint_ranges() {
        // Two f32 ranges of 6 elements, 8 apart; three of bf16, 10 apart.
        assert_eq!(equal_spacing(&[1000, 1032], 4, 6), Some(8));
        assert_eq!(equal_spacing(&[1000, 1020, 1040], 2, 10), Some(10));
        assert_eq!(equal_spacing(&[1000, 1024], 4, 6), Some(6), "adjacent");
        assert_eq!(equal_spacing(&[1000, 1020], 4, 6), None, "overlapping");
        assert_eq!(equal_spacing(&[1032, 1000], 4, 6), None, "decreasing");
        assert_eq!(
            equal_spacing(&[1000, 1000], 4, 6),
            None,
            "the same range twice"
        );
        assert_eq!(
            equal_spacing(&[1000, 1030], 4, 6),
            None,
            "not whole elements"
        );
        assert_eq!(equal_spacing(&[1000, 1032, 1072], 4, 6), None, "uneven");
        assert_eq!(equal_spacing(&[1000], 4, 6), None, "one range");
    }
}
