//! End-to-end tests across the SAGE crates live beside this file, one `[[test]]` each.
//!
//! The library itself holds what several of them share: [`backend_parity`], the
//! parity tests of any `Kernels` backend against the CPU oracle, written once and
//! instantiated per backend with [`backend_parity_tests!`].
#![forbid(unsafe_code)]

pub mod backend_parity;
