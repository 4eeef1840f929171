//! # sage-core
//!
//! The `no_std` heart of SAGE (Skill Augmented GRPO for self-Evolution): everything an
//! agent needs to write, keep and reuse skills, and everything a trainer needs to turn
//! rollouts into a policy update. No I/O, no threads, no weights, no model: the
//! transformer and its backend contract are in `sage-transformer`.
//!
//! - [`skill`]: the [`Skill`] record, the skill parser (model output -> code blocks ->
//!   top-level function definitions and calls) and the [`SkillLibrary`].
//! - [`retrieval`]: which skills a task sees (same scenario, query n-gram Jaccard,
//!   embedding cosine through an [`retrieval::Embedder`]).
//! - [`reward`]: the skill-integrated reward, its ablations and the no-code penalty.
//! - [`grpo`]: group advantages, clipped-surrogate token coefficients, KL and loss
//!   aggregation, as pure functions over caller-provided slices.
//! - [`env`](mod@env) and [`policy`]: the two traits a user implements to plug in a
//!   world and a model, with the task, chain and episode records they exchange.
//!
//! This crate must not do I/O, spawn threads or depend on `std`; the `std` feature only
//! adds `std::error::Error` impls.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod env;
pub mod grpo;
pub mod policy;
pub mod retrieval;
pub mod reward;
pub mod skill;

pub use env::{Environment, Episode, Evaluation, Scenario, Task, TaskChain, Turn};
pub use policy::Policy;
pub use skill::{Origin, Param, ParamKind, Skill, SkillLibrary, SkillStats};
