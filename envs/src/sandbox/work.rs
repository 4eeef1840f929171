//! Native work: what one built-in call does beyond the tick the interpreter charges for
//! it. The interpreter checks its limits every 1,000 ticks, so a built-in whose work
//! grows with its input (`set(range(1000000))`, `sorted(xs)`, hashing a key shared a
//! million times over) could otherwise run for seconds, or allocate gigabytes outside
//! the heap, between two checks. The sandbox's checked built-ins measure that work
//! before they run and charge it here in ticks, one per element they visit; [`charge`]
//! then holds the execution to every limit a long call could pass: the tick budget (the
//! interpreter's ticks plus the charged ones), the memory limit (the heap plus about
//! [`ENTRY_BYTES`] for each dict or set entry a checked built-in built outside it, see
//! [`record_entries`]) and the CPU time.

use starlark::eval::Evaluator;

use super::context::ExecContext;
use super::error::ExecErrorKind;
use super::limits::LimitKind;

/// Bytes one dict or set entry takes outside the interpreter's heap, about: its hash,
/// key and value, and its slot in the index.
pub(crate) const ENTRY_BYTES: u64 = 48;

/// Charges `ticks` of native work to the execution `eval` runs, then checks its limits
/// (see [`check_limits`]).
pub(crate) fn charge(eval: &Evaluator<'_, '_, '_>, ticks: u64) -> starlark::Result<()> {
    let ctx = ExecContext::of(eval)?;
    ctx.native_work
        .set(ctx.native_work.get().saturating_add(ticks));
    check_limits(ctx, eval)
}

/// Records that a checked built-in built `entries` dict or set entries outside the
/// heap, then checks the execution's limits.
pub(crate) fn record_entries(eval: &Evaluator<'_, '_, '_>, entries: u64) -> starlark::Result<()> {
    let ctx = ExecContext::of(eval)?;
    let bytes = entries.saturating_mul(ENTRY_BYTES);
    ctx.off_heap_bytes
        .set(ctx.off_heap_bytes.get().saturating_add(bytes));
    check_limits(ctx, eval)
}

/// Fails when the execution is past its tick budget (the interpreter's ticks plus the
/// charged ones), its memory limit (the heap plus the recorded entries) or its CPU
/// time.
pub(crate) fn check_limits(
    ctx: &ExecContext,
    eval: &Evaluator<'_, '_, '_>,
) -> starlark::Result<()> {
    check_budget(ctx, eval)?;
    if ctx.cpu.expired() {
        return Err(ctx.raise(
            ExecErrorKind::Limit(LimitKind::CpuTime),
            ctx.cpu_time_message(),
        ));
    }
    Ok(())
}

/// [`check_limits`] without the CPU time, which costs a clock read: the check made
/// before every statement (the interpreter reads the clock itself every 1,000 ticks).
pub(crate) fn check_budget(
    ctx: &ExecContext,
    eval: &Evaluator<'_, '_, '_>,
) -> starlark::Result<()> {
    let limits = &ctx.limits;
    let ticks = eval
        .get_total_tick_count()
        .saturating_add(ctx.native_work.get());
    let kind = if ticks > limits.max_ticks {
        LimitKind::Ticks
    } else if ctx.memory_held(eval.heap().allocated_bytes()) > limits.max_heap_bytes as u64 {
        LimitKind::Heap
    } else {
        return Ok(());
    };
    Err(ctx.raise(ExecErrorKind::Limit(kind), kind.describe(limits)))
}
