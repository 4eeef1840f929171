//! Running one piece of code (an agent's execution or a library skill) in a session's
//! module: the size check, parsing and preparation, the evaluator's limits (ticks, call
//! depth, the periodic CPU-time and heap check, the per-statement hook that checks the
//! heap and traces functions), the classification of the error that ended it, and
//! keeping the session's heap under its limit between executions.

use std::cell::Cell;
use std::rc::Rc;

use starlark::codemap::FileSpanRef;
use starlark::environment::Module;
use starlark::eval::{BeforeStmtFunc, BeforeStmtFuncDyn, Evaluator};
use starlark::syntax::AstModule;
use starlark::values::Value;
use starlark::ErrorKind;

use super::builtins::globals;
use super::context::ExecContext;
use super::error::{ExecError, ExecErrorKind};
use super::limits::LimitKind;
use super::source::{dialect, literal_defaults, prepare, single_def, PrepareError};
use super::trace::FunctionOrigin;
use super::work::check_budget;

/// A piece of code to run.
pub(crate) struct Job {
    /// The file name shown in tracebacks (`<turn 3>`, `<skill name>`).
    pub file_name: String,
    /// The code.
    pub source: String,
    /// Where functions it defines come from.
    pub origin: FunctionOrigin,
    /// The code is a library skill: it must be exactly one function definition.
    pub skill: bool,
    /// The execution's shared state.
    pub ctx: Rc<ExecContext>,
}

/// How a job ended.
pub(crate) struct JobResult {
    /// The error that ended it, if any.
    pub error: Option<ExecError>,
    /// Ticks used.
    pub ticks: u64,
}

impl JobResult {
    /// A job that failed before running.
    pub(crate) fn failed(error: ExecError) -> JobResult {
        JobResult {
            error: Some(error),
            ticks: 0,
        }
    }
}

/// Runs `job` in `module`.
pub(crate) fn run_job(module: &Module<'_>, job: &Job) -> JobResult {
    let ctx = &*job.ctx;
    if job.source.len() > ctx.limits.max_code_bytes {
        let kind = LimitKind::CodeSize;
        return JobResult::failed(ExecError::bare(
            ExecErrorKind::Limit(kind),
            kind.describe(&ctx.limits),
        ));
    }
    let prepared = match prepare(&job.file_name, &job.source) {
        Ok(prepared) => prepared,
        Err(PrepareError::Syntax(e)) => return JobResult::failed(syntax_error(&e)),
        Err(PrepareError::Unsupported {
            codemap,
            span,
            message,
        }) => {
            return JobResult::failed(ExecError::at_span(
                ExecErrorKind::Syntax,
                message,
                &codemap,
                span,
            ))
        }
    };
    if job.skill {
        if let Err(message) = single_def(&prepared).and_then(|_| literal_defaults(&job.source)) {
            return JobResult::failed(ExecError::bare(ExecErrorKind::Syntax, message));
        }
    }
    ctx.files
        .borrow_mut()
        .add(job.origin, prepared.codemap.clone(), prepared.defs.clone());

    let cancelled: Cell<Option<LimitKind>> = Cell::new(None);
    let heap = module.heap();
    let mut eval = Evaluator::new(module);
    eval.extra = Some(ctx);
    let setup = eval
        .set_max_callstack_size(ctx.limits.max_call_depth.max(1))
        .and_then(|()| eval.set_max_tick_count(ctx.limits.max_ticks.max(1)));
    if let Err(e) = setup {
        return JobResult::failed(ExecError::bare(ExecErrorKind::Internal, e.to_string()));
    }
    eval.set_check_cancelled(Box::new(|| {
        let reason = if ctx.cpu.expired() {
            Some(LimitKind::CpuTime)
        } else if ctx.memory_held(heap.allocated_bytes()) > ctx.limits.max_heap_bytes as u64 {
            Some(LimitKind::Heap)
        } else {
            None
        };
        cancelled.set(reason);
        reason.is_some()
    }));
    eval.before_stmt_for_dap(BeforeStmtFunc::from_dyn(Box::new(StatementHook {
        ctx: job.ctx.clone(),
    })));
    let result = eval.eval_module(prepared.ast, globals());
    let ticks = eval
        .get_total_tick_count()
        .saturating_add(ctx.native_work.get());
    drop(eval);

    let mut error = result.err().map(|e| {
        let (kind, message) = match ctx.failure.take() {
            Some(raised) => raised,
            None => match classify(ctx, &e, cancelled.get(), ticks) {
                ExecErrorKind::Limit(LimitKind::CpuTime) => (
                    ExecErrorKind::Limit(LimitKind::CpuTime),
                    ctx.cpu_time_message(),
                ),
                ExecErrorKind::Limit(limit) => {
                    (ExecErrorKind::Limit(limit), limit.describe(&ctx.limits))
                }
                kind => (kind, e.without_diagnostic().to_string()),
            },
        };
        ExecError::from_starlark(kind, message, &e)
    });
    let (cleared, off_heap_bytes) =
        reclaim_memory(module, ctx.limits.max_heap_bytes, ctx.off_heap_bytes.get());
    ctx.off_heap_bytes.set(off_heap_bytes);
    if cleared {
        let note = format!(
            "{}; the session's data exceeded it, so its variables were cleared (functions are kept)",
            LimitKind::Heap.describe(&ctx.limits)
        );
        error = Some(match error {
            Some(error) => ExecError {
                traceback: format!("{}\n{note}", error.traceback),
                ..error
            },
            None => ExecError::bare(ExecErrorKind::Limit(LimitKind::Heap), note),
        });
    }
    if job.skill && error.is_some() {
        ctx.files.borrow_mut().pop();
    }
    JobResult { error, ticks }
}

/// Keeps the session under its memory limit between executions. While its heap plus
/// `off_heap_bytes` (the estimate of what its dicts and sets hold outside it) stays
/// under the limit, nothing is done; past it, garbage is collected and the data is
/// measured (see [`measured_memory`]), and if the live data alone still exceeds the limit,
/// every variable that does not hold a function is set to `None` (private names
/// included) and garbage collected again. Returns whether variables were cleared, and
/// the estimate of what the dicts and sets hold outside the heap afterwards. (Below
/// the limit, the interpreter itself collects at the first statement of the next
/// execution.)
fn reclaim_memory(module: &Module<'_>, max_heap_bytes: usize, off_heap_bytes: u64) -> (bool, u64) {
    let heap = |module: &Module<'_>| module.heap().allocated_bytes() as u64;
    if heap(module).saturating_add(off_heap_bytes) <= max_heap_bytes as u64 {
        return (false, off_heap_bytes);
    }
    collect_garbage(module);
    let held = measured_memory(module);
    if held <= max_heap_bytes {
        return (false, (held as u64).saturating_sub(heap(module)));
    }
    let names: Vec<String> = module
        .names_and_visibilities()
        .map(|(name, _)| name.as_str().to_owned())
        .collect();
    for name in names {
        if module
            .get(&name)
            .is_none_or(|value| value.get_type() != "function")
        {
            module.set(&name, Value::new_none());
        }
    }
    collect_garbage(module);
    let held = measured_memory(module) as u64;
    (true, held.saturating_sub(heap(module)))
}

/// Bytes the session's data holds: every value on its heap with what it holds outside
/// the heap (the entries of dicts and sets), garbage included until it is collected.
/// One walk of the heap, so it is measured between executions only.
fn measured_memory(module: &Module<'_>) -> usize {
    let summary: usize = module
        .heap()
        .allocated_summary()
        .summary()
        .values()
        .map(|&(_, bytes)| bytes)
        .sum();
    summary.max(module.heap().allocated_bytes())
}

/// Collects the garbage of the session's heap. The interpreter collects before a
/// top-level statement once a fresh evaluator has allocated its first threshold (100 KB),
/// which a few small dicts holding millions of entries outside the heap never reach: so
/// the first statement allocates that much garbage, and the second one collects.
fn collect_garbage(module: &Module<'_>) {
    let code = "' ' * 100000\nNone".to_owned();
    if let Ok(ast) = AstModule::parse("<gc>", code, &dialect()) {
        let _ = Evaluator::new(module).eval_module(ast, globals());
    }
}

/// What ended an evaluation with error `e` that sandbox code did not raise.
fn classify(
    ctx: &ExecContext,
    e: &starlark::Error,
    cancelled: Option<LimitKind>,
    ticks: u64,
) -> ExecErrorKind {
    if matches!(e.kind(), ErrorKind::StackOverflow(_)) {
        ExecErrorKind::Limit(LimitKind::CallDepth)
    } else if let Some(limit) = cancelled {
        ExecErrorKind::Limit(limit)
    } else if ticks > ctx.limits.max_ticks {
        ExecErrorKind::Limit(LimitKind::Ticks)
    } else {
        ExecErrorKind::Runtime
    }
}

/// A parse error with its location.
fn syntax_error(e: &starlark::Error) -> ExecError {
    let message = e.without_diagnostic().to_string();
    let message = message
        .strip_prefix("Parse error: ")
        .unwrap_or(&message)
        .to_owned();
    match e.span() {
        Some(location) => ExecError::at_span(
            ExecErrorKind::Syntax,
            message,
            &location.file,
            location.span,
        ),
        None => ExecError::bare(ExecErrorKind::Syntax, message),
    }
}

/// Runs before every statement: enforces the limits built-ins' work counts against (see
/// `work.rs`) and traces functions.
struct StatementHook {
    ctx: Rc<ExecContext>,
}

impl<'e> BeforeStmtFuncDyn<'e> for StatementHook {
    fn call<'v>(
        &mut self,
        span: FileSpanRef,
        _continued: bool,
        eval: &mut Evaluator<'v, '_, 'e>,
    ) -> starlark::Result<()> {
        let ctx = &*self.ctx;
        check_budget(ctx, eval)?;
        ctx.trace
            .borrow_mut()
            .on_statement(&ctx.files.borrow(), span, eval.call_stack_count());
        Ok(())
    }
}
