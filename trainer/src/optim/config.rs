//! [`AdamWConfig`]: the optimizer's hyper-parameters, serde-able for run configs.

use serde::{Deserialize, Serialize};

use super::error::ConfigError;
use super::schedule::LrSchedule;

/// Hyper-parameters of [`AdamW`](super::AdamW) with global-norm gradient clipping.
/// Missing fields take their [`Default`] values when deserialised.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AdamWConfig {
    /// The learning rate per step.
    pub schedule: LrSchedule,
    /// First-moment decay, in [0, 1).
    pub beta1: f32,
    /// Second-moment decay, in [0, 1).
    pub beta2: f32,
    /// Added to the root of the second moment; positive.
    pub eps: f32,
    /// Decoupled weight decay of matrices (norm weights and biases are not decayed).
    pub weight_decay: f32,
    /// Clip the gradient's global L2 norm to this value; `None` disables clipping.
    pub max_grad_norm: Option<f32>,
}

impl Default for AdamWConfig {
    /// PyTorch's AdamW defaults (lr 1e-3, betas 0.9 and 0.999, eps 1e-8, weight decay
    /// 0.01) with clipping at norm 1.
    fn default() -> Self {
        AdamWConfig {
            schedule: LrSchedule::Constant { lr: 1e-3 },
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
            max_grad_norm: Some(1.0),
        }
    }
}

impl AdamWConfig {
    /// Checks every hyper-parameter's range, the schedule's included.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.schedule.validate()?;
        let beta_ok = |b: f32| (0.0..1.0).contains(&b);
        if !beta_ok(self.beta1) {
            return Err(ConfigError::new("beta1", "in [0, 1)"));
        }
        if !beta_ok(self.beta2) {
            return Err(ConfigError::new("beta2", "in [0, 1)"));
        }
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return Err(ConfigError::new("eps", "a finite number > 0"));
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return Err(ConfigError::new("weight_decay", "a finite number >= 0"));
        }
        match self.max_grad_norm {
            Some(max) if !(max.is_finite() && max > 0.0) => Err(ConfigError::new(
                "max_grad_norm",
                "a finite number > 0 (or absent)",
            )),
            _ => Ok(()),
        }
    }
}

impl AdamWConfig {
    /// [`AdamWConfig::validate`], reading a `warmup_cosine` `total_steps` of 0 as "the
    /// run's length", which is filled in when the run starts.
    pub fn validate_ignoring_auto_length(&self) -> Result<(), ConfigError> {
        let mut resolved = self.clone();
        resolved.resolve_total_steps(u64::MAX);
        resolved.validate()
    }

    /// Sets a `warmup_cosine` `total_steps` of 0 to `steps`.
    pub fn resolve_total_steps(&mut self, steps: u64) {
        if let LrSchedule::WarmupCosine { total_steps, .. } = &mut self.schedule {
            if *total_steps == 0 {
                *total_steps = steps.max(1);
            }
        }
    }
}
