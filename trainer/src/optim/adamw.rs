//! [`AdamW`]: decoupled-weight-decay Adam over what a model trains (its whole parameter
//! slab, or its LoRA adapters' slab: `Transformer::trainable`), with global-norm
//! gradient clipping and a learning-rate schedule.
//!
//! The moments live in the backend, laid out like the trained slab. Weight decay applies
//! to matrices only: the slab is cut into runs of consecutive tensors of
//! `Transformer::trainable_named()`, those shaped `[len, 1]` (RMSNorm weights and q/k/v
//! biases) without decay and the others with it, and the `adamw` kernel runs once per
//! run. After a step on adapters the merged weights are written again.

use sage_core::policy::UpdateStats;
use sage_transformer::{AdamWStep, BufferId, Kernels, ModelError, Tensor, Transformer};

use super::config::AdamWConfig;
use super::error::{ConfigError, OptimError};

/// Added to the gradient norm in the clipping factor `max_norm / (norm + CLIP_EPS)`.
const CLIP_EPS: f64 = 1e-6;

/// Consecutive parameter elements that share a weight-decay rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DecayRun {
    offset: usize,
    len: usize,
    decay: bool,
}

/// What one call to [`AdamW::update`] did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepReport {
    /// The gradient's global norm before clipping, and the learning rate of the step.
    pub stats: UpdateStats,
    /// The gradient was scaled down to `max_grad_norm`.
    pub clipped: bool,
    /// The gradient norm was not finite: parameters, moments and the step counter
    /// were left as they were.
    pub skipped: bool,
}

/// Everything an [`AdamW`] holds, copied to the host: what a checkpoint stores.
#[derive(Clone, Debug, PartialEq)]
pub struct AdamWState {
    /// The hyper-parameters.
    pub config: AdamWConfig,
    /// Updates applied so far (see [`AdamW::step`]).
    pub step: u32,
    /// First moments, laid out like the parameters.
    pub m: Vec<f32>,
    /// Second moments, laid out like the parameters.
    pub v: Vec<f32>,
}

/// AdamW state for one model: moments in the backend, the step counter, the config.
#[derive(Debug)]
pub struct AdamW {
    config: AdamWConfig,
    /// First moments, laid out like the parameters.
    m: BufferId,
    /// Second moments, laid out like the parameters.
    v: BufferId,
    /// Elements in the parameter slab.
    len: usize,
    runs: Vec<DecayRun>,
    /// Updates applied so far.
    step: u32,
}

impl AdamW {
    /// An optimizer for `model` with zeroed moments, its config checked.
    pub fn new<K: Kernels>(
        k: &mut K,
        model: &Transformer,
        config: AdamWConfig,
    ) -> Result<AdamW, OptimError<K::Error>> {
        config.validate()?;
        let runs = decay_runs(model)?;
        let len = model.trainable().0.len;
        let m = k.alloc(len).map_err(OptimError::Backend)?;
        let v = match k.alloc(len) {
            Ok(v) => v,
            Err(e) => {
                // The first moment is released on a best-effort basis; the allocation
                // failure is the error worth reporting.
                let _ = k.free(m);
                return Err(OptimError::Backend(e));
            }
        };
        Ok(AdamW {
            config,
            m,
            v,
            len,
            runs,
            step: 0,
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &AdamWConfig {
        &self.config
    }

    /// Replaces the hyper-parameters (a resumed run may stretch its schedule), keeping
    /// the moments and the step count.
    pub fn set_config(&mut self, config: AdamWConfig) -> Result<(), ConfigError> {
        config.validate()?;
        self.config = config;
        Ok(())
    }

    /// Updates applied so far (skipped steps do not count); the next update is
    /// number `step() + 1` for bias correction and uses the schedule's rate at
    /// `step()`.
    pub fn step(&self) -> u32 {
        self.step
    }

    /// Sets the step counter, when restoring a checkpoint (with [`AdamW::moments`]).
    pub fn set_step(&mut self, step: u32) {
        self.step = step;
    }

    /// The first and second moment tensors, laid out like the parameters, for a
    /// checkpoint to read or restore.
    pub fn moments(&self) -> (Tensor, Tensor) {
        (
            Tensor::whole(self.m, self.len),
            Tensor::whole(self.v, self.len),
        )
    }

    /// Copies the config, step counter and both moments out of the backend.
    pub fn export_state<K: Kernels>(&self, k: &mut K) -> Result<AdamWState, OptimError<K::Error>> {
        let (m_tensor, v_tensor) = self.moments();
        let mut m = vec![0.0f32; self.len];
        let mut v = vec![0.0f32; self.len];
        k.read(m_tensor, &mut m).map_err(OptimError::Backend)?;
        k.read(v_tensor, &mut v).map_err(OptimError::Backend)?;
        Ok(AdamWState {
            config: self.config.clone(),
            step: self.step,
            m,
            v,
        })
    }

    /// An optimizer for `model` that continues from `state` (the config is checked and
    /// the moments are copied into the backend). Fails with
    /// [`OptimError::SlabMismatch`] when a moment's length differs from the model's
    /// parameter count.
    pub fn from_state<K: Kernels>(
        k: &mut K,
        model: &Transformer,
        state: &AdamWState,
    ) -> Result<AdamW, OptimError<K::Error>> {
        let len = model.trainable().0.len;
        for moment in [&state.m, &state.v] {
            if moment.len() != len {
                return Err(OptimError::SlabMismatch {
                    expected: moment.len(),
                    got: len,
                });
            }
        }
        let mut optimizer = AdamW::new(k, model, state.config.clone())?;
        let (m, v) = optimizer.moments();
        let copied = k
            .write(m, &state.m)
            .and_then(|()| k.write(v, &state.v))
            .map_err(OptimError::Backend);
        if let Err(e) = copied {
            // The copy failure is the error worth reporting; releasing the fresh
            // moments is best effort.
            let _ = optimizer.free(k);
            return Err(e);
        }
        optimizer.step = state.step;
        Ok(optimizer)
    }

    /// Applies the accumulated gradient of `model` (of its adapters, when it trains
    /// through LoRA adapters: then the merged weights are written again) and zeroes it.
    ///
    /// The global L2 norm of the gradient is measured first. If it is not finite the
    /// step is skipped (reported in [`StepReport::skipped`]): the gradient is zeroed and
    /// nothing else changes. Otherwise, when it exceeds `max_grad_norm`, the gradient
    /// is scaled by `max_grad_norm / (norm + 1e-6)`; then one AdamW step runs with the
    /// schedule's learning rate.
    pub fn update<K: Kernels>(
        &mut self,
        k: &mut K,
        model: &mut Transformer,
    ) -> Result<StepReport, OptimError<K::Error>> {
        // A step before any backward pass applies a zero gradient.
        model.hold_grads(k).map_err(|e| match e {
            ModelError::Backend(e) => OptimError::Backend(e),
            _ => OptimError::Frozen,
        })?;
        let (params, grads) = model.trainable();
        if params.len != self.len {
            return Err(OptimError::SlabMismatch {
                expected: self.len,
                got: params.len,
            });
        }
        let grad_norm = k.sum_squares(grads).map_err(OptimError::Backend)?.sqrt();
        let learning_rate = self.config.schedule.learning_rate(u64::from(self.step));
        let skipped = !grad_norm.is_finite();
        let mut report = StepReport {
            stats: UpdateStats {
                grad_norm,
                learning_rate,
                skipped,
            },
            clipped: false,
            skipped,
        };
        if !skipped {
            let next = self.step.checked_add(1).ok_or(OptimError::StepLimit)?;
            if let Some(max) = self.config.max_grad_norm.filter(|&max| grad_norm > max) {
                let factor = f64::from(max) / (f64::from(grad_norm) + CLIP_EPS);
                k.scale(grads, factor as f32).map_err(OptimError::Backend)?;
                report.clipped = true;
            }
            self.apply(k, params, grads, learning_rate, next)?;
            model.merge_adapters(k).map_err(|e| match e {
                ModelError::Backend(e) => OptimError::Backend(e),
                other => OptimError::Merge(other.to_string()),
            })?;
            self.step = next;
        }
        k.fill(grads, 0.0).map_err(OptimError::Backend)?;
        Ok(report)
    }

    /// One AdamW step (number `step`, 1-based) per decay run.
    fn apply<K: Kernels>(
        &self,
        k: &mut K,
        params: Tensor,
        grads: Tensor,
        learning_rate: f32,
        step: u32,
    ) -> Result<(), OptimError<K::Error>> {
        let (m, v) = self.moments();
        let c = &self.config;
        for run in &self.runs {
            let part = |t: Tensor| t.slice(run.offset, run.len);
            let hyper = AdamWStep {
                learning_rate,
                beta1: c.beta1,
                beta2: c.beta2,
                eps: c.eps,
                weight_decay: if run.decay { c.weight_decay } else { 0.0 },
                step,
            };
            k.adamw(part(params), part(grads), part(m), part(v), hyper)
                .map_err(OptimError::Backend)?;
        }
        Ok(())
    }

    /// Releases the moments.
    pub fn free<K: Kernels>(self, k: &mut K) -> Result<(), OptimError<K::Error>> {
        k.free(self.m).map_err(OptimError::Backend)?;
        k.free(self.v).map_err(OptimError::Backend)
    }
}

/// The trainable slab of `model` (its parameters, or its adapters) as maximal runs of
/// tensors with the same decay rule: a `[len, 1]` vector is not decayed, a matrix is.
/// Fails unless the named tensors cover the slab exactly once.
fn decay_runs<E>(model: &Transformer) -> Result<Vec<DecayRun>, OptimError<E>> {
    let total = model.trainable().0.len;
    let mut slots: Vec<_> = model
        .trainable_named()
        .into_iter()
        .map(|(_, slot)| slot)
        .collect();
    slots.sort_by_key(|slot| slot.offset);
    let mut runs: Vec<DecayRun> = Vec::new();
    let mut end = 0;
    for slot in slots {
        if slot.offset != end {
            return Err(OptimError::LayoutGap { offset: end });
        }
        end += slot.len;
        let decay = slot.shape[1] != 1;
        match runs.last_mut() {
            Some(run) if run.decay == decay => run.len += slot.len,
            _ => runs.push(DecayRun {
                offset: slot.offset,
                len: slot.len,
                decay,
            }),
        }
    }
    if end != total {
        return Err(OptimError::LayoutGap { offset: end });
    }
    Ok(runs)
}
