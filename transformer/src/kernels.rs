//! The [`Kernels`] trait: the complete contract a compute backend implements, forward
//! and backward of every operation of the transformer, plus buffer management.
//!
//! Memory belongs to the backend. The model refers to it through [`Tensor`] handles:
//! a buffer id and a range of `f32` elements in it (backends may store another dtype
//! and convert). Token ids and positions live in separate `u32` buffers ([`Indices`]).
//! A tensor a call writes never overlaps any other tensor of that call (tensors it only
//! reads may overlap each other), unless the method says it works in place.
//!
//! Conventions: matrices are row-major; `[N, D]` means N rows of D elements. N counts
//! tokens of a packed batch: sequences are laid end to end and described by their
//! start offsets `seq_starts` (length S + 1, first 0, last N), so attention never
//! crosses from one sequence into another. "(+=)" marks an output that accumulates.

/// Rows each partial sum of a column reduction covers (the weight gradient of RMSNorm,
/// a bias gradient): every backend sums fixed blocks of this many rows and then adds the
/// blocks in order, so the CPU, CUDA and wgpu results agree bitwise whatever the thread
/// count. The GPU kernels receive it when they are compiled.
pub const COLUMN_SUM_ROWS: usize = 64;

/// Identifies an `f32` buffer owned by a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BufferId(pub u32);

/// Identifies a `u32` buffer owned by a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IndexBufferId(pub u32);

/// `len` consecutive `f32` elements starting at `offset` in buffer `buffer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tensor {
    /// The buffer.
    pub buffer: BufferId,
    /// First element.
    pub offset: usize,
    /// Number of elements.
    pub len: usize,
}

/// `len` consecutive `u32` elements starting at `offset` in buffer `buffer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Indices {
    /// The buffer.
    pub buffer: IndexBufferId,
    /// First element.
    pub offset: usize,
    /// Number of elements.
    pub len: usize,
}

impl Tensor {
    /// The whole of a buffer of `len` elements.
    pub fn whole(buffer: BufferId, len: usize) -> Tensor {
        Tensor {
            buffer,
            offset: 0,
            len,
        }
    }

    /// The sub-range `[start, start + len)` of this tensor (the caller keeps it inside).
    pub fn slice(self, start: usize, len: usize) -> Tensor {
        Tensor {
            buffer: self.buffer,
            offset: self.offset + start,
            len,
        }
    }
}

impl Indices {
    /// The whole of an index buffer of `len` elements.
    pub fn whole(buffer: IndexBufferId, len: usize) -> Indices {
        Indices {
            buffer,
            offset: 0,
            len,
        }
    }
}

/// Shape of `c[m, n] (+)= op(a)[m, k] · op(b)[k, n]`, where `op` transposes when asked:
/// with `trans_a` the buffer `a` holds `[k, m]`, with `trans_b` the buffer `b` holds
/// `[n, k]` (the layout of a linear layer's weight `[out, in]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulShape {
    /// Rows of `c`.
    pub m: usize,
    /// Columns of `c`.
    pub n: usize,
    /// The contracted dimension.
    pub k: usize,
    /// `a` is stored transposed (`[k, m]`).
    pub trans_a: bool,
    /// `b` is stored transposed (`[n, k]`).
    pub trans_b: bool,
    /// Add into `c` instead of overwriting it.
    pub accumulate: bool,
}

/// Head counts and width of grouped-query attention: query head `h` reads key/value
/// head `h / (heads / kv_heads)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionShape {
    /// Query heads (H).
    pub heads: usize,
    /// Key/value heads (KV).
    pub kv_heads: usize,
    /// Width of one head (hd).
    pub head_dim: usize,
}

/// A decoding step's new query, key and value rows as their projections wrote them,
/// with the projections' biases (`None` where the model has none), for
/// [`Kernels::rope_append_kv`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProjectedRows {
    /// q[B, H*hd], rotated in place.
    pub q: Tensor,
    /// k[B, KV*hd], rotated into the key cache (unspecified after).
    pub k: Tensor,
    /// v[B, KV*hd], into the value cache (unspecified after).
    pub v: Tensor,
    /// The biases of q, k and v: one row each (`[H*hd]`, `[KV*hd]`, `[KV*hd]`).
    pub biases: [Option<Tensor>; 3],
}

/// Hyper-parameters of one AdamW step (decoupled weight decay).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWStep {
    /// Learning rate of this step.
    pub learning_rate: f32,
    /// First-moment decay.
    pub beta1: f32,
    /// Second-moment decay.
    pub beta2: f32,
    /// Added to the root of the second moment.
    pub eps: f32,
    /// Decoupled weight decay (multiplies `learning_rate * param`).
    pub weight_decay: f32,
    /// 1-based step number, for bias correction.
    pub step: u32,
}

/// What a backend must provide. Every method returns an error rather than panicking
/// when a handle is unknown or a range falls outside its buffer.
pub trait Kernels {
    /// The backend's failure (out of memory, a bad handle, a device error): an error
    /// that can cross threads and be kept as the source of a caller's error.
    type Error: core::error::Error + Send + Sync + 'static;

    // ---- buffers -------------------------------------------------------------

    /// Allocates a zero-filled `f32` buffer of `len` elements.
    fn alloc(&mut self, len: usize) -> Result<BufferId, Self::Error>;
    /// Allocates a zero-filled `u32` buffer of `len` elements.
    fn alloc_indices(&mut self, len: usize) -> Result<IndexBufferId, Self::Error>;
    /// Allocates a zero-filled buffer of `len` elements for the keys and values of a KV
    /// cache. Such a buffer is only ever written by [`Kernels::copy`] (from an ordinary
    /// buffer or another cache) and [`Kernels::kv_cache_append`], read only by
    /// [`Kernels::attention_decode`], [`Kernels::attention_cached`] and by a copy into
    /// a cache (another, or the same one: sequences that move down when others
    /// finish), and freed; so a backend may hold its elements at a lower precision than
    /// `f32` (the CUDA backend's bf16 mode holds bf16) and refuse it to every other
    /// kernel.
    fn alloc_kv_cache(&mut self, len: usize) -> Result<BufferId, Self::Error>;
    /// Allocates a zero-filled buffer of `len` elements for frozen weights: written from
    /// the host ([`Kernels::write`]), then only read by forward kernels, as a GEMM
    /// operand ([`Kernels::matmul`], [`Kernels::logits`], the head of
    /// [`Kernels::logprob_forward`]), an embedding table ([`Kernels::embedding_forward`]),
    /// an RMSNorm weight ([`Kernels::rmsnorm_forward`]) or a bias ([`Kernels::add_bias`]);
    /// never read back, written by a kernel, or handed to a backward kernel or AdamW. So
    /// a backend may hold its elements at a lower precision than `f32` (the CUDA
    /// backend's bf16 mode holds bf16, as a bf16 model's weights are) and refuse it to
    /// every other call.
    fn alloc_frozen(&mut self, len: usize) -> Result<BufferId, Self::Error>;
    /// Releases a buffer; its handles become invalid.
    fn free(&mut self, buffer: BufferId) -> Result<(), Self::Error>;
    /// Releases an index buffer.
    fn free_indices(&mut self, buffer: IndexBufferId) -> Result<(), Self::Error>;
    /// Copies host data into `dst` (`src.len() == dst.len`).
    fn write(&mut self, dst: Tensor, src: &[f32]) -> Result<(), Self::Error>;
    /// Copies host indices into `dst` (`src.len() == dst.len`).
    fn write_indices(&mut self, dst: Indices, src: &[u32]) -> Result<(), Self::Error>;
    /// Copies `src` back to the host (`dst.len() == src.len`); waits for pending work.
    fn read(&mut self, src: Tensor, dst: &mut [f32]) -> Result<(), Self::Error>;
    /// Sets every element of `dst` to `value`.
    fn fill(&mut self, dst: Tensor, value: f32) -> Result<(), Self::Error>;
    /// `dst = src` (same length, no overlap).
    fn copy(&mut self, dst: Tensor, src: Tensor) -> Result<(), Self::Error>;

    // ---- elementwise ------------------------------------------------------------

    /// `dst += src` (same length).
    fn add_assign(&mut self, dst: Tensor, src: Tensor) -> Result<(), Self::Error>;
    /// `dst *= factor`.
    fn scale(&mut self, dst: Tensor, factor: f32) -> Result<(), Self::Error>;
    /// Sum of squares of `src`, read back to the host (for the global gradient norm).
    fn sum_squares(&mut self, src: Tensor) -> Result<f32, Self::Error>;

    // ---- embedding -----------------------------------------------------------------

    /// `out[N, D] = table[tokens[i], :]`; `table` is `[V, D]`, `tokens` is `[N]`.
    fn embedding_forward(
        &mut self,
        out: Tensor,
        table: Tensor,
        tokens: Indices,
        dim: usize,
    ) -> Result<(), Self::Error>;
    /// dtable[V, D] (+=) scatter of dout[N, D] by `tokens`.
    fn embedding_backward(
        &mut self,
        dtable: Tensor,
        dout: Tensor,
        tokens: Indices,
        dim: usize,
    ) -> Result<(), Self::Error>;

    // ---- RMSNorm ---------------------------------------------------------------------

    /// `out[N, D] = x / rms(x) * weight[D]`; saves `rstd[N] = 1 / sqrt(mean(x^2) + eps)`.
    fn rmsnorm_forward(
        &mut self,
        out: Tensor,
        rstd: Tensor,
        x: Tensor,
        weight: Tensor,
        dim: usize,
        eps: f32,
    ) -> Result<(), Self::Error>;
    /// `dx[N, D]` (+=), `dweight[D]` (+=), from `dout[N, D]` and the forward's x and rstd.
    #[allow(clippy::too_many_arguments)]
    fn rmsnorm_backward(
        &mut self,
        dx: Tensor,
        dweight: Tensor,
        dout: Tensor,
        x: Tensor,
        weight: Tensor,
        rstd: Tensor,
        dim: usize,
    ) -> Result<(), Self::Error>;

    // ---- matmul --------------------------------------------------------------------

    /// `c[m, n] (+)= op(a) · op(b)` as [`MatmulShape`] describes.
    fn matmul(
        &mut self,
        c: Tensor,
        a: Tensor,
        b: Tensor,
        shape: MatmulShape,
    ) -> Result<(), Self::Error>;
    /// Several products of one input, each of `shape`: `c[j] (+)= op(a) · op(b[j])` for
    /// every j, as [`Kernels::matmul`] of each (`c` and `b` of one length; every c
    /// disjoint from the others and from every input): the k and v, or gate and up,
    /// projections of one normed input. The same values as those calls, which a backend
    /// may run as one batched GEMM where the b and c lie equally spaced (the CUDA
    /// backend does).
    fn matmul_shared_input(
        &mut self,
        c: &[Tensor],
        a: Tensor,
        b: &[Tensor],
        shape: MatmulShape,
    ) -> Result<(), Self::Error>;
    /// `out[N, C] += bias[C]` on every row.
    fn add_bias(&mut self, out: Tensor, bias: Tensor) -> Result<(), Self::Error>;
    /// `dbias[C]` (+=) column sums of `dout[N, C]`.
    fn bias_backward(&mut self, dbias: Tensor, dout: Tensor) -> Result<(), Self::Error>;

    // ---- rotary embedding --------------------------------------------------------------

    /// Rotates x[N, heads * hd] in place by the angles of `positions[N]`: in each head,
    /// element i and i + hd/2 are rotated by pos * theta^(-2i/hd) (the Qwen2 layout).
    fn rope_forward(
        &mut self,
        x: Tensor,
        positions: Indices,
        heads: usize,
        head_dim: usize,
        theta: f32,
    ) -> Result<(), Self::Error>;
    /// [`Kernels::add_bias`] of bias[heads * hd] to every row of x[N, heads * hd], then
    /// [`Kernels::rope_forward`] of x: a query or key projection's bias and rotation,
    /// which a backend may run as one pass (the CUDA backend does); the same values as
    /// the two calls.
    fn add_bias_rope_forward(
        &mut self,
        x: Tensor,
        bias: Tensor,
        positions: Indices,
        heads: usize,
        head_dim: usize,
        theta: f32,
    ) -> Result<(), Self::Error>;
    /// The transpose of [`Kernels::rope_forward`] (the inverse rotation), in place on dx.
    fn rope_backward(
        &mut self,
        dx: Tensor,
        positions: Indices,
        heads: usize,
        head_dim: usize,
        theta: f32,
    ) -> Result<(), Self::Error>;

    // ---- attention -----------------------------------------------------------------------

    /// Causal grouped-query attention over a packed batch: q[N, H*hd], k and v
    /// [N, KV*hd] -> out[N, H*hd]; saves lse[N, H], the log-sum-exp of each query's
    /// scaled scores (scale 1/sqrt(hd)). `seq_starts` (host) delimits the sequences.
    #[allow(clippy::too_many_arguments)]
    fn attention_forward(
        &mut self,
        out: Tensor,
        lse: Tensor,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        seq_starts: &[u32],
        shape: AttentionShape,
    ) -> Result<(), Self::Error>;
    /// dq[N, H*hd], dk and dv [N, KV*hd] (all overwritten) from dout and the forward's
    /// q, k, v, out and lse.
    #[allow(clippy::too_many_arguments)]
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
    ) -> Result<(), Self::Error>;
    /// Writes the new keys/values k, v [B, KV*hd] of B sequences into their caches
    /// k_cache, v_cache [B, T, KV*hd] at row `lengths[b]` (host): here `lengths` counts
    /// the rows already filled, and each must be < T.
    #[allow(clippy::too_many_arguments)]
    fn kv_cache_append(
        &mut self,
        k_cache: Tensor,
        v_cache: Tensor,
        k: Tensor,
        v: Tensor,
        lengths: &[u32],
        capacity: usize,
        kv_dim: usize,
    ) -> Result<(), Self::Error>;
    /// A decoding step between its projections and its attention: q and k get their
    /// bias and their rotation by `positions[B]` (as [`Kernels::add_bias_rope_forward`],
    /// or [`Kernels::rope_forward`] without a bias), v its bias ([`Kernels::add_bias`]),
    /// and k and v are written into their caches [B, T, KV*hd] at row `lengths[b]` (the
    /// rows already filled, each < T) as [`Kernels::kv_cache_append`] writes them. The
    /// same values as those calls, which a backend may make one pass (the CUDA backend
    /// does): q holds its rotated rows after, `rows.k` and `rows.v` unspecified values.
    #[allow(clippy::too_many_arguments)]
    fn rope_append_kv(
        &mut self,
        rows: ProjectedRows,
        positions: Indices,
        k_cache: Tensor,
        v_cache: Tensor,
        lengths: &[u32],
        capacity: usize,
        shape: AttentionShape,
        theta: f32,
    ) -> Result<(), Self::Error>;
    /// One decoding step: query q[B, H*hd] of sequence b attends to the first
    /// `lengths[b]` rows of its caches [B, T, KV*hd] -> out[B, H*hd]. Here `lengths`
    /// counts the rows to attend (after [`Kernels::kv_cache_append`], the filled rows
    /// plus one), each in `1..=T`.
    #[allow(clippy::too_many_arguments)]
    fn attention_decode(
        &mut self,
        out: Tensor,
        q: Tensor,
        k_cache: Tensor,
        v_cache: Tensor,
        lengths: &[u32],
        capacity: usize,
        shape: AttentionShape,
    ) -> Result<(), Self::Error>;

    /// Attention of query rows against KV caches: query row r of q[R, H*hd] attends to
    /// the first `attended[r]` rows (each in `1..=T`) of the caches [B, T, KV*hd] of
    /// sequence `sequences[r]` (< B) -> out[R, H*hd]. Several rows may read one
    /// sequence: a prefill continued from a cache, each new token attending to the rows
    /// before it and its own. [`Kernels::attention_decode`] is the case of row b reading
    /// sequence b.
    #[allow(clippy::too_many_arguments)]
    fn attention_cached(
        &mut self,
        out: Tensor,
        q: Tensor,
        k_cache: Tensor,
        v_cache: Tensor,
        sequences: &[u32],
        attended: &[u32],
        capacity: usize,
        shape: AttentionShape,
    ) -> Result<(), Self::Error>;

    // ---- SwiGLU --------------------------------------------------------------------------

    /// out[N, I] = silu(gate[N, I]) * up[N, I].
    fn swiglu_forward(&mut self, out: Tensor, gate: Tensor, up: Tensor) -> Result<(), Self::Error>;
    /// dgate, dup [N, I] (overwritten) from dout[N, I] and the forward's gate and up.
    fn swiglu_backward(
        &mut self,
        dgate: Tensor,
        dup: Tensor,
        dout: Tensor,
        gate: Tensor,
        up: Tensor,
    ) -> Result<(), Self::Error>;

    // ---- output head ------------------------------------------------------------------------

    /// Fused final logits -> log-softmax -> log-prob of the targets: for each row t,
    /// `logits = hidden[t, :] · lm_head[V, D]^T`, `logp[t] = logits[targets[t]] - lse[t]`;
    /// saves `lse[N]`. Backends may never hold more than a chunk of the `[N, V]` logits.
    fn logprob_forward(
        &mut self,
        logp: Tensor,
        lse: Tensor,
        hidden: Tensor,
        lm_head: Tensor,
        targets: Indices,
    ) -> Result<(), Self::Error>;
    /// Backward of `sum_t weights[t] * logp[t]`: dhidden[N, D] (overwritten) and, when
    /// given, dlm_head[V, D] (+=; `None` for a frozen head: its GEMM is skipped), from
    /// the forward's hidden, lse and targets. Rows with weight 0 contribute nothing (the
    /// SFT loss mask, or GRPO's per-token coefficients).
    #[allow(clippy::too_many_arguments)]
    fn logprob_backward(
        &mut self,
        dhidden: Tensor,
        dlm_head: Option<Tensor>,
        weights: Tensor,
        hidden: Tensor,
        lm_head: Tensor,
        targets: Indices,
        lse: Tensor,
    ) -> Result<(), Self::Error>;
    /// Full logits[B, V] = hidden[B, D] · lm_head[V, D]^T with D = `dim`, for sampling.
    fn logits(
        &mut self,
        out: Tensor,
        hidden: Tensor,
        lm_head: Tensor,
        dim: usize,
    ) -> Result<(), Self::Error>;

    /// Picks each row's next token from logits[B, V] and writes choices[B, 2] = (token
    /// id, its log-probability under softmax(logits)), by the rule of
    /// [`sampling::choose`](crate::sampling::choose): the highest logit (the lowest id
    /// among equals) when `temperature` is 0, else a draw from softmax(logits /
    /// temperature) at `uniforms[b]` in [0, 1) (`uniforms` may be empty when greedy). A
    /// row holding a logit that is not finite gets (-1, NaN). Only the choices need to
    /// leave the device, not the logits. A device's sums may differ from the host's f64
    /// ones in the last bits, so a draw within that distance of a boundary may differ.
    fn choose_tokens(
        &mut self,
        choices: Tensor,
        logits: Tensor,
        uniforms: &[f64],
        temperature: f32,
    ) -> Result<(), Self::Error>;

    // ---- optimizer ---------------------------------------------------------------------------

    /// One AdamW step over `params` with gradient `grads` and moments `m`, `v` (all the
    /// same length): m, v updated, then
    /// params -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * params).
    fn adamw(
        &mut self,
        params: Tensor,
        grads: Tensor,
        m: Tensor,
        v: Tensor,
        step: AdamWStep,
    ) -> Result<(), Self::Error>;

    // ---- repeated steps ---------------------------------------------------------

    /// Runs `step`, a sequence of calls the caller repeats with the same shapes and
    /// buffers (a decoding step), and returns its result; the outer `Err` is the
    /// backend's own failure around it. A backend may record one run's launches and
    /// replay the recording when a later run would launch exactly the same (the CUDA
    /// backend's graphs), so `step` may be called more than once per call: it must
    /// change nothing but what its kernel calls write.
    fn repeated_step<E>(
        &mut self,
        step: &mut dyn FnMut(&mut Self) -> Result<(), E>,
    ) -> Result<Result<(), E>, Self::Error>
    where
        Self: Sized;
}
