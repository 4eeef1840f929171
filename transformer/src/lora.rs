//! LoRA: low-rank adapters trained on a frozen model. An adapted projection computes
//! `y = x · (W0 + s·B·A)^T` with `A[r, in]`, `B[out, r]` and `s = alpha / r`; only `A`
//! and `B` train.
//!
//! The model keeps the merged weight `W0 + s·B·A` in its parameter slab, so the forward
//! pass, the prefill and the decoding step run unchanged, and a saved model is the merged
//! one. The frozen `W0` of every adapted matrix is kept beside the adapters; after each
//! update of `A` and `B`, [`Transformer::merge_adapters`] writes the merged weights again.
//! With adapters on, [`Transformer::backward`] computes the gradients of `A` and `B` from
//! the projection's input and output gradient (rank-`r` products: no `[out, in]` weight
//! gradient), and no gradient of any frozen matrix: the embedding, the output head, the
//! other projections, the biases and the RMSNorm weights (whose kernel writes its weight
//! gradient anyway: into a sink of the adapters that nothing reads). The model's own
//! gradient slab is released when the adapters go on.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::kernels::{BufferId, Kernels, Tensor};
use crate::layout::{LayerParams, ParamLayout, Slot};
use crate::model::{at, backend, mm, InputError, ModelError, Result, Transformer};

/// A projection of a decoder layer that can carry an adapter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Projection {
    /// `self_attn.q_proj`.
    Q,
    /// `self_attn.k_proj`.
    K,
    /// `self_attn.v_proj`.
    V,
    /// `self_attn.o_proj`.
    O,
    /// `mlp.gate_proj`.
    Gate,
    /// `mlp.up_proj`.
    Up,
    /// `mlp.down_proj`.
    Down,
}

impl Projection {
    /// Every projection, in layer order.
    pub const ALL: [Projection; 7] = [
        Projection::Q,
        Projection::K,
        Projection::V,
        Projection::O,
        Projection::Gate,
        Projection::Up,
        Projection::Down,
    ];

    /// The module's name in Hugging Face checkpoints and PEFT's `target_modules`.
    pub fn name(self) -> &'static str {
        match self {
            Projection::Q => "q_proj",
            Projection::K => "k_proj",
            Projection::V => "v_proj",
            Projection::O => "o_proj",
            Projection::Gate => "gate_proj",
            Projection::Up => "up_proj",
            Projection::Down => "down_proj",
        }
    }

    /// The projection named `name` (see [`Projection::name`]).
    pub fn from_name(name: &str) -> Option<Projection> {
        Projection::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The module path inside a layer: `self_attn.q_proj`, `mlp.up_proj`, ...
    pub fn module(self) -> String {
        let block = match self {
            Projection::Q | Projection::K | Projection::V | Projection::O => "self_attn",
            Projection::Gate | Projection::Up | Projection::Down => "mlp",
        };
        format!("{block}.{}", self.name())
    }

    /// The weight slot of this projection in `layer`, `[out, in]`.
    fn weight(self, layer: &LayerParams) -> Slot {
        match self {
            Projection::Q => layer.q_weight,
            Projection::K => layer.k_weight,
            Projection::V => layer.v_weight,
            Projection::O => layer.o_weight,
            Projection::Gate => layer.gate_weight,
            Projection::Up => layer.up_weight,
            Projection::Down => layer.down_weight,
        }
    }
}

/// The adapters to train: their rank, scale and the projections that get one (in every
/// layer).
#[derive(Clone, Debug, PartialEq)]
pub struct LoraConfig {
    /// The rank r of `A[r, in]` and `B[out, r]`.
    pub rank: usize,
    /// The scale numerator: the update is `(alpha / rank) · B·A`.
    pub alpha: f32,
    /// The adapted projections.
    pub targets: Vec<Projection>,
}

impl LoraConfig {
    /// `alpha / rank`.
    pub fn scale(&self) -> f32 {
        self.alpha / self.rank as f32
    }

    /// Fails on a zero rank, a scale that is not positive and finite, no target, or a
    /// target named twice.
    pub fn validate(&self) -> core::result::Result<(), String> {
        if self.rank == 0 {
            return Err(String::from("rank must be at least 1"));
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0) {
            return Err(format!(
                "alpha must be positive and finite, not {}",
                self.alpha
            ));
        }
        if self.targets.is_empty() {
            return Err(String::from("targets must name at least one projection"));
        }
        for (i, target) in self.targets.iter().enumerate() {
            if self.targets[..i].contains(target) {
                return Err(format!("target {} is named twice", target.name()));
            }
        }
        Ok(())
    }
}

/// One adapter: the adapted weight and where `A`, `B` and the frozen weight live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Adapter {
    /// The decoder layer.
    pub layer: usize,
    /// The projection.
    pub projection: Projection,
    /// The adapted (merged) weight in the parameter slab, `[out, in]`.
    pub weight: Slot,
    /// `A[r, in]` in the adapter slab.
    pub a: Slot,
    /// `B[out, r]` in the adapter slab.
    pub b: Slot,
    /// The frozen weight `W0[out, in]` in the base slab.
    pub base: Slot,
}

impl Adapter {
    /// Rows of the weight (the projection's output width).
    pub fn out_dim(&self) -> usize {
        self.weight.shape[0]
    }
    /// Columns of the weight (the projection's input width).
    pub fn in_dim(&self) -> usize {
        self.weight.shape[1]
    }
}

/// Every adapter of a model, layer by layer in `targets` order: the adapter slab holds
/// each one's `A` then `B`; the base slab each one's frozen weight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdapterLayout {
    /// The adapters.
    pub adapters: Vec<Adapter>,
    /// Elements of the adapter slab (and of its gradient and optimizer moments).
    pub total: usize,
    /// Elements of the base slab.
    pub base_total: usize,
}

impl AdapterLayout {
    /// Lays out the adapters of `config` (which must be valid) on a model of `params`.
    pub fn new(params: &ParamLayout, config: &LoraConfig) -> AdapterLayout {
        let r = config.rank;
        let (mut next, mut next_base) = (0, 0);
        let mut adapters = Vec::with_capacity(params.layers.len() * config.targets.len());
        for (layer, layer_params) in params.layers.iter().enumerate() {
            for &projection in &config.targets {
                let weight = projection.weight(layer_params);
                let [out_dim, in_dim] = weight.shape;
                let carve = |len: usize, shape: [usize; 2], at: &mut usize| {
                    let slot = Slot {
                        offset: *at,
                        len,
                        shape,
                    };
                    *at += len;
                    slot
                };
                let a = carve(r * in_dim, [r, in_dim], &mut next);
                let b = carve(out_dim * r, [out_dim, r], &mut next);
                let base = carve(weight.len, weight.shape, &mut next_base);
                adapters.push(Adapter {
                    layer,
                    projection,
                    weight,
                    a,
                    b,
                    base,
                });
            }
        }
        AdapterLayout {
            adapters,
            total: next,
            base_total: next_base,
        }
    }

    /// The adapter of the weight at `weight`, if it has one.
    pub fn of_weight(&self, weight: Slot) -> Option<&Adapter> {
        self.adapters.iter().find(|a| a.weight == weight)
    }

    /// The PEFT names of every adapter's `A` and `B` with their slots:
    /// `base_model.model.model.layers.L.self_attn.q_proj.lora_A.weight`, ...
    pub fn named(&self) -> Vec<(String, Slot)> {
        let mut out = Vec::with_capacity(2 * self.adapters.len());
        for adapter in &self.adapters {
            let module = format!(
                "base_model.model.model.layers.{}.{}",
                adapter.layer,
                adapter.projection.module()
            );
            out.push((format!("{module}.lora_A.weight"), adapter.a));
            out.push((format!("{module}.lora_B.weight"), adapter.b));
        }
        out
    }
}

/// The adapters of a model in a backend.
pub(crate) struct Lora {
    pub(crate) config: LoraConfig,
    pub(crate) layout: AdapterLayout,
    /// Every `A` and `B`, by `layout`.
    pub(crate) adapters: BufferId,
    /// Their gradients, same layout; accumulate until zeroed.
    pub(crate) grads: BufferId,
    /// The frozen weights, by the `base` slots.
    base: BufferId,
    /// `[max out, r]`: `±s·B` while merging or rebasing.
    merge_scratch: BufferId,
    /// `[D]`: where the backward writes the frozen RMSNorm weights' gradients, which
    /// nothing reads, so that the model's gradient slab stays untouched.
    pub(crate) norm_sink: BufferId,
    /// `[rows, r]` twice: the backward's `x·A^T` and `dy·B`, grown as batches need.
    pub(crate) rows_scratch: Option<(BufferId, usize)>,
}

impl Lora {
    /// The backward's two `[rows, r]` scratch tensors, `t` and `u`.
    pub(crate) fn row_tensors(&self, rows: usize) -> Option<(Tensor, Tensor)> {
        let (buffer, capacity) = self.rows_scratch?;
        let len = rows * self.config.rank;
        (2 * len <= capacity).then(|| {
            let whole = Tensor::whole(buffer, capacity);
            (whole.slice(0, len), whole.slice(len, len))
        })
    }
}

impl Transformer {
    /// Freezes the model and puts adapters of `config` on it, `A` and `B` set from
    /// `initial` (the adapter slab of [`AdapterLayout::new`], e.g. `A` random and `B`
    /// zero, so that the model starts unchanged), and writes the merged weights. The
    /// current weights become the frozen ones. Fails on an invalid config, a model that
    /// has adapters already, or `initial` of another length.
    pub fn enable_lora<K: Kernels>(
        &mut self,
        k: &mut K,
        config: LoraConfig,
        initial: &[f32],
    ) -> Result<(), K> {
        self.attach_lora(k, config, initial)?;
        self.merge_adapters(k)
    }

    /// Puts the adapters `adapters` of `config` back on a model whose weights are the
    /// merged ones saved with them (a checkpoint of a run that trained them): the weights
    /// stay as they are and the frozen ones are taken back as `W - s·B·A`. Fails as
    /// [`Transformer::enable_lora`] does.
    pub fn restore_lora<K: Kernels>(
        &mut self,
        k: &mut K,
        config: LoraConfig,
        adapters: &[f32],
    ) -> Result<(), K> {
        self.attach_lora(k, config, adapters)?;
        self.rebase_adapters(k)
    }

    /// Allocates the adapters of `config` with the values `initial`, the current weights
    /// copied as the frozen ones; writes no weight.
    fn attach_lora<K: Kernels>(
        &mut self,
        k: &mut K,
        config: LoraConfig,
        initial: &[f32],
    ) -> Result<(), K> {
        if self.frozen {
            return Err(ModelError::Input(InputError::Frozen));
        }
        config
            .validate()
            .map_err(|why| ModelError::Input(InputError::Lora(why)))?;
        if self.lora.is_some() {
            return Err(ModelError::Input(InputError::Lora(String::from(
                "the model has adapters already",
            ))));
        }
        let layout = AdapterLayout::new(&self.params_layout, &config);
        if initial.len() != layout.total {
            return Err(ModelError::Input(InputError::Lora(format!(
                "{} initial adapter values for an adapter slab of {}",
                initial.len(),
                layout.total
            ))));
        }
        let widest = layout
            .adapters
            .iter()
            .map(Adapter::out_dim)
            .max()
            .unwrap_or(0);
        let adapters = k.alloc(layout.total).map_err(backend)?;
        let grads = k.alloc(layout.total).map_err(backend)?;
        let base = k.alloc(layout.base_total).map_err(backend)?;
        let merge_scratch = k.alloc(widest * config.rank).map_err(backend)?;
        let norm_sink = k.alloc(self.config.hidden_size).map_err(backend)?;
        k.write(Tensor::whole(adapters, layout.total), initial)
            .map_err(backend)?;
        for adapter in &layout.adapters {
            k.copy(at(base, adapter.base), at(self.params, adapter.weight))
                .map_err(backend)?;
        }
        // Nothing computes a gradient of the frozen parameters: their slab goes.
        let empty = k.alloc(0).map_err(backend)?;
        let released = core::mem::replace(&mut self.grads, empty);
        self.grads_held = false;
        self.lora = Some(Lora {
            config,
            layout,
            adapters,
            grads,
            base,
            merge_scratch,
            norm_sink,
            rows_scratch: None,
        });
        k.free(released).map_err(backend)
    }

    /// The adapters' config, when the model has adapters.
    pub fn lora_config(&self) -> Option<&LoraConfig> {
        self.lora.as_ref().map(|lora| &lora.config)
    }

    /// The adapters' layout, when the model has adapters.
    pub fn adapter_layout(&self) -> Option<&AdapterLayout> {
        self.lora.as_ref().map(|lora| &lora.layout)
    }

    /// The whole adapter slab (every `A` and `B`), when the model has adapters.
    pub fn adapter_params(&self) -> Option<Tensor> {
        let lora = self.lora.as_ref()?;
        Some(Tensor::whole(lora.adapters, lora.layout.total))
    }

    /// The adapters' gradients (same layout), when the model has adapters.
    pub fn adapter_grads(&self) -> Option<Tensor> {
        let lora = self.lora.as_ref()?;
        Some(Tensor::whole(lora.grads, lora.layout.total))
    }

    /// What trains: the adapter slab and its gradients with adapters on, else the
    /// parameter and gradient slabs.
    pub fn trainable(&self) -> (Tensor, Tensor) {
        match (self.adapter_params(), self.adapter_grads()) {
            (Some(params), Some(grads)) => (params, grads),
            _ => (self.params(), self.grads()),
        }
    }

    /// The named tensors of [`Transformer::trainable`]'s slab, covering it in order:
    /// the adapters' PEFT names, or the parameters' Hugging Face names.
    pub fn trainable_named(&self) -> Vec<(String, Slot)> {
        match self.adapter_layout() {
            Some(layout) => layout.named(),
            None => self.params_layout.named(),
        }
    }

    /// Writes every adapted weight as `W0 + s·B·A` from the current adapters (after an
    /// update of `A` or `B`); nothing without adapters.
    pub fn merge_adapters<K: Kernels>(&self, k: &mut K) -> Result<(), K> {
        self.combine_adapters(k, false)
    }

    /// Takes the frozen weights from the merged ones and the current adapters, `W0 = W -
    /// s·B·A`: for a model loaded merged (a saved checkpoint) whose adapters were then
    /// written into [`Transformer::adapter_params`]. Nothing without adapters.
    pub fn rebase_adapters<K: Kernels>(&self, k: &mut K) -> Result<(), K> {
        self.combine_adapters(k, true)
    }

    /// For every adapter, the merged weight from the frozen one (`W = W0 + s·B·A`), or,
    /// `to_base`, the frozen weight from the merged one (`W0 = W - s·B·A`).
    fn combine_adapters<K: Kernels>(&self, k: &mut K, to_base: bool) -> Result<(), K> {
        let Some(lora) = &self.lora else {
            return Ok(());
        };
        let scale = lora.config.scale();
        for adapter in &lora.layout.adapters {
            let (weight, base) = (at(self.params, adapter.weight), at(lora.base, adapter.base));
            let (target, source, factor) = match to_base {
                false => (weight, base, scale),
                true => (base, weight, -scale),
            };
            k.copy(target, source).map_err(backend)?;
            add_low_rank(k, lora, adapter, target, factor)?;
        }
        Ok(())
    }

    /// Makes the backward's row scratch fit `rows` tokens.
    pub(crate) fn prepare_lora_rows<K: Kernels>(
        &mut self,
        k: &mut K,
        rows: usize,
    ) -> Result<(), K> {
        let Some(lora) = &mut self.lora else {
            return Ok(());
        };
        let needed = 2 * rows * lora.config.rank;
        match lora.rows_scratch {
            Some((_, capacity)) if capacity >= needed => Ok(()),
            old => {
                if let Some((buffer, _)) = old {
                    k.free(buffer).map_err(backend)?;
                }
                lora.rows_scratch = None;
                let buffer = k.alloc(needed).map_err(backend)?;
                lora.rows_scratch = Some((buffer, needed));
                Ok(())
            }
        }
    }

    /// Releases the adapters' buffers.
    pub(crate) fn free_lora<K: Kernels>(lora: Lora, k: &mut K) -> Result<(), K> {
        let buffers = [
            lora.adapters,
            lora.grads,
            lora.base,
            lora.merge_scratch,
            lora.norm_sink,
        ];
        for buffer in buffers {
            k.free(buffer).map_err(backend)?;
        }
        if let Some((buffer, _)) = lora.rows_scratch {
            k.free(buffer).map_err(backend)?;
        }
        Ok(())
    }
}

/// `target[out, in] += factor · B·A` of `adapter`.
fn add_low_rank<K: Kernels>(
    k: &mut K,
    lora: &Lora,
    adapter: &Adapter,
    target: Tensor,
    factor: f32,
) -> Result<(), K> {
    let r = lora.config.rank;
    let (out_dim, in_dim) = (adapter.out_dim(), adapter.in_dim());
    // scaled_b[out, r] = factor · B
    let scaled_b = Tensor::whole(lora.merge_scratch, out_dim * r);
    k.copy(scaled_b, at(lora.adapters, adapter.b))
        .map_err(backend)?;
    k.scale(scaled_b, factor).map_err(backend)?;
    k.matmul(
        target,
        scaled_b,
        at(lora.adapters, adapter.a),
        mm(out_dim, in_dim, r, false, false, true),
    )
    .map_err(backend)
}
