//! Arguments and commands of the `sage` binary. Every command reads a [`RunConfig`]
//! (defaults, then `--config FILE`, then flags) and fails with one clear message.

mod commands;
mod generate;
mod progress;
mod train;

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use sage_core::retrieval::RetrievalMode;
use sage_envs::expert::ExpertMode;
use sage_envs::scenarios::Split;
use sage_trainer::backend::{Backend, Precision};
use sage_trainer::config::RunConfig;
use sage_trainer::experiment::Arm;
use sage_trainer::pipeline::PipelineError;

pub use commands::run;

/// Train self-improving LLM agents with a skill library (SAGE).
#[derive(Parser)]
#[command(name = "sage", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Options every training or evaluation command takes.
#[derive(clap::Args, Clone, Debug)]
struct Common {
    /// A TOML run configuration (`sage config` shows every field).
    #[arg(long)]
    config: Option<PathBuf>,
    /// The run directory (overrides `[run] dir`).
    #[arg(long)]
    run_dir: Option<PathBuf>,
    /// The compute backend (overrides `[run] backend`): cpu, cuda or wgpu.
    #[arg(long)]
    backend: Option<Backend>,
    /// The arithmetic of the GEMMs and training attention (overrides `[run]
    /// precision`): f32, or bf16 operands with f32 sums (cuda; on the cpu, its larger
    /// products, fast where the CPU has AVX-512 BF16, and decoding from bf16 copies of
    /// the weights).
    #[arg(long)]
    precision: Option<Precision>,
}

#[derive(Subcommand)]
enum Command {
    /// Expert data -> tokenizer -> SFT -> evaluation on the built-in world.
    Demo {
        #[command(flatten)]
        common: Common,
        /// A smoke run of the whole pipeline in seconds (a two-layer model on one seed
        /// of data; it learns nothing) in runs/demo-tiny.
        #[arg(long, conflicts_with = "config")]
        tiny: bool,
    },
    /// Writes the expert's trajectories as chat JSON lines.
    Data {
        #[command(flatten)]
        common: Common,
        /// The output file.
        #[arg(long)]
        out: PathBuf,
        /// The split (overrides `[data] split`).
        #[arg(long)]
        split: Option<Split>,
        /// Seeds per template (overrides `[data] seeds`).
        #[arg(long)]
        seeds: Option<u64>,
        /// Style variants per scenario (overrides `[data] variants`).
        #[arg(long)]
        variants: Option<u64>,
        /// `skills`, `direct` or `mixed` (overrides `[data] mode`).
        #[arg(long)]
        mode: Option<ExpertMode>,
    },
    /// Supervised fine-tuning on chat JSON lines.
    Sft {
        #[command(flatten)]
        common: Common,
        /// Training trajectories (default: the expert's, produced into the run
        /// directory).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Held-out trajectories for the dev loss.
        #[arg(long)]
        dev: Option<PathBuf>,
        /// Start from this checkpoint or Hugging Face model directory (with its
        /// tokenizer.json) instead of a fresh model.
        #[arg(long)]
        init: Option<PathBuf>,
        /// Continue the run directory's latest checkpoint.
        #[arg(long)]
        resume: bool,
    },
    /// SAGE reinforcement learning on the built-in world, from an SFT checkpoint.
    Train {
        #[command(flatten)]
        common: Common,
        /// Start from this checkpoint or Hugging Face model directory (default: the
        /// run's latest SFT checkpoint, RUN_DIR/checkpoints).
        #[arg(long, conflicts_with = "resume")]
        init: Option<PathBuf>,
        /// Continue the latest RL checkpoint (RUN_DIR/rl/checkpoints).
        #[arg(long)]
        resume: bool,
        /// Optimizer steps (overrides `[rl] steps`).
        #[arg(long)]
        steps: Option<u64>,
        /// Run the update-off control instead (`[rl] apply_updates = false`): the same
        /// chains, sampling and rewards without any optimizer step, in RUN_DIR/rl-control.
        /// Once both have run, either one prints and plots the run against its control.
        #[arg(long)]
        control: bool,
        /// A two-step smoke run on the tiny configuration in runs/demo-tiny (after
        /// `sage demo --tiny`); a `--config` file changes the tiny settings (say, an
        /// `[env]` section).
        #[arg(long)]
        tiny: bool,
    },
    /// The paper-style comparison: SFT only, GRPO without skills, SAGE and its
    /// ablations, trained with the same seeds and budget; prints the table.
    Experiment {
        #[command(flatten)]
        common: Common,
        /// Seeds per arm (overrides `[experiment] seeds`).
        #[arg(long)]
        seeds: Option<u64>,
        /// Run only this seed of every arm (counted from 0, below the seed count), e.g. one
        /// process per seed in copies of the run directory; a later `--resume` without it
        /// reuses every seed's finished arms and writes the whole table.
        #[arg(long)]
        only_seed: Option<u64>,
        /// Comma-separated arms (overrides `[experiment] arms`): sft-only, sft-direct,
        /// grpo-no-skills, sage, sage-outcome-only, sage-chain-reward, sage-k3, sage-kl.
        #[arg(long, value_delimiter = ',')]
        arms: Option<Vec<Arm>>,
        /// The skill arms' SFT data: `skills` or `mixed` (overrides `[experiment]
        /// skill_data`; `configs/experiment-mechanism.toml` sets `mixed`).
        #[arg(long)]
        skill_data: Option<ExpertMode>,
        /// Start both SFT models from this Hugging Face model directory, with its
        /// tokenizer (overrides `[experiment] init`; e.g. what `sage import` wrote).
        #[arg(long)]
        init: Option<PathBuf>,
        /// Optimizer steps of every RL arm (overrides `[rl] steps`); with `--resume`,
        /// the SFT models are reused and the RL arms trained for other steps run again.
        #[arg(long)]
        rl_steps: Option<u64>,
        /// A smoke run of every arm on the tiny configuration in runs/experiment-tiny.
        #[arg(long, conflicts_with = "config")]
        tiny: bool,
        /// Continue the interrupted experiment in the run directory: reuse its finished
        /// SFT models and arms, continue its SFT from the last checkpoint (its settings
        /// must match, seeds, arms, the checkpoint cadence, `[eval]` and `[rl]` aside: an
        /// arm that ran under another `[eval]` or `[rl]` runs again).
        #[arg(long)]
        resume: bool,
    },
    /// Prints an experiment's tables from the `experiment.json` of one or more runs
    /// (seeds run apart, or arms rerun beside the run they complete): a later file's row
    /// of an arm and seed replaces an earlier file's, and each replacement is printed.
    Tables {
        /// The `experiment.json` files (or the run directories holding them), in order.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Comma-separated seeds to keep (default: every seed of the files).
        #[arg(long, value_delimiter = ',')]
        seeds: Option<Vec<u64>>,
        /// The rows come from one SFT model per mode shared by every seed (adds the
        /// claim table's note that its ± leaves out a second SFT run's spread).
        #[arg(long)]
        shared_sft: bool,
        /// Also write the rows and tables as DIR/experiment.json and DIR/experiment.md.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Evaluates a checkpoint on the built-in world.
    Eval {
        #[command(flatten)]
        common: Common,
        /// The checkpoint or model directory (default: the run's latest checkpoint).
        #[arg(long)]
        checkpoint: Option<PathBuf>,
        /// Comma-separated splits (overrides `[eval] splits`).
        #[arg(long, value_delimiter = ',')]
        splits: Option<Vec<Split>>,
        /// Comma-separated retrieval modes (overrides `[eval] modes`).
        #[arg(long, value_delimiter = ',')]
        modes: Option<Vec<RetrievalMode>>,
        /// Where to write the JSON report (default: RUN_DIR/eval.json).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Plays one scenario of the built-in world with a checkpoint, task by task, and
    /// prints every turn: the agent's message, the sandbox's answer, each outcome.
    Generate {
        #[command(flatten)]
        common: Common,
        /// The checkpoint or model directory (default: the run's latest SFT checkpoint).
        #[arg(long)]
        checkpoint: Option<PathBuf>,
        /// The split the scenario comes from.
        #[arg(long, default_value = "iid")]
        split: Split,
        /// Which of the split's scenarios (0 is the first; `eval.json` lists them in
        /// this order).
        #[arg(long, default_value_t = 0)]
        scenario: usize,
        /// Answer this message (under the world's system prompt) instead of playing a
        /// scenario.
        #[arg(long, conflicts_with_all = ["split", "scenario"])]
        prompt: Option<String>,
        /// Sampling temperature: 0 decodes greedily, 1 samples the policy's own
        /// distribution.
        #[arg(long, default_value_t = 0.0)]
        temperature: f32,
        /// Seed of the sampling.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// Prints every setting of the run configuration with its value, as TOML (the
    /// defaults, or `--config FILE` merged with them).
    Config {
        /// Kept for older scripts: printing is what `sage config` does.
        #[arg(long, hide = true)]
        print: bool,
        /// A TOML run configuration to print merged with the defaults.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Converts a GGUF model (Llama or Qwen2; F32, F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K,
    /// Q6_K) into a Hugging Face directory that `--init`, `--checkpoint` and transformers
    /// load.
    Import {
        /// The GGUF file.
        #[arg(long)]
        gguf: PathBuf,
        /// The new model directory.
        #[arg(long)]
        out: PathBuf,
        /// How the dequantized weights are stored.
        #[arg(long, value_enum, default_value_t = StoredDtype::F32)]
        dtype: StoredDtype,
    },
    /// Serves the built-in world over HTTP in AppWorld's environment-server protocol
    /// (docs/remote-env.md): what `[env] kind = "remote"` runs against, and a way to
    /// drive the world from any language.
    ServeWorld {
        /// The port to listen on.
        #[arg(long, default_value_t = 8000)]
        port: u16,
        /// The address to listen on (keep it local: agent code runs here).
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// A TOML run configuration: its `[rl]` scenario seeds give the train split, its
        /// `[eval] iid_seeds` the iid split.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Exit when the process that started this one ends (servers a run starts).
        #[arg(long)]
        exit_with_parent: bool,
    },
    /// Lists the compute backends compiled into this binary.
    Backends,
    /// Prints what a bug report needs: version, git revision, compiler, platform, CPU
    /// features and threads, compiled backends and the sandbox worker program.
    Env,
}

/// How `sage import` stores weights.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum StoredDtype {
    /// 32-bit floats (exact for every GGUF type).
    F32,
    /// bfloat16.
    Bf16,
    /// IEEE half floats.
    F16,
}

/// Log lines' time stamps: seconds since the command started.
struct Elapsed(std::time::Instant);

impl tracing_subscriber::fmt::time::FormatTime for Elapsed {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        write!(w, "{:>8.1}s", self.0.elapsed().as_secs_f64())
    }
}

/// Logs to standard error through `tracing` (`RUST_LOG` filters; info by default), each
/// line stamped with the seconds since the command started.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_timer(Elapsed(std::time::Instant::now()))
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}

/// A signal sooner than this after the first is the same request delivered twice, not
/// a second one: GNU `timeout` signals its command and then the command's process group,
/// which holds the command, so a run it stops gets SIGTERM twice at once.
const REPEATED_SIGNAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Makes SIGINT and SIGTERM stop a run at its next step boundary (`sage sft`, `sage
/// train` and the SFT stages of `sage experiment` save a checkpoint of that step first,
/// see `sage_trainer::interrupt`); a second signal, from a second on, ends the process
/// at once.
fn stop_at_step_boundaries() {
    let mut first_signal: Option<std::time::Instant> = None;
    let installed = ctrlc::set_handler(move || match first_signal {
        Some(at) if at.elapsed() < REPEATED_SIGNAL => {}
        Some(_) => {
            eprintln!("stopped");
            sage_trainer::environments::servers::stop_started_servers();
            std::process::exit(130);
        }
        None => {
            first_signal = Some(std::time::Instant::now());
            sage_trainer::interrupt::request_stop();
            eprintln!(
                "stopping after the current step, once its checkpoint is saved (signal again \
                 to stop at once)"
            );
        }
    });
    if let Err(e) = installed {
        tracing::warn!("signals will end the run at once, without a checkpoint: {e}");
    }
}

/// Makes SIGINT and SIGTERM end the process at once, after stopping the environment
/// servers it started (`sage eval`).
fn stop_servers_on_signal() {
    let installed = ctrlc::set_handler(|| {
        eprintln!("stopped");
        sage_trainer::environments::servers::stop_started_servers();
        std::process::exit(130);
    });
    if let Err(e) = installed {
        tracing::warn!("a signal may leave started environment servers running: {e}");
    }
}

/// The configuration: defaults, then the file, then the common flags.
fn load_config(common: &Common) -> Result<RunConfig, PipelineError> {
    load_config_over(common, RunConfig::default())
}

/// The configuration: `defaults`, or the file, then the common flags.
fn load_config_over(common: &Common, defaults: RunConfig) -> Result<RunConfig, PipelineError> {
    let mut config = match &common.config {
        Some(path) => {
            RunConfig::from_file(path).map_err(|e| PipelineError::new("config", e.to_string()))?
        }
        None => defaults,
    };
    if let Some(dir) = &common.run_dir {
        config.run.dir = dir.clone();
    }
    if let Some(backend) = common.backend {
        config.run.backend = backend;
    }
    if let Some(precision) = common.precision {
        config.run.precision = precision;
    }
    checked(config)
}

/// Validates a configuration after flags changed it.
fn checked(config: RunConfig) -> Result<RunConfig, PipelineError> {
    config
        .validate()
        .map_err(|e| PipelineError::new("config", e.problem))?;
    Ok(config)
}
