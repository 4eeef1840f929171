//! [`LrSchedule`]: the learning rate as a function of the optimizer step.

use std::f64::consts::PI;

use serde::{Deserialize, Serialize};

use super::error::ConfigError;

/// How the learning rate evolves over optimizer steps. Steps are counted from 0: the
/// first update uses `learning_rate(0)`.
///
/// Serialised externally tagged, e.g. `{"constant": {"lr": 0.001}}`: an internally
/// tagged enum would not deserialise numbers while `serde_json`'s
/// `arbitrary_precision` feature is on, which a dependency of the workspace enables.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LrSchedule {
    /// The same learning rate at every step.
    Constant {
        /// The learning rate.
        lr: f32,
    },
    /// Linear warmup to `peak_lr`, then cosine decay to `min_lr`:
    /// - step t < warmup_steps: `peak_lr * (t + 1) / warmup_steps` (the first update
    ///   is not wasted at 0, and step `warmup_steps - 1` reaches the peak);
    /// - warmup_steps <= t < total_steps: `min_lr + (peak_lr - min_lr) * (1 + cos(pi *
    ///   (t - warmup_steps) / (total_steps - warmup_steps))) / 2`;
    /// - t >= total_steps: `min_lr`.
    WarmupCosine {
        /// The learning rate at the end of warmup.
        peak_lr: f32,
        /// The floor reached at `total_steps`.
        min_lr: f32,
        /// Steps of linear warmup (0: start at the peak).
        warmup_steps: u64,
        /// The step at which the decay reaches `min_lr`; at least `warmup_steps`.
        total_steps: u64,
    },
}

impl LrSchedule {
    /// The learning rate of step `step` (0-based).
    pub fn learning_rate(&self, step: u64) -> f32 {
        match *self {
            LrSchedule::Constant { lr } => lr,
            LrSchedule::WarmupCosine {
                peak_lr,
                min_lr,
                warmup_steps,
                total_steps,
            } => {
                let (peak, floor) = (f64::from(peak_lr), f64::from(min_lr));
                let lr = if step < warmup_steps {
                    peak * (step + 1) as f64 / warmup_steps as f64
                } else if step < total_steps {
                    let progress =
                        (step - warmup_steps) as f64 / (total_steps - warmup_steps) as f64;
                    floor + (peak - floor) * 0.5 * (1.0 + (PI * progress).cos())
                } else {
                    floor
                };
                lr as f32
            }
        }
    }

    /// Checks that every rate is finite and non-negative, the floor is at most the
    /// peak, and warmup ends no later than the decay.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let rate_ok = |x: f32| x.is_finite() && x >= 0.0;
        match *self {
            LrSchedule::Constant { lr } if !rate_ok(lr) => {
                Err(ConfigError::new("lr", "a finite number >= 0"))
            }
            LrSchedule::Constant { .. } => Ok(()),
            LrSchedule::WarmupCosine {
                peak_lr,
                min_lr,
                warmup_steps,
                total_steps,
            } => {
                if !rate_ok(peak_lr) {
                    Err(ConfigError::new("peak_lr", "a finite number >= 0"))
                } else if !rate_ok(min_lr) || min_lr > peak_lr {
                    Err(ConfigError::new(
                        "min_lr",
                        "a finite number in [0, peak_lr]",
                    ))
                } else if total_steps < warmup_steps {
                    Err(ConfigError::new("total_steps", "at least warmup_steps"))
                } else {
                    Ok(())
                }
            }
        }
    }
}
