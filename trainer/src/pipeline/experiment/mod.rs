//! Runs the paper-style experiment that [`crate::experiment`] configures: the SFT
//! models every arm starts from, then per seed each arm's RL (beside its update-off
//! control) and evaluation, written to the run directory with a table, the gains over
//! the controls and the SFT starts, and plots.
//!
//! An experiment takes hours at full scale on a CPU; `sage experiment --resume` picks
//! an interrupted one up after the last SFT model or arm it finished, or from the last
//! checkpoint of the SFT it was running.
use std::fs;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use sage_envs::expert::ExpertMode;
use sage_transformer::Kernels;

use crate::chat::ChatTemplate;
use crate::config::RunConfig;
use crate::eval::EvalMetrics;
use crate::experiment::Arm;
use crate::metrics::{MetricsLog, Series};
use crate::pipeline::{
    failed, load_sft_data, prepare_data, run_eval, run_rl, start_lora, train_tokenizer,
    warn_turn_limits, DataFiles, PipelineError, Reporter, RlInputs,
};
use crate::policy::TransformerPolicy;
use crate::rl::{control_gap, ControlGap, RlConfig, RlState, RlStepStats, RlTrainer, WorldRl};
use crate::sft::{SftData, SftState, SftTrainer};
use crate::tokenizer::Tokenizer;
use crate::weights::{load_model, read_config, CONFIG_FILE};

mod equal_steps;
mod inputs;
mod merge;
mod plots;
mod resume;
mod sft;
mod tables;

use equal_steps::EqualSteps;
pub use inputs::{input_mismatches, ArmInputs};
pub use merge::{merge_runs, read_experiment_json, MergedRuns, Replacement};
use plots::plot_rewards;
use resume::{FinishedArm, RunRecord};
use sft::{sft, SftDirs};
pub use tables::{
    claim_table, experiment_table, experiment_tables, gain_table, mean_std, template_table,
};

/// One arm trained and evaluated under one seed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ArmRun {
    /// The arm's name.
    pub arm: String,
    /// The seed.
    pub seed: u64,
    /// Its evaluation, one row per split (and retrieval mode).
    pub metrics: Vec<EvalMetrics>,
    /// Seconds of its RL stage (0 without RL).
    pub rl_seconds: f64,
    /// Its sampled success and mean reward (over chain positions) against its
    /// update-off control's, when the arm trains and controls are on.
    #[serde(default)]
    pub control: Option<ArmControl>,
    /// Digests of its tokenizer and SFT data, which `sage tables` compares across the
    /// rows it joins; `None` on rows written before rows kept them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<ArmInputs>,
}

/// An RL arm against its update-off control under the same seed.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArmControl {
    /// Sampled task success (a share) over the last third of the steps.
    pub success: ControlGap,
    /// Mean reward over the same steps.
    pub reward: ControlGap,
    /// Share of the chains' first tasks that wrote a skill, over the same steps.
    pub skill_writing: ControlGap,
}

/// Runs every configured arm under every seed in `config.run.dir`, printing the table
/// through `reporter` and writing `experiment.json`, `experiment.md` and
/// `plots/experiment_reward.png` there. Every model in turn lives on the backend `k`;
/// `another_backend` opens a second instance for the frozen reference model of the
/// `sage-kl` arm.
///
/// With `resume`, the SFT models and arms that an interrupted run in the same
/// directory finished are reused rather than trained again, provided its settings
/// equal `config`'s but for seeds, arms, `[eval]` and `[rl]` (an arm that ran under
/// another `[eval]` or `[rl]` runs again; see the `resume` module's docs); otherwise the run
/// starts afresh and what an earlier run left in the directory is not reused.
pub fn run_experiment<K: Kernels>(
    mut k: K,
    another_backend: &dyn Fn() -> Result<K, PipelineError>,
    config: &RunConfig,
    resume: bool,
    reporter: &mut dyn Reporter,
) -> Result<Vec<ArmRun>, PipelineError> {
    config
        .experiment
        .validate()
        .map_err(|message| PipelineError::new("config", format!("[experiment]: {message}")))?;
    if config.experiment.equal_sft_steps && config.sft.steps != 0 {
        return Err(PipelineError::new(
            "config",
            format!(
                "[experiment] equal_sft_steps sizes every SFT model's steps itself: leave \
                 [sft] steps at 0 (it is {})",
                config.sft.steps
            ),
        ));
    }
    let arms = &config.experiment.arms;
    let dir = &config.run.dir;
    let init = config.experiment.init_dir();
    if let Some(dir) = init.filter(|dir| !dir.join(CONFIG_FILE).is_file()) {
        return Err(PipelineError::new(
            "config",
            format!(
                "[experiment] init {} is not a model directory (no {CONFIG_FILE} there)",
                dir.display()
            ),
        ));
    }
    let record = RunRecord::open(config, resume)?;
    let skill_data = config.experiment.skill_data;
    let modes: Vec<ExpertMode> = [skill_data, ExpertMode::Direct]
        .into_iter()
        .filter(|&mode| arms.iter().any(|a| a.sft_mode(skill_data) == mode))
        .collect();
    // Each mode's expert data, prepared when a stage needs it and kept for the next.
    let mut data: Vec<(ExpertMode, DataFiles)> = Vec::new();
    let mut prepare =
        |mode: ExpertMode, reporter: &mut dyn Reporter| -> Result<DataFiles, PipelineError> {
            if let Some((_, files)) = data.iter().find(|(m, _)| *m == mode) {
                return Ok(files.clone());
            }
            let stage = format!("sft-{mode}");
            let written = DataFiles::in_dir(&dir.join(&stage));
            // A copy of the run without its data (scripts/gpu_experiment.sh makes them)
            // keeps the marker: the files must be there too.
            let whole = written.train.is_file() && written.dev.is_file();
            let files = if whole && record.finished_data(&stage)? {
                reporter.info(&format!(
                    "expert data on {mode}: reused from the run being resumed"
                ));
                written
            } else {
                let data_config = crate::data::ExpertDataConfig {
                    mode,
                    ..config.data.clone()
                };
                let files = prepare_data(&data_config, &dir.join(&stage), reporter)?;
                record.mark_data_finished(&stage)?;
                files
            };
            data.push((mode, files.clone()));
            Ok(files)
        };
    if modes.is_empty() {
        return Err(PipelineError::new("experiment", "no arm to run".to_owned()));
    }
    // A resumed run keeps the tokenizer its SFT models were trained with.
    let tokenizer = match record.finished_tokenizer()? {
        Some(tokenizer) => {
            reporter.info("tokenizer: reused from the run being resumed");
            tokenizer
        }
        None => {
            let tokenizer = match init {
                Some(init) => {
                    let tokenizer = Tokenizer::from_dir(init).map_err(failed("init"))?;
                    fs::create_dir_all(dir).map_err(failed("init"))?;
                    tokenizer.save_to_dir(dir).map_err(failed("init"))?;
                    reporter.info(&format!("model and tokenizer: {}", init.display()));
                    tokenizer
                }
                // Always from the skill data, whichever arms run: a run of the
                // plain-code arms alone then trains the models a whole experiment does.
                None => {
                    let files = prepare(skill_data, reporter)?;
                    train_tokenizer(&config.tokenizer, &files.train, dir, reporter)?
                }
            };
            record.mark_tokenizer_finished()?;
            tokenizer
        }
    };
    let max_len = match init {
        Some(init) => {
            read_config(&init.join(CONFIG_FILE))
                .map_err(failed("init"))?
                .max_position_embeddings
        }
        None => config.model.max_position_embeddings,
    };
    let template = ChatTemplate::new(&tokenizer)
        .map_err(failed("tokenizer"))?
        .with_max_len(max_len);
    let seeds = match config.experiment.only_seed {
        Some(seed) => seed..seed + 1,
        None => 0..config.experiment.seeds,
    };
    // Each mode's SFT models, then the arms that start from them, before the next mode's
    // models train: one shared model per mode before every seed's arms, or
    // (`sft_per_seed`) each seed's own models just before its arms, so that a long run
    // finishes whole arms and seeds as it goes.
    let rounds: Vec<(Option<u64>, Range<u64>)> = if config.experiment.sft_per_seed {
        seeds.map(|seed| (Some(seed), seed..seed + 1)).collect()
    } else {
        vec![(None, seeds)]
    };
    let mut warned = Vec::new();
    // Under `equal_sft_steps`, sized from every mode's data when a stage first needs it.
    let mut equal_steps: Option<EqualSteps> = None;
    let mut runs = Vec::new();
    let shared = ArmsShared {
        config,
        another_backend,
        record: &record,
        tokenizer: &tokenizer,
    };
    for (sft_seed, arm_seeds) in rounds {
        for &mode in &modes {
            // The stages this run has not finished; their data is loaded once for all.
            let mut pending = Vec::new();
            for stage in sft_stages(config, dir, mode, sft_seed) {
                match record.finished_sft(&stage.dir)? {
                    Some(done) => reporter.info(&format!(
                        "{}: reused from the run being resumed (final loss {:.4})",
                        stage.title, done.final_loss
                    )),
                    None => pending.push(stage),
                }
            }
            if !pending.is_empty() {
                let files = prepare(mode, reporter)?;
                let train = load_sft_data(&files.train, &template, reporter)?;
                let dev = load_sft_data(&files.dev, &template, reporter)?;
                if !warned.contains(&mode) {
                    warn_turn_limits(&train, &config.eval, Some(&config.rl));
                    warned.push(mode);
                }
                if config.experiment.equal_sft_steps && equal_steps.is_none() {
                    let mut load = |other: ExpertMode| {
                        let files = prepare(other, reporter)?;
                        load_sft_data(&files.train, &template, reporter)
                    };
                    let (steps, line) = EqualSteps::size(config, (mode, &train), &mut load)?;
                    reporter.info(&line);
                    equal_steps = Some(steps);
                }
                for mut stage in pending {
                    if let Some(steps) = equal_steps {
                        stage.config.sft.steps = match stage.annealing {
                            true => steps.anneal,
                            false => steps.sft,
                        };
                    }
                    if stage.annealing {
                        check_anneal_length(&stage.config, &train)?;
                    }
                    reporter.stage(&stage.title);
                    let stage_dir = dir.join(&stage.dir);
                    let checkpoints = record.sft_checkpoints(&stage.dir)?;
                    let dirs = SftDirs {
                        stage: &stage_dir,
                        checkpoints: &checkpoints,
                    };
                    let (backend, done) =
                        sft(k, &stage.config, &tokenizer, (&train, &dev), dirs, reporter)?;
                    k = backend;
                    record.mark_sft_finished(&stage.dir, done)?;
                    record.remove_sft_checkpoints(&stage.dir)?;
                }
            }
            // The arms that start from this mode's models, before the next mode trains.
            k = run_arms_of_mode(
                k,
                &shared,
                mode,
                sft_seed,
                arm_seeds.clone(),
                &mut runs,
                reporter,
            )?;
        }
    }
    // In the order of the seeds, then of `[experiment] arms`.
    runs.sort_by_key(|run| (run.seed, arms.iter().position(|arm| arm.name() == run.arm)));
    let (printed, table) = experiment_tables(&runs, arms, !config.experiment.sft_per_seed);
    reporter.result(&printed);
    write_experiment_files(dir, &runs, &table)?;
    plot_rewards(dir, arms, reporter)?;
    Ok(runs)
}

/// Writes `runs` as `dir/experiment.json` and `table` (the tables, templates included)
/// as `dir/experiment.md`.
pub fn write_experiment_files(
    dir: &Path,
    runs: &[ArmRun],
    table: &str,
) -> Result<(), PipelineError> {
    let write = |path: PathBuf, text: String| {
        fs::write(&path, text)
            .map_err(|e| PipelineError::new("experiment", format!("{}: {e}", path.display())))
    };
    let json = serde_json::to_string_pretty(runs).map_err(failed("experiment"))?;
    write(dir.join("experiment.json"), json)?;
    write(dir.join("experiment.md"), format!("```\n{table}```\n"))
}

/// One SFT stage of an experiment: its directory in the run directory (`sft-NAME/`,
/// or `seed-S/sft-NAME/` for a seed's own model), what the log calls it, and its
/// settings.
struct SftStage {
    dir: String,
    title: String,
    config: RunConfig,
    /// Whether it is the anneal of another stage's model.
    annealing: bool,
}

/// Refuses an anneal stage (`annealing`, its settings) whose `[experiment.anneal]`
/// warmup is longer than the anneal itself on `train`, naming both.
fn check_anneal_length(annealing: &RunConfig, train: &SftData) -> Result<(), PipelineError> {
    let anneal = &annealing.experiment.anneal;
    let steps = SftTrainer::new(annealing.sft.clone(), train, SftState::default()).total_steps();
    if anneal.warmup_steps > steps {
        let sized_by = match annealing.sft.steps {
            0 => format!("{} epochs of this data", anneal.epochs),
            _ => "as [experiment] equal_sft_steps sizes it".to_owned(),
        };
        return Err(PipelineError::new(
            "config",
            format!(
                "[experiment.anneal] warmup_steps = {} is longer than the anneal's {steps} \
                 steps ({sized_by})",
                anneal.warmup_steps
            ),
        ));
    }
    Ok(())
}

/// The directory, in the run directory, of the SFT stage on `mode` data or of its
/// anneal: shared by every seed, or under `seed-S/` for seed S's own model.
fn sft_stage_dir(mode: ExpertMode, annealed: bool, seed: Option<u64>) -> String {
    let seed_dir = seed.map(|seed| format!("seed-{seed}/")).unwrap_or_default();
    let anneal = if annealed { "-annealed" } else { "" };
    format!("{seed_dir}sft-{mode}{anneal}")
}

/// The SFT stages on `mode` data: the model of the run's `[sft]`, then, with
/// `[experiment.anneal]` on, its anneal, which starts from that model's directory
/// with the anneal's epochs and schedule. For `seed` S's own models the model's
/// `[run] seed` and the batch order's `[sft] seed` are the run's plus S.
fn sft_stages(
    config: &RunConfig,
    dir: &Path,
    mode: ExpertMode,
    seed: Option<u64>,
) -> Vec<SftStage> {
    let mut seeded = config.clone();
    let mut of_seed = String::new();
    if let Some(seed) = seed {
        seeded.run.seed = config.run.seed.wrapping_add(seed);
        seeded.sft.seed = config.sft.seed.wrapping_add(seed);
        of_seed = format!(" (seed {seed})");
    }
    let main = SftStage {
        dir: sft_stage_dir(mode, false, seed),
        title: format!("sft on {mode} trajectories{of_seed}"),
        config: seeded.clone(),
        annealing: false,
    };
    let anneal = &config.experiment.anneal;
    if anneal.epochs == 0 {
        return vec![main];
    }
    let mut annealing = seeded;
    annealing.sft.epochs = anneal.epochs;
    annealing.optimizer.schedule = anneal.schedule();
    annealing.experiment.init = dir
        .join(&main.dir)
        .join("model")
        .to_string_lossy()
        .into_owned();
    let stage = SftStage {
        dir: sft_stage_dir(mode, true, seed),
        title: format!("anneal of the sft on {mode} trajectories{of_seed}"),
        config: annealing,
        annealing: true,
    };
    vec![main, stage]
}

/// What every arm of a run shares.
struct ArmsShared<'a, K> {
    config: &'a RunConfig,
    /// Opens a second backend, for the `sage-kl` arm's frozen reference.
    another_backend: &'a dyn Fn() -> Result<K, PipelineError>,
    record: &'a RunRecord,
    tokenizer: &'a Tokenizer,
}

/// Runs, under each of `seeds`, every configured arm that starts from `mode`'s SFT model
/// (seed `sft_seed`'s own, or the shared one), or reuses what the run being resumed
/// finished under today's settings; appends each result to `runs` and returns the
/// backend.
fn run_arms_of_mode<K: Kernels>(
    mut k: K,
    shared: &ArmsShared<'_, K>,
    mode: ExpertMode,
    sft_seed: Option<u64>,
    seeds: Range<u64>,
    runs: &mut Vec<ArmRun>,
    reporter: &mut dyn Reporter,
) -> Result<K, PipelineError> {
    let config = shared.config;
    let skill_data = config.experiment.skill_data;
    let annealed = config.experiment.anneal.epochs > 0;
    let sft_dir = config
        .run
        .dir
        .join(sft_stage_dir(mode, annealed, sft_seed))
        .join("model");
    let data = DataFiles::in_dir(&config.run.dir.join(format!("sft-{mode}")));
    let inputs = ArmInputs::of(shared.tokenizer, &mode.to_string(), &data.train)?;
    for seed in seeds {
        let mut seeded = config.clone();
        seeded.rl.seed = config.rl.seed.wrapping_add(seed);
        seeded.eval.seed = config.eval.seed.wrapping_add(seed);
        let seed_dir = config.run.dir.join(format!("seed-{seed}"));
        let arms = config.experiment.arms.iter();
        for &arm in arms.filter(|arm| arm.sft_mode(skill_data) == mode) {
            match shared.record.finished_arm(&seed_dir, arm)? {
                FinishedArm::Reusable(run) => {
                    let mut run = *run;
                    reporter.info(&format!(
                        "seed {seed}: {}: reused from the run being resumed",
                        arm.name()
                    ));
                    // Its marker is this run's, so its inputs are today's.
                    run.inputs.get_or_insert_with(|| inputs.clone());
                    runs.push(run);
                    continue;
                }
                FinishedArm::OtherSettings(found) => reporter.info(&format!(
                    "seed {seed}: {}: ran with `{}`, not `{}`, so run again",
                    arm.name(),
                    found.was,
                    found.now
                )),
                FinishedArm::NotRun => {}
            }
            reporter.stage(&format!("seed {seed}: {}", arm.name()));
            let paths = ArmPaths {
                sft_dir: &sft_dir,
                seed_dir: &seed_dir,
            };
            let (mut run, backend) = run_arm(
                k,
                shared.another_backend,
                &seeded,
                arm,
                seed,
                shared.tokenizer,
                paths,
                reporter,
            )?;
            k = backend;
            run.inputs = Some(inputs.clone());
            shared.record.mark_arm_finished(&seed_dir, &run)?;
            runs.push(run);
        }
    }
    Ok(k)
}

/// Where an arm starts and writes.
#[derive(Clone, Copy)]
struct ArmPaths<'a> {
    /// The SFT model the arm starts from (and its KL reference).
    sft_dir: &'a Path,
    /// The seed's directory, which holds one directory per arm.
    seed_dir: &'a Path,
}

/// Trains (when the arm has RL) and evaluates one arm under `seed` from the SFT model in
/// `paths.sft_dir`; returns its run and the backend, emptied.
#[allow(clippy::too_many_arguments)]
fn run_arm<K: Kernels>(
    mut k: K,
    another_backend: &dyn Fn() -> Result<K, PipelineError>,
    config: &RunConfig,
    arm: Arm,
    seed: u64,
    tokenizer: &Tokenizer,
    paths: ArmPaths<'_>,
    reporter: &mut dyn Reporter,
) -> Result<(ArmRun, K), PipelineError> {
    let ArmPaths { sft_dir, seed_dir } = paths;
    let mut model = load_model(&mut k, sft_dir).map_err(failed("experiment"))?;
    let arm_dir = seed_dir.join(arm.name());
    let mut rl_seconds = 0.0;
    let mut control = None;
    let mut policy = match arm.rl_config(&config.rl) {
        None => TransformerPolicy::inference(k, model).with_held_tokens(config.run.held_kv_tokens),
        Some(rl) => {
            start_lora(&mut k, &mut model, &rl.lora, "rl.lora", rl.seed, reporter)?;
            let optimizer = rl.optimizer(&config.optimizer);
            let mut policy = TransformerPolicy::trainable(k, model, optimizer)
                .map_err(failed("model"))?
                .with_held_tokens(config.run.held_kv_tokens);
            let mut reference = if rl.grpo.kl_coef > 0.0 {
                reporter.info(&format!(
                    "{}: KL reference {}",
                    arm.name(),
                    sft_dir.display()
                ));
                let mut k_ref = another_backend()?;
                let model = load_model(&mut k_ref, sft_dir).map_err(failed("reference"))?;
                Some(
                    TransformerPolicy::inference(k_ref, model)
                        .with_max_batch_tokens(config.run.max_batch_tokens),
                )
            } else {
                None
            };
            let started = std::time::Instant::now();
            let world = WorldRl::new(&rl, config.data.prompt_rules).map_err(failed("world"))?;
            let template = ChatTemplate::new(tokenizer)
                .map_err(failed("tokenizer"))?
                .with_max_len(rl.rollout.max_episode_tokens);
            // The control first: it leaves the weights and the optimizer as they were.
            let control_curves = if config.experiment.controls {
                let control_rl = RlConfig {
                    apply_updates: false,
                    ..rl.clone()
                };
                let dir = seed_dir.join(format!("{}-control", arm.name()));
                let inputs = RlInputs {
                    world: &world,
                    template: &template,
                    label: &format!("{} control", arm.name()),
                };
                Some(rl_curves(
                    &mut policy,
                    reference.as_mut(),
                    control_rl,
                    inputs,
                    &dir.join("metrics"),
                    reporter,
                )?)
            } else {
                None
            };
            let inputs = RlInputs {
                world: &world,
                template: &template,
                label: arm.name(),
            };
            let curves = rl_curves(
                &mut policy,
                reference.as_mut(),
                rl,
                inputs,
                &arm_dir.join("metrics"),
                reporter,
            )?;
            if let Some(controls) = control_curves {
                let gap = |i: usize| control_gap(&curves[i], &controls[i]);
                control = match (gap(0), gap(1), gap(2)) {
                    (Some(success), Some(reward), Some(skill_writing)) => Some(ArmControl {
                        success,
                        reward,
                        skill_writing,
                    }),
                    _ => None,
                };
            }
            rl_seconds = started.elapsed().as_secs_f64();
            policy
        }
    };
    let template = ChatTemplate::new(tokenizer).map_err(failed("tokenizer"))?;
    let reports = run_eval(
        &mut policy,
        &arm.eval_config(&config.eval),
        config.data.prompt_rules,
        &template,
        None,
        Some(&arm_dir.join("eval.json")),
        reporter,
    )?;
    let run = ArmRun {
        arm: arm.name().to_owned(),
        seed,
        metrics: reports.into_iter().map(|r| r.metrics).collect(),
        rl_seconds,
        control,
        inputs: None,
    };
    Ok((run, policy.into_backend().map_err(failed("experiment"))?))
}

/// Runs every step of `rl` on `policy` (with `reference`, the frozen policy of a KL
/// term), logging to `metrics_dir/rl.{jsonl,csv}`; returns the curves of the sampled
/// success and the mean reward (each averaged over chain positions) and of the first
/// tasks' skill writing, per step.
fn rl_curves<K: Kernels>(
    policy: &mut TransformerPolicy<K>,
    reference: Option<&mut TransformerPolicy<K>>,
    rl: RlConfig,
    inputs: RlInputs<'_>,
    metrics_dir: &Path,
    reporter: &mut dyn Reporter,
) -> Result<[Series; 3], PipelineError> {
    let mut trainer = RlTrainer::new(rl, inputs.world.chains.clone(), RlState::default())
        .map_err(failed("rl"))?;
    let mut metrics = MetricsLog::create(metrics_dir, "rl").map_err(failed("metrics"))?;
    let series = |name: &str| Series {
        name: name.to_owned(),
        points: Vec::new(),
    };
    let mut curves = [
        series("success_all"),
        series("reward_all"),
        series("skill_writing_1"),
    ];
    let mut record = |_: &mut TransformerPolicy<K>, stats: &RlStepStats, _: &RlTrainer, _last| {
        let mean = |v: &[f32]| v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len().max(1) as f64;
        let step = stats.step as f64;
        curves[0].points.push((step, mean(&stats.success)));
        curves[1].points.push((step, mean(&stats.reward_mean)));
        let writing = stats.skill_writing.first().copied().unwrap_or(0.0);
        curves[2].points.push((step, f64::from(writing)));
        Ok(())
    };
    run_rl(
        policy,
        reference,
        &mut trainer,
        inputs,
        &mut metrics,
        reporter,
        &mut record,
    )?;
    Ok(curves)
}
