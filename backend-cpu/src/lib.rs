//! # sage-backend-cpu
//!
//! The CPU backend of the SAGE transformer: [`CpuBackend`] implements the `Device`
//! trait of `sage-transformer` (and so its `Kernels` contract, whose checks live there)
//! in f32, parallelised with rayon, and is the oracle every other backend is tested
//! against. It owns buffer storage and the kernels, and nothing else: no model logic,
//! no I/O. [`Precision::Bf16`] (`CpuBackend::with_precision`) multiplies the operands
//! of its larger matrix products rounded to bf16, for speed on CPUs with AVX-512 BF16,
//! and decodes from bf16 copies of the weights, half the bytes to stream.
//!
//! Results are deterministic: the same inputs give bit-identical outputs from run to
//! run, whatever the thread count, because no reduction's order depends on scheduling.
//!
//! Modules, one per kernel family, each forward beside its backward:
//! - `store`: the buffers and the checked lending of tensor slices; `copies`: the bf16
//!   copies of weights that the bf16 precision's decoding products read;
//! - `elementwise`: fill, copy, `+=`, scale, sum of squares;
//! - `embedding`, `norm` (RMSNorm), `matmul` (GEMM and bias; `gemm` is its packed
//!   kernel, `skinny` its kernel for a few rows, `bf16` the packed kernel's bf16
//!   arithmetic), `rope`, `attention` (training), `decode` (KV cache),
//!   `cached_attention` (query rows against KV caches, several a sequence), `swiglu`,
//!   `logprob` (the output head), `choose` (token choice from rows of logits), `adamw`;
//! - `math`: vectorisable exp, dot products, reductions and softmax rows shared by the
//!   kernels, and the run-time dispatch (pulp) that compiles hot loops for AVX2.
//!
//! No `unsafe` but in `bf16`: the call into its kernel compiled for AVX-512 BF16, which
//! pulp's vector levels do not cover, once the CPU has said it has the instructions.
#![deny(unsafe_code)]
#![deny(missing_docs)]

mod adamw;
mod attention;
mod bf16;
mod cached_attention;
mod choose;
mod copies;
mod decode;
mod elementwise;
mod embedding;
mod error;
mod floats;
mod gemm;
mod logprob;
mod math;
mod matmul;
mod norm;
mod rope;
mod skinny;
mod store;
mod swiglu;
#[cfg(test)]
mod test_inputs;

pub use error::CpuError;

use std::fmt;

use sage_transformer::contract::{
    AdamWScalars, AttentionSizes, CacheSizes, ChoiceSizes, DecodeSizes, EmbeddingSizes, HeadDims,
    RopeSizes, Rows,
};
use sage_transformer::device::{AttentionGrads, AttentionSaved, HeadOperands};
use sage_transformer::{BufferId, Device, IndexBufferId, Indices, MatmulShape, Tensor};

use crate::store::Store;

/// The CPU backend: host buffers and f32 kernels running on rayon's global pool.
#[derive(Default)]
pub struct CpuBackend {
    store: Store,
    /// One chunk of logits of the fused output head, kept between calls.
    logits_chunk: Vec<f32>,
    /// The arithmetic of the packed products.
    precision: Precision,
}

/// Counts rather than contents.
impl fmt::Debug for CpuBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CpuBackend")
            .field("store", &self.store)
            .field("logits_chunk_elements", &self.logits_chunk.len())
            .field("precision", &self.precision())
            .finish()
    }
}

impl CpuBackend {
    /// A backend with no buffers, in f32.
    pub fn new() -> CpuBackend {
        CpuBackend::default()
    }

    /// A backend with no buffers whose products run in `precision`.
    pub fn with_precision(precision: Precision) -> CpuBackend {
        CpuBackend {
            precision,
            ..CpuBackend::default()
        }
    }

    /// The arithmetic of this backend's products.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Whether this CPU runs [`Precision::Bf16`]'s products with its bf16 dot
    /// instruction (AVX-512 BF16); without it they are slower than f32's.
    pub fn has_bf16_dot_instruction() -> bool {
        bf16::DotInstruction::detect().is_some()
    }
}

/// The arithmetic of the CPU backend's matrix products (every other kernel, attention's
/// products included, computes in f32).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    /// f32 operands and sums: the oracle every backend is tested against.
    #[default]
    F32,
    /// The products of the weights, the output head and their gradients (of more than
    /// 32 rows: not a decoding step's) multiply operands rounded to bf16, to nearest
    /// even, and sum in f32, as the CUDA backend's bf16 mode does. On a CPU with AVX-512
    /// BF16 (AMD Zen 4 and later, Intel Cooper Lake and Sapphire Rapids and later) its
    /// dot instruction does twice the multiply-adds of an f32 one; elsewhere the same
    /// sums run on the f32 kernel, slower than [`Precision::F32`]. The products of at
    /// most 32 rows (decoding) multiply f32 rows by a bf16 copy of the weight, widened
    /// in registers, where the weight has one: those products are bound by the bytes of
    /// weight they stream. Frozen weights (`alloc_frozen`: a model loaded for inference)
    /// keep a copy from the start; trainable ones get one when a decoding step reads a
    /// weight for the second time since the buffer was written (see `copies`).
    Bf16,
}

impl Device for CpuBackend {
    type Error = CpuError;

    fn alloc(&mut self, len: usize) -> Result<BufferId, CpuError> {
        self.store.alloc(len)
    }

    fn alloc_indices(&mut self, len: usize) -> Result<IndexBufferId, CpuError> {
        self.store.alloc_indices(len)
    }

    /// In [`Precision::Bf16`], with a bf16 copy from the start that the products of a
    /// few rows (a decoding step's) stream in place of the f32 weights: half the bytes.
    fn alloc_frozen(&mut self, len: usize) -> Result<BufferId, CpuError> {
        match self.precision {
            Precision::F32 => self.store.alloc(len),
            Precision::Bf16 => self.store.alloc_with_bf16_copy(len),
        }
    }

    fn free(&mut self, buffer: BufferId) -> Result<(), CpuError> {
        self.store.free(buffer)
    }

    fn free_indices(&mut self, buffer: IndexBufferId) -> Result<(), CpuError> {
        self.store.free_indices(buffer)
    }

    fn write(&mut self, dst: Tensor, src: &[f32]) -> Result<(), CpuError> {
        self.store.write(dst, src)
    }

    fn write_indices(&mut self, dst: Indices, src: &[u32]) -> Result<(), CpuError> {
        self.store.indices_mut(dst)?.copy_from_slice(src);
        Ok(())
    }

    fn read(&mut self, src: Tensor, dst: &mut [f32]) -> Result<(), CpuError> {
        let ([], [src], []) = self.store.views([], [src], [])?;
        dst.copy_from_slice(src);
        Ok(())
    }

    fn fill(&mut self, dst: Tensor, value: f32) -> Result<(), CpuError> {
        let ([dst], [], []) = self.store.views([dst], [], [])?;
        elementwise::fill(dst, value);
        Ok(())
    }

    fn copy(&mut self, dst: Tensor, src: Tensor) -> Result<(), CpuError> {
        let ([dst], [src], []) = self.store.views([dst], [src], [])?;
        elementwise::copy(dst, src);
        Ok(())
    }

    fn add_assign(&mut self, dst: Tensor, src: Tensor) -> Result<(), CpuError> {
        let ([dst], [src], []) = self.store.views([dst], [src], [])?;
        elementwise::add_assign(dst, src);
        Ok(())
    }

    fn scale(&mut self, dst: Tensor, factor: f32) -> Result<(), CpuError> {
        let ([dst], [], []) = self.store.views([dst], [], [])?;
        elementwise::scale(dst, factor);
        Ok(())
    }

    fn sum_squares(&mut self, src: Tensor) -> Result<f32, CpuError> {
        let ([], [src], []) = self.store.views([], [src], [])?;
        Ok(elementwise::sum_squares(src))
    }

    fn embedding_forward(
        &mut self,
        out: Tensor,
        table: Tensor,
        tokens: Indices,
        sizes: EmbeddingSizes,
    ) -> Result<(), CpuError> {
        let ([out], [table], [tokens]) = self.store.views([out], [table], [tokens])?;
        embedding::embedding_forward(out, table, tokens, sizes)
    }

    fn embedding_backward(
        &mut self,
        dtable: Tensor,
        dout: Tensor,
        tokens: Indices,
        sizes: EmbeddingSizes,
    ) -> Result<(), CpuError> {
        let ([dtable], [dout], [tokens]) = self.store.views([dtable], [dout], [tokens])?;
        embedding::embedding_backward(dtable, dout, tokens, sizes)
    }

    fn rmsnorm_forward(
        &mut self,
        out: Tensor,
        rstd: Tensor,
        x: Tensor,
        weight: Tensor,
        rows: Rows,
        eps: f32,
    ) -> Result<(), CpuError> {
        let ([out, rstd], [x, weight], []) = self.store.views([out, rstd], [x, weight], [])?;
        norm::rmsnorm_forward(out, rstd, x, weight, rows, eps);
        Ok(())
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
    ) -> Result<(), CpuError> {
        let ([dx, dweight], [dout, x, weight, rstd], []) =
            self.store
                .views([dx, dweight], [dout, x, weight, rstd], [])?;
        norm::rmsnorm_backward(dx, dweight, dout, x, weight, rstd, rows);
        Ok(())
    }

    fn matmul(
        &mut self,
        c: Tensor,
        a: Tensor,
        b: Tensor,
        shape: MatmulShape,
    ) -> Result<(), CpuError> {
        let skinny = self.precision == Precision::Bf16 && matmul::is_skinny_weight_product(&shape);
        let (([c], [a, b], []), b_bf16) =
            self.store
                .views_with_bf16_copy(([c], [a, b], []), b, skinny)?;
        matmul::matmul(c, a, b, shape, self.precision, b_bf16)
    }

    fn add_bias(&mut self, out: Tensor, bias: Tensor) -> Result<(), CpuError> {
        let ([out], [bias], []) = self.store.views([out], [bias], [])?;
        matmul::add_bias(out, bias);
        Ok(())
    }

    fn bias_backward(&mut self, dbias: Tensor, dout: Tensor, rows: Rows) -> Result<(), CpuError> {
        let ([dbias], [dout], []) = self.store.views([dbias], [dout], [])?;
        matmul::bias_backward(dbias, dout, rows);
        Ok(())
    }

    fn rope_forward(
        &mut self,
        x: Tensor,
        positions: Indices,
        sizes: RopeSizes,
        theta: f32,
    ) -> Result<(), CpuError> {
        let ([x], [], [positions]) = self.store.views([x], [], [positions])?;
        rope::rope_forward(x, positions, sizes, theta);
        Ok(())
    }

    fn rope_backward(
        &mut self,
        dx: Tensor,
        positions: Indices,
        sizes: RopeSizes,
        theta: f32,
    ) -> Result<(), CpuError> {
        let ([dx], [], [positions]) = self.store.views([dx], [], [positions])?;
        rope::rope_backward(dx, positions, sizes, theta);
        Ok(())
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
    ) -> Result<(), CpuError> {
        let ([out, lse], [q, k, v], []) = self.store.views([out, lse], [q, k, v], [])?;
        attention::attention_forward(out, lse, [q, k, v], seq_starts, sizes)
    }

    fn attention_backward(
        &mut self,
        grads: AttentionGrads,
        saved: AttentionSaved,
        seq_starts: &[u32],
        sizes: AttentionSizes,
    ) -> Result<(), CpuError> {
        let AttentionGrads { dq, dk, dv } = grads;
        let AttentionSaved {
            dout,
            q,
            k,
            v,
            out,
            lse,
        } = saved;
        let (grads, saved, []) = self
            .store
            .views([dq, dk, dv], [dout, q, k, v, out, lse], [])?;
        attention::attention_backward(grads, saved, seq_starts, sizes)
    }

    fn kv_cache_append(
        &mut self,
        caches: [Tensor; 2],
        k: Tensor,
        v: Tensor,
        lengths: &[u32],
        sizes: CacheSizes,
    ) -> Result<(), CpuError> {
        let (caches, [k, v], []) = self.store.views(caches, [k, v], [])?;
        decode::kv_cache_append(caches, [k, v], lengths, sizes);
        Ok(())
    }

    fn attention_decode(
        &mut self,
        out: Tensor,
        q: Tensor,
        caches: [Tensor; 2],
        lengths: &[u32],
        sizes: DecodeSizes,
    ) -> Result<(), CpuError> {
        let [k_cache, v_cache] = caches;
        let ([out], [q, k_cache, v_cache], []) =
            self.store.views([out], [q, k_cache, v_cache], [])?;
        decode::attention_decode(out, q, [k_cache, v_cache], lengths, sizes);
        Ok(())
    }

    fn attention_cached(
        &mut self,
        out: Tensor,
        q: Tensor,
        caches: [Tensor; 2],
        sequences: &[u32],
        attended: &[u32],
        sizes: DecodeSizes,
    ) -> Result<(), CpuError> {
        let [k_cache, v_cache] = caches;
        let ([out], [q, k_cache, v_cache], []) =
            self.store.views([out], [q, k_cache, v_cache], [])?;
        cached_attention::attention_cached(out, q, [k_cache, v_cache], sequences, attended, sizes)
    }

    fn swiglu_forward(&mut self, out: Tensor, gate: Tensor, up: Tensor) -> Result<(), CpuError> {
        let ([out], [gate, up], []) = self.store.views([out], [gate, up], [])?;
        swiglu::swiglu_forward(out, gate, up);
        Ok(())
    }

    fn swiglu_backward(
        &mut self,
        dgate: Tensor,
        dup: Tensor,
        dout: Tensor,
        gate: Tensor,
        up: Tensor,
    ) -> Result<(), CpuError> {
        let ([dgate, dup], [dout, gate, up], []) =
            self.store.views([dgate, dup], [dout, gate, up], [])?;
        swiglu::swiglu_backward(dgate, dup, dout, gate, up);
        Ok(())
    }

    fn logprob_forward(
        &mut self,
        logp: Tensor,
        lse: Tensor,
        head: HeadOperands,
        dims: HeadDims,
    ) -> Result<(), CpuError> {
        let HeadOperands {
            hidden,
            lm_head,
            targets,
        } = head;
        let ([logp, lse], [hidden, lm_head], [targets]) =
            self.store
                .views([logp, lse], [hidden, lm_head], [targets])?;
        let head = logprob::Head {
            hidden,
            lm_head,
            targets,
        };
        let precision = self.precision;
        logprob::logprob_forward(logp, lse, head, dims, &mut self.logits_chunk, precision)
    }

    fn logprob_backward(
        &mut self,
        dhidden: Tensor,
        dlm_head: Option<Tensor>,
        weights: Tensor,
        lse: Tensor,
        head: HeadOperands,
        dims: HeadDims,
    ) -> Result<(), CpuError> {
        let HeadOperands {
            hidden,
            lm_head,
            targets,
        } = head;
        let reads = [weights, hidden, lm_head, lse];
        // A frozen head's gradient has no view: the store gives one write fewer.
        let (dhidden, dlm_head, [weights, hidden, lm_head, lse], [targets]) = match dlm_head {
            Some(dlm_head) => {
                let ([dhidden, dlm_head], reads, indices) =
                    self.store.views([dhidden, dlm_head], reads, [targets])?;
                (dhidden, Some(dlm_head), reads, indices)
            }
            None => {
                let ([dhidden], reads, indices) = self.store.views([dhidden], reads, [targets])?;
                (dhidden, None, reads, indices)
            }
        };
        let head = logprob::Head {
            hidden,
            lm_head,
            targets,
        };
        let grads = logprob::HeadGrads { dhidden, dlm_head };
        let precision = self.precision;
        logprob::logprob_backward(
            grads,
            weights,
            lse,
            head,
            dims,
            &mut self.logits_chunk,
            precision,
        )
    }

    fn logits(
        &mut self,
        out: Tensor,
        hidden: Tensor,
        lm_head: Tensor,
        dims: HeadDims,
    ) -> Result<(), CpuError> {
        let skinny = self.precision == Precision::Bf16 && dims.rows <= matmul::SKINNY_ROWS;
        let (([out], [hidden, lm_head], []), lm_head_bf16) =
            self.store
                .views_with_bf16_copy(([out], [hidden, lm_head], []), lm_head, skinny)?;
        logprob::logits(out, hidden, lm_head, dims, self.precision, lm_head_bf16)
    }

    fn choose_tokens(
        &mut self,
        choices: Tensor,
        logits: Tensor,
        uniforms: &[f64],
        sizes: ChoiceSizes,
    ) -> Result<(), CpuError> {
        let ([choices], [logits], []) = self.store.views([choices], [logits], [])?;
        choose::choose_tokens(choices, logits, uniforms, sizes);
        Ok(())
    }

    fn adamw(
        &mut self,
        params: Tensor,
        grads: Tensor,
        m: Tensor,
        v: Tensor,
        scalars: AdamWScalars,
    ) -> Result<(), CpuError> {
        let ([params, m, v], [grads], []) = self.store.views([params, m, v], [grads], [])?;
        adamw::adamw(params, m, v, grads, scalars);
        Ok(())
    }
}
