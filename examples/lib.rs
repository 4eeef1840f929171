//! Example programs over the SAGE crates; see the `[[example]]` entries of this
//! package's `Cargo.toml`. The library itself only compiles the README's Rust example
//! as a doctest, so the README cannot drift from the API.
#![forbid(unsafe_code)]

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
