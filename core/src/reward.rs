//! PLACEHOLDER: reward, owned by a helper.
