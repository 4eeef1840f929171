//! Hostile agent code against the built-in world (`WorldEnv` with its default process
//! isolation and, for the attack classes below, in process too, where only the
//! deterministic limits protect the caller), grouped by attack class. Each attack must
//! be contained: the turn ends in
//! bounded time with a bounded observation that names what stopped it, no world table
//! changed, the episode goes on (a variable set before still prints, unless the worker
//! had to be killed, which the observation then says), and the expert still solves the
//! scenario afterwards with the same environment.
#![cfg(target_os = "linux")]

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use sage_core::skill::Origin;
use sage_core::{Environment, Skill};
use sage_envs::environment::{EnvConfig, WorldEnv};
use sage_envs::expert::{Expert, ExpertConfig, ExpertMode};
use sage_envs::sandbox::Isolation;
use sage_envs::scenarios::{BuiltScenario, Catalog, CatalogConfig, Split};

fn catalog() -> Arc<Catalog> {
    static CATALOG: OnceLock<Arc<Catalog>> = OnceLock::new();
    CATALOG
        .get_or_init(|| {
            let config = CatalogConfig {
                seeds: 1,
                iid_seeds: 1,
                ..CatalogConfig::default()
            };
            Arc::new(Catalog::build_splits(&config, &[Split::Train]).expect("the catalog builds"))
        })
        .clone()
}

fn scenario() -> Arc<BuiltScenario> {
    catalog().scenarios()[0].clone()
}

/// An environment whose agent code runs in worker processes (the default, which has no
/// in-process fallback).
fn env() -> WorldEnv {
    let env = WorldEnv::new(catalog(), EnvConfig::default()).expect("a sandbox worker");
    assert_eq!(env.isolation(), Isolation::Process);
    env
}

/// An environment whose agent code runs in the caller's process (the explicit opt-in):
/// only the deterministic limits protect it.
fn in_process_env() -> WorldEnv {
    let config = EnvConfig {
        isolation: Isolation::InProcess,
        ..EnvConfig::default()
    };
    let env = WorldEnv::new(catalog(), config).expect("an in-process environment");
    assert_eq!(env.isolation(), Isolation::InProcess);
    env
}

/// Both kinds of environment: each attack must be contained by either.
fn both_envs() -> [WorldEnv; 2] {
    [env(), in_process_env()]
}

fn code(text: &str) -> String {
    format!("Trying something.\n\n```python\n{text}\n```")
}

/// Time one hostile turn may take: the slowest limit that stops an attack here is CPU time
/// (1 s, then the kernel at 2 s), plus a fresh worker; the kill timer (a minute) never
/// comes into it.
const TURN_BUDGET: Duration = Duration::from_secs(8);

/// The longest observation a turn may give: the printed output and the traceback are
/// each cut at `max_output_bytes` (8 KiB by default), plus their markers.
const MAX_OBSERVATION_BYTES: usize = 2 * (8 << 10) + 200;

/// Runs `attack` as the second turn of an episode of [`scenario`] and checks that it is
/// contained (see the module doc); returns the attack's observation.
fn contained(env: &mut WorldEnv, attack: &str) -> String {
    let scenario = scenario();
    env.reset(&scenario.tasks[0].task, &[]).expect("reset");
    let before = env.world().expect("an episode").snapshot();
    let first = env.step(&code("keep = 41")).expect("step");
    assert!(!first.done, "{}", first.observation);
    let start = Instant::now();
    let result = env.step(&code(attack)).expect("step");
    let elapsed = start.elapsed();
    assert!(elapsed < TURN_BUDGET, "took {elapsed:?}:\n{attack}");
    let observation = result.observation;
    assert!(
        observation.len() <= MAX_OBSERVATION_BYTES,
        "an observation of {} bytes for:\n{attack}",
        observation.len()
    );
    assert!(
        observation.contains("LimitExceeded") || observation.contains("Error"),
        "no error for:\n{attack}\n{observation}"
    );
    assert!(result.saved.is_empty(), "a hostile turn saved a skill");
    let diff = env.world().expect("an episode").diff_since(&before);
    assert!(diff.is_empty(), "the world changed: {diff:?}");
    let next = env.step(&code("print(keep + 1)")).expect("step");
    if observation.contains("your code was stopped") {
        assert!(
            observation.contains("earlier turns are gone"),
            "{observation}"
        );
        assert!(next.observation.contains("keep"), "{}", next.observation);
    } else {
        assert_eq!(next.observation, "42\n", "state lost after:\n{attack}");
    }
    let run = Expert::new(ExpertConfig::new(ExpertMode::Skills))
        .solve(env, &scenario)
        .expect("the expert runs");
    assert!(run.passed(), "the expert fails after:\n{attack}");
    observation
}

#[test]
fn memory_attacks_are_contained() {
    for mut env in both_envs() {
        for attack in [
        "s = \"a\" * 100000\nf = s.replace\nf(\"\", s)",
        "x = [set(range(1000000)) for i in range(999)]",
        "s = \"x\" * 1000000\napis.supervisor.show_profile(x=[s] * 100000)",
        "x = \"y\" * 1000000\nz = x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x",
        "s = \"\".join([\"q\" * 1000000] * 32)\nx = [s + \"a\" for i in range(999)]",
        "d = [1]\nfor i in range(45):\n    d = [d, d]\nfail(d)",
        "d = {}\nfor i in range(1000000):\n    d[i] = {\"k\": str(i) * 100}",
        "big = list(range(300000))\nx = [big[:] for i in range(999)]",
        "big = {i: i for i in range(300000)}\ny = [dict(big) for i in range(999)]",
    ] {
        contained(&mut env, attack);
    }
    }
}

#[test]
fn work_inside_one_call_is_contained() {
    let shared = "d = (1,)\ne = (1,)\nfor i in range(60):\n    d = (d, d)\n    e = (e, e)\n";
    let hashing = [
        format!("{shared}x = {{d: 1}}"),
        format!("{shared}x = {{}}\nx[d] = 1"),
        format!("{shared}s = set([d])"),
        format!("{shared}print(sorted([d, e]))"),
    ];
    for mut env in both_envs() {
        for attack in [
            "a = [1]\nb = [1]\nfor i in range(60):\n    a = [a, a]\n    b = [b, b]\nprint(a == b)",
            "x = 3\nfor i in range(40):\n    x = x * x",
            "print(int(\"9\" * 1000000))",
            "x = sorted([str(i) for i in range(1000000)] * 5)",
            "big = list(range(100000))\nx = [sorted(big) for i in range(999)]",
            "big = list(range(1000000))\nx = [5 in big for i in range(999)]",
        ]
        .into_iter()
        .chain(hashing.iter().map(String::as_str))
        {
            contained(&mut env, attack);
        }
    }
}

#[test]
fn floods_are_cut() {
    for mut env in both_envs() {
        let long_line = format!("x = 1 + \"{}\"", "a".repeat(60_000));
        for attack in [
            "s = \"\".join([\"x\" * 1000000] * 32)\nfail(s)",
            "name = \"\".join([\"a\" * 1000000] * 32)\nprint(getattr(apis, name).login())",
            "name = \"\".join([\"b\" * 1000000] * 32)\nprint(getattr(apis.music, name)())",
            long_line.as_str(),
            "for i in range(100000):\n    print(\"spam\" * 100)\nfail(\"done\")",
        ] {
            let observation = contained(&mut env, attack);
            assert!(
                !observation.contains(&"a".repeat(300)),
                "not cut:\n{attack}"
            );
        }
    }
}

fn skill(name: &str, source: &str) -> Skill {
    Skill {
        name: name.to_owned(),
        params: Vec::new(),
        docstring: None,
        source: source.to_owned(),
        origin: Origin::default(),
        stats: Default::default(),
        revision: 0,
    }
}

#[test]
fn hostile_library_skills_are_dropped_and_harmless() {
    let mut env = env();
    let scenario = scenario();
    let library = [
        skill("print", "def print(x):\n    return 1"),
        skill("apis", "def apis():\n    return 1"),
        skill("len", "def len(x):\n    return 0"),
        skill(
            "_sandbox_method",
            "def _sandbox_method(*args):\n    return 1",
        ),
        skill(
            "grab",
            "def grab(x = [set(range(1000000)) for i in range(999)]):\n    return x",
        ),
        skill("double", "def double(x = 2):\n    return 2 * x"),
    ];
    let start = Instant::now();
    let reset = env.reset(&scenario.tasks[0].task, &library).expect("reset");
    assert!(start.elapsed() < TURN_BUDGET);
    let dropped: Vec<&str> = reset.dropped.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(dropped, ["print", "apis", "len", "_sandbox_method", "grab"]);
    for d in &reset.dropped {
        assert!(
            d.reason.contains("built-in name")
                || d.reason.contains("reserved")
                || d.reason.contains("not a literal"),
            "{}: {}",
            d.name,
            d.reason
        );
    }
    assert_eq!(env.library(), ["double"]);
    let result = env
        .step(&code("print(len(\"abc\"), double())\nprint(apis.supervisor.show_profile()[\"email\"] != \"\")"))
        .expect("step");
    assert_eq!(result.observation, "3 4\nTrue\n");
    assert_eq!(result.used, ["double"]);
}

#[test]
fn agent_code_cannot_shadow_globals_or_save_computing_defaults() {
    let mut env = env();
    let scenario = scenario();
    env.reset(&scenario.tasks[0].task, &[]).expect("reset");
    for (attack, expected) in [
        ("def len(x):\n    return 0", "`len` is a built-in name"),
        ("apis = None", "`apis` is a built-in name"),
        (
            "for print in range(3):\n    pass",
            "`print` is a built-in name",
        ),
        (
            "def _sandbox_mul(a, b):\n    return 0",
            "reserved for the sandbox",
        ),
    ] {
        let result = env.step(&code(attack)).expect("step");
        assert!(
            result.observation.contains(expected),
            "{attack}: {}",
            result.observation
        );
    }
    let computing = env
        .step(&code("def pad(x = [0] * 3):\n    return x\nprint(pad())"))
        .expect("step");
    assert_eq!(computing.observation, "[0, 0, 0]\n");
    assert!(computing.saved.is_empty(), "a computing default was saved");
    let over_limit = env
        .step(&code(
            "def one():\n    return 1\nprint(one())\nfor i in range(100000000):\n    pass",
        ))
        .expect("step");
    assert!(
        over_limit.observation.contains("LimitExceeded"),
        "{}",
        over_limit.observation
    );
    assert!(
        over_limit.saved.is_empty(),
        "a skill of a turn over its limit was saved"
    );
    let fine = env
        .step(&code(
            "def two(x = -2, names = [\"a\", None]):\n    return -x\nprint(two())",
        ))
        .expect("step");
    assert_eq!(fine.observation, "2\n");
    assert_eq!(fine.saved.len(), 1);
}

#[test]
fn large_values_never_stall_the_trainer_or_complete_the_task() {
    let mut env = env();
    for attack in [
        "s = \"\".join([\"x\" * 1000000] * 32)\napis.supervisor.complete_task(answer=[s, s])",
        "s = \"\".join([\"x\" * 1000000] * 32)\napis.supervisor.show_profile(x=s)",
    ] {
        let observation = contained(&mut env, attack);
        assert!(
            observation.contains("larger than 1048576 bytes"),
            "{observation}"
        );
    }
}

#[test]
fn an_execution_stopped_after_complete_task_does_not_complete_it() {
    let mut env = env();
    let task = scenario().tasks[0].task.clone();
    for attack in [
        // Stopped by a deterministic limit after the call...
        "apis.supervisor.complete_task(answer=1)\nfor i in range(100000000):\n    pass",
        // ...and by the worker's process limits.
        "apis.supervisor.complete_task(answer=1)\nx = [set(range(1000000)) for i in range(999)]",
    ] {
        env.reset(&task, &[]).expect("reset");
        let start = Instant::now();
        let step = env.step(&code(attack)).expect("step");
        assert!(start.elapsed() < TURN_BUDGET);
        assert!(!step.done, "the episode ended:\n{}", step.observation);
        assert!(!env.world().expect("an episode").is_complete());
        assert!(
            step.observation
                .ends_with(sage_envs::environment::WITHDRAWN_OBSERVATION),
            "{}",
            step.observation
        );
    }
    // Code that raises its own error after the call still completed the task.
    env.reset(&task, &[]).expect("reset");
    let step = env
        .step(&code(
            "apis.supervisor.complete_task(answer=1)\nfail(\"after\")",
        ))
        .expect("step");
    assert!(step.done && env.world().expect("an episode").is_complete());
}
