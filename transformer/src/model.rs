//! [`Transformer`]: the forward pass, its backward pass and the KV-cache decoding step
//! of the Qwen2-style decoder, written once as calls to any [`Kernels`] backend.
//!
//! One decoder layer, for a packed batch of N tokens (shapes in brackets):
//! ```text
//! x[N,D] -> rmsnorm -> q,k,v projections (+bias) -> rope(q,k) -> causal GQA attention
//!        -> o projection -> + x = h[N,D]
//! h      -> rmsnorm -> gate,up projections -> silu(gate)*up -> down projection -> + h
//! ```
//! then a final RMSNorm and the fused output head that yields log p(target) per token.

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use super::config::{ConfigError, ModelConfig};
use super::kernels::{
    AttentionShape, BufferId, IndexBufferId, Indices, Kernels, MatmulShape, Tensor,
};
use super::layout::{ActLayout, LayerActs, LayerParams, ParamLayout, Slot};

/// Why a model call failed.
#[derive(Debug)]
pub enum ModelError<E> {
    /// The configuration does not describe a model.
    Config(ConfigError),
    /// The inputs do not fit the model (lengths, token ids, sequence offsets).
    Input(InputError),
    /// The backend failed.
    Backend(E),
}

/// A malformed batch or decoding request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InputError {
    /// The batch has no tokens.
    Empty,
    /// Two per-token inputs differ in length.
    LengthMismatch {
        /// What was being compared.
        what: &'static str,
        /// The expected length.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// A token id is not below the vocabulary size.
    TokenOutOfVocab {
        /// Position in the batch.
        index: usize,
        /// The token id.
        token: u32,
    },
    /// `seq_starts` does not start at 0, end at N and increase strictly.
    BadSeqStarts,
    /// No forward pass has run, so there is nothing to differentiate or read.
    NoForward,
    /// The backward pass was given a nonzero weight on a row that the forward pass did
    /// not score ([`Transformer::forward_scored`]).
    WeightOnUnscoredRow {
        /// Position in the batch.
        index: usize,
    },
    /// A KV cache is full.
    CacheFull {
        /// The cache's capacity in tokens per sequence.
        capacity: usize,
    },
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputError::Empty => write!(f, "the batch has no tokens"),
            InputError::LengthMismatch {
                what,
                expected,
                got,
            } => write!(f, "{what}: expected length {expected}, got {got}"),
            InputError::TokenOutOfVocab { index, token } => {
                write!(
                    f,
                    "token {token} at position {index} is outside the vocabulary"
                )
            }
            InputError::BadSeqStarts => write!(
                f,
                "seq_starts must start at 0, end at the token count and increase strictly"
            ),
            InputError::NoForward => write!(f, "no forward pass has run on this batch"),
            InputError::WeightOnUnscoredRow { index } => write!(
                f,
                "the backward weight at position {index} is not 0, but the forward pass did not score that row"
            ),
            InputError::CacheFull { capacity } => {
                write!(f, "the KV cache is full ({capacity} tokens per sequence)")
            }
        }
    }
}

impl<E: fmt::Display> fmt::Display for ModelError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelError::Config(e) => write!(f, "{e}"),
            ModelError::Input(e) => write!(f, "model input: {e}"),
            ModelError::Backend(e) => write!(f, "backend: {e}"),
        }
    }
}

#[cfg(feature = "std")]
impl<E: fmt::Debug + fmt::Display> std::error::Error for ModelError<E> {}

pub(super) type Result<T, K> = core::result::Result<T, ModelError<<K as Kernels>::Error>>;

pub(super) fn backend<E>(e: E) -> ModelError<E> {
    ModelError::Backend(e)
}

pub(super) fn input<E>(e: InputError) -> ModelError<E> {
    ModelError::Input(e)
}

/// `Ok` when `got == expected`, else the [`InputError::LengthMismatch`] naming `what`.
pub(super) fn same_len<E>(
    what: &'static str,
    expected: usize,
    got: usize,
) -> core::result::Result<(), ModelError<E>> {
    if got == expected {
        Ok(())
    } else {
        Err(input(InputError::LengthMismatch {
            what,
            expected,
            got,
        }))
    }
}

/// A tensor of `buffer` at `slot`.
pub(super) fn at(buffer: BufferId, slot: Slot) -> Tensor {
    Tensor {
        buffer,
        offset: slot.offset,
        len: slot.len,
    }
}

/// The activation slab of the current batch, and its token, target and position ids.
pub(super) struct Activations {
    pub(super) layout: ActLayout,
    /// Elements the buffer holds (at least `layout.total`).
    capacity: usize,
    pub(super) buffer: BufferId,
    /// tokens[N], targets[N], positions[N], scored rows[N], one after the other. Targets
    /// are the head's: those of the scored rows, in order, when only some are scored.
    indices: IndexBufferId,
    index_capacity: usize,
    seq_starts: Vec<u32>,
    /// The rows the output head ran on, when not all ([`Transformer::forward_scored`]).
    scored_rows: Option<Vec<u32>>,
    /// A forward pass ran over the current layout.
    forward_done: bool,
}

impl Activations {
    fn tokens(&self) -> Indices {
        self.ids(0)
    }
    fn targets(&self) -> Indices {
        self.ids(1)
    }
    fn positions(&self) -> Indices {
        self.ids(2)
    }
    /// Rows the output head runs on: N, or the number of scored rows.
    fn head_rows(&self) -> usize {
        self.scored_rows
            .as_ref()
            .map_or(self.layout.tokens, |rows| rows.len())
    }
    /// The targets of the head's rows, `[head_rows]`.
    fn head_targets(&self) -> Indices {
        Indices {
            len: self.head_rows(),
            ..self.targets()
        }
    }
    /// The indices of the scored rows, `[head_rows]`.
    fn scored_ids(&self) -> Indices {
        Indices {
            len: self.head_rows(),
            ..self.ids(3)
        }
    }
    /// The head's input `[head_rows, D]`: `final_norm`, or its scored rows gathered.
    fn head_hidden(&self, dim: usize) -> Tensor {
        match self.scored_rows {
            Some(_) => self.t(self.layout.head_in).slice(0, self.head_rows() * dim),
            None => self.t(self.layout.final_norm),
        }
    }
    fn ids(&self, which: usize) -> Indices {
        let n = self.layout.tokens;
        Indices {
            buffer: self.indices,
            offset: which * n,
            len: n,
        }
    }
    pub(super) fn t(&self, slot: Slot) -> Tensor {
        at(self.buffer, slot)
    }
}

/// A Qwen2-style decoder whose parameters and gradients live in a backend.
///
/// The model holds buffer handles, not the backend: every call takes the backend it
/// was created with.
pub struct Transformer {
    pub(super) config: ModelConfig,
    pub(super) params_layout: ParamLayout,
    /// Parameters, laid out by `params_layout`.
    pub(super) params: BufferId,
    /// Gradients, same layout; accumulate until [`Transformer::zero_grads`].
    grads: BufferId,
    pub(super) acts: Option<Activations>,
}

impl Transformer {
    /// Allocates a model of `config` with zeroed parameters and gradients.
    pub fn new<K: Kernels>(k: &mut K, config: ModelConfig) -> Result<Transformer, K> {
        config.validate().map_err(ModelError::Config)?;
        let params_layout = ParamLayout::new(&config);
        let params = k.alloc(params_layout.total).map_err(backend)?;
        let grads = k.alloc(params_layout.total).map_err(backend)?;
        Ok(Transformer {
            config,
            params_layout,
            params,
            grads,
            acts: None,
        })
    }

    /// The model's configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Where each parameter lives in [`Transformer::params`].
    pub fn layout(&self) -> &ParamLayout {
        &self.params_layout
    }

    /// The whole parameter slab.
    pub fn params(&self) -> Tensor {
        Tensor::whole(self.params, self.params_layout.total)
    }

    /// The whole gradient slab (same layout as the parameters).
    pub fn grads(&self) -> Tensor {
        Tensor::whole(self.grads, self.params_layout.total)
    }

    /// Sets every gradient to zero.
    pub fn zero_grads<K: Kernels>(&self, k: &mut K) -> Result<(), K> {
        k.fill(self.grads(), 0.0).map_err(backend)
    }

    /// Releases the model's buffers.
    pub fn free<K: Kernels>(self, k: &mut K) -> Result<(), K> {
        k.free(self.params).map_err(backend)?;
        k.free(self.grads).map_err(backend)?;
        if let Some(acts) = self.acts {
            k.free(acts.buffer).map_err(backend)?;
            k.free_indices(acts.indices).map_err(backend)?;
        }
        Ok(())
    }

    pub(super) fn check_tokens<E>(
        &self,
        tokens: &[u32],
    ) -> core::result::Result<(), ModelError<E>> {
        match tokens
            .iter()
            .position(|&t| t as usize >= self.config.vocab_size)
        {
            Some(index) => Err(input(InputError::TokenOutOfVocab {
                index,
                token: tokens[index],
            })),
            None => Ok(()),
        }
    }

    /// Makes the activation slab fit `n` tokens, growing the buffers only when needed.
    fn prepare_acts<K: Kernels>(&mut self, k: &mut K, n: usize) -> Result<(), K> {
        let layout = ActLayout::new(&self.config, n);
        match &mut self.acts {
            Some(acts) if acts.capacity >= layout.total && acts.index_capacity >= 4 * n => {
                acts.layout = layout;
                acts.forward_done = false;
            }
            slot => {
                if let Some(old) = slot.take() {
                    k.free(old.buffer).map_err(backend)?;
                    k.free_indices(old.indices).map_err(backend)?;
                }
                let buffer = k.alloc(layout.total).map_err(backend)?;
                let indices = k.alloc_indices(4 * n).map_err(backend)?;
                *slot = Some(Activations {
                    capacity: layout.total,
                    layout,
                    buffer,
                    indices,
                    index_capacity: 4 * n,
                    seq_starts: Vec::new(),
                    scored_rows: None,
                    forward_done: false,
                });
            }
        }
        Ok(())
    }

    /// Runs the model over a packed batch and keeps what the backward pass needs.
    ///
    /// `tokens[N]` are the inputs, `targets[N]` the token each position should predict
    /// (any valid id where it does not matter), and `seq_starts` (length S + 1) the
    /// offsets of the S sequences. Returns log p(targets[t] | tokens of its sequence up
    /// to t) for every t.
    pub fn forward<K: Kernels>(
        &mut self,
        k: &mut K,
        tokens: &[u32],
        targets: &[u32],
        seq_starts: &[u32],
    ) -> Result<Vec<f32>, K> {
        self.forward_rows(k, tokens, targets, seq_starts, None)
    }

    /// [`Transformer::forward`] with the output head run only on the rows marked in
    /// `scored[N]`, for a loss that weighs some tokens only (SFT's agent tokens, the
    /// tokens of GRPO's nonzero coefficients). The head is the largest product of a small
    /// model and its log-softmax spans the vocabulary, so this saves the work of every
    /// row nobody reads. Returns log p(targets[t]) where `scored[t]`, and 0 elsewhere;
    /// the next [`Transformer::backward`] must put weight 0 on every unscored row. On the
    /// scored rows the results and the gradients are those of [`Transformer::forward`].
    pub fn forward_scored<K: Kernels>(
        &mut self,
        k: &mut K,
        tokens: &[u32],
        targets: &[u32],
        seq_starts: &[u32],
        scored: &[bool],
    ) -> Result<Vec<f32>, K> {
        self.forward_rows(k, tokens, targets, seq_starts, Some(scored))
    }

    /// The forward pass, with the head on the `scored` rows (all when `None`).
    fn forward_rows<K: Kernels>(
        &mut self,
        k: &mut K,
        tokens: &[u32],
        targets: &[u32],
        seq_starts: &[u32],
        scored: Option<&[bool]>,
    ) -> Result<Vec<f32>, K> {
        same_len("targets", tokens.len(), targets.len())?;
        if let Some(scored) = scored {
            same_len("scored", tokens.len(), scored.len())?;
        }
        self.check_tokens(targets)?;
        self.run_batch(k, tokens, seq_starts)?;
        let scored_rows: Option<Vec<u32>> =
            scored
                .filter(|scored| !scored.iter().all(|&s| s))
                .map(|scored| {
                    (0..)
                        .zip(scored)
                        .filter(|(_, &s)| s)
                        .map(|(row, _)| row)
                        .collect()
                });
        let acts = self.acts.as_mut().ok_or(input(InputError::NoForward))?;
        acts.scored_rows = scored_rows;
        let acts = self.acts.as_ref().ok_or(input(InputError::NoForward))?;
        let (a, d) = (&acts.layout, self.config.hidden_size);
        let rows = acts.head_rows();
        let mut logp = vec![0.0; a.tokens];
        if rows > 0 {
            match &acts.scored_rows {
                Some(scored) => {
                    let head_targets: Vec<u32> =
                        scored.iter().map(|&row| targets[row as usize]).collect();
                    k.write_indices(acts.head_targets(), &head_targets)
                        .map_err(backend)?;
                    k.write_indices(acts.scored_ids(), scored)
                        .map_err(backend)?;
                    // head_in[rows, D] = final_norm[scored[r], :]
                    k.embedding_forward(
                        acts.head_hidden(d),
                        acts.t(a.final_norm),
                        acts.scored_ids(),
                        d,
                    )
                    .map_err(backend)?;
                }
                None => k.write_indices(acts.targets(), targets).map_err(backend)?,
            }
            k.logprob_forward(
                acts.t(a.logp).slice(0, rows),
                acts.t(a.logits_lse).slice(0, rows),
                acts.head_hidden(d),
                at(self.params, self.params_layout.lm_head),
                acts.head_targets(),
            )
            .map_err(backend)?;
            match &acts.scored_rows {
                Some(scored) => {
                    let mut head_logp = vec![0.0; rows];
                    k.read(acts.t(a.logp).slice(0, rows), &mut head_logp)
                        .map_err(backend)?;
                    for (&row, value) in scored.iter().zip(head_logp) {
                        logp[row as usize] = value;
                    }
                }
                None => k.read(acts.t(a.logp), &mut logp).map_err(backend)?,
            }
        }
        if let Some(acts) = self.acts.as_mut() {
            acts.forward_done = true;
        }
        Ok(logp)
    }

    /// Checks a packed batch, writes its token and position ids, and runs embedding,
    /// layers and final norm over it, leaving `final_norm` of the activations filled.
    pub(super) fn run_batch<K: Kernels>(
        &mut self,
        k: &mut K,
        tokens: &[u32],
        seq_starts: &[u32],
    ) -> Result<(), K> {
        let n = tokens.len();
        if n == 0 {
            return Err(input(InputError::Empty));
        }
        let starts_ok = seq_starts.first() == Some(&0)
            && seq_starts.last().map(|&s| s as usize) == Some(n)
            && seq_starts.windows(2).all(|w| w[0] < w[1]);
        if !starts_ok {
            return Err(input(InputError::BadSeqStarts));
        }
        self.check_tokens(tokens)?;
        let positions: Vec<u32> = seq_starts.windows(2).flat_map(|w| 0..w[1] - w[0]).collect();
        self.prepare_acts(k, n)?;
        let acts = self.acts.as_mut().ok_or(input(InputError::NoForward))?;
        acts.seq_starts.clear();
        acts.seq_starts.extend_from_slice(seq_starts);
        k.write_indices(acts.tokens(), tokens).map_err(backend)?;
        k.write_indices(acts.positions(), &positions)
            .map_err(backend)?;
        let acts = self.acts.as_ref().ok_or(input(InputError::NoForward))?;
        run_layers(k, &self.config, &self.params_layout, self.params, acts)
    }

    /// Adds to the gradients the gradient of `sum_t weights[t] * logp[t]` for the batch
    /// of the last [`Transformer::forward`]. Minimising a loss means passing
    /// `weights = d loss / d logp` (for SFT: minus the loss mask over the token count).
    pub fn backward<K: Kernels>(&mut self, k: &mut K, weights: &[f32]) -> Result<(), K> {
        let acts = match &self.acts {
            Some(acts) if acts.forward_done => acts,
            _ => return Err(input(InputError::NoForward)),
        };
        let a = &acts.layout;
        let n = a.tokens;
        same_len("weights", n, weights.len())?;
        let (c, p) = (&self.config, &self.params_layout);
        let (d, i) = (c.hidden_size, c.intermediate_size);
        let (qd, kvd) = (c.q_dim(), c.kv_dim());
        let attn_shape = attention_shape(c);
        let w = |slot: Slot| at(self.params, slot);
        let g = |slot: Slot| at(self.grads, slot);
        let t = |slot: Slot| acts.t(slot);
        let kerr = backend::<K::Error>;

        // Output head: d final_norm, and the lm_head gradient.
        let rows = acts.head_rows();
        let head_weights = match &acts.scored_rows {
            Some(scored) => {
                let mut is_scored = vec![false; n];
                for &row in scored {
                    is_scored[row as usize] = true;
                }
                if let Some(index) = (0..n).find(|&t| !is_scored[t] && weights[t] != 0.0) {
                    return Err(input(InputError::WeightOnUnscoredRow { index }));
                }
                scored.iter().map(|&row| weights[row as usize]).collect()
            }
            None => weights.to_vec(),
        };
        k.write(t(a.loss_weights).slice(0, rows), &head_weights)
            .map_err(kerr)?;
        // d_head[rows, D]: d final_norm itself, or the scored rows' share of it.
        let d_head = match acts.scored_rows {
            None => t(a.d_norm),
            Some(_) => {
                k.fill(t(a.d_norm), 0.0).map_err(kerr)?;
                t(a.d_head_in).slice(0, rows * d)
            }
        };
        if rows > 0 {
            k.logprob_backward(
                d_head,
                g(p.lm_head),
                t(a.loss_weights).slice(0, rows),
                acts.head_hidden(d),
                w(p.lm_head),
                acts.head_targets(),
                t(a.logits_lse).slice(0, rows),
            )
            .map_err(kerr)?;
            if acts.scored_rows.is_some() {
                // d_norm[scored[r], :] = d_head[r, :] (the other rows stay 0)
                k.embedding_backward(t(a.d_norm), d_head, acts.scored_ids(), d)
                    .map_err(kerr)?;
            }
        }
        k.fill(t(a.d_residual), 0.0).map_err(kerr)?;
        k.rmsnorm_backward(
            t(a.d_residual),
            g(p.final_norm),
            t(a.d_norm),
            t(a.residual_out),
            w(p.final_norm),
            t(a.final_rstd),
            d,
        )
        .map_err(kerr)?;

        for (lp, la) in p.layers.iter().zip(&a.layers).rev() {
            // d_residual holds d(layer output); it passes through both skips unchanged.
            // MLP block.
            let down = Linear {
                weight: w(lp.down_weight),
                d_weight: g(lp.down_weight),
                rows: n,
                in_dim: i,
                out_dim: d,
            };
            // d_swiglu[N, I] = d_out[N, D] · down[D, I]
            linear_backward(k, down, t(a.d_swiglu), t(a.d_residual), t(la.swiglu), false)?;
            k.swiglu_backward(t(a.d_gate), t(a.d_up), t(a.d_swiglu), t(la.gate), t(la.up))
                .map_err(kerr)?;
            // d_norm[N, D] = d_gate · gate[I, D] + d_up · up[I, D]
            for (d_proj, weight, accumulate) in [
                (a.d_gate, lp.gate_weight, false),
                (a.d_up, lp.up_weight, true),
            ] {
                let proj = Linear {
                    weight: w(weight),
                    d_weight: g(weight),
                    rows: n,
                    in_dim: d,
                    out_dim: i,
                };
                linear_backward(k, proj, t(a.d_norm), t(d_proj), t(la.post_norm), accumulate)?;
            }
            k.rmsnorm_backward(
                t(a.d_residual),
                g(lp.post_attention_norm),
                t(a.d_norm),
                t(la.residual_mid),
                w(lp.post_attention_norm),
                t(la.post_rstd),
                d,
            )
            .map_err(kerr)?;

            // Attention block.
            let o_proj = Linear {
                weight: w(lp.o_weight),
                d_weight: g(lp.o_weight),
                rows: n,
                in_dim: qd,
                out_dim: d,
            };
            // d_attn[N, H*hd] = d_out[N, D] · o[D, H*hd]
            linear_backward(k, o_proj, t(a.d_attn), t(a.d_residual), t(la.attn), false)?;
            k.attention_backward(
                t(a.d_q),
                t(a.d_k),
                t(a.d_v),
                t(a.d_attn),
                t(la.q),
                t(la.k),
                t(la.v),
                t(la.attn),
                t(la.attn_lse),
                &acts.seq_starts,
                attn_shape,
            )
            .map_err(kerr)?;
            k.rope_backward(
                t(a.d_q),
                acts.positions(),
                attn_shape.heads,
                attn_shape.head_dim,
                c.rope_theta,
            )
            .map_err(kerr)?;
            k.rope_backward(
                t(a.d_k),
                acts.positions(),
                attn_shape.kv_heads,
                attn_shape.head_dim,
                c.rope_theta,
            )
            .map_err(kerr)?;
            let projections = [
                (a.d_q, lp.q_weight, lp.q_bias, qd),
                (a.d_k, lp.k_weight, lp.k_bias, kvd),
                (a.d_v, lp.v_weight, lp.v_bias, kvd),
            ];
            for (j, (d_proj, weight, bias, width)) in projections.into_iter().enumerate() {
                if let Some(bias) = bias {
                    k.bias_backward(g(bias), t(d_proj)).map_err(kerr)?;
                }
                // d_norm[N, D] = sum over q, k, v of d_proj[N, width] · W[width, D]
                let proj = Linear {
                    weight: w(weight),
                    d_weight: g(weight),
                    rows: n,
                    in_dim: d,
                    out_dim: width,
                };
                linear_backward(k, proj, t(a.d_norm), t(d_proj), t(la.input_norm), j > 0)?;
            }
            k.rmsnorm_backward(
                t(a.d_residual),
                g(lp.input_norm),
                t(a.d_norm),
                t(la.residual_in),
                w(lp.input_norm),
                t(la.input_rstd),
                d,
            )
            .map_err(kerr)?;
        }
        k.embedding_backward(g(p.embed), t(a.d_residual), acts.tokens(), d)
            .map_err(kerr)
    }
}

/// A bias-free linear layer `y[rows, out_dim] = x[rows, in_dim] · weight[out_dim,
/// in_dim]^T`, with the gradient slot of its weight.
struct Linear {
    weight: Tensor,
    d_weight: Tensor,
    rows: usize,
    in_dim: usize,
    out_dim: usize,
}

/// Backward of a [`Linear`] layer: `dx[rows, in] (+)= dy[rows, out] · weight` (added
/// into `dx` when `accumulate_dx`, for inputs that feed several layers) and
/// `d_weight[out, in] += dy^T · x`.
fn linear_backward<K: Kernels>(
    k: &mut K,
    layer: Linear,
    dx: Tensor,
    dy: Tensor,
    x: Tensor,
    accumulate_dx: bool,
) -> Result<(), K> {
    let Linear {
        weight,
        d_weight,
        rows,
        in_dim,
        out_dim,
    } = layer;
    k.matmul(
        dx,
        dy,
        weight,
        mm(rows, in_dim, out_dim, false, false, accumulate_dx),
    )
    .map_err(backend)?;
    k.matmul(
        d_weight,
        dy,
        x,
        mm(out_dim, in_dim, rows, true, false, true),
    )
    .map_err(backend)
}

/// The shape of one matmul call (see [`MatmulShape`]).
pub(super) fn mm(
    m: usize,
    n: usize,
    k: usize,
    trans_a: bool,
    trans_b: bool,
    accumulate: bool,
) -> MatmulShape {
    MatmulShape {
        m,
        n,
        k,
        trans_a,
        trans_b,
        accumulate,
    }
}

/// The attention shape of `config`.
pub(crate) fn attention_shape(c: &ModelConfig) -> AttentionShape {
    AttentionShape {
        heads: c.num_attention_heads,
        kv_heads: c.num_key_value_heads,
        head_dim: c.head_dim(),
    }
}

/// The first half of a decoder layer over n rows: RMSNorm of `la.residual_in`, the
/// q, k, v projections with their bias, and the rotation of q and k by `positions`.
pub(crate) fn attention_inputs<K: Kernels>(
    k: &mut K,
    c: &ModelConfig,
    lp: &LayerParams,
    params: BufferId,
    la: &LayerActs,
    acts: BufferId,
    positions: Indices,
) -> Result<(), K> {
    let n = positions.len;
    let w = |slot: Slot| at(params, slot);
    let t = |slot: Slot| at(acts, slot);
    let kerr = backend::<K::Error>;
    let shape = attention_shape(c);
    let d = c.hidden_size;
    k.rmsnorm_forward(
        t(la.input_norm),
        t(la.input_rstd),
        t(la.residual_in),
        w(lp.input_norm),
        d,
        c.rms_norm_eps,
    )
    .map_err(kerr)?;
    let projections = [
        (la.q, lp.q_weight, lp.q_bias, c.q_dim()),
        (la.k, lp.k_weight, lp.k_bias, c.kv_dim()),
        (la.v, lp.v_weight, lp.v_bias, c.kv_dim()),
    ];
    for (out, weight, bias, width) in projections {
        // out[n, width] = input_norm[n, D] · W[width, D]^T (+ bias)
        k.matmul(
            t(out),
            t(la.input_norm),
            w(weight),
            mm(n, width, d, false, true, false),
        )
        .map_err(kerr)?;
        if let Some(bias) = bias {
            k.add_bias(t(out), w(bias)).map_err(kerr)?;
        }
    }
    k.rope_forward(
        t(la.q),
        positions,
        shape.heads,
        shape.head_dim,
        c.rope_theta,
    )
    .map_err(kerr)?;
    k.rope_forward(
        t(la.k),
        positions,
        shape.kv_heads,
        shape.head_dim,
        c.rope_theta,
    )
    .map_err(kerr)
}

/// The second half of a decoder layer over n rows, once `la.attn` holds the attention
/// output: the output projection and its residual, then the MLP block and its residual
/// into `residual_next`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_output_and_mlp<K: Kernels>(
    k: &mut K,
    c: &ModelConfig,
    lp: &LayerParams,
    params: BufferId,
    la: &LayerActs,
    acts: BufferId,
    residual_next: Slot,
    n: usize,
) -> Result<(), K> {
    let w = |slot: Slot| at(params, slot);
    let t = |slot: Slot| at(acts, slot);
    let kerr = backend::<K::Error>;
    let (d, i) = (c.hidden_size, c.intermediate_size);
    // residual_mid[n, D] = attn[n, H*hd] · o[D, H*hd]^T + residual_in
    k.matmul(
        t(la.residual_mid),
        t(la.attn),
        w(lp.o_weight),
        mm(n, d, c.q_dim(), false, true, false),
    )
    .map_err(kerr)?;
    k.add_assign(t(la.residual_mid), t(la.residual_in))
        .map_err(kerr)?;
    k.rmsnorm_forward(
        t(la.post_norm),
        t(la.post_rstd),
        t(la.residual_mid),
        w(lp.post_attention_norm),
        d,
        c.rms_norm_eps,
    )
    .map_err(kerr)?;
    // gate, up[n, I] = post_norm[n, D] · W[I, D]^T
    k.matmul(
        t(la.gate),
        t(la.post_norm),
        w(lp.gate_weight),
        mm(n, i, d, false, true, false),
    )
    .map_err(kerr)?;
    k.matmul(
        t(la.up),
        t(la.post_norm),
        w(lp.up_weight),
        mm(n, i, d, false, true, false),
    )
    .map_err(kerr)?;
    k.swiglu_forward(t(la.swiglu), t(la.gate), t(la.up))
        .map_err(kerr)?;
    // residual_next[n, D] = swiglu[n, I] · down[D, I]^T + residual_mid
    k.matmul(
        t(residual_next),
        t(la.swiglu),
        w(lp.down_weight),
        mm(n, d, i, false, true, false),
    )
    .map_err(kerr)?;
    k.add_assign(t(residual_next), t(la.residual_mid))
        .map_err(kerr)
}

/// Embedding, every decoder layer and the final norm over the batch in `acts`, whose
/// token and position ids are already written. Leaves `final_norm` ready for the head.
fn run_layers<K: Kernels>(
    k: &mut K,
    c: &ModelConfig,
    p: &ParamLayout,
    params: BufferId,
    acts: &Activations,
) -> Result<(), K> {
    let a = &acts.layout;
    let kerr = backend::<K::Error>;
    let t = |slot: Slot| acts.t(slot);
    let first_residual = a.layers.first().map_or(a.residual_out, |l| l.residual_in);
    k.embedding_forward(
        t(first_residual),
        at(params, p.embed),
        acts.tokens(),
        c.hidden_size,
    )
    .map_err(kerr)?;
    for (l, (lp, la)) in p.layers.iter().zip(&a.layers).enumerate() {
        attention_inputs(k, c, lp, params, la, acts.buffer, acts.positions())?;
        k.attention_forward(
            t(la.attn),
            t(la.attn_lse),
            t(la.q),
            t(la.k),
            t(la.v),
            &acts.seq_starts,
            attention_shape(c),
        )
        .map_err(kerr)?;
        let residual_next = a
            .layers
            .get(l + 1)
            .map_or(a.residual_out, |next| next.residual_in);
        attention_output_and_mlp(k, c, lp, params, la, acts.buffer, residual_next, a.tokens)?;
    }
    k.rmsnorm_forward(
        t(a.final_norm),
        t(a.final_rstd),
        t(a.residual_out),
        at(params, p.final_norm),
        c.hidden_size,
        c.rms_norm_eps,
    )
    .map_err(kerr)
}
