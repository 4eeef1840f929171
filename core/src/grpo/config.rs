//! [`GrpoConfig`] and [`LossAggregation`]: the settings of the policy update, with
//! SAGE's values as defaults.

use serde::{Deserialize, Serialize};

use super::GrpoError;

/// How per-token losses are combined into the batch loss. `n_s` is the number of
/// unmasked tokens of sequence `s`, `N = sum_s n_s`, and `S` the number of sequences
/// with at least one unmasked token (sequences without any are ignored, as if absent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LossAggregation {
    /// `(1 / N) sum_s sum_t loss_t`: every token weighs the same.
    TokenMean,
    /// `(1 / S) sum_s (1 / n_s) sum_t loss_t`: every sequence weighs the same (SAGE).
    #[default]
    SeqMeanTokenMean,
    /// `(1 / S) sum_s sum_t loss_t`: longer sequences weigh more.
    SeqMeanTokenSum,
    /// `(1 / (S * L)) sum_s sum_t loss_t` with the constant `L =
    /// GrpoConfig::norm_length` (Dr. GRPO): no dependence on the sequences' lengths.
    SeqMeanTokenSumNorm,
}

/// Settings of the GRPO policy loss and advantages. The defaults are SAGE's: clip 0.2 on
/// both sides, no dual clip, no KL term, [`LossAggregation::SeqMeanTokenMean`],
/// advantages centred but not divided by the standard deviation.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GrpoConfig {
    /// Lower clip range: the ratio is clipped below at `1 - clip_eps_low`; in `[0, 1]`.
    pub clip_eps_low: f32,
    /// Upper clip range: the ratio is clipped above at `1 + clip_eps_high`; `>= 0`
    /// (set it above `clip_eps_low` for clip-higher).
    pub clip_eps_high: f32,
    /// Dual clip constant `c > 1`: for a negative advantage `A` the token loss is capped
    /// at `c * |A|`. `None` disables it.
    pub dual_clip: Option<f32>,
    /// Weight `beta >= 0` of the k3 KL estimate to the reference policy; 0 disables it.
    pub kl_coef: f32,
    /// How token losses are combined.
    pub aggregation: LossAggregation,
    /// Divide advantages by the group's population standard deviation plus `std_eps`.
    pub normalize_std: bool,
    /// Added to the standard deviation before dividing; `>= 0`.
    pub std_eps: f32,
    /// Log-ratios (and reference log-differences) are clamped to `[-m, m]` before
    /// `exp`, so no ratio overflows; in `(0, 80]`.
    pub max_log_ratio: f32,
    /// The constant length `L` of [`LossAggregation::SeqMeanTokenSumNorm`]; `> 0`.
    pub norm_length: u32,
    /// Weight of negative advantages, in `[0, 1]`: 1 is GRPO's update, below 1 lowers
    /// the failed answers less than it raises the successful ones, 0 only reinforces
    /// successes. Applied by [`weight_negative_advantages`](super::weight_negative_advantages)
    /// after centring (and any std normalisation); a caller of
    /// [`chain_advantages`](super::chain_advantages) calls it next, as the trainer does.
    pub negative_weight: f32,
}

impl Default for GrpoConfig {
    fn default() -> Self {
        GrpoConfig {
            clip_eps_low: 0.2,
            clip_eps_high: 0.2,
            dual_clip: None,
            kl_coef: 0.0,
            aggregation: LossAggregation::default(),
            normalize_std: false,
            std_eps: 1e-6,
            max_log_ratio: 20.0,
            norm_length: 1500,
            negative_weight: 1.0,
        }
    }
}

impl GrpoConfig {
    /// Checks every setting against its documented range.
    pub fn validate(&self) -> Result<(), GrpoError> {
        let invalid = |what| Err(GrpoError::InvalidConfig { what });
        if !(0.0..=1.0).contains(&self.clip_eps_low) {
            return invalid("clip_eps_low must be in [0, 1]");
        }
        if !(self.clip_eps_high >= 0.0 && self.clip_eps_high.is_finite()) {
            return invalid("clip_eps_high must be finite and >= 0");
        }
        if let Some(c) = self.dual_clip {
            if !(c > 1.0 && c.is_finite()) {
                return invalid("dual_clip must be finite and > 1");
            }
        }
        if !(self.kl_coef >= 0.0 && self.kl_coef.is_finite()) {
            return invalid("kl_coef must be finite and >= 0");
        }
        if !(self.std_eps >= 0.0 && self.std_eps.is_finite()) {
            return invalid("std_eps must be finite and >= 0");
        }
        if !(self.max_log_ratio > 0.0 && self.max_log_ratio <= 80.0) {
            return invalid("max_log_ratio must be in (0, 80]");
        }
        if self.norm_length == 0 {
            return invalid("norm_length must be > 0");
        }
        if !(0.0..=1.0).contains(&self.negative_weight) {
            return invalid("negative_weight must be in [0, 1]");
        }
        Ok(())
    }
}
