//! Fuzzes the built-in world through the process-isolated sandbox: arbitrary bytes,
//! split at `0xFF` into up to four agent messages (each wrapped in a ```python block
//! unless it starts with `0xFE`), are played as the turns of one episode of a train
//! task. No step may fail or panic, every observation must stay within its bound, and
//! afterwards the same environment must still run a fresh episode correctly: a hostile
//! input can cost its worker process, never the caller.
//!
//! The worker program comes from `$SAGE_SANDBOX_WORKER` (build it with
//! `cargo build --release -p sage-envs --bin sage-sandbox-worker`); the target refuses
//! to run in-process.
#![no_main]

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use sage_core::{Environment, Task};
use sage_envs::environment::{EnvConfig, WorldEnv};
use sage_envs::sandbox::{Isolation, Limits};
use sage_envs::scenarios::{Catalog, CatalogConfig, Split};

/// Observation bound: printed output and traceback, each cut at 2 KiB here, plus markers.
const MAX_OBSERVATION_BYTES: usize = 2 * (2 << 10) + 200;

struct World {
    env: WorldEnv,
    tasks: Vec<Task>,
}

/// The world, built once per fuzzing thread (`WorldEnv` is not `Send`).
fn new_world() -> World {
    let config = CatalogConfig {
        seeds: 1,
        iid_seeds: 1,
        ..CatalogConfig::default()
    };
    let catalog =
        Arc::new(Catalog::build_splits(&config, &[Split::Train]).expect("the catalog builds"));
    let tasks = catalog
        .scenarios()
        .iter()
        .take(8)
        .map(|s| s.tasks[0].task.clone())
        .collect();
    let limits = Limits {
        cpu_time: Duration::from_millis(100),
        max_ticks: 100_000,
        max_output_bytes: 2 << 10,
        max_process_memory_bytes: 512 << 20,
        ..Limits::default()
    };
    let env = WorldEnv::new(
        catalog,
        EnvConfig {
            max_turns: 4,
            limits,
            isolation: Isolation::Process,
        },
    )
    .expect("a sandbox worker: set SAGE_SANDBOX_WORKER to a built sage-sandbox-worker");
    World { env, tasks }
}

thread_local! {
    static WORLD: RefCell<World> = RefCell::new(new_world());
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    WORLD.with_borrow_mut(|world| run(world, pick, rest));
});

/// Plays one input as an episode, then checks the environment still works.
fn run(world: &mut World, pick: u8, rest: &[u8]) {
    let World { env, tasks } = world;
    let task = tasks[pick as usize % tasks.len()].clone();
    env.reset(&task, &[]).expect("reset");
    for message in rest.split(|&b| b == 0xFF).take(4) {
        let text = match message.split_first() {
            Some((0xFE, raw)) => String::from_utf8_lossy(raw).into_owned(),
            _ => format!("```python\n{}\n```", String::from_utf8_lossy(message)),
        };
        if env.is_done() {
            break;
        }
        let result = env
            .step(&text)
            .expect("a step of a live episode never fails");
        assert!(
            result.observation.len() <= MAX_OBSERVATION_BYTES,
            "an observation of {} bytes",
            result.observation.len()
        );
    }
    env.evaluate().expect("evaluation");
    env.reset(&task, &[]).expect("reset");
    let check = env.step("```python\nprint(20 + 22)\n```").expect("step");
    assert_eq!(
        check.observation, "42\n",
        "the sandbox is broken after the input"
    );
}
