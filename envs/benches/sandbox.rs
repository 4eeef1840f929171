//! Sandbox speed, in-process against process isolation (the same code, host and limits,
//! in one run), against the targets: a fresh session plus its first execution in under
//! 1 ms, and at least 100,000 API calls per second through the isolated sandbox. Each
//! figure is the median of timed batches. Run: `cargo bench -p sage-envs --bench sandbox`.

/// Shared with the core benchmarks: median of timed batches.
#[path = "../../core/benches/harness.rs"]
#[allow(dead_code)] // its table printers are used by the core benchmarks only
mod harness;

#[path = "../tests/fake_host/mod.rs"]
mod fake_host;

use std::time::Duration;

use fake_host::FakeHost;
use sage_envs::sandbox::{Limits, Sandbox};

/// The worker binary cargo built beside this benchmark.
const WORKER: &str = env!("CARGO_BIN_EXE_sage-sandbox-worker");

/// A first turn in the skill format: define a function, log in, call it (2 API calls).
const FIRST_TURN: &str = r#"
def playlist_titles(access_token: str) -> list:
    """Titles of the user's playlists."""
    return [p["title"] for p in apis.music.show_playlists(access_token=access_token)]

token = apis.music.login(username="alice", password="alice-pw")["access_token"]
print(playlist_titles(token))
"#;

/// Library skills loaded at reset in the second scenario.
const SKILLS: [&str; 3] = [
    "def login_music(user: str, password: str) -> str:\n    \"\"\"Logs in, returns the token.\"\"\"\n    return apis.music.login(username=user, password=password)[\"access_token\"]",
    "def playlist_titles(access_token: str) -> list:\n    \"\"\"Titles of the user's playlists.\"\"\"\n    return [p[\"title\"] for p in apis.music.show_playlists(access_token=access_token)]",
    "def count_songs(access_token: str, playlist_id: int) -> int:\n    \"\"\"Songs in a playlist.\"\"\"\n    return len(apis.music.show_playlist(access_token=access_token, playlist_id=playlist_id)[\"songs\"])",
];

const CALLS: usize = 10_000;

/// A target: how it reads, and whether a figure meets it.
type Target = (&'static str, fn(f64) -> bool);

/// One benchmark: its name, the unit its figure is in, and the target it has.
struct Case {
    name: &'static str,
    unit: &'static str,
    target: Option<Target>,
}

const CASES: [Case; 6] = [
    Case {
        name: "reset + first execution (define, login, call: 2 API calls)",
        unit: "us",
        target: Some(("< 1000 us", |us| us < 1000.0)),
    },
    Case {
        name: "reset + load 3 skills + first execution using them",
        unit: "us",
        target: Some(("< 1000 us", |us| us < 1000.0)),
    },
    Case {
        name: "reset + trivial execution (`x = 1`)",
        unit: "us",
        target: None,
    },
    Case {
        name: "API calls/s, `apis.util.echo(value=i)` in a loop",
        unit: "/s",
        target: Some((">= 100000 /s", |rate| rate >= 100_000.0)),
    },
    Case {
        name: "API calls/s, token-checked listing returning dicts",
        unit: "/s",
        target: Some((">= 100000 /s", |rate| rate >= 100_000.0)),
    },
    Case {
        name: "plain loop iteration (`n += i`), ns",
        unit: "ns",
        target: None,
    },
];

/// The figures of [`CASES`] for one sandbox.
fn measure(sandbox: &mut Sandbox) -> Vec<f64> {
    let mut host = FakeHost::new();
    let batch = Duration::from_millis(100);
    let mut figures = Vec::new();
    let first = harness::median_time(
        || {
            sandbox.reset();
            let outcome = sandbox.execute(FIRST_TURN, &mut host);
            assert!(outcome.succeeded(), "{}", outcome.observation());
        },
        15,
        batch,
    );
    figures.push(first.as_secs_f64() * 1e6);
    let with_library = harness::median_time(
        || {
            sandbox.reset();
            for skill in SKILLS {
                sandbox.load_skill(skill).expect("skill loads");
            }
            let outcome = sandbox.execute(
                "t = login_music('alice', 'alice-pw')\nprint(playlist_titles(t), count_songs(t, 1))",
                &mut host,
            );
            assert!(outcome.succeeded(), "{}", outcome.observation());
        },
        15,
        batch,
    );
    figures.push(with_library.as_secs_f64() * 1e6);
    let trivial = harness::median_time(
        || {
            sandbox.reset();
            sandbox.execute("x = 1", &mut host)
        },
        15,
        batch,
    );
    figures.push(trivial.as_secs_f64() * 1e6);
    let echo_loop = format!("for i in range({CALLS}):\n    apis.util.echo(value=i)");
    let echo = harness::median_time(
        || {
            sandbox.reset();
            let outcome = sandbox.execute(&echo_loop, &mut host);
            assert!(outcome.succeeded(), "{}", outcome.observation());
        },
        9,
        batch,
    );
    figures.push(CALLS as f64 / echo.as_secs_f64());
    let listing_loop = format!(
        "t = apis.music.login(username='alice', password='alice-pw')['access_token']\nfor i in range({}):\n    apis.music.show_playlists(access_token=t)",
        CALLS - 1
    );
    host.token_lifetime = u64::MAX / 2;
    let listing = harness::median_time(
        || {
            sandbox.reset();
            let outcome = sandbox.execute(&listing_loop, &mut host);
            assert!(outcome.succeeded(), "{}", outcome.observation());
        },
        9,
        batch,
    );
    figures.push(CALLS as f64 / listing.as_secs_f64());
    let loop_only = harness::median_time(
        || {
            sandbox.reset();
            sandbox.execute(
                &format!("n = 0\nfor i in range({CALLS}):\n    n += i"),
                &mut host,
            )
        },
        9,
        batch,
    );
    figures.push(loop_only.as_secs_f64() * 1e9 / CALLS as f64);
    figures
}

/// Characters of the string [`large_frame`] sends to the host and back.
const LARGE_CHARS: usize = 32_000_000;

/// Median milliseconds of one execution that passes a 32 MB string of control
/// characters to `apis.util.echo` and gets it back (with the heap and argument limits
/// raised to let it through): through a worker, one JSON frame of 192 MB each way
/// (`\u0001` per character).
fn large_frame(sandbox: &mut Sandbox) -> f64 {
    let mut host = FakeHost::new();
    let code = format!(
        "s = \"\".join([chr(1) * 1000000] * {})\nprint(len(apis.util.echo(value=s)))",
        LARGE_CHARS / 1_000_000
    );
    let time = harness::median_time(
        || {
            sandbox.reset();
            let outcome = sandbox.execute(&code, &mut host);
            assert_eq!(outcome.observation(), format!("{LARGE_CHARS}\n"));
        },
        5,
        Duration::ZERO,
    );
    time.as_secs_f64() * 1e3
}

fn main() {
    let limits = Limits {
        max_api_calls_per_execution: CALLS as u32,
        max_api_calls_per_episode: u32::MAX,
        ..Limits::default()
    };
    let in_process = measure(&mut Sandbox::new(limits.clone()));
    let mut worker = Sandbox::with_worker_program(limits, WORKER)
        .unwrap_or_else(|e| panic!("the worker {WORKER} does not start: {e}"));
    let isolated = measure(&mut worker);
    println!(
        "| {:<60} | {:>12} | {:>12} | {:>6} | {:<12} | isolated |",
        "benchmark", "in-process", "isolated", "ratio", "target"
    );
    println!(
        "|{}|{}|{}|{}|{}|----------|",
        "-".repeat(62),
        "-".repeat(14),
        "-".repeat(14),
        "-".repeat(8),
        "-".repeat(14)
    );
    for ((case, a), b) in CASES.iter().zip(&in_process).zip(&isolated) {
        let (target, status) = match case.target {
            Some((text, met)) => (text, if met(*b) { "met" } else { "NOT met" }),
            None => ("-", "-"),
        };
        println!(
            "| {:<60} | {:>9.1} {:<2} | {:>9.1} {:<2} | {:>6.2} | {:<12} | {status} |",
            case.name,
            a,
            case.unit,
            b,
            case.unit,
            b / a,
            target
        );
    }
    let limits = Limits {
        max_heap_bytes: 256 << 20,
        max_api_value_bytes: 256 << 20,
        cpu_time: Duration::from_secs(30),
        ..Limits::default()
    };
    let in_process = large_frame(&mut Sandbox::new(limits.clone()));
    let mut worker = Sandbox::with_worker_program(limits, WORKER)
        .unwrap_or_else(|e| panic!("the worker {WORKER} does not start: {e}"));
    let isolated = large_frame(&mut worker);
    let frame_bytes =
        serde_json::to_string(&"\u{1}".repeat(LARGE_CHARS)).map_or(0, |json| json.len());
    println!(
        "| {:<60} | {:>9.1} ms | {:>9.1} ms | {:>6.2} | {} bytes of JSON each way |",
        "a 32 MB string to an API and back",
        in_process,
        isolated,
        isolated / in_process,
        frame_bytes
    );
}
