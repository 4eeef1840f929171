//! # sage-envs
//!
//! Worlds that implement `sage_core::Environment`:
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
//! - [`scenarios`]: the task layer: 44 scenario templates (a template and a seed give
//!   3 similar tasks in one world), the splits (train, iid, dev, test-normal,
//!   test-challenge) with stable ids, the [`Catalog`](scenarios::Catalog) of built
//!   scenarios, and state-based evaluation against each task's expected diff and
//!   answer.
//!
//! - [`environment`]: [`WorldEnv`](environment::WorldEnv), the catalog's tasks as a
//!   `sage_core::Environment` (fresh world and sandbox per episode, library skills
//!   loaded, per-turn defined/saved/used skills, turn limit, no-code ending).
//!
//! - [`expert`]: the scripted expert that solves every template through `WorldEnv`, in
//!   the skill format or with direct API calls, and exports chat JSON lines; [`prompt`]
//!   holds the chat texts it and any agent see.
//!
//! - [`tiny`]: a tiny, fast environment whose tasks reward reusing a function, for unit
//!   tests of the RL loop.
//!
//! This crate does no I/O of its own: agent code cannot reach files, the network or the
//! clock.
#![deny(unsafe_code)]

pub mod environment;
pub mod expert;
pub mod names;
pub mod prompt;
pub mod sandbox;
pub mod scenarios;
pub mod tiny;
mod turn;
pub mod world;
