//! What each `sage` command does: resolve its configuration, pick the backend, run
//! the pipeline's stages, save checkpoints, metrics and plots.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sage_envs::scenarios::{Catalog, CatalogConfig, Split};

use sage_trainer::backend::Backend;
use sage_trainer::chat::ChatTemplate;
use sage_trainer::checkpoint;
use sage_trainer::config::RunConfig;
use sage_trainer::data::{expert_data, write_records};
use sage_trainer::environments::serve::WorldServer;
use sage_trainer::environments::EnvKind;
use sage_trainer::import::import_gguf;
use sage_trainer::pipeline::experiment::{
    experiment_tables, merge_runs, read_experiment_json, run_experiment, write_experiment_files,
};
use sage_trainer::pipeline::{
    check_resumed_lora, failed, fresh_model, load_sft_data, plot_sft_loss, prepare_data,
    resumed_sft_policy, run_demo, run_eval, run_on_backend, run_sft, start_lora, train_tokenizer,
    warn_turn_limits, BackendJob, PipelineError, Reporter, SftRun, SftStepSink,
};
use sage_trainer::policy::TransformerPolicy;
use sage_trainer::settings::{self, StageRecord};
use sage_trainer::sft::{SftState, SftStep};
use sage_trainer::tokenizer::Tokenizer;
use sage_trainer::weights::{load_frozen_model, load_model, Dtype};
use sage_transformer::Kernels;

use super::generate::{generate, GenerateSources};
use super::progress::BarReporter;
use super::train::{train, TrainSources};
use super::{checked, load_config, load_config_over, Cli, Command, Common, StoredDtype};

/// A command that runs on the configured backend.
enum Job<'a> {
    Demo(&'a RunConfig),
    Sft(&'a RunConfig, &'a SftSources),
    Train(&'a RunConfig, &'a TrainSources),
    Experiment(&'a RunConfig, bool),
    Eval(&'a RunConfig, Option<&'a Path>, Option<&'a Path>),
    Generate(&'a RunConfig, &'a GenerateSources),
}

impl BackendJob for Job<'_> {
    type Output = ();

    fn run<K: Kernels>(
        self,
        k: K,
        another: &dyn Fn() -> Result<K, PipelineError>,
    ) -> Result<(), PipelineError> {
        match self {
            Job::Demo(config) => demo(k, config),
            Job::Sft(config, sources) => sft(k, config, sources),
            Job::Train(config, sources) => train(k, another, config, sources),
            Job::Experiment(config, resume) => experiment(k, another, config, resume),
            Job::Eval(config, checkpoint, out) => eval(k, config, checkpoint, out),
            Job::Generate(config, sources) => generate(k, config, sources),
        }
    }
}

/// Runs one parsed command line.
pub fn run(cli: Cli) -> Result<(), PipelineError> {
    match cli.command {
        Command::Demo { common, tiny } => {
            let config = load_tiny_or_default(&common, tiny)?;
            builtin_only(&config, "demo")?;
            record(&config, "demo")?;
            run_on_backend(config.run.backend, config.run.precision, Job::Demo(&config))
        }
        Command::Data {
            common,
            out,
            split,
            seeds,
            variants,
            mode,
        } => {
            let mut config = load_config(&common)?;
            config.data.split = split.unwrap_or(config.data.split);
            config.data.seeds = seeds.unwrap_or(config.data.seeds);
            config.data.variants = variants.unwrap_or(config.data.variants);
            config.data.mode = mode.unwrap_or(config.data.mode);
            let config = checked(config)?;
            let data = expert_data(&config.data).map_err(failed("data"))?;
            write_records(&out, &data.records).map_err(failed("data"))?;
            println!(
                "wrote {} trajectories of {} scenarios to {} ({} scenarios rejected, {} template-seed pairs without one)",
                data.records.len(),
                data.kept,
                out.display(),
                data.dropped,
                data.skipped
            );
            Ok(())
        }
        Command::Sft {
            common,
            data,
            dev,
            init,
            resume,
        } => {
            let config = load_config(&common)?;
            record(&config, "sft")?;
            super::stop_at_step_boundaries();
            let sources = SftSources {
                data,
                dev,
                init,
                resume,
            };
            run_on_backend(
                config.run.backend,
                config.run.precision,
                Job::Sft(&config, &sources),
            )
        }
        Command::Train {
            common,
            init,
            resume,
            steps,
            control,
            tiny,
        } => {
            let mut config = load_tiny_or_default(&common, tiny)?;
            config.rl.steps = steps.unwrap_or(config.rl.steps);
            config.rl.apply_updates &= !control;
            let config = checked(config)?;
            record(&config, "train")?;
            super::stop_at_step_boundaries();
            let sources = TrainSources { init, resume };
            run_on_backend(
                config.run.backend,
                config.run.precision,
                Job::Train(&config, &sources),
            )
        }
        Command::Experiment {
            common,
            seeds,
            only_seed,
            arms,
            skill_data,
            init,
            rl_steps,
            tiny,
            resume,
        } => {
            let mut config = if tiny {
                load_config_over(&common, RunConfig::tiny("runs/experiment-tiny"))?
            } else {
                load_config_over(&common, RunConfig::experiment("runs/experiment"))?
            };
            config.experiment.seeds = seeds.unwrap_or(config.experiment.seeds);
            config.experiment.only_seed = only_seed;
            config.experiment.arms = arms.unwrap_or(config.experiment.arms);
            config.experiment.skill_data = skill_data.unwrap_or(config.experiment.skill_data);
            config.rl.steps = rl_steps.unwrap_or(config.rl.steps);
            if let Some(init) = init {
                config.experiment.init = init.display().to_string();
            }
            let config = checked(config)?;
            builtin_only(&config, "experiment")?;
            record(&config, "experiment")?;
            super::stop_at_step_boundaries();
            run_on_backend(
                config.run.backend,
                config.run.precision,
                Job::Experiment(&config, resume),
            )
        }
        Command::Eval {
            common,
            checkpoint,
            splits,
            modes,
            out,
        } => {
            let mut config = load_config(&common)?;
            config.eval.splits = splits.unwrap_or(config.eval.splits);
            config.eval.modes = modes.unwrap_or(config.eval.modes);
            let config = checked(config)?;
            record(&config, "eval")?;
            super::stop_servers_on_signal();
            let job = Job::Eval(&config, checkpoint.as_deref(), out.as_deref());
            run_on_backend(config.run.backend, config.run.precision, job)
        }
        Command::Generate {
            common,
            checkpoint,
            split,
            scenario,
            prompt,
            temperature,
            seed,
        } => {
            let config = load_config(&common)?;
            if !(temperature >= 0.0 && temperature.is_finite()) {
                return Err(PipelineError::new(
                    "generate",
                    format!("--temperature {temperature}: use 0 (greedy) or a positive number"),
                ));
            }
            let sources = GenerateSources {
                checkpoint,
                split,
                scenario,
                prompt,
                temperature,
                seed,
            };
            let job = Job::Generate(&config, &sources);
            run_on_backend(config.run.backend, config.run.precision, job)
        }
        Command::Config { print: _, config } => {
            let config = match config {
                Some(path) => RunConfig::from_file(&path).map_err(failed("config"))?,
                None => RunConfig::default(),
            };
            print!("{}", config.to_commented_toml());
            Ok(())
        }
        Command::Import { gguf, out, dtype } => {
            let dtype = match dtype {
                StoredDtype::F32 => Dtype::F32,
                StoredDtype::Bf16 => Dtype::BF16,
                StoredDtype::F16 => Dtype::F16,
            };
            let started = std::time::Instant::now();
            let summary = import_gguf(&gguf, &out, dtype, &mut |name| {
                tracing::debug!("converting {name}")
            })
            .map_err(failed("import"))?;
            let types: Vec<String> = summary
                .types
                .iter()
                .map(|(kind, count)| format!("{count} {}", kind.name()))
                .collect();
            let c = &summary.config;
            println!(
                "{}: {:?}, {} layers, width {}, {} heads / {} kv heads, vocabulary {}; {} tensors ({}) \
                 -> {} in {:.1} s",
                gguf.display(),
                summary.architecture,
                c.num_hidden_layers,
                c.hidden_size,
                c.num_attention_heads,
                c.num_key_value_heads,
                c.vocab_size,
                summary.tensors,
                types.join(", "),
                out.display(),
                started.elapsed().as_secs_f64()
            );
            Ok(())
        }
        Command::ServeWorld {
            port,
            host,
            config,
            exit_with_parent,
        } => {
            let config = match config {
                Some(path) => RunConfig::from_file(&path).map_err(failed("config"))?,
                None => RunConfig::default(),
            };
            let server = WorldServer::new(served_catalogs(&config)?);
            server
                .serve(&format!("{host}:{port}"), exit_with_parent)
                .map_err(|e| PipelineError::new("serve-world", e.to_string()))
        }
        Command::Tables {
            files,
            seeds,
            shared_sft,
            out,
        } => tables(&files, seeds.as_deref(), shared_sft, out.as_deref()),
        Command::Backends => {
            for backend in Backend::compiled() {
                println!("{backend}");
            }
            Ok(())
        }
        Command::Env => {
            print!("{}", environment_report());
            Ok(())
        }
    }
}

/// `sage tables`: the experiment's tables from the rows of `files`, with the rows each
/// later file replaced and where the rows' inputs differ, printed and (with `out`)
/// written as an experiment's files.
fn tables(
    files: &[PathBuf],
    seeds: Option<&[u64]>,
    shared_sft: bool,
    out: Option<&Path>,
) -> Result<(), PipelineError> {
    let read = files
        .iter()
        .map(|path| Ok((path.clone(), read_experiment_json(path)?)))
        .collect::<Result<Vec<_>, PipelineError>>()?;
    let merged = merge_runs(&read, seeds)?;
    for replaced in &merged.replaced {
        println!(
            "{} under seed {}: the row of {} replaces that of {}",
            replaced.arm,
            replaced.seed,
            replaced.later.display(),
            replaced.earlier.display()
        );
    }
    for line in &merged.mismatches {
        println!("{line}");
    }
    let (printed, table) = experiment_tables(&merged.runs, &merged.arms, shared_sft);
    print!("{printed}");
    if let Some(dir) = out {
        std::fs::create_dir_all(dir)
            .map_err(|e| PipelineError::new("tables", format!("{}: {e}", dir.display())))?;
        // The written tables keep what the check of their inputs found.
        let mut notes: String = merged.mismatches.iter().map(|l| format!("{l}\n")).collect();
        notes.push_str(&table);
        write_experiment_files(dir, &merged.runs, &notes)?;
        println!("written: {}", dir.join("experiment.md").display());
    }
    Ok(())
}

/// The lines of `sage env`.
fn environment_report() -> String {
    let backends: Vec<String> = Backend::compiled()
        .iter()
        .map(ToString::to_string)
        .collect();
    let worker = sage_envs::sandbox::worker_program().map_or_else(
        || "none found".to_owned(),
        |path| path.display().to_string(),
    );
    [
        format!("sage {}", env!("CARGO_PKG_VERSION")),
        format!("git revision: {}", settings::GIT_REVISION),
        format!("compiler: {}", env!("SAGE_RUSTC_VERSION")),
        format!(
            "platform: {} {}",
            std::env::consts::OS,
            std::env::consts::ARCH
        ),
        format!("cpu features: {}", cpu_features()),
        format!(
            "threads: {} (RAYON_NUM_THREADS={})",
            std::thread::available_parallelism().map_or(1, |n| n.get()),
            std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "unset".to_owned())
        ),
        format!("backends compiled: {}", backends.join(", ")),
        format!("sandbox worker: {worker}"),
    ]
    .iter()
    .map(|line| format!("{line}\n"))
    .collect()
}

/// The SIMD features the CPU kernels can use that this CPU has.
fn cpu_features() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        let found: Vec<&str> = [
            ("avx2", std::arch::is_x86_feature_detected!("avx2")),
            ("fma", std::arch::is_x86_feature_detected!("fma")),
            ("avx512f", std::arch::is_x86_feature_detected!("avx512f")),
            (
                "avx512bf16",
                std::arch::is_x86_feature_detected!("avx512bf16"),
            ),
        ]
        .into_iter()
        .filter_map(|(name, present)| present.then_some(name))
        .collect();
        if found.is_empty() {
            "none of avx2, fma, avx512f".to_owned()
        } else {
            found.join(", ")
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        "(not detected on this architecture)".to_owned()
    }
}

/// Writes the run directory's record of `command` starting with `config`
/// (`RUN_DIR/config.toml` and `RUN_DIR/run-info.json`).
fn record(config: &RunConfig, command: &str) -> Result<(), PipelineError> {
    settings::record_command(config, command).map_err(|e| {
        PipelineError::new(
            "settings",
            format!(
                "cannot write the run's record in {}: {e}",
                config.run.dir.display()
            ),
        )
    })
}

/// Resets what `sage sft --resume` may change: the number of epochs or steps (a resumed
/// run may train longer), the checkpoint cadence, the backend and the directory.
fn sft_resumable(config: &mut RunConfig) {
    settings::portable(config);
    config.sft.epochs = 0;
    config.sft.steps = 0;
    config.run.checkpoint_every = 0;
    config.run.keep_checkpoints = 0;
}

/// Refuses `sage sft --resume` when the run's SFT ran with other settings (naming the
/// first line that differs), then records today's as the SFT stage's.
fn check_sft_settings(config: &RunConfig, resume: bool) -> Result<(), PipelineError> {
    let record = StageRecord::new(&config.run.dir, "sft");
    if resume {
        let what = format!("the SFT run in {}", config.run.dir.display());
        refuse_changed_settings(&record, config, sft_resumable, &what)?;
    }
    record.write(config).map_err(settings_error)
}

/// Refuses to continue the stage `record` keeps (`what` names it) under settings other
/// than its recorded ones, both normalised by `normalize`.
pub(super) fn refuse_changed_settings(
    record: &StageRecord,
    config: &RunConfig,
    normalize: fn(&mut RunConfig),
    what: &str,
) -> Result<(), PipelineError> {
    match record
        .difference(config, normalize)
        .map_err(settings_error)?
    {
        None => Ok(()),
        Some(found) => Err(PipelineError::new(
            "resume",
            format!(
                "{what} ran with other settings ({found}), so it cannot be continued with \
                 these; resume with the settings in {}",
                record.path().display()
            ),
        )),
    }
}

/// A run's settings record could not be read or written.
pub(super) fn settings_error(e: std::io::Error) -> PipelineError {
    PipelineError::new("settings", e.to_string())
}

/// The model directory a command runs: `chosen`, else the run's latest SFT checkpoint;
/// without either, `stage`'s error with `missing(checkpoints directory)` as its message.
pub(super) fn chosen_or_latest(
    config: &RunConfig,
    chosen: Option<&Path>,
    stage: &'static str,
    missing: impl FnOnce(&Path) -> String,
) -> Result<PathBuf, PipelineError> {
    if let Some(dir) = chosen {
        return Ok(dir.to_owned());
    }
    let checkpoints = checkpoint_dir(config);
    checkpoint::latest(&checkpoints)
        .map_err(failed(stage))?
        .ok_or_else(|| PipelineError::new(stage, missing(&checkpoints)))
}

/// The defaults of a command: [`RunConfig::tiny`] in `runs/demo-tiny` with `--tiny`
/// (where `sage demo --tiny` leaves its checkpoint for `sage train --tiny`), else
/// `defaults`.
/// The configuration of `sage demo` and `sage train`: with `--tiny`, the tiny run's
/// settings changed by the `--config` file's, if any; otherwise the defaults or the file.
fn load_tiny_or_default(common: &Common, tiny: bool) -> Result<RunConfig, PipelineError> {
    if !tiny {
        return load_config(common);
    }
    let tiny = RunConfig::tiny("runs/demo-tiny");
    let over_tiny = match &common.config {
        Some(path) => RunConfig::from_file_over(path, &tiny)
            .map_err(|e| PipelineError::new("config", e.to_string()))?,
        None => tiny,
    };
    // The run directory, backend and precision flags still apply on top.
    let flags_only = Common {
        config: None,
        ..common.clone()
    };
    load_config_over(&flags_only, over_tiny)
}

/// Where checkpoints of a run live.
fn checkpoint_dir(config: &RunConfig) -> PathBuf {
    config.run.dir.join("checkpoints")
}

/// The step sink of `sage sft` or `sage demo` in the run directory: `metrics/sft.*` and
/// `checkpoints/`, kept up to `resumed_at` on resume; its checkpoints keep the Hugging
/// Face files of `source`, the model directory the run started from.
fn sft_sink(
    config: &RunConfig,
    resumed_at: Option<u64>,
    source: Option<&Path>,
) -> Result<SftStepSink, PipelineError> {
    let carried = match source {
        Some(dir) => Some(checkpoint::CarriedFiles::read(dir).map_err(failed("init"))?),
        None => None,
    };
    SftStepSink::new(
        SftRun::Standalone,
        config,
        &config.run.dir.join("metrics"),
        checkpoint_dir(config),
        resumed_at,
        carried,
    )
}

/// Writes the loss curve of `RUN_DIR/metrics/sft.jsonl` to `RUN_DIR/plots/sft_loss.png`.
fn plot_sft(config: &RunConfig, reporter: &mut dyn Reporter) -> Result<(), PipelineError> {
    let jsonl = config.run.dir.join("metrics").join("sft.jsonl");
    let png = config.run.dir.join("plots").join("sft_loss.png");
    plot_sft_loss(&jsonl, &png, reporter)
}

/// `sage demo`.
fn demo<K: Kernels>(k: K, config: &RunConfig) -> Result<(), PipelineError> {
    // The demo's SFT is the run's: `sage sft --resume` may continue it.
    check_sft_settings(config, false)?;
    let mut reporter = BarReporter::default();
    let mut sink = sft_sink(config, None, None)?;
    let mut on_step =
        |policy: &mut TransformerPolicy<K>,
         tokenizer: &Tokenizer,
         step: &SftStep,
         state: SftState| { sink.on_step(policy, tokenizer, step, state) };
    let (report, _, _) = run_demo(k, config, &mut reporter, &mut on_step)?;
    plot_sft(config, &mut reporter)?;
    reporter.info(&format!(
        "demo finished in {:.1} minutes; run directory {}",
        report.seconds / 60.0,
        config.run.dir.display()
    ));
    Ok(())
}

/// `sage experiment`. `another_backend` opens a second instance of the backend, for
/// the frozen reference model of the `sage-kl` arm.
fn experiment<K: Kernels>(
    k: K,
    another_backend: &dyn Fn() -> Result<K, PipelineError>,
    config: &RunConfig,
    resume: bool,
) -> Result<(), PipelineError> {
    let mut reporter = BarReporter::default();
    let started = std::time::Instant::now();
    run_experiment(k, another_backend, config, resume, &mut reporter)?;
    reporter.info(&format!(
        "experiment finished in {:.1} minutes; run directory {}",
        started.elapsed().as_secs_f64() / 60.0,
        config.run.dir.display()
    ));
    Ok(())
}

/// Inputs of `sage sft` beyond the configuration.
struct SftSources {
    data: Option<PathBuf>,
    dev: Option<PathBuf>,
    init: Option<PathBuf>,
    resume: bool,
}

/// `sage sft`.
fn sft<K: Kernels>(
    mut k: K,
    config: &RunConfig,
    sources: &SftSources,
) -> Result<(), PipelineError> {
    check_sft_settings(config, sources.resume)?;
    let mut reporter = BarReporter::default();
    let dir = &config.run.dir;
    let (train_path, dev_path) = match &sources.data {
        Some(path) => (path.clone(), sources.dev.clone()),
        None => {
            let files = prepare_data(&config.data, dir, &mut reporter)?;
            (files.train, Some(sources.dev.clone().unwrap_or(files.dev)))
        }
    };
    let resumed = if sources.resume {
        let loaded = checkpoint::load_latest::<K, SftState>(&mut k, &checkpoint_dir(config), None)
            .map_err(failed("resume"))?;
        match loaded {
            Some(checkpoint) => Some(checkpoint),
            None => {
                return Err(PipelineError::new(
                    "resume",
                    format!("no checkpoint in {}", checkpoint_dir(config).display()),
                ))
            }
        }
    } else {
        None
    };
    let source = resumed
        .as_ref()
        .map(|checkpoint| checkpoint.dir.clone())
        .or_else(|| sources.init.clone());
    let (model, tokenizer, optimizer, state) = match resumed {
        Some(checkpoint) => {
            reporter.info(&format!("resuming from {}", checkpoint.dir.display()));
            check_resumed_lora(&checkpoint.model, &config.sft.lora, "sft.lora")?;
            (
                checkpoint.model,
                checkpoint.tokenizer,
                checkpoint.optimizer,
                checkpoint.state,
            )
        }
        None => {
            let tokenizer = match &sources.init {
                Some(init) => Tokenizer::from_dir(init).map_err(failed("init"))?,
                None => train_tokenizer(&config.tokenizer, &train_path, dir, &mut reporter)?,
            };
            let mut model = match &sources.init {
                Some(init) => load_model(&mut k, init).map_err(failed("init"))?,
                None => fresh_model(&mut k, &config.model, config.run.seed, &tokenizer)?,
            };
            let lora = &config.sft.lora;
            start_lora(
                &mut k,
                &mut model,
                lora,
                "sft.lora",
                config.sft.seed,
                &mut reporter,
            )?;
            (model, tokenizer, None, SftState::default())
        }
    };
    let template = ChatTemplate::new(&tokenizer)
        .map_err(failed("tokenizer"))?
        .with_max_len(model.config().max_position_embeddings);
    let train = load_sft_data(&train_path, &template, &mut reporter)?;
    warn_turn_limits(&train, &config.eval, None);
    let dev = match &dev_path {
        Some(path) => Some(load_sft_data(path, &template, &mut reporter)?),
        None => None,
    };
    // The schedule spans the whole run, also when it resumes with more epochs.
    let mut policy = resumed_sft_policy(k, model, optimizer, config, &train)?;
    let resumed_at = sources.resume.then_some(state.step);
    let mut sink = sft_sink(config, resumed_at, source.as_deref())?;
    let mut on_step = |policy: &mut TransformerPolicy<K>, step: &SftStep, state: SftState| {
        sink.on_step(policy, &tokenizer, step, state)
    };
    let (summary, _) = run_sft(
        &mut policy,
        &config.sft,
        &train,
        dev.as_ref(),
        state,
        &mut reporter,
        &mut on_step,
    )?;
    plot_sft(config, &mut reporter)?;
    reporter.info(&format!(
        "sft: {} steps, final loss {:.4}, dev loss {}, {:.0} tokens/s, {} steps skipped",
        summary.steps,
        summary.final_loss,
        summary
            .dev_loss
            .map_or("-".to_owned(), |l| format!("{l:.4}")),
        summary.tokens_per_second,
        summary.skipped_steps
    ));
    Ok(())
}

/// Refuses `[env] kind = "remote"` for a command that runs the built-in world only.
fn builtin_only(config: &RunConfig, command: &'static str) -> Result<(), PipelineError> {
    if config.env.kind == EnvKind::Remote {
        return Err(PipelineError::new(
            command,
            format!(
                "`sage {command}` runs on the built-in world; [env] kind = \"remote\" is for \
                 `sage eval` and `sage train`"
            ),
        ));
    }
    Ok(())
}

/// The catalogs `sage serve-world` serves: the train split of `[rl]`'s scenario seeds
/// (what `sage train` trains on in process), and every other split with `[eval]`'s iid
/// seeds (what `sage eval` evaluates in process).
fn served_catalogs(config: &RunConfig) -> Result<Vec<Arc<Catalog>>, PipelineError> {
    let train = CatalogConfig {
        seeds: config.rl.scenario_seeds,
        seed_offset: config.rl.scenario_seed_offset,
        ..CatalogConfig::default()
    };
    let evaluated = CatalogConfig {
        iid_seeds: config.eval.iid_seeds,
        ..CatalogConfig::default()
    };
    let splits = [
        Split::Iid,
        Split::Dev,
        Split::TestNormal,
        Split::TestChallenge,
    ];
    Ok(vec![
        Arc::new(Catalog::build_splits(&train, &[Split::Train]).map_err(failed("serve-world"))?),
        Arc::new(Catalog::build_splits(&evaluated, &splits).map_err(failed("serve-world"))?),
    ])
}

/// `sage eval`.
fn eval<K: Kernels>(
    mut k: K,
    config: &RunConfig,
    checkpoint: Option<&Path>,
    out: Option<&Path>,
) -> Result<(), PipelineError> {
    let mut reporter = BarReporter::default();
    let dir = chosen_or_latest(config, checkpoint, "eval", |dir| {
        format!("no checkpoint in {}: pass --checkpoint DIR", dir.display())
    })?;
    let tokenizer = Tokenizer::from_dir(&dir).map_err(failed("eval"))?;
    let model = load_frozen_model(&mut k, &dir).map_err(failed("eval"))?;
    let template = ChatTemplate::new(&tokenizer).map_err(failed("eval"))?;
    let mut policy = TransformerPolicy::inference(k, model)
        .with_max_batch_tokens(config.run.max_batch_tokens)
        .with_held_tokens(config.run.held_kv_tokens);
    let out = out.map_or_else(|| config.run.dir.join("eval.json"), Path::to_owned);
    let remote = config.env.start().map_err(failed("env"))?;
    if let Some(remote) = &remote {
        reporter.info(&format!(
            "remote environment: {} servers ({})",
            remote.urls().len(),
            remote.urls().join(", ")
        ));
    }
    reporter.info(&format!("evaluating {}", dir.display()));
    run_eval(
        &mut policy,
        &config.eval,
        config.data.prompt_rules,
        &template,
        remote.as_ref(),
        Some(&out),
        &mut reporter,
    )?;
    let reuse = policy.held_caches().reuse();
    reporter.info(&format!(
        "prefill: {} of {} prompt tokens run through the model ({} continued from held \
         KV caches in {} of {} prompts, after {} tokens of prefixes that several prompts \
         share were prefilled once)",
        reuse.prefilled_tokens(),
        reuse.prompt_tokens,
        reuse.held_tokens,
        reuse.continued,
        reuse.prompts,
        reuse.prefix_tokens
    ));
    Ok(())
}
