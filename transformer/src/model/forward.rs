//! The forward pass over a packed batch: embedding, each decoder layer as its attention
//! and MLP blocks, the final norm, and the output head's log-probs. The block functions
//! are shared with KV-cache decoding; each has its backward, in the same order, in
//! `backward.rs`.

use alloc::vec;
use alloc::vec::Vec;

use super::error::{backend, input, same_len, InputError, Result};
use super::{at, attention_shape, mm, Activations, LayerBuffers, Transformer};
use crate::config::ModelConfig;
use crate::kernels::{BufferId, Indices, Kernels, MatmulShape};
use crate::layout::{LayerActs, LayerParams, ParamLayout, Slot};

impl Transformer {
    /// Runs the model over a packed batch and keeps what the backward pass needs.
    ///
    /// `tokens[N]` are the inputs, `targets[N]` the token each position should predict
    /// (any valid id where it does not matter), and `seq_starts` (length S + 1) the
    /// offsets of the S sequences. Returns `log p(targets[t] | tokens of its sequence
    /// up to t)` for every t.
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
    /// row nobody reads. Returns `log p(targets[t])` where `scored[t]`, and 0 elsewhere;
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
        let logp = head_forward(
            k,
            &self.config,
            &self.params_layout,
            self.params,
            acts,
            targets,
        )?;
        if let Some(acts) = self.acts.as_mut() {
            acts.forward_done = true;
        }
        Ok(logp)
    }

    /// Checks a packed batch, writes its token and position ids, and runs embedding,
    /// layers and final norm over it, leaving `final_norm` of the activations filled.
    pub(crate) fn run_batch<K: Kernels>(
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
    let b = LayerBuffers {
        params,
        acts: acts.buffer,
    };
    let first_residual = a.layers.first().map_or(a.residual_out, |l| l.residual_in);
    k.embedding_forward(
        t(first_residual),
        at(params, p.embed),
        acts.tokens(),
        c.hidden_size,
    )
    .map_err(kerr)?;
    for (l, (lp, la)) in p.layers.iter().zip(&a.layers).enumerate() {
        let residual_next = a
            .layers
            .get(l + 1)
            .map_or(a.residual_out, |next| next.residual_in);
        layer_forward(
            k,
            c,
            lp,
            la,
            b,
            acts.positions(),
            &acts.seq_starts,
            Residual::Kept {
                next: residual_next,
            },
        )?;
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

/// Where a layer adds its two blocks' outputs to the residual stream.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Residual {
    /// Each sum in a slot of its own, as the backward pass needs them:
    /// `residual_mid = attn · o^T + residual_in`, then `next = mlp + residual_mid`.
    Kept {
        /// The layer's output slot (the next layer's `residual_in`).
        next: Slot,
    },
    /// In `residual_in` itself, which the o and down projections accumulate into
    /// (inference, where nothing is kept): the two additions take no kernels of
    /// their own, and `residual_mid` is not used.
    InPlace,
}

impl Residual {
    /// The stream's slot after the attention block (`mid`) and the layer's output slot
    /// (`next`): `residual_mid` and `next` when kept, `residual_in` for both in place.
    fn slots(self, la: &LayerActs) -> (Slot, Slot) {
        match self {
            Residual::Kept { next } => (la.residual_mid, next),
            Residual::InPlace => (la.residual_in, la.residual_in),
        }
    }
}

/// A block's output projection joined to the residual stream: `out = x · w^T + stream`
/// into a slot of its own, or, when `out` is `stream` itself, `stream += x · w^T` by the
/// GEMM accumulating. `shape` is the projection's (n rows of `out`).
fn project_into_stream<K: Kernels>(
    k: &mut K,
    b: LayerBuffers,
    (out, stream): (Slot, Slot),
    (x, w): (Slot, Slot),
    shape: MatmulShape,
) -> Result<(), K> {
    let kerr = backend::<K::Error>;
    let in_place = out == stream;
    let shape = MatmulShape {
        accumulate: in_place,
        ..shape
    };
    k.matmul(b.t(out), b.t(x), b.w(w), shape).map_err(kerr)?;
    if in_place {
        return Ok(());
    }
    k.add_assign(b.t(out), b.t(stream)).map_err(kerr)
}

/// One decoder layer over a packed batch of n rows (`positions[n]` of the tokens whose
/// residual stream is in `la.residual_in`): causal attention within each sequence of
/// `seq_starts`, then the MLP, each added to the stream as `residual` says. Leaves the
/// layer's keys and values in `la.k` and `la.v`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn layer_forward<K: Kernels>(
    k: &mut K,
    c: &ModelConfig,
    lp: &LayerParams,
    la: &LayerActs,
    b: LayerBuffers,
    positions: Indices,
    seq_starts: &[u32],
    residual: Residual,
) -> Result<(), K> {
    let n = positions.len;
    attention_inputs(k, c, lp, la, b, positions)?;
    k.attention_forward(
        b.t(la.attn),
        b.t(la.attn_lse),
        b.t(la.q),
        b.t(la.k),
        b.t(la.v),
        seq_starts,
        attention_shape(c),
    )
    .map_err(backend)?;
    attention_output(k, c, lp, la, b, residual, n)?;
    mlp_forward(k, c, lp, la, b, residual, n)
}

/// The attention block's first half over n rows: [`attention_projections`], then the
/// rotation of q and k by `positions[n]` (with their bias, in one call each) and v's
/// bias.
pub(crate) fn attention_inputs<K: Kernels>(
    k: &mut K,
    c: &ModelConfig,
    lp: &LayerParams,
    la: &LayerActs,
    b: LayerBuffers,
    positions: Indices,
) -> Result<(), K> {
    let kerr = backend::<K::Error>;
    attention_projections(k, c, lp, la, b, positions.len)?;
    let shape = attention_shape(c);
    let theta = c.rope_theta;
    for (out, bias, heads) in [
        (la.q, lp.q_bias, shape.heads),
        (la.k, lp.k_bias, shape.kv_heads),
    ] {
        let hd = shape.head_dim;
        match bias {
            Some(bias) => k.add_bias_rope_forward(b.t(out), b.w(bias), positions, heads, hd, theta),
            None => k.rope_forward(b.t(out), positions, heads, hd, theta),
        }
        .map_err(kerr)?;
    }
    match lp.v_bias {
        Some(bias) => k.add_bias(b.t(la.v), b.w(bias)).map_err(kerr),
        None => Ok(()),
    }
}

/// The attention block's projections over n rows: `input_norm = RMSNorm(residual_in)`,
/// then its q, k and v projections (without their bias; k and v in one call, which a
/// backend may make one batched GEMM).
pub(crate) fn attention_projections<K: Kernels>(
    k: &mut K,
    c: &ModelConfig,
    lp: &LayerParams,
    la: &LayerActs,
    b: LayerBuffers,
    n: usize,
) -> Result<(), K> {
    let kerr = backend::<K::Error>;
    let d = c.hidden_size;
    k.rmsnorm_forward(
        b.t(la.input_norm),
        b.t(la.input_rstd),
        b.t(la.residual_in),
        b.w(lp.input_norm),
        d,
        c.rms_norm_eps,
    )
    .map_err(kerr)?;
    // q[n, H*hd] = input_norm[n, D] · Wq[H*hd, D]^T
    k.matmul(
        b.t(la.q),
        b.t(la.input_norm),
        b.w(lp.q_weight),
        mm(n, c.q_dim(), d, false, true, false),
    )
    .map_err(kerr)?;
    // k, v[n, KV*hd] = input_norm[n, D] · Wk, Wv[KV*hd, D]^T
    k.matmul_shared_input(
        &[b.t(la.k), b.t(la.v)],
        b.t(la.input_norm),
        &[b.w(lp.k_weight), b.w(lp.v_weight)],
        mm(n, c.kv_dim(), d, false, true, false),
    )
    .map_err(kerr)
}

/// The attention block's second half over n rows, once `la.attn` holds the attention
/// output: `residual_mid = attn · o^T + residual_in`, or with [`Residual::InPlace`]
/// `residual_in += attn · o^T`.
pub(crate) fn attention_output<K: Kernels>(
    k: &mut K,
    c: &ModelConfig,
    lp: &LayerParams,
    la: &LayerActs,
    b: LayerBuffers,
    residual: Residual,
    n: usize,
) -> Result<(), K> {
    let (mid, _) = residual.slots(la);
    // mid[n, D] = attn[n, H*hd] · o[D, H*hd]^T + residual_in
    let shape = mm(n, c.hidden_size, c.q_dim(), false, true, false);
    project_into_stream(k, b, (mid, la.residual_in), (la.attn, lp.o_weight), shape)
}

/// The MLP block over n rows, from the stream `attention_output` left (`mid`:
/// `residual_mid`, or `residual_in` in place): `post_norm = RMSNorm(mid)`, then
/// `next = down(silu(gate(post_norm)) * up(post_norm)) + mid`, or in place
/// `residual_in += down(...)`.
pub(crate) fn mlp_forward<K: Kernels>(
    k: &mut K,
    c: &ModelConfig,
    lp: &LayerParams,
    la: &LayerActs,
    b: LayerBuffers,
    residual: Residual,
    n: usize,
) -> Result<(), K> {
    let kerr = backend::<K::Error>;
    let (d, i) = (c.hidden_size, c.intermediate_size);
    let (mid, next) = residual.slots(la);
    k.rmsnorm_forward(
        b.t(la.post_norm),
        b.t(la.post_rstd),
        b.t(mid),
        b.w(lp.post_attention_norm),
        d,
        c.rms_norm_eps,
    )
    .map_err(kerr)?;
    // gate, up[n, I] = post_norm[n, D] · W[I, D]^T, in one call
    k.matmul_shared_input(
        &[b.t(la.gate), b.t(la.up)],
        b.t(la.post_norm),
        &[b.w(lp.gate_weight), b.w(lp.up_weight)],
        mm(n, i, d, false, true, false),
    )
    .map_err(kerr)?;
    k.swiglu_forward(b.t(la.swiglu), b.t(la.gate), b.t(la.up))
        .map_err(kerr)?;
    // next[n, D] = swiglu[n, I] · down[D, I]^T + mid
    let shape = mm(n, d, i, false, true, false);
    project_into_stream(k, b, (next, mid), (la.swiglu, lp.down_weight), shape)
}

/// The output head over the batch in `acts` (its `scored_rows` set): log p(target) of
/// each head row, from `final_norm` (or its scored rows, gathered into `head_in`) and
/// the fused `lm_head` log-softmax. Returns `logp[N]`, 0 on unscored rows.
fn head_forward<K: Kernels>(
    k: &mut K,
    c: &ModelConfig,
    p: &ParamLayout,
    params: BufferId,
    acts: &Activations,
    targets: &[u32],
) -> Result<Vec<f32>, K> {
    let (a, d) = (&acts.layout, c.hidden_size);
    let rows = acts.head_rows();
    let mut logp = vec![0.0; a.tokens];
    if rows == 0 {
        return Ok(logp);
    }
    match &acts.scored_rows {
        Some(scored) => {
            let head_targets: Vec<u32> = scored.iter().map(|&row| targets[row as usize]).collect();
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
        at(params, p.lm_head),
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
    Ok(logp)
}
