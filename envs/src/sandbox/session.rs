//! [`Session`]: one interpreter session, i.e. one Starlark module whose variables and
//! functions persist across the executions of an episode.
//!
//! A Starlark module can only live inside a closure that owns its heap. To keep one
//! alive between calls, the session is an `async` block that owns the module and loops
//! forever: wait for a job in the mailbox, run it synchronously, post the result. It is
//! driven by hand: [`Session::run`] posts a job and polls the future once (with a no-op
//! waker; nothing else ever wakes it), which runs exactly that job. Polling happens on a
//! freshly allocated stack (see [`eval_stack_bytes`]), so parsing, compiling, printing,
//! hashing and garbage-collecting deeply nested code or data cannot overflow the
//! caller's stack, whatever its size.

use std::cell::RefCell;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use starlark::environment::Module;

use super::api::ApiHost;
use super::run::{run_job, Job, JobResult};

/// Smallest stack executions run on: room for the deepest code `max_code_bytes` allows.
const MIN_EVAL_STACK_BYTES: usize = 256 << 20;

/// Stack bytes per heap byte. The interpreter recurses once per nesting level when it
/// prints, hashes or traces data; the cheapest nesting level (a one-element tuple)
/// costs about 24 heap bytes and the deepest recursion (`repr`) about 330 stack bytes
/// per level in an optimized build, so 16 stack bytes per heap byte cover any data the
/// heap limit admits. Debug builds use several times more stack per level.
const STACK_BYTES_PER_HEAP_BYTE: usize = 16;

/// The stack executions run on for a heap limit of `max_heap_bytes`. It is reserved,
/// not committed: only the pages actually touched use memory.
pub(crate) fn eval_stack_bytes(max_heap_bytes: usize) -> usize {
    max_heap_bytes
        .saturating_mul(STACK_BYTES_PER_HEAP_BYTE)
        .max(MIN_EVAL_STACK_BYTES)
}

/// Where the caller and the session future exchange jobs and results.
#[derive(Default)]
struct Mailbox {
    job: RefCell<Option<Job>>,
    result: RefCell<Option<JobResult>>,
}

/// Resolves to the next job posted in the mailbox.
struct NextJob(Rc<Mailbox>);

impl Future for NextJob {
    type Output = Job;

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Job> {
        match self.0.job.borrow_mut().take() {
            Some(job) => Poll::Ready(job),
            None => Poll::Pending,
        }
    }
}

/// A live interpreter session.
pub(crate) struct Session {
    future: Pin<Box<dyn Future<Output = ()>>>,
    mailbox: Rc<Mailbox>,
}

impl Session {
    /// A fresh session with an empty module.
    pub(crate) fn new() -> Session {
        let mailbox = Rc::new(Mailbox::default());
        let inbox = mailbox.clone();
        let future = Module::with_temp_heap_async(async move |module: Module<'_>| loop {
            let job = NextJob(inbox.clone()).await;
            let result = run_job(&module, &job);
            *inbox.result.borrow_mut() = Some(result);
        });
        Session {
            future: Box::pin(future),
            mailbox,
        }
    }

    /// Runs `job` with `host` (if any) reachable from agent code. `None` means the
    /// interpreter panicked: the session is broken and must be replaced.
    pub(crate) fn run(&mut self, job: Job, host: Option<&mut dyn ApiHost>) -> Option<JobResult> {
        let ctx = job.ctx.clone();
        let stack_bytes = eval_stack_bytes(ctx.limits.max_heap_bytes);
        *self.mailbox.job.borrow_mut() = Some(job);
        let future = &mut self.future;
        let mut poll = || {
            catch_unwind(AssertUnwindSafe(|| {
                stacker::grow(stack_bytes, || {
                    future
                        .as_mut()
                        .poll(&mut Context::from_waker(Waker::noop()))
                })
            }))
        };
        let polled = match host {
            Some(host) => ctx.host.lend(host, poll),
            None => poll(),
        };
        let result = self.mailbox.result.borrow_mut().take();
        match polled {
            Ok(Poll::Pending) => result,
            _ => None,
        }
    }
}
