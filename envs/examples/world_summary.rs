//! Prints, per split of the built-in world: its templates, scenarios and tasks, the apps
//! and APIs its tasks use, and the scripted expert's TGC and SGC with skills and without
//! (direct API calls), with average steps and skill usage.
//!
//! Run: `cargo run --release -p sage-envs --example world_summary`

use std::collections::BTreeSet;
use std::error::Error;
use std::sync::Arc;
use std::time::Instant;

use sage_envs::environment::{EnvConfig, WorldEnv};
use sage_envs::expert::{Expert, ExpertConfig, ExpertMode};
use sage_envs::scenarios::{Catalog, CatalogConfig, Split};

fn main() -> Result<(), Box<dyn Error>> {
    // Agent code runs in worker processes started from this program.
    sage_envs::sandbox::serve_worker_if_asked();
    let start = Instant::now();
    let catalog = Arc::new(Catalog::build(&CatalogConfig::default())?);
    println!(
        "built {} scenarios in {:.2?}\n",
        catalog.scenarios().len(),
        start.elapsed()
    );
    let mut env = WorldEnv::new(catalog.clone(), EnvConfig::default())?;
    println!(
        "| {:<14} | {:>9} | {:>9} | {:>5} | {:<46} | {:>4} | {:>15} | {:>15} | {:>11} | {:>11} |",
        "split",
        "templates",
        "scenarios",
        "tasks",
        "apps",
        "APIs",
        "skills TGC/SGC",
        "direct TGC/SGC",
        "steps s/d",
        "skill use"
    );
    println!("|{}|", ["-"; 10].map(|_| "---").join("|"));
    for split in Split::ALL {
        let scenarios = catalog.split(split);
        let apps: BTreeSet<&str> = scenarios
            .iter()
            .flat_map(|s| s.template.apps.iter().copied())
            .collect();
        let tasks: usize = scenarios.iter().map(|s| s.tasks.len()).sum();
        let mut results = Vec::new();
        for mode in [ExpertMode::Skills, ExpertMode::Direct] {
            let expert = Expert::new(ExpertConfig::new(mode));
            let (_, metrics) = expert.solve_all(&mut env, scenarios.iter().map(|s| s.as_ref()))?;
            results.push(metrics);
        }
        let (skills, direct) = (&results[0], &results[1]);
        let apis: BTreeSet<&String> = skills.apis.iter().chain(&direct.apis).collect();
        println!(
            "| {:<14} | {:>9} | {:>9} | {:>5} | {:<46} | {:>4} | {:>15} | {:>15} | {:>11} | {:>10.1}% |",
            split.name(),
            split.template_names().len(),
            scenarios.len(),
            tasks,
            apps.into_iter().collect::<Vec<_>>().join(","),
            apis.len(),
            format!("{:.1} / {:.1}", skills.tgc(), skills.sgc()),
            format!("{:.1} / {:.1}", direct.tgc(), direct.sgc()),
            format!("{:.1} / {:.1}", skills.average_steps(), direct.average_steps()),
            skills.skill_usage(),
        );
    }
    println!("\ntotal time {:.2?}", start.elapsed());
    Ok(())
}
