//! The `sage` command-line interface: expert data, SFT, evaluation and the demo on
//! the built-in world, configured by TOML files (`sage config` shows every
//! setting with its default).
#![forbid(unsafe_code)]

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // Agent code runs in worker processes started from this program.
    sage_envs::sandbox::serve_worker_if_asked();
    cli::init_logging();
    let command = cli::Cli::parse();
    // The command runs on a thread of rayon's pool (`scope` from outside the pool runs
    // its body there), so each parallel kernel splits its work from inside the pool;
    // called from the main thread, every one would hand its work over and sleep until
    // a worker woke to finish it: about a tenth of a SmolLM2 decoding step on 2 cores.
    match rayon::scope(|_| cli::run(command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
