//! Speed of the task layer against issue 4's targets: an episode's reset plus its first
//! execution (under 1 ms), and the scripted expert solving a whole scenario, 3 tasks
//! with evaluation included (under 10 ms), with agent code run in worker processes
//! (the default) and in-process, one after the other; also the tiny environment's
//! episode. Each figure is the median of timed batches.
//! Run: `cargo bench -p sage-envs --bench expert`.

/// Shared with the core benchmarks: median of timed batches.
#[path = "../../core/benches/harness.rs"]
#[allow(dead_code)] // its table printers are used by the core benchmarks only
mod harness;

use std::sync::Arc;
use std::time::Duration;

use sage_core::Environment;
use sage_envs::environment::{EnvConfig, WorldEnv};
use sage_envs::expert::{Expert, ExpertConfig, ExpertMode};
use sage_envs::sandbox::Isolation;
use sage_envs::scenarios::{BuiltScenario, Catalog, CatalogConfig, Split};
use sage_envs::tiny::{tiny_scenarios, TinyEnv};

fn row(name: &str, figure: Duration, target: Option<Duration>) {
    let status = match target {
        Some(t) if figure <= t => "met",
        Some(_) => "NOT met",
        None => "-",
    };
    let target = target.map_or("-".to_owned(), |t| format!("< {t:.0?}"));
    println!(
        "| {name:<62} | {:>10.3} ms | {target:<8} | {status} |",
        figure.as_secs_f64() * 1e3
    );
}

fn main() {
    let config = CatalogConfig {
        seeds: 1,
        iid_seeds: 1,
        ..CatalogConfig::default()
    };
    let catalog = Arc::new(Catalog::build(&config).expect("the catalog builds"));
    let batch = Duration::from_millis(200);
    println!(
        "| {:<62} | {:>13} | {:<8} | status |",
        "benchmark", "figure", "target"
    );
    println!(
        "|{}|{}|{}|--------|",
        "-".repeat(64),
        "-".repeat(15),
        "-".repeat(10)
    );

    for isolation in [Isolation::Process, Isolation::InProcess] {
        world_rows(&catalog, isolation, batch);
    }

    let tiny = tiny_scenarios(0..1);
    let mut tiny_env = TinyEnv::default();
    let tiny_task = tiny[0].tasks[0].clone();
    let response = TinyEnv::expert_response(&tiny_task, &[]).expect("a tiny task");
    let episode = harness::median_time(
        || {
            tiny_env.reset(&tiny_task, &[]).expect("reset");
            tiny_env.step(&response).expect("step");
            tiny_env.evaluate().expect("evaluate")
        },
        15,
        batch,
    );
    row(
        "tiny env: a whole episode (reset, one turn, evaluate)",
        episode,
        None,
    );
}

/// The world's rows with agent code run as `isolation` says.
fn world_rows(catalog: &Arc<Catalog>, isolation: Isolation, batch: Duration) {
    let isolated = match isolation {
        Isolation::Process => "isolated",
        Isolation::InProcess => "in-process",
    };
    let config = EnvConfig {
        isolation,
        ..EnvConfig::default()
    };
    let mut env = WorldEnv::new(catalog.clone(), config).expect("a sandbox worker program");
    let scenario = catalog.split(Split::Train)[0].clone();
    let skills = Expert::new(ExpertConfig::new(ExpertMode::Skills))
        .solve(&mut env, &scenario)
        .expect("the expert solves it");
    let library = skills.tasks[0].saved.clone();
    let task = scenario.tasks[1].task.clone();
    let trivial = harness::median_time(
        || {
            env.reset(&task, &library).expect("reset");
            env.step("```python\nprint(1)\n```").expect("step")
        },
        15,
        batch,
    );
    row(
        &format!("{isolated}: reset (1 library skill) + first execution: print(1)"),
        trivial,
        Some(Duration::from_millis(1)),
    );
    let login = "```python\npasswords = {p[\"account_name\"]: p[\"password\"] for p in apis.supervisor.show_account_passwords()}\nprofile = apis.supervisor.show_profile()\ntoken = apis.tunes.login(username=profile[\"email\"], password=passwords[\"tunes\"])[\"access_token\"]\nprint(apis.tunes.show_liked_songs(access_token=token, page_limit=20))\n```";
    let first = harness::median_time(
        || {
            env.reset(&task, &library).expect("reset");
            env.step(login).expect("step")
        },
        15,
        batch,
    );
    row(
        &format!("{isolated}: reset + first execution: log in, 20 liked songs"),
        first,
        Some(Duration::from_millis(1)),
    );

    let one_per_template: Vec<Arc<BuiltScenario>> = [
        Split::Train,
        Split::Dev,
        Split::TestNormal,
        Split::TestChallenge,
    ]
    .into_iter()
    .flat_map(|s| catalog.split(s).into_iter().cloned())
    .collect();
    for expert_mode in [ExpertMode::Skills, ExpertMode::Direct] {
        let expert = Expert::new(ExpertConfig::new(expert_mode));
        let mut times: Vec<(Duration, &str)> = one_per_template
            .iter()
            .map(|s| {
                (
                    harness::median_time(
                        || expert.solve(&mut env, s).expect("solved"),
                        5,
                        batch / 4,
                    ),
                    s.template.name,
                )
            })
            .collect();
        times.sort();
        let median = times[times.len() / 2].0;
        let (slowest, name) = times[times.len() - 1];
        row(
            &format!(
                "{isolated}: expert ({}): a scenario, median of {} templates",
                expert_mode.name(),
                times.len()
            ),
            median,
            Some(Duration::from_millis(10)),
        );
        row(
            &format!(
                "{isolated}: expert ({}): slowest, {name}",
                expert_mode.name()
            ),
            slowest,
            Some(Duration::from_millis(10)),
        );
    }
}
