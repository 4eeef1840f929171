//! The caller's kill timer ([`Limits::wall_clock`](crate::sandbox::Limits::wall_clock)):
//! a deadline that counts only the time the caller spent waiting on its worker.
//!
//! Two kinds of elapsed time are not waiting, and [`Deadline`] leaves both out:
//! - time the caller spends on the worker's behalf, answering an API call
//!   ([`Deadline::not_waiting`]);
//! - time the caller did not run at all: the whole run stopped by `SIGSTOP` (a paused
//!   training run), or its thread starved of a CPU. Every wait sleeps at most
//!   [`POLL_SLICE`] between readings of the deadline, so a gap of more than [`PAUSE`]
//!   between two readings can only be such time.
//!
//! So a run paused for an hour continues with its executions in flight, while a worker
//! that stops answering is still killed once the caller has waited the limit for it.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// Longest a waiter sleeps (in `poll`) before it reads its deadline again.
pub(crate) const POLL_SLICE: Duration = Duration::from_millis(100);

/// A gap between two readings of a deadline longer than this was not spent waiting:
/// the caller was stopped or not scheduled. Ten poll slices: a thread whose `poll`
/// timed out runs again within tens of milliseconds even on a loaded machine.
pub(crate) const PAUSE: Duration = Duration::from_secs(1);

/// A kill timer: `limit` of waiting from a start, pushed back by the time not spent
/// waiting. Read through a shared reference, so one deadline can span a conversation's
/// reads and writes.
#[derive(Debug)]
pub(crate) struct Deadline {
    /// When the limit runs out, as far as is known at the last reading.
    at: Cell<Instant>,
    /// The last reading.
    read_at: Cell<Instant>,
}

impl Deadline {
    /// A deadline `limit` of waiting after `start`.
    pub(crate) fn starting(start: Instant, limit: Duration) -> Deadline {
        Deadline {
            at: Cell::new(start + limit),
            read_at: Cell::new(start),
        }
    }

    /// A deadline `limit` of waiting from now.
    pub(crate) fn after(limit: Duration) -> Deadline {
        Deadline::starting(Instant::now(), limit)
    }

    /// The waiting time left, or `None` once the limit is spent.
    pub(crate) fn left(&self) -> Option<Duration> {
        self.left_at(Instant::now())
    }

    /// [`Deadline::left`] read at `now`.
    fn left_at(&self, now: Instant) -> Option<Duration> {
        let gap = now.saturating_duration_since(self.read_at.get());
        if gap > PAUSE {
            self.at.set(self.at.get() + gap);
        }
        self.read_at.set(self.read_at.get().max(now));
        let left = self.at.get().saturating_duration_since(now);
        (!left.is_zero()).then_some(left)
    }

    /// Runs `work`, which is not waiting on the worker (the caller answering one of its
    /// API calls), and leaves its time out of the limit.
    pub(crate) fn not_waiting<T>(&self, work: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let result = work();
        let end = Instant::now();
        self.skip(start, end);
        result
    }

    /// Leaves `start..end` out of the limit, and takes `end` as the last reading.
    fn skip(&self, start: Instant, end: Instant) {
        self.left_at(start);
        self.at
            .set(self.at.get() + end.saturating_duration_since(start));
        self.read_at.set(self.read_at.get().max(end));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_in_poll_slices_spends_the_limit() {
        let start = Instant::now();
        let deadline = Deadline::starting(start, Duration::from_secs(2));
        let mut now = start;
        for _ in 0..19 {
            now += POLL_SLICE;
            assert!(deadline.left_at(now).is_some());
        }
        now += POLL_SLICE;
        assert_eq!(deadline.left_at(now), None);
    }

    #[test]
    fn a_gap_longer_than_a_pause_does_not_count() {
        let start = Instant::now();
        let deadline = Deadline::starting(start, Duration::from_secs(2));
        let half = start + Duration::from_secs(1) - POLL_SLICE;
        assert!(deadline.left_at(half).is_some());
        // Stopped for an hour: the time left is what it was before the stop.
        let after_stop = half + Duration::from_secs(3600);
        assert_eq!(
            deadline.left_at(after_stop),
            Some(Duration::from_secs(1) + POLL_SLICE)
        );
        // A gap just within a pause counts in full.
        assert_eq!(deadline.left_at(after_stop + PAUSE), Some(POLL_SLICE));
    }

    #[test]
    fn work_done_for_the_worker_does_not_count() {
        let start = Instant::now();
        let deadline = Deadline::starting(start, Duration::from_millis(500));
        let served = start + Duration::from_millis(100);
        deadline.skip(served, served + Duration::from_millis(900));
        // 100 ms waited before the call, none during it.
        assert_eq!(
            deadline.left_at(served + Duration::from_millis(900)),
            Some(Duration::from_millis(400))
        );
        // Skipped time is counted once, even where it was longer than a pause.
        let deadline = Deadline::starting(start, Duration::from_millis(500));
        deadline.skip(start, start + Duration::from_secs(5));
        assert_eq!(
            deadline.left_at(start + Duration::from_secs(5)),
            Some(Duration::from_millis(500))
        );
    }

    #[test]
    fn the_deadline_from_now_has_its_limit_left() {
        let deadline = Deadline::after(Duration::from_secs(60));
        let left = deadline.left().expect("time left");
        assert!(left <= Duration::from_secs(60) && left > Duration::from_secs(59));
    }
}
