//! Saving a [`Transformer`] as a Hugging Face Qwen2 checkpoint directory that
//! transformers' `Qwen2ForCausalLM.from_pretrained` loads: `config.json` plus one
//! `model.safetensors`, or shards `model-0000i-of-0000n.safetensors` with
//! `model.safetensors.index.json`.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use sage_transformer::{Kernels, Transformer};
use serde_json::json;

use super::config_json::write_config;
use super::dtype::Dtype;
use super::error::WeightsError;
use super::params::{param_tensors, read_param, ParamTensor};
use super::tensor_file::{write_encoded, EncodedTensor};
use super::{CONFIG_FILE, INDEX_FILE, SINGLE_FILE};

/// How [`save_model`] stores the weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SaveOptions {
    /// The dtype on disk (the model computes in f32, so F32 is lossless).
    pub dtype: Dtype,
    /// Split the weights into shards of at most this many bytes of tensor data (a
    /// tensor larger than that gets a shard of its own); `None` writes one file.
    pub max_shard_bytes: Option<usize>,
}

impl Default for SaveOptions {
    /// One f32 `model.safetensors`.
    fn default() -> SaveOptions {
        SaveOptions {
            dtype: Dtype::F32,
            max_shard_bytes: None,
        }
    }
}

/// Writes `model`'s configuration and parameters into `dir` (created if needed).
///
/// Tied embeddings are saved as `model.embed_tokens.weight` only, as transformers
/// does. Files of the other layout (a single file when sharding, an index when not)
/// are removed so that the directory describes one checkpoint.
pub fn save_model<K: Kernels>(
    k: &mut K,
    model: &Transformer,
    dir: &Path,
    options: &SaveOptions,
) -> Result<(), WeightsError> {
    std::fs::create_dir_all(dir).map_err(|e| WeightsError::io(dir, e))?;
    let params = param_tensors(model.layout());
    let shards = plan_shards(&params, options);
    if let [only] = shards.as_slice() {
        write_shard(k, model, &dir.join(SINGLE_FILE), only, options.dtype)?;
        remove_if_present(&dir.join(INDEX_FILE))?;
    } else {
        let count = shards.len();
        let mut weight_map = BTreeMap::new();
        let mut total_size = 0;
        for (i, shard) in shards.iter().enumerate() {
            let name = format!("model-{:05}-of-{count:05}.safetensors", i + 1);
            total_size += write_shard(k, model, &dir.join(&name), shard, options.dtype)?;
            for param in shard {
                weight_map.insert(param.name.clone(), name.clone());
            }
        }
        let index = json!({"metadata": {"total_size": total_size}, "weight_map": weight_map});
        let index_path = dir.join(INDEX_FILE);
        let text = serde_json::to_string_pretty(&index)
            .map_err(|e| WeightsError::format(&index_path, e))?;
        std::fs::write(&index_path, text + "\n").map_err(|e| WeightsError::io(&index_path, e))?;
        remove_if_present(&dir.join(SINGLE_FILE))?;
    }
    write_config(&dir.join(CONFIG_FILE), model.config(), options.dtype)
}

/// Splits `params`, in slab order, into shards of at most `max_shard_bytes` each.
fn plan_shards<'a>(params: &'a [ParamTensor], options: &SaveOptions) -> Vec<Vec<&'a ParamTensor>> {
    let limit = options.max_shard_bytes.unwrap_or(usize::MAX);
    let mut shards: Vec<Vec<&ParamTensor>> = vec![Vec::new()];
    let mut bytes_in_last = 0usize;
    for param in params {
        let bytes = param.slot.len * options.dtype.size();
        let last_has_some = shards.last().is_some_and(|s| !s.is_empty());
        if last_has_some && bytes_in_last.saturating_add(bytes) > limit {
            shards.push(Vec::new());
            bytes_in_last = 0;
        }
        bytes_in_last = bytes_in_last.saturating_add(bytes);
        if let Some(last) = shards.last_mut() {
            last.push(param);
        }
    }
    shards
}

/// Writes `params` of `model` to the safetensors file `path` as `dtype`; returns the
/// bytes of tensor data written.
fn write_shard<K: Kernels>(
    k: &mut K,
    model: &Transformer,
    path: &Path,
    params: &[&ParamTensor],
    dtype: Dtype,
) -> Result<usize, WeightsError> {
    let mut tensors = Vec::with_capacity(params.len());
    let mut bytes = 0;
    for param in params {
        let values = read_param(k, model, param)?;
        let encoded = EncodedTensor::new(dtype, param.shape.clone(), &values);
        bytes += encoded.byte_len();
        tensors.push((param.name.clone(), encoded));
    }
    write_encoded(path, tensors)?;
    Ok(bytes)
}

fn remove_if_present(path: &Path) -> Result<(), WeightsError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(WeightsError::io(path, e)),
        _ => Ok(()),
    }
}
