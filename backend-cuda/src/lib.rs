//! # sage-backend-cuda
//!
//! The CUDA backend of the SAGE transformer: [`CudaBackend`] implements the `Device`
//! trait of `sage-transformer` (and so its `Kernels` contract, whose checks live there)
//! on an NVIDIA GPU with hand-written CUDA kernels, compiled at run time with NVRTC, and
//! cuBLAS for every GEMM. It owns device buffers and kernels, and nothing else: no model
//! logic, no I/O.
//!
//! **Status: run once, on an H100** (2026-11-24, CUDA driver 13.0): the parity tests
//! (`tests/parity_cuda.rs` in the workspace) passed, 20 of 20, against the CPU
//! backend. Since then the contract's checks moved out of this crate into
//! `sage-transformer`; the kernels and their launches did not change, and the parity
//! tests have not been run on a GPU again. CI has no GPU: it compiles every kernel
//! source with NVRTC 13.0 for `compute_90` (the `nvrtc` test) and builds the crate
//! without a CUDA toolkit.
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
//! [`Kernels::read`](sage_transformer::Kernels::read) and
//! [`Kernels::sum_squares`](sage_transformer::Kernels::sum_squares), which return host
//! values. In [`Precision::Bf16`] a decoding step
//! ([`Kernels::repeated_step`](sage_transformer::Kernels::repeated_step)) is recorded
//! once as a CUDA graph and replayed with one launch when a later step would queue the
//! same calls (`record`; [`CudaBackend::set_step_graphs`]). Kernels take raw device
//! addresses that the store has checked (live buffer,
//! range inside), so tensors of one buffer can be read and written by one call. No
//! kernel uses float atomics: every reduction runs in a fixed order, so results repeat
//! run to run.
//!
//! ## Precision
//! [`Precision::F32`] (the default, and what the parity tests use) computes everything
//! in f32, GEMMs included (`cublasSgemm`, no TF32). [`Precision::Bf16`] casts both
//! operands of each GEMM to bf16 and multiplies them on tensor cores with f32
//! accumulation and f32 output (a weight's bf16 copy is kept and cast again only after
//! the weight is written: `shadow`; the kernels that make activations and gradients for
//! GEMMs (RMSNorm, SwiGLU, attention, RoPE, the logit gradient) write their copies as
//! they make them, so no cast kernel reads those again), and runs training attention on
//! tensor cores
//! (`kernels/flash.cu`: `mma.sync` m16n8k16, tiles rounded to bf16 as they are staged,
//! softmax statistics and accumulators in f32; kernels specialised to heads of at most
//! 64 where the model's fit, with half the registers and shared memory); everything else (weights, activations,
//! gradients, AdamW's master weights and moments) stays f32 in memory. With
//! [`Bf16Inputs::Converted`] (`set_bf16_inputs`) the GEMMs skip the casts and the kept
//! copies and let cuBLAS round the f32 operands to bf16 itself. Two kinds of buffer
//! are held in bf16 in [`Precision::Bf16`], because the contract names the only calls
//! that touch them: a KV cache (`alloc_kv_cache`: bf16 keys and values, attended to in
//! f32 arithmetic) and a frozen model's weights (`alloc_frozen`, `Transformer::new_frozen`:
//! bf16 weights with no f32 copy, which GEMMs multiply as they are and the embedding,
//! RMSNorm and bias kernels widen as they read them). Trainable weights and activations
//! stay f32 in memory: the `Kernels` contract addresses f32 elements everywhere else.
//!
//! ## Testing without a GPU
//! Three checks need no device. NVRTC compiles every kernel to PTX and assembles it for
//! sm_90 with its built-in ptxas, which reads the inline tensor-core PTX and reports
//! spills (`tests/nvrtc.rs`). `emulator/` compiles the kernel sources with the host's
//! C++ compiler against a CPU model of the CUDA thread model (threads as OS threads,
//! barriers, warp shuffles, and `mma.sync` rebuilt from every lane's fragments by the
//! PTX ISA's layouts), and the workspace test `emulated_kernels` runs the attention,
//! decoding and token-choice kernels there against the CPU backend. The parity tests
//! (`parity_cuda`) then need a GPU, and skip without one.
//!
//! Modules, one per concern; each kernel family's `.cu` file (in `kernels/`) holds its
//! forward beside its backward:
//! - `device`: context, stream, cuBLAS handle, library checks; `compile`: the sources
//!   and NVRTC; `launch`: loaded kernels and the one launch path;
//! - `store`: buffers and checked addresses; `scratch`: the backend's own buffers and
//!   host transfers; `shadow`: the bf16 copies of GEMM operands kept between GEMMs;
//!   `record`: repeated steps (decoding steps) recorded as CUDA graphs and replayed;
//! - `elementwise`, `embedding`, `norm` (RMSNorm, bias, column sums), `matmul`
//!   (cuBLAS), `rope`, `attention` (training), `decode` (KV cache), `swiglu`, `logprob`
//!   (the output head), `choose` (token choice on the device), `adamw`;
//! - `limits`: whether a model fits the device ([`CudaBackend::check_model`]).
#![deny(missing_docs)]

mod adamw;
mod attention;
mod choose;
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
mod record;
mod rope;
mod scratch;
mod shadow;
mod store;
mod swiglu;

pub use attention::DkvTile;
pub use compile::{
    assemble_kernels, compile_kernels, nvrtc_available, AssembledFamily, CompiledFamily,
};
pub use device::{driver_available, ProfilerStart};
pub use error::CudaError;
pub use matmul::{Bf16Inputs, Precision};
pub use record::StepGraphStats;

use std::fmt;

use sage_transformer::contract::{
    AdamWScalars, AttentionSizes, CacheSizes, ChoiceSizes, DecodeSizes, EmbeddingSizes, HeadDims,
    RopeSizes, Rows,
};
use sage_transformer::device::{
    choose_tokens_on_host, AttentionGrads, AttentionSaved, HeadOperands,
};
use sage_transformer::{
    BufferId, Device, IndexBufferId, Indices, MatmulShape, ModelConfig, ProjectedRows, Tensor,
};

use crate::device::Gpu;
use crate::launch::Functions;
use crate::record::StepGraphs;
use crate::scratch::{download, upload, IndexScratch, Scratch, ScratchBuffers};
use crate::store::{Held, Store};

use half::bf16;

/// The CUDA backend: a device, its buffers, the loaded kernels and scratch space.
pub struct CudaBackend {
    gpu: Gpu,
    functions: Functions,
    store: Store,
    scratch: ScratchBuffers,
    precision: Precision,
    bf16_inputs: Bf16Inputs,
    dkv_tile: DkvTile,
    graphs: StepGraphs,
    /// Whether a decoding step's biases, rotations and cache append run as one kernel
    /// ([`CudaBackend::set_fused_rope_append`]).
    fused_rope_append: bool,
    /// Whether products of one input by equally spaced weights run as one batched GEMM
    /// ([`CudaBackend::set_batched_gemms`]).
    batched_gemms: bool,
    /// GEMM operands cast to bf16 so far (see [`CudaBackend::operand_casts`]).
    operand_casts: u64,
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

    /// Opens GPU `ordinal` with the given GEMM precision; repeated steps are recorded
    /// as graphs in [`Precision::Bf16`], the fast path ([`CudaBackend::set_step_graphs`]).
    pub fn with_device(ordinal: usize, precision: Precision) -> Result<CudaBackend, CudaError> {
        let gpu = Gpu::new(ordinal)?;
        let functions = Functions::load(&gpu)?;
        Ok(CudaBackend {
            gpu,
            functions,
            store: Store::default(),
            scratch: ScratchBuffers::default(),
            precision,
            bf16_inputs: Bf16Inputs::default(),
            dkv_tile: DkvTile::default(),
            graphs: StepGraphs::new(precision == Precision::Bf16),
            fused_rope_append: true,
            batched_gemms: true,
            operand_casts: 0,
        })
    }

    /// One line naming the device, its compute capability, memory and driver, and the
    /// GEMM precision.
    pub fn description(&self) -> String {
        let inputs = match self.precision {
            Precision::F32 => String::new(),
            Precision::Bf16 => format!(" ({:?} bf16 inputs)", self.bf16_inputs),
        };
        format!(
            "{}, {:?} GEMMs{inputs} and training attention",
            self.gpu.description, self.precision
        )
    }

    /// Bytes of device memory in use now, by every process on the device (the driver's
    /// total less its free memory): on a device of its own, this backend's buffers,
    /// scratch, kept copies and the memory pool's reserve.
    pub fn memory_in_use(&self) -> Result<usize, CudaError> {
        self.gpu.ctx.bind_to_thread()?;
        let (free, total) = cudarc::driver::result::mem_get_info()?;
        Ok(total.saturating_sub(free))
    }

    /// The most bytes this backend's buffers, scratch and kept copies held at once since
    /// the device was opened: the high-water mark of the device's memory pool, which every
    /// stream-ordered allocation comes from (cuBLAS's own workspace is not in it). It is
    /// the measure PyTorch's `torch.cuda.max_memory_allocated` reports for its tensors.
    pub fn memory_peak(&self) -> Result<usize, CudaError> {
        use cudarc::driver::sys;
        self.gpu.ctx.bind_to_thread()?;
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        let mut high: u64 = 0;
        // SAFETY: the context is current on this thread, `pool` receives the device's
        // current pool, and USED_MEM_HIGH writes one u64 into `high`.
        unsafe {
            sys::cuDeviceGetMemPool(&mut pool, self.gpu.ctx.cu_device()).result()?;
            sys::cuMemPoolGetAttribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
                (&mut high as *mut u64).cast(),
            )
            .result()?;
        }
        Ok(high as usize)
    }

    /// A handle that starts an attached profiler's recording on this device.
    pub fn profiler(&self) -> ProfilerStart {
        ProfilerStart(self.gpu.ctx.clone())
    }

    /// Bytes held by the bf16 copies of GEMM operands kept between GEMMs (the bf16
    /// mode's copies of the weights, and of the activations and gradients that kernels
    /// write copies of; see `shadow`), beside the f32 tensors themselves.
    pub fn kept_bf16_bytes(&self) -> usize {
        2 * self.store.shadows.borrow().kept_elements()
    }

    /// The GEMM precision.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Sets how the bf16 mode's GEMMs get their bf16 operands (no effect in
    /// [`Precision::F32`]). Switching to [`Bf16Inputs::Converted`] releases the kept
    /// copies.
    pub fn set_bf16_inputs(&mut self, inputs: Bf16Inputs) {
        if inputs == Bf16Inputs::Converted {
            drop(self.store.shadows.get_mut().clear());
        }
        self.bf16_inputs = inputs;
    }

    /// Whether kernels write bf16 copies of the GEMM inputs they make (the bf16 mode's
    /// [`Bf16Inputs::Copies`]).
    pub(crate) fn writes_copies(&self) -> bool {
        self.precision == Precision::Bf16 && self.bf16_inputs == Bf16Inputs::Copies
    }

    /// Sets the queries per tile of the bf16 mode's dk/dv attention kernel for heads of
    /// at most 64 (a tuning choice for a benchmark to make: the results are the same to
    /// f32 rounding).
    pub fn set_dkv_tile(&mut self, tile: DkvTile) {
        self.dkv_tile = tile;
    }

    /// Turns on or off the recording of repeated steps (decoding steps) as CUDA graphs,
    /// replayed with one launch each (`record`); off runs every step as ordinary
    /// launches and drops the graphs. On by default in [`Precision::Bf16`].
    pub fn set_step_graphs(&mut self, on: bool) {
        self.graphs.set_enabled(on);
    }

    /// Turns on or off the one-kernel form of a decoding step's biases, rotations and
    /// cache append (`Kernels::rope_append_kv`); off runs them as the three or four
    /// kernels of the separate calls. The same values either way; on by default, off
    /// for a benchmark to measure what the fusion saves.
    pub fn set_fused_rope_append(&mut self, on: bool) {
        self.fused_rope_append = on;
    }

    /// Turns on or off one strided batched GEMM for products of one input by weights
    /// that lie equally spaced and are held alike (`Kernels::matmul_shared_input`: a
    /// layer's k and v, and gate and up, projections, in the f32 mode and with frozen
    /// bf16 weights); off runs one GEMM each. The same products either way; on by
    /// default, off for a benchmark to measure what batching saves.
    pub fn set_batched_gemms(&mut self, on: bool) {
        self.batched_gemms = on;
    }

    /// GEMM operands the bf16 mode has cast to bf16 so far: those whose copy was neither
    /// kept current nor written by the kernel that made them. Counted when a GEMM asks
    /// for the cast, so a decoding step run from a CUDA graph counts what it casts once
    /// per step (as it is traced) and once more when its graph is captured.
    pub fn operand_casts(&self) -> u64 {
        self.operand_casts
    }

    /// How the repeated steps ran so far: graphs captured and replayed, steps run
    /// eagerly, and why the last of those could not be recorded.
    pub fn step_graph_stats(&self) -> StepGraphStats {
        self.graphs.stats()
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
        self.scratch.space(&self.gpu, which, len)
    }

    /// The address of at least `len` elements of the `u32` scratch `which`.
    pub(crate) fn index_scratch_space(
        &mut self,
        which: IndexScratch,
        len: usize,
    ) -> Result<u64, CudaError> {
        self.scratch.index_space(&self.gpu, which, len)
    }
}

impl Device for CudaBackend {
    type Error = CudaError;

    fn alloc(&mut self, len: usize) -> Result<BufferId, CudaError> {
        self.store.alloc(&self.gpu, len)
    }

    fn alloc_indices(&mut self, len: usize) -> Result<IndexBufferId, CudaError> {
        self.store.alloc_indices(&self.gpu, len)
    }

    /// In [`Precision::Bf16`] the cache holds bf16 keys and values (half the memory and
    /// half the reads of a decoding step), as PyTorch's bf16 models do; in
    /// [`Precision::F32`] f32.
    fn alloc_kv_cache(&mut self, len: usize) -> Result<BufferId, CudaError> {
        match self.precision {
            Precision::F32 => self.store.alloc(&self.gpu, len),
            Precision::Bf16 => self.store.alloc_held(&self.gpu, len, Held::CacheBf16),
        }
    }

    /// In [`Precision::Bf16`] frozen weights are held in bf16 (rounded to nearest even
    /// as they are written), with no f32 copy beside them: half the memory of f32
    /// weights, and GEMMs read them without a cast or a kept copy. In
    /// [`Precision::F32`] f32.
    fn alloc_frozen(&mut self, len: usize) -> Result<BufferId, CudaError> {
        match self.precision {
            Precision::F32 => self.store.alloc(&self.gpu, len),
            Precision::Bf16 => self.store.alloc_held(&self.gpu, len, Held::WeightsBf16),
        }
    }

    fn free(&mut self, buffer: BufferId) -> Result<(), CudaError> {
        self.gpu.recorder.allow("freeing a buffer")?;
        self.store.free(buffer)
    }

    fn free_indices(&mut self, buffer: IndexBufferId) -> Result<(), CudaError> {
        self.gpu.recorder.allow("freeing a buffer")?;
        self.store.free_indices(buffer)
    }

    fn write(&mut self, dst: Tensor, src: &[f32]) -> Result<(), CudaError> {
        match self.store.host_write_address(dst)? {
            (address, false) => upload(&self.gpu, address, src),
            (address, true) => {
                let bits: Vec<u16> = src.iter().map(|&x| bf16::from_f32(x).to_bits()).collect();
                upload(&self.gpu, address, &bits)
            }
        }
    }

    fn write_indices(&mut self, dst: Indices, src: &[u32]) -> Result<(), CudaError> {
        let address = self.store.index_address(dst)?;
        upload(&self.gpu, address, src)
    }

    fn read(&mut self, src: Tensor, dst: &mut [f32]) -> Result<(), CudaError> {
        let address = self.store.address_read(src)?;
        download(&self.gpu, dst, address)
    }

    fn fill(&mut self, dst: Tensor, value: f32) -> Result<(), CudaError> {
        elementwise::fill(self, dst, value)
    }

    fn copy(&mut self, dst: Tensor, src: Tensor) -> Result<(), CudaError> {
        elementwise::copy(self, dst, src)
    }

    fn add_assign(&mut self, dst: Tensor, src: Tensor) -> Result<(), CudaError> {
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
        sizes: EmbeddingSizes,
    ) -> Result<(), CudaError> {
        embedding::embedding_forward(self, out, table, tokens, sizes)
    }

    fn embedding_backward(
        &mut self,
        dtable: Tensor,
        dout: Tensor,
        tokens: Indices,
        sizes: EmbeddingSizes,
    ) -> Result<(), CudaError> {
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
    ) -> Result<(), CudaError> {
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
    ) -> Result<(), CudaError> {
        norm::rmsnorm_backward(self, dx, dweight, dout, x, weight, rstd, rows)
    }

    fn matmul(
        &mut self,
        c: Tensor,
        a: Tensor,
        b: Tensor,
        shape: MatmulShape,
    ) -> Result<(), CudaError> {
        matmul::matmul(self, c, a, b, shape)
    }

    fn matmul_shared_input(
        &mut self,
        c: &[Tensor],
        a: Tensor,
        b: &[Tensor],
        shape: MatmulShape,
    ) -> Result<(), CudaError> {
        matmul::matmul_shared_input(self, c, a, b, shape)
    }

    fn add_bias(&mut self, out: Tensor, bias: Tensor) -> Result<(), CudaError> {
        norm::add_bias(self, out, bias)
    }

    fn bias_backward(&mut self, dbias: Tensor, dout: Tensor, rows: Rows) -> Result<(), CudaError> {
        norm::bias_backward(self, dbias, dout, rows)
    }

    fn rope_forward(
        &mut self,
        x: Tensor,
        positions: Indices,
        sizes: RopeSizes,
        theta: f32,
    ) -> Result<(), CudaError> {
        rope::rope(
            self,
            "rope_forward",
            (x, None, positions),
            sizes,
            theta,
            1.0,
        )
    }

    fn add_bias_rope_forward(
        &mut self,
        x: Tensor,
        bias: Tensor,
        positions: Indices,
        sizes: RopeSizes,
        theta: f32,
    ) -> Result<(), CudaError> {
        let op = "add_bias_rope_forward";
        rope::rope(self, op, (x, Some(bias), positions), sizes, theta, 1.0)
    }

    fn rope_backward(
        &mut self,
        dx: Tensor,
        positions: Indices,
        sizes: RopeSizes,
        theta: f32,
    ) -> Result<(), CudaError> {
        rope::rope(
            self,
            "rope_backward",
            (dx, None, positions),
            sizes,
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
        sizes: AttentionSizes,
    ) -> Result<(), CudaError> {
        attention::attention_forward(self, (out, lse), [q, k, v], seq_starts, sizes)
    }

    fn attention_backward(
        &mut self,
        grads: AttentionGrads,
        saved: AttentionSaved,
        seq_starts: &[u32],
        sizes: AttentionSizes,
    ) -> Result<(), CudaError> {
        attention::attention_backward(self, grads, saved, seq_starts, sizes)
    }

    fn kv_cache_append(
        &mut self,
        caches: [Tensor; 2],
        k: Tensor,
        v: Tensor,
        lengths: &[u32],
        sizes: CacheSizes,
    ) -> Result<(), CudaError> {
        decode::kv_cache_append(self, caches, (k, v), lengths, sizes)
    }

    fn rope_append_kv(
        &mut self,
        rows: ProjectedRows,
        positions: Indices,
        caches: [Tensor; 2],
        lengths: &[u32],
        sizes: DecodeSizes,
        theta: f32,
    ) -> Result<(), CudaError> {
        rope::rope_append_kv(self, rows, (positions, theta), caches, lengths, sizes)
    }

    fn attention_decode(
        &mut self,
        out: Tensor,
        q: Tensor,
        caches: [Tensor; 2],
        lengths: &[u32],
        sizes: DecodeSizes,
    ) -> Result<(), CudaError> {
        decode::attention_decode(self, (out, q), caches, lengths, sizes)
    }

    fn swiglu_forward(&mut self, out: Tensor, gate: Tensor, up: Tensor) -> Result<(), CudaError> {
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
        swiglu::swiglu_backward(self, dgate, dup, dout, gate, up)
    }

    fn logprob_forward(
        &mut self,
        logp: Tensor,
        lse: Tensor,
        head: HeadOperands,
        dims: HeadDims,
    ) -> Result<(), CudaError> {
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
    ) -> Result<(), CudaError> {
        logprob::logprob_backward(self, dhidden, dlm_head, weights, lse, head, dims)
    }

    fn logits(
        &mut self,
        out: Tensor,
        hidden: Tensor,
        lm_head: Tensor,
        dims: HeadDims,
    ) -> Result<(), CudaError> {
        logprob::logits(self, out, hidden, lm_head, dims)
    }

    fn choose_tokens(
        &mut self,
        choices: Tensor,
        logits: Tensor,
        uniforms: &[f64],
        sizes: ChoiceSizes,
    ) -> Result<(), CudaError> {
        match self.precision {
            // The f32 mode keeps the paths the parity tests first passed on a GPU.
            Precision::F32 => choose_tokens_on_host(self, choices, logits, uniforms, sizes),
            Precision::Bf16 => choose::choose_tokens(self, choices, logits, uniforms, sizes),
        }
    }

    fn adamw(
        &mut self,
        params: Tensor,
        grads: Tensor,
        m: Tensor,
        v: Tensor,
        scalars: AdamWScalars,
    ) -> Result<(), CudaError> {
        adamw::adamw(self, [params, grads, m, v], scalars)
    }

    fn repeated_step<E>(
        &mut self,
        step: &mut dyn FnMut(&mut Self) -> Result<(), E>,
    ) -> Result<Result<(), E>, CudaError> {
        self.run_repeated_step(step)
    }
}
