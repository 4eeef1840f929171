//! Process isolation of the sandbox: a worker-backed session behaves exactly like an
//! in-process one on ordinary code, and hostile code that escapes the interpreter's own
//! limits (memory outside its heap, work inside one built-in call) only costs its worker
//! process: the execution ends in bounded time with a clear error, the caller and its
//! world are untouched, and the sandbox keeps working with a fresh worker.
#![cfg(target_os = "linux")]

mod fake_host;

use std::time::{Duration, Instant};

use fake_host::FakeHost;
use sage_envs::sandbox::{
    ApiError, ApiHost, ApiSpec, ExecErrorKind, ExecOutcome, FunctionOrigin, FunctionRef, Isolation,
    LimitKind, Limits, Sandbox,
};
use serde_json::{Map, Value};

/// The worker binary cargo built for these tests.
const WORKER: &str = env!("CARGO_BIN_EXE_sage-sandbox-worker");

/// The default limits; debug builds run the interpreter far slower, so there the
/// interpreter's CPU-time cancel is pushed out, and the kernel's backstop with it.
fn limits() -> Limits {
    let mut limits = Limits::default();
    if cfg!(debug_assertions) {
        limits.cpu_time = Duration::from_secs(20);
    }
    limits
}

fn isolated(limits: Limits) -> Sandbox {
    let sandbox = Sandbox::with_worker_program(limits, WORKER)
        .unwrap_or_else(|e| panic!("the worker {WORKER} does not start: {e}"));
    assert_eq!(sandbox.isolation(), Isolation::Process);
    sandbox
}

/// Turns of ordinary agent code: definitions, API calls, prints, errors of every kind
/// the interpreter reports itself, and state kept across turns.
const ORDINARY_TURNS: [&str; 10] = [
    "token = apis.music.login(username=\"alice\", password=\"alice-pw\")[\"access_token\"]\nprint(len(token) > 0)",
    "def titles(token):\n    \"\"\"Playlist titles.\"\"\"\n    return [p[\"title\"] for p in apis.music.show_playlists(access_token=token)]\nprint(titles(token))",
    "print(apis.music.show_playlist(access_token=token, playlist_id=999))",
    "print(apis.music.nope())",
    "print(undefined_name)",
    "x = [1, 2, 3]\nprint(x[10])",
    "for i in range(100000000):\n    pass",
    "def f(n):\n    return f(n + 1)\nf(0)",
    "print(titles(token)[0], apis.util.scale(x=2.5))",
    "print(apis.util.echo(), apis.util.echo(value=None), apis.util.tag(flag=True, labels=[1]))",
];

#[test]
fn a_worker_session_gives_the_same_outcomes_as_an_in_process_one() {
    let mut in_process = Sandbox::new(limits());
    let mut worker = isolated(limits());
    let (mut host_a, mut host_b) = (FakeHost::new(), FakeHost::new());
    for code in ORDINARY_TURNS {
        let a = in_process.execute(code, &mut host_a);
        let b = worker.execute(code, &mut host_b);
        assert_eq!(a, b, "outcomes differ for:\n{code}");
    }
    let titles = FunctionRef {
        name: "titles".to_owned(),
        origin: FunctionOrigin::Execution(1),
    };
    let source = worker.function_source(&titles);
    assert_eq!(source, in_process.function_source(&titles));
    assert!(source.is_some_and(|s| s.starts_with("def titles(token):")));
    assert_eq!(worker.executions(), ORDINARY_TURNS.len() as u32);
}

#[test]
fn skills_load_and_reset_clears_the_session() {
    let mut sandbox = isolated(limits());
    let mut host = FakeHost::new();
    let name = sandbox.load_skill("def double(x):\n    \"\"\"Twice x.\"\"\"\n    return 2 * x");
    assert_eq!(name.as_deref(), Ok("double"));
    let refused = sandbox.load_skill("x = 1");
    assert!(refused.is_err());
    let outcome = sandbox.execute("y = double(21)\nprint(y)", &mut host);
    assert_eq!(outcome.observation(), "42\n");
    assert_eq!(outcome.called[0].origin, FunctionOrigin::Library);
    sandbox.reset();
    assert_eq!(sandbox.executions(), 0);
    let outcome = sandbox.execute("print(y)", &mut host);
    let error = outcome.error.expect("a variable survived the reset");
    assert!(error.message.contains("`y`"), "{}", error.message);
}

/// Time an attack may take in all: the kernel's CPU-time backstop
/// (`Limits::cpu_backstop`, 2 s by default) plus starting a fresh worker, with room for a
/// loaded machine.
const ATTACK_BUDGET: Duration = Duration::from_secs(8);

/// Runs `code` in an isolated session that holds a variable and a library skill, and
/// checks that it is contained: it ends within [`ATTACK_BUDGET`] with an error that
/// says what happened, the host saw no call it should not have, and the sandbox then
/// runs code (with the library skill still there). Returns the outcome.
fn contained(code: &str) -> ExecOutcome {
    let mut sandbox = isolated(limits());
    let mut host = FakeHost::new();
    let skill = "def double(x):\n    \"\"\"Twice x.\"\"\"\n    return 2 * x";
    assert_eq!(sandbox.load_skill(skill).as_deref(), Ok("double"));
    assert!(sandbox.execute("keep = 41", &mut host).succeeded());
    let start = Instant::now();
    let outcome = sandbox.execute(code, &mut host);
    let elapsed = start.elapsed();
    assert!(elapsed < ATTACK_BUDGET, "took {elapsed:?}:\n{code}");
    let error = outcome
        .error
        .clone()
        .unwrap_or_else(|| panic!("should fail:\n{code}"));
    // A limit, or (for code the sandbox refuses outright) an ordinary error; never the
    // sandbox failing.
    assert_ne!(
        error.kind,
        ExecErrorKind::Internal,
        "{}\n{code}",
        error.traceback
    );
    assert!(error.traceback.len() < 2_000, "{}", error.traceback);
    println!(
        "{:?} after {elapsed:?}: {}\n{code}\n",
        error.kind, error.message
    );
    let after = sandbox.execute("print(double(21))", &mut host);
    assert_eq!(
        after.observation(),
        "42\n",
        "the sandbox is broken after:\n{code}"
    );
    if error.message.contains("your code was stopped") {
        assert!(process_limit(error.kind), "{:?}", error.kind);
        assert!(error.message.contains("earlier turns are gone"));
    } else {
        let kept = sandbox.execute("print(keep + 1)", &mut host);
        assert_eq!(kept.observation(), "42\n", "state lost after:\n{code}");
    }
    outcome
}

/// Limits that can end a worker process (and with it the session's variables).
fn process_limit(kind: ExecErrorKind) -> bool {
    matches!(
        kind,
        ExecErrorKind::Limit(
            LimitKind::ProcessMemory | LimitKind::ProcessCpuTime | LimitKind::WallClock
        )
    )
}

#[test]
fn memory_outside_the_interpreter_heap_only_costs_the_worker() {
    let attacks = [
        "s = \"a\" * 100000\nf = s.replace\nf(\"\", s)",
        "s = \"a\" * 100000\nf = getattr(s, \"replace\")\nf(\"\", s)",
        "x = [set(range(1000000)) for i in range(999)]",
        "s = \"x\" * 1000000\napis.util.echo(value=[s] * 100000)",
        "a = [1]\nfor i in range(45):\n    a = [a, a]\nfail(a)",
        "a = [1]\nfor i in range(45):\n    a = [a, a]\nprint([1, 2].index(a))",
    ];
    for code in attacks {
        contained(code);
    }
}

#[test]
fn long_builtin_calls_only_cost_the_worker() {
    let attacks = [
        "a = [1]\nb = [1]\nfor i in range(60):\n    a = [a, a]\n    b = [b, b]\nprint(a == b)",
        "a = (1,)\nb = (1,)\nfor i in range(60):\n    a = (a, a)\n    b = (b, b)\nd = {a: 1, b: 2}",
        "x = 3\nfor i in range(40):\n    x = x * x",
        "print(int(\"9\" * 1000000))",
    ];
    for code in attacks {
        contained(code);
    }
}

#[test]
fn a_hostile_skill_is_refused_without_harm() {
    let mut sandbox = isolated(limits());
    let mut host = FakeHost::new();
    let hostile = "def grab(x = [set(range(1000000)) for i in range(999)]):\n    \"\"\"Hostile.\"\"\"\n    return x";
    let start = Instant::now();
    assert!(sandbox.load_skill(hostile).is_err());
    assert!(start.elapsed() < ATTACK_BUDGET);
    assert_eq!(
        sandbox
            .load_skill("def double(x):\n    return 2 * x")
            .as_deref(),
        Ok("double")
    );
    let outcome = sandbox.execute("print(double(4))", &mut host);
    assert_eq!(outcome.observation(), "8\n");
}

/// Both kinds of sandbox, for tests whose outcome must not depend on where code runs.
fn both(limits: Limits) -> [Sandbox; 2] {
    [Sandbox::new(limits.clone()), isolated(limits)]
}

#[test]
fn large_api_arguments_are_refused_before_anything_is_sent() {
    // 83 bytes of code make a 32 MB string; passing it (or a list of it twice, as
    // `complete_task`'s answer) to an API once stalled the trainer's thread for 45 s.
    let attacks = [
        (
            "s = \"\".join([\"x\" * 1000000] * 32)\napis.util.echo(value=s)",
            "value",
        ),
        (
            "s = \"\".join([\"x\" * 1000000] * 32)\napis.util.echo(value=[s, s])",
            "value",
        ),
        (
            "s = \"\".join([\"x\" * 1000000] * 32)\napis.util.tag(flag=True, labels=[s])",
            "labels",
        ),
    ];
    let limits = limits();
    let mut host = FakeHost::new();
    for (code, argument) in attacks {
        // Fresh sessions: each attack's string alone is half the heap limit.
        let [mut in_process, mut worker] = both(limits.clone());
        let a = in_process.execute(code, &mut host);
        let start = Instant::now();
        let b = worker.execute(code, &mut host);
        let elapsed = start.elapsed();
        assert_eq!(a, b, "outcomes differ for:\n{code}");
        // Refused in the worker before the call is encoded: far from any time limit.
        assert!(elapsed < limits.cpu_time, "took {elapsed:?}:\n{code}");
        let error = b.error.expect("refused");
        assert_eq!(
            error.kind,
            ExecErrorKind::Limit(LimitKind::ApiValueSize),
            "{}\n{code}",
            error.message
        );
        assert!(
            error.message.contains(&format!("argument `{argument}`"))
                && error.message.contains("larger than 1048576 bytes"),
            "{}",
            error.message
        );
        assert_eq!(host.calls, 0, "the host saw the call");
        // The worker was not replaced: the session's `s` is still there.
        let after = worker.execute("print(len(s))", &mut host);
        assert_eq!(after.observation(), "32000000\n");
    }
}

#[test]
fn a_large_frame_crosses_the_pipe_in_time_linear_in_its_size() {
    // With the heap and argument limits raised, 32 MB of control characters go to the
    // host and back: 192 MB of JSON (`\u0001` per character) each way. Reading a frame
    // used to zero the rest of its buffer on every 64 KiB read, quadratic in its size:
    // 9.3 s on the 2-core VM, against 1.3 s now (`cargo bench -p sage-envs --bench
    // sandbox`); the bound leaves room for a loaded machine.
    let mut limits = limits();
    limits.max_heap_bytes = 256 << 20;
    limits.max_api_value_bytes = 256 << 20;
    limits.cpu_time = Duration::from_secs(30);
    let mut worker = isolated(limits);
    let mut host = FakeHost::new();
    let code = "s = \"\".join([chr(1) * 1000000] * 32)\nprint(len(apis.util.echo(value=s)))";
    let start = Instant::now();
    let outcome = worker.execute(code, &mut host);
    let elapsed = start.elapsed();
    assert_eq!(outcome.observation(), "32000000\n");
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
}

#[test]
fn code_over_the_size_limit_is_refused_without_sending_it() {
    let limits = limits();
    let [mut in_process, mut worker] = both(limits.clone());
    let mut host = FakeHost::new();
    // 40 MB of code, and code just over the limit ending in a multi-byte character.
    let huge = format!("x = 1\n#{}", "a".repeat(40 << 20));
    let edge = format!("#{}é", "a".repeat(limits.max_code_bytes - 2));
    for code in [huge.as_str(), edge.as_str()] {
        let a = in_process.execute(code, &mut host);
        let start = Instant::now();
        let b = worker.execute(code, &mut host);
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(a, b);
        let error = b.error.expect("refused");
        assert_eq!(error.kind, ExecErrorKind::Limit(LimitKind::CodeSize));
    }
    assert_eq!(worker.executions(), 2);
    let skill = format!(
        "def f():\n    \"\"\"{}\"\"\"\n    return 1",
        "a".repeat(40 << 20)
    );
    let (a, b) = (in_process.load_skill(&skill), worker.load_skill(&skill));
    assert_eq!(a, b);
    assert_eq!(
        b.expect_err("refused").kind,
        ExecErrorKind::Limit(LimitKind::CodeSize)
    );
}

/// The fake world, answering each call only after `delay`: a slow host, or a caller
/// whose thread is held up.
struct SlowHost {
    world: FakeHost,
    delay: Duration,
}

impl ApiHost for SlowHost {
    fn spec(&self, app: &str, api: &str) -> Option<&ApiSpec> {
        self.world.spec(app, api)
    }

    fn app_names(&self) -> Vec<String> {
        self.world.app_names()
    }

    fn api_names(&self, app: &str) -> Vec<String> {
        self.world.api_names(app)
    }

    fn call(&mut self, app: &str, api: &str, args: Map<String, Value>) -> Result<Value, ApiError> {
        std::thread::sleep(self.delay);
        self.world.call(app, api, args)
    }
}

#[test]
fn time_spent_waiting_does_not_count_against_the_cpu_limit() {
    // Two calls, each answered after 0.8 s: the execution takes over 1.6 s, past the
    // CPU limit of 1 s, but spends almost none of it computing. When the limit counted
    // elapsed time, the interpreter cancelled it after the second call.
    let limits = Limits {
        cpu_time: Duration::from_secs(1),
        ..limits()
    };
    let code = "a = apis.util.echo(value=20)\nb = apis.util.echo(value=22)\nprint(a + b)";
    for mut sandbox in both(limits) {
        let mut host = SlowHost {
            world: FakeHost::new(),
            delay: Duration::from_millis(800),
        };
        let start = Instant::now();
        let outcome = sandbox.execute(code, &mut host);
        assert!(start.elapsed() > Duration::from_millis(1600));
        assert_eq!(
            outcome.observation(),
            "42\n",
            "{:?}: {:?}",
            sandbox.isolation(),
            outcome.error
        );
    }
}

#[test]
fn time_spent_answering_api_calls_does_not_count_against_the_kill_timer() {
    // Each call is answered after 1.2 s, past the 1 s kill timer: the worker waits on
    // the caller then, not the other way round. When the timer counted elapsed time, it
    // killed the worker during the first answer.
    let limits = Limits {
        wall_clock: Duration::from_secs(1),
        ..limits()
    };
    let mut sandbox = isolated(limits);
    let mut host = SlowHost {
        world: FakeHost::new(),
        delay: Duration::from_millis(1200),
    };
    let code = "a = apis.util.echo(value=20)\nb = apis.util.echo(value=22)\nprint(a + b)";
    let outcome = sandbox.execute(code, &mut host);
    assert_eq!(outcome.observation(), "42\n", "{:?}", outcome.error);
}

#[test]
fn computing_past_the_cpu_limit_is_cancelled_with_the_time_spent() {
    let limits = Limits {
        cpu_time: Duration::from_millis(200),
        ..limits()
    };
    // Native work the tick budget does not see: each insert at the front moves the
    // whole list.
    let code = "x = list(range(1000000))\nfor i in range(100000):\n    x.insert(0, i)";
    for mut sandbox in both(limits.clone()) {
        let mut host = FakeHost::new();
        let outcome = sandbox.execute(code, &mut host);
        let error = outcome.error.expect("cancelled");
        assert_eq!(
            error.kind,
            ExecErrorKind::Limit(LimitKind::CpuTime),
            "{:?}: {}",
            sandbox.isolation(),
            error.message
        );
        assert!(
            error
                .message
                .contains("ms of CPU time (the limit is 200 ms)"),
            "{}",
            error.message
        );
        // The interpreter cancelled it: the worker and its session live on.
        let after = sandbox.execute("print(len(x) > 1000000)", &mut host);
        assert_eq!(after.observation(), "True\n");
    }
}

/// Set, to a test's name, in the environment of a copy of this test binary that runs
/// that test alone (see [`start_alone`]).
const ALONE: &str = "SAGE_TEST_ALONE";

/// Whether this process is the copy of the test binary started to run `test` alone.
fn running_alone(test: &str) -> bool {
    std::env::var(ALONE).is_ok_and(|name| name == test)
}

/// Starts this test binary again to run `test` alone, in a process group of its own
/// (its workers join it), with its output piped back.
fn start_alone(test: &str) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([test, "--exact", "--nocapture"])
        .env(ALONE, test)
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the copy of the test binary starts")
}

/// Waits for a run [`start_alone`] started to end, at most a minute (then kills it and
/// fails), and returns whether it succeeded with what it printed that was not read yet.
fn finish(mut run: std::process::Child) -> (bool, String) {
    use std::io::Read;
    let start = Instant::now();
    let status = loop {
        if let Some(status) = run.try_wait().expect("the run's status") {
            break status;
        }
        if start.elapsed() > Duration::from_secs(60) {
            signal(-(run.id() as i32), libc::SIGKILL);
            panic!("the run did not end within a minute");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut said = String::new();
    if let Some(mut stdout) = run.stdout.take() {
        stdout.read_to_string(&mut said).expect("the run's output");
    }
    (status.success(), said)
}

/// Sends `signal` to a process (or, negative, a process group) the test started.
fn signal(pid: i32, signal: libc::c_int) {
    // SAFETY: kill(2) touches no memory; the id is of a process this test started.
    assert_eq!(
        unsafe { libc::kill(pid, signal) },
        0,
        "kill({pid}, {signal})"
    );
}

/// The processes whose parent is this one (from `/proc/PID/stat`).
fn child_processes() -> Vec<i32> {
    let own = std::process::id().to_string();
    let parent_of = |pid: i32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The parent's id is the second field after the command's closing ')'.
        let (_, rest) = stat.rsplit_once(')')?;
        rest.split_whitespace().nth(1).map(str::to_owned)
    };
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| parent_of(pid).as_deref() == Some(own.as_str()))
        .collect()
}

/// How long [`a_run_stopped_past_the_kill_timer_continues_its_execution`] keeps the run
/// stopped: past its kill timer (2 s).
const PAUSE_FOR: Duration = Duration::from_secs(3);

#[test]
fn a_run_stopped_past_the_kill_timer_continues_its_execution() {
    const TEST: &str = "a_run_stopped_past_the_kill_timer_continues_its_execution";
    if running_alone(TEST) {
        return run_to_be_paused();
    }
    use std::io::{BufRead, BufReader};
    // The run and its worker are stopped whole, as `kill -STOP -- -PGID` stops a
    // training run.
    let mut run = start_alone(TEST);
    let group = -(run.id() as i32);
    let mut stdout = BufReader::new(run.stdout.take().expect("stdout"));
    let mut said = String::new();
    while !said.ends_with("executing\n") {
        let read = stdout.read_line(&mut said).expect("a line");
        assert!(read > 0, "the run ended before executing:\n{said}");
    }
    std::thread::sleep(Duration::from_millis(100));
    signal(group, libc::SIGSTOP);
    std::thread::sleep(PAUSE_FOR);
    signal(group, libc::SIGCONT);
    run.stdout = Some(stdout.into_inner());
    let (succeeded, rest) = finish(run);
    said.push_str(&rest);
    assert!(succeeded, "the paused run failed:\n{said}");
    // The stop fell inside the execution, which then completed.
    let took = said
        .lines()
        .find_map(|line| line.strip_prefix("executed in ms: "))
        .and_then(|ms| ms.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no execution time in:\n{said}"));
    assert!(took >= PAUSE_FOR.as_millis() as u64, "{said}");
    assert!(
        said.contains(&format!("outcome: {}", 1_499_998_500_000u64 % 997)),
        "{said}"
    );
}

/// The run [`a_run_stopped_past_the_kill_timer_continues_its_execution`] pauses: an
/// isolated execution of about half a second of work under a 2 s kill timer, which the
/// test stops for 3 s while it computes.
fn run_to_be_paused() {
    let limits = Limits {
        wall_clock: Duration::from_secs(2),
        cpu_time: Duration::from_secs(20),
        max_ticks: 1 << 40,
        ..Limits::default()
    };
    let mut sandbox = isolated(limits);
    let mut host = FakeHost::new();
    let code = "n = 0\nfor j in range(3):\n    for i in range(1000000):\n        n = (n + i) % 997\nprint(n)";
    println!("executing");
    let start = Instant::now();
    let outcome = sandbox.execute(code, &mut host);
    println!("executed in ms: {}", start.elapsed().as_millis());
    assert!(outcome.succeeded(), "{:?}", outcome.error);
    println!("outcome: {}", outcome.observation().trim());
}

#[test]
fn a_worker_that_stops_answering_is_killed_after_the_kill_timer() {
    const TEST: &str = "a_worker_that_stops_answering_is_killed_after_the_kill_timer";
    if !running_alone(TEST) {
        // Alone, so that the only child process of the run is this test's worker.
        let (succeeded, said) = finish(start_alone(TEST));
        assert!(succeeded, "the run failed:\n{said}");
        assert!(said.contains("killed after ms: "), "{said}");
        return;
    }
    let kill_timer = Duration::from_secs(1);
    let mut sandbox = isolated(Limits {
        wall_clock: kill_timer,
        ..limits()
    });
    let mut host = FakeHost::new();
    assert!(sandbox.execute("x = 1", &mut host).succeeded());
    // The worker stops (as a worker stuck without computing would): the caller still
    // waits in its poll slices, which count, and kills it when the timer runs out.
    let workers = child_processes();
    assert_eq!(workers.len(), 1, "workers: {workers:?}");
    signal(workers[0], libc::SIGSTOP);
    let start = Instant::now();
    let outcome = sandbox.execute("print(x)", &mut host);
    let took = start.elapsed();
    let error = outcome.error.expect("killed");
    assert_eq!(
        error.kind,
        ExecErrorKind::Limit(LimitKind::WallClock),
        "{}",
        error.message
    );
    // The timer counts from the start of the execution; a thread whose poll timed out
    // runs again within tens of milliseconds.
    assert!(
        took >= kill_timer && took < kill_timer + Duration::from_millis(500),
        "{took:?}"
    );
    println!("killed after ms: {}", took.as_millis());
    // A fresh worker carries on, without the stopped one's variables.
    assert_eq!(sandbox.execute("print(2)", &mut host).observation(), "2\n");
}
