//! Round trips through every dtype and layout, and every kind of bad file: each must
//! be a clear [`WeightsError`], never a panic.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use half::bf16;
use sage_backend_cpu::CpuBackend;
use sage_transformer::{Kernels, ModelConfig, Transformer};

use super::*;

/// A fresh, empty directory under the target's temporary directory.
fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("sage-weights-{}", std::process::id()))
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn config(tied: bool) -> ModelConfig {
    ModelConfig {
        vocab_size: 11,
        hidden_size: 8,
        intermediate_size: 12,
        num_hidden_layers: 2,
        num_attention_heads: 2,
        num_key_value_heads: 1,
        rope_theta: 10_000.0,
        rms_norm_eps: 1e-6,
        max_position_embeddings: 32,
        tie_word_embeddings: tied,
        qkv_bias: true,
    }
}

/// A model whose parameters are distinct, sign-varying values that bf16 and f16
/// cannot all represent exactly.
fn model(k: &mut CpuBackend, tied: bool) -> Transformer {
    let model = Transformer::new(k, config(tied)).unwrap();
    let values: Vec<f32> = (0..model.params().len)
        .map(|i| ((i as f32 * 0.7548776).fract() - 0.5) * 3.0 + 1e-4 * i as f32)
        .collect();
    k.write(model.params(), &values).unwrap();
    model
}

fn params(k: &mut CpuBackend, model: &Transformer) -> Vec<f32> {
    let mut values = vec![0.0; model.params().len];
    k.read(model.params(), &mut values).unwrap();
    values
}

fn saved(k: &mut CpuBackend, name: &str, tied: bool, options: SaveOptions) -> PathBuf {
    let dir = scratch_dir(name);
    let model = model(k, tied);
    save_model(k, &model, &dir, &options).unwrap();
    dir
}

fn load_err(k: &mut CpuBackend, dir: &Path) -> WeightsError {
    match load_model(k, dir) {
        Ok(_) => panic!("{} loaded, but it is broken", dir.display()),
        Err(e) => e,
    }
}

/// Asserts that the message of `err` names every one of `parts`.
fn assert_names(err: &WeightsError, parts: &[&str]) {
    let message = err.to_string();
    for part in parts {
        assert!(message.contains(part), "{message:?} does not name {part:?}");
    }
}

#[test]
fn f32_round_trip_is_bit_exact_single_and_sharded() {
    let mut k = CpuBackend::new();
    for (name, max_shard_bytes) in [("f32-single", None), ("f32-sharded", Some(600))] {
        for tied in [false, true] {
            let options = SaveOptions {
                dtype: Dtype::F32,
                max_shard_bytes,
            };
            let dir = saved(&mut k, name, tied, options);
            assert_eq!(dir.join(INDEX_FILE).is_file(), max_shard_bytes.is_some());
            let original = model(&mut k, tied);
            let loaded = load_model(&mut k, &dir).unwrap();
            assert_eq!(loaded.config(), original.config());
            let (a, b) = (params(&mut k, &original), params(&mut k, &loaded));
            assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
            // Frozen for inference: the same values (the CPU holds them in f32).
            let frozen = load_frozen_model(&mut k, &dir).unwrap();
            assert!(frozen.is_frozen() && !loaded.is_frozen());
            let c = params(&mut k, &frozen);
            assert!(a.iter().zip(&c).all(|(x, y)| x.to_bits() == y.to_bits()));
        }
    }
}

#[test]
fn bf16_and_f16_round_trips_round_each_value_once() {
    let mut k = CpuBackend::new();
    for dtype in [Dtype::BF16, Dtype::F16] {
        let options = SaveOptions {
            dtype,
            max_shard_bytes: None,
        };
        let dir = saved(&mut k, dtype.torch_name(), false, options);
        let original = model(&mut k, false);
        let loaded = load_model(&mut k, &dir).unwrap();
        let (a, b) = (params(&mut k, &original), params(&mut k, &loaded));
        for (x, y) in a.iter().zip(&b) {
            let rounded = dtype.decode(&dtype.encode(&[*x]))[0];
            assert_eq!(rounded.to_bits(), y.to_bits());
        }
        if dtype == Dtype::BF16 {
            assert!(a
                .iter()
                .zip(&b)
                .all(|(x, y)| (x - y).abs() <= x.abs() / 256.0));
            assert_eq!(bf16::from_f32(a[7]).to_f32(), b[7]);
        }
    }
}

#[test]
fn saving_one_layout_removes_the_other() {
    let mut k = CpuBackend::new();
    let dir = scratch_dir("relayout");
    let model = model(&mut k, false);
    let sharded = SaveOptions {
        max_shard_bytes: Some(600),
        ..SaveOptions::default()
    };
    save_model(&mut k, &model, &dir, &sharded).unwrap();
    save_model(&mut k, &model, &dir, &SaveOptions::default()).unwrap();
    assert!(dir.join(SINGLE_FILE).is_file() && !dir.join(INDEX_FILE).exists());
    save_model(&mut k, &model, &dir, &sharded).unwrap();
    assert!(!dir.join(SINGLE_FILE).exists() && dir.join(INDEX_FILE).is_file());
    load_model(&mut k, &dir).unwrap();
}

/// Rewrites the single-file checkpoint in `dir` with `edit` applied to its tensors.
fn edit_tensors(dir: &Path, edit: impl FnOnce(&mut BTreeMap<String, HostTensor>)) {
    let path = dir.join(SINGLE_FILE);
    let mut tensors = read_safetensors(&path).unwrap();
    edit(&mut tensors);
    write_safetensors(&path, &tensors, Dtype::F32).unwrap();
}

#[test]
fn tied_checkpoint_with_lm_head_must_match_the_embedding() {
    let mut k = CpuBackend::new();
    let dir = saved(&mut k, "tied-head", true, SaveOptions::default());
    let path = dir.join(SINGLE_FILE);
    assert!(!read_safetensors(&path)
        .unwrap()
        .contains_key("lm_head.weight"));
    edit_tensors(&dir, |t| {
        let embed = t["model.embed_tokens.weight"].clone();
        t.insert("lm_head.weight".into(), embed);
    });
    load_model(&mut k, &dir).unwrap();
    load_frozen_model(&mut k, &dir).unwrap();
    edit_tensors(&dir, |t| {
        if let Some(head) = t.get_mut("lm_head.weight") {
            head.data[3] += 0.5;
        }
    });
    let err = load_err(&mut k, &dir);
    assert!(matches!(err, WeightsError::TiedMismatch { .. }), "{err}");
    assert_names(&err, &["lm_head.weight", SINGLE_FILE]);
    // Checked without reading the weights back, which a frozen model may refuse.
    let err = load_frozen_model(&mut k, &dir)
        .err()
        .expect("a mismatched head");
    assert!(matches!(err, WeightsError::TiedMismatch { .. }), "{err}");
}

#[test]
fn truncated_files_are_errors_at_every_kind_of_length() {
    let mut k = CpuBackend::new();
    let dir = saved(&mut k, "truncated", false, SaveOptions::default());
    let path = dir.join(SINGLE_FILE);
    let bytes = std::fs::read(&path).unwrap();
    let header_end = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    for len in [
        0,
        3,
        8,
        9,
        header_end / 2,
        header_end,
        header_end + 5,
        bytes.len() - 1,
    ] {
        std::fs::write(&path, &bytes[..len]).unwrap();
        let err = load_err(&mut k, &dir);
        assert!(matches!(err, WeightsError::Format { .. }), "{len}: {err}");
        assert_names(&err, &[SINGLE_FILE]);
    }
}

#[test]
fn every_corrupted_header_byte_is_an_error() {
    let mut k = CpuBackend::new();
    let dir = saved(&mut k, "flipped", false, SaveOptions::default());
    let path = dir.join(SINGLE_FILE);
    let bytes = std::fs::read(&path).unwrap();
    let header_end = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let model = Transformer::new(&mut k, config(false)).unwrap();
    for position in 0..header_end {
        let mut corrupt = bytes.clone();
        // Turns any ASCII byte of the JSON header into invalid UTF-8, and makes any
        // byte of the length prefix announce a header longer than the file.
        corrupt[position] ^= 0xFF;
        std::fs::write(&path, &corrupt).unwrap();
        let err = load_params(&mut k, &model, &dir).unwrap_err();
        assert!(
            matches!(err, WeightsError::Format { .. }),
            "{position}: {err}"
        );
    }
}

#[test]
fn wrong_shape_missing_unexpected_and_unsupported_tensors_are_named() {
    let mut k = CpuBackend::new();
    let dir = saved(&mut k, "bad-tensors", false, SaveOptions::default());
    let path = dir.join(SINGLE_FILE);
    let pristine = std::fs::read(&path).unwrap();
    let k_proj = "model.layers.1.self_attn.k_proj.weight";

    edit_tensors(&dir, |t| {
        if let Some(tensor) = t.get_mut(k_proj) {
            tensor.shape.reverse();
        }
    });
    let err = load_err(&mut k, &dir);
    assert!(matches!(err, WeightsError::Shape { .. }), "{err}");
    assert_names(&err, &[k_proj, SINGLE_FILE, "[8, 4]", "[4, 8]"]);

    std::fs::write(&path, &pristine).unwrap();
    edit_tensors(&dir, |t| {
        t.remove(k_proj);
    });
    let err = load_err(&mut k, &dir);
    assert!(matches!(err, WeightsError::MissingTensor { .. }), "{err}");
    assert_names(&err, &[k_proj, SINGLE_FILE]);

    std::fs::write(&path, &pristine).unwrap();
    let extra = "model.layers.2.mlp.up_proj.weight";
    edit_tensors(&dir, |t| {
        let up = t["model.layers.1.mlp.up_proj.weight"].clone();
        t.insert(extra.into(), up);
    });
    let err = load_err(&mut k, &dir);
    assert!(
        matches!(err, WeightsError::UnexpectedTensor { .. }),
        "{err}"
    );
    assert_names(&err, &[extra, SINGLE_FILE]);

    std::fs::write(&path, &pristine).unwrap();
    let tensors = read_safetensors(&path).unwrap();
    write_with_one_int_tensor(&path, &tensors, k_proj);
    let err = load_err(&mut k, &dir);
    assert!(matches!(err, WeightsError::Dtype { .. }), "{err}");
    assert_names(&err, &[k_proj, SINGLE_FILE, "I32"]);
}

/// A tensor in any safetensors dtype, for writing files this module would not write.
struct RawTensor {
    dtype: safetensors::Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl safetensors::View for RawTensor {
    fn dtype(&self) -> safetensors::Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

/// Writes `tensors` to `path` in f32, except `int_tensor`, stored as I32.
fn write_with_one_int_tensor(
    path: &Path,
    tensors: &BTreeMap<String, HostTensor>,
    int_tensor: &str,
) {
    let raw = tensors.iter().map(|(name, t)| {
        let (dtype, bytes) = if name == int_tensor {
            let ints = t.data.iter().flat_map(|&v| (v as i32).to_le_bytes());
            (safetensors::Dtype::I32, ints.collect())
        } else {
            (safetensors::Dtype::F32, Dtype::F32.encode(&t.data))
        };
        let tensor = RawTensor {
            dtype,
            shape: t.shape.clone(),
            bytes,
        };
        (name.clone(), tensor)
    });
    safetensors::serialize_to_file(raw, None, path).unwrap();
}

#[test]
fn sharded_checkpoint_errors_name_the_index_or_the_shard() {
    let mut k = CpuBackend::new();
    let options = SaveOptions {
        dtype: Dtype::BF16,
        max_shard_bytes: Some(300),
    };
    let dir = saved(&mut k, "bad-shards", false, options);
    let index_path = dir.join(INDEX_FILE);
    let index_text = std::fs::read_to_string(&index_path).unwrap();
    let index: serde_json::Value = serde_json::from_str(&index_text).unwrap();
    let norm = "model.norm.weight";
    let norm_shard = index["weight_map"][norm].as_str().unwrap().to_string();

    let mut without_norm = index.clone();
    without_norm["weight_map"]
        .as_object_mut()
        .unwrap()
        .remove(norm);
    std::fs::write(&index_path, without_norm.to_string()).unwrap();
    let err = load_err(&mut k, &dir);
    assert!(matches!(err, WeightsError::MissingTensor { .. }), "{err}");
    assert_names(&err, &[norm, INDEX_FILE]);

    let mut misplaced = index.clone();
    misplaced["weight_map"][norm] = "model-00001-of-00099.safetensors".into();
    std::fs::write(&index_path, misplaced.to_string()).unwrap();
    let err = load_err(&mut k, &dir);
    assert!(matches!(err, WeightsError::MissingShard { .. }), "{err}");
    assert_names(&err, &["model-00001-of-00099.safetensors", INDEX_FILE]);

    let mut escaping = index.clone();
    escaping["weight_map"][norm] = "../model.safetensors".into();
    std::fs::write(&index_path, escaping.to_string()).unwrap();
    let err = load_err(&mut k, &dir);
    assert!(matches!(err, WeightsError::Format { .. }), "{err}");

    std::fs::write(&index_path, "{\"weight_map\": [").unwrap();
    let err = load_err(&mut k, &dir);
    assert!(matches!(err, WeightsError::Format { .. }), "{err}");
    assert_names(&err, &[INDEX_FILE]);

    std::fs::write(&index_path, &index_text).unwrap();
    let shard_path = dir.join(&norm_shard);
    let shard = std::fs::read(&shard_path).unwrap();
    let mut other_shard = index.clone();
    let other = if norm_shard.starts_with("model-00001") {
        "model-00002-of-"
    } else {
        "model-00001-of-"
    };
    let other_name = index["weight_map"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(|v| v.as_str())
        .find(|v| v.starts_with(other))
        .unwrap()
        .to_string();
    other_shard["weight_map"][norm] = other_name.clone().into();
    std::fs::write(&index_path, other_shard.to_string()).unwrap();
    let err = load_err(&mut k, &dir);
    assert!(matches!(err, WeightsError::MissingTensor { .. }), "{err}");
    assert_names(&err, &[norm, &other_name]);

    std::fs::write(&index_path, &index_text).unwrap();
    std::fs::remove_file(&shard_path).unwrap();
    let err = load_err(&mut k, &dir);
    assert!(matches!(err, WeightsError::MissingShard { .. }), "{err}");
    assert_names(&err, &[&norm_shard, INDEX_FILE]);

    std::fs::write(&shard_path, &shard[..shard.len() / 2]).unwrap();
    let err = load_err(&mut k, &dir);
    assert!(matches!(err, WeightsError::Format { .. }), "{err}");
    assert_names(&err, &[&norm_shard]);
}

#[test]
fn missing_or_bad_config_and_missing_weights_are_errors() {
    let mut k = CpuBackend::new();
    let dir = saved(&mut k, "bad-config", true, SaveOptions::default());
    let config_path = dir.join(CONFIG_FILE);
    let config_text = std::fs::read_to_string(&config_path).unwrap();
    let config = read_config(&config_path).unwrap();
    assert!(config.tie_word_embeddings);

    std::fs::write(&config_path, &config_text[..config_text.len() / 2]).unwrap();
    let err = load_err(&mut k, &dir);
    assert!(matches!(err, WeightsError::Config { .. }), "{err}");
    assert_names(&err, &[CONFIG_FILE]);

    std::fs::write(&config_path, config_text.replace("\"silu\"", "\"relu\"")).unwrap();
    let err = load_err(&mut k, &dir);
    assert_names(&err, &[CONFIG_FILE, "relu"]);

    std::fs::remove_file(&config_path).unwrap();
    let err = load_err(&mut k, &dir);
    assert!(matches!(err, WeightsError::Io { .. }), "{err}");
    assert_names(&err, &[CONFIG_FILE]);

    write_config(&config_path, &config, Dtype::F32).unwrap();
    std::fs::remove_file(dir.join(SINGLE_FILE)).unwrap();
    let err = load_err(&mut k, &dir);
    assert!(matches!(err, WeightsError::Io { .. }), "{err}");
    assert_names(&err, &[SINGLE_FILE, INDEX_FILE]);
}

#[test]
fn tied_head_is_checked_after_every_shard_loaded() {
    let mut k = CpuBackend::new();
    let options = SaveOptions {
        dtype: Dtype::F32,
        max_shard_bytes: Some(600),
    };
    let dir = saved(&mut k, "tied-shards", true, options);
    let index_path = dir.join(INDEX_FILE);
    let mut index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&index_path).unwrap()).unwrap();
    let map = index["weight_map"].as_object_mut().unwrap();
    // Move the embedding into a shard that sorts last, and lm_head into one before it.
    let embed_shard = map["model.embed_tokens.weight"]
        .as_str()
        .unwrap()
        .to_string();
    let head_shard = map["model.norm.weight"].as_str().unwrap().to_string();
    assert_ne!(embed_shard, head_shard);
    std::fs::rename(dir.join(&embed_shard), dir.join("z-last.safetensors")).unwrap();
    for shard in map.values_mut() {
        if shard.as_str() == Some(embed_shard.as_str()) {
            *shard = "z-last.safetensors".into();
        }
    }
    map.insert("lm_head.weight".into(), head_shard.clone().into());
    std::fs::write(&index_path, index.to_string()).unwrap();
    let embed = read_safetensors(&dir.join("z-last.safetensors")).unwrap()
        ["model.embed_tokens.weight"]
        .clone();
    let head_path = dir.join(&head_shard);
    let mut head_tensors = read_safetensors(&head_path).unwrap();
    head_tensors.insert("lm_head.weight".into(), embed);
    write_safetensors(&head_path, &head_tensors, Dtype::F32).unwrap();
    load_model(&mut k, &dir).unwrap();

    if let Some(head) = head_tensors.get_mut("lm_head.weight") {
        head.data[0] = -head.data[0];
    }
    write_safetensors(&head_path, &head_tensors, Dtype::F32).unwrap();
    let err = load_err(&mut k, &dir);
    assert!(matches!(err, WeightsError::TiedMismatch { .. }), "{err}");
    assert_names(&err, &[&head_shard]);
}
