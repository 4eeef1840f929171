//! `checkpoint` on the CPU backend: exact round trips of every part, bit-exact resume
//! of a training run, pruning to `keep_last`, leftovers of interrupted saves ignored,
//! and every kind of bad checkpoint refused with an error naming the file.

use std::fs;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

use sage_backend_cpu::CpuBackend;
use sage_core::skill::{parse_code, HashSkillLibrary, SkillLibrary};
use sage_core::{Origin, Policy, Skill};
use sage_trainer::checkpoint::{
    self, CheckpointError, CheckpointParts, CHATML_TEMPLATE, GENERATION_CONFIG_FILE, LIBRARY_FILE,
    MANIFEST_FILE, OPTIMIZER_FILE, STATE_FILE, TOKENIZER_CONFIG_FILE,
};
use sage_trainer::init::init_params;
use sage_trainer::optim::{AdamW, AdamWConfig, AdamWState, LrSchedule};
use sage_trainer::policy::TransformerPolicy;
use sage_trainer::tokenizer::{Tokenizer, TrainConfig, TOKENIZER_FILE};
use sage_transformer::{Kernels, ModelConfig, Transformer};
use serde::{Deserialize, Serialize};

/// The trainer state saved beside the model in these tests.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct RunState {
    /// The next batch to train on.
    next_batch: u64,
    /// Something that is not a number.
    note: String,
}

/// A fresh, empty directory under the system's temporary directory.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sage-checkpoint-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// A byte-level BPE of about `vocab_size` tokens.
fn tokenizer(vocab_size: usize) -> Tokenizer {
    let texts: Vec<String> = (0..200)
        .map(|i| {
            format!(
                "pay Ana {i} dollars, then mail Bo the receipt number {}",
                i * 7
            )
        })
        .collect();
    let config = TrainConfig {
        vocab_size,
        min_frequency: 2,
    };
    Tokenizer::train(texts, &config).unwrap()
}

/// A tiny tied-embedding model whose vocabulary is `vocab_size`.
fn model_config(vocab_size: usize, hidden_size: usize) -> ModelConfig {
    ModelConfig {
        vocab_size,
        hidden_size,
        intermediate_size: 2 * hidden_size,
        num_hidden_layers: 2,
        num_attention_heads: 2,
        num_key_value_heads: 1,
        rope_theta: 10_000.0,
        rms_norm_eps: 1e-6,
        max_position_embeddings: 32,
        tie_word_embeddings: true,
        qkv_bias: true,
    }
}

/// Warmup then cosine decay, decoupled weight decay and clipping: every part of the
/// optimizer's state matters to the next update.
fn adamw_config() -> AdamWConfig {
    AdamWConfig {
        schedule: LrSchedule::WarmupCosine {
            peak_lr: 1e-2,
            min_lr: 1e-3,
            warmup_steps: 2,
            total_steps: 8,
        },
        beta1: 0.9,
        beta2: 0.99,
        eps: 1e-8,
        weight_decay: 0.1,
        max_grad_norm: Some(0.5),
    }
}

/// A trainable policy over a freshly initialised model (the same seed, the same
/// model).
fn fresh_policy(vocab_size: usize, hidden_size: usize) -> TransformerPolicy<CpuBackend> {
    let mut k = CpuBackend::new();
    let model = Transformer::new(&mut k, model_config(vocab_size, hidden_size)).unwrap();
    init_params(&mut k, &model, 7).unwrap();
    TransformerPolicy::trainable(k, model, adamw_config()).unwrap()
}

/// Batch `index` of the training stream: three token sequences and their per-token
/// coefficients, a function of `index` only.
fn batch(index: u64, vocab_size: usize) -> (Vec<Vec<u32>>, Vec<Vec<f32>>) {
    let mut state = index.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let sequences: Vec<Vec<u32>> = (0..3)
        .map(|i| {
            (0..6 + i)
                .map(|_| (next() % vocab_size as u64) as u32)
                .collect()
        })
        .collect();
    let coefficients = sequences
        .iter()
        .map(|s| vec![-1.0 / (s.len() - 1) as f32; s.len() - 1])
        .collect();
    (sequences, coefficients)
}

/// Trains `policy` on batches `from..to`.
fn train(policy: &mut TransformerPolicy<CpuBackend>, from: u64, to: u64) {
    let vocab_size = policy.model().config().vocab_size;
    for index in from..to {
        let (sequences, coefficients) = batch(index, vocab_size);
        let sequences: Vec<&[u32]> = sequences.iter().map(Vec::as_slice).collect();
        let coefficients: Vec<&[f32]> = coefficients.iter().map(Vec::as_slice).collect();
        policy
            .accumulate_gradient(&sequences, &coefficients)
            .unwrap();
        policy.optimizer_step().unwrap();
    }
}

/// The bits of every parameter of `model`.
fn param_bits(k: &mut CpuBackend, model: &Transformer) -> Vec<u32> {
    let mut values = vec![0.0f32; model.params().len];
    k.read(model.params(), &mut values).unwrap();
    values.iter().map(|v| v.to_bits()).collect()
}

/// The bits of every parameter of `policy`'s model.
fn policy_bits(policy: &mut TransformerPolicy<CpuBackend>) -> Vec<u32> {
    let (k, model, _) = policy.parts_mut();
    param_bits(k, model)
}

/// The optimizer's state with moments as bits, so that equality is exact.
fn optimizer_bits(k: &mut CpuBackend, optimizer: &AdamW) -> (AdamWConfig, u32, Vec<u32>, Vec<u32>) {
    let AdamWState { config, step, m, v } = optimizer.export_state(k).unwrap();
    let bits = |values: Vec<f32>| values.iter().map(|x| x.to_bits()).collect();
    (config, step, bits(m), bits(v))
}

/// A library of two skills, one with counters and a revision.
fn library() -> HashSkillLibrary {
    let code = "def pay(person: str, amount: float) -> None:\n    \"\"\"Pay someone.\"\"\"\n    apis.venmo.pay(to=person, amount=amount)\n\ndef ping():\n    return 1\n";
    let origin = Origin {
        scenario_id: "pay-3".to_owned(),
        task_id: "pay-3-a".to_owned(),
    };
    let skills: Vec<Skill> = parse_code(code)
        .defs
        .iter()
        .map(|def| Skill::from_def(def, code, origin.clone()))
        .collect();
    let mut library = HashSkillLibrary::from_skills(skills).unwrap();
    library.record_used("pay", true).unwrap();
    library.record_retrieved("pay").unwrap();
    library
}

/// Saves `policy` with `tokenizer` and `state` as the checkpoint of `step`.
fn save_policy(
    policy: &mut TransformerPolicy<CpuBackend>,
    tokenizer: &Tokenizer,
    checkpoints: &Path,
    step: u64,
    state: &RunState,
    keep_last: Option<usize>,
) -> PathBuf {
    let (k, model, optimizer) = policy.parts_mut();
    let parts = CheckpointParts {
        model,
        optimizer: optimizer.map(|o| &*o),
        tokenizer,
        state,
        library: None,
        carried: None,
    };
    checkpoint::save(
        k,
        checkpoints,
        step,
        &parts,
        keep_last.and_then(NonZeroUsize::new),
    )
    .unwrap()
}

fn state_at(next_batch: u64) -> RunState {
    RunState {
        next_batch,
        note: format!("after batch {next_batch}"),
    }
}

/// Every part comes back exactly: parameters and moments bit for bit, step counter,
/// config, trainer state, skill library and tokenizer; an overriding optimizer config
/// replaces only the config.
#[test]
fn every_part_round_trips_exactly() {
    let tokenizer = tokenizer(300);
    let mut policy = fresh_policy(tokenizer.vocab_size(), 8);
    train(&mut policy, 0, 3);
    let checkpoints = scratch("round-trip");
    let state = state_at(3);
    let library = library();
    let (k, model, optimizer) = policy.parts_mut();
    let optimizer = optimizer.map(|o| &*o);
    let parts = CheckpointParts {
        model,
        optimizer,
        tokenizer: &tokenizer,
        state: &state,
        library: Some(&library),
        carried: None,
    };
    let dir = checkpoint::save(k, &checkpoints, 3, &parts, None).unwrap();
    assert_eq!(dir, checkpoints.join("step-000003"));
    let expected_params = param_bits(k, model);
    let expected_optimizer = optimizer_bits(k, optimizer.unwrap());
    assert_eq!(expected_optimizer.1, 3);
    assert!(expected_optimizer.2.iter().any(|&bits| bits != 0));

    let mut k2 = CpuBackend::new();
    let loaded = checkpoint::load::<_, RunState>(&mut k2, &dir, None).unwrap();
    assert_eq!(loaded.dir, dir);
    assert_eq!(loaded.step, 3);
    assert_eq!(param_bits(&mut k2, &loaded.model), expected_params);
    let restored = loaded.optimizer.as_ref().unwrap();
    assert_eq!(optimizer_bits(&mut k2, restored), expected_optimizer);
    assert_eq!(loaded.state, state);
    assert_eq!(loaded.library.as_ref(), Some(&library));
    assert_eq!(loaded.library.unwrap().get("pay").unwrap().stats.used, 1);
    assert_eq!(
        loaded.tokenizer.to_json().unwrap(),
        tokenizer.to_json().unwrap()
    );
    assert_eq!(loaded.model.config(), policy.model().config());

    let other = AdamWConfig {
        schedule: LrSchedule::Constant { lr: 5e-4 },
        ..adamw_config()
    };
    let overridden = checkpoint::load::<_, RunState>(&mut k2, &dir, Some(other.clone())).unwrap();
    let (config, step, m, v) = optimizer_bits(&mut k2, overridden.optimizer.as_ref().unwrap());
    assert_eq!(config, other);
    assert_eq!(
        (step, m, v),
        (3, expected_optimizer.2, expected_optimizer.3)
    );
}

/// A checkpoint saved without optimizer or library loads with neither.
#[test]
fn optional_parts_stay_absent() {
    let tokenizer = tokenizer(300);
    let mut k = CpuBackend::new();
    let model = Transformer::new(&mut k, model_config(tokenizer.vocab_size(), 8)).unwrap();
    init_params(&mut k, &model, 1).unwrap();
    let checkpoints = scratch("optional");
    let parts = CheckpointParts {
        model: &model,
        optimizer: None,
        tokenizer: &tokenizer,
        state: &state_at(0),
        library: None,
        carried: None,
    };
    let dir = checkpoint::save(&mut k, &checkpoints, 0, &parts, None).unwrap();
    assert!(!dir.join(OPTIMIZER_FILE).exists());
    assert!(!dir.join(LIBRARY_FILE).exists());
    let loaded = checkpoint::load::<_, RunState>(&mut k, &dir, Some(adamw_config())).unwrap();
    assert!(loaded.optimizer.is_none());
    assert!(loaded.library.is_none());
    assert_eq!(
        param_bits(&mut k, &loaded.model),
        param_bits(&mut k, &model)
    );
}

/// Training 6 steps straight and training 3, saving, loading and training 3 more give
/// the same parameters bit for bit; resuming with fresh moments instead does not.
#[test]
fn resuming_from_a_checkpoint_is_bit_exact() {
    let tokenizer = tokenizer(300);
    let vocab_size = tokenizer.vocab_size();
    let mut straight = fresh_policy(vocab_size, 8);
    train(&mut straight, 0, 3);
    let halfway = policy_bits(&mut straight);
    train(&mut straight, 3, 6);
    let expected = policy_bits(&mut straight);
    assert_ne!(halfway, expected, "training must change the parameters");

    let checkpoints = scratch("resume");
    let mut first_half = fresh_policy(vocab_size, 8);
    train(&mut first_half, 0, 3);
    save_policy(
        &mut first_half,
        &tokenizer,
        &checkpoints,
        3,
        &state_at(3),
        None,
    );
    drop(first_half);

    let mut k = CpuBackend::new();
    let loaded = checkpoint::load_latest::<_, RunState>(&mut k, &checkpoints, Some(adamw_config()))
        .unwrap()
        .unwrap();
    assert_eq!(loaded.step, 3);
    let next_batch = loaded.state.next_batch;
    let optimizer = loaded.optimizer.unwrap();
    let mut resumed = TransformerPolicy::with_optimizer(k, loaded.model, optimizer);
    train(&mut resumed, next_batch, 6);
    assert_eq!(policy_bits(&mut resumed), expected);

    let mut k = CpuBackend::new();
    let loaded = checkpoint::load_latest::<_, RunState>(&mut k, &checkpoints, None)
        .unwrap()
        .unwrap();
    let mut without_moments =
        TransformerPolicy::trainable(k, loaded.model, adamw_config()).unwrap();
    train(&mut without_moments, next_batch, 6);
    assert_ne!(policy_bits(&mut without_moments), expected);
}

/// With `keep_last` 2, five saves leave the two newest; without it every one stays.
/// Saving a step again replaces its checkpoint.
#[test]
fn keep_last_prunes_the_oldest() {
    let tokenizer = tokenizer(300);
    let mut policy = fresh_policy(tokenizer.vocab_size(), 8);
    let checkpoints = scratch("keep-last");
    for step in 1..=5 {
        save_policy(
            &mut policy,
            &tokenizer,
            &checkpoints,
            step,
            &state_at(step),
            Some(2),
        );
    }
    let steps: Vec<u64> = checkpoint::list(&checkpoints)
        .unwrap()
        .into_iter()
        .map(|(step, _)| step)
        .collect();
    assert_eq!(steps, [4, 5]);
    let mut names: Vec<String> = fs::read_dir(&checkpoints)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["step-000004", "step-000005"]);

    let unpruned = scratch("keep-all");
    for step in 1..=3 {
        save_policy(
            &mut policy,
            &tokenizer,
            &unpruned,
            step,
            &state_at(step),
            None,
        );
    }
    assert_eq!(checkpoint::list(&unpruned).unwrap().len(), 3);
    save_policy(&mut policy, &tokenizer, &unpruned, 2, &state_at(99), None);
    let mut k = CpuBackend::new();
    let again =
        checkpoint::load::<_, RunState>(&mut k, &unpruned.join("step-000002"), None).unwrap();
    assert_eq!(again.state.next_batch, 99);
}

/// A save interrupted before its rename (a `.tmp-*` directory, even a full one) and a
/// `step-*` directory without a manifest are invisible to `latest`; the next save
/// removes the leftover and leaves the foreign directory alone.
#[test]
fn interrupted_saves_are_ignored() {
    let tokenizer = tokenizer(300);
    let mut policy = fresh_policy(tokenizer.vocab_size(), 8);
    let checkpoints = scratch("interrupted");
    assert_eq!(
        checkpoint::latest(&checkpoints.join("none-yet")).unwrap(),
        None
    );
    let complete = save_policy(&mut policy, &tokenizer, &checkpoints, 2, &state_at(2), None);

    let leftover = checkpoints.join(".tmp-step-000009-4242");
    fs::create_dir(&leftover).unwrap();
    for entry in fs::read_dir(&complete).unwrap() {
        let entry = entry.unwrap();
        fs::copy(entry.path(), leftover.join(entry.file_name())).unwrap();
    }
    let half_written = checkpoints.join("step-000010");
    fs::create_dir(&half_written).unwrap();
    fs::copy(complete.join(STATE_FILE), half_written.join(STATE_FILE)).unwrap();

    assert_eq!(
        checkpoint::latest(&checkpoints).unwrap(),
        Some(complete.clone())
    );
    assert_eq!(checkpoint::list(&checkpoints).unwrap(), [(2, complete)]);
    let mut k = CpuBackend::new();
    let error = checkpoint::load::<_, RunState>(&mut k, &half_written, None)
        .err()
        .unwrap();
    assert!(
        matches!(error, CheckpointError::Incomplete { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("step-000010"), "{error}");

    let newest = save_policy(&mut policy, &tokenizer, &checkpoints, 3, &state_at(3), None);
    assert_eq!(checkpoint::latest(&checkpoints).unwrap(), Some(newest));
    assert!(!leftover.exists());
    assert!(half_written.exists());
}

/// A saved checkpoint of `policy` at step 1 in a fresh directory `name`.
fn saved(name: &str, tokenizer: &Tokenizer, hidden_size: usize) -> PathBuf {
    let mut policy = fresh_policy(tokenizer.vocab_size(), hidden_size);
    train(&mut policy, 0, 1);
    save_policy(
        &mut policy,
        tokenizer,
        &scratch(name),
        1,
        &state_at(1),
        None,
    )
}

/// The error of loading `dir`.
fn load_error(dir: &Path) -> CheckpointError {
    let mut k = CpuBackend::new();
    match checkpoint::load::<_, RunState>(&mut k, dir, None) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => e,
    }
}

/// A truncated, a bit-flipped and a foreign `optimizer.bin` are each refused with an
/// error naming the file.
#[test]
fn corrupt_optimizer_state_is_refused() {
    let tokenizer = tokenizer(300);
    let dir = saved("corrupt-optimizer", &tokenizer, 8);
    let path = dir.join(OPTIMIZER_FILE);
    let original = fs::read(&path).unwrap();

    fs::write(&path, &original[..original.len() - 10]).unwrap();
    let error = load_error(&dir);
    assert!(
        matches!(error, CheckpointError::CorruptOptimizer { .. }),
        "{error}"
    );
    let message = error.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("truncated"), "{message}");

    let mut flipped = original.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x10;
    fs::write(&path, &flipped).unwrap();
    let message = load_error(&dir).to_string();
    assert!(message.contains("optimizer.bin"), "{message}");
    assert!(message.contains("checksum"), "{message}");

    let mut foreign = original.clone();
    foreign[..8].copy_from_slice(b"NOTADAMW");
    fs::write(&path, &foreign).unwrap();
    let message = load_error(&dir).to_string();
    assert!(message.contains("optimizer.bin"), "{message}");
    assert!(message.contains("SAGEADAM"), "{message}");

    fs::write(&path, &original).unwrap();
    let mut k = CpuBackend::new();
    assert!(checkpoint::load::<_, RunState>(&mut k, &dir, None).is_ok());
}

/// Moments of a larger model are refused, naming the file and both sizes.
#[test]
fn moments_of_another_model_are_refused() {
    let tokenizer = tokenizer(300);
    let small = saved("moments-small", &tokenizer, 8);
    let large = saved("moments-large", &tokenizer, 16);
    fs::copy(large.join(OPTIMIZER_FILE), small.join(OPTIMIZER_FILE)).unwrap();
    let mut k = CpuBackend::new();
    let small_params = Transformer::new(&mut k, model_config(tokenizer.vocab_size(), 8))
        .unwrap()
        .params()
        .len;
    let large_params = Transformer::new(&mut k, model_config(tokenizer.vocab_size(), 16))
        .unwrap()
        .params()
        .len;
    match load_error(&small) {
        CheckpointError::MomentLength {
            file,
            moments,
            params,
        } => {
            assert_eq!(file, small.join(OPTIMIZER_FILE));
            assert_eq!((moments, params), (large_params, small_params));
        }
        other => panic!("unexpected error: {other}"),
    }
}

/// A missing part is named; a malformed state is named.
#[test]
fn missing_or_malformed_parts_are_named() {
    let tokenizer = tokenizer(300);
    let dir = saved("missing", &tokenizer, 8);
    fs::write(dir.join(STATE_FILE), "{\"next_batch\": \"three\"}").unwrap();
    let message = load_error(&dir).to_string();
    assert!(message.contains("state.json"), "{message}");

    fs::remove_file(dir.join(STATE_FILE)).unwrap();
    match load_error(&dir) {
        CheckpointError::Missing { file } => assert_eq!(file, dir.join(STATE_FILE)),
        other => panic!("unexpected error: {other}"),
    }

    let dir = saved("missing-optimizer", &tokenizer, 8);
    fs::remove_file(dir.join(OPTIMIZER_FILE)).unwrap();
    let message = load_error(&dir).to_string();
    assert!(message.contains("optimizer.bin"), "{message}");
    assert!(message.contains("missing"), "{message}");

    fs::remove_file(dir.join(MANIFEST_FILE)).unwrap();
    assert!(matches!(
        load_error(&dir),
        CheckpointError::Incomplete { .. }
    ));
}

/// A tokenizer larger than the model's vocabulary is refused at load (naming
/// `tokenizer.json`) and at save (writing nothing).
#[test]
fn a_tokenizer_larger_than_the_model_vocabulary_is_refused() {
    let small = tokenizer(270);
    let large = tokenizer(330);
    assert!(large.vocab_size() > small.vocab_size());
    let dir = saved("vocab-load", &small, 8);
    large.save(dir.join(TOKENIZER_FILE)).unwrap();
    match load_error(&dir) {
        CheckpointError::VocabMismatch {
            file,
            tokenizer_vocab,
            model_vocab,
        } => {
            assert_eq!(file, dir.join(TOKENIZER_FILE));
            assert_eq!(
                (tokenizer_vocab, model_vocab),
                (large.vocab_size(), small.vocab_size())
            );
        }
        other => panic!("unexpected error: {other}"),
    }

    let mut k = CpuBackend::new();
    let model = Transformer::new(&mut k, model_config(small.vocab_size(), 8)).unwrap();
    let checkpoints = scratch("vocab-save");
    let parts = CheckpointParts {
        model: &model,
        optimizer: None,
        tokenizer: &large,
        state: &state_at(0),
        library: None,
        carried: None,
    };
    let error = checkpoint::save(&mut k, &checkpoints, 1, &parts, None)
        .err()
        .unwrap();
    assert!(error.to_string().contains("tokenizer.json"), "{error}");
    assert!(checkpoint::list(&checkpoints).unwrap().is_empty());
}

/// A checkpoint holds what Hugging Face tools read beside the tokenizer: the ChatML
/// chat template with `<|im_end|>` as the end of a turn, and a generation config that
/// stops there; the files of the run's `--init` model (its tokenizer and generation
/// configs, its config's special-token ids) are kept as they are.
#[test]
fn checkpoints_carry_the_hugging_face_tokenizer_and_generation_configs() {
    let tokenizer = tokenizer(300);
    let special = tokenizer.special_tokens();
    let mut policy = fresh_policy(tokenizer.vocab_size(), 8);
    let checkpoints = scratch("hf-files");
    let dir = save_policy(&mut policy, &tokenizer, &checkpoints, 1, &state_at(1), None);
    let read_in = |dir: &std::path::Path, name: &str| -> serde_json::Value {
        serde_json::from_slice(&fs::read(dir.join(name)).unwrap()).unwrap()
    };
    let read = |name: &str| read_in(&dir, name);
    let config = read(TOKENIZER_CONFIG_FILE);
    assert_eq!(config["eos_token"], "<|im_end|>");
    assert_eq!(config["pad_token"], "<|endoftext|>");
    assert_eq!(config["chat_template"], CHATML_TEMPLATE);
    let generation = read(GENERATION_CONFIG_FILE);
    assert_eq!(
        generation["eos_token_id"],
        serde_json::json!([special.im_end, special.end_of_text])
    );

    // A pretrained model's own files, as an --init directory holds them.
    let source = scratch("hf-files-source");
    let generation = serde_json::json!({"eos_token_id": 7, "temperature": 0.7, "top_p": 0.8});
    let own_tokenizer = serde_json::json!({
        "chat_template": "{{ 'You are a helpful assistant' }}", "bos_token": "<|endoftext|>",
    });
    fs::write(source.join(GENERATION_CONFIG_FILE), generation.to_string()).unwrap();
    fs::write(
        source.join(TOKENIZER_CONFIG_FILE),
        own_tokenizer.to_string(),
    )
    .unwrap();
    fs::write(
        source.join("config.json"),
        r#"{"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": null, "hidden_size": 8}"#,
    )
    .unwrap();
    let carried = checkpoint::CarriedFiles::read(&source).unwrap();
    assert_eq!(carried.config_token_ids.len(), 2, "{carried:?}");
    let (k, model, optimizer) = policy.parts_mut();
    let parts = CheckpointParts {
        model,
        optimizer: optimizer.map(|o| &*o),
        tokenizer: &tokenizer,
        state: &state_at(2),
        library: None,
        carried: Some(&carried),
    };
    let dir = checkpoint::save(k, &checkpoints, 2, &parts, None).unwrap();
    assert_eq!(
        checkpoint::read_generation_config(&dir).unwrap(),
        Some(generation)
    );
    assert_eq!(read_in(&dir, TOKENIZER_CONFIG_FILE), own_tokenizer);
    let config = read_in(&dir, "config.json");
    assert_eq!(
        (
            config["bos_token_id"].clone(),
            config["eos_token_id"].clone()
        ),
        (1.into(), 2.into())
    );
    assert_eq!(config["hidden_size"], 8, "the model's own config otherwise");
    sage_trainer::weights::read_config(&dir.join("config.json")).expect("still a valid config");
    fs::remove_dir_all(&source).unwrap();
    assert_eq!(
        checkpoint::read_generation_config(&checkpoints).unwrap(),
        None
    );
}
