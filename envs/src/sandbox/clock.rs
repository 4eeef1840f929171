//! [`CpuClock`]: the CPU time one execution has spent, against [`Limits::cpu_time`].
//!
//! The interpreter asks whether the execution is past its limit every 1,000 ticks, and
//! the charged built-ins at every charge, so the question must cost about what a read of
//! the monotonic clock costs. The thread's CPU clock is a system call, but a thread
//! spends at most one second of CPU time per second, so until the wall-clock instant at
//! which the whole remaining budget could have been spent there is nothing to read: the
//! clock reads the thread's CPU time only then, and sets the next such instant from
//! what is left.
//!
//! [`Limits::cpu_time`]: super::Limits::cpu_time

use std::cell::Cell;
use std::time::{Duration, Instant};

/// The CPU time of one execution, read on the thread that runs it.
pub(crate) struct CpuClock {
    /// The thread's CPU time when the execution started.
    started: Duration,
    /// CPU time the execution may spend.
    limit: Duration,
    /// Before this instant the execution cannot have spent its limit.
    next_read: Cell<Instant>,
}

impl CpuClock {
    /// Starts counting, on the calling thread, for an execution allowed `limit`.
    pub(crate) fn start(limit: Duration) -> CpuClock {
        CpuClock {
            started: thread_cpu_time(),
            limit,
            next_read: Cell::new(Instant::now() + limit),
        }
    }

    /// Whether the execution has spent its limit. Must be asked on the thread that
    /// started the clock.
    pub(crate) fn expired(&self) -> bool {
        let now = Instant::now();
        if now < self.next_read.get() {
            return false;
        }
        let spent = self.spent();
        if spent >= self.limit {
            return true;
        }
        self.next_read.set(now + (self.limit - spent));
        false
    }

    /// CPU time the execution has spent so far.
    pub(crate) fn spent(&self) -> Duration {
        thread_cpu_time().saturating_sub(self.started)
    }
}

/// The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`): the clock that
/// [`Limits::cpu_time`](super::Limits::cpu_time) is counted on. An in-process execution
/// runs on its caller's thread, so the difference of two readings around it is what it
/// spent, however loaded the machine.
#[cfg(unix)]
#[allow(unsafe_code)]
pub fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec; the call only writes it.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    if status != 0 {
        return elapsed_time();
    }
    Duration::new(
        now.tv_sec.max(0) as u64,
        now.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// Elsewhere, time since the first read: the thread's CPU time is at most this.
#[cfg(not(unix))]
pub fn thread_cpu_time() -> Duration {
    elapsed_time()
}

/// Time since the process first asked, a stand-in for the thread's CPU time where there
/// is no such clock (it is never less).
fn elapsed_time() -> Duration {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    ORIGIN.get_or_init(Instant::now).elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spins for `cpu` of the thread's CPU time.
    fn spin(cpu: Duration) {
        let start = thread_cpu_time();
        let mut x = 1u64;
        while thread_cpu_time().saturating_sub(start) < cpu {
            for _ in 0..1000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
    }

    #[test]
    fn waiting_does_not_count_and_work_does() {
        let clock = CpuClock::start(Duration::from_millis(50));
        std::thread::sleep(Duration::from_millis(120));
        // 120 ms elapsed, well past the limit, but asleep: a wall clock would expire here.
        assert!(!clock.expired(), "spent {:?} asleep", clock.spent());
        spin(Duration::from_millis(60));
        assert!(clock.expired(), "spent {:?}", clock.spent());
        assert!(clock.expired(), "an expired clock stays expired");
    }
}
