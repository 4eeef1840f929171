//! End-to-end tests across the SAGE crates live beside this file, one `[[test]]` each.
