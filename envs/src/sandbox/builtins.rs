//! The global environment agent code runs in: the Starlark standard built-ins, with
//! `print` redirected to the execution's output buffer, Python's `sum`, `range` bounded
//! by [`Limits::max_sequence_len`](super::Limits::max_sequence_len), `print`, `str`,
//! `repr` and string formatting with `%` checked by [`check_text_size`], the operators
//! `a * b` and `a % b` (rewritten to call bounded built-ins), the string methods
//! `replace`, `join` and `format` and f-strings (rewritten likewise, refused when they
//! would build a string larger than the memory limit in one call), and the `apis`
//! object.

use std::cmp::Ordering;
use std::num::NonZeroI32;
use std::sync::OnceLock;

use starlark::environment::{Globals, GlobalsBuilder, LibraryExtension};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::dict::DictRef;
use starlark::values::list::ListRef;
use starlark::values::none::NoneType;
use starlark::values::range::Range;
use starlark::values::string::StarlarkStr;
use starlark::values::tuple::{TupleRef, UnpackTuple};
use starlark::values::{FrozenValue, Heap, Value};

use super::apis::Apis;
use super::charged::{call_method_charged, charged_builtins, named_arguments};
use super::context::ExecContext;
use super::error::ExecErrorKind;
use super::limits::LimitKind;
use super::rewrites::BOUNDED_METHODS;
use super::text::{check_comparison_size, check_text_bytes, check_text_size, text_bytes};
use super::work::charge;

/// Runs the comparison `op` on `a` and `b`, first measuring (see
/// [`check_comparison_size`]) the operands when both are containers, only then does
/// comparing recurse (a container never equals a scalar, nor orders against one), and
/// charging the elements it can visit (see `work.rs`).
fn compare<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    a: Value<'v>,
    b: Value<'v>,
    op: impl FnOnce(Value<'v>, Value<'v>) -> starlark::Result<bool>,
) -> starlark::Result<bool> {
    if is_container(a) && is_container(b) {
        let ctx = ExecContext::of(eval)?;
        let visited = check_comparison_size(ctx, a, eval.heap())?.min(check_comparison_size(
            ctx,
            b,
            eval.heap(),
        )?);
        charge(eval, visited)?;
    }
    op(a, b)
}

/// Runs `needle in haystack` (`found` of it with `op`), first measuring what membership
/// can visit and charging it: the needle when it is a container, and, in a list or
/// tuple, every element it is compared with (a dict or set only hashes the needle).
fn membership<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    needle: Value<'v>,
    haystack: Value<'v>,
    op: impl FnOnce(bool) -> bool,
) -> starlark::Result<bool> {
    let sequence = matches!(haystack.get_type(), "list" | "tuple");
    let ctx = ExecContext::of(eval)?;
    let mut visited = 0;
    if is_container(needle) {
        visited = check_comparison_size(ctx, needle, eval.heap())?;
        if sequence {
            visited = visited.saturating_add(check_comparison_size(ctx, haystack, eval.heap())?);
        }
    } else if sequence {
        visited = haystack.length().map_or(0, |n| n.max(0) as u64);
    }
    charge(eval, visited)?;
    haystack.is_in(needle).map(op)
}

/// Whether `value` is a container (the only values whose comparison can recurse).
pub(crate) fn is_container(value: Value<'_>) -> bool {
    matches!(value.get_type(), "list" | "tuple" | "dict" | "set")
}

/// The Starlark library extensions agent code gets besides the standard built-ins.
const EXTENSIONS: [LibraryExtension; 4] = [
    LibraryExtension::Map,
    LibraryExtension::Filter,
    LibraryExtension::Partial,
    LibraryExtension::SetType,
];

/// Starlark's own globals (with [`EXTENSIONS`]), for the built-ins the sandbox wraps.
fn standard_globals() -> &'static Globals {
    static STANDARD: OnceLock<Globals> = OnceLock::new();
    STANDARD.get_or_init(|| GlobalsBuilder::extended_by(&EXTENSIONS).build())
}

/// Starlark's own built-in `name`, for a sandbox built-in that checks its arguments
/// and then calls it.
pub(crate) fn standard_builtin(ctx: &ExecContext, name: &str) -> starlark::Result<FrozenValue> {
    standard_globals()
        .iter()
        .find_map(|(global, value)| (global == name).then_some(value))
        .ok_or_else(|| ctx.raise(ExecErrorKind::Internal, format!("{name}() is missing")))
}

/// The globals shared by every session (built once per process; they hold no state).
pub(crate) fn globals() -> &'static Globals {
    static GLOBALS: OnceLock<Globals> = OnceLock::new();
    GLOBALS.get_or_init(|| {
        let mut builder = GlobalsBuilder::extended_by(&EXTENSIONS);
        sandbox_builtins(&mut builder);
        charged_builtins(&mut builder);
        builder.set("apis", Apis);
        builder.build()
    })
}

/// Number of elements of `range(start, stop, step)`.
fn range_len(start: i64, stop: i64, step: i64) -> u64 {
    let (span, stride) = if step > 0 {
        (i128::from(stop) - i128::from(start), i128::from(step))
    } else {
        (i128::from(start) - i128::from(stop), -i128::from(step))
    };
    if span <= 0 {
        0
    } else {
        u64::try_from((span + stride - 1) / stride).unwrap_or(u64::MAX)
    }
}

/// Length of `value` if it is a string, list or tuple (what `*` can repeat).
fn repeatable_len(value: Value<'_>) -> Option<usize> {
    value
        .unpack_str()
        .map(str::len)
        .or_else(|| ListRef::from_value(value).map(|l| l.len()))
        .or_else(|| TupleRef::from_value(value).map(|t| t.len()))
}

/// Bits of `value` if it is an integer (for big integers, from its decimal digits:
/// every integer the sandbox builds stays small enough for that to be cheap).
fn int_bits(value: Value<'_>) -> Option<u64> {
    if value.get_type() != "int" {
        return None;
    }
    Some(match value.unpack_i32() {
        Some(small) => u64::from(32 - small.unsigned_abs().leading_zeros()),
        None => {
            let digits = value.to_str().trim_start_matches('-').len() as u64;
            (digits * 3322).div_ceil(1000)
        }
    })
}

fn integer_limit(ctx: &ExecContext, what: &str, bits: u64) -> starlark::Error {
    ctx.raise(
        ExecErrorKind::Limit(LimitKind::IntegerSize),
        format!(
            "{what} would have about {bits} bits, more than the sandbox allows ({})",
            ctx.limits.max_int_bits
        ),
    )
}

fn sequence_limit(ctx: &ExecContext, what: &str, length: u64) -> starlark::Error {
    ctx.raise(
        ExecErrorKind::Limit(LimitKind::SequenceLength),
        format!(
            "{what} would have {length} elements, more than the sandbox allows ({})",
            ctx.limits.max_sequence_len
        ),
    )
}

/// Length of `s.replace(old, new[, count])`, or `None` when the arguments are not
/// what `replace` takes (the method itself then reports it).
fn replaced_len(s: &str, args: &[Value<'_>]) -> Option<u64> {
    let (old, new) = match args {
        [old, new] | [old, new, _] => (old.unpack_str()?, new.unpack_str()?),
        _ => return None,
    };
    let mut found = s.matches(old).count() as u64;
    if let Some(count) = args.get(2) {
        found = found.min(u64::try_from(count.unpack_i32()?).ok()?);
    }
    let kept = (s.len() as u64).saturating_sub(found.saturating_mul(old.len() as u64));
    Some(kept.saturating_add(found.saturating_mul(new.len() as u64)))
}

/// Length of `sep.join(items)`, or `None` when `items` is not an iterable of strings
/// (the method itself then reports it).
fn joined_len<'v>(sep: &str, items: Value<'v>, heap: Heap<'v>) -> Option<u64> {
    let (mut total, mut count) = (0u64, 0u64);
    for item in items.iterate(heap).ok()? {
        total = total.saturating_add(item.unpack_str()?.len() as u64);
        count += 1;
    }
    Some(total.saturating_add(count.saturating_sub(1).saturating_mul(sep.len() as u64)))
}

/// Number of `{...}` fields in a format string (`{{` and `}}` are literal braces).
fn format_fields(format: &str) -> u64 {
    let mut fields = 0;
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '{' {
            if chars.peek() == Some(&'{') {
                chars.next();
            } else {
                fields += 1;
            }
        }
    }
    fields
}

#[starlark_module]
fn sandbox_builtins(builder: &mut GlobalsBuilder) {
    /// Prints the values, separated by `sep` and followed by `end`, to the output the
    /// agent sees.
    fn print<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(require = named, default = " ")] sep: &str,
        #[starlark(require = named, default = "\n")] end: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<NoneType> {
        let ctx = ExecContext::of(eval)?;
        let mut line = String::new();
        for (i, value) in args.items.iter().enumerate() {
            if i > 0 {
                line.push_str(sep);
            }
            match value.unpack_str() {
                Some(s) => line.push_str(s),
                None => {
                    check_text_size(ctx, *value, eval.heap())?;
                    line.push_str(&value.to_str());
                }
            }
        }
        line.push_str(end);
        ctx.output.borrow_mut().push(&line);
        Ok(NoneType)
    }

    /// `str(x)`: the text of `x` (a string stays as it is). Also the `str` type in
    /// annotations.
    #[starlark(as_type = StarlarkStr)]
    fn str<'v>(
        #[starlark(require = pos)] x: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        if x.unpack_str().is_some() {
            return Ok(x);
        }
        check_text_size(ExecContext::of(eval)?, x, eval.heap())?;
        Ok(eval.heap().alloc_str(&x.to_str()).to_value())
    }

    /// `repr(x)`: the text of `x` as it would be written in code.
    fn repr<'v>(
        #[starlark(require = pos)] x: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        check_text_size(ExecContext::of(eval)?, x, eval.heap())?;
        Ok(eval.heap().alloc_str(&x.to_repr()).to_value())
    }

    /// `range(stop)`, `range(start, stop)` or `range(start, stop, step)`, limited to
    /// the sandbox's maximum sequence length.
    fn range(
        #[starlark(require = pos)] a1: i64,
        #[starlark(require = pos)] a2: Option<i64>,
        #[starlark(require = pos, default = 1)] step: i64,
        eval: &mut Evaluator,
    ) -> starlark::Result<Range> {
        let ctx = ExecContext::of(eval)?;
        let (start, stop) = match a2 {
            Some(stop) => (a1, stop),
            None => (0, a1),
        };
        if step == 0 {
            return Err(ctx.raise(
                ExecErrorKind::Runtime,
                "range() step must not be zero".to_owned(),
            ));
        }
        let length = range_len(start, stop, step);
        if length > ctx.limits.max_sequence_len as u64 {
            return Err(sequence_limit(ctx, "range()", length));
        }
        let bounds = (
            i32::try_from(start),
            i32::try_from(stop),
            i32::try_from(step),
        );
        match bounds {
            (Ok(start), Ok(stop), Ok(step)) => match NonZeroI32::new(step) {
                Some(step) => Ok(Range::new(start, stop, step)),
                None => Err(ctx.raise(
                    ExecErrorKind::Runtime,
                    "range() step must not be zero".to_owned(),
                )),
            },
            _ => Err(ctx.raise(
                ExecErrorKind::Runtime,
                "range() arguments must be between -2147483648 and 2147483647".to_owned(),
            )),
        }
    }

    /// `sum(iterable, start=0)`: the total of numbers (Python's `sum`, which Starlark
    /// lacks). Strings and lists are refused: join them instead.
    fn sum<'v>(
        #[starlark(require = pos)] items: Value<'v>,
        #[starlark(require = pos)] start: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let heap = eval.heap();
        let mut total = start.unwrap_or_else(|| heap.alloc(0));
        for item in std::iter::once(total).chain(items.iterate(heap)?) {
            if !matches!(item.get_type(), "int" | "float") {
                let ctx = ExecContext::of(eval)?;
                return Err(ctx.raise(
                    ExecErrorKind::Runtime,
                    format!(
                        "sum() adds numbers only, got {}; use \"\".join(...) for strings",
                        item.get_type()
                    ),
                ));
            }
        }
        for item in items.iterate(heap)? {
            total = total.add(item, heap)?;
        }
        Ok(total)
    }

    /// `a % b`: string formatting (its arguments checked like `str`) or modulo.
    fn _sandbox_percent<'v>(
        #[starlark(require = pos)] a: Value<'v>,
        #[starlark(require = pos)] b: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        if a.unpack_str().is_some() {
            check_text_size(ExecContext::of(eval)?, b, eval.heap())?;
        }
        a.percent(b, eval.heap())
    }

    /// `x.name(*args, **kwargs)` for the methods calls are rewritten for: on a string,
    /// `replace`, `join` and `format` are refused when their result would be larger
    /// than the memory limit; `index` and `remove` first bound the walks their argument
    /// can cost (comparing it with each element, and its text in the error when it is
    /// not found), so a shared structure cannot keep them busy for ever; and every
    /// call's work is charged first and the dict or set entries it built recorded after
    /// (see `charged.rs`).
    fn _sandbox_method<'v>(
        #[starlark(require = pos)] this: Value<'v>,
        #[starlark(require = pos)] name: &str,
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let heap = eval.heap();
        let named = named_arguments(kwargs);
        if matches!(name, "index" | "remove") {
            let ctx = ExecContext::of(eval)?;
            for value in &args.items {
                check_comparison_size(ctx, *value, heap)?;
                check_text_size(ctx, *value, heap)?;
            }
        }
        if let Some(s) = this.unpack_str() {
            let ctx = ExecContext::of(eval)?;
            let length = match name {
                "replace" => replaced_len(s, &args.items),
                "join" => args
                    .items
                    .first()
                    .and_then(|items| joined_len(s, *items, heap)),
                "format" => {
                    let mut widest = 0u64;
                    for value in args.items.iter().chain(named.iter().map(|(_, v)| v)) {
                        widest = widest.max(text_bytes(ctx, *value, heap, false)?);
                    }
                    Some((s.len() as u64).saturating_add(format_fields(s).saturating_mul(widest)))
                }
                _ => None,
            };
            if let Some(length) = length {
                check_text_bytes(ctx, &format!("this {name}()"), length)?;
            }
        }
        call_method_charged(eval, this, name, &args.items, &named)
    }

    /// Checks that the string an f-string builds from these values would fit in the
    /// memory limit; returns `None`, which the rewritten f-string is or-ed with.
    fn _sandbox_fstring<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<NoneType> {
        let ctx = ExecContext::of(eval)?;
        let mut total = 0u64;
        for value in &args.items {
            total = total.saturating_add(text_bytes(ctx, *value, eval.heap(), false)?);
        }
        check_text_bytes(ctx, "this f-string", total)?;
        Ok(NoneType)
    }

    /// `int(x)` / `int(text, base)` (calls of `int` are rewritten to it): Starlark's
    /// `int`, refusing text longer than
    /// [`Limits::max_int_digits`](super::Limits::max_int_digits) (converting it takes
    /// time that grows with the square of its length).
    fn _sandbox_int<'v>(
        #[starlark(require = pos)] a: Option<Value<'v>>,
        base: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let ctx = ExecContext::of(eval)?;
        let standard_int = standard_builtin(ctx, "int")?;
        if let Some(text) = a.and_then(|a| a.unpack_str()) {
            if text.len() > ctx.limits.max_int_digits {
                return Err(ctx.raise(
                    ExecErrorKind::Limit(LimitKind::IntegerSize),
                    format!(
                        "int() of text {} characters long; the sandbox converts at most {}",
                        text.len(),
                        ctx.limits.max_int_digits
                    ),
                ));
            }
        }
        let positional: Vec<Value<'v>> = a.into_iter().collect();
        let named: Vec<(&str, Value<'v>)> = base.map(|b| ("base", b)).into_iter().collect();
        eval.eval_function(standard_int.to_value(), &positional, &named)
    }

    /// `getattr(x, name[, default])`: Starlark's `getattr`, refusing the methods that are
    /// bounded only when called directly (`replace`, `join`, `format`, `index`,
    /// `remove`).
    fn getattr<'v>(
        #[starlark(require = pos)] this: Value<'v>,
        #[starlark(require = pos)] name: &str,
        #[starlark(require = pos)] default: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let ctx = ExecContext::of(eval)?;
        if BOUNDED_METHODS.contains(&name) {
            return Err(ctx.raise(
                ExecErrorKind::Runtime,
                format!(
                    "getattr(..., \"{name}\") is not allowed here; call `.{name}(...)` directly"
                ),
            ));
        }
        let standard_getattr = standard_builtin(ctx, "getattr")?;
        let name = eval.heap().alloc_str(name).to_value();
        let mut positional = vec![this, name];
        positional.extend(default);
        eval.eval_function(standard_getattr.to_value(), &positional, &[])
    }

    /// `fail(*args)`: Starlark's `fail`, its arguments' text checked like `str` first
    /// (a shared structure can spell out far more text than the heap holds).
    fn fail<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<NoneType> {
        let ctx = ExecContext::of(eval)?;
        for value in &args.items {
            check_text_size(ctx, *value, eval.heap())?;
        }
        let standard_fail = standard_builtin(ctx, "fail")?;
        eval.eval_function(standard_fail.to_value(), &args.items, &[])?;
        Ok(NoneType)
    }

    /// `a + b`, refusing a concatenation that would take the session past its memory
    /// limit, counting what the heap already holds (a chain `x + x + ...` in one
    /// statement builds every partial result before the next statement's check).
    fn _sandbox_add<'v>(
        #[starlark(require = pos)] a: Value<'v>,
        #[starlark(require = pos)] b: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        if let (Some(x), Some(y)) = (repeatable_len(a), repeatable_len(b)) {
            let ctx = ExecContext::of(eval)?;
            let elements = (x as u64).saturating_add(y as u64);
            let bytes = if a.unpack_str().is_some() {
                elements
            } else {
                elements.saturating_mul(8)
            };
            let held = eval.heap().allocated_bytes() as u64;
            if held.saturating_add(bytes) > ctx.limits.max_heap_bytes as u64 {
                let kind = LimitKind::Heap;
                return Err(ctx.raise(
                    ExecErrorKind::Limit(kind),
                    format!(
                        "this concatenation would add about {bytes} bytes to the {held} the session holds: {}",
                        kind.describe(&ctx.limits)
                    ),
                ));
            }
        }
        a.add(b, eval.heap())
    }

    /// `a == b` (see [`compare`]).
    fn _sandbox_eq<'v>(
        #[starlark(require = pos)] a: Value<'v>,
        #[starlark(require = pos)] b: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<bool> {
        compare(eval, a, b, |a, b| a.equals(b))
    }

    /// `a != b` (see [`compare`]).
    fn _sandbox_ne<'v>(
        #[starlark(require = pos)] a: Value<'v>,
        #[starlark(require = pos)] b: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<bool> {
        compare(eval, a, b, |a, b| a.equals(b).map(|equal| !equal))
    }

    /// `a < b` (see [`compare`]).
    fn _sandbox_lt<'v>(
        #[starlark(require = pos)] a: Value<'v>,
        #[starlark(require = pos)] b: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<bool> {
        compare(eval, a, b, |a, b| a.compare(b).map(Ordering::is_lt))
    }

    /// `a <= b` (see [`compare`]).
    fn _sandbox_le<'v>(
        #[starlark(require = pos)] a: Value<'v>,
        #[starlark(require = pos)] b: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<bool> {
        compare(eval, a, b, |a, b| a.compare(b).map(Ordering::is_le))
    }

    /// `a > b` (see [`compare`]).
    fn _sandbox_gt<'v>(
        #[starlark(require = pos)] a: Value<'v>,
        #[starlark(require = pos)] b: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<bool> {
        compare(eval, a, b, |a, b| a.compare(b).map(Ordering::is_gt))
    }

    /// `a >= b` (see [`compare`]).
    fn _sandbox_ge<'v>(
        #[starlark(require = pos)] a: Value<'v>,
        #[starlark(require = pos)] b: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<bool> {
        compare(eval, a, b, |a, b| a.compare(b).map(Ordering::is_ge))
    }

    /// `a in b` (see [`membership`]).
    fn _sandbox_in<'v>(
        #[starlark(require = pos)] a: Value<'v>,
        #[starlark(require = pos)] b: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<bool> {
        membership(eval, a, b, |found| found)
    }

    /// `a not in b` (see [`membership`]).
    fn _sandbox_not_in<'v>(
        #[starlark(require = pos)] a: Value<'v>,
        #[starlark(require = pos)] b: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<bool> {
        membership(eval, a, b, |found| !found)
    }

    /// `a << b`, refusing integers larger than the sandbox allows.
    fn _sandbox_shift<'v>(
        #[starlark(require = pos)] a: Value<'v>,
        #[starlark(require = pos)] b: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        if let (Some(bits), Some(shift)) = (int_bits(a), b.unpack_i32()) {
            let ctx = ExecContext::of(eval)?;
            let total = bits.saturating_add(u64::try_from(shift).unwrap_or(0));
            if total > ctx.limits.max_int_bits {
                return Err(integer_limit(ctx, "this shift", total));
            }
        } else if int_bits(a).is_some() && b.get_type() == "int" {
            let ctx = ExecContext::of(eval)?;
            return Err(integer_limit(ctx, "this shift", u64::MAX));
        }
        a.left_shift(b, eval.heap())
    }

    /// `a * b`, refusing repetitions longer than the sandbox's maximum sequence length
    /// and products of integers larger than its integer limit.
    fn _sandbox_mul<'v>(
        #[starlark(require = pos)] a: Value<'v>,
        #[starlark(require = pos)] b: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        if let (Some(x), Some(y)) = (int_bits(a), int_bits(b)) {
            let ctx = ExecContext::of(eval)?;
            if x + y > ctx.limits.max_int_bits {
                return Err(integer_limit(ctx, "this product", x + y));
            }
        }
        let repetition = match (repeatable_len(a), repeatable_len(b)) {
            (Some(len), None) => Some((len, b)),
            (None, Some(len)) => Some((len, a)),
            _ => None,
        };
        if let Some((len, count)) = repetition {
            if count.get_type() == "int" {
                let ctx = ExecContext::of(eval)?;
                let times = count.unpack_i32().map_or(u64::MAX, |n| n.max(0) as u64);
                let length = (len as u64).saturating_mul(times);
                if length > ctx.limits.max_sequence_len as u64 {
                    return Err(sequence_limit(ctx, "this repetition", length));
                }
            }
        }
        a.mul(b, eval.heap())
    }
}

#[cfg(test)]
mod tests {
    use super::{globals, range_len};
    use crate::sandbox::rewrites::{
        BOUNDED_ADD, BOUNDED_INT, BOUNDED_METHOD, BOUNDED_MUL, BOUNDED_PERCENT, BOUNDED_SHIFT,
        CHARGED_BUILTIN, CHARGED_BUILTINS, CHECKED_ENTRIES, CHECKED_FSTRING, CHECKED_KEY,
        CHECKED_SLICE, COLLECTION_OPERATORS,
    };

    #[test]
    fn the_rewritten_operators_have_their_builtins() {
        for builtin in [
            BOUNDED_ADD,
            BOUNDED_MUL,
            BOUNDED_SHIFT,
            BOUNDED_INT,
            BOUNDED_PERCENT,
            BOUNDED_METHOD,
            CHECKED_FSTRING,
            CHARGED_BUILTIN,
            CHECKED_KEY,
            CHECKED_SLICE,
            CHECKED_ENTRIES,
        ]
        .into_iter()
        .chain(CHARGED_BUILTINS)
        .chain(COLLECTION_OPERATORS.map(|(_, builtin)| builtin))
        {
            assert!(globals().names().any(|name| name.as_str() == builtin));
        }
    }

    #[test]
    fn range_lengths() {
        assert_eq!(range_len(0, 10, 1), 10);
        assert_eq!(range_len(0, 10, 3), 4);
        assert_eq!(range_len(10, 0, -2), 5);
        assert_eq!(range_len(5, 5, 1), 0);
        assert_eq!(range_len(0, 10, -1), 0);
        assert_eq!(range_len(i64::MIN, i64::MAX, 1), u64::MAX);
    }
}
