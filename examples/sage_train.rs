//! SAGE reinforcement learning over the trainer's API: start from an SFT checkpoint,
//! train on chains of two tasks of the built-in world's training scenarios (8 rollouts
//! per chain, each with its own skill library; the skill-integrated reward; GRPO), then
//! evaluate with the skill library. `--backend cpu|cuda|wgpu` picks the backend (the CPU
//! by default; a GPU backend needs its cargo feature, e.g. `--features wgpu` for any
//! Vulkan/Metal/DX12 GPU).
//!
//! Run: `cargo run --release -p sage-examples --example sage_train -- [--tiny]
//! [--backend NAME] [RUN_DIR]` after `sage demo` (RUN_DIR defaults to runs/demo; with
//! `--tiny`, after `sage demo --tiny --run-dir RUN_DIR`: two short steps on the tiny
//! configuration).
#![forbid(unsafe_code)]

use std::error::Error;
use std::path::PathBuf;

use sage_trainer::backend::Backend;
use sage_trainer::chat::ChatTemplate;
use sage_trainer::checkpoint;
use sage_trainer::config::{RunConfig, RunSection};
use sage_trainer::metrics::MetricsLog;
use sage_trainer::pipeline::{
    run_eval, run_on_backend, run_rl, BackendJob, PipelineError, PrintReporter, RlInputs,
};
use sage_trainer::policy::TransformerPolicy;
use sage_trainer::rl::{RlState, RlStepStats, RlTrainer, WorldRl};
use sage_trainer::tokenizer::Tokenizer;
use sage_trainer::weights::load_model;
use sage_transformer::Kernels;

fn main() -> Result<(), Box<dyn Error>> {
    // Agent code runs in worker processes started from this program.
    sage_envs::sandbox::serve_worker_if_asked();
    let mut tiny = false;
    let mut backend = Backend::Cpu;
    let mut dir = PathBuf::from("runs/demo");
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--tiny" => tiny = true,
            "--backend" => backend = args.next().ok_or("--backend needs a name")?.parse()?,
            _ => dir = PathBuf::from(arg),
        }
    }
    let mut config = if tiny {
        RunConfig::tiny(&dir)
    } else {
        RunConfig {
            run: RunSection {
                dir: dir.clone(),
                ..RunSection::default()
            },
            ..RunConfig::default()
        }
    };
    config.run.backend = backend;
    config.validate()?;
    run_on_backend(
        config.run.backend,
        config.run.precision,
        TrainExample { config: &config },
    )?;
    Ok(())
}

/// The example's steps, on whichever backend was picked.
struct TrainExample<'a> {
    config: &'a RunConfig,
}

impl BackendJob for TrainExample<'_> {
    type Output = ();

    fn run<K: Kernels>(
        self,
        k: K,
        _another: &dyn Fn() -> Result<K, PipelineError>,
    ) -> Result<(), PipelineError> {
        train_and_evaluate(k, self.config).map_err(|e| PipelineError::new("example", e.to_string()))
    }
}

/// Steps 1 to 4 below on the backend `k`.
fn train_and_evaluate<K: Kernels>(mut k: K, config: &RunConfig) -> Result<(), Box<dyn Error>> {
    let dir = &config.run.dir;
    let rl = &config.rl;

    // 1. The SFT checkpoint: model and tokenizer, and a fresh AdamW at RL's rate.
    let init = checkpoint::latest(&dir.join("checkpoints"))?.ok_or_else(|| {
        format!(
            "no SFT checkpoint in {}: run `sage demo` first",
            dir.display()
        )
    })?;
    let tokenizer = Tokenizer::from_dir(&init)?;
    let model = load_model(&mut k, &init)?;
    let optimizer = rl.optimizer(&config.optimizer);
    let mut policy = TransformerPolicy::trainable(k, model, optimizer)?
        .with_max_batch_tokens(config.run.max_batch_tokens);
    println!("starting from {}", init.display());

    // 2. The training chains: K consecutive tasks of each training scenario of the
    //    built-in world, with its environments and the skill-format system prompt.
    let world = WorldRl::new(rl, config.data.prompt_rules)?;
    let template = ChatTemplate::new(&tokenizer)?.with_max_len(rl.rollout.max_episode_tokens);

    // 3. The RL loop. Each step: G rollouts of each chain, task after task, each
    //    rollout's saved skills becoming its own library for the next task; rewards with
    //    the usage and generation bonuses; advantages per chain position; one update.
    //    Each step's health metrics go to RUN_DIR/rl_example/metrics/rl.{jsonl,csv}.
    let mut trainer = RlTrainer::new(rl.clone(), world.chains.clone(), RlState::default())?;
    let mut metrics = MetricsLog::create(&dir.join("rl_example").join("metrics"), "rl")?;
    let mut reporter = PrintReporter { every: 1 };
    let inputs = RlInputs {
        world: &world,
        template: &template,
        label: "rl",
    };
    let mut after_step =
        |_: &mut TransformerPolicy<_>, _: &RlStepStats, _: &RlTrainer, _last: bool| Ok(());
    run_rl(
        &mut policy,
        None,
        &mut trainer,
        inputs,
        &mut metrics,
        &mut reporter,
        &mut after_step,
    )?;

    // 4. Evaluation with the skill library, as after SFT.
    let template = ChatTemplate::new(&tokenizer)?;
    run_eval(
        &mut policy,
        &config.eval,
        config.data.prompt_rules,
        &template,
        None,
        Some(&dir.join("rl_example_eval.json")),
        &mut reporter,
    )?;
    Ok(())
}
