//! The backward pass: the gradient of `sum_t weights[t] * logp[t]` through the output
//! head, the final norm, each decoder layer's MLP and attention blocks in reverse, and
//! the embedding. Each block function is the backward of the forward function of the
//! same name in `forward.rs`; they reuse the forward's saved activations and write
//! their input gradients into the scratch slots of the activation layout. With LoRA
//! adapters on (`crate::lora`), an adapted projection's weight gradient becomes its
//! adapters' and every other matrix and bias is frozen: no gradient is computed for it.

use alloc::vec;
use alloc::vec::Vec;

use super::error::{backend, input, same_len, InputError, ModelError, Result};
use super::{at, attention_shape, mm, Activations, Transformer};
use crate::config::ModelConfig;
use crate::kernels::{BufferId, Kernels, Tensor};
use crate::layout::{LayerActs, LayerParams, Slot};
use crate::lora::{Adapter, Lora};

impl Transformer {
    /// Adds to the gradients the gradient of `sum_t weights[t] * logp[t]` for the batch
    /// of the last [`Transformer::forward`]. Minimising a loss means passing
    /// `weights = d loss / d logp` (for SFT: minus the loss mask over the token count).
    pub fn backward<K: Kernels>(&mut self, k: &mut K, weights: &[f32]) -> Result<(), K> {
        let rows = match &self.acts {
            Some(acts) if acts.forward_done => acts.layout.tokens,
            _ => return Err(input(InputError::NoForward)),
        };
        self.prepare_lora_rows(k, rows)?;
        self.hold_grads(k)?;
        let acts = match &self.acts {
            Some(acts) => acts,
            None => return Err(input(InputError::NoForward)),
        };
        let a = &acts.layout;
        same_len("weights", a.tokens, weights.len())?;
        let (c, p) = (&self.config, &self.params_layout);
        let x = Backward {
            c,
            params: self.params,
            grads: self.grads,
            acts,
            lora: self.lora.as_ref(),
        };
        let kerr = backend::<K::Error>;
        if let Some(lora) = x.lora {
            // The sink takes the frozen norms' gradients: zeroed, so it never grows.
            let sink = Tensor::whole(lora.norm_sink, c.hidden_size);
            k.fill(sink, 0.0).map_err(kerr)?;
        }

        // d_norm[N, D] = d final_norm, from the head.
        head_backward(k, &x, p.lm_head, weights)?;
        // d_residual[N, D] = d residual_out, through the final norm.
        k.fill(x.t(a.d_residual), 0.0).map_err(kerr)?;
        k.rmsnorm_backward(
            x.t(a.d_residual),
            x.norm_grad(p.final_norm),
            x.t(a.d_norm),
            x.t(a.residual_out),
            x.w(p.final_norm),
            x.t(a.final_rstd),
            c.hidden_size,
        )
        .map_err(kerr)?;
        for (lp, la) in p.layers.iter().zip(&a.layers).rev() {
            // d_residual holds d(layer output); it passes through both skips unchanged.
            mlp_backward(k, &x, lp, la)?;
            attention_output_backward(k, &x, lp, la)?;
            k.attention_backward(
                x.t(a.d_q),
                x.t(a.d_k),
                x.t(a.d_v),
                x.t(a.d_attn),
                x.t(la.q),
                x.t(la.k),
                x.t(la.v),
                x.t(la.attn),
                x.t(la.attn_lse),
                &acts.seq_starts,
                attention_shape(c),
            )
            .map_err(kerr)?;
            attention_inputs_backward(k, &x, lp, la)?;
        }
        if x.lora.is_some() {
            return Ok(());
        }
        k.embedding_backward(
            x.g(p.embed),
            x.t(a.d_residual),
            acts.tokens(),
            c.hidden_size,
        )
        .map_err(kerr)
    }
}

/// What every block's backward reads and writes: the parameters, their gradients, and
/// the activation slab of the forward pass with the backward's scratch slots.
struct Backward<'a> {
    c: &'a ModelConfig,
    params: BufferId,
    grads: BufferId,
    acts: &'a Activations,
    /// The adapters, when the model trains through them.
    lora: Option<&'a Lora>,
}

impl Backward<'_> {
    /// The parameter at `slot`.
    fn w(&self, slot: Slot) -> Tensor {
        at(self.params, slot)
    }
    /// The gradient of the parameter at `slot`.
    fn g(&self, slot: Slot) -> Tensor {
        at(self.grads, slot)
    }
    /// The activation (or scratch) at `slot`.
    fn t(&self, slot: Slot) -> Tensor {
        self.acts.t(slot)
    }
    /// Tokens in the batch.
    fn rows(&self) -> usize {
        self.acts.layout.tokens
    }
    /// Where the gradient of the RMSNorm weight at `slot` goes: its gradient slot, or,
    /// when adapters freeze it, the adapters' sink (written, never read).
    fn norm_grad(&self, slot: Slot) -> Tensor {
        match self.lora {
            Some(lora) => Tensor::whole(lora.norm_sink, slot.len),
            None => self.g(slot),
        }
    }
    /// The gradient of the matrix at `slot`: none when adapters freeze it.
    fn matrix_grad(&self, slot: Slot) -> Option<Tensor> {
        self.lora.is_none().then(|| self.g(slot))
    }
    /// The linear layer whose weight is at `weight` (`[out_dim, in_dim]`), over this
    /// pass's rows, with what its weight's gradient goes to.
    fn linear(&self, weight: Slot, in_dim: usize, out_dim: usize) -> Linear<'_> {
        let grad = match self.lora {
            None => WeightGrad::Full(self.g(weight)),
            Some(lora) => match lora.layout.of_weight(weight) {
                Some(adapter) => WeightGrad::Adapter(lora, adapter),
                None => WeightGrad::Frozen,
            },
        };
        Linear {
            weight: self.w(weight),
            grad,
            rows: self.rows(),
            in_dim,
            out_dim,
        }
    }
}

/// Backward of the output head: `d_norm[N, D]` (the gradient of `final_norm`; 0 on
/// unscored rows) and `lm_head`'s gradient, for the loss weights `weights[N]`. A
/// nonzero weight on a row the forward pass did not score is an error.
fn head_backward<K: Kernels>(
    k: &mut K,
    x: &Backward<'_>,
    lm_head: Slot,
    weights: &[f32],
) -> Result<(), K> {
    let (acts, a) = (x.acts, &x.acts.layout);
    let (n, d) = (a.tokens, x.c.hidden_size);
    let kerr = backend::<K::Error>;
    let rows = acts.head_rows();
    let head_weights: Vec<f32> = match &acts.scored_rows {
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
    k.write(x.t(a.loss_weights).slice(0, rows), &head_weights)
        .map_err(kerr)?;
    // d_head[rows, D]: d final_norm itself, or the scored rows' share of it.
    let d_head = match acts.scored_rows {
        None => x.t(a.d_norm),
        Some(_) => {
            k.fill(x.t(a.d_norm), 0.0).map_err(kerr)?;
            x.t(a.d_head_in).slice(0, rows * d)
        }
    };
    if rows == 0 {
        return Ok(());
    }
    k.logprob_backward(
        d_head,
        x.matrix_grad(lm_head),
        x.t(a.loss_weights).slice(0, rows),
        acts.head_hidden(d),
        x.w(lm_head),
        acts.head_targets(),
        x.t(a.logits_lse).slice(0, rows),
    )
    .map_err(kerr)?;
    if acts.scored_rows.is_some() {
        // d_norm[scored[r], :] = d_head[r, :] (the other rows stay 0)
        k.embedding_backward(x.t(a.d_norm), d_head, acts.scored_ids(), d)
            .map_err(kerr)?;
    }
    Ok(())
}

/// Backward of [`mlp_forward`](super::forward::mlp_forward): from `d_residual[N, D]`
/// (the block's output gradient), the gradients of the down, gate, up and norm weights,
/// and `d_residual += d residual_mid` through the norm (the skip adds nothing).
fn mlp_backward<K: Kernels>(
    k: &mut K,
    x: &Backward<'_>,
    lp: &LayerParams,
    la: &LayerActs,
) -> Result<(), K> {
    let a = &x.acts.layout;
    let (d, i) = (x.c.hidden_size, x.c.intermediate_size);
    let kerr = backend::<K::Error>;
    let down = x.linear(lp.down_weight, i, d);
    // d_swiglu[N, I] = d_out[N, D] · down[D, I]
    linear_backward(
        k,
        down,
        x.t(a.d_swiglu),
        x.t(a.d_residual),
        x.t(la.swiglu),
        false,
    )?;
    k.swiglu_backward(
        x.t(a.d_gate),
        x.t(a.d_up),
        x.t(a.d_swiglu),
        x.t(la.gate),
        x.t(la.up),
    )
    .map_err(kerr)?;
    // d_norm[N, D] = d_gate · gate[I, D] + d_up · up[I, D]
    for (d_proj, weight, accumulate) in [
        (a.d_gate, lp.gate_weight, false),
        (a.d_up, lp.up_weight, true),
    ] {
        let proj = x.linear(weight, d, i);
        linear_backward(
            k,
            proj,
            x.t(a.d_norm),
            x.t(d_proj),
            x.t(la.post_norm),
            accumulate,
        )?;
    }
    k.rmsnorm_backward(
        x.t(a.d_residual),
        x.norm_grad(lp.post_attention_norm),
        x.t(a.d_norm),
        x.t(la.residual_mid),
        x.w(lp.post_attention_norm),
        x.t(la.post_rstd),
        d,
    )
    .map_err(kerr)
}

/// Backward of [`attention_output`](super::forward::attention_output): `d_attn[N, H*hd]`
/// from `d_residual` (the gradient of `residual_mid`) and the output projection's
/// gradient; the skip passes `d_residual` on unchanged.
fn attention_output_backward<K: Kernels>(
    k: &mut K,
    x: &Backward<'_>,
    lp: &LayerParams,
    la: &LayerActs,
) -> Result<(), K> {
    let a = &x.acts.layout;
    let o_proj = x.linear(lp.o_weight, x.c.q_dim(), x.c.hidden_size);
    // d_attn[N, H*hd] = d_out[N, D] · o[D, H*hd]
    linear_backward(
        k,
        o_proj,
        x.t(a.d_attn),
        x.t(a.d_residual),
        x.t(la.attn),
        false,
    )
}

/// Backward of [`attention_inputs`](super::forward::attention_inputs): from `d_q`,
/// `d_k`, `d_v` (the attention's input gradients, rotated), the rotation undone, the
/// q, k, v weight and bias gradients, and `d_residual += d residual_in` through the
/// input norm.
fn attention_inputs_backward<K: Kernels>(
    k: &mut K,
    x: &Backward<'_>,
    lp: &LayerParams,
    la: &LayerActs,
) -> Result<(), K> {
    let (c, a) = (x.c, &x.acts.layout);
    let d = c.hidden_size;
    let shape = attention_shape(c);
    let kerr = backend::<K::Error>;
    for (d_proj, heads) in [(a.d_q, shape.heads), (a.d_k, shape.kv_heads)] {
        k.rope_backward(
            x.t(d_proj),
            x.acts.positions(),
            heads,
            shape.head_dim,
            c.rope_theta,
        )
        .map_err(kerr)?;
    }
    let projections = [
        (a.d_q, lp.q_weight, lp.q_bias, c.q_dim()),
        (a.d_k, lp.k_weight, lp.k_bias, c.kv_dim()),
        (a.d_v, lp.v_weight, lp.v_bias, c.kv_dim()),
    ];
    for (j, (d_proj, weight, bias, width)) in projections.into_iter().enumerate() {
        if let Some(bias) = bias.filter(|_| x.lora.is_none()) {
            k.bias_backward(x.g(bias), x.t(d_proj)).map_err(kerr)?;
        }
        // d_norm[N, D] = sum over q, k, v of d_proj[N, width] · W[width, D]
        let proj = x.linear(weight, d, width);
        linear_backward(
            k,
            proj,
            x.t(a.d_norm),
            x.t(d_proj),
            x.t(la.input_norm),
            j > 0,
        )?;
    }
    k.rmsnorm_backward(
        x.t(a.d_residual),
        x.norm_grad(lp.input_norm),
        x.t(a.d_norm),
        x.t(la.residual_in),
        x.w(lp.input_norm),
        x.t(la.input_rstd),
        d,
    )
    .map_err(kerr)
}

/// Where the gradient of a linear layer's weight goes.
enum WeightGrad<'a> {
    /// Its gradient slot.
    Full(Tensor),
    /// Nowhere: adapters freeze it.
    Frozen,
    /// Its adapter's `A` and `B`.
    Adapter(&'a Lora, &'a Adapter),
}

/// A bias-free linear layer `y[rows, out_dim] = x[rows, in_dim] · weight[out_dim,
/// in_dim]^T`, with what its weight's gradient goes to.
struct Linear<'a> {
    weight: Tensor,
    grad: WeightGrad<'a>,
    rows: usize,
    in_dim: usize,
    out_dim: usize,
}

/// Backward of a [`Linear`] layer: `dx[rows, in] (+)= dy[rows, out] · weight` (added
/// into `dx` when `accumulate_dx`, for inputs that feed several layers) and the weight's
/// gradient: `d_weight[out, in] += dy^T · x`, or, through an adapter of the merged weight
/// `W0 + s·B·A`, `dB[out, r] += s · dy^T · (x·A^T)` and `dA[r, in] += s · (dy·B)^T · x`.
fn linear_backward<K: Kernels>(
    k: &mut K,
    layer: Linear<'_>,
    dx: Tensor,
    dy: Tensor,
    x: Tensor,
    accumulate_dx: bool,
) -> Result<(), K> {
    let Linear {
        weight,
        grad,
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
    match grad {
        WeightGrad::Full(d_weight) => k
            .matmul(
                d_weight,
                dy,
                x,
                mm(out_dim, in_dim, rows, true, false, true),
            )
            .map_err(backend),
        WeightGrad::Frozen => Ok(()),
        WeightGrad::Adapter(lora, adapter) => {
            let r = lora.config.rank;
            let scale = lora.config.scale();
            // t[rows, r] and u[rows, r], sized by prepare_lora_rows.
            let (t, u) = lora.row_tensors(rows).ok_or_else(|| {
                ModelError::Input(InputError::Lora(
                    "the backward's row scratch was not prepared".into(),
                ))
            })?;
            let (a, b) = (at(lora.adapters, adapter.a), at(lora.adapters, adapter.b));
            let (d_a, d_b) = (at(lora.grads, adapter.a), at(lora.grads, adapter.b));
            // t = s · x · A^T; dB += dy^T · t
            k.matmul(t, x, a, mm(rows, r, in_dim, false, true, false))
                .map_err(backend)?;
            k.scale(t, scale).map_err(backend)?;
            k.matmul(d_b, dy, t, mm(out_dim, r, rows, true, false, true))
                .map_err(backend)?;
            // u = s · dy · B; dA += u^T · x
            k.matmul(u, dy, b, mm(rows, r, out_dim, false, false, false))
                .map_err(backend)?;
            k.scale(u, scale).map_err(backend)?;
            k.matmul(d_a, u, x, mm(r, in_dim, rows, true, false, true))
                .map_err(backend)
        }
    }
}
