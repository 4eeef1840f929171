//! `config`: the printed defaults read back unchanged, every printed setting has its
//! comment line, partial sections keep the other defaults, and every kind of bad
//! configuration fails with a message naming its field.

use sage_trainer::backend::Backend;
use sage_trainer::config::{demo_model, RunConfig, COPYING_SFT_EPOCHS, COPYING_SFT_SEEDS};

#[test]
fn printed_defaults_read_back_unchanged() {
    let defaults = RunConfig::default();
    let text = defaults.to_toml();
    for section in [
        "[run]",
        "[data]",
        "[tokenizer]",
        "[model]",
        "[optimizer]",
        "[sft]",
        "[eval]",
    ] {
        assert!(text.contains(section), "{section} missing from\n{text}");
    }
    assert_eq!(RunConfig::from_toml(&text).unwrap(), defaults);
    assert_eq!(RunConfig::from_toml("").unwrap(), defaults);
    RunConfig::tiny("runs/tiny").validate().unwrap();
}

#[test]
fn every_printed_setting_says_what_it_sets() {
    let mut constant = RunConfig::default();
    constant.optimizer.schedule = sage_trainer::optim::LrSchedule::Constant { lr: 1e-3 };
    let configs = [
        RunConfig::default(),
        RunConfig::tiny("runs/tiny"),
        RunConfig::experiment("runs/experiment"),
        constant,
    ];
    for config in configs {
        let text = config.to_commented_toml();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.contains(" = ") && !line.starts_with('#') {
                let above = if i > 0 { lines[i - 1] } else { "" };
                assert!(
                    above.starts_with("# ") && above.len() > 10,
                    "no comment above `{line}`:\n{text}"
                );
            }
        }
        assert_eq!(RunConfig::from_toml(&text).unwrap(), config);
    }
}

#[test]
fn a_schedule_of_another_kind_replaces_the_default_and_one_of_the_same_kind_merges() {
    use sage_trainer::optim::LrSchedule;
    let constant = RunConfig::from_toml("[optimizer.schedule.constant]\nlr = 0.002\n").unwrap();
    assert_eq!(
        constant.optimizer.schedule,
        LrSchedule::Constant { lr: 0.002 }
    );
    let peak =
        RunConfig::from_toml("[optimizer.schedule.warmup_cosine]\npeak_lr = 0.001\n").unwrap();
    let LrSchedule::WarmupCosine {
        peak_lr, min_lr, ..
    } = peak.optimizer.schedule
    else {
        panic!("not a warm-up cosine: {:?}", peak.optimizer.schedule);
    };
    let LrSchedule::WarmupCosine {
        min_lr: default_min,
        ..
    } = RunConfig::default().optimizer.schedule
    else {
        panic!("the default schedule changed kind");
    };
    assert_eq!((peak_lr, min_lr), (0.001, default_min));
}

#[test]
fn a_partial_section_keeps_the_other_defaults_of_the_run() {
    let config = RunConfig::from_toml("[data]\nseeds = 3\n[model]\nhidden_size = 96\n").unwrap();
    let defaults = RunConfig::default();
    assert_eq!(config.data.seeds, 3);
    assert_eq!(config.data.read_docs, defaults.data.read_docs);
    assert_eq!(config.data.mistake_rate, defaults.data.mistake_rate);
    assert_eq!(config.model.hidden_size, 96);
    assert_eq!(
        config.model.num_hidden_layers,
        demo_model().num_hidden_layers
    );
    assert_eq!(config.optimizer, defaults.optimizer);
}

/// The error `text` gives.
fn problem(text: &str) -> String {
    RunConfig::from_toml(text).unwrap_err().to_string()
}

#[test]
fn bad_configurations_name_their_field() {
    assert!(problem("[sft]\nepoch = 2\n").contains("epoch"));
    assert!(problem("[run]\nkeep_checkpoints = 0\n").contains("keep_checkpoints"));
    assert!(problem("[run]\nbackend = \"tpu\"\n").contains("unknown backend \"tpu\""));
    assert!(problem("[run]\nbackend = \"cuda\"\n").contains("not compiled"));
    assert!(problem("[run]\nprecision = \"fp8\"\n").contains("unknown precision \"fp8\""));
    assert!(RunConfig::from_toml("[run]\nprecision = \"bf16\"\n").is_ok());
    if Backend::Wgpu.is_compiled() {
        let bf16 = problem("[run]\nbackend = \"wgpu\"\nprecision = \"bf16\"\n");
        assert!(bf16.contains("needs backend \"cuda\" or \"cpu\""), "{bf16}");
    }
    let split = problem("[data]\nsplit = \"nowhere\"\n");
    assert!(
        split.contains("data.split") && split.contains("unknown split \"nowhere\""),
        "{split}"
    );
    let mode = problem("[eval]\nmodes = [\"psychic\"]\n");
    assert!(
        mode.contains("eval.modes") && mode.contains("psychic"),
        "{mode}"
    );
    assert!(problem("[model]\nnum_attention_heads = 3\n").contains("[model]"));
    assert!(problem("[eval.rollout]\nmax_episode_tokens = 100000\n").contains("max_episode_tokens"));
    assert!(problem("[sft]\nbatch_tokens = \"many\"\n").contains("batch_tokens"));
    assert!(problem("[rl]\nrollouts = 0\n").contains("[rl]"));
    assert!(problem("[rl.reward]\nkind = \"Vibes\"\n").contains("Vibes"));
    assert!(problem("[run\n").contains("TOML") || problem("[run\n").contains("expected"));
    assert!(problem("[data]\nmode = \"mixed\"\nskill_share = 1.5\n").contains("skill_share"));
    assert!(problem("[data]\nrewrite_share = -0.1\n").contains("rewrite_share"));
    assert!(problem("[data]\nmode = \"half\"\n").contains("mixed"));
    assert!(problem("[rl]\nminibatches = 0\n").contains("minibatches"));
    assert!(problem("[rl.rollout]\ntemperature = 0.7\n").contains("temperature 1"));
    RunConfig::from_toml("[data]\nmode = \"mixed\"\nskill_share = 0.3\n").unwrap();
    let unfit = problem("[sft]\nbatch_tokens = 16384\n");
    assert!(
        unfit.contains("[sft] batch_tokens (16384)")
            && unfit.contains("[run] max_batch_tokens (8192)"),
        "{unfit}"
    );
    RunConfig::from_toml("[sft]\nbatch_tokens = 16384\n[run]\nmax_batch_tokens = 16384\n").unwrap();
    assert!(problem("[eval]\niid_seeds = 0\n").contains("iid_seeds"));
}

#[test]
fn the_shipped_configurations_are_valid() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let config = RunConfig::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
            assert_ne!(
                config,
                RunConfig::default(),
                "{} changes nothing",
                path.display()
            );
            checked += 1;
        }
    }
    assert!(checked > 0, "no configuration in {}", dir.display());
}

/// `configs/experiment-default.toml` is the default experiment, field for field.
#[test]
fn the_default_experiment_file_is_the_default_experiment() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    let file = RunConfig::from_file(&dir.join("experiment-default.toml")).unwrap();
    let default = RunConfig::experiment("runs/experiment");
    let (file, default) = (file.to_toml(), default.to_toml());
    let first = file.lines().zip(default.lines()).find(|(a, b)| a != b);
    assert_eq!(first, None, "the file differs from RunConfig::experiment");
    assert_eq!(file, default);
}

/// Both experiment presets train their SFT models with the copying recipe (the mechanism
/// preset on twice its data: its mixed data shows each scenario in one of two forms),
/// anneal them, bind reuse calls' values, evaluate 1,497 `iid` tasks, and RL draws
/// scenarios after the SFT data's seeds. The default experiment trains its skill model
/// for the plain-code model's steps; the mechanism preset keeps the equal epochs its
/// 2026-11-27 table was measured at (both of its models copy 98.9-99.5% of values so).
#[test]
fn both_experiment_presets_use_the_copying_sft_recipe() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    let mechanism = RunConfig::from_file(&dir.join("experiment-mechanism.toml")).unwrap();
    let recipe = RunConfig::from_file(&dir.join("sft-copying.toml")).unwrap();
    for config in [&RunConfig::experiment("runs/x"), &recipe] {
        assert_eq!(
            (
                config.data.seeds,
                config.sft.epochs,
                config.sft.batch_tokens
            ),
            (COPYING_SFT_SEEDS, COPYING_SFT_EPOCHS, 2048)
        );
    }
    assert_eq!(recipe.eval.iid_seeds, 3);
    assert_eq!(
        (
            mechanism.data.seeds,
            mechanism.sft.epochs,
            mechanism.sft.batch_tokens,
            mechanism.experiment.anneal.epochs
        ),
        (2 * COPYING_SFT_SEEDS, COPYING_SFT_EPOCHS, 2048, 1)
    );
    for config in [&RunConfig::experiment("runs/x"), &mechanism] {
        assert_eq!(config.rl.seeds_in_sft_data(config.data.seeds), 0);
        assert_eq!(config.eval.iid_seeds, 20);
        assert!(config.data.bound_reuse);
        assert_eq!(config.experiment.anneal.epochs, 1);
    }
    assert!(RunConfig::experiment("runs/x").experiment.equal_sft_steps);
    assert!(!mechanism.experiment.equal_sft_steps);
}
