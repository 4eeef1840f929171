//! The `sage` command-line interface.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Train self-improving LLM agents with a skill library (SAGE).
#[derive(Parser)]
#[command(name = "sage", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Tokenizer -> expert data -> SFT -> evaluation on the built-in world, on CPU.
    Demo,
    /// Lists the compute backends compiled into this binary.
    Backends,
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Demo => {
            eprintln!(
                "sage demo: not yet available. The trainer's SFT, evaluation and demo pipeline \
                 are still being built (see README.md, \"Status\"); the core library and the \
                 built-in world are usable today."
            );
            ExitCode::from(2)
        }
        Command::Backends => {
            println!("{}", sage_trainer::compiled_backends().join("\n"));
            ExitCode::SUCCESS
        }
    }
}
