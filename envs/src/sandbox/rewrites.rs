//! The names that tie the source rewriting (`source`) to the built-ins it rewrites to
//! (`builtins`): each bounded operator, method and check runs as a call of one of
//! these sandbox built-ins. Both modules take the names from here.

/// Name of the built-in that `a + b` is rewritten to (see `builtins.rs`).
pub(crate) const BOUNDED_ADD: &str = "_sandbox_add";

/// The comparison operators and the built-ins they are rewritten to (see `builtins.rs`):
/// each measures container operands before comparing them.
pub(crate) const BOUNDED_COMPARISONS: [(&str, &str); 8] = [
    ("==", "_sandbox_eq"),
    ("!=", "_sandbox_ne"),
    ("<", "_sandbox_lt"),
    ("<=", "_sandbox_le"),
    (">", "_sandbox_gt"),
    (">=", "_sandbox_ge"),
    ("in", "_sandbox_in"),
    ("not in", "_sandbox_not_in"),
];

/// Name of the built-in that `a * b` is rewritten to (see `builtins.rs`).
pub(crate) const BOUNDED_MUL: &str = "_sandbox_mul";

/// Name of the built-in that `a << b` is rewritten to (see `builtins.rs`).
pub(crate) const BOUNDED_SHIFT: &str = "_sandbox_shift";

/// Name of the built-in that calls of `int(...)` are rewritten to (see `builtins.rs`);
/// `int` itself stays Starlark's (it is also the type in annotations).
pub(crate) const BOUNDED_INT: &str = "_sandbox_int";

/// Name of the built-in that `a % b` is rewritten to (see `builtins.rs`).
pub(crate) const BOUNDED_PERCENT: &str = "_sandbox_percent";

/// Name of the built-in that calls of the methods in [`BOUNDED_METHODS`] are rewritten
/// to: `x.replace(a, b)` runs as `_sandbox_method(x, "replace", a, b)`.
pub(crate) const BOUNDED_METHOD: &str = "_sandbox_method";

/// Name of the built-in that checks the values an f-string interpolates:
/// `f"{x}"` runs as `(_sandbox_fstring(x) or f"{x}")`.
pub(crate) const CHECKED_FSTRING: &str = "_sandbox_fstring";

/// Methods whose calls are routed through [`BOUNDED_METHOD`], whatever the value they
/// are called on: string methods that can build a string far larger than their inputs,
/// and the list methods that compare their argument with every element and, when it is
/// missing, spell it out in their error (`index`, `remove`).
pub(crate) const BOUNDED_METHODS: [&str; 5] = ["replace", "join", "format", "index", "remove"];
