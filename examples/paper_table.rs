//! The paper-style table over the trainer's API: SFT only, GRPO without a skill library,
//! SAGE, and SAGE's reward and chain-length ablations, each trained from the same SFT
//! data with the same seeds and RL budget, evaluated on the iid and test-normal splits,
//! and summarised as mean ± spread over seeds (as `sage experiment` does).
//!
//! Run: `cargo run --release -p sage-examples --example paper_table -- [--tiny] [RUN_DIR]`
//! (`--tiny`: every arm on the tiny configuration, two seeds, about half a minute).
#![forbid(unsafe_code)]

use std::error::Error;
use std::path::PathBuf;

use sage_backend_cpu::CpuBackend;
use sage_trainer::config::RunConfig;
use sage_trainer::pipeline::experiment::{experiment_table, run_experiment};
use sage_trainer::pipeline::PrintReporter;

fn main() -> Result<(), Box<dyn Error>> {
    // Agent code runs in worker processes started from this program.
    sage_envs::sandbox::serve_worker_if_asked();
    let mut tiny = false;
    let mut dir = PathBuf::from("runs/paper_table");
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--tiny" => tiny = true,
            _ => dir = PathBuf::from(arg),
        }
    }
    // The experiment's scale: `RunConfig::experiment` fits every arm and seed into about
    // an hour on two cores; any field can be changed here before the run.
    let config = if tiny {
        RunConfig::tiny(&dir)
    } else {
        RunConfig::experiment(&dir)
    };
    config.validate()?;
    let mut reporter = PrintReporter { every: 50 };
    let runs = run_experiment(
        CpuBackend::new(),
        &|| Ok(CpuBackend::new()),
        &config,
        false,
        &mut reporter,
    )?;

    // The same table, rebuilt from the runs: one row per split and arm.
    println!("{}", experiment_table(&runs, &config.experiment.arms));
    let rl_minutes: f64 = runs.iter().map(|r| r.rl_seconds / 60.0).sum();
    println!("RL time over all arms and seeds: {rl_minutes:.1} minutes");
    Ok(())
}
