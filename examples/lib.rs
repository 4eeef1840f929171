//! Example programs over the SAGE crates; see the `[[example]]` entries of this
//! package's `Cargo.toml`. The library itself is empty.
