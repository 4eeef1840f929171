//! Bounded conversion of values to text. Printing or formatting a value makes the
//! interpreter recurse once per nesting level and repeat shared elements each time they
//! appear, so a deep or self-multiplying value (`x = [x, x]` in a loop) could exhaust
//! the stack or memory inside a single built-in call. [`check_text_size`] walks the
//! value first, without recursion, and refuses it when it is nested deeper than
//! [`Limits::max_value_depth`](super::Limits::max_value_depth) or would spell out more
//! than [`Limits::max_sequence_len`](super::Limits::max_sequence_len) elements, or
//! when its text would take more bytes than
//! [`Limits::max_heap_bytes`](super::Limits::max_heap_bytes) (a shared string repeated
//! many times). [`check_text_bytes`] refuses any single string built larger than that.

use std::collections::HashMap;

use starlark::values::dict::DictRef;
use starlark::values::list::ListRef;
use starlark::values::tuple::TupleRef;
use starlark::values::{Heap, Value, ValueIdentity};

use super::context::ExecContext;
use super::error::ExecErrorKind;
use super::limits::LimitKind;

/// The elements of `value` if it is a container whose text shows its elements.
fn elements<'v>(value: Value<'v>, heap: Heap<'v>) -> Option<Vec<Value<'v>>> {
    if let Some(list) = ListRef::from_value(value) {
        return Some(list.content().to_vec());
    }
    if let Some(tuple) = TupleRef::from_value(value) {
        return Some(tuple.content().to_vec());
    }
    if let Some(dict) = DictRef::from_value(value) {
        return Some(dict.iter().flat_map(|(k, v)| [k, v]).collect());
    }
    if value.get_type() == "set" {
        return value.iterate(heap).ok().map(|items| items.collect());
    }
    None
}

/// Bytes the text of a value that shows no elements takes, about; cached by identity
/// because a shared value may appear many times.
fn scalar_bytes<'v>(value: Value<'v>, cache: &mut HashMap<ValueIdentity<'v>, u64>) -> u64 {
    if let Some(s) = value.unpack_str() {
        // The quotes of its `repr`.
        return s.len() as u64 + 2;
    }
    match value.get_type() {
        "int" if value.unpack_i32().is_some() => 11,
        "float" => 32,
        "bool" | "NoneType" => 5,
        _ => *cache
            .entry(value.identity())
            .or_insert_with(|| value.to_repr().len() as u64),
    }
}

/// About how many bytes the text of `value` takes (an upper estimate for `str`, close
/// for `repr`); fails when that passes the memory limit (the walk stops there, so it
/// stays short for self-multiplying data) and, when `nesting` is set, when the value
/// nests deeper or spells out more elements than the limits allow (for conversions
/// that recurse once per level). Cheap for scalars.
pub(crate) fn text_bytes<'v>(
    ctx: &ExecContext,
    value: Value<'v>,
    heap: Heap<'v>,
    nesting: bool,
) -> starlark::Result<u64> {
    measure_text(ctx, value, heap, nesting, Budget::Heap)
}

/// Checks that `value` may be passed as one API argument: [`text_bytes`] (nesting
/// checked) with the walk stopped, and the error raised, at
/// [`Limits::max_api_value_bytes`](super::Limits::max_api_value_bytes), before
/// anything is converted or sent.
pub(crate) fn check_api_value<'v>(
    ctx: &ExecContext,
    value: Value<'v>,
    heap: Heap<'v>,
) -> starlark::Result<()> {
    measure_text(ctx, value, heap, true, Budget::ApiValue).map(|_| ())
}

/// What a text's size is checked against.
#[derive(Clone, Copy)]
enum Budget {
    /// The heap limit: the text would be built.
    Heap,
    /// The size limit of an API argument (and the heap limit).
    ApiValue,
}

impl Budget {
    fn check(self, ctx: &ExecContext, bytes: u64) -> starlark::Result<()> {
        if matches!(self, Budget::ApiValue) && bytes > ctx.limits.max_api_value_bytes as u64 {
            let kind = LimitKind::ApiValueSize;
            return Err(ctx.raise(
                ExecErrorKind::Limit(kind),
                format!(
                    "about {bytes} bytes or more: {}",
                    kind.describe(&ctx.limits)
                ),
            ));
        }
        check_text_bytes(ctx, "converting this value to text", bytes)
    }
}

/// [`text_bytes`], checked against `budget`.
fn measure_text<'v>(
    ctx: &ExecContext,
    value: Value<'v>,
    heap: Heap<'v>,
    nesting: bool,
    budget: Budget,
) -> starlark::Result<u64> {
    let limits = &ctx.limits;
    let mut pending = vec![(value, 0usize)];
    let mut spelled = 0usize;
    let mut bytes = 0u64;
    let mut cache = HashMap::new();
    while let Some((value, depth)) = pending.pop() {
        let Some(items) = elements(value, heap) else {
            bytes = bytes.saturating_add(scalar_bytes(value, &mut cache));
            budget.check(ctx, bytes)?;
            continue;
        };
        // Brackets, and a separator after each element.
        bytes = bytes.saturating_add(2 + 2 * items.len() as u64);
        budget.check(ctx, bytes)?;
        if !nesting {
            pending.extend(items.into_iter().map(|item| (item, depth)));
            continue;
        }
        if depth >= limits.max_value_depth {
            let kind = LimitKind::ValueDepth;
            return Err(ctx.raise(
                ExecErrorKind::Limit(kind),
                format!(
                    "cannot convert this value to text: {}",
                    kind.describe(limits)
                ),
            ));
        }
        spelled = spelled.saturating_add(items.len());
        if spelled > limits.max_sequence_len {
            return Err(ctx.raise(
                ExecErrorKind::Limit(LimitKind::SequenceLength),
                format!(
                    "cannot convert this value to text: it would spell out more than {} elements",
                    limits.max_sequence_len
                ),
            ));
        }
        pending.extend(items.into_iter().map(|item| (item, depth + 1)));
    }
    Ok(bytes)
}

/// The elements comparing or hashing `value` (`==`, `<`, `in`, a dict key, ...) can
/// visit, counting shared ones each time they appear; fails when that passes
/// [`Limits::max_sequence_len`](super::Limits::max_sequence_len): the interpreter
/// compares and hashes containers element by element, recursively, so a shared
/// structure (`x = [x, x]` in a loop) would keep one call busy for ever. The walk is
/// iterative and stops at the limit; scalars cost nothing.
pub(crate) fn check_comparison_size<'v>(
    ctx: &ExecContext,
    value: Value<'v>,
    heap: Heap<'v>,
) -> starlark::Result<u64> {
    let limits = &ctx.limits;
    let mut pending = vec![value];
    let mut visited = 0usize;
    while let Some(value) = pending.pop() {
        let Some(items) = elements(value, heap) else {
            continue;
        };
        visited = visited.saturating_add(items.len());
        if visited > limits.max_sequence_len {
            return Err(ctx.raise(
                ExecErrorKind::Limit(LimitKind::SequenceLength),
                format!(
                    "comparing this value would visit more than {} elements",
                    limits.max_sequence_len
                ),
            ));
        }
        pending.extend(items);
    }
    Ok(visited as u64)
}

/// Fails when building a string of `bytes` bytes in one step would pass the sandbox's
/// memory limit; `what` names the operation for the message.
pub(crate) fn check_text_bytes(ctx: &ExecContext, what: &str, bytes: u64) -> starlark::Result<()> {
    let limits = &ctx.limits;
    if bytes > limits.max_heap_bytes as u64 {
        let kind = LimitKind::Heap;
        return Err(ctx.raise(
            ExecErrorKind::Limit(kind),
            format!(
                "{what} would build a string of about {bytes} bytes: {}",
                kind.describe(limits)
            ),
        ));
    }
    Ok(())
}

/// Fails when the text of `value` would nest deeper, spell out more elements or take
/// more bytes than the limits allow; cheap for scalars.
pub(crate) fn check_text_size<'v>(
    ctx: &ExecContext,
    value: Value<'v>,
    heap: Heap<'v>,
) -> starlark::Result<()> {
    text_bytes(ctx, value, heap, true).map(|_| ())
}
