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
/// are called on: string methods that can build a string far larger than their inputs;
/// the list methods that compare their argument with every element and, when it is
/// missing, spell it out in their error (`index`, `remove`); the dict and set methods
/// that hash their argument or copy or scan a whole collection; and the string methods
/// that copy or scan the whole string. The work of all of them is charged in ticks (see
/// `work.rs`).
pub(crate) const BOUNDED_METHODS: [&str; 42] = [
    "replace",
    "join",
    "format",
    "index",
    "remove",
    "get",
    "pop",
    "setdefault",
    "add",
    "discard",
    "update",
    "union",
    "intersection",
    "difference",
    "symmetric_difference",
    "issubset",
    "issuperset",
    "extend",
    "keys",
    "values",
    "items",
    "copy",
    "upper",
    "lower",
    "strip",
    "lstrip",
    "rstrip",
    "title",
    "capitalize",
    "split",
    "rsplit",
    "splitlines",
    "elems",
    "codepoints",
    "partition",
    "rpartition",
    "removeprefix",
    "removesuffix",
    "count",
    "find",
    "rfind",
    "rindex",
];

/// Name of the built-in that calls of [`CHARGED_BUILTINS`] are rewritten to:
/// `set(xs)` runs as `_sandbox_builtin("set", xs)`, which charges the work its
/// arguments cost (see `work.rs`) and calls Starlark's own.
pub(crate) const CHARGED_BUILTIN: &str = "_sandbox_builtin";

/// The collection constructors, whose work grows with their argument. Their names stay
/// Starlark's own, since they are also the types of annotations (`list[str]`), so their
/// calls are rewritten to [`CHARGED_BUILTIN`], and other uses of these names as values
/// (`f = set`) are refused. (The other built-ins whose work grows with their arguments,
/// `sorted`, `min`, `max`, ..., are replaced by checked ones outright.)
pub(crate) const CHARGED_BUILTINS: [&str; 4] = ["set", "dict", "list", "tuple"];

/// Name of the built-in that a subscript's index and a dict literal's keys are wrapped
/// in: `d[k]` runs as `d[_sandbox_key(k)]`, which measures what hashing or comparing `k`
/// visits (a tuple shared a million times over) and charges it before the lookup.
pub(crate) const CHECKED_KEY: &str = "_sandbox_key";

/// Name of the built-in that a slice's object is wrapped in: `x[a:b]` runs as
/// `_sandbox_sliced(x)[a:b]`, which charges the elements the slice can copy.
pub(crate) const CHECKED_SLICE: &str = "_sandbox_sliced";

/// Name of the built-in that non-empty dict literals and dict comprehensions are
/// wrapped in: `{k: v for ...}` runs as `_sandbox_entries({k: v for ...})`, which
/// records the entries the dict holds outside the heap (see `work.rs`) and checks the
/// memory limit.
pub(crate) const CHECKED_ENTRIES: &str = "_sandbox_entries";

/// The operators that build a new dict or set from two (`|`, `&`, `^`, `-`) and the
/// built-ins they are rewritten to (see `charged.rs`): on dicts and sets they charge the
/// entries they hash and record those they build; on numbers they are the plain
/// operators.
pub(crate) const COLLECTION_OPERATORS: [(&str, &str); 4] = [
    ("|", "_sandbox_or"),
    ("&", "_sandbox_and"),
    ("^", "_sandbox_xor"),
    ("-", "_sandbox_sub"),
];
