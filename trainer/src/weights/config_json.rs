//! A Hugging Face Qwen2 or Llama `config.json` read into a [`ModelConfig`] and written
//! from one.
//!
//! The two families are one architecture here (RMSNorm, RoPE, SwiGLU, grouped-query
//! attention, the same tensor names); Qwen2 has a bias on q/k/v, Llama none. Reading
//! takes what the model needs, fills the fields transformers would default
//! (`num_key_value_heads` = heads, `rope_theta` 10000, `rms_norm_eps` 1e-6,
//! `max_position_embeddings` 32768 for Qwen2 and 2048 for Llama, untied embeddings),
//! ignores unknown fields, and rejects what this project cannot run (sliding-window
//! attention, RoPE scaling, an activation other than SiLU, a `head_dim` other than
//! hidden / heads, Llama's bias on the output projection or the MLP). The rotary base is
//! read from transformers 5's `rope_parameters` or the older top-level `rope_theta`.
//! Writing emits both, so transformers 4 and 5 load the result, and writes a model
//! without q/k/v bias as Llama (transformers' Qwen2 always has that bias).

use std::path::Path;

use sage_transformer::ModelConfig;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::dtype::Dtype;
use super::error::WeightsError;

/// The fields of a Hugging Face Qwen2 or Llama config that matter here.
#[derive(Deserialize)]
struct HfConfig {
    model_type: Option<String>,
    hidden_act: Option<String>,
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    max_position_embeddings: Option<usize>,
    rms_norm_eps: Option<f64>,
    rope_theta: Option<f64>,
    rope_parameters: Option<Value>,
    rope_scaling: Option<Value>,
    tie_word_embeddings: Option<bool>,
    use_sliding_window: Option<bool>,
    /// Not a transformers field: written by earlier versions of this project for Qwen2
    /// models without q/k/v bias (now written as Llama).
    qkv_bias: Option<bool>,
    /// Llama: a bias on q, k, v and o.
    attention_bias: Option<bool>,
    /// Llama: a bias in the MLP.
    mlp_bias: Option<bool>,
}

/// Reads a Hugging Face Qwen2 or Llama `config.json`.
pub fn read_config(path: &Path) -> Result<ModelConfig, WeightsError> {
    let text = std::fs::read_to_string(path).map_err(|e| WeightsError::io(path, e))?;
    parse_config(&text).map_err(|detail| WeightsError::config(path, detail))
}

/// Writes `config` as a Hugging Face `config.json` whose weights are stored as `dtype`:
/// Qwen2 when the model has q/k/v bias, Llama when it has none.
pub fn write_config(path: &Path, config: &ModelConfig, dtype: Dtype) -> Result<(), WeightsError> {
    write_config_with(path, config, dtype, &Map::new())
}

/// [`write_config`], with `extra` fields (a tokenizer's `bos_token_id`, say) added to the
/// JSON object.
pub fn write_config_with(
    path: &Path,
    config: &ModelConfig,
    dtype: Dtype,
    extra: &Map<String, Value>,
) -> Result<(), WeightsError> {
    let mut json = config_json(config, dtype);
    if let Some(fields) = json.as_object_mut() {
        fields.extend(extra.clone());
    }
    let mut text =
        serde_json::to_string_pretty(&json).map_err(|e| WeightsError::config(path, e))?;
    text.push('\n');
    std::fs::write(path, text).map_err(|e| WeightsError::io(path, e))
}

/// The [`ModelConfig`] described by the JSON `text`, or why there is none.
fn parse_config(text: &str) -> Result<ModelConfig, String> {
    let hf: HfConfig = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let llama = match hf.model_type.as_deref() {
        None | Some("qwen2") => false,
        Some("llama") => true,
        Some(other) => {
            return Err(format!(
                "model_type is {other:?}, expected \"qwen2\" or \"llama\""
            ))
        }
    };
    if llama && hf.attention_bias == Some(true) {
        return Err(
            "attention_bias: Llama's bias on q, k, v and o is not supported (only Qwen2's q/k/v bias)"
                .into(),
        );
    }
    if hf.mlp_bias == Some(true) {
        return Err("mlp_bias: a bias in the MLP is not supported".into());
    }
    if let Some(act) = hf.hidden_act.as_deref().filter(|&a| a != "silu") {
        return Err(format!(
            "hidden_act {act:?} is not supported (only \"silu\")"
        ));
    }
    if hf.use_sliding_window == Some(true) {
        return Err("sliding-window attention (use_sliding_window) is not supported".into());
    }
    for (field, value) in [
        ("rope_parameters", &hf.rope_parameters),
        ("rope_scaling", &hf.rope_scaling),
    ] {
        check_default_rope(field, value.as_ref())?;
    }
    let heads = hf.num_attention_heads;
    if let Some(head_dim) = hf.head_dim {
        if heads == 0 || head_dim * heads != hf.hidden_size {
            return Err(format!(
                "head_dim {head_dim} is not hidden_size / num_attention_heads"
            ));
        }
    }
    let rope_theta = hf
        .rope_parameters
        .as_ref()
        .and_then(|p| p.get("rope_theta"))
        .and_then(Value::as_f64)
        .or(hf.rope_theta)
        .unwrap_or(10_000.0);
    let config = ModelConfig {
        vocab_size: hf.vocab_size,
        hidden_size: hf.hidden_size,
        intermediate_size: hf.intermediate_size,
        num_hidden_layers: hf.num_hidden_layers,
        num_attention_heads: heads,
        num_key_value_heads: hf.num_key_value_heads.unwrap_or(heads),
        rope_theta: rope_theta as f32,
        rms_norm_eps: hf.rms_norm_eps.unwrap_or(1e-6) as f32,
        max_position_embeddings: hf.max_position_embeddings.unwrap_or(if llama {
            2048
        } else {
            32_768
        }),
        tie_word_embeddings: hf.tie_word_embeddings.unwrap_or(false),
        qkv_bias: !llama && hf.qkv_bias.unwrap_or(true),
    };
    config.validate().map_err(|e| e.to_string())?;
    Ok(config)
}

/// Accepts an absent or null RoPE description, or one of type "default".
fn check_default_rope(field: &str, value: Option<&Value>) -> Result<(), String> {
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return Ok(());
    };
    let Some(object) = value.as_object() else {
        return Err(format!("{field} must be an object or null"));
    };
    let kind = object
        .get("rope_type")
        .or_else(|| object.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    if kind != "default" {
        return Err(format!(
            "{field}: rope type {kind:?} is not supported (only \"default\")"
        ));
    }
    Ok(())
}

/// The JSON object of a Hugging Face Qwen2 (or, without q/k/v bias, Llama) config for
/// `config`.
fn config_json(config: &ModelConfig, dtype: Dtype) -> Value {
    let rope_theta = shortest_f64(config.rope_theta);
    let mut fields = Map::new();
    let mut set = |key: &str, value: Value| {
        fields.insert(key.to_string(), value);
    };
    if config.qkv_bias {
        set("architectures", json!(["Qwen2ForCausalLM"]));
        set("model_type", json!("qwen2"));
    } else {
        set("architectures", json!(["LlamaForCausalLM"]));
        set("model_type", json!("llama"));
        set("attention_bias", json!(false));
        set("mlp_bias", json!(false));
    }
    set("hidden_act", json!("silu"));
    set("torch_dtype", json!(dtype.torch_name()));
    set("vocab_size", json!(config.vocab_size));
    set("hidden_size", json!(config.hidden_size));
    set("intermediate_size", json!(config.intermediate_size));
    set("num_hidden_layers", json!(config.num_hidden_layers));
    set("num_attention_heads", json!(config.num_attention_heads));
    set("num_key_value_heads", json!(config.num_key_value_heads));
    set(
        "max_position_embeddings",
        json!(config.max_position_embeddings),
    );
    set("rms_norm_eps", json!(shortest_f64(config.rms_norm_eps)));
    set("rope_theta", json!(rope_theta));
    set(
        "rope_parameters",
        json!({"rope_theta": rope_theta, "rope_type": "default"}),
    );
    set("tie_word_embeddings", json!(config.tie_word_embeddings));
    set("attention_dropout", json!(0.0));
    set("initializer_range", json!(0.02));
    set("use_cache", json!(true));
    if config.qkv_bias {
        set("use_sliding_window", json!(false));
        set("sliding_window", Value::Null);
        set("max_window_layers", json!(config.num_hidden_layers));
    }
    Value::Object(fields)
}

/// `x` as the f64 with the shortest decimal form that reads back as `x` in f32
/// (so 1e-6f32 is written as 1e-6, not 9.999999974752427e-7).
fn shortest_f64(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(f64::from(x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transformers_5_config_with_extra_fields_reads() {
        let text = r#"{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
            "hidden_act": "silu", "vocab_size": 97, "hidden_size": 32,
            "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "max_position_embeddings": 64, "rms_norm_eps": 1e-06,
            "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"},
            "layer_types": ["full_attention", "full_attention"], "sliding_window": null,
            "use_sliding_window": false, "tie_word_embeddings": true, "bos_token_id": null}"#;
        let config = parse_config(text).unwrap();
        assert_eq!(config.rope_theta, 500_000.0);
        assert_eq!(config.num_key_value_heads, 2);
        assert!(config.tie_word_embeddings && config.qkv_bias);
    }

    #[test]
    fn transformers_4_config_fills_defaults() {
        let text = r#"{"vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
            "num_hidden_layers": 1, "num_attention_heads": 2, "rope_theta": 1000000.0,
            "rope_scaling": null, "torch_dtype": "bfloat16"}"#;
        let config = parse_config(text).unwrap();
        assert_eq!(config.num_key_value_heads, 2);
        assert_eq!(config.rope_theta, 1e6);
        assert_eq!(config.rms_norm_eps, 1e-6);
        assert!(!config.tie_word_embeddings);
    }

    #[test]
    fn unsupported_or_malformed_configs_say_why() {
        let base = r#""vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
            "num_hidden_layers": 1, "num_attention_heads": 2"#;
        for (extra, expected) in [
            (r#", "model_type": "mistral""#, "model_type"),
            (
                r#", "model_type": "llama", "attention_bias": true"#,
                "attention_bias",
            ),
            (r#", "model_type": "llama", "mlp_bias": true"#, "mlp_bias"),
            (
                r#", "model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8.0}"#,
                "llama3",
            ),
            (r#", "hidden_act": "gelu""#, "hidden_act"),
            (r#", "use_sliding_window": true"#, "sliding-window"),
            (
                r#", "rope_scaling": {"type": "yarn", "factor": 4.0}"#,
                "yarn",
            ),
            (r#", "head_dim": 16"#, "head_dim"),
            (r#", "num_key_value_heads": 3"#, "num_key_value_heads"),
            (r#", "max_position_embeddings": "long""#, "invalid type"),
        ] {
            let err = parse_config(&format!("{{{base}{extra}}}")).unwrap_err();
            assert!(err.contains(expected), "{extra}: {err}");
        }
        let err = parse_config(r#"{"hidden_size": 8}"#).unwrap_err();
        assert!(err.contains("missing field"), "{err}");
        assert!(parse_config("{\"vocab_size\": 10,").is_err());
    }

    #[test]
    fn written_config_reads_back() {
        let mut config = ModelConfig::tiny();
        let json = config_json(&config, Dtype::F32);
        assert_eq!(json["model_type"], json!("qwen2"));
        assert_eq!(parse_config(&json.to_string()).unwrap(), config);
        config.qkv_bias = false;
        let json = config_json(&config, Dtype::BF16);
        assert_eq!(json["rms_norm_eps"], json!(1e-6));
        assert_eq!(json["torch_dtype"], json!("bfloat16"));
        assert_eq!(json["architectures"], json!(["LlamaForCausalLM"]));
        assert_eq!(json["attention_bias"], json!(false));
        assert_eq!(parse_config(&json.to_string()).unwrap(), config);
    }

    #[test]
    fn llama_configs_read_without_bias() {
        let text = r#"{"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_act": "silu", "vocab_size": 49152, "hidden_size": 576,
            "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
            "num_key_value_heads": 3, "head_dim": 64, "max_position_embeddings": 8192,
            "rms_norm_eps": 1e-05, "rope_theta": 100000, "rope_scaling": null,
            "attention_bias": false, "mlp_bias": false, "pretraining_tp": 1,
            "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2}"#;
        let config = parse_config(text).unwrap();
        assert!(!config.qkv_bias && config.tie_word_embeddings);
        assert_eq!(config.rope_theta, 100_000.0);
        assert_eq!(config.rms_norm_eps, 1e-5);
        assert_eq!(config.num_key_value_heads, 3);
        let minimal = r#"{"model_type": "llama", "vocab_size": 32, "hidden_size": 8,
            "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2}"#;
        let config = parse_config(minimal).unwrap();
        assert!(!config.qkv_bias && !config.tie_word_embeddings);
        assert_eq!(config.max_position_embeddings, 2048);
    }

    #[test]
    fn earlier_qwen2_configs_without_bias_still_read() {
        let text = r#"{"model_type": "qwen2", "vocab_size": 32, "hidden_size": 8,
            "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
            "qkv_bias": false}"#;
        assert!(!parse_config(text).unwrap().qkv_bias);
    }
}
