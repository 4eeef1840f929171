//! Templates (stub).

use super::Template;

/// The templates.
pub(super) const TEMPLATES: &[Template] = &[];
