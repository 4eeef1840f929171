//! Sandbox speed against issue 4's targets: a fresh session plus its first execution in
//! under 1 ms, and at least 50,000 API calls per second through the sandbox. Each
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

fn row(name: &str, figure: String, target: &str, met: Option<bool>) {
    let status = match met {
        Some(true) => "met",
        Some(false) => "NOT met",
        None => "-",
    };
    println!("| {name:<58} | {figure:>16} | {target:<12} | {status} |");
}

fn main() {
    let limits = Limits {
        max_api_calls_per_execution: CALLS as u32,
        max_api_calls_per_episode: u32::MAX,
        ..Limits::default()
    };
    let mut host = FakeHost::new();
    let mut sandbox = Sandbox::new(limits.clone());
    let batch = Duration::from_millis(100);

    println!(
        "| {:<58} | {:>16} | {:<12} | status |",
        "benchmark", "figure", "target"
    );
    println!(
        "|{}|{}|{}|--------|",
        "-".repeat(60),
        "-".repeat(18),
        "-".repeat(14)
    );

    let first = harness::median_time(
        || {
            sandbox.reset();
            let outcome = sandbox.execute(FIRST_TURN, &mut host);
            assert!(outcome.succeeded(), "{}", outcome.observation());
        },
        15,
        batch,
    );
    let us = first.as_secs_f64() * 1e6;
    row(
        "reset + first execution (define, login, call: 2 API calls)",
        format!("{us:.1} us"),
        "< 1000 us",
        Some(us < 1000.0),
    );

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
    let us = with_library.as_secs_f64() * 1e6;
    row(
        "reset + load 3 skills + first execution using them",
        format!("{us:.1} us"),
        "< 1000 us",
        Some(us < 1000.0),
    );

    let trivial = harness::median_time(
        || {
            sandbox.reset();
            sandbox.execute("x = 1", &mut host)
        },
        15,
        batch,
    );
    row(
        "reset + trivial execution (`x = 1`)",
        format!("{:.1} us", trivial.as_secs_f64() * 1e6),
        "-",
        None,
    );

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
    let rate = CALLS as f64 / echo.as_secs_f64();
    row(
        "API calls/s, `apis.util.echo(value=i)` in a loop",
        format!("{rate:.0} /s"),
        ">= 50000 /s",
        Some(rate >= 50_000.0),
    );

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
    let rate = CALLS as f64 / listing.as_secs_f64();
    row(
        "API calls/s, token-checked listing returning dicts",
        format!("{rate:.0} /s"),
        ">= 50000 /s",
        Some(rate >= 50_000.0),
    );

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
    let ns = loop_only.as_secs_f64() * 1e9 / CALLS as f64;
    row(
        "plain loop iteration (`n += i`), for comparison",
        format!("{ns:.0} ns"),
        "-",
        None,
    );
}
