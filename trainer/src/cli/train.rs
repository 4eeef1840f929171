//! `sage train`: SAGE reinforcement learning on the built-in world, from an SFT
//! checkpoint, resumable, with per-step health metrics, curves and a final evaluation.
//!
//! Everything goes under `RUN_DIR/rl/`: `checkpoints/step-NNNNNN/` (the model, tokenizer,
//! optimizer and the [`RlState`]), `metrics/rl.{jsonl,csv}`, `plots/rl_reward.png` and
//! `eval.json`. The update-off control (`[rl] apply_updates = false`, `--control`) writes
//! the same files under `RUN_DIR/rl-control/`; once both exist, the run's success and
//! reward against its control go to `RUN_DIR/rl/plots/rl_vs_control.png` and the log.

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sage_envs::scenarios::Split;
use sage_trainer::chat::ChatTemplate;
use sage_trainer::checkpoint::{self, CheckpointParts};
use sage_trainer::config::RunConfig;
use sage_trainer::interrupt;
use sage_trainer::metrics::{read_series, KeepRows, LineChart, MetricsError, MetricsLog};
use sage_trainer::pipeline::{
    check_resumed_lora, failed, run_eval, run_rl, start_lora, write_chart, PipelineError, Reporter,
    RlInputs,
};
use sage_trainer::policy::TransformerPolicy;
use sage_trainer::rl::{control_gap, RlState, RlStepStats, RlTrainer, WorldRl};
use sage_trainer::settings::{self, StageRecord};
use sage_trainer::tokenizer::Tokenizer;
use sage_trainer::weights::load_model;
use sage_transformer::Kernels;

use super::commands::{chosen_or_latest, refuse_changed_settings, settings_error};
use super::progress::BarReporter;

/// Inputs of `sage train` beyond the configuration.
pub(super) struct TrainSources {
    /// The SFT checkpoint or model directory to start from.
    pub init: Option<PathBuf>,
    /// Continue the latest RL checkpoint.
    pub resume: bool,
}

/// `RUN_DIR/rl`, or `RUN_DIR/rl-control` for the update-off control.
fn rl_dir(config: &RunConfig) -> PathBuf {
    config.run.dir.join(rl_dir_name(config.rl.apply_updates))
}

/// The directory name of a run (`rl`) or of its update-off control (`rl-control`).
fn rl_dir_name(apply_updates: bool) -> &'static str {
    if apply_updates {
        "rl"
    } else {
        "rl-control"
    }
}

/// `sage train`. `another_backend` opens a second instance of the backend, for the
/// frozen reference policy of a KL term (`[rl.grpo] kl_coef > 0`).
pub(super) fn train<K: Kernels>(
    mut k: K,
    another_backend: impl FnOnce() -> Result<K, PipelineError>,
    config: &RunConfig,
    sources: &TrainSources,
) -> Result<(), PipelineError> {
    let rl = &config.rl;
    let mut reporter = BarReporter::default();
    check_settings(config, sources.resume)?;
    let checkpoints = rl_dir(config).join("checkpoints");
    let optimizer_config = rl.optimizer(&config.optimizer);
    let (model, tokenizer, optimizer, state, source) = if sources.resume {
        let checkpoint = checkpoint::load_latest::<K, RlState>(
            &mut k,
            &checkpoints,
            Some(optimizer_config.clone()),
        )
        .map_err(failed("resume"))?
        .ok_or_else(|| {
            PipelineError::new(
                "resume",
                format!("no RL checkpoint in {}", checkpoints.display()),
            )
        })?;
        reporter.info(&format!("resuming from {}", checkpoint.dir.display()));
        check_resumed_lora(&checkpoint.model, &rl.lora, "rl.lora")?;
        (
            checkpoint.model,
            checkpoint.tokenizer,
            checkpoint.optimizer,
            checkpoint.state,
            checkpoint.dir,
        )
    } else {
        let init = init_dir(config, sources.init.as_deref())?;
        reporter.info(&format!("starting from {}", init.display()));
        let tokenizer = Tokenizer::from_dir(&init).map_err(failed("init"))?;
        let mut model = load_model(&mut k, &init).map_err(failed("init"))?;
        start_lora(
            &mut k,
            &mut model,
            &rl.lora,
            "rl.lora",
            rl.seed,
            &mut reporter,
        )?;
        (model, tokenizer, None, RlState::default(), init)
    };
    let carried = checkpoint::CarriedFiles::read(&source).map_err(failed("init"))?;
    let policy = match optimizer {
        Some(optimizer) => TransformerPolicy::with_optimizer(k, model, optimizer),
        None => {
            TransformerPolicy::trainable(k, model, optimizer_config).map_err(failed("model"))?
        }
    };
    let mut policy = policy
        .with_max_batch_tokens(config.run.max_batch_tokens)
        .with_held_tokens(config.run.held_kv_tokens);
    let mut reference = if rl.grpo.kl_coef > 0.0 {
        // The SFT model RL started from, frozen, on its own backend instance (on resume
        // too: pass the same `--init` as the first run).
        let dir = init_dir(config, sources.init.as_deref())?;
        reporter.info(&format!("KL reference: {}", dir.display()));
        let mut k_ref = another_backend()?;
        let model = load_model(&mut k_ref, &dir).map_err(failed("reference"))?;
        Some(
            TransformerPolicy::inference(k_ref, model)
                .with_max_batch_tokens(config.run.max_batch_tokens),
        )
    } else {
        None
    };

    reporter.stage("rl");
    let remote = config.env.start().map_err(failed("env"))?.map(Arc::new);
    let world = match &remote {
        Some(envs) => {
            reporter.info(&format!(
                "remote environment: {} servers ({})",
                envs.urls().len(),
                envs.urls().join(", ")
            ));
            WorldRl::remote(rl, config.data.prompt_rules, envs.clone()).map_err(failed("env"))?
        }
        None => WorldRl::new(rl, config.data.prompt_rules).map_err(failed("world"))?,
    };
    reporter.info(&format!(
        "{} training chains of {} tasks; {} steps of {} chains x {} rollouts",
        world.chains.len(),
        rl.chain_len,
        rl.steps,
        rl.chains_per_step,
        rl.rollouts
    ));
    let shared = rl.seeds_in_sft_data(config.data.seeds);
    if config.data.split == Split::Train && shared > 0 {
        reporter.info(&format!(
            "{shared} of RL's {} training seeds are in the SFT data of [data] seeds = {}: \
             success there includes values the model memorized ([rl] scenario_seed_offset \
             = {} draws scenarios it has not seen)",
            rl.scenario_seeds, config.data.seeds, config.data.seeds
        ));
    }
    let resumed_at = sources.resume.then_some(state.step);
    let mut trainer =
        RlTrainer::new(rl.clone(), world.chains.clone(), state).map_err(failed("rl"))?;
    let template = ChatTemplate::new(&tokenizer)
        .map_err(failed("tokenizer"))?
        .with_max_len(rl.rollout.max_episode_tokens);
    let mut metrics = open_metrics(config, resumed_at)?;
    let keep = NonZeroUsize::new(config.run.keep_checkpoints);
    let every = rl.checkpoint_every;
    let mut save_checkpoint = |policy: &mut TransformerPolicy<K>,
                               stats: &RlStepStats,
                               trainer: &RlTrainer,
                               last: bool| {
        if !last && (every == 0 || stats.step % every != 0) {
            return Ok(());
        }
        let (k, model, optimizer) = policy.parts_mut();
        let parts = CheckpointParts {
            model,
            optimizer: optimizer.map(|o| &*o),
            tokenizer: &tokenizer,
            state: trainer.state(),
            library: None,
            carried: Some(&carried),
        };
        checkpoint::save(k, &checkpoints, stats.step, &parts, keep)
            .map(|_| ())
            .map_err(failed("checkpoint"))
    };
    let inputs = RlInputs {
        world: &world,
        template: &template,
        label: "rl",
    };
    run_rl(
        &mut policy,
        reference.as_mut(),
        &mut trainer,
        inputs,
        &mut metrics,
        &mut reporter,
        &mut save_checkpoint,
    )
    .map_err(|e| {
        if !interrupt::stop_requested() {
            return e;
        }
        PipelineError::new(
            "rl",
            format!(
                "{}; its checkpoint is in {}: `sage train --resume` (with the same \
                 settings) continues from there",
                e.message,
                checkpoints.display()
            ),
        )
    })?;
    plot_rewards(config, rl.chain_len, &mut reporter)?;
    compare_with_control(config, &mut reporter)?;
    let out = rl_dir(config).join("eval.json");
    let template = ChatTemplate::new(&tokenizer).map_err(failed("tokenizer"))?;
    run_eval(
        &mut policy,
        &config.eval,
        config.data.prompt_rules,
        &template,
        remote.as_deref(),
        Some(&out),
        &mut reporter,
    )?;
    Ok(())
}

/// Resets what a resumed RL run may change: its length, checkpoint cadence, backend and
/// directory.
fn rl_resumable(config: &mut RunConfig) {
    settings::portable(config);
    config.rl.steps = 0;
    config.rl.checkpoint_every = 0;
    config.run.keep_checkpoints = 0;
}

/// [`rl_resumable`], and the one setting a control differs from its run in.
fn paired(config: &mut RunConfig) {
    rl_resumable(config);
    config.rl.apply_updates = true;
}

/// The settings record of the run (`rl`) or of its control (`rl-control`).
fn stage_record(config: &RunConfig, apply_updates: bool) -> StageRecord {
    StageRecord::new(&config.run.dir, rl_dir_name(apply_updates))
}

/// Refuses a resumed run whose recorded settings differ from today's, and an update-off
/// control whose settings differ from its run's (but for `[rl] apply_updates` and the
/// run's length), naming the first line that differs; then records today's settings.
fn check_settings(config: &RunConfig, resume: bool) -> Result<(), PipelineError> {
    let apply = config.rl.apply_updates;
    let own = stage_record(config, apply);
    if resume {
        let what = rl_dir(config).display().to_string();
        refuse_changed_settings(&own, config, rl_resumable, &what)?;
    }
    if !apply {
        let run = stage_record(config, true);
        if let Some(found) = run.difference(config, paired).map_err(settings_error)? {
            return Err(PipelineError::new(
                "control",
                format!(
                    "the RL run in {} ran with other settings ({found}); a control must \
                     differ from its run in [rl] apply_updates only: use the settings in {}",
                    config.run.dir.join(rl_dir_name(true)).display(),
                    run.path().display()
                ),
            ));
        }
    }
    own.write(config).map_err(settings_error)
}

/// The checkpoint RL starts from: `--init`, else the run's latest SFT checkpoint.
fn init_dir(config: &RunConfig, init: Option<&Path>) -> Result<PathBuf, PipelineError> {
    chosen_or_latest(config, init, "init", |sft| {
        format!(
            "no SFT checkpoint in {}: run `sage sft` (or `sage demo`) first, or pass --init DIR",
            sft.display()
        )
    })
}

/// `RUN_DIR/rl/metrics/rl.{jsonl,csv}`, keeping the rows up to `resumed_at`.
fn open_metrics(config: &RunConfig, resumed_at: Option<u64>) -> Result<MetricsLog, PipelineError> {
    let dir = rl_dir(config).join("metrics");
    match resumed_at {
        Some(step) => MetricsLog::resume(
            &dir,
            "rl",
            &KeepRows::UpTo {
                column: "step".to_owned(),
                last: step as f64,
            },
        ),
        None => MetricsLog::create(&dir, "rl"),
    }
    .map_err(failed("metrics"))
}

/// Writes the mean reward per chain position to `RUN_DIR/rl/plots/rl_reward.png`.
fn plot_rewards(
    config: &RunConfig,
    chain_len: usize,
    reporter: &mut dyn Reporter,
) -> Result<(), PipelineError> {
    let dir = rl_dir(config);
    let columns: Vec<String> = (1..=chain_len)
        .map(|k| format!("reward_mean_{k}"))
        .collect();
    let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
    let series = read_series(&dir.join("metrics").join("rl.jsonl"), "step", &columns)
        .map_err(failed("plot"))?;
    let chart = LineChart {
        title: "RL: mean reward per chain position",
        x_label: "step",
        y_label: "reward",
        series: &series,
        width: 800,
        height: 480,
    };
    let path = dir.join("plots").join("rl_reward.png");
    write_chart(&path, &chart, "reward curve", reporter)
}

/// Reports how much of the control's failure lay in groups that solved the task at
/// least once (what sharpening the policy could win) over the last third of its steps.
fn report_headroom(control_log: &Path, reporter: &mut dyn Reporter) -> Result<(), PipelineError> {
    let columns = ["success_all", "solved_any_all"];
    let found = match read_series(control_log, "step", &columns) {
        Ok(found) => found,
        // Logs written before `solved_any` was logged have no such column.
        Err(MetricsError::UnknownColumn { .. }) => return Ok(()),
        Err(e) => return Err(failed("compare")(e)),
    };
    let [success, solved_any] = &found[..] else {
        return Ok(());
    };
    // `control_gap` pairs the two series step by step over the last third: here its
    // "run" is pass@G and its "control" the success of the same steps.
    if let Some(gap) = control_gap(solved_any, success) {
        reporter.info(&format!(
            "steps {}-{}: the control solved {:.1}% of its groups at least once (pass@G) at a \
             success of {:.1}%: sharpening onto answers it already samples can add at most \
             {:.1} points; groups it never solved hold no advantage to learn from",
            gap.first_step,
            gap.last_step,
            100.0 * gap.run,
            100.0 * gap.control,
            100.0 * gap.gain()
        ));
    }
    Ok(())
}

/// Once the update-off control has metrics, reports its pass@G against its success;
/// when the run has them too, reports the run's success and reward against the
/// control's over the last third of their common steps and plots both curves to
/// `RUN_DIR/rl/plots/rl_vs_control.png`.
fn compare_with_control(
    config: &RunConfig,
    reporter: &mut dyn Reporter,
) -> Result<(), PipelineError> {
    let log = |apply: bool| {
        config
            .run
            .dir
            .join(rl_dir_name(apply))
            .join("metrics")
            .join("rl.jsonl")
    };
    let (run_log, control_log) = (log(true), log(false));
    if !control_log.is_file() {
        return Ok(());
    }
    // The control's recorded settings against the run's record.
    let control = stage_record(config, false)
        .read()
        .map_err(settings_error)?
        .and_then(|text| RunConfig::from_toml(&text).ok());
    if let Some(control) = control {
        let run = stage_record(config, true);
        if let Some(found) = run.difference(&control, paired).map_err(settings_error)? {
            reporter.info(&format!(
                "the control in {} ran with other settings than the run ({found}): not \
                 compared; run `sage train --control` again with the run's settings",
                config.run.dir.join(rl_dir_name(false)).display()
            ));
            return Ok(());
        }
    }
    report_headroom(&control_log, reporter)?;
    if !run_log.is_file() {
        return Ok(());
    }
    let columns = ["success_all", "reward_all"];
    let run = read_series(&run_log, "step", &columns).map_err(failed("compare"))?;
    let control = read_series(&control_log, "step", &columns).map_err(failed("compare"))?;
    for ((name, scale), (run, control)) in [("success %", 100.0), ("reward", 1.0)]
        .into_iter()
        .zip(run.iter().zip(&control))
    {
        if let Some(gap) = control_gap(run, control) {
            reporter.info(&format!(
                "steps {}-{}: {name} {:.3} against the update-off control's {:.3} ({:+.3}; \
                 below it at {} steps, above at {})",
                gap.first_step,
                gap.last_step,
                scale * gap.run,
                scale * gap.control,
                scale * gap.gain(),
                gap.below,
                gap.above
            ));
        }
    }
    let mut series = Vec::new();
    for (label, found) in [("run", run), ("control", control)] {
        for mut s in found {
            s.name = format!("{} ({label})", s.name);
            series.push(s);
        }
    }
    let chart = LineChart {
        title: "RL against its update-off control (mean over chain positions)",
        x_label: "step",
        y_label: "success share / reward",
        series: &series,
        width: 800,
        height: 480,
    };
    let path = config
        .run
        .dir
        .join(rl_dir_name(true))
        .join("plots")
        .join("rl_vs_control.png");
    write_chart(&path, &chart, "control curve", reporter)
}
