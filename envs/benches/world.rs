//! Speed of the built-in world: generating a world, snapshots and diffs, API calls on
//! the host alone, and API calls through the sandbox against issue 4's target of at
//! least 50,000 per second. Each figure is the median of timed batches.
//! Run: `cargo bench -p sage-envs --bench world`.

/// Shared with the core benchmarks: median of timed batches.
#[path = "../../core/benches/harness.rs"]
#[allow(dead_code)] // its table printers are used by the core benchmarks only
mod harness;

use std::time::Duration;

use sage_envs::sandbox::{bind_args, ApiHost, Limits, Sandbox};
use sage_envs::world::{registry, World, WorldConfig, USER};
use serde_json::{json, Map, Value};

/// API calls per sandbox execution in the through-the-sandbox figures.
const CALLS: usize = 10_000;

fn row(name: &str, figure: String, target: &str, met: Option<bool>) {
    let status = match met {
        Some(true) => "met",
        Some(false) => "NOT met",
        None => "-",
    };
    println!("| {name:<58} | {figure:>16} | {target:<12} | {status} |");
}

/// Arguments bound to the API's signature, as the sandbox hands them to the host.
fn bound(app: &str, api: &str, args: Value) -> Map<String, Value> {
    let spec = registry().spec(app, api).expect("the API exists");
    let Value::Object(args) = args else {
        panic!("arguments must be an object")
    };
    bind_args(spec, args).expect("the arguments fit")
}

fn main() {
    let config = WorldConfig {
        token_lifetime: u64::MAX,
        ..WorldConfig::default()
    };
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

    let mut seed = 0;
    let generate = harness::median_time(
        || {
            seed += 1;
            World::generate_with(seed, config.clone())
        },
        9,
        batch,
    );
    let world = World::generate_with(7, config.clone());
    row(
        &format!("generate a world ({} rows)", world.db().row_count()),
        format!("{:.2} ms", generate.as_secs_f64() * 1e3),
        "-",
        None,
    );

    let snapshot = harness::median_time(|| world.snapshot(), 15, batch);
    row(
        "snapshot (clone of the whole state)",
        format!("{:.2} us", snapshot.as_secs_f64() * 1e6),
        "-",
        None,
    );

    let mut host = world.clone();
    let coinpay = host.issue_token("coinpay", USER).expect("token");
    let tunes = host.issue_token("tunes", USER).expect("token");
    let friend = host.db().relations_of(USER)[0].0;
    let friend_email = host.db().email_of(friend);
    let before = host.snapshot();
    let payment = bound(
        "coinpay",
        "send_payment",
        json!({"access_token": coinpay, "receiver_email": friend_email, "amount": 1.0}),
    );
    host.call("coinpay", "send_payment", payment)
        .expect("payment");
    let diff = harness::median_time(|| host.diff_since(&before), 15, batch);
    row(
        "diff after one payment (2 tables written)",
        format!("{:.2} us", diff.as_secs_f64() * 1e6),
        "-",
        None,
    );
    let fresh = World::generate_with(7, config.clone());
    let full = harness::median_time(|| fresh.db().diff(world.db()), 9, batch);
    row(
        "diff of two equal, unshared worlds (every row compared)",
        format!("{:.2} ms", full.as_secs_f64() * 1e3),
        "-",
        None,
    );

    let calls: [(&str, &str, &str, Value); 4] = [
        (
            "host: supervisor.show_profile",
            "supervisor",
            "show_profile",
            json!({}),
        ),
        (
            "host: tunes.show_song",
            "tunes",
            "show_song",
            json!({"access_token": tunes, "song_id": 17}),
        ),
        (
            "host: coinpay.show_transactions (a page of 20)",
            "coinpay",
            "show_transactions",
            json!({"access_token": coinpay, "page_limit": 20}),
        ),
        (
            "host: tunes.search_songs (query, sorted, page of 20)",
            "tunes",
            "search_songs",
            json!({"access_token": tunes, "query": "the", "sort_by": "-play_count", "page_limit": 20}),
        ),
    ];
    for (name, app, api, args) in calls {
        let args = bound(app, api, args);
        let time = harness::median_time(
            || host.call(app, api, args.clone()).expect("call succeeds"),
            9,
            batch,
        );
        let rate = 1.0 / time.as_secs_f64();
        row(
            name,
            format!("{rate:.0} /s"),
            ">= 50000 /s",
            Some(rate >= 50_000.0),
        );
    }
    let like = bound(
        "tunes",
        "like_song",
        json!({"access_token": tunes, "song_id": 3}),
    );
    let unlike = bound(
        "tunes",
        "unlike_song",
        json!({"access_token": tunes, "song_id": 3}),
    );
    let pair = harness::median_time(
        || {
            host.call("tunes", "like_song", like.clone()).ok();
            host.call("tunes", "unlike_song", unlike.clone()).ok()
        },
        9,
        batch,
    );
    let rate = 2.0 / pair.as_secs_f64();
    row(
        "host: tunes.like_song + unlike_song",
        format!("{rate:.0} /s"),
        ">= 50000 /s",
        Some(rate >= 50_000.0),
    );

    let limits = Limits {
        max_api_calls_per_execution: CALLS as u32 + 10,
        max_api_calls_per_episode: u32::MAX,
        ..Limits::default()
    };
    let mut sandbox = Sandbox::new(limits);
    let loops = [
        (
            "sandbox: tunes.show_song in a loop",
            format!("for i in range({CALLS}):\n    apis.tunes.show_song(access_token={tunes:?}, song_id=1 + i % 500)"),
        ),
        (
            "sandbox: coinpay.show_transactions pages in a loop",
            format!("for i in range({CALLS}):\n    apis.coinpay.show_transactions(access_token={coinpay:?}, page_index=i % 8, page_limit=5)"),
        ),
        (
            "sandbox: supervisor.show_profile in a loop",
            format!("for i in range({CALLS}):\n    apis.supervisor.show_profile()"),
        ),
    ];
    for (name, code) in loops {
        let time = harness::median_time(
            || {
                sandbox.reset();
                let outcome = sandbox.execute(&code, &mut host);
                assert!(outcome.succeeded(), "{}", outcome.observation());
            },
            9,
            batch,
        );
        let rate = CALLS as f64 / time.as_secs_f64();
        row(
            name,
            format!("{rate:.0} /s"),
            ">= 50000 /s",
            Some(rate >= 50_000.0),
        );
    }
}
