//! [`Transformer`]: the Qwen2 / Llama-style decoder whose forward pass (`forward.rs`),
//! backward pass (`backward.rs`, block by block the forward's mirror) and KV-cache
//! decoding step (`decode.rs`) are written once as calls to any [`Kernels`] backend.
//!
//! One decoder layer, for a packed batch of N tokens (shapes in brackets):
//! ```text
//! x[N,D] -> rmsnorm -> q,k,v projections (+bias) -> rope(q,k) -> causal GQA attention
//!        -> o projection -> + x = h[N,D]
//! h      -> rmsnorm -> gate,up projections -> silu(gate)*up -> down projection -> + h
//! ```
//! then a final RMSNorm and the fused output head that yields log p(target) per token.

use alloc::vec::Vec;

use crate::config::ModelConfig;
use crate::kernels::{
    AttentionShape, BufferId, IndexBufferId, Indices, Kernels, MatmulShape, Tensor,
};
use crate::layout::{ActLayout, ParamLayout, Slot};
use crate::lora::Lora;

mod backward;
mod error;
mod forward;

pub(crate) use error::{backend, input, same_len, Result};
pub use error::{InputError, ModelError};
pub(crate) use forward::{
    attention_inputs, attention_output, attention_projections, layer_forward, mlp_forward, Residual,
};

/// A tensor of `buffer` at `slot`.
pub(crate) fn at(buffer: BufferId, slot: Slot) -> Tensor {
    Tensor {
        buffer,
        offset: slot.offset,
        len: slot.len,
    }
}

/// The activation slab of the current batch, and its token, target and position ids.
pub(crate) struct Activations {
    pub(crate) layout: ActLayout,
    /// Elements the buffer holds (at least `layout.total`).
    capacity: usize,
    pub(crate) buffer: BufferId,
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
    pub(crate) fn t(&self, slot: Slot) -> Tensor {
        at(self.buffer, slot)
    }
}

/// A Qwen2-style decoder whose parameters and gradients live in a backend.
///
/// The model holds buffer handles, not the backend: every call takes the backend it
/// was created with.
pub struct Transformer {
    pub(crate) config: ModelConfig,
    pub(crate) params_layout: ParamLayout,
    /// Parameters, laid out by `params_layout`.
    pub(crate) params: BufferId,
    /// Gradients, same layout; accumulate until [`Transformer::zero_grads`]. An empty
    /// buffer until the first backward pass allocates the slab (so a model that only
    /// infers never holds one), and again once LoRA adapters freeze the model.
    pub(crate) grads: BufferId,
    /// Whether `grads` holds the whole slab.
    pub(crate) grads_held: bool,
    /// Whether `params` came from [`Kernels::alloc_frozen`]: inference only.
    pub(crate) frozen: bool,
    pub(crate) acts: Option<Activations>,
    /// LoRA adapters, when the model trains through them (`crate::lora`).
    pub(crate) lora: Option<Lora>,
}

impl Transformer {
    /// Allocates a model of `config` with zeroed parameters; its gradients (zero) are
    /// allocated by its first backward pass.
    pub fn new<K: Kernels>(k: &mut K, config: ModelConfig) -> Result<Transformer, K> {
        Transformer::allocate(k, config, false)
    }

    /// Allocates a model of `config` for inference only, its zeroed parameters in a
    /// frozen buffer ([`Kernels::alloc_frozen`]): written once from the host, then read
    /// by forward passes, prefills and decoding steps. A backend may hold them at a lower
    /// precision (the CUDA backend's bf16 mode: bf16, with no f32 copy); a backward pass,
    /// an optimizer step, adapters or reading the weights back are refused
    /// ([`InputError::Frozen`], or the backend's refusal of a read).
    pub fn new_frozen<K: Kernels>(k: &mut K, config: ModelConfig) -> Result<Transformer, K> {
        Transformer::allocate(k, config, true)
    }

    fn allocate<K: Kernels>(
        k: &mut K,
        config: ModelConfig,
        frozen: bool,
    ) -> Result<Transformer, K> {
        config.validate().map_err(ModelError::Config)?;
        let params_layout = ParamLayout::new(&config);
        let params = if frozen {
            k.alloc_frozen(params_layout.total)
        } else {
            k.alloc(params_layout.total)
        }
        .map_err(backend)?;
        let grads = match k.alloc(0) {
            Ok(grads) => grads,
            Err(e) => {
                k.free(params).map_err(backend)?;
                return Err(backend(e));
            }
        };
        Ok(Transformer {
            config,
            params_layout,
            params,
            grads,
            grads_held: false,
            frozen,
            acts: None,
            lora: None,
        })
    }

    /// Allocates the gradient slab (zero) now, unless it is held already or LoRA
    /// adapters froze the parameters; the first backward pass and an optimizer step
    /// call it. Fails with [`InputError::Frozen`] on a model made by
    /// [`Transformer::new_frozen`].
    pub fn hold_grads<K: Kernels>(&mut self, k: &mut K) -> Result<(), K> {
        if self.frozen {
            return Err(input(InputError::Frozen));
        }
        if self.grads_held || self.lora.is_some() {
            return Ok(());
        }
        let slab = k.alloc(self.params_layout.total).map_err(backend)?;
        let empty = core::mem::replace(&mut self.grads, slab);
        self.grads_held = true;
        k.free(empty).map_err(backend)
    }

    /// Whether the model was made for inference only ([`Transformer::new_frozen`]).
    pub fn is_frozen(&self) -> bool {
        self.frozen
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

    /// The whole gradient slab (same layout as the parameters); empty before the first
    /// backward pass (the gradients are zero until then) and with LoRA adapters on,
    /// which freeze every parameter (their gradients: [`Transformer::adapter_grads`]).
    pub fn grads(&self) -> Tensor {
        // Adapters release a held slab: held means no adapters.
        let len = if self.grads_held {
            self.params_layout.total
        } else {
            0
        };
        Tensor::whole(self.grads, len)
    }

    /// Sets every gradient to zero (the adapters' too).
    pub fn zero_grads<K: Kernels>(&self, k: &mut K) -> Result<(), K> {
        match self.adapter_grads() {
            Some(grads) => k.fill(grads, 0.0).map_err(backend),
            None => k.fill(self.grads(), 0.0).map_err(backend),
        }
    }

    /// Releases the model's buffers.
    pub fn free<K: Kernels>(self, k: &mut K) -> Result<(), K> {
        k.free(self.params).map_err(backend)?;
        k.free(self.grads).map_err(backend)?;
        if let Some(acts) = self.acts {
            k.free(acts.buffer).map_err(backend)?;
            k.free_indices(acts.indices).map_err(backend)?;
        }
        match self.lora {
            Some(lora) => Transformer::free_lora(lora, k),
            None => Ok(()),
        }
    }

    pub(crate) fn check_tokens<E>(
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
}

/// The two buffers a decoder layer's forward blocks address by slot: the model's
/// parameters and an activation slab (a training batch's, or a decoding step's scratch).
#[derive(Clone, Copy)]
pub(crate) struct LayerBuffers {
    /// The parameters.
    pub(crate) params: BufferId,
    /// The activations.
    pub(crate) acts: BufferId,
}

impl LayerBuffers {
    /// The parameter at `slot`.
    fn w(self, slot: Slot) -> Tensor {
        at(self.params, slot)
    }
    /// The activation at `slot`.
    fn t(self, slot: Slot) -> Tensor {
        at(self.acts, slot)
    }
}

/// The shape of one matmul call (see [`MatmulShape`]).
pub(crate) fn mm(
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
