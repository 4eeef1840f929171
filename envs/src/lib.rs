//! # sage-envs
//!
//! Worlds that implement `sage_core::Environment`. What exists so far:
//!
//! - [`sandbox`]: the code sandbox agent code runs in: Starlark sessions that persist
//!   across an episode's turns, resource limits, the `apis` object backed by an
//!   [`ApiHost`](sandbox::ApiHost), and run-time tracing of the functions that were
//!   defined, called and completed (what skill saving and "skill used" need).
//!
//! - [`world`]: the built-in world, an [`ApiHost`](sandbox::ApiHost): a seeded,
//!   deterministic simulation of a person's everyday apps (music, payments, email,
//!   phone, notes, to-do lists, shopping, files, bill splitting) plus the `supervisor`
//!   and `api_docs` apps; typed tables with snapshots and field-level diffs.
//!
//! Still to come (issue 4): scenarios and state-based evaluation on top of the world,
//! the scripted expert, the `Environment` implementation on top of the sandbox, and a
//! tiny test environment for unit tests of the RL loop.
//!
//! This crate does no I/O of its own: agent code cannot reach files, the network or the
//! clock.

pub mod environment;
pub mod expert;
pub mod prompt;
pub mod sandbox;
pub mod scenarios;
pub mod tiny;
mod turn;
pub mod world;
