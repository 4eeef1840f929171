//! SFT throughput against the raw training step, on the same batches in one process:
//! the demo's model trained on the expert's trajectories (length-bucketed batches of
//! the demo's token budget) once through the SFT path (`SftTrainer` driving
//! `TransformerPolicy`: packing, loss coefficients, grad-norm clipping, AdamW with its
//! schedule), once through the bare transformer calls (forward with the head on the
//! loss-mask rows, backward, AdamW kernel). The ratio is what the data path costs.
//!
//! Run: `cargo run --release -p sage-examples --example sft_throughput -- [STEPS]`
#![forbid(unsafe_code)]

use std::error::Error;
use std::time::Instant;

use sage_backend_cpu::CpuBackend;
use sage_trainer::chat::ChatTemplate;
use sage_trainer::config::RunConfig;
use sage_trainer::pipeline::{
    fresh_model, load_sft_data, prepare_data, train_tokenizer, PrintReporter,
};
use sage_trainer::policy::TransformerPolicy;
use sage_trainer::sft::{
    epoch_batches, nll_coefficients, SftConfig, SftData, SftState, SftTrainer,
};
use sage_transformer::{AdamWStep, Kernels, Tensor};

/// Tokens per second of `steps` SFT steps after one warm-up step.
fn sft_path(
    config: &RunConfig,
    data: &SftData,
    tokenizer: &sage_trainer::tokenizer::Tokenizer,
    steps: usize,
) -> Result<f64, Box<dyn Error>> {
    let mut k = CpuBackend::new();
    let model = fresh_model(&mut k, &config.model, config.run.seed, tokenizer)?;
    let mut policy = TransformerPolicy::trainable(k, model, config.optimizer.clone())?
        .with_max_batch_tokens(config.run.max_batch_tokens);
    let mut trainer = SftTrainer::new(config.sft.clone(), data, SftState::default());
    trainer.next_step(&mut policy, data)?;
    let (start, mut tokens) = (Instant::now(), 0);
    for _ in 0..steps {
        let step = trainer
            .next_step(&mut policy, data)?
            .ok_or("ran out of SFT steps")?;
        tokens += step.tokens;
    }
    Ok(tokens as f64 / start.elapsed().as_secs_f64())
}

/// Tokens per second of the same batches through the bare transformer calls.
fn raw_path(
    config: &RunConfig,
    data: &SftData,
    tokenizer: &sage_trainer::tokenizer::Tokenizer,
    steps: usize,
) -> Result<f64, Box<dyn Error>> {
    let mut k = CpuBackend::new();
    let mut model = fresh_model(&mut k, &config.model, config.run.seed, tokenizer)?;
    let total = model.params().len;
    let m = Tensor::whole(k.alloc(total)?, total);
    let v = Tensor::whole(k.alloc(total)?, total);
    let batches = epoch_batches(&data.examples, config.sft.batch_tokens, config.sft.seed, 0);
    let (mut start, mut tokens) = (Instant::now(), 0);
    for (i, batch) in batches.iter().take(steps + 1).enumerate() {
        if i == 1 {
            (start, tokens) = (Instant::now(), 0);
        }
        let examples: Vec<_> = batch.iter().map(|&e| &data.examples[e]).collect();
        let (mut input, mut targets, mut weights, mut starts) =
            (Vec::new(), Vec::new(), Vec::new(), vec![0u32]);
        let agent_tokens: usize = examples.iter().map(|e| e.agent_tokens()).sum();
        let coefficients = nll_coefficients(&examples, agent_tokens as f64);
        for (example, coefficients) in examples.iter().zip(coefficients) {
            input.extend_from_slice(&example.tokens);
            targets.extend_from_slice(&example.tokens[1..]);
            targets.push(0);
            weights.extend_from_slice(&coefficients);
            weights.push(0.0);
            starts.push(input.len() as u32);
        }
        model.zero_grads(&mut k)?;
        let scored: Vec<bool> = weights.iter().map(|&w| w != 0.0).collect();
        model.forward_scored(&mut k, &input, &targets, &starts, &scored)?;
        model.backward(&mut k, &weights)?;
        let hyper = AdamWStep {
            learning_rate: 1e-3,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.0,
            step: i as u32 + 1,
        };
        k.adamw(model.params(), model.grads(), m, v, hyper)?;
        tokens += input.len();
    }
    Ok(tokens as f64 / start.elapsed().as_secs_f64())
}

fn main() -> Result<(), Box<dyn Error>> {
    // The expert's agent code runs in worker processes started from this program.
    sage_envs::sandbox::serve_worker_if_asked();
    let steps: usize = std::env::args().nth(1).map_or(Ok(30), |s| s.parse())?;
    let dir = std::env::temp_dir().join(format!("sage-sft-throughput-{}", std::process::id()));
    let mut config = RunConfig::default();
    config.run.dir = dir.clone();
    config.data.seeds = 3;
    config.sft = SftConfig {
        epochs: 10,
        ..config.sft
    };
    let mut reporter = PrintReporter { every: u64::MAX };
    let files = prepare_data(&config.data, &dir, &mut reporter)?;
    let tokenizer = train_tokenizer(&config.tokenizer, &files.train, &dir, &mut reporter)?;
    let template =
        ChatTemplate::new(&tokenizer)?.with_max_len(config.model.max_position_embeddings);
    let data = load_sft_data(&files.train, &template, &mut reporter)?;
    config.optimizer.resolve_total_steps(1000);

    println!("| round | raw step tok/s | SFT path tok/s | SFT / raw |");
    println!("| --- | --- | --- | --- |");
    for round in 1..=2 {
        let raw = raw_path(&config, &data, &tokenizer, steps)?;
        let sft = sft_path(&config, &data, &tokenizer, steps)?;
        println!("| {round} | {raw:.0} | {sft:.0} | {:.3} |", sft / raw);
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
