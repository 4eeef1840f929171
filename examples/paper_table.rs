//! The paper-style table over the trainer's API: SFT only, GRPO without a skill library,
//! SAGE, and SAGE's reward and chain-length ablations, each trained from the same SFT
//! data with the same seeds and RL budget, evaluated on the iid and test-normal splits,
//! and summarised as mean ± spread over seeds (as `sage experiment` does).
//!
//! Run: `cargo run --release -p sage-examples --example paper_table -- [--tiny]
//! [--backend NAME] [RUN_DIR]` (`--tiny`: every arm on the tiny configuration, two
//! seeds, about half a minute; `--backend cuda|wgpu` with that cargo feature).
#![forbid(unsafe_code)]

use std::error::Error;
use std::path::PathBuf;

use sage_trainer::backend::Backend;
use sage_trainer::config::RunConfig;
use sage_trainer::pipeline::experiment::{experiment_table, run_experiment, ArmRun};
use sage_trainer::pipeline::{run_on_backend, BackendJob, PipelineError, PrintReporter};
use sage_transformer::Kernels;

fn main() -> Result<(), Box<dyn Error>> {
    // Agent code runs in worker processes started from this program.
    sage_envs::sandbox::serve_worker_if_asked();
    let mut tiny = false;
    let mut backend = Backend::Cpu;
    let mut dir = PathBuf::from("runs/paper_table");
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--tiny" => tiny = true,
            "--backend" => backend = args.next().ok_or("--backend needs a name")?.parse()?,
            _ => dir = PathBuf::from(arg),
        }
    }
    // The experiment's scale: `RunConfig::experiment` fits every arm and seed into about
    // an hour on two cores; any field can be changed here before the run.
    let mut config = if tiny {
        RunConfig::tiny(&dir)
    } else {
        RunConfig::experiment(&dir)
    };
    config.run.backend = backend;
    config.validate()?;
    let runs = run_on_backend(
        config.run.backend,
        config.run.precision,
        Experiment { config: &config },
    )?;

    // The same table, rebuilt from the runs: one row per split and arm.
    println!("{}", experiment_table(&runs, &config.experiment.arms));
    let rl_minutes: f64 = runs.iter().map(|r| r.rl_seconds / 60.0).sum();
    println!("RL time over all arms and seeds: {rl_minutes:.1} minutes");
    Ok(())
}

/// Every arm and seed of the experiment, on whichever backend was picked.
struct Experiment<'a> {
    config: &'a RunConfig,
}

impl BackendJob for Experiment<'_> {
    type Output = Vec<ArmRun>;

    fn run<K: Kernels>(
        self,
        k: K,
        another: &dyn Fn() -> Result<K, PipelineError>,
    ) -> Result<Vec<ArmRun>, PipelineError> {
        let mut reporter = PrintReporter { every: 50 };
        run_experiment(k, another, self.config, false, &mut reporter)
    }
}
