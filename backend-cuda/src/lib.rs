//! # sage-backend-cuda
//!
//! The CUDA backend of the SAGE transformer: [`CudaBackend`] implements the `Kernels`
//! contract of `sage-core` on an NVIDIA GPU with hand-written CUDA kernels, compiled at
//! run time with NVRTC, and cuBLAS for every GEMM. It owns device buffers and kernels,
//! and nothing else: no model logic, no I/O.
//!
//! **Status: written and compiled, never run.** No GPU was available while this crate
//! was written. Every kernel source compiles cleanly with NVRTC 13.0 for `compute_90`
//! (the `nvrtc` test, run in CI), and the crate builds without a CUDA toolkit, but no
//! kernel, launch, copy or GEMM here has executed on a device: the parity tests
//! (`tests/parity_cuda.rs` in the workspace) must pass on a GPU before any of it is
//! trusted.
//!
//! ## Loading CUDA
//! cudarc 0.18.2 loads the libraries at run time (`dynamic-loading`, CUDA 13.0
//! bindings: feature `cuda-13000`), so building needs no toolkit. For each library it
//! `dlopen`s, in order, the first of these names that loads (Linux, CUDA 13.0):
//! `lib{name}.so`, `lib{name}64.so`, `lib{name}64_13.so`, `lib{name}64_130.so`,
//! `lib{name}64_130_0.so`, `lib{name}64_10.so`, `lib{name}64_11.so`, `lib{name}64_9.so`,
//! `lib{name}.so.13`, `lib{name}.so.11`, `lib{name}.so.10`, `lib{name}.so.1`, where
//! `name` is `cuda` (the driver; driver 580 installs `libcuda.so.1`, and `libcuda.so`
//! where its development link is present), `nvrtc` (CUDA 13.0 ships `libnvrtc.so.13`;
//! `libnvrtc.so` only with a toolkit) and `cublas` (`libcublas.so.13`, which loads
//! `libcublasLt.so.13` beside it). Only the loader's search path is used: put the
//! directories of NVRTC and cuBLAS on `LD_LIBRARY_PATH` (for the PyPI wheels
//! `nvidia-cuda-nvrtc==13.0.88` and `nvidia-cublas==13.0.2.14`, their
//! `nvidia/cu13/lib`), where the NVRTC wheel also puts `libnvrtc-builtins.so.13.0`. The
//! NVRTC used must not be newer than the driver: driver 580 (CUDA 13.0) cannot load PTX
//! from a later NVRTC.
//!
//! Without a driver, [`CudaBackend::new`] returns [`CudaError::NoLibrary`] ("no CUDA
//! driver found (libcuda.so) ..."); the presence of each library is checked before
//! cudarc would panic on it, and cudarc's calls at start-up are guarded besides.
//!
//! ## Execution
//! Everything runs in order on one stream: no call waits for the device except
//! [`Kernels::read`] and [`Kernels::sum_squares`], which return host values. Kernels
//! take raw device addresses that the store has checked (live buffer, range inside),
//! so tensors of one buffer can be read and written by one call. No kernel uses float
//! atomics: every reduction runs in a fixed order, so results repeat run to run.
//!
//! ## Precision
//! [`Precision::F32`] (the default, and what the parity tests use) computes everything
//! in f32, GEMMs included (`cublasSgemm`, no TF32). [`Precision::Bf16`] casts both
//! operands of each GEMM to bf16 and multiplies them on tensor cores with f32
//! accumulation and f32 output; everything else (weights, activations, gradients,
//! AdamW's master weights and moments) stays f32 in memory. Storing weights and
//! activations in bf16 is not done: the `Kernels` contract addresses f32 elements, so it
//! needs either a dtype in the contract or a backend-side shadow copy of the weights.
//!
//! Modules, one per concern; each kernel family's `.cu` file (in `kernels/`) holds its
//! forward beside its backward:
//! - `device`: context, stream, cuBLAS handle, library checks; `compile`: the sources
//!   and NVRTC; `launch`: loaded kernels and the one launch path;
//! - `store`: buffers and checked addresses; `scratch`: the backend's own buffers and
//!   host transfers;
//! - `elementwise`, `embedding`, `norm` (RMSNorm, bias, column sums), `matmul`
//!   (cuBLAS), `rope`, `attention` (training), `decode` (KV cache), `swiglu`, `logprob`
//!   (the output head), `adamw`;
//! - `limits`: whether a model fits the device ([`CudaBackend::check_model`]).
#![deny(missing_docs)]

mod adamw;
mod attention;
mod compile;
mod decode;
mod device;
mod elementwise;
mod embedding;
mod error;
mod launch;
mod limits;
mod logprob;
mod matmul;
mod norm;
mod rope;
mod scratch;
mod store;
mod swiglu;

pub use compile::{compile_kernels, nvrtc_available, CompiledFamily};
pub use device::driver_available;
pub use error::CudaError;
pub use matmul::Precision;

use std::fmt;

use sage_transformer::{
    AdamWStep, AttentionShape, BufferId, IndexBufferId, Indices, Kernels, MatmulShape, ModelConfig,
    Tensor,
};

use crate::device::Gpu;
use crate::launch::Functions;
use crate::scratch::{download, upload, IndexScratch, Scratch, ScratchBuffers};
use crate::store::Store;
use sage_transformer::contract::check_disjoint;
use sage_transformer::contract::expect_len;

/// The CUDA backend: a device, its buffers, the loaded kernels and scratch space.
pub struct CudaBackend {
    gpu: Gpu,
    functions: Functions,
    store: Store,
    scratch: ScratchBuffers,
    precision: Precision,
}

/// The device rather than the buffers.
impl fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaBackend")
            .field("device", &self.gpu.description)
            .field("precision", &self.precision)
            .finish()
    }
}

impl CudaBackend {
    /// Opens GPU 0 in [`Precision::F32`]: loads the driver and cuBLAS, compiles the
    /// kernels with NVRTC (once per process) and loads them. Fails with
    /// [`CudaError::NoLibrary`] when a library is missing (no driver, no NVRTC, no
    /// cuBLAS) and [`CudaError::NoDevice`] when the driver finds no GPU.
    pub fn new() -> Result<CudaBackend, CudaError> {
        CudaBackend::with_device(0, Precision::F32)
    }

    /// Opens GPU 0 with the given GEMM precision.
    pub fn with_precision(precision: Precision) -> Result<CudaBackend, CudaError> {
        CudaBackend::with_device(0, precision)
    }

    /// Opens GPU `ordinal` with the given GEMM precision.
    pub fn with_device(ordinal: usize, precision: Precision) -> Result<CudaBackend, CudaError> {
        let gpu = Gpu::new(ordinal)?;
        let functions = Functions::load(&gpu)?;
        Ok(CudaBackend {
            gpu,
            functions,
            store: Store::default(),
            scratch: ScratchBuffers::default(),
            precision,
        })
    }

    /// One line naming the device, its compute capability, memory and driver.
    pub fn description(&self) -> String {
        format!("{}, {:?} GEMMs", self.gpu.description, self.precision)
    }

    /// The GEMM precision.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Fails with a message naming the limit when the device cannot train the model
    /// (see the `limits` module for what is checked).
    pub fn check_model(&self, config: &ModelConfig) -> Result<(), CudaError> {
        limits::check_model(self.gpu.total_memory, config)
    }

    /// Waits until the device has finished every queued call (for timing).
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.gpu.synchronize()
    }

    /// The address of at least `len` elements of the `f32` scratch `which`.
    pub(crate) fn scratch_space(&mut self, which: Scratch, len: usize) -> Result<u64, CudaError> {
        self.scratch.space(&self.gpu.stream, which, len)
    }

    /// The address of at least `len` elements of the `u32` scratch `which`.
    pub(crate) fn index_scratch_space(
        &mut self,
        which: IndexScratch,
        len: usize,
    ) -> Result<u64, CudaError> {
        self.scratch.index_space(&self.gpu.stream, which, len)
    }
}

impl Kernels for CudaBackend {
    type Error = CudaError;

    fn alloc(&mut self, len: usize) -> Result<BufferId, CudaError> {
        self.store.alloc(&self.gpu.stream, len)
    }

    fn alloc_indices(&mut self, len: usize) -> Result<IndexBufferId, CudaError> {
        self.store.alloc_indices(&self.gpu.stream, len)
    }

    fn free(&mut self, buffer: BufferId) -> Result<(), CudaError> {
        self.store.free(buffer)
    }

    fn free_indices(&mut self, buffer: IndexBufferId) -> Result<(), CudaError> {
        self.store.free_indices(buffer)
    }

    fn write(&mut self, dst: Tensor, src: &[f32]) -> Result<(), CudaError> {
        expect_len("write", "src", src.len(), dst.len)?;
        let address = self.store.address(dst)?;
        upload(&self.gpu.stream, address, src)
    }

    fn write_indices(&mut self, dst: Indices, src: &[u32]) -> Result<(), CudaError> {
        expect_len("write_indices", "src", src.len(), dst.len)?;
        let address = self.store.index_address(dst)?;
        upload(&self.gpu.stream, address, src)
    }

    fn read(&mut self, src: Tensor, dst: &mut [f32]) -> Result<(), CudaError> {
        expect_len("read", "dst", dst.len(), src.len)?;
        let address = self.store.address(src)?;
        download(&self.gpu.stream, dst, address)
    }

    fn fill(&mut self, dst: Tensor, value: f32) -> Result<(), CudaError> {
        elementwise::fill(self, dst, value)
    }

    fn copy(&mut self, dst: Tensor, src: Tensor) -> Result<(), CudaError> {
        check_disjoint(&[dst], &[src])?;
        elementwise::copy(self, dst, src)
    }

    fn add_assign(&mut self, dst: Tensor, src: Tensor) -> Result<(), CudaError> {
        check_disjoint(&[dst], &[src])?;
        elementwise::add_assign(self, dst, src)
    }

    fn scale(&mut self, dst: Tensor, factor: f32) -> Result<(), CudaError> {
        elementwise::scale(self, dst, factor)
    }

    fn sum_squares(&mut self, src: Tensor) -> Result<f32, CudaError> {
        elementwise::sum_squares(self, src)
    }

    fn embedding_forward(
        &mut self,
        out: Tensor,
        table: Tensor,
        tokens: Indices,
        dim: usize,
    ) -> Result<(), CudaError> {
        check_disjoint(&[out], &[table])?;
        embedding::embedding_forward(self, out, table, tokens, dim)
    }

    fn embedding_backward(
        &mut self,
        dtable: Tensor,
        dout: Tensor,
        tokens: Indices,
        dim: usize,
    ) -> Result<(), CudaError> {
        check_disjoint(&[dtable], &[dout])?;
        embedding::embedding_backward(self, dtable, dout, tokens, dim)
    }

    fn rmsnorm_forward(
        &mut self,
        out: Tensor,
        rstd: Tensor,
        x: Tensor,
        weight: Tensor,
        dim: usize,
        eps: f32,
    ) -> Result<(), CudaError> {
        check_disjoint(&[out, rstd], &[x, weight])?;
        norm::rmsnorm_forward(self, out, rstd, x, weight, dim, eps)
    }

    fn rmsnorm_backward(
        &mut self,
        dx: Tensor,
        dweight: Tensor,
        dout: Tensor,
        x: Tensor,
        weight: Tensor,
        rstd: Tensor,
        dim: usize,
    ) -> Result<(), CudaError> {
        check_disjoint(&[dx, dweight], &[dout, x, weight, rstd])?;
        norm::rmsnorm_backward(self, dx, dweight, dout, x, weight, rstd, dim)
    }

    fn matmul(
        &mut self,
        c: Tensor,
        a: Tensor,
        b: Tensor,
        shape: MatmulShape,
    ) -> Result<(), CudaError> {
        check_disjoint(&[c], &[a, b])?;
        matmul::matmul(self, c, a, b, shape)
    }

    fn add_bias(&mut self, out: Tensor, bias: Tensor) -> Result<(), CudaError> {
        check_disjoint(&[out], &[bias])?;
        norm::add_bias(self, out, bias)
    }

    fn bias_backward(&mut self, dbias: Tensor, dout: Tensor) -> Result<(), CudaError> {
        check_disjoint(&[dbias], &[dout])?;
        norm::bias_backward(self, dbias, dout)
    }

    fn rope_forward(
        &mut self,
        x: Tensor,
        positions: Indices,
        heads: usize,
        head_dim: usize,
        theta: f32,
    ) -> Result<(), CudaError> {
        rope::rope(
            self,
            "rope_forward",
            x,
            positions,
            heads,
            head_dim,
            theta,
            1.0,
        )
    }

    fn rope_backward(
        &mut self,
        dx: Tensor,
        positions: Indices,
        heads: usize,
        head_dim: usize,
        theta: f32,
    ) -> Result<(), CudaError> {
        rope::rope(
            self,
            "rope_backward",
            dx,
            positions,
            heads,
            head_dim,
            theta,
            -1.0,
        )
    }

    fn attention_forward(
        &mut self,
        out: Tensor,
        lse: Tensor,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        seq_starts: &[u32],
        shape: AttentionShape,
    ) -> Result<(), CudaError> {
        check_disjoint(&[out, lse], &[q, k, v])?;
        attention::attention_forward(self, out, lse, q, k, v, seq_starts, shape)
    }

    fn attention_backward(
        &mut self,
        dq: Tensor,
        dk: Tensor,
        dv: Tensor,
        dout: Tensor,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        out: Tensor,
        lse: Tensor,
        seq_starts: &[u32],
        shape: AttentionShape,
    ) -> Result<(), CudaError> {
        check_disjoint(&[dq, dk, dv], &[dout, q, k, v, out, lse])?;
        let grads = attention::Grads { dq, dk, dv };
        let saved = attention::Saved {
            dout,
            q,
            k,
            v,
            out,
            lse,
        };
        attention::attention_backward(self, grads, saved, seq_starts, shape)
    }

    fn kv_cache_append(
        &mut self,
        k_cache: Tensor,
        v_cache: Tensor,
        k: Tensor,
        v: Tensor,
        lengths: &[u32],
        capacity: usize,
        kv_dim: usize,
    ) -> Result<(), CudaError> {
        check_disjoint(&[k_cache, v_cache], &[k, v])?;
        decode::kv_cache_append(self, k_cache, v_cache, k, v, lengths, capacity, kv_dim)
    }

    fn attention_decode(
        &mut self,
        out: Tensor,
        q: Tensor,
        k_cache: Tensor,
        v_cache: Tensor,
        lengths: &[u32],
        capacity: usize,
        shape: AttentionShape,
    ) -> Result<(), CudaError> {
        check_disjoint(&[out], &[q, k_cache, v_cache])?;
        decode::attention_decode(self, out, q, k_cache, v_cache, lengths, capacity, shape)
    }

    fn swiglu_forward(&mut self, out: Tensor, gate: Tensor, up: Tensor) -> Result<(), CudaError> {
        check_disjoint(&[out], &[gate, up])?;
        swiglu::swiglu_forward(self, out, gate, up)
    }

    fn swiglu_backward(
        &mut self,
        dgate: Tensor,
        dup: Tensor,
        dout: Tensor,
        gate: Tensor,
        up: Tensor,
    ) -> Result<(), CudaError> {
        check_disjoint(&[dgate, dup], &[dout, gate, up])?;
        swiglu::swiglu_backward(self, dgate, dup, dout, gate, up)
    }

    fn logprob_forward(
        &mut self,
        logp: Tensor,
        lse: Tensor,
        hidden: Tensor,
        lm_head: Tensor,
        targets: Indices,
    ) -> Result<(), CudaError> {
        check_disjoint(&[logp, lse], &[hidden, lm_head])?;
        let head = logprob::Head {
            hidden,
            lm_head,
            targets,
        };
        logprob::logprob_forward(self, logp, lse, head)
    }

    fn logprob_backward(
        &mut self,
        dhidden: Tensor,
        dlm_head: Tensor,
        weights: Tensor,
        hidden: Tensor,
        lm_head: Tensor,
        targets: Indices,
        lse: Tensor,
    ) -> Result<(), CudaError> {
        check_disjoint(&[dhidden, dlm_head], &[weights, hidden, lm_head, lse])?;
        let head = logprob::Head {
            hidden,
            lm_head,
            targets,
        };
        logprob::logprob_backward(self, dhidden, dlm_head, weights, lse, head)
    }

    fn logits(
        &mut self,
        out: Tensor,
        hidden: Tensor,
        lm_head: Tensor,
        dim: usize,
    ) -> Result<(), CudaError> {
        check_disjoint(&[out], &[hidden, lm_head])?;
        logprob::logits(self, out, hidden, lm_head, dim)
    }

    fn adamw(
        &mut self,
        params: Tensor,
        grads: Tensor,
        m: Tensor,
        v: Tensor,
        step: AdamWStep,
    ) -> Result<(), CudaError> {
        check_disjoint(&[params, m, v], &[grads])?;
        adamw::adamw(self, params, grads, m, v, step)
    }
}
