//! The optimizer of the transformer policy: AdamW with decoupled weight decay on
//! matrices, global-norm gradient clipping, and learning-rate schedules.
//!
//! - [`AdamW`]: moments in the backend, one update per call, state exposed for
//!   checkpoints as an [`AdamWState`];
//! - [`AdamWConfig`]: its serde-able hyper-parameters;
//! - [`LrSchedule`]: constant, or linear warmup then cosine decay to a floor;
//! - [`OptimError`], [`ConfigError`]: what can go wrong.

mod adamw;
mod config;
mod error;
mod schedule;

pub use adamw::{AdamW, AdamWState, StepReport};
pub use config::AdamWConfig;
pub use error::{ConfigError, OptimError};
pub use schedule::LrSchedule;
