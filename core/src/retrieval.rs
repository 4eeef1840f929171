//! PLACEHOLDER: retrieval, owned by a helper.
