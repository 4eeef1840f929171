//! GRPO math for SAGE's policy update, as pure functions over caller-provided slices:
//! group advantages ([`group_advantages`], [`chain_advantages`]) and the clipped
//! surrogate loss with its per-token derivative ([`policy_loss`]), which a trainer
//! hands to [`Policy::accumulate_gradient`](crate::Policy::accumulate_gradient).
//!
//! This module owns no model and no data: it never allocates, never panics on bad
//! shapes (it returns [`GrpoError`]) and uses `libm` for `exp` and `sqrt`.
//!
//! # SAGE's loss
//!
//! For one chain with `G` rollouts of `K` tasks, SAGE writes
//! `Loss = (1/G) sum_i sum_k (1/|o_i^k|) sum_t loss_t` over the model's own tokens of
//! task trajectory `o_i^k`. With the `G * K` trajectories as sequences,
//! [`LossAggregation::SeqMeanTokenMean`] computes `(1/(G K)) sum_i sum_k (1/|o_i^k|)
//! sum_t loss_t`: the same loss divided by the constant `K`, which only rescales the
//! learning rate (and not at all under Adam without gradient clipping). A trainer that
//! wants SAGE's exact scale multiplies the loss and the coefficients by `K`.

mod advantage;
mod config;
mod error;
mod loss;
mod token;

pub use advantage::{chain_advantages, group_advantages, weight_negative_advantages};
pub use config::{GrpoConfig, LossAggregation};
pub use error::GrpoError;
pub use loss::{policy_loss, GrpoStats, TokenBatch};
