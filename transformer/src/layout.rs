//! Where every tensor lives: the parameter slab (mirrored by the gradient and the two
//! AdamW moment slabs) and the activation slab of a batch, each one allocation carved
//! into named ranges, with their shapes.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::config::ModelConfig;

/// A named range of a slab: `len` elements from `offset`, shaped `shape` (row-major).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// First element inside the slab.
    pub offset: usize,
    /// Element count (the product of `shape`).
    pub len: usize,
    /// Rows and columns; a vector is `[len, 1]`.
    pub shape: [usize; 2],
}

/// Hands out consecutive slots of one slab.
struct Carver {
    next: usize,
}

impl Carver {
    fn matrix(&mut self, rows: usize, cols: usize) -> Slot {
        let slot = Slot {
            offset: self.next,
            len: rows * cols,
            shape: [rows, cols],
        };
        self.next += slot.len;
        slot
    }

    fn vector(&mut self, len: usize) -> Slot {
        self.matrix(len, 1)
    }
}

/// The parameters of one decoder layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerParams {
    /// RMSNorm before attention, `[D]`.
    pub input_norm: Slot,
    /// Query projection, [H*hd, D].
    pub q_weight: Slot,
    /// Query bias, `[H*hd]` (absent without q/k/v bias).
    pub q_bias: Option<Slot>,
    /// Key projection, [KV*hd, D].
    pub k_weight: Slot,
    /// Key bias, `[KV*hd]`.
    pub k_bias: Option<Slot>,
    /// Value projection, [KV*hd, D].
    pub v_weight: Slot,
    /// Value bias, `[KV*hd]`.
    pub v_bias: Option<Slot>,
    /// Output projection, [D, H*hd].
    pub o_weight: Slot,
    /// RMSNorm before the MLP, `[D]`.
    pub post_attention_norm: Slot,
    /// MLP gate projection, [I, D].
    pub gate_weight: Slot,
    /// MLP up projection, [I, D].
    pub up_weight: Slot,
    /// MLP down projection, [D, I].
    pub down_weight: Slot,
}

/// The parameter slab of a model; gradients and optimizer moments use the same layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamLayout {
    /// Token embedding table, [V, D].
    pub embed: Slot,
    /// The decoder layers.
    pub layers: Vec<LayerParams>,
    /// Final RMSNorm, `[D]`.
    pub final_norm: Slot,
    /// Output projection, [V, D]; the same slot as `embed` when embeddings are tied.
    pub lm_head: Slot,
    /// Elements in the slab.
    pub total: usize,
}

impl ParamLayout {
    /// Lays out the parameters of `config` (which must be valid).
    pub fn new(config: &ModelConfig) -> ParamLayout {
        let (v, d, i) = (
            config.vocab_size,
            config.hidden_size,
            config.intermediate_size,
        );
        let (q, kv) = (config.q_dim(), config.kv_dim());
        let mut carve = Carver { next: 0 };
        let embed = carve.matrix(v, d);
        let layers = (0..config.num_hidden_layers)
            .map(|_| LayerParams {
                input_norm: carve.vector(d),
                q_weight: carve.matrix(q, d),
                q_bias: config.qkv_bias.then(|| carve.vector(q)),
                k_weight: carve.matrix(kv, d),
                k_bias: config.qkv_bias.then(|| carve.vector(kv)),
                v_weight: carve.matrix(kv, d),
                v_bias: config.qkv_bias.then(|| carve.vector(kv)),
                o_weight: carve.matrix(d, q),
                post_attention_norm: carve.vector(d),
                gate_weight: carve.matrix(i, d),
                up_weight: carve.matrix(i, d),
                down_weight: carve.matrix(d, i),
            })
            .collect();
        let final_norm = carve.vector(d);
        let lm_head = if config.tie_word_embeddings {
            embed
        } else {
            carve.matrix(v, d)
        };
        ParamLayout {
            embed,
            layers,
            final_norm,
            lm_head,
            total: carve.next,
        }
    }

    /// Every distinct tensor with its Hugging Face Qwen2 name, in slab order (a tied
    /// `lm_head` is not listed: it is `model.embed_tokens.weight`).
    pub fn named(&self) -> Vec<(String, Slot)> {
        let mut out = Vec::with_capacity(4 + 12 * self.layers.len());
        out.push((String::from("model.embed_tokens.weight"), self.embed));
        for (l, layer) in self.layers.iter().enumerate() {
            let p = format!("model.layers.{l}.");
            let mut push = |name: &str, slot: Option<Slot>| {
                if let Some(slot) = slot {
                    out.push((format!("{p}{name}"), slot));
                }
            };
            push("input_layernorm.weight", Some(layer.input_norm));
            push("self_attn.q_proj.weight", Some(layer.q_weight));
            push("self_attn.q_proj.bias", layer.q_bias);
            push("self_attn.k_proj.weight", Some(layer.k_weight));
            push("self_attn.k_proj.bias", layer.k_bias);
            push("self_attn.v_proj.weight", Some(layer.v_weight));
            push("self_attn.v_proj.bias", layer.v_bias);
            push("self_attn.o_proj.weight", Some(layer.o_weight));
            push(
                "post_attention_layernorm.weight",
                Some(layer.post_attention_norm),
            );
            push("mlp.gate_proj.weight", Some(layer.gate_weight));
            push("mlp.up_proj.weight", Some(layer.up_weight));
            push("mlp.down_proj.weight", Some(layer.down_weight));
        }
        out.push((String::from("model.norm.weight"), self.final_norm));
        if self.lm_head != self.embed {
            out.push((String::from("lm_head.weight"), self.lm_head));
        }
        out
    }
}

/// The activations one decoder layer saves for its backward pass, for N tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerActs {
    /// The residual stream entering the layer, [N, D].
    pub residual_in: Slot,
    /// RMSNorm of it, [N, D].
    pub input_norm: Slot,
    /// Reciprocal rms of `residual_in`, `[N]`.
    pub input_rstd: Slot,
    /// Queries after bias and rotation, [N, H*hd].
    pub q: Slot,
    /// Keys after bias and rotation, [N, KV*hd].
    pub k: Slot,
    /// Values after bias, [N, KV*hd].
    pub v: Slot,
    /// Attention output before the output projection, [N, H*hd].
    pub attn: Slot,
    /// Log-sum-exp of each query's scores, [N, H].
    pub attn_lse: Slot,
    /// The residual stream after attention, [N, D] (empty in a decoding layout:
    /// inference adds both blocks to `residual_in` in place).
    pub residual_mid: Slot,
    /// RMSNorm before the MLP, [N, D].
    pub post_norm: Slot,
    /// Reciprocal rms of `residual_mid`, `[N]`.
    pub post_rstd: Slot,
    /// Gate projection, [N, I].
    pub gate: Slot,
    /// Up projection, [N, I].
    pub up: Slot,
    /// silu(gate) * up, [N, I].
    pub swiglu: Slot,
}

/// The activation slab of a forward pass over N tokens, and the scratch its backward
/// pass needs (which reuses nothing of the forward's saved tensors).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActLayout {
    /// Tokens in the batch (N).
    pub tokens: usize,
    /// Saved activations of each layer.
    pub layers: Vec<LayerActs>,
    /// The residual stream after the last layer, [N, D].
    pub residual_out: Slot,
    /// Final RMSNorm, [N, D].
    pub final_norm: Slot,
    /// Reciprocal rms of `residual_out`, `[N]`.
    pub final_rstd: Slot,
    /// Log-prob of each target token, `[N]`.
    pub logp: Slot,
    /// Log-sum-exp of each row of logits, `[N]`.
    pub logits_lse: Slot,
    /// Per-token weights of the backward pass (loss mask or GRPO coefficients), `[N]`.
    pub loss_weights: Slot,
    /// The scored rows of `final_norm`, gathered when the head runs on some rows only,
    /// [N, D] (the first `rows * D` used).
    pub head_in: Slot,
    /// Backward scratch: gradient of `head_in`, [N, D].
    pub d_head_in: Slot,
    /// Backward scratch: gradient of the residual stream, [N, D].
    pub d_residual: Slot,
    /// Backward scratch: gradient of a normed input, [N, D].
    pub d_norm: Slot,
    /// Backward scratch: gradient of queries / attention output, [N, H*hd].
    pub d_q: Slot,
    /// Backward scratch: gradient of the attention output, [N, H*hd].
    pub d_attn: Slot,
    /// Backward scratch: gradient of keys, [N, KV*hd].
    pub d_k: Slot,
    /// Backward scratch: gradient of values, [N, KV*hd].
    pub d_v: Slot,
    /// Backward scratch: gradient of the gate projection, [N, I].
    pub d_gate: Slot,
    /// Backward scratch: gradient of the up projection, [N, I].
    pub d_up: Slot,
    /// Backward scratch: gradient of the SwiGLU output, [N, I].
    pub d_swiglu: Slot,
    /// Elements in the slab.
    pub total: usize,
}

impl ActLayout {
    /// Lays out the activations of `config` (which must be valid) for `tokens` tokens.
    pub fn new(config: &ModelConfig, tokens: usize) -> ActLayout {
        Self::with_layers(config, tokens, config.num_hidden_layers, tokens)
    }

    /// A layout for inference over `tokens` rows (a prefill's prompts, or a decoding
    /// step's one token per sequence): the slots of one layer only, which every layer
    /// runs over in turn since nothing is kept for a backward pass, and no backward
    /// scratch or output-head slots (those are empty; the caller norms the rows it
    /// needs itself), and no `residual_mid`. A training layout of the same rows is
    /// about `2 * num_hidden_layers` times larger.
    pub fn for_decoding(config: &ModelConfig, tokens: usize) -> ActLayout {
        Self::with_layers(config, tokens, 1, 0)
    }

    /// `layers` layers' saved activations and `final_rstd` for `tokens` rows, and the
    /// slots only training uses (`residual_mid`, the final norm, the output head's,
    /// backward scratch) for `training_rows` rows.
    fn with_layers(
        config: &ModelConfig,
        tokens: usize,
        layers: usize,
        training_rows: usize,
    ) -> ActLayout {
        let n = tokens;
        let (d, i, h) = (
            config.hidden_size,
            config.intermediate_size,
            config.num_attention_heads,
        );
        let (q, kv) = (config.q_dim(), config.kv_dim());
        let mut carve = Carver { next: 0 };
        let layers = (0..layers)
            .map(|_| LayerActs {
                residual_in: carve.matrix(n, d),
                input_norm: carve.matrix(n, d),
                input_rstd: carve.vector(n),
                q: carve.matrix(n, q),
                k: carve.matrix(n, kv),
                v: carve.matrix(n, kv),
                attn: carve.matrix(n, q),
                attn_lse: carve.matrix(n, h),
                residual_mid: carve.matrix(training_rows, d),
                post_norm: carve.matrix(n, d),
                post_rstd: carve.vector(n),
                gate: carve.matrix(n, i),
                up: carve.matrix(n, i),
                swiglu: carve.matrix(n, i),
            })
            .collect();
        ActLayout {
            tokens,
            layers,
            residual_out: carve.matrix(training_rows, d),
            final_norm: carve.matrix(training_rows, d),
            final_rstd: carve.vector(n),
            logp: carve.vector(training_rows),
            logits_lse: carve.vector(training_rows),
            loss_weights: carve.vector(training_rows),
            head_in: carve.matrix(training_rows, d),
            d_head_in: carve.matrix(training_rows, d),
            d_residual: carve.matrix(training_rows, d),
            d_norm: carve.matrix(training_rows, d),
            d_q: carve.matrix(training_rows, q),
            d_attn: carve.matrix(training_rows, q),
            d_k: carve.matrix(training_rows, kv),
            d_v: carve.matrix(training_rows, kv),
            d_gate: carve.matrix(training_rows, i),
            d_up: carve.matrix(training_rows, i),
            d_swiglu: carve.matrix(training_rows, i),
            total: carve.next,
        }
    }
}
