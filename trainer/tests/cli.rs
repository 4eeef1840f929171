//! The `sage` binary: `config` writes a configuration that reads back as the
//! defaults; `env` prints what a bug report needs; bad configurations and missing
//! checkpoints fail with one message and a non-zero exit; `sft` on the tiny configuration writes checkpoints, metrics and the
//! loss plot, `sft --resume` continues from the latest checkpoint, `eval` reads it,
//! `generate` plays a scenario with it, and `train` runs RL from it, resumably; an
//! experiment's anneal stage equals `sft --init` from its SFT model, to the bit, and an
//! experiment resumed with `--rl-steps` trains its RL arms again from the same SFT model;
//! `tables` puts kept results of two runs together.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sage_envs::scenarios::Split;
use sage_trainer::config::RunConfig;
use sage_trainer::experiment::Arm;

/// Runs `sage` with `args`.
fn sage(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sage"))
        .args(args)
        .output()
        .expect("the sage binary runs")
}

/// A fresh directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sage-cli-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn printed_configuration_reads_back_as_the_defaults() {
    // `sage config` prints it; `--print` is still accepted.
    for args in [&["config"][..], &["config", "--print"]] {
        let output = sage(args);
        assert!(output.status.success(), "{}", stderr(&output));
        let text = String::from_utf8(output.stdout).unwrap();
        assert_eq!(RunConfig::from_toml(&text).unwrap(), RunConfig::default());
    }
}

#[test]
fn env_prints_what_a_bug_report_needs() {
    let output = sage(&["env"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], format!("sage {}", env!("CARGO_PKG_VERSION")));
    for start in [
        "git revision: ",
        "compiler: rustc ",
        "platform: ",
        "cpu features: ",
        "threads: ",
        "backends compiled: ",
        "sandbox worker: ",
    ] {
        assert!(
            lines.iter().any(|l| l.starts_with(start)),
            "{start}\n{text}"
        );
    }
    assert!(text.contains("backends compiled: cpu"), "{text}");
}

#[test]
fn bad_inputs_fail_with_one_clear_message() {
    let dir = scratch("bad");
    let config = dir.join("bad.toml");
    fs::write(&config, "[sft]\nepochs = \"three\"\n").unwrap();
    let output = sage(&["demo", "--config", config.to_str().unwrap()]);
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(
        message.contains("bad.toml") && message.contains("epochs"),
        "{message}"
    );

    let output = sage(&[
        "demo",
        "--config",
        dir.join("missing.toml").to_str().unwrap(),
    ]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("missing.toml"),
        "{}",
        stderr(&output)
    );

    let output = sage(&["eval", "--run-dir", dir.to_str().unwrap()]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("no checkpoint"),
        "{}",
        stderr(&output)
    );

    let output = sage(&["train", "--run-dir", dir.to_str().unwrap()]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("no SFT checkpoint"),
        "{}",
        stderr(&output)
    );

    let output = sage(&["sft", "--backend", "tpu"]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("unknown backend \"tpu\" (known: cpu, cuda, wgpu)"),
        "{}",
        stderr(&output)
    );
    // This test binary's `sage` is the default build, with the CPU backend only.
    let output = sage(&["sft", "--backend", "cuda"]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("not compiled"),
        "{}",
        stderr(&output)
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tables_put_two_runs_together_and_write_their_files() {
    // Seed 2 of the per-seed run, its skill arms replaced by the equal-steps run's.
    let results = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/results");
    let per_seed = results.join("experiment-default-per-seed-2026-11-28.json");
    let equal_steps = results.join("experiment-default-equal-steps-seed2-2026-12-01.json");
    let dir = scratch("tables");
    let output = sage(&[
        "tables",
        per_seed.to_str().unwrap(),
        equal_steps.to_str().unwrap(),
        "--seeds",
        "2",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let printed = String::from_utf8_lossy(&output.stdout);
    let replaced: Vec<&str> = printed.lines().filter(|l| l.contains("replaces")).collect();
    assert_eq!(replaced.len(), 2, "{printed}");
    assert!(
        replaced[0].starts_with("sft-only under seed 2"),
        "{printed}"
    );
    assert!(replaced[1].starts_with("sage under seed 2"), "{printed}");
    // Both files predate the rows' digests of their inputs, which the output says.
    assert!(
        printed
            .lines()
            .any(|l| l.starts_with("note: rows without digests") && l.contains("2 rows")),
        "{printed}"
    );
    // SAGE 95.4 SGC at equal steps against GRPO's 95.0 (docs/results.md, seed 2).
    let claim = printed
        .lines()
        .find(|l| l.starts_with("sage vs grpo-no-skills"))
        .unwrap_or_else(|| panic!("no claim row in\n{printed}"));
    assert!(claim.contains("+0.4 ± 0.0"), "{printed}");
    let rows: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(dir.join("experiment.json")).unwrap()).unwrap();
    let arms: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["arm"].as_str().unwrap())
        .collect();
    assert_eq!(arms, ["sft-only", "sft-direct", "grpo-no-skills", "sage"]);
    assert!(fs::read_to_string(dir.join("experiment.md"))
        .unwrap()
        .contains("sage vs grpo-no-skills"));

    let output = sage(&["tables", dir.join("absent.json").to_str().unwrap()]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("absent.json"),
        "{}",
        stderr(&output)
    );
    fs::remove_dir_all(&dir).unwrap();
}

/// Step numbers of the checkpoints under `run`.
fn checkpoint_steps(run: &Path) -> Vec<u64> {
    let mut steps: Vec<u64> = fs::read_dir(run.join("checkpoints"))
        .unwrap()
        .filter_map(|entry| {
            let name = entry.unwrap().file_name().into_string().unwrap();
            name.strip_prefix("step-").and_then(|n| n.parse().ok())
        })
        .collect();
    steps.sort_unstable();
    steps
}

#[test]
fn sft_checkpoints_resumes_and_evaluates() {
    let dir = scratch("sft");
    let run = dir.join("run");
    let mut tiny = RunConfig::tiny(&run);
    tiny.sft.epochs = 1;
    tiny.run.checkpoint_every = 5;
    tiny.run.keep_checkpoints = 2;
    tiny.eval.splits = vec![Split::Iid];
    tiny.eval.max_scenarios = 2;
    let config = dir.join("tiny.toml");
    fs::write(&config, tiny.to_toml()).unwrap();
    let config = config.to_str().unwrap();

    let output = sage(&["sft", "--config", config]);
    assert!(output.status.success(), "{}", stderr(&output));
    let steps = checkpoint_steps(&run);
    assert_eq!(steps.len(), 2, "keep_checkpoints = 2 keeps two: {steps:?}");
    let last = *steps.last().unwrap();
    let rows = fs::read_to_string(run.join("metrics/sft.jsonl")).unwrap();
    assert_eq!(
        rows.lines().count() as u64,
        last,
        "one metrics row per step"
    );
    let csv = fs::read_to_string(run.join("metrics/sft.csv")).unwrap();
    assert!(csv.starts_with("step,"), "{csv}");
    assert!(run.join("plots/sft_loss.png").is_file());

    // A second epoch, resumed from the latest checkpoint, continues the step count.
    tiny.sft.epochs = 2;
    fs::write(dir.join("tiny.toml"), tiny.to_toml()).unwrap();
    let output = sage(&["sft", "--config", config, "--resume"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stderr(&output).contains("resuming"), "{}", stderr(&output));
    let resumed_last = *checkpoint_steps(&run).last().unwrap();
    assert!(resumed_last > last, "{resumed_last} <= {last}");
    let rows = fs::read_to_string(run.join("metrics/sft.jsonl")).unwrap();
    assert_eq!(rows.lines().count() as u64, resumed_last);

    let out = dir.join("eval.json");
    let output = sage(&["eval", "--config", config, "--out", out.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(report[0]["metrics"]["tasks"], 6);

    // The checkpoint plays one scenario, turn by turn.
    let output = sage(&["generate", "--config", config, "--scenario", "1"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let played = String::from_utf8(output.stdout).unwrap();
    for part in [
        "greedy decoding, scenario iid/",
        "=== task 1 (",
        "--- agent, turn 1",
        "--- sandbox",
    ] {
        assert!(played.contains(part), "{part}:\n{played}");
    }
    assert!(
        played.contains("=== passed") || played.contains("=== failed"),
        "{played}"
    );
    let output = sage(&["generate", "--config", config, "--prompt", "Hello"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let answer = String::from_utf8(output.stdout).unwrap();
    assert!(answer.contains("(greedy decoding), "), "{answer}");
    let refused = sage(&["generate", "--config", config, "--scenario", "100000"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("--scenario takes 0 to"),
        "{}",
        stderr(&refused)
    );

    // RL from the SFT checkpoint: one step, then a resumed second one.
    let output = sage(&["train", "--config", config, "--steps", "1"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("rl step 1/1"),
        "{}",
        stderr(&output)
    );
    let output = sage(&["train", "--config", config, "--steps", "2", "--resume"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let log = stderr(&output);
    assert!(
        log.contains("resuming") && log.contains("rl step 2/2"),
        "{log}"
    );
    assert!(
        !log.contains("rl step 1/2"),
        "the resumed run repeated step 1: {log}"
    );
    let rl = run.join("rl");
    assert!(rl.join("checkpoints/step-000002/state.json").is_file());
    let rows = fs::read_to_string(rl.join("metrics/rl.jsonl")).unwrap();
    let steps: Vec<u64> = rows
        .lines()
        .map(|line| {
            serde_json::from_str::<serde_json::Value>(line).unwrap()["step"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(steps, [1, 2]);
    assert!(rows.contains("reward_mean_2") && rows.contains("zero_advantage_groups"));
    assert!(rl.join("plots/rl_reward.png").is_file());
    assert!(rl.join("eval.json").is_file());

    // With a KL term (refused before a reference was loaded), the SFT model is the
    // frozen reference: its k3 estimate is 0 before any update, and after an update
    // that had something to learn (a group with a nonzero advantage) it is positive.
    tiny.rl.grpo.kl_coef = 0.1;
    tiny.rl.learning_rate = 1e-2;
    let kl_config = dir.join("kl.toml");
    fs::write(&kl_config, tiny.to_toml()).unwrap();
    let output = sage(&[
        "train",
        "--config",
        kl_config.to_str().unwrap(),
        "--steps",
        "3",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("KL reference"),
        "{}",
        stderr(&output)
    );
    let rows: Vec<serde_json::Value> = fs::read_to_string(rl.join("metrics/rl.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(rows.len(), 3);
    let column =
        |name: &str| -> Vec<f64> { rows.iter().map(|r| r[name].as_f64().unwrap()).collect() };
    let (ref_kl, flat) = (column("ref_kl"), column("zero_advantage_groups"));
    assert!(ref_kl[0].abs() < 1e-6, "no update yet: {ref_kl:?}");
    assert!(
        ref_kl.iter().all(|kl| kl.is_finite() && *kl >= -1e-6),
        "{ref_kl:?}"
    );
    for step in 1..3 {
        if flat[..step].iter().any(|&share| share < 1.0) {
            assert!(ref_kl[step] > 0.0, "moved but no KL: {ref_kl:?} {flat:?}");
        }
    }
    fs::remove_dir_all(&dir).unwrap();
}

/// The tensors of `dir/model.safetensors`, by name, as raw bytes.
fn tensors(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let bytes = fs::read(dir.join("model.safetensors")).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors: Vec<(String, Vec<u8>)> = file
        .tensors()
        .into_iter()
        .map(|(name, view)| (name, view.data().to_vec()))
        .collect();
    tensors.sort();
    tensors
}

/// A tiny experiment in `run` of one arm under one seed: one SFT epoch, evaluated on one
/// `iid` scenario.
fn tiny_experiment(run: &Path, arm: Arm) -> RunConfig {
    let mut tiny = RunConfig::tiny(run);
    tiny.sft.epochs = 1;
    tiny.eval.splits = vec![Split::Iid];
    tiny.eval.max_scenarios = 1;
    tiny.experiment.seeds = 1;
    tiny.experiment.arms = vec![arm];
    tiny
}

/// An experiment's anneal stage is `sage sft --init` of the stage before it, with the
/// anneal's epochs and schedule, on the same data: the same weights to the bit on the
/// CPU, so an anneal trained by hand can stand in for the stage and the other way round.
#[test]
fn an_experiments_anneal_is_sage_sft_from_its_model() {
    let dir = scratch("anneal");
    let run = dir.join("experiment");
    let mut tiny = tiny_experiment(&run, Arm::SftOnly);
    tiny.experiment.anneal.epochs = 1;
    tiny.experiment.anneal.peak_lr = 1e-3;
    tiny.experiment.anneal.min_lr = 1e-4;
    tiny.experiment.anneal.warmup_steps = 2;
    let config = dir.join("experiment.toml");
    fs::write(&config, tiny.to_toml()).unwrap();
    let output = sage(&["experiment", "--config", config.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stderr(&output));

    let mut by_hand = tiny.clone();
    by_hand.run.dir = dir.join("by-hand");
    by_hand.sft.epochs = tiny.experiment.anneal.epochs;
    by_hand.optimizer.schedule = tiny.experiment.anneal.schedule();
    let hand_config = dir.join("by-hand.toml");
    fs::write(&hand_config, by_hand.to_toml()).unwrap();
    let data = run.join("sft-skills/data");
    let output = sage(&[
        "sft",
        "--config",
        hand_config.to_str().unwrap(),
        "--data",
        data.join("train.jsonl").to_str().unwrap(),
        "--dev",
        data.join("dev.jsonl").to_str().unwrap(),
        "--init",
        run.join("sft-skills/model").to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let by_hand_model = sage_trainer::checkpoint::latest(&by_hand.run.dir.join("checkpoints"))
        .unwrap()
        .expect("sage sft saved a checkpoint");

    let annealed = tensors(&run.join("sft-skills-annealed/model"));
    let main = tensors(&run.join("sft-skills/model"));
    assert!(annealed != main, "the anneal left the model as it was");
    let by_hand = tensors(&by_hand_model);
    assert_eq!(by_hand.len(), annealed.len());
    let differing: Vec<&String> = by_hand
        .iter()
        .zip(&annealed)
        .filter(|(a, b)| a != b)
        .map(|(a, _)| &a.0)
        .collect();
    assert!(
        differing.is_empty(),
        "sage sft --init differs from the anneal stage in {differing:?}"
    );
    fs::remove_dir_all(&dir).unwrap();
}

/// `sage experiment --rl-steps` sets every RL arm's steps, and with `--resume` trains the
/// arm again for the new count from the SFT model already there, naming the change.
#[test]
fn an_experiment_resumed_with_more_rl_steps_trains_its_arms_again() {
    let dir = scratch("rl-steps");
    let run = dir.join("experiment");
    let mut tiny = tiny_experiment(&run, Arm::Sage);
    tiny.experiment.controls = false;
    let config = dir.join("experiment.toml");
    fs::write(&config, tiny.to_toml()).unwrap();
    let experiment = |extra: &[&str]| {
        let mut args = vec!["experiment", "--config", config.to_str().unwrap()];
        args.extend_from_slice(extra);
        let output = sage(&args);
        assert!(output.status.success(), "{}", stderr(&output));
        stderr(&output)
    };
    let logged_steps = || {
        fs::read_to_string(run.join("seed-0/sage/metrics/rl.jsonl"))
            .unwrap()
            .lines()
            .count()
    };
    experiment(&["--rl-steps", "1"]);
    assert_eq!(logged_steps(), 1);
    let weights = run.join("sft-skills/model/model.safetensors");
    let trained_at = fs::metadata(&weights).unwrap().modified().unwrap();

    let log = experiment(&["--rl-steps", "3", "--resume"]);
    assert_eq!(logged_steps(), 3);
    assert!(
        log.contains("seed 0: sage: ran with `[rl] steps = 1`, not `[rl] steps = 3`, so run again"),
        "{log}"
    );
    assert!(log.contains("sft on skills trajectories: reused"), "{log}");
    assert_eq!(
        fs::metadata(&weights).unwrap().modified().unwrap(),
        trained_at
    );
    fs::remove_dir_all(&dir).unwrap();
}
