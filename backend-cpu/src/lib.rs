//! # sage-backend-cpu
//!
//! The CPU backend of the SAGE transformer: f32 kernels parallelised with rayon, and the
//! oracle every other backend is tested against. It implements the `Kernels` contract of
//! `sage-core` and nothing else: no model logic, no I/O.
//!
//! Status: the `Kernels` trait and these kernels arrive with the transformer work
//! (issue 3); this crate holds no code yet, so that the workspace layout and the
//! backend cargo features are in place from the start.
#![forbid(unsafe_code)]
