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

use sage_transformer::contract::{
    AdamWScalars, AttentionSizes, CacheSizes, DecodeSizes, EmbeddingSizes, HeadDims, RopeSizes,
    Rows,
};
use sage_transformer::device::{AttentionGrads, AttentionSaved, HeadOperands};
use sage_transformer::{
    BufferId, Device, IndexBufferId, Indices, MatmulShape, ModelConfig, Tensor,
};

use crate::device::Gpu;
use crate::pipelines::Pipelines;
use crate::recorder::Recorder;
use crate::scratch::ScratchBuffers;
use crate::store::{Operand, Store};

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

impl Device for WgpuBackend {
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
        let (buffer, offset, _) = self.store.locate(dst.into())?;
        let buffer = buffer.clone();
        self.recorder
            .upload(&self.gpu, &buffer, offset, bytemuck::cast_slice(src))
    }

    fn write_indices(&mut self, dst: Indices, src: &[u32]) -> Result<(), WgpuError> {
        let (buffer, offset, _) = self.store.locate(dst.into())?;
        let buffer = buffer.clone();
        self.recorder
            .upload(&self.gpu, &buffer, offset, bytemuck::cast_slice(src))
    }

    fn read(&mut self, src: Tensor, dst: &mut [f32]) -> Result<(), WgpuError> {
        let (buffer, offset, _) = self.store.locate(Operand::F32(src))?;
        let buffer = buffer.clone();
        self.recorder
            .download(&self.gpu, &buffer, offset, bytemuck::cast_slice_mut(dst))
    }

    fn fill(&mut self, dst: Tensor, value: f32) -> Result<(), WgpuError> {
        elementwise::fill(self, dst, value)
    }

    fn copy(&mut self, dst: Tensor, src: Tensor) -> Result<(), WgpuError> {
        elementwise::copy(self, dst, src)
    }

    fn add_assign(&mut self, dst: Tensor, src: Tensor) -> Result<(), WgpuError> {
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
        sizes: EmbeddingSizes,
    ) -> Result<(), WgpuError> {
        embedding::embedding_forward(self, out, table, tokens, sizes)
    }

    fn embedding_backward(
        &mut self,
        dtable: Tensor,
        dout: Tensor,
        tokens: Indices,
        sizes: EmbeddingSizes,
    ) -> Result<(), WgpuError> {
        embedding::embedding_backward(self, dtable, dout, tokens, sizes)
    }

    fn rmsnorm_forward(
        &mut self,
        out: Tensor,
        rstd: Tensor,
        x: Tensor,
        weight: Tensor,
        rows: Rows,
        eps: f32,
    ) -> Result<(), WgpuError> {
        norm::rmsnorm_forward(self, out, rstd, x, weight, rows, eps)
    }

    fn rmsnorm_backward(
        &mut self,
        dx: Tensor,
        dweight: Tensor,
        dout: Tensor,
        x: Tensor,
        weight: Tensor,
        rstd: Tensor,
        rows: Rows,
    ) -> Result<(), WgpuError> {
        norm::rmsnorm_backward(self, dx, dweight, dout, x, weight, rstd, rows)
    }

    fn matmul(
        &mut self,
        c: Tensor,
        a: Tensor,
        b: Tensor,
        shape: MatmulShape,
    ) -> Result<(), WgpuError> {
        matmul::matmul(self, c, a, b, shape)
    }

    fn add_bias(&mut self, out: Tensor, bias: Tensor) -> Result<(), WgpuError> {
        matmul::add_bias(self, out, bias)
    }

    fn bias_backward(&mut self, dbias: Tensor, dout: Tensor, rows: Rows) -> Result<(), WgpuError> {
        norm::bias_backward(self, dbias, dout, rows)
    }

    fn rope_forward(
        &mut self,
        x: Tensor,
        positions: Indices,
        sizes: RopeSizes,
        theta: f32,
    ) -> Result<(), WgpuError> {
        rope::rope(self, "rope_forward", x, positions, sizes, theta, 1.0)
    }

    fn rope_backward(
        &mut self,
        dx: Tensor,
        positions: Indices,
        sizes: RopeSizes,
        theta: f32,
    ) -> Result<(), WgpuError> {
        rope::rope(self, "rope_backward", dx, positions, sizes, theta, -1.0)
    }

    fn attention_forward(
        &mut self,
        out: Tensor,
        lse: Tensor,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        seq_starts: &[u32],
        sizes: AttentionSizes,
    ) -> Result<(), WgpuError> {
        attention::attention_forward(self, out, lse, q, k, v, seq_starts, sizes)
    }

    fn attention_backward(
        &mut self,
        grads: AttentionGrads,
        saved: AttentionSaved,
        seq_starts: &[u32],
        sizes: AttentionSizes,
    ) -> Result<(), WgpuError> {
        attention::attention_backward(self, grads, saved, seq_starts, sizes)
    }

    fn kv_cache_append(
        &mut self,
        caches: [Tensor; 2],
        k: Tensor,
        v: Tensor,
        lengths: &[u32],
        sizes: CacheSizes,
    ) -> Result<(), WgpuError> {
        decode::kv_cache_append(self, caches, k, v, lengths, sizes)
    }

    fn attention_decode(
        &mut self,
        out: Tensor,
        q: Tensor,
        caches: [Tensor; 2],
        lengths: &[u32],
        sizes: DecodeSizes,
    ) -> Result<(), WgpuError> {
        decode::attention_decode(self, out, q, caches, lengths, sizes)
    }

    fn swiglu_forward(&mut self, out: Tensor, gate: Tensor, up: Tensor) -> Result<(), WgpuError> {
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
        swiglu::swiglu_backward(self, dgate, dup, dout, gate, up)
    }

    fn logprob_forward(
        &mut self,
        logp: Tensor,
        lse: Tensor,
        head: HeadOperands,
        dims: HeadDims,
    ) -> Result<(), WgpuError> {
        logprob::logprob_forward(self, logp, lse, head, dims)
    }

    fn logprob_backward(
        &mut self,
        dhidden: Tensor,
        dlm_head: Option<Tensor>,
        weights: Tensor,
        lse: Tensor,
        head: HeadOperands,
        dims: HeadDims,
    ) -> Result<(), WgpuError> {
        logprob::logprob_backward(self, dhidden, dlm_head, weights, lse, head, dims)
    }

    fn logits(
        &mut self,
        out: Tensor,
        hidden: Tensor,
        lm_head: Tensor,
        dims: HeadDims,
    ) -> Result<(), WgpuError> {
        logprob::logits(self, out, hidden, lm_head, dims)
    }

    fn adamw(
        &mut self,
        params: Tensor,
        grads: Tensor,
        m: Tensor,
        v: Tensor,
        scalars: AdamWScalars,
    ) -> Result<(), WgpuError> {
        adamw::adamw(self, params, grads, m, v, scalars)
    }
}
