//! The whole demo pipeline on the tiny configuration (about a minute on two cores):
//! expert data, tokenizer, a fresh model, SFT that lowers the loss, and an evaluation
//! of both splits whose report lands on disk.

use std::fs;
use std::path::PathBuf;

use sage_backend_cpu::CpuBackend;
use sage_trainer::config::RunConfig;
use sage_trainer::pipeline::{run_demo, PrintReporter};

/// A fresh directory for one test run.
fn run_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sage-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    dir
}

#[test]
fn tiny_demo_trains_and_evaluates_end_to_end() {
    let dir = run_dir("tiny-demo");
    let config = RunConfig::tiny(&dir);
    let mut reporter = PrintReporter { every: 5 };
    let mut losses = Vec::new();
    let mut on_step = |_: &mut _, _: &_, step: &sage_trainer::sft::SftStep, _| {
        losses.push(step.loss);
        Ok(())
    };
    let (report, _, tokenizer) =
        run_demo(CpuBackend::new(), &config, &mut reporter, &mut on_step).unwrap();

    assert!(dir.join("data/train.jsonl").is_file());
    assert!(dir.join("data/dev.jsonl").is_file());
    assert!(dir.join("tokenizer.json").is_file());
    assert!(tokenizer.vocab_size() <= config.tokenizer.vocab_size);

    // SFT ran every step and learned: the last steps' loss is well below the first's
    // (a fresh model starts near ln(vocab) ~ 6.2 nats per token).
    assert_eq!(losses.len() as u64, report.sft.steps);
    assert!(report.sft.steps >= 5, "{} steps", report.sft.steps);
    assert!(losses[0] > 5.0, "first loss {}", losses[0]);
    assert!(
        report.sft.final_loss < 0.8 * losses[0],
        "{} -> {}",
        losses[0],
        report.sft.final_loss
    );
    assert!(report.sft.dev_loss.is_some_and(f64::is_finite));
    assert_eq!(report.sft.skipped_steps, 0);

    // Both splits evaluated on their first 4 scenarios (3 tasks each), within limits.
    let splits: Vec<&str> = report
        .eval
        .iter()
        .map(|r| r.metrics.split.as_str())
        .collect();
    assert_eq!(splits, ["iid", "test-normal"]);
    for eval in &report.eval {
        let m = &eval.metrics;
        assert_eq!((m.scenarios, m.tasks, eval.tasks.len()), (4, 12, 12));
        assert!((0.0..=100.0).contains(&m.tgc) && (0.0..=100.0).contains(&m.sgc));
        for task in &eval.tasks {
            assert!(task.steps >= 1 && task.steps <= 3, "{} steps", task.steps);
            assert_eq!(task.turns.len(), task.steps);
            assert!(task.tokens <= 3 * 96);
        }
    }
    let written: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(dir.join("eval.json")).unwrap()).unwrap();
    assert_eq!(written.as_array().map(Vec::len), Some(2));
    fs::remove_dir_all(&dir).unwrap();
}
