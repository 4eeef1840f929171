//! The experiment run on the tiny configuration (seconds each): `--resume` reuses the SFT
//! model and the arms the first run finished, trains only what it adds, runs again the
//! arms of another evaluation, and refuses a directory whose run had other settings; the
//! `sage-kl` arm trains against a frozen reference.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use sage_backend_cpu::CpuBackend;
use sage_envs::scenarios::Split;
use sage_trainer::config::RunConfig;
use sage_trainer::experiment::Arm;
use sage_trainer::pipeline::experiment::{merge_runs, run_experiment, ArmRun};
use sage_trainer::pipeline::{PipelineError, Reporter};
use sage_trainer::sft::SftStep;

/// Keeps every stage and line a run reports.
#[derive(Default)]
struct Recorder {
    lines: Vec<String>,
}

impl Reporter for Recorder {
    fn stage(&mut self, name: &str) {
        self.lines.push(format!("stage {name}"));
    }
    fn info(&mut self, message: &str) {
        self.lines.push(message.to_owned());
    }
    fn result(&mut self, _: &str) {}
    fn sft_started(&mut self, _: u64, _: u64) {}
    fn sft_step(&mut self, _: &SftStep, _: f64) {}
    fn eval_wave(&mut self, _: &str, _: &str, _: usize, _: usize) {}
}

fn tiny(dir: &Path, seeds: u64) -> RunConfig {
    let mut config = RunConfig::tiny(dir);
    config.sft.epochs = 1;
    config.eval.splits = vec![Split::Iid];
    config.eval.max_scenarios = 2;
    config.experiment.seeds = seeds;
    config.experiment.arms = vec![Arm::SftOnly, Arm::Sage];
    config
}

fn modified(path: &Path) -> SystemTime {
    fs::metadata(path).unwrap().modified().unwrap()
}

/// The experiment of `config` on the CPU.
fn run(
    config: &RunConfig,
    resume: bool,
    reporter: &mut Recorder,
) -> Result<Vec<ArmRun>, PipelineError> {
    run_experiment(
        CpuBackend::new(),
        &|| Ok(CpuBackend::new()),
        config,
        resume,
        reporter,
    )
}

fn as_json(runs: &[ArmRun]) -> String {
    serde_json::to_string(runs).unwrap()
}

#[test]
fn a_resumed_experiment_reuses_what_it_finished_and_refuses_other_settings() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("sage-experiment-resume-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);

    let mut first = Recorder::default();
    let one_seed = run(&tiny(&dir, 1), false, &mut first).unwrap();
    assert_eq!(one_seed.len(), 2, "sft-only and sage under seed 0");
    let weights = dir.join("sft-skills/model/model.safetensors");
    let trained_at = modified(&weights);

    // Resumed with a second seed, run alone (`--only-seed 1`): the SFT model and seed
    // 0 are left as they were, only seed 1 runs.
    let mut only = tiny(&dir, 2);
    only.experiment.only_seed = Some(1);
    let mut alone = Recorder::default();
    let seed_one = run(&only, true, &mut alone).unwrap();
    assert_eq!(
        modified(&weights),
        trained_at,
        "the SFT model was not trained again"
    );
    assert!(
        !alone
            .lines
            .iter()
            .any(|l| l.starts_with("stage sft") || l.starts_with("stage expert data")),
        "no SFT, and no expert data for it: {:?}",
        alone.lines
    );
    assert!(
        alone.lines.iter().all(|l| !l.starts_with("stage seed 0")),
        "{:?}",
        alone.lines
    );
    assert_eq!(
        seed_one
            .iter()
            .map(|r| (r.arm.as_str(), r.seed))
            .collect::<Vec<_>>(),
        [("sft-only", 1), ("sage", 1)]
    );
    assert!(alone.lines.contains(&"stage seed 1: sage".to_owned()));

    // Resumed over both seeds: everything is reused and the table holds both.
    let mut resumed = Recorder::default();
    let two_seeds = run(&tiny(&dir, 2), true, &mut resumed).unwrap();
    let reused = resumed
        .lines
        .iter()
        .filter(|l| l.contains("reused"))
        .count();
    assert_eq!(
        reused, 6,
        "the tokenizer, the SFT model and both seeds' two arms: {:?}",
        resumed.lines
    );
    assert_eq!(as_json(&two_seeds[..2]), as_json(&one_seed));
    assert_eq!(as_json(&two_seeds[2..]), as_json(&seed_one));

    // Resumed with a larger evaluation: the tokenizer and the SFT model are reused, and
    // every arm runs again and is evaluated on the new scenarios; its RL, with the same
    // seed on the CPU, samples the same rollouts as the first run's.
    let mut larger = tiny(&dir, 2);
    larger.eval.max_scenarios = 3;
    let mut reevaluated = Recorder::default();
    let larger_runs = run(&larger, true, &mut reevaluated).unwrap();
    assert_eq!(modified(&weights), trained_at);
    let rerun: Vec<&String> = reevaluated
        .lines
        .iter()
        .filter(|l| {
            l.ends_with(
                "ran with `[eval] max_scenarios = 2`, not `[eval] max_scenarios = 3`, \
                 so run again",
            )
        })
        .collect();
    assert_eq!(rerun.len(), 4, "{:?}", reevaluated.lines);
    assert!(reevaluated.lines.contains(&"stage seed 1: sage".to_owned()));
    for (before, after) in two_seeds.iter().zip(&larger_runs) {
        assert_eq!((&before.arm, before.seed), (&after.arm, after.seed));
        assert_eq!(before.metrics[0].scenarios, 2);
        assert_eq!(after.metrics[0].scenarios, 3);
    }
    let rl_steps = |lines: &[String]| -> Vec<String> {
        lines
            .iter()
            .filter(|l| l.starts_with("sage step"))
            .take(2)
            .cloned()
            .collect()
    };
    assert_eq!(rl_steps(&reevaluated.lines), rl_steps(&first.lines));
    assert_eq!(rl_steps(&first.lines).len(), 2);
    // Under the larger evaluation, everything is reused again.
    let mut resumed_larger = Recorder::default();
    let reused_larger = run(&larger, true, &mut resumed_larger).unwrap();
    assert_eq!(as_json(&reused_larger), as_json(&larger_runs));

    // A resumed run that adds the plain-code arm trains its SFT model with the run's
    // tokenizer (the one the skill model was trained with), not one of its own data's.
    let tokenizer = dir.join("tokenizer.json");
    let tokenizer_text = fs::read_to_string(&tokenizer).unwrap();
    let mut with_direct = tiny(&dir, 1);
    with_direct.experiment.arms = vec![Arm::SftDirect];
    let mut direct = Recorder::default();
    run(&with_direct, true, &mut direct).unwrap();
    assert!(
        direct
            .lines
            .contains(&"stage sft on direct trajectories".to_owned())
            && !direct.lines.contains(&"stage tokenizer".to_owned()),
        "{:?}",
        direct.lines
    );
    assert_eq!(fs::read_to_string(&tokenizer).unwrap(), tokenizer_text);
    assert_eq!(
        fs::read_to_string(dir.join("sft-direct/model/tokenizer.json")).unwrap(),
        tokenizer_text
    );

    // Resumed with other RL settings: the SFT models and the arm without RL are reused,
    // and the RL arm trains again under the new settings.
    let mut other_rl = larger.clone();
    other_rl.rl.learning_rate *= 2.0;
    let mut retrained = Recorder::default();
    let retrained_runs = run(&other_rl, true, &mut retrained).unwrap();
    assert_eq!(modified(&weights), trained_at);
    let said = |what: &str| retrained.lines.iter().filter(|l| l.contains(what)).count();
    assert_eq!(said("sft-only: reused"), 2, "{:?}", retrained.lines);
    assert_eq!(
        said(&format!(
            "sage: ran with `[rl] learning_rate = {}`, not `[rl] learning_rate = {}`, so run again",
            larger.rl.learning_rate, other_rl.rl.learning_rate
        )),
        2,
        "{:?}",
        retrained.lines
    );
    for seed in 0..2 {
        let stage = |arm: &str| format!("stage seed {seed}: {arm}");
        assert!(retrained.lines.contains(&stage("sage")));
        assert!(!retrained.lines.contains(&stage("sft-only")));
    }
    assert_eq!(retrained_runs.len(), larger_runs.len());

    // Other settings: refused, naming the setting that differs; nothing is overwritten.
    let mut other = tiny(&dir, 2);
    other.data.seeds += 1;
    let error = run(&other, true, &mut Recorder::default())
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("resume: ") && error.contains("[data] seeds"),
        "{error}"
    );
    let mut other_recipe = tiny(&dir, 2);
    other_recipe.sft.epochs += 1;
    let error = run(&other_recipe, true, &mut Recorder::default())
        .unwrap_err()
        .to_string();
    assert!(error.contains("[sft] epochs = 1"), "{error}");
    assert_eq!(modified(&weights), trained_at);

    // A fresh run in the same directory does not count the old run's stages as its own.
    let mut fresh = Recorder::default();
    let mut sft_only = tiny(&dir, 1);
    sft_only.experiment.arms = vec![Arm::SftOnly];
    run(&sft_only, false, &mut fresh).unwrap();
    assert!(
        fresh.lines.iter().all(|l| !l.contains("reused")),
        "{:?}",
        fresh.lines
    );
    assert!(fresh
        .lines
        .contains(&"stage sft on skills trajectories".to_owned()));

    // Nothing to resume where no experiment ran.
    let empty = dir.join("empty");
    let error = run(&tiny(&empty, 1), true, &mut Recorder::default())
        .unwrap_err()
        .to_string();
    assert!(error.contains("nothing to resume"), "{error}");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_kl_arm_trains_against_its_frozen_sft_start() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("sage-experiment-kl-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let mut config = tiny(&dir, 1);
    config.experiment.arms = vec![Arm::SageKl];
    config.experiment.controls = false;
    config.rl.steps = 2;
    let mut reporter = Recorder::default();
    // Without a reference model the update refuses a KL term, and the run fails.
    run(&config, false, &mut reporter).unwrap();
    let sft = dir.join("sft-skills").join("model");
    assert!(
        reporter
            .lines
            .contains(&format!("sage-kl: KL reference {}", sft.display())),
        "{:?}",
        reporter.lines
    );

    // Every update scored its tokens under the reference. This tiny model earns the
    // same reward in every rollout, so no update moved the policy off the SFT model:
    // the KL estimate is exactly 0 (a reference other than the arm's start gives more).
    let log = fs::read_to_string(dir.join("seed-0/sage-kl/metrics/rl.jsonl")).unwrap();
    let rows: Vec<serde_json::Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "{log}");
    for row in &rows {
        assert_eq!(row["applied"].as_f64(), Some(0.0), "{log}");
        assert_eq!(row["ref_kl"].as_f64(), Some(0.0), "{log}");
    }
    fs::remove_dir_all(&dir).unwrap();
}

/// The final SFT loss that `dir/sft-MODE/finished.json` records.
fn sft_final_loss(dir: &Path, mode: &str) -> f64 {
    let path = dir.join(format!("sft-{mode}")).join("finished.json");
    let marker: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap();
    marker["result"]["final_loss"].as_f64().unwrap()
}

#[test]
fn an_experiment_with_init_fine_tunes_that_model_and_keeps_its_files() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("sage-experiment-init-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let mut first = tiny(&dir.join("first"), 1);
    first.experiment.arms = vec![Arm::SftOnly];
    run(&first, false, &mut Recorder::default()).unwrap();
    // The first run's SFT model, with a chat-template file of its own, is the init model.
    let init = dir.join("first").join("sft-skills").join("model");
    let template = r#"{"chat_template": "{# the init model's own #}", "model_max_length": 777}"#;
    fs::write(init.join("tokenizer_config.json"), template).unwrap();

    let second_dir = dir.join("second");
    let mut second = tiny(&second_dir, 1);
    second.experiment.arms = vec![Arm::SftOnly];
    second.experiment.init = init.display().to_string();
    let mut reporter = Recorder::default();
    run(&second, false, &mut reporter).unwrap();
    assert!(
        reporter
            .lines
            .contains(&format!("model and tokenizer: {}", init.display())),
        "{:?}",
        reporter.lines
    );
    // The same data, seed and recipe from a fresh model would repeat the first run's
    // loss exactly; from the trained model, the same epoch ends lower.
    let (fresh_loss, init_loss) = (
        sft_final_loss(&dir.join("first"), "skills"),
        sft_final_loss(&second_dir, "skills"),
    );
    assert!(init_loss < fresh_loss, "{init_loss} against {fresh_loss}");
    let kept = fs::read_to_string(
        second_dir
            .join("sft-skills")
            .join("model")
            .join("tokenizer_config.json"),
    )
    .unwrap();
    assert!(kept.contains("the init model's own"), "{kept}");

    // Resumed without the init model: refused, naming the setting.
    let mut without = second.clone();
    without.experiment.init = String::new();
    let error = run(&without, true, &mut Recorder::default())
        .unwrap_err()
        .to_string();
    assert!(error.contains("[experiment] init"), "{error}");
    fs::remove_dir_all(&dir).unwrap();
}

/// The `lr` of each step an SFT stage logged in `sft-NAME/metrics/sft.jsonl`.
fn sft_rates(dir: &Path, name: &str) -> Vec<f64> {
    let path = dir
        .join(format!("sft-{name}"))
        .join("metrics")
        .join("sft.jsonl");
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| {
            let row: serde_json::Value = serde_json::from_str(line).unwrap();
            row["lr"].as_f64().unwrap()
        })
        .collect()
}

#[test]
fn an_annealed_experiment_trains_on_from_each_sft_model_and_its_arms_start_there() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("sage-experiment-anneal-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let mut config = tiny(&dir, 1);
    config.experiment.arms = vec![Arm::SftOnly];
    config.experiment.anneal.epochs = 1;
    config.experiment.anneal.peak_lr = 1e-3;
    config.experiment.anneal.min_lr = 1e-4;
    config.experiment.anneal.warmup_steps = 0;
    let mut reporter = Recorder::default();
    run(&config, false, &mut reporter).unwrap();
    let stages: Vec<&String> = reporter
        .lines
        .iter()
        .filter(|l| l.starts_with("stage") && l.ends_with("trajectories"))
        .collect();
    assert_eq!(
        stages,
        [
            "stage sft on skills trajectories",
            "stage anneal of the sft on skills trajectories"
        ]
    );
    // Its own schedule: from the peak down to the floor (the main run's ends at its own
    // floor, ten times the anneal's peak in the tiny preset).
    let rates = sft_rates(&dir, "skills-annealed");
    let (first, last) = (rates[0], rates[rates.len() - 1]);
    assert!((first - 1e-3).abs() < 1e-9, "{rates:?}");
    assert!(last < first && last >= 1e-4 - 1e-9, "{rates:?}");
    assert_ne!(sft_rates(&dir, "skills")[0], first);
    // From the trained model: the anneal's epoch ends below the main SFT's first epoch.
    let (main_loss, annealed_loss) = (
        sft_final_loss(&dir, "skills"),
        sft_final_loss(&dir, "skills-annealed"),
    );
    assert!(
        annealed_loss < main_loss,
        "{annealed_loss} against {main_loss}"
    );

    // Arms start from the annealed model: with the main model's weights gone, a resumed
    // run adding an RL arm reuses both stages and still runs it.
    fs::remove_file(dir.join("sft-skills/model/model.safetensors")).unwrap();
    let mut with_sage = config.clone();
    with_sage.experiment.arms = vec![Arm::SftOnly, Arm::Sage];
    let mut resumed = Recorder::default();
    let runs = run(&with_sage, true, &mut resumed).unwrap();
    assert_eq!(runs.len(), 2);
    assert!(
        resumed
            .lines
            .iter()
            .any(|l| l.starts_with("anneal of the sft on skills trajectories: reused")),
        "{:?}",
        resumed.lines
    );

    // The anneal is part of the recipe: resumed without it, refused.
    let mut without = with_sage.clone();
    without.experiment.anneal.epochs = 0;
    let error = run(&without, true, &mut Recorder::default())
        .unwrap_err()
        .to_string();
    assert!(error.contains("[experiment.anneal] epochs = 1"), "{error}");

    // A warmup longer than the anneal: refused before it trains, naming both.
    let mut long_warmup = tiny(&dir.join("long-warmup"), 1);
    long_warmup.experiment.arms = vec![Arm::SftOnly];
    long_warmup.experiment.anneal.epochs = 1;
    long_warmup.experiment.anneal.warmup_steps = 100_000;
    let error = run(&long_warmup, false, &mut Recorder::default())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("[experiment.anneal] warmup_steps = 100000 is longer than the anneal's"),
        "{error}"
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_experiment_with_sft_per_seed_trains_each_seed_its_own_models_and_starts_its_arms_there() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("sage-experiment-per-seed-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let mut config = tiny(&dir.join("per-seed"), 2);
    config.experiment.arms = vec![Arm::SftOnly];
    config.experiment.sft_per_seed = true;
    config.experiment.anneal.epochs = 1;
    config.experiment.anneal.warmup_steps = 0;
    let mut reporter = Recorder::default();
    let runs = run(&config, false, &mut reporter).unwrap();
    assert_eq!(runs.len(), 2);
    let stages: Vec<&String> = reporter
        .lines
        .iter()
        .filter(|l| l.starts_with("stage") && l.contains("trajectories"))
        .collect();
    assert_eq!(
        stages,
        [
            "stage sft on skills trajectories (seed 0)",
            "stage anneal of the sft on skills trajectories (seed 0)",
            "stage sft on skills trajectories (seed 1)",
            "stage anneal of the sft on skills trajectories (seed 1)",
        ]
    );
    // Each seed's models just before its arms: seed 0 is whole before seed 1 trains.
    let position = |line: &str| reporter.lines.iter().position(|l| l == line).unwrap();
    assert!(
        position("stage seed 0: sft-only") < position("stage sft on skills trajectories (seed 1)")
    );
    let weights = |seed: u64, stage: &str| {
        fs::read(
            dir.join("per-seed")
                .join(format!("seed-{seed}/sft-{stage}/model/model.safetensors")),
        )
        .unwrap()
    };
    // The expert data is shared (in `sft-skills/data`), the models are not.
    assert!(!dir.join("per-seed/sft-skills/model").exists());
    // Another initialisation and batch order: another model.
    assert_ne!(weights(0, "skills"), weights(1, "skills"));
    // Seed 0's model is the shared model of the same recipe, to the bit on the CPU.
    let mut shared = config.clone();
    shared.run.dir = dir.join("shared");
    shared.experiment.seeds = 1;
    shared.experiment.sft_per_seed = false;
    shared.experiment.anneal.epochs = 0;
    run(&shared, false, &mut Recorder::default()).unwrap();
    assert_eq!(
        fs::read(dir.join("shared/sft-skills/model/model.safetensors")).unwrap(),
        weights(0, "skills")
    );

    // Each seed's arms start from that seed's annealed model: without seed 1's, a
    // resumed run adding an RL arm trains seed 0's and fails on seed 1's, naming it.
    let annealed = weights(1, "skills-annealed");
    fs::remove_file(dir.join("per-seed/seed-1/sft-skills-annealed/model/model.safetensors"))
        .unwrap();
    let mut with_sage = config.clone();
    with_sage.experiment.arms = vec![Arm::SftOnly, Arm::Sage];
    let mut resumed = Recorder::default();
    let error = run(&with_sage, true, &mut resumed).unwrap_err().to_string();
    assert!(error.contains("seed-1/sft-skills-annealed"), "{error}");
    assert!(dir.join("per-seed/seed-0/sage/run.json").is_file());
    assert!(
        resumed
            .lines
            .iter()
            .any(|l| l.starts_with("sft on skills trajectories (seed 1): reused")),
        "{:?}",
        resumed.lines
    );

    // Without seed 1's anneal at all, a resumed run trains it again from the expert
    // data the first run wrote (not written again), to the same weights on the CPU.
    let data = dir.join("per-seed/sft-skills/data/train.jsonl");
    let written_at = modified(&data);
    fs::remove_dir_all(dir.join("per-seed/seed-1/sft-skills-annealed")).unwrap();
    let mut again = Recorder::default();
    run(&with_sage, true, &mut again).unwrap();
    assert!(
        again
            .lines
            .contains(&"expert data on skills: reused from the run being resumed".to_owned()),
        "{:?}",
        again.lines
    );
    assert_eq!(modified(&data), written_at);
    assert_eq!(weights(1, "skills-annealed"), annealed);
    assert!(dir.join("per-seed/seed-1/sage/run.json").is_file());

    // Whether each seed has its own models is part of the recipe: refused otherwise.
    let mut shared_now = config.clone();
    shared_now.experiment.sft_per_seed = false;
    let error = run(&shared_now, true, &mut Recorder::default())
        .unwrap_err()
        .to_string();
    assert!(error.contains("sft_per_seed = true"), "{error}");
    fs::remove_dir_all(&dir).unwrap();
}

/// The rows of the JSON-lines file at `path`.
fn jsonl_rows(path: &Path) -> Vec<serde_json::Value> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The rows of `sft-NAME/metrics/sft.jsonl` under `dir`.
fn sft_rows(dir: &Path, name: &str) -> Vec<serde_json::Value> {
    jsonl_rows(&dir.join(format!("sft-{name}/metrics/sft.jsonl")))
}

#[test]
fn equal_sft_steps_trains_every_model_for_the_largest_modes_steps_and_leaves_that_mode_as_it_was() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("sage-experiment-equal-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let mut config = tiny(&dir.join("equal"), 1);
    config.experiment.arms = vec![Arm::SftOnly, Arm::SftDirect];
    config.experiment.equal_sft_steps = true;
    config.experiment.anneal.epochs = 1;
    config.experiment.anneal.warmup_steps = 0;
    let mut reporter = Recorder::default();
    run(&config, false, &mut reporter).unwrap();
    let line = reporter
        .lines
        .iter()
        .find(|l| l.starts_with("equal SFT steps: "))
        .unwrap_or_else(|| panic!("{:?}", reporter.lines));
    let per_epoch = |mode: &str| -> usize {
        let at = line.find(&format!("{mode}: ")).unwrap() + mode.len() + 2;
        line[at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (skills, direct) = (per_epoch("skills"), per_epoch("direct"));
    // Plain code writes out what a skill call names: more batches per epoch.
    assert!(direct > skills, "{line}");
    assert_eq!(
        line,
        &format!(
            "equal SFT steps: {direct} per model, {direct} per anneal (batches per epoch: \
             skills: {skills}, direct: {direct})"
        )
    );
    // Each mode's arms run as soon as its models are saved, before the next mode trains.
    let position = |line: &str| reporter.lines.iter().position(|l| l == line).unwrap();
    assert!(position("stage seed 0: sft-only") < position("stage sft on direct trajectories"));
    let equal = dir.join("equal");
    for stage in ["skills", "direct", "skills-annealed", "direct-annealed"] {
        assert_eq!(sft_rows(&equal, stage).len(), direct, "{stage}");
    }
    // The skill model takes its steps into a second pass over its data.
    let last_epoch = sft_rows(&equal, "skills").last().unwrap()["epoch"].clone();
    assert_eq!(last_epoch, serde_json::json!(1));

    // The mode with the most data trains as it would without the setting, to the bit.
    let mut unequal = config.clone();
    unequal.run.dir = dir.join("unequal");
    unequal.experiment.equal_sft_steps = false;
    run(&unequal, false, &mut Recorder::default()).unwrap();
    let weights = |run: &str, stage: &str| {
        fs::read(
            dir.join(run)
                .join(format!("sft-{stage}/model/model.safetensors")),
        )
        .unwrap()
    };
    assert!(weights("equal", "direct-annealed") == weights("unequal", "direct-annealed"));
    assert!(weights("equal", "skills") != weights("unequal", "skills"));
    assert_eq!(sft_rows(&dir.join("unequal"), "skills").len(), skills);

    // The steps do not depend on the arms: a run of the skill arms alone sizes them the same.
    let mut skill_arms = config.clone();
    skill_arms.run.dir = dir.join("skill-arms");
    skill_arms.experiment.arms = vec![Arm::SftOnly];
    run(&skill_arms, false, &mut Recorder::default()).unwrap();
    assert!(weights("skill-arms", "skills-annealed") == weights("equal", "skills-annealed"));
    // Nor does the tokenizer: the plain-code arms alone train the same plain-code model.
    let mut direct_arms = config.clone();
    direct_arms.run.dir = dir.join("direct-arms");
    direct_arms.experiment.arms = vec![Arm::SftDirect];
    run(&direct_arms, false, &mut Recorder::default()).unwrap();
    let tokenizer = |run: &str| fs::read(dir.join(run).join("tokenizer.json")).unwrap();
    assert!(tokenizer("direct-arms") == tokenizer("equal"));
    assert!(weights("direct-arms", "direct-annealed") == weights("equal", "direct-annealed"));

    // Part of the recipe: a resumed run without it is refused, naming it.
    let mut without = config.clone();
    without.experiment.equal_sft_steps = false;
    let error = run(&without, true, &mut Recorder::default())
        .unwrap_err()
        .to_string();
    assert!(error.contains("equal_sft_steps = true"), "{error}");

    // It sizes `[sft] steps` itself: both set is refused before anything runs.
    let mut both = tiny(&dir.join("both"), 1);
    both.experiment.equal_sft_steps = true;
    both.sft.steps = 5;
    let error = run(&both, false, &mut Recorder::default())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("leave [sft] steps at 0 (it is 5)"),
        "{error}"
    );
    assert!(!dir.join("both").exists());
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_arms_row_does_not_depend_on_the_arms_run_beside_it() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("sage-experiment-alone-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let mut beside = tiny(&dir.join("beside"), 1);
    beside.experiment.arms = vec![Arm::SftOnly, Arm::GrpoNoSkills];
    let mut alone = beside.clone();
    alone.run.dir = dir.join("alone");
    alone.experiment.arms = vec![Arm::GrpoNoSkills];
    let with_skill_arm = run(&beside, false, &mut Recorder::default()).unwrap();
    let by_itself = run(&alone, false, &mut Recorder::default()).unwrap();
    // `sage tables` puts rows of separate runs in one table: an arm run alone must give
    // the row it gives in the whole experiment (its wall-clock seconds aside).
    let row = |runs: &[ArmRun]| {
        let run = runs.iter().find(|r| r.arm == "grpo-no-skills").unwrap();
        serde_json::to_string(&(&run.metrics, &run.control)).unwrap()
    };
    assert_eq!(row(&by_itself), row(&with_skill_arm));
    // The tiny model's row may be all zeros either way; its RL log (entropies, tokens
    // generated, losses) tells models apart, throughputs aside.
    let rl_log = |run: &str| {
        let mut rows = jsonl_rows(&dir.join(run).join("seed-0/grpo-no-skills/metrics/rl.jsonl"));
        for row in &mut rows {
            let fields = row.as_object_mut().unwrap();
            fields.retain(|name, _| !name.ends_with("_per_s"));
        }
        rows
    };
    assert!(!rl_log("alone").is_empty());
    assert_eq!(rl_log("alone"), rl_log("beside"));
    // Each row carries digests of its tokenizer and SFT data: the plain-code row's are
    // the same alone and beside the skill arm, whose data differs and tokenizer does not.
    let inputs = |runs: &[ArmRun], arm: &str| {
        let run = runs.iter().find(|r| r.arm == arm).unwrap();
        run.inputs.clone().expect("a row with its inputs")
    };
    let plain = inputs(&by_itself, "grpo-no-skills");
    assert_eq!(plain, inputs(&with_skill_arm, "grpo-no-skills"));
    assert_eq!(plain.sft_mode, "direct");
    let skill = inputs(&with_skill_arm, "sft-only");
    assert_eq!(
        (skill.sft_mode.as_str(), &skill.tokenizer),
        ("skills", &plain.tokenizer)
    );
    assert!(skill.sft_data.is_some() && skill.sft_data != plain.sft_data);
    // So `sage tables` joins the two runs without a warning, and warns of a run that
    // trained another tokenizer.
    let mut other = alone.clone();
    other.run.dir = dir.join("other");
    other.tokenizer.vocab_size -= 32;
    let other_tokenizer = run(&other, false, &mut Recorder::default()).unwrap();
    let join = |second: &[ArmRun]| {
        let files = [
            (dir.join("beside.json"), with_skill_arm.clone()),
            (dir.join("second.json"), second.to_vec()),
        ];
        merge_runs(&files, None).unwrap().mismatches
    };
    assert_eq!(join(&by_itself), Vec::<String>::new());
    let warned = join(&other_tokenizer);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].starts_with("warning: the rows were trained with 2 tokenizers")
            && warned[0].contains("beside.json: 1 row")
            && warned[0].contains("second.json: 1 row"),
        "{warned:?}"
    );
    fs::remove_dir_all(&dir).unwrap();
}
