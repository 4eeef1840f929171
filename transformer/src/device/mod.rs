//! The [`Device`] trait: what a backend writes, its buffers and its kernels, given
//! arguments the contract has already checked. [`Kernels`](crate::Kernels) is
//! implemented once for every `Device` (in `checks`): each call checks its operands'
//! lengths against their shapes, that no tensor it writes overlaps another of its
//! tensors, and the attention and cache shapes, then calls the device with the checked
//! sizes of [`crate::contract`]. A device adds only its own limits (32-bit kernel
//! parameters, binding sizes, the widest head its kernels hold) and what it must read
//! to check (token ids below the vocabulary).
//!
//! Every method means what the [`Kernels`](crate::Kernels) method of the same name
//! means; the docs here say only what has been checked. Code that runs a model calls
//! `Kernels`, never `Device`.

mod checks;
mod slots;

pub use slots::{BufferKind, Slots};

use alloc::vec;
use alloc::vec::Vec;

use crate::contract::{
    AdamWScalars, AttentionSizes, CacheSizes, ChoiceSizes, ContractError, DecodeSizes,
    EmbeddingSizes, HeadDims, RopeSizes, Rows,
};
use crate::kernels::{BufferId, IndexBufferId, Indices, MatmulShape, ProjectedRows, Tensor};
use crate::sampling::choice_numbers;

/// The tensors an attention backward call writes, all `[N, ...]` and overwritten.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionGrads {
    /// [N, H*hd].
    pub dq: Tensor,
    /// [N, KV*hd].
    pub dk: Tensor,
    /// [N, KV*hd].
    pub dv: Tensor,
}

/// What an attention backward call reads: the output gradient and the forward's tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionSaved {
    /// [N, H*hd].
    pub dout: Tensor,
    /// [N, H*hd].
    pub q: Tensor,
    /// [N, KV*hd].
    pub k: Tensor,
    /// [N, KV*hd].
    pub v: Tensor,
    /// [N, H*hd].
    pub out: Tensor,
    /// [N, H].
    pub lse: Tensor,
}

/// The output head's operands: `hidden[N, D]`, `lm_head[V, D]` and `targets[N]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadOperands {
    /// [N, D].
    pub hidden: Tensor,
    /// [V, D].
    pub lm_head: Tensor,
    /// `[N]`.
    pub targets: Indices,
}

/// [`Device::rope_append_kv`] as the calls it stands for: q's and k's bias and rotation,
/// v's bias, then the cache append. The trait's default, and the path a device that
/// overrides it can still take.
pub fn rope_append_kv_by_parts<D: Device + ?Sized>(
    device: &mut D,
    rows: ProjectedRows,
    (positions, theta): (Indices, f32),
    caches: [Tensor; 2],
    lengths: &[u32],
    DecodeSizes { dims, cache }: DecodeSizes,
) -> Result<(), D::Error> {
    let [q_bias, k_bias, v_bias] = rows.biases;
    for (x, bias, heads) in [
        (rows.q, q_bias, dims.heads),
        (rows.k, k_bias, dims.kv_heads),
    ] {
        let sizes = RopeSizes {
            rows: cache.batch,
            heads,
            head_dim: dims.head_dim,
        };
        match bias {
            Some(bias) => device.add_bias_rope_forward(x, bias, positions, sizes, theta)?,
            None => device.rope_forward(x, positions, sizes, theta)?,
        }
    }
    if let Some(bias) = v_bias {
        device.add_bias(rows.v, bias)?;
    }
    device.kv_cache_append(caches, rows.k, rows.v, lengths, cache)
}

/// [`Device::choose_tokens`] on the host: reads the logits back, picks each row's token
/// by [`choose`](crate::sampling::choose) and writes the choices. The trait's default,
/// and the path a device that overrides it can still take.
pub fn choose_tokens_on_host<D: Device + ?Sized>(
    device: &mut D,
    choices: Tensor,
    logits: Tensor,
    uniforms: &[f64],
    sizes: ChoiceSizes,
) -> Result<(), D::Error> {
    let mut rows = vec![0.0; logits.len];
    device.read(logits, &mut rows)?;
    let mut picked = Vec::with_capacity(2 * sizes.rows);
    for (b, row) in rows.chunks_exact(sizes.vocab).enumerate() {
        let unit = uniforms.get(b).copied().unwrap_or(0.0);
        picked.extend(choice_numbers(row, sizes.temperature, unit));
    }
    device.write(choices, &picked)
}

/// A compute device's buffers and kernels. Implement this, not
/// [`Kernels`](crate::Kernels): the contract's checks come with it. Handles and ranges
/// are not checked before a call (the device's store owns them); everything else the
/// docs say is.
pub trait Device {
    /// The device's failure; a contract violation converts into it.
    type Error: From<ContractError> + core::error::Error + Send + Sync + 'static;

    /// Allocates a zero-filled `f32` buffer of `len` elements.
    fn alloc(&mut self, len: usize) -> Result<BufferId, Self::Error>;
    /// Allocates a zero-filled `u32` buffer of `len` elements.
    fn alloc_indices(&mut self, len: usize) -> Result<IndexBufferId, Self::Error>;
    /// [`Kernels::alloc_kv_cache`](crate::Kernels::alloc_kv_cache): by default, an
    /// ordinary `f32` buffer.
    fn alloc_kv_cache(&mut self, len: usize) -> Result<BufferId, Self::Error> {
        self.alloc(len)
    }
    /// [`Kernels::alloc_frozen`](crate::Kernels::alloc_frozen): by default, an ordinary
    /// `f32` buffer.
    fn alloc_frozen(&mut self, len: usize) -> Result<BufferId, Self::Error> {
        self.alloc(len)
    }
    /// Releases a buffer.
    fn free(&mut self, buffer: BufferId) -> Result<(), Self::Error>;
    /// Releases an index buffer.
    fn free_indices(&mut self, buffer: IndexBufferId) -> Result<(), Self::Error>;
    /// Host to device; `src.len() == dst.len` checked.
    fn write(&mut self, dst: Tensor, src: &[f32]) -> Result<(), Self::Error>;
    /// Host to device; `src.len() == dst.len` checked.
    fn write_indices(&mut self, dst: Indices, src: &[u32]) -> Result<(), Self::Error>;
    /// Device to host; `dst.len() == src.len` checked.
    fn read(&mut self, src: Tensor, dst: &mut [f32]) -> Result<(), Self::Error>;
    /// Sets every element of `dst` to `value`.
    fn fill(&mut self, dst: Tensor, value: f32) -> Result<(), Self::Error>;
    /// `dst = src`; same length, disjoint.
    fn copy(&mut self, dst: Tensor, src: Tensor) -> Result<(), Self::Error>;
    /// `dst += src`; same length, disjoint.
    fn add_assign(&mut self, dst: Tensor, src: Tensor) -> Result<(), Self::Error>;
    /// `dst *= factor`.
    fn scale(&mut self, dst: Tensor, factor: f32) -> Result<(), Self::Error>;
    /// Sum of squares of `src`.
    fn sum_squares(&mut self, src: Tensor) -> Result<f32, Self::Error>;

    /// Gather; `out` is `[N, D]`, `table` whole rows, disjoint. Token ids are not checked.
    fn embedding_forward(
        &mut self,
        out: Tensor,
        table: Tensor,
        tokens: Indices,
        sizes: EmbeddingSizes,
    ) -> Result<(), Self::Error>;
    /// Scatter-add; `dout` is `[N, D]`, `dtable` whole rows, disjoint.
    fn embedding_backward(
        &mut self,
        dtable: Tensor,
        dout: Tensor,
        tokens: Indices,
        sizes: EmbeddingSizes,
    ) -> Result<(), Self::Error>;

    /// RMSNorm; `out`, `x` `[N, D]`, `rstd` `[N]`, `weight` `[D]`, writes disjoint.
    fn rmsnorm_forward(
        &mut self,
        out: Tensor,
        rstd: Tensor,
        x: Tensor,
        weight: Tensor,
        rows: Rows,
        eps: f32,
    ) -> Result<(), Self::Error>;
    /// RMSNorm backward; every operand sized as in the forward, writes disjoint.
    #[allow(clippy::too_many_arguments)]
    fn rmsnorm_backward(
        &mut self,
        dx: Tensor,
        dweight: Tensor,
        dout: Tensor,
        x: Tensor,
        weight: Tensor,
        rstd: Tensor,
        rows: Rows,
    ) -> Result<(), Self::Error>;

    /// GEMM; `a`, `b`, `c` hold what `shape` says, `c` disjoint from both.
    fn matmul(
        &mut self,
        c: Tensor,
        a: Tensor,
        b: Tensor,
        shape: MatmulShape,
    ) -> Result<(), Self::Error>;
    /// GEMMs of one input; as many `c` as `b`, each pair and `a` sized as `shape` says,
    /// every `c` disjoint from the others and from the inputs. By default one
    /// [`Device::matmul`] each, in order.
    fn matmul_shared_input(
        &mut self,
        c: &[Tensor],
        a: Tensor,
        b: &[Tensor],
        shape: MatmulShape,
    ) -> Result<(), Self::Error> {
        for (&c, &b) in c.iter().zip(b) {
            self.matmul(c, a, b, shape)?;
        }
        Ok(())
    }
    /// `out[N, C] += bias[C]`; `out` whole rows of `bias.len`, disjoint.
    fn add_bias(&mut self, out: Tensor, bias: Tensor) -> Result<(), Self::Error>;
    /// Column sums; `dout` whole rows of `dbias.len`, disjoint.
    fn bias_backward(&mut self, dbias: Tensor, dout: Tensor, rows: Rows)
        -> Result<(), Self::Error>;

    /// Rotation by +angle; `x` `[N, heads * hd]` with hd even, one position per row.
    fn rope_forward(
        &mut self,
        x: Tensor,
        positions: Indices,
        sizes: RopeSizes,
        theta: f32,
    ) -> Result<(), Self::Error>;
    /// `x += bias` on every row, then rotation by +angle; `x` sized as the forward,
    /// `bias` one row of it (`heads * hd`), disjoint. By default the two calls.
    fn add_bias_rope_forward(
        &mut self,
        x: Tensor,
        bias: Tensor,
        positions: Indices,
        sizes: RopeSizes,
        theta: f32,
    ) -> Result<(), Self::Error> {
        self.add_bias(x, bias)?;
        self.rope_forward(x, positions, sizes, theta)
    }
    /// Rotation by -angle; sized as the forward.
    fn rope_backward(
        &mut self,
        dx: Tensor,
        positions: Indices,
        sizes: RopeSizes,
        theta: f32,
    ) -> Result<(), Self::Error>;

    /// Causal attention; every operand `[N, ...]` as [`AttentionSizes`] says, writes
    /// disjoint, `seq_starts` from 0 and never decreasing.
    #[allow(clippy::too_many_arguments)]
    fn attention_forward(
        &mut self,
        out: Tensor,
        lse: Tensor,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        seq_starts: &[u32],
        sizes: AttentionSizes,
    ) -> Result<(), Self::Error>;
    /// Attention backward; sized as the forward, writes disjoint.
    fn attention_backward(
        &mut self,
        grads: AttentionGrads,
        saved: AttentionSaved,
        seq_starts: &[u32],
        sizes: AttentionSizes,
    ) -> Result<(), Self::Error>;
    /// Cache append; `k`, `v` `[B, KV*hd]`, caches `[B, T, KV*hd]`, every length below T,
    /// writes disjoint.
    fn kv_cache_append(
        &mut self,
        caches: [Tensor; 2],
        k: Tensor,
        v: Tensor,
        lengths: &[u32],
        sizes: CacheSizes,
    ) -> Result<(), Self::Error>;
    /// Decoding's biases, rotations and cache append; `rows.q` `[B, H*hd]`, `rows.k`,
    /// `rows.v` `[B, KV*hd]`, the biases one row of theirs, caches `[B, T, KV*hd]`, one
    /// position per row, every length below T, writes disjoint and disjoint from the
    /// biases. By default the calls it stands for ([`rope_append_kv_by_parts`]).
    fn rope_append_kv(
        &mut self,
        rows: ProjectedRows,
        positions: Indices,
        caches: [Tensor; 2],
        lengths: &[u32],
        sizes: DecodeSizes,
        theta: f32,
    ) -> Result<(), Self::Error> {
        rope_append_kv_by_parts(self, rows, (positions, theta), caches, lengths, sizes)
    }
    /// Decoding attention; `q`, `out` `[B, H*hd]`, caches `[B, T, KV*hd]`, every length
    /// in `1..=T`, `out` disjoint.
    fn attention_decode(
        &mut self,
        out: Tensor,
        q: Tensor,
        caches: [Tensor; 2],
        lengths: &[u32],
        sizes: DecodeSizes,
    ) -> Result<(), Self::Error>;

    /// Attention of query rows against caches; `q`, `out` `[R, H*hd]` with R =
    /// `sequences.len()` = `attended.len()`, caches `[B, T, KV*hd]` (B =
    /// `sizes.cache.batch`), every sequence below B, every attended count in `1..=T`,
    /// `out` disjoint. By default, each run of rows that read adjacent sequences, one
    /// row each, is a [`Device::attention_decode`] over those sequences' caches (a
    /// prefill continued from the cache, laid out position by position, is one run per
    /// position); a backend whose decoding attention serves one query per sequence
    /// keeps that, one that can share a sequence's rows between its queries overrides it.
    fn attention_cached(
        &mut self,
        out: Tensor,
        q: Tensor,
        caches: [Tensor; 2],
        sequences: &[u32],
        attended: &[u32],
        sizes: DecodeSizes,
    ) -> Result<(), Self::Error> {
        let DecodeSizes { dims, cache } = sizes;
        let span = cache.capacity * cache.width;
        let mut first = 0;
        while first < sequences.len() {
            let mut end = first + 1;
            while end < sequences.len() && sequences[end] == sequences[end - 1] + 1 {
                end += 1;
            }
            let (rows, sequence) = (end - first, sequences[first] as usize);
            let [k_cache, v_cache] = caches.map(|c| c.slice(sequence * span, rows * span));
            let run = DecodeSizes {
                dims,
                cache: CacheSizes {
                    batch: rows,
                    ..cache
                },
            };
            self.attention_decode(
                out.slice(first * dims.q_width, rows * dims.q_width),
                q.slice(first * dims.q_width, rows * dims.q_width),
                [k_cache, v_cache],
                &attended[first..end],
                run,
            )?;
            first = end;
        }
        Ok(())
    }

    /// SwiGLU; all the same length, `out` disjoint.
    fn swiglu_forward(&mut self, out: Tensor, gate: Tensor, up: Tensor) -> Result<(), Self::Error>;
    /// SwiGLU backward; all the same length, writes disjoint.
    fn swiglu_backward(
        &mut self,
        dgate: Tensor,
        dup: Tensor,
        dout: Tensor,
        gate: Tensor,
        up: Tensor,
    ) -> Result<(), Self::Error>;

    /// Fused output head; `logp`, `lse` `[N]`, the head's operands as [`HeadDims`] says,
    /// writes disjoint. Target ids are not checked.
    fn logprob_forward(
        &mut self,
        logp: Tensor,
        lse: Tensor,
        head: HeadOperands,
        dims: HeadDims,
    ) -> Result<(), Self::Error>;
    /// Fused output head backward; `weights`, `lse` `[N]`, `dhidden` and `dlm_head` (when
    /// given; `None` skips the head's gradient) the size of `hidden` and `lm_head`,
    /// writes disjoint.
    fn logprob_backward(
        &mut self,
        dhidden: Tensor,
        dlm_head: Option<Tensor>,
        weights: Tensor,
        lse: Tensor,
        head: HeadOperands,
        dims: HeadDims,
    ) -> Result<(), Self::Error>;
    /// Full logits; `out[B, V]`, `hidden[B, D]`, `lm_head[V, D]` as [`HeadDims`] says,
    /// `out` disjoint.
    fn logits(
        &mut self,
        out: Tensor,
        hidden: Tensor,
        lm_head: Tensor,
        dims: HeadDims,
    ) -> Result<(), Self::Error>;

    /// Token choices; `choices[B, 2]` and `logits[B, V]` as [`ChoiceSizes`] says,
    /// disjoint; one uniform number per row in [0, 1) unless greedy. This default reads
    /// the logits back and picks on the host ([`choose`](crate::sampling::choose)); a
    /// device that can pick where the logits are overrides it, so only 2 numbers per row
    /// cross to the host.
    fn choose_tokens(
        &mut self,
        choices: Tensor,
        logits: Tensor,
        uniforms: &[f64],
        sizes: ChoiceSizes,
    ) -> Result<(), Self::Error> {
        choose_tokens_on_host(self, choices, logits, uniforms, sizes)
    }

    /// AdamW with the step's scalars folded; all the same length, `params`, `m`, `v`
    /// disjoint from each other and `grads`.
    fn adamw(
        &mut self,
        params: Tensor,
        grads: Tensor,
        m: Tensor,
        v: Tensor,
        scalars: AdamWScalars,
    ) -> Result<(), Self::Error>;

    /// [`Kernels::repeated_step`](crate::Kernels::repeated_step): by default, runs
    /// `step` once.
    fn repeated_step<E>(
        &mut self,
        step: &mut dyn FnMut(&mut Self) -> Result<(), E>,
    ) -> Result<Result<(), E>, Self::Error>
    where
        Self: Sized,
    {
        Ok(step(self))
    }
}
