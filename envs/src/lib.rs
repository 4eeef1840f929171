//! # sage-envs
//!
//! Worlds that implement `sage_core::Environment`: the built-in simulated-apps world
//! with its Starlark code sandbox, scenarios, state-based evaluation and scripted
//! expert, and a tiny test environment for unit tests of the RL loop.
//!
//! Status: arrives with the built-in world (issue 4); this crate holds no code yet.
