//! Process isolation under load: RL keeps up to chains x rollouts sessions live, each
//! driven by its own thread. One session running hostile code must not slow the
//! others down, and no thread may wait on its worker past the kill timer. (Its own
//! test binary, so that no other test shares the machine while it measures.)
#![cfg(target_os = "linux")]

mod fake_host;

use std::time::{Duration, Instant};

use fake_host::FakeHost;
use sage_envs::sandbox::{Isolation, Limits, Sandbox};

/// The kill timer here: the default (`Limits::wall_clock`, a minute) is far above what
/// any execution of this test takes, so it is set to the 2 s it was when the sandbox's
/// cancel counted elapsed time, and the test still shows that no caller waits past it.
const KILL_TIMER: Duration = Duration::from_secs(2);

/// How far past the kill timer a caller may wait on its worker here. After the timer
/// runs out, the caller still has to be scheduled again (its `poll` slice ends), kill
/// the worker and reap it, with 65 busy processes sharing 2 cores: 2.121 s against the
/// 2 s timer was measured with a build and a training job also running, and 2.253 s on
/// a CI machine. One second is the longest gap the deadline itself counts as waiting
/// (`PAUSE`), and it still fails a caller that no kill timer stops: the interpreter's
/// CPU-time limit alone would end the hostile code only after about 30 s here (1 s of
/// CPU at a 1/65 share of 2 cores).
const WAKE_UP: Duration = Duration::from_secs(1);

/// The worker binary cargo built for these tests.
const WORKER: &str = env!("CARGO_BIN_EXE_sage-sandbox-worker");

fn isolated(limits: Limits) -> Sandbox {
    let sandbox = Sandbox::with_worker_program(limits, WORKER)
        .unwrap_or_else(|e| panic!("the worker {WORKER} does not start: {e}"));
    assert_eq!(sandbox.isolation(), Isolation::Process);
    sandbox
}

/// Median and longest wall time of the benign executions of 64 concurrent isolated
/// sessions (each on its own thread, as RL's rollouts run), with or without one more
/// session running `hostile` over and over meanwhile.
fn concurrent_sessions(hostile: Option<&'static str>) -> Vec<Duration> {
    const SESSIONS: usize = 64;
    const EXECUTIONS: usize = 12;
    let benign = "n = 0\nfor i in range(40000):\n    n = n + i\nprint(n)";
    let limits = Limits {
        wall_clock: KILL_TIMER,
        ..Limits::default()
    };
    let done = std::sync::atomic::AtomicBool::new(false);
    // Every session (the hostile one too) starts its timed executions together, once
    // all have a worker and have run once.
    let start_line = std::sync::Barrier::new(SESSIONS + usize::from(hostile.is_some()));
    let (times, longest_hostile) = std::thread::scope(|scope| {
        let hostile = hostile.map(|code| {
            let (limits, done, start_line) = (limits.clone(), &done, &start_line);
            scope.spawn(move || {
                let mut sandbox = isolated(limits);
                let mut host = FakeHost::new();
                let mut longest = Duration::ZERO;
                start_line.wait();
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let start = Instant::now();
                    assert!(!sandbox.execute(code, &mut host).succeeded());
                    longest = longest.max(start.elapsed());
                }
                longest
            })
        });
        let sessions: Vec<_> = (0..SESSIONS)
            .map(|_| {
                let (limits, start_line) = (limits.clone(), &start_line);
                scope.spawn(move || {
                    let mut sandbox = isolated(limits);
                    let mut host = FakeHost::new();
                    assert!(sandbox.execute(benign, &mut host).succeeded());
                    start_line.wait();
                    (0..EXECUTIONS)
                        .map(|_| {
                            let start = Instant::now();
                            let outcome = sandbox.execute(benign, &mut host);
                            assert_eq!(outcome.observation(), "799980000\n");
                            start.elapsed()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let times: Vec<Duration> = sessions
            .into_iter()
            .flat_map(|session| session.join().expect("a session"))
            .collect();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let longest_hostile = hostile.map(|h| h.join().expect("the hostile session"));
        (times, longest_hostile)
    });
    let limit = KILL_TIMER + WAKE_UP;
    if let Some(longest) = longest_hostile {
        assert!(longest < limit, "the caller waited {longest:?} on a worker");
    }
    times
}

/// The median of `times`, sorted in place.
fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Rounds of each kind.
const ROUNDS: usize = 3;

#[test]
fn a_hostile_session_does_not_slow_63_others_down() {
    // A program that keeps its worker as busy as it can until the sandbox stops it,
    // over and over; the fair scheduler gives it 1/65 of the CPU meanwhile.
    let hostile = "big = list(range(1000000))\nfor i in range(1000000):\n    x = sorted(big)";
    // Rounds alternate, so that a change of the machine's load meanwhile falls on both.
    let (mut quiet, mut loaded) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        quiet.extend(concurrent_sessions(None));
        loaded.extend(concurrent_sessions(Some(hostile)));
    }
    // No benign execution waits for its worker past the kill timer either.
    let longest = loaded.iter().max().copied().unwrap_or_default();
    assert!(longest < KILL_TIMER + WAKE_UP);
    let (quiet, loaded) = (median(&mut quiet), median(&mut loaded));
    println!("median execution: {quiet:?} alone, {loaded:?} beside the hostile session");
    // Measured 2-7% slower on the 2-core VM (medians of rounds alone vary by about 5%
    // between rounds); the bound leaves room for that noise, and still fails a hostile
    // session that takes more than its share of the machine or holds what others need.
    assert!(
        loaded.as_secs_f64() <= 1.25 * quiet.as_secs_f64(),
        "median {loaded:?} against {quiet:?}"
    );
}
