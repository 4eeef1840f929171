//! PLACEHOLDER: grpo, owned by a helper.
