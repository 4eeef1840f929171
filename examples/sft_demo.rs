//! The `sage demo` pipeline written out over the trainer's API: the scripted expert's
//! skill trajectories, a byte-level BPE trained on them, a fresh Qwen2-style model,
//! supervised fine-tuning on the agent's tokens, then evaluation with the skill
//! library on the iid and test-normal splits of the built-in world, on the CPU.
//!
//! Run: `cargo run --release -p sage-examples --example sft_demo -- [--tiny] [RUN_DIR]`
//! (`--tiny`: a two-layer model on one seed of data, about a minute).
#![forbid(unsafe_code)]

use std::error::Error;
use std::path::PathBuf;

use sage_backend_cpu::CpuBackend;
use sage_trainer::chat::ChatTemplate;
use sage_trainer::config::RunConfig;
use sage_trainer::pipeline::{
    fresh_model, load_sft_data, prepare_data, run_eval, run_sft, train_tokenizer, PrintReporter,
};
use sage_trainer::policy::TransformerPolicy;
use sage_trainer::sft::{SftState, SftTrainer};

fn main() -> Result<(), Box<dyn Error>> {
    // Agent code runs in worker processes started from this program.
    sage_envs::sandbox::serve_worker_if_asked();
    let mut tiny = false;
    let mut dir = PathBuf::from("runs/sft_demo");
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--tiny" => tiny = true,
            _ => dir = PathBuf::from(arg),
        }
    }
    let config = if tiny {
        RunConfig::tiny(&dir)
    } else {
        RunConfig {
            run: sage_trainer::config::RunSection {
                dir: dir.clone(),
                ..Default::default()
            },
            ..RunConfig::default()
        }
    };
    config.validate()?;
    let mut reporter = PrintReporter { every: 10 };

    // 1. The expert solves the training scenarios in the skill format; its chats are
    //    the SFT data (and the dev split's, for a held-out loss).
    let files = prepare_data(&config.data, &dir, &mut reporter)?;

    // 2. A tokenizer for the model built from scratch, with the ChatML special tokens.
    let tokenizer = train_tokenizer(&config.tokenizer, &files.train, &dir, &mut reporter)?;
    let template =
        ChatTemplate::new(&tokenizer)?.with_max_len(config.model.max_position_embeddings);
    let train = load_sft_data(&files.train, &template, &mut reporter)?;
    let dev = load_sft_data(&files.dev, &template, &mut reporter)?;

    // 3. A fresh model and its optimizer; the cosine schedule spans the run.
    let mut k = CpuBackend::new();
    let model = fresh_model(&mut k, &config.model, config.run.seed, &tokenizer)?;
    let mut optimizer = config.optimizer.clone();
    optimizer.resolve_total_steps(
        SftTrainer::new(config.sft.clone(), &train, SftState::default()).total_steps(),
    );
    let mut policy = TransformerPolicy::trainable(k, model, optimizer)?
        .with_max_batch_tokens(config.run.max_batch_tokens);

    // 4. SFT: next-token loss on the agent's own tokens only.
    let mut on_step = |_: &mut TransformerPolicy<CpuBackend>, _: &_, _| Ok(());
    let (summary, _) = run_sft(
        &mut policy,
        &config.sft,
        &train,
        Some(&dev),
        SftState::default(),
        &mut reporter,
        &mut on_step,
    )?;
    println!(
        "SFT: {} steps, final loss {:.3}, dev loss {:.3}, {:.0} tokens/s",
        summary.steps,
        summary.final_loss,
        summary.dev_loss.unwrap_or(f64::NAN),
        summary.tokens_per_second
    );

    // 5. Evaluation: each scenario's tasks in order, each given the skills the earlier
    //    tasks of its scenario saved; the table goes to the reporter, the JSON to disk.
    let reports = run_eval(
        &mut policy,
        &config.eval,
        config.data.prompt_rules,
        &template,
        None,
        Some(&dir.join("eval.json")),
        &mut reporter,
    )?;
    for report in &reports {
        let m = &report.metrics;
        println!(
            "{} / {}: TGC {:.1}%, SGC {:.1}%",
            m.split, m.mode, m.tgc, m.sgc
        );
    }
    Ok(())
}
