//! Runs that record and protect themselves, through the `sage` binary on the tiny
//! configuration: every command records its settings and build; a resumed stage or an
//! update-off control under other settings is refused, naming the line that differs;
//! SIGTERM stops SFT, RL or an experiment's SFT at a step boundary with a checkpoint
//! from which `--resume` ends with the same weights as a run never interrupted.
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use sage_envs::scenarios::Split;
use sage_trainer::config::RunConfig;
use sage_trainer::experiment::Arm;

const SAGE: &str = env!("CARGO_BIN_EXE_sage");

/// A fresh directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sage-run-records-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// Writes `config` as `NAME.toml` in `dir` and returns its path.
fn config_file(dir: &Path, name: &str, config: &RunConfig) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, config.to_toml()).expect("a config file");
    path
}

/// Runs `sage ARGS` to its end.
fn sage(args: &[&str]) -> Output {
    Command::new(SAGE).args(args).output().expect("sage runs")
}

fn succeeded(output: &Output) -> bool {
    if !output.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    }
    output.status.success()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn runs_record_their_settings_and_refuse_to_mix_others() {
    let root = scratch("mix");
    let run = root.join("run");
    let base = RunConfig::tiny(&run);
    let base_file = config_file(&root, "base", &base);
    let base_file = base_file.to_str().expect("a UTF-8 path");
    let mut other = base.clone();
    other.rl.learning_rate *= 2.0;
    let other_file = config_file(&root, "other", &other);
    let other_file = other_file.to_str().expect("a UTF-8 path");

    assert!(succeeded(&sage(&["demo", "--config", base_file])));
    let recorded = std::fs::read_to_string(run.join("config.toml")).expect("config.toml");
    assert_eq!(recorded, base.to_toml());
    let info = std::fs::read_to_string(run.join("run-info.json")).expect("run-info.json");
    for field in ["\"command\": \"demo\"", "\"version\"", "\"git_revision\""] {
        assert!(info.contains(field), "{info}");
    }
    assert!(run.join("settings/sft.toml").is_file());

    assert!(succeeded(&sage(&["train", "--config", base_file])));
    assert!(run.join("settings/rl.toml").is_file());

    // A control under other settings than its run is refused before it starts.
    let refused = sage(&["train", "--config", other_file, "--control"]);
    assert!(!refused.status.success());
    let message = stderr(&refused);
    assert!(
        message.contains("[rl] learning_rate = ") && message.contains("apply_updates"),
        "{message}"
    );
    assert!(!run.join("rl-control").exists(), "the refused control ran");

    // So is a resumed run, RL or SFT.
    let refused = sage(&["train", "--config", other_file, "--resume"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("[rl] learning_rate = "),
        "{}",
        stderr(&refused)
    );
    let mut other_sft = base.clone();
    other_sft.sft.batch_tokens /= 2;
    let other_sft_file = config_file(&root, "other-sft", &other_sft);
    let refused = sage(&[
        "sft",
        "--config",
        other_sft_file.to_str().expect("a UTF-8 path"),
        "--resume",
    ]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("[sft] batch_tokens = "),
        "{}",
        stderr(&refused)
    );

    // With the run's settings (and more steps, which a resume may add) both go on, and
    // the control is compared with its run.
    assert!(succeeded(&sage(&[
        "train", "--config", base_file, "--resume", "--steps", "3"
    ])));
    let control = sage(&["train", "--config", base_file, "--control"]);
    assert!(succeeded(&control));
    assert!(
        stderr(&control).contains("against the update-off control"),
        "{}",
        stderr(&control)
    );

    // A run restarted under other settings is not compared with the old control.
    let rerun = sage(&["train", "--config", other_file]);
    assert!(succeeded(&rerun));
    assert!(
        stderr(&rerun).contains("ran with other settings than the run"),
        "{}",
        stderr(&rerun)
    );
    std::fs::remove_dir_all(&root).expect("cleaned up");
}

/// The weights of the newest checkpoint in `checkpoints`.
fn latest_weights(checkpoints: &Path) -> Vec<u8> {
    let mut steps: Vec<PathBuf> = std::fs::read_dir(checkpoints)
        .expect("checkpoints")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.join("model.safetensors").is_file())
        .collect();
    steps.sort();
    let last = steps.last().expect("a checkpoint");
    std::fs::read(last.join("model.safetensors")).expect("its weights")
}

/// The lines of the file at `path` (0 while it does not exist).
fn rows(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |text| text.lines().count())
}

/// Runs `sage COMMAND --config FILE`, sends it SIGTERM once `ready` holds (`twice`: a
/// second one 50 ms later, as GNU `timeout` signals its command and then the command's
/// process group), and checks that it stopped early at a step boundary, saying so.
fn stop_with_sigterm(command: &str, file: &str, twice: bool, ready: impl Fn() -> bool) {
    let child = Command::new(SAGE)
        .args([command, "--config", file])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sage starts");
    let started = Instant::now();
    while !ready() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no {command} step"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let pid = i32::try_from(child.id()).expect("a pid");
    // SAFETY: sends a signal to the child this test started and still owns.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    if twice {
        std::thread::sleep(Duration::from_millis(50));
        // SAFETY: as above; the child is not yet reaped, so the pid is still its own.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    }
    let output = child.wait_with_output().expect("sage ends");
    let message = stderr(&output);
    assert!(!output.status.success(), "it ran to the end:\n{message}");
    assert!(
        message.contains("stopped on request after step") && message.contains("--resume"),
        "{message}"
    );
}

/// The run directories `root/whole` and `root/stopped`, each with its config file of
/// `config_for`'s settings there.
fn whole_and_stopped(
    root: &Path,
    config_for: impl Fn(&Path) -> RunConfig,
) -> [(PathBuf, String); 2] {
    ["whole", "stopped"].map(|name| {
        let run = root.join(name);
        let file = config_file(root, name, &config_for(&run));
        (run, file.to_str().expect("a UTF-8 path").to_owned())
    })
}

/// Two runs of `config_for`'s settings in `root`, set up by `prepare` (a file each): one
/// runs `command` whole, the other is stopped by SIGTERM once its `metrics` file has
/// `rows` rows and resumed; both must end with the same weights in `checkpoints`.
fn stopped_and_resumed_ends_as_whole(
    name: &str,
    config_for: impl Fn(&Path) -> RunConfig,
    prepare: &[&str],
    command: &str,
    (metrics, rows): (&str, usize),
    checkpoints: &str,
) {
    let root = scratch(name);
    let [(whole, whole_file), (stopped, stopped_file)] = whole_and_stopped(&root, config_for);
    let (whole_file, stopped_file) = (whole_file.as_str(), stopped_file.as_str());
    for step in prepare {
        for file in [whole_file, stopped_file] {
            assert!(succeeded(&sage(&[step, "--config", file])));
        }
    }
    assert!(succeeded(&sage(&[command, "--config", whole_file])));
    let stopped_metrics = stopped.join(metrics);
    stop_with_sigterm(command, stopped_file, false, || {
        self::rows(&stopped_metrics) >= rows
    });
    let (written, all) = (
        self::rows(&stopped_metrics),
        self::rows(&whole.join(metrics)),
    );
    assert!(written < all, "all {written} steps ran");
    assert!(succeeded(&sage(&[
        command,
        "--config",
        stopped_file,
        "--resume"
    ])));
    assert!(
        latest_weights(&whole.join(checkpoints)) == latest_weights(&stopped.join(checkpoints)),
        "the resumed {command} ended with other weights"
    );
    std::fs::remove_dir_all(&root).expect("cleaned up");
}

#[test]
fn sigterm_stops_rl_at_a_step_boundary_and_resume_ends_as_if_never_stopped() {
    let config_for = |run: &Path| {
        let mut config = RunConfig::tiny(run);
        config.rl.steps = 30;
        config.rl.checkpoint_every = 0;
        config
    };
    // The signal comes once the first step's metrics row is written.
    stopped_and_resumed_ends_as_whole(
        "sigterm",
        config_for,
        &["demo"],
        "train",
        ("rl/metrics/rl.jsonl", 1),
        "rl/checkpoints",
    );
}

#[test]
fn sigterm_stops_sft_at_a_step_boundary_and_resume_ends_as_if_never_stopped() {
    let config_for = |run: &Path| {
        let mut config = RunConfig::tiny(run);
        config.sft.epochs = 6;
        config
    };
    stopped_and_resumed_ends_as_whole(
        "sft-sigterm",
        config_for,
        &[],
        "sft",
        ("metrics/sft.jsonl", 2),
        "checkpoints",
    );
}

#[test]
fn sigterm_stops_an_experiments_sft_and_resume_ends_as_if_never_stopped() {
    let root = scratch("experiment-sigterm");
    let config_for = |run: &Path| {
        let mut config = RunConfig::tiny(run);
        config.sft.epochs = 6;
        config.run.checkpoint_every = 2;
        config.experiment.seeds = 1;
        config.experiment.arms = vec![Arm::SftOnly];
        config.eval.splits = vec![Split::Iid];
        config.eval.max_scenarios = 1;
        config
    };
    let [(whole, whole_file), (stopped, stopped_file)] = whole_and_stopped(&root, config_for);
    let (whole_file, stopped_file) = (whole_file.as_str(), stopped_file.as_str());
    assert!(succeeded(&sage(&["experiment", "--config", whole_file])));

    // The signal comes once the first periodic checkpoint (step 2) is saved; the stop
    // saves one more, of the step under way.
    let checkpoints = stopped.join("sft-skills").join("checkpoints");
    let first = checkpoints.join("step-000002").join("model.safetensors");
    // Twice at once, as `timeout` stops a command: still one request, so the step under
    // way is saved.
    stop_with_sigterm("experiment", stopped_file, true, || first.is_file());
    assert!(!stopped.join("sft-skills/finished.json").exists());
    let saved = std::fs::read_dir(&checkpoints)
        .expect("checkpoints")
        .filter(|entry| entry.as_ref().expect("an entry").file_name() != "owner.json")
        .count();
    assert!(saved >= 2, "{saved} checkpoints");

    let resumed = sage(&["experiment", "--config", stopped_file, "--resume"]);
    assert!(succeeded(&resumed));
    assert!(
        stderr(&resumed).contains("sft: continuing from"),
        "{}",
        stderr(&resumed)
    );
    let weights = |run: &Path| {
        std::fs::read(run.join("sft-skills/model/model.safetensors")).expect("the SFT model")
    };
    assert!(
        weights(&whole) == weights(&stopped),
        "the resumed experiment's SFT ended with other weights"
    );
    assert!(!checkpoints.exists(), "the finished SFT's checkpoints stay");
    // The step log of the resumed SFT is the uninterrupted one's, row for row.
    let log = |run: &Path| {
        std::fs::read_to_string(run.join("sft-skills/metrics/sft.jsonl")).expect("the SFT log")
    };
    assert!(rows(&whole.join("sft-skills/metrics/sft.jsonl")) > 2);
    assert_eq!(log(&whole), log(&stopped));
    assert!(stopped.join("sft-skills/plots/sft_loss.png").is_file());
    std::fs::remove_dir_all(&root).expect("cleaned up");
}
