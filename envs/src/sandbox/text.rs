//! Bounded conversion of values to text. Printing or formatting a value makes the
//! interpreter recurse once per nesting level and repeat shared elements each time they
//! appear, so a deep or self-multiplying value (`x = [x, x]` in a loop) could exhaust
//! the stack or memory inside a single built-in call. [`check_text_size`] walks the
//! value first, without recursion, and refuses it when it is nested deeper than
//! [`Limits::max_value_depth`](super::Limits::max_value_depth) or would spell out more
//! than [`Limits::max_sequence_len`](super::Limits::max_sequence_len) elements.

use starlark::values::dict::DictRef;
use starlark::values::list::ListRef;
use starlark::values::tuple::TupleRef;
use starlark::values::{Heap, Value};

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

/// Fails when the text of `value` would nest deeper or spell out more elements than
/// the limits allow; cheap for scalars.
pub(crate) fn check_text_size<'v>(
    ctx: &ExecContext,
    value: Value<'v>,
    heap: Heap<'v>,
) -> starlark::Result<()> {
    let limits = &ctx.limits;
    let mut pending = vec![(value, 0usize)];
    let mut spelled = 0usize;
    while let Some((value, depth)) = pending.pop() {
        let Some(items) = elements(value, heap) else {
            continue;
        };
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
    Ok(())
}
