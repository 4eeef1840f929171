//! # sage-backend-wgpu
//!
//! The wgpu backend of the SAGE transformer: [`WgpuBackend`] implements the `Kernels`
//! contract of `sage-core` in f32 with hand-written WGSL kernels, on any Vulkan, Metal
//! or DX12 GPU (and on Mesa's lavapipe, a software Vulkan driver, in CI). It owns
//! device buffers and the kernels, and nothing else: no model logic, no I/O.
//!
//! Every call records its work into one pending command encoder; the encoder is
//! submitted only when the host needs a result (a `read`, `sum_squares`), so a
//! training step takes a few submissions. No kernel uses float atomics or assumes a
//! subgroup size, and every reduction runs in a fixed order, so results are the same
//! from run to run on a given adapter. Tensors are bound as windows of their buffers, so only a single
//! tensor (not a whole slab) must fit the adapter's binding size limit; elementwise
//! kernels split larger tensors.
//!
//! Modules, one per concern; each kernel family's WGSL file (in `shaders/`) holds its
//! forward beside its backward:
//! - `device`: adapter, device and queue with the adapter's limits; error capture;
//! - `store`: buffers, the free-buffer pool, binding windows; `scratch`: the
//!   backend's own buffers; `recorder`: the command stream, uploads and reads;
//!   `pipelines`: compiled kernels; `launch`: binding and recording one kernel;
//! - `elementwise`, `embedding`, `norm` (RMSNorm and the column sums of weight and
//!   bias gradients), `matmul`, `rope`, `attention` (training), `decode` (KV cache),
//!   `swiglu`, `logprob` (the output head), `adamw`;
//! - `limits`: whether a model fits the adapter ([`WgpuBackend::check_model`]).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod adamw;
mod attention;
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
mod pipelines;
mod recorder;
mod rope;
mod scratch;
mod store;
mod swiglu;

pub use error::WgpuError;
pub use wgpu::AdapterInfo;

use std::fmt;

use sage_transformer::{
    AdamWStep, AttentionShape, BufferId, IndexBufferId, Indices, Kernels, MatmulShape, ModelConfig,
    Tensor,
};

use crate::device::Gpu;
use crate::pipelines::Pipelines;
use crate::recorder::Recorder;
use crate::scratch::ScratchBuffers;
use crate::store::{Operand, Store};
use sage_transformer::contract::check_disjoint;
use sage_transformer::contract::expect_len;

/// The wgpu backend: a device, its buffers, compiled kernels and the pending commands.
pub struct WgpuBackend {
    gpu: Gpu,
    store: Store,
    recorder: Recorder,
    pipelines: Pipelines,
    scratch: ScratchBuffers,
}

/// The adapter rather than the buffers.
impl fmt::Debug for WgpuBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WgpuBackend")
            .field("adapter", &self.gpu.description())
            .field("submissions", &self.recorder.submissions)
            .finish()
    }
}

impl WgpuBackend {
    /// Opens the best Vulkan, Metal or DX12 adapter (blocking), requesting all of its
    /// limits; fails with [`WgpuError::NoAdapter`] when there is none.
    pub fn new() -> Result<WgpuBackend, WgpuError> {
        Ok(WgpuBackend {
            gpu: Gpu::new()?,
            store: Store::default(),
            recorder: Recorder::default(),
            pipelines: Pipelines::default(),
            scratch: ScratchBuffers::default(),
        })
    }

    /// Like [`WgpuBackend::new`], but binds at most `bytes` of a buffer per tensor (never
    /// more than the adapter allows): larger tensors are split where a kernel can split
    /// them (elementwise kernels, the sum of squares, AdamW, the output head's chunks) and
    /// refused with [`WgpuError::TooLarge`] elsewhere. Tests use it to reach those paths
    /// with small tensors.
    pub fn with_max_binding(bytes: u32) -> Result<WgpuBackend, WgpuError> {
        let mut backend = WgpuBackend::new()?;
        let limit = &mut backend.gpu.limits.max_storage_buffer_binding_size;
        *limit = (*limit).min(bytes);
        Ok(backend)
    }

    /// The adapter: name, vendor, device type, driver and graphics API.
    pub fn adapter_info(&self) -> &AdapterInfo {
        &self.gpu.info
    }

    /// One line naming the adapter, its driver and its graphics API.
    pub fn description(&self) -> String {
        self.gpu.description()
    }

    /// Fails with a message naming the limit when the adapter cannot hold or bind the
    /// model's parameters (see the `limits` module for what is checked).
    pub fn check_model(&self, config: &ModelConfig) -> Result<(), WgpuError> {
        limits::check_model(&self.gpu.limits, config)
    }

    /// Command buffers submitted so far (a training step should add only a few).
    pub fn submissions(&self) -> u64 {
        self.recorder.submissions
    }

    /// Submits the pending commands without waiting for them.
    pub fn flush(&mut self) -> Result<(), WgpuError> {
        self.recorder.submit(&self.gpu)
    }
}

impl Kernels for WgpuBackend {
    type Error = WgpuError;

    fn alloc(&mut self, len: usize) -> Result<BufferId, WgpuError> {
        let allocation = self
            .store
            .allocate(&self.gpu.device, &self.gpu.limits, len)?;
        if allocation.recycled {
            self.recorder.clear(&self.gpu, &allocation.buffer)?;
        }
        self.store.insert(allocation.buffer, len)
    }

    fn alloc_indices(&mut self, len: usize) -> Result<IndexBufferId, WgpuError> {
        let allocation = self
            .store
            .allocate(&self.gpu.device, &self.gpu.limits, len)?;
        if allocation.recycled {
            self.recorder.clear(&self.gpu, &allocation.buffer)?;
        }
        self.store.insert_indices(allocation.buffer, len)
    }

    fn free(&mut self, buffer: BufferId) -> Result<(), WgpuError> {
        self.store.free(buffer)
    }

    fn free_indices(&mut self, buffer: IndexBufferId) -> Result<(), WgpuError> {
        self.store.free_indices(buffer)
    }

    fn write(&mut self, dst: Tensor, src: &[f32]) -> Result<(), WgpuError> {
        expect_len("write", "src", src.len(), dst.len)?;
        let (buffer, offset, _) = self.store.locate(dst.into())?;
        let buffer = buffer.clone();
        self.recorder
            .upload(&self.gpu, &buffer, offset, bytemuck::cast_slice(src))
    }

    fn write_indices(&mut self, dst: Indices, src: &[u32]) -> Result<(), WgpuError> {
        expect_len("write_indices", "src", src.len(), dst.len)?;
        let (buffer, offset, _) = self.store.locate(dst.into())?;
        let buffer = buffer.clone();
        self.recorder
            .upload(&self.gpu, &buffer, offset, bytemuck::cast_slice(src))
    }

    fn read(&mut self, src: Tensor, dst: &mut [f32]) -> Result<(), WgpuError> {
        expect_len("read", "dst", dst.len(), src.len)?;
        let (buffer, offset, _) = self.store.locate(Operand::F32(src))?;
        let buffer = buffer.clone();
        self.recorder
            .download(&self.gpu, &buffer, offset, bytemuck::cast_slice_mut(dst))
    }

    fn fill(&mut self, dst: Tensor, value: f32) -> Result<(), WgpuError> {
        elementwise::fill(self, dst, value)
    }

    fn copy(&mut self, dst: Tensor, src: Tensor) -> Result<(), WgpuError> {
        check_disjoint(&[dst], &[src])?;
        elementwise::copy(self, dst, src)
    }

    fn add_assign(&mut self, dst: Tensor, src: Tensor) -> Result<(), WgpuError> {
        check_disjoint(&[dst], &[src])?;
        elementwise::add_assign(self, dst, src)
    }

    fn scale(&mut self, dst: Tensor, factor: f32) -> Result<(), WgpuError> {
        elementwise::scale(self, dst, factor)
    }

    fn sum_squares(&mut self, src: Tensor) -> Result<f32, WgpuError> {
        elementwise::sum_squares(self, src)
    }

    fn embedding_forward(
        &mut self,
        out: Tensor,
        table: Tensor,
        tokens: Indices,
        dim: usize,
    ) -> Result<(), WgpuError> {
        check_disjoint(&[out], &[table])?;
        embedding::embedding_forward(self, out, table, tokens, dim)
    }

    fn embedding_backward(
        &mut self,
        dtable: Tensor,
        dout: Tensor,
        tokens: Indices,
        dim: usize,
    ) -> Result<(), WgpuError> {
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
    ) -> Result<(), WgpuError> {
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
    ) -> Result<(), WgpuError> {
        check_disjoint(&[dx, dweight], &[dout, x, weight, rstd])?;
        norm::rmsnorm_backward(self, dx, dweight, dout, x, weight, rstd, dim)
    }

    fn matmul(
        &mut self,
        c: Tensor,
        a: Tensor,
        b: Tensor,
        shape: MatmulShape,
    ) -> Result<(), WgpuError> {
        check_disjoint(&[c], &[a, b])?;
        matmul::matmul(self, c, a, b, shape)
    }

    fn add_bias(&mut self, out: Tensor, bias: Tensor) -> Result<(), WgpuError> {
        check_disjoint(&[out], &[bias])?;
        matmul::add_bias(self, out, bias)
    }

    fn bias_backward(&mut self, dbias: Tensor, dout: Tensor) -> Result<(), WgpuError> {
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
    ) -> Result<(), WgpuError> {
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
    ) -> Result<(), WgpuError> {
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
    ) -> Result<(), WgpuError> {
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
    ) -> Result<(), WgpuError> {
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
    ) -> Result<(), WgpuError> {
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
    ) -> Result<(), WgpuError> {
        check_disjoint(&[out], &[q, k_cache, v_cache])?;
        decode::attention_decode(self, out, q, k_cache, v_cache, lengths, capacity, shape)
    }

    fn swiglu_forward(&mut self, out: Tensor, gate: Tensor, up: Tensor) -> Result<(), WgpuError> {
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
    ) -> Result<(), WgpuError> {
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
    ) -> Result<(), WgpuError> {
        check_disjoint(&[logp, lse], &[hidden, lm_head])?;
        logprob::logprob_forward(self, logp, lse, hidden, lm_head, targets)
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
    ) -> Result<(), WgpuError> {
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
    ) -> Result<(), WgpuError> {
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
    ) -> Result<(), WgpuError> {
        check_disjoint(&[params, m, v], &[grads])?;
        adamw::adamw(self, params, grads, m, v, step)
    }
}
