//! The checked built-ins whose work grows with their arguments (see `work.rs`):
//! `sorted`, `min`, `max`, `reversed`, `enumerate`, `zip`, `any`, `all` and `hash`,
//! which replace Starlark's; the built-ins the source rewriting routes work through
//! (`_sandbox_builtin` for calls of the collection constructors, `_sandbox_key` around
//! subscripts' indices and dict keys, `_sandbox_sliced` around a slice's object,
//! `_sandbox_entries` around dict literals and comprehensions, `_sandbox_or`, `_and`,
//! `_xor`, `_sub` for the operators that build dicts and sets); and the measure of a
//! routed method call's work, for `_sandbox_method`.

use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::dict::DictRef;
use starlark::values::tuple::{AllocTuple, UnpackTuple};
use starlark::values::{Heap, Value};

use super::builtins::{is_container, standard_builtin};
use super::context::ExecContext;
use super::error::ExecErrorKind;
use super::text::check_comparison_size;
use super::work::{charge, record_entries};

/// Elements in `value` if it has a length (a string, list, tuple, dict, set, range).
fn length(value: Value<'_>) -> Option<u64> {
    value.length().ok().map(|n| n.max(0) as u64)
}

/// Bytes of text a tick pays for: copying, hashing or comparing text runs at about a
/// byte per nanosecond, where a tick of interpreted code takes 20 to 50.
const TEXT_BYTES_PER_TICK: u64 = 32;

/// Elements a tick pays for when a call only copies or scans references to them
/// (`list`, `tuple`, `reversed`, `enumerate`, `zip`, `any`, `all`, a slice, `extend`,
/// `join`, `keys`, `values`, `items`, `copy`): a few nanoseconds each, where hashing or
/// comparing one (`set`, `dict`, `sorted`, `min`, `max`, a dict key) costs a tick.
const COPIED_ELEMENTS_PER_TICK: u64 = 4;

/// Whether the built-in or method `name` only copies or scans references to the
/// elements of its arguments (see [`COPIED_ELEMENTS_PER_TICK`]).
fn only_copies(name: &str) -> bool {
    matches!(
        name,
        "list"
            | "tuple"
            | "reversed"
            | "enumerate"
            | "zip"
            | "any"
            | "all"
            | "extend"
            | "join"
            | "keys"
            | "values"
            | "items"
            | "copy"
    )
}

/// Ticks the call of `name` spends on its argument `value`: for a container, the
/// elements it copies (see [`COPIED_ELEMENTS_PER_TICK`]) or what comparing or hashing
/// it visits (its elements, nested and shared ones each time, see
/// [`check_comparison_size`]); its bytes over [`TEXT_BYTES_PER_TICK`] for a string; its
/// length for anything else that has one (a range); at least 1.
fn elements_visited<'v>(
    ctx: &ExecContext,
    name: &str,
    value: Value<'v>,
    heap: Heap<'v>,
) -> starlark::Result<u64> {
    let ticks = if only_copies(name) && value.unpack_str().is_none() {
        length(value).unwrap_or(1) / COPIED_ELEMENTS_PER_TICK
    } else if is_container(value) {
        check_comparison_size(ctx, value, heap)?
    } else if let Some(text) = value.unpack_str() {
        text.len() as u64 / TEXT_BYTES_PER_TICK
    } else {
        length(value).unwrap_or(1)
    };
    Ok(ticks.max(1))
}

/// Dict or set entries in `value`, if it is a dict or a set.
fn entries(value: Value<'_>) -> Option<u64> {
    matches!(value.get_type(), "dict" | "set")
        .then(|| length(value))
        .flatten()
}

/// Ticks a call of the collection built-in `name` with `args` costs: the elements it
/// visits in its arguments, times the comparisons per element of a sort (log2 of their
/// count) for `sorted`.
fn builtin_work<'v>(
    ctx: &ExecContext,
    name: &str,
    args: &[Value<'v>],
    heap: Heap<'v>,
) -> starlark::Result<u64> {
    let mut work = 0u64;
    for arg in args {
        work = work.saturating_add(elements_visited(ctx, name, *arg, heap)?);
    }
    if name == "sorted" {
        let count = args.first().and_then(|xs| length(*xs)).unwrap_or(1);
        let comparisons = u64::from(64 - count.leading_zeros()).max(1);
        work = work.saturating_mul(comparisons);
    }
    Ok(work.max(1))
}

/// Ticks a call of method `name` on `this` with `args` costs (the methods routed
/// through `_sandbox_method`): a string receiver's bytes (see [`TEXT_BYTES_PER_TICK`]),
/// or the receiver's elements for the methods that copy or scan a collection, plus the
/// elements each argument makes it visit (a key it hashes, a collection it
/// adds), at least 1.
fn method_work<'v>(
    ctx: &ExecContext,
    this: Value<'v>,
    name: &str,
    args: &[Value<'v>],
    heap: Heap<'v>,
) -> starlark::Result<u64> {
    let scans_receiver = matches!(
        name,
        "keys"
            | "values"
            | "items"
            | "copy"
            | "union"
            | "intersection"
            | "difference"
            | "symmetric_difference"
            | "issubset"
            | "issuperset"
            | "index"
            | "remove"
    );
    let mut work = match (this.unpack_str(), scans_receiver, only_copies(name)) {
        (Some(text), ..) => text.len() as u64 / TEXT_BYTES_PER_TICK,
        (None, true, true) => length(this).unwrap_or(0) / COPIED_ELEMENTS_PER_TICK,
        (None, true, false) => length(this).unwrap_or(0),
        (None, false, _) => 0,
    };
    for arg in args {
        // `format` measures (and bounds) the text of its arguments itself.
        let visited = if name == "format" {
            1
        } else {
            elements_visited(ctx, name, *arg, heap)?
        };
        work = work.saturating_add(visited);
    }
    Ok(work.max(1))
}

/// The keyword arguments of a call, named.
pub(crate) fn named_arguments<'v>(kwargs: DictRef<'v>) -> Vec<(String, Value<'v>)> {
    kwargs
        .iter()
        .map(|(k, v)| (k.unpack_str().unwrap_or_default().to_owned(), v))
        .collect()
}

/// Calls `this.name(*args, **named)` (a method routed through `_sandbox_method`) once
/// its work is charged (see [`method_work`]), and records the dict or set entries it
/// built outside the heap: those it added to `this` and those of a new dict or set it
/// returned.
pub(crate) fn call_method_charged<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    this: Value<'v>,
    name: &str,
    args: &[Value<'v>],
    named: &[(String, Value<'v>)],
) -> starlark::Result<Value<'v>> {
    let heap = eval.heap();
    charge(
        eval,
        method_work(ExecContext::of(eval)?, this, name, args, heap)?,
    )?;
    let method = this.get_attr_error(name, heap)?;
    let named: Vec<(&str, Value<'v>)> = named.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    let before = entries(this);
    let result = eval.eval_function(method, args, &named)?;
    let added = entries(this)
        .zip(before)
        .map_or(0, |(after, before)| after.saturating_sub(before));
    let returned = if result.ptr_eq(this) {
        0
    } else {
        entries(result).unwrap_or(0)
    };
    record_entries(eval, added.saturating_add(returned))?;
    Ok(result)
}

/// Calls Starlark's built-in `name` with `args` and `kwargs` once the work they cost is
/// charged, and records the entries of a dict or set it built.
fn call_charged<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    name: &str,
    args: &[Value<'v>],
    kwargs: DictRef<'v>,
) -> starlark::Result<Value<'v>> {
    let heap = eval.heap();
    let named = named_arguments(kwargs);
    let ctx = ExecContext::of(eval)?;
    let mut work = builtin_work(ctx, name, args, heap)?;
    for (_, value) in &named {
        work = work.saturating_add(elements_visited(ctx, name, *value, heap)?);
    }
    charge(eval, work)?;
    let builtin = standard_builtin(ctx, name)?;
    let named: Vec<(&str, Value<'v>)> = named.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    let result = eval.eval_function(builtin.to_value(), args, &named)?;
    record_entries(eval, entries(result).unwrap_or(0))?;
    Ok(result)
}

/// `op(a, b)` for an operator that builds a new dict or set from two: when either
/// operand is a dict or a set, the entries it hashes are charged first and the entries
/// of the result recorded after; on anything else (numbers) it is the plain operator.
fn collection_operator<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    a: Value<'v>,
    b: Value<'v>,
    op: impl FnOnce(Value<'v>, Value<'v>, Heap<'v>) -> starlark::Result<Value<'v>>,
) -> starlark::Result<Value<'v>> {
    let heap = eval.heap();
    let (a_entries, b_entries) = (entries(a), entries(b));
    if a_entries.is_none() && b_entries.is_none() {
        return op(a, b, heap);
    }
    let hashed = a_entries
        .unwrap_or(0)
        .saturating_add(b_entries.unwrap_or(0));
    charge(eval, hashed.max(1))?;
    let result = op(a, b, heap)?;
    record_entries(eval, entries(result).unwrap_or(0))?;
    Ok(result)
}

#[starlark_module]
pub(crate) fn charged_builtins(builder: &mut GlobalsBuilder) {
    /// `name(*args, **kwargs)` for the collection constructors calls are rewritten for
    /// (`set`, `dict`, `list`, `tuple`): Starlark's own, once the work its arguments cost
    /// is charged (see `work.rs`).
    fn _sandbox_builtin<'v>(
        #[starlark(require = pos)] name: &str,
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        call_charged(eval, name, &args.items, kwargs)
    }

    /// `sorted(xs, key=None, reverse=False)`: Starlark's, its comparisons charged first.
    fn sorted<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        call_charged(eval, "sorted", &args.items, kwargs)
    }

    /// `min(xs)` or `min(a, b, ...)`: Starlark's, its comparisons charged first.
    fn min<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        call_charged(eval, "min", &args.items, kwargs)
    }

    /// `max(xs)` or `max(a, b, ...)`: Starlark's, its comparisons charged first.
    fn max<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        call_charged(eval, "max", &args.items, kwargs)
    }

    /// `reversed(xs)`: Starlark's, the copy charged first.
    fn reversed<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        call_charged(eval, "reversed", &args.items, kwargs)
    }

    /// `enumerate(xs, start=0)`: Starlark's, the pairs it builds charged first.
    fn enumerate<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        call_charged(eval, "enumerate", &args.items, kwargs)
    }

    /// `zip(*xs)`: Starlark's, the tuples it builds charged first.
    fn zip<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        call_charged(eval, "zip", &args.items, kwargs)
    }

    /// `any(xs)`: Starlark's, the scan charged first.
    fn any<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        call_charged(eval, "any", &args.items, kwargs)
    }

    /// `all(xs)`: Starlark's, the scan charged first.
    fn all<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        call_charged(eval, "all", &args.items, kwargs)
    }

    /// `hash(x)`: Starlark's, what hashing `x` visits charged first.
    fn hash<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        call_charged(eval, "hash", &args.items, kwargs)
    }

    /// A dict built by a literal or a comprehension, returned as it is once its entries
    /// are recorded (see `work.rs`): `{...}` runs as `_sandbox_entries({...})`.
    fn _sandbox_entries<'v>(
        #[starlark(require = pos)] dict: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        record_entries(eval, entries(dict).unwrap_or(0))?;
        Ok(dict)
    }

    /// `a | b` (see [`collection_operator`]).
    fn _sandbox_or<'v>(
        #[starlark(require = pos)] a: Value<'v>,
        #[starlark(require = pos)] b: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        collection_operator(eval, a, b, |a, b, heap| a.bit_or(b, heap))
    }

    /// `a & b` (see [`collection_operator`]).
    fn _sandbox_and<'v>(
        #[starlark(require = pos)] a: Value<'v>,
        #[starlark(require = pos)] b: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        collection_operator(eval, a, b, |a, b, heap| a.bit_and(b, heap))
    }

    /// `a ^ b` (see [`collection_operator`]).
    fn _sandbox_xor<'v>(
        #[starlark(require = pos)] a: Value<'v>,
        #[starlark(require = pos)] b: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        collection_operator(eval, a, b, |a, b, heap| a.bit_xor(b, heap))
    }

    /// `a - b` (see [`collection_operator`]).
    fn _sandbox_sub<'v>(
        #[starlark(require = pos)] a: Value<'v>,
        #[starlark(require = pos)] b: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        collection_operator(eval, a, b, |a, b, heap| a.sub(b, heap))
    }

    /// The object of a slice, returned as it is once the elements the slice can copy
    /// (all of them, see [`COPIED_ELEMENTS_PER_TICK`]) are charged (`x[a:b]` runs as `_sandbox_sliced(x)[a:b]`).
    fn _sandbox_sliced<'v>(
        #[starlark(require = pos)] object: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        charge(
            eval,
            (length(object).unwrap_or(1) / COPIED_ELEMENTS_PER_TICK).max(1),
        )?;
        Ok(object)
    }

    /// A subscript's index or a dict literal's key, returned as it is once what hashing
    /// or comparing it visits is measured and charged (`d[k]` runs as
    /// `d[_sandbox_key(k)]`). Several values (`d[a, b]`) are returned as their tuple.
    fn _sandbox_key<'v>(
        #[starlark(args)] keys: UnpackTuple<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let ctx = ExecContext::of(eval)?;
        let mut work = 0u64;
        for key in keys.items.iter().filter(|key| is_container(**key)) {
            work = work.saturating_add(check_comparison_size(ctx, *key, eval.heap())?);
        }
        if work > 0 {
            charge(eval, work)?;
        }
        match keys.items.as_slice() {
            [key] => Ok(*key),
            [] => Err(ctx.raise(
                ExecErrorKind::Internal,
                "a subscript without an index".to_owned(),
            )),
            many => Ok(eval.heap().alloc(AllocTuple(many.iter().copied()))),
        }
    }
}
