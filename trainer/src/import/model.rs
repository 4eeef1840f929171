//! A GGUF file's Llama or Qwen2 model as this project's [`ModelConfig`] and Hugging Face
//! tensors: GGUF's tensor names mapped to transformers', every tensor dequantized to
//! `f32`, and the rotary permutation llama.cpp's converter applies to a Llama model's
//! query and key projections undone (Qwen2's are stored as they are).

use std::collections::BTreeMap;

use sage_transformer::ModelConfig;

use super::gguf::{GgufFile, TensorInfo};
use super::ImportError;
use crate::weights::HostTensor;

/// The architectures this importer reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Architecture {
    /// `general.architecture = "llama"`: no bias; q/k rows permuted by the converter.
    Llama,
    /// `general.architecture = "qwen2"`: q/k/v bias; rows as transformers has them.
    Qwen2,
}

/// The model's settings from the file's metadata and its token embedding.
pub fn model_config(file: &GgufFile) -> Result<(Architecture, ModelConfig), ImportError> {
    let arch_name = text(file, "general.architecture")?;
    let arch = match arch_name {
        "llama" => Architecture::Llama,
        "qwen2" => Architecture::Qwen2,
        other => {
            return Err(ImportError::Unsupported(format!(
                "general.architecture is {other:?}: only \"llama\" and \"qwen2\" are supported"
            )))
        }
    };
    let key = |name: &str| format!("{arch_name}.{name}");
    let count = |name: &str| -> Result<usize, ImportError> {
        let k = key(name);
        file.get(&k)
            .and_then(|v| v.as_u64())
            .map(|v| v as usize)
            .ok_or_else(|| ImportError::Metadata(format!("{k} is missing or not a count")))
    };
    let number = |name: &str, default: f64| -> Result<f64, ImportError> {
        match file.get(&key(name)) {
            None => Ok(default),
            Some(v) => v
                .as_f64()
                .ok_or_else(|| ImportError::Metadata(format!("{} is not a number", key(name)))),
        }
    };
    if let Some(kind) = file.get(&key("rope.scaling.type")).and_then(|v| v.as_str()) {
        if kind != "none" {
            return Err(ImportError::Unsupported(format!(
                "{}: RoPE scaling {kind:?} is not supported",
                key("rope.scaling.type")
            )));
        }
    }
    if file
        .get(&key("expert_count"))
        .and_then(|v| v.as_u64())
        .unwrap_or(0)
        > 0
    {
        return Err(ImportError::Unsupported(
            "mixture-of-experts models are not supported".into(),
        ));
    }
    let hidden_size = count("embedding_length")?;
    let heads = count("attention.head_count")?;
    let kv_heads = match file.get(&key("attention.head_count_kv")) {
        None => heads,
        Some(_) => count("attention.head_count_kv")?,
    };
    if heads > 0 && hidden_size % heads == 0 {
        if let Some(rotary) = file
            .get(&key("rope.dimension_count"))
            .and_then(|v| v.as_u64())
        {
            if rotary as usize != hidden_size / heads {
                return Err(ImportError::Unsupported(format!(
                    "{} is {rotary}: RoPE on part of a head (of {}) is not supported",
                    key("rope.dimension_count"),
                    hidden_size / heads
                )));
            }
        }
    }
    let embedding = file
        .tensor("token_embd.weight")
        .ok_or_else(|| ImportError::Metadata("the file has no token_embd.weight".into()))?;
    let vocab_size = match embedding.dims.as_slice() {
        [width, vocab] if *width as usize == hidden_size => *vocab as usize,
        dims => {
            return Err(ImportError::Tensor {
                name: embedding.name.clone(),
                problem: format!("dimensions {dims:?}, expected [{hidden_size}, vocabulary]"),
            })
        }
    };
    let config = ModelConfig {
        vocab_size,
        hidden_size,
        intermediate_size: count("feed_forward_length")?,
        num_hidden_layers: count("block_count")?,
        num_attention_heads: heads,
        num_key_value_heads: kv_heads,
        rope_theta: number("rope.freq_base", 10_000.0)? as f32,
        rms_norm_eps: number("attention.layer_norm_rms_epsilon", 1e-6)? as f32,
        max_position_embeddings: match file.get(&key("context_length")) {
            None => 2048,
            Some(_) => count("context_length")?,
        },
        tie_word_embeddings: file.tensor("output.weight").is_none(),
        qkv_bias: file.tensor("blk.0.attn_q.bias").is_some(),
    };
    if arch == Architecture::Llama && config.qkv_bias {
        return Err(ImportError::Unsupported(
            "a Llama model with attention bias is not supported".into(),
        ));
    }
    config
        .validate()
        .map_err(|e| ImportError::Metadata(format!("the model's settings: {e}")))?;
    Ok((arch, config))
}

/// Every tensor of `file` (whose bytes are `bytes`) under its transformers name, in
/// `f32`, in PyTorch's shape; `on_tensor` sees each name as it is converted.
pub fn hf_tensors(
    file: &GgufFile,
    bytes: &[u8],
    arch: Architecture,
    config: &ModelConfig,
    on_tensor: &mut dyn FnMut(&str),
) -> Result<BTreeMap<String, HostTensor>, ImportError> {
    let mut out = BTreeMap::new();
    for info in &file.tensors {
        let name = hf_name(&info.name).ok_or_else(|| ImportError::Tensor {
            name: info.name.clone(),
            problem: "not a tensor of a Llama or Qwen2 model (for example rope_freqs, which \
                      scaled RoPE needs, is not supported)"
                .into(),
        })?;
        on_tensor(&name);
        let mut data = info
            .kind
            .dequantize(&bytes[info.start..info.start + info.bytes]);
        let shape = info.torch_shape();
        if arch == Architecture::Llama {
            let heads = match info.name.rsplit_once('.') {
                Some((stem, "weight")) if stem.ends_with(".attn_q") => {
                    Some(config.num_attention_heads)
                }
                Some((stem, "weight")) if stem.ends_with(".attn_k") => {
                    Some(config.num_key_value_heads)
                }
                _ => None,
            };
            if let Some(heads) = heads {
                data = unpermute_rows(info, &data, heads)?;
            }
        }
        out.insert(name, HostTensor { shape, data });
    }
    Ok(out)
}

/// The transformers name of GGUF tensor `name`.
fn hf_name(name: &str) -> Option<String> {
    let top = match name {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(top) = top {
        return Some(top.to_owned());
    }
    let rest = name.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (part, kind) = rest.rsplit_once('.')?;
    if kind != "weight" && kind != "bias" {
        return None;
    }
    let module = match part {
        "attn_norm" => "input_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{module}.{kind}"))
}

/// Undoes llama.cpp's permutation of a query or key projection of `heads` heads: within
/// each head it stores row `2 j + t` where transformers has row `t * half + j` (`half`
/// the head's width over two, `t` 0 or 1), so the rotary pairs sit side by side.
fn unpermute_rows(info: &TensorInfo, data: &[f32], heads: usize) -> Result<Vec<f32>, ImportError> {
    let columns = info.dims[0] as usize;
    let rows = data.len() / columns.max(1);
    if heads == 0 || rows % heads != 0 || (rows / heads) % 2 != 0 {
        return Err(ImportError::Tensor {
            name: info.name.clone(),
            problem: format!("{rows} rows are not {heads} heads of an even width"),
        });
    }
    let head_width = rows / heads;
    let half = head_width / 2;
    let mut out = vec![0.0; data.len()];
    for head in 0..heads {
        for j in 0..half {
            for t in 0..2 {
                let stored = head * head_width + 2 * j + t;
                let original = head * head_width + t * half + j;
                out[original * columns..(original + 1) * columns]
                    .copy_from_slice(&data[stored * columns..(stored + 1) * columns]);
            }
        }
    }
    Ok(out)
}

/// The text value of metadata `key`.
pub fn text<'a>(file: &'a GgufFile, key: &str) -> Result<&'a str, ImportError> {
    file.get(key)
        .and_then(|v| v.as_str())
        .ok_or_else(|| ImportError::Metadata(format!("{key} is missing or not text")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gguf_names_map_to_transformers_names() {
        assert_eq!(
            hf_name("token_embd.weight").unwrap(),
            "model.embed_tokens.weight"
        );
        assert_eq!(
            hf_name("blk.12.attn_q.bias").unwrap(),
            "model.layers.12.self_attn.q_proj.bias"
        );
        assert_eq!(
            hf_name("blk.0.ffn_down.weight").unwrap(),
            "model.layers.0.mlp.down_proj.weight"
        );
        assert_eq!(hf_name("rope_freqs.weight"), None);
        assert_eq!(hf_name("blk.x.attn_q.weight"), None);
        assert_eq!(hf_name("blk.0.attn_q.scale"), None);
    }
}
