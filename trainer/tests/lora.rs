//! LoRA through the trainer: SFT through adapters lowers the loss while every frozen
//! weight stays bit-equal; a checkpoint holds the merged model and PEFT's adapter files,
//! and a run resumed from it continues where it stopped; bad settings and bad adapter
//! files are errors naming the field or tensor; the demo pipeline trains through
//! `[sft.lora]`.

use std::fs;
use std::path::PathBuf;

use sage_backend_cpu::CpuBackend;
use sage_trainer::chat::ChatTemplate;
use sage_trainer::checkpoint::{self, CheckpointParts};
use sage_trainer::config::RunConfig;
use sage_trainer::init::init_params;
use sage_trainer::lora::{apply_lora, LoraSettings};
use sage_trainer::optim::{AdamWConfig, LrSchedule};
use sage_trainer::pipeline::{run_demo, PipelineError, Reporter};
use sage_trainer::policy::TransformerPolicy;
use sage_trainer::sft::{dev_loss, SftConfig, SftData, SftState, SftStep, SftTrainer};
use sage_trainer::tokenizer::{Tokenizer, TrainConfig};
use sage_trainer::weights::{ADAPTER_CONFIG_FILE, ADAPTER_DIR, ADAPTER_WEIGHTS_FILE};
use sage_transformer::{Kernels, ModelConfig, Transformer};

/// One chat per line: a payment task and its two agent turns.
fn jsonl(count: usize) -> String {
    (0..count)
        .map(|i| {
            let messages = serde_json::json!([
                {"role": "system", "content": "Rules."},
                {"role": "user", "content": format!("Pay Ana {i} dollars.")},
                {"role": "assistant", "content": format!("I pay.\n```python\npay(\"Ana\", {i})\n```")},
                {"role": "user", "content": "Observation:\nNone"},
                {"role": "assistant", "content": "Done.\n```python\napis.supervisor.complete_task()\n```"},
            ]);
            format!("{messages}\n")
        })
        .collect()
}

fn tokenizer() -> Tokenizer {
    let texts: Vec<String> = jsonl(200).lines().map(str::to_owned).collect();
    let config = TrainConfig {
        vocab_size: 400,
        ..TrainConfig::default()
    };
    Tokenizer::train(texts, &config).unwrap()
}

/// Rank-4 adapters on q, v and down.
fn settings() -> LoraSettings {
    LoraSettings {
        rank: 4,
        alpha: 8.0,
        targets: vec!["q_proj".into(), "v_proj".into(), "down_proj".into()],
    }
}

/// A random model of `vocab` tokens with the adapters of [`settings`], trainable.
fn lora_policy(vocab: usize) -> TransformerPolicy<CpuBackend> {
    let mut k = CpuBackend::new();
    let config = ModelConfig {
        vocab_size: vocab,
        hidden_size: 32,
        intermediate_size: 64,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        rope_theta: 10_000.0,
        rms_norm_eps: 1e-6,
        max_position_embeddings: 256,
        tie_word_embeddings: true,
        qkv_bias: true,
    };
    let mut model = Transformer::new(&mut k, config).unwrap();
    init_params(&mut k, &model, 5).unwrap();
    // Weights of a trained model's size, not of an initialisation's: a frozen head of
    // std 0.02 bounds the logits, so that no adapter could lower the loss much.
    let mut values = vec![0.0f32; model.params().len];
    k.read(model.params(), &mut values).unwrap();
    for value in &mut values {
        if *value != 1.0 {
            *value *= 10.0;
        }
    }
    k.write(model.params(), &values).unwrap();
    assert!(apply_lora(&mut k, &mut model, &settings(), 7).unwrap());
    let optimizer = AdamWConfig {
        schedule: LrSchedule::Constant { lr: 1e-2 },
        ..AdamWConfig::default()
    };
    TransformerPolicy::trainable(k, model, optimizer).unwrap()
}

fn params(policy: &mut TransformerPolicy<CpuBackend>) -> Vec<f32> {
    let (k, model, _) = policy.parts_mut();
    let mut values = vec![0.0f32; model.params().len];
    k.read(model.params(), &mut values).unwrap();
    values
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sage-lora-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    dir
}

#[test]
fn sft_through_adapters_trains_only_the_adapted_matrices_and_resumes() {
    let tk = tokenizer();
    let template = ChatTemplate::new(&tk).unwrap();
    let data = SftData::parse(&jsonl(24), &template).unwrap();
    let config = SftConfig {
        epochs: 2,
        batch_tokens: 4 * data.examples[0].tokens.len(),
        seed: 3,
        ..SftConfig::default()
    };

    let mut straight = lora_policy(tk.vocab_size());
    let start = params(&mut straight);
    let before = dev_loss(&mut straight, &data.examples).unwrap();
    let mut trainer = SftTrainer::new(config.clone(), &data, SftState::default());
    let total = trainer.total_steps();
    let mut losses = Vec::new();
    while let Some(step) = trainer.next_step(&mut straight, &data).unwrap() {
        losses.push(step.loss);
    }
    let after = dev_loss(&mut straight, &data.examples).unwrap();
    assert!(after < 0.7 * before, "loss {before} -> {after}");
    let end = params(&mut straight);
    for (name, slot) in straight.model().layout().named() {
        let range = slot.offset..slot.offset + slot.len;
        let adapted = ["q_proj", "v_proj", "down_proj"]
            .iter()
            .any(|p| name.contains(p) && name.ends_with(".weight"));
        assert_eq!(
            start[range.clone()] != end[range.clone()],
            adapted,
            "{name}: changed only if adapted"
        );
    }

    // Half the steps, a checkpoint, then the rest from the checkpoint on a new backend.
    let dir = temp_dir("resume");
    let mut first = lora_policy(tk.vocab_size());
    let mut first_trainer = SftTrainer::new(config.clone(), &data, SftState::default());
    let mut resumed_losses = Vec::new();
    for _ in 0..total / 2 {
        let step = first_trainer.next_step(&mut first, &data).unwrap().unwrap();
        resumed_losses.push(step.loss);
    }
    let state = first_trainer.state();
    let saved = {
        let (k, model, optimizer) = first.parts_mut();
        let parts = CheckpointParts {
            model,
            optimizer: optimizer.map(|o| &*o),
            tokenizer: &tk,
            state: &state,
            library: None,
            carried: None,
        };
        checkpoint::save(k, &dir, state.step, &parts, None).unwrap()
    };
    for file in [ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE] {
        assert!(
            saved.join(ADAPTER_DIR).join(file).is_file(),
            "{file} is saved"
        );
    }
    let peft: serde_json::Value = serde_json::from_str(
        &fs::read_to_string(saved.join(ADAPTER_DIR).join(ADAPTER_CONFIG_FILE)).unwrap(),
    )
    .unwrap();
    assert_eq!(peft["r"], 4);
    assert_eq!(
        peft["target_modules"],
        serde_json::json!(["q_proj", "v_proj", "down_proj"])
    );

    let mut k = CpuBackend::new();
    let loaded = checkpoint::load::<_, SftState>(&mut k, &saved, None).unwrap();
    assert_eq!(loaded.model.lora_config(), first.model().lora_config());
    let mut resumed = TransformerPolicy::with_optimizer(k, loaded.model, loaded.optimizer.unwrap());
    assert_eq!(
        params(&mut resumed),
        params(&mut first),
        "the merged weights"
    );
    let mut second = SftTrainer::new(config, &data, loaded.state);
    while let Some(step) = second.next_step(&mut resumed, &data).unwrap() {
        resumed_losses.push(step.loss);
    }
    // The frozen weights come back as merged - s·B·A, which rounds: the same steps
    // follow to within f32 rounding, not bit for bit.
    assert_eq!(resumed_losses.len(), losses.len());
    for (step, (got, want)) in resumed_losses.iter().zip(&losses).enumerate() {
        assert!(
            (got - want).abs() <= 1e-4 * want.abs().max(1.0),
            "step {step}: loss {got} resumed against {want} straight"
        );
    }
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_lora_settings_and_adapter_files_are_named() {
    let unknown = LoraSettings {
        targets: vec!["qq_proj".into()],
        ..settings()
    };
    let error = unknown.config().unwrap_err();
    assert!(error.contains("unknown target `qq_proj`"), "{error}");
    let no_alpha = LoraSettings {
        alpha: 0.0,
        ..settings()
    };
    assert!(no_alpha.config().unwrap_err().contains("alpha"));
    assert_eq!(LoraSettings::default().config(), Ok(None), "off by default");
    let mut run = RunConfig::tiny("runs/unused");
    run.rl.lora = unknown;
    let error = run.validate().unwrap_err().to_string();
    assert!(
        error.contains("[rl.lora]") && error.contains("qq_proj"),
        "{error}"
    );

    // A checkpoint whose adapter files are damaged fails to load, naming what is wrong.
    let tk = tokenizer();
    let dir = temp_dir("bad-files");
    let mut policy = lora_policy(tk.vocab_size());
    let saved = {
        let (k, model, optimizer) = policy.parts_mut();
        let parts = CheckpointParts {
            model,
            optimizer: optimizer.map(|o| &*o),
            tokenizer: &tk,
            state: &SftState::default(),
            library: None,
            carried: None,
        };
        checkpoint::save(k, &dir, 1, &parts, None).unwrap()
    };
    let config_path = saved.join(ADAPTER_DIR).join(ADAPTER_CONFIG_FILE);
    let good = fs::read_to_string(&config_path).unwrap();
    fs::write(&config_path, good.replace("\"r\": 4", "\"r\": 0")).unwrap();
    let error = checkpoint::load::<_, SftState>(&mut CpuBackend::new(), &saved, None)
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("`r`"), "{error}");
    fs::write(&config_path, good.replace("\"r\": 4", "\"r\": 2")).unwrap();
    let error = checkpoint::load::<_, SftState>(&mut CpuBackend::new(), &saved, None)
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains("moments") || error.contains("lora_A"),
        "{error}"
    );
    fs::write(&config_path, &good).unwrap();
    fs::write(
        saved.join(ADAPTER_DIR).join(ADAPTER_WEIGHTS_FILE),
        b"not safetensors",
    )
    .unwrap();
    let error = checkpoint::load::<_, SftState>(&mut CpuBackend::new(), &saved, None)
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains(ADAPTER_WEIGHTS_FILE), "{error}");
    fs::remove_dir_all(&dir).unwrap();
}

/// Keeps the lines a run reports.
#[derive(Default)]
struct Lines(Vec<String>);

impl Reporter for Lines {
    fn stage(&mut self, _: &str) {}
    fn info(&mut self, message: &str) {
        self.0.push(message.to_owned());
    }
    fn result(&mut self, _: &str) {}
    fn sft_started(&mut self, _: u64, _: u64) {}
    fn sft_step(&mut self, _: &SftStep, _: f64) {}
    fn eval_wave(&mut self, _: &str, _: &str, _: usize, _: usize) {}
}

#[test]
fn the_demo_trains_through_sft_lora_settings() {
    let dir = temp_dir("demo");
    let mut config = RunConfig::tiny(&dir);
    config.sft.lora = settings();
    let mut lines = Lines::default();
    let mut on_step = |_: &mut TransformerPolicy<CpuBackend>,
                       _: &Tokenizer,
                       _: &SftStep,
                       _: SftState| { Ok::<(), PipelineError>(()) };
    let (_, policy, _) = run_demo(CpuBackend::new(), &config, &mut lines, &mut on_step).unwrap();
    let announced = lines
        .0
        .iter()
        .find(|l| l.starts_with("LoRA ([sft.lora]): adapters of rank 4, alpha 8 on q_proj"));
    assert!(announced.is_some(), "{:?}", lines.0);
    let trained = policy.model().trainable().0.len;
    assert!(
        trained < policy.model().params().len / 4,
        "{trained} trained"
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn rl_arms_train_through_rl_lora_settings() {
    let dir = temp_dir("experiment");
    let mut config = RunConfig::tiny(&dir);
    config.sft.epochs = 1;
    config.eval.splits = vec![sage_envs::scenarios::Split::Iid];
    config.eval.max_scenarios = 1;
    config.experiment.seeds = 1;
    config.experiment.arms = vec![sage_trainer::experiment::Arm::Sage];
    config.rl.lora = settings();
    let mut lines = Lines::default();
    let runs = sage_trainer::pipeline::experiment::run_experiment(
        CpuBackend::new(),
        &|| Ok(CpuBackend::new()),
        &config,
        false,
        &mut lines,
    )
    .unwrap();
    assert_eq!(runs.len(), 1);
    let announced = lines
        .0
        .iter()
        .filter(|l| l.starts_with("LoRA ([rl.lora]): adapters of rank 4"))
        .count();
    assert_eq!(announced, 1, "{:?}", lines.0);
    assert!(
        !lines.0.iter().any(|l| l.starts_with("LoRA ([sft.lora])")),
        "SFT trains every weight"
    );
    let _ = fs::remove_dir_all(&dir);
}
