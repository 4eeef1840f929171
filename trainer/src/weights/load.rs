//! Loading a Hugging Face Qwen2 or Llama checkpoint directory (`config.json` plus either
//! `model.safetensors` or `model.safetensors.index.json` and its shards) into a
//! [`Transformer`] on any [`Kernels`] backend.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io;
use std::path::{Path, PathBuf};

use safetensors::tensor::TensorView;
use safetensors::SafeTensors;
use sage_transformer::{Kernels, Transformer};
use serde::Deserialize;

use super::config_json::read_config;
use super::error::WeightsError;
use super::params::{
    check_shape, is_ignored_buffer, param_tensors, write_param, ParamTensor, EMBED, LM_HEAD,
};
use super::tensor_file::{decode, parse, read_file};
use super::{CONFIG_FILE, INDEX_FILE, SINGLE_FILE};

/// Reads `dir/config.json`, allocates a [`Transformer`] of that configuration on `k`
/// and loads its parameters from the checkpoint in `dir` (see [`load_params`]).
pub fn load_model<K: Kernels>(k: &mut K, dir: &Path) -> Result<Transformer, WeightsError> {
    load(k, dir, false)
}

/// [`load_model`] for inference only: the weights go to a frozen buffer
/// ([`Transformer::new_frozen`]), which a backend may hold at lower precision (the CUDA
/// backend's bf16 mode holds bf16 weights and no f32 copy). For evaluation and generation
/// (`sage eval`, `sage generate`).
pub fn load_frozen_model<K: Kernels>(k: &mut K, dir: &Path) -> Result<Transformer, WeightsError> {
    load(k, dir, true)
}

fn load<K: Kernels>(k: &mut K, dir: &Path, frozen: bool) -> Result<Transformer, WeightsError> {
    let config = read_config(&dir.join(CONFIG_FILE))?;
    let model = if frozen {
        Transformer::new_frozen(k, config)
    } else {
        Transformer::new(k, config)
    }
    .map_err(|e| WeightsError::backend("allocating the model", e))?;
    match load_params(k, &model, dir) {
        Ok(()) => Ok(model),
        Err(load_error) => {
            // The load error says what is wrong with the files; a failure to free the
            // half-loaded model's buffers would only hide it.
            let _ = model.free(k);
            Err(load_error)
        }
    }
}

/// Loads the parameters of `model` from the checkpoint in `dir`: `model.safetensors`
/// if it exists, else `model.safetensors.index.json` and the shards it names.
///
/// Every parameter must be present with the shape the configuration implies, stored
/// as F32, BF16 or F16; a tensor the model has no place for is an error (except the
/// `rotary_emb.inv_freq` buffers of old checkpoints). With tied embeddings,
/// `lm_head.weight` may be absent; if present it must equal the embedding table
/// exactly (after conversion to f32), since only one of them can be kept. On error
/// the parameters may be partly overwritten.
pub fn load_params<K: Kernels>(
    k: &mut K,
    model: &Transformer,
    dir: &Path,
) -> Result<(), WeightsError> {
    let params = param_tensors(model.layout());
    let tied = model.config().tie_word_embeddings;
    let known: BTreeSet<&str> = params.iter().map(|p| p.name.as_str()).collect();
    let check_known = |name: &str, file: &Path| {
        let allowed = known.contains(name) || (tied && name == LM_HEAD) || is_ignored_buffer(name);
        if allowed {
            Ok(())
        } else {
            Err(WeightsError::UnexpectedTensor {
                tensor: name.to_string(),
                file: file.to_path_buf(),
            })
        }
    };
    // The tied embedding table, against which a checkpoint's `lm_head.weight` is checked
    // (by the fingerprint of the values loaded: a frozen model's weights cannot be read
    // back).
    let tied_embed = params.iter().find(|p| tied && p.name == EMBED);

    let single = dir.join(SINGLE_FILE);
    if single.is_file() {
        let bytes = read_file(&single)?;
        let file = parse(&bytes, &single)?;
        for name in file.names() {
            check_known(name, &single)?;
        }
        let mut embed_print =
            Fingerprint::of(tied_embed.filter(|_| file.names().contains(&LM_HEAD)));
        for param in &params {
            let values = load_tensor(k, model, param, &single, &file)?;
            embed_print.note(param, &values);
        }
        return match tied_embed.filter(|_| file.names().contains(&LM_HEAD)) {
            Some(embed) => check_tied_head(embed, embed_print, &single, &file),
            None => Ok(()),
        };
    }

    let index = dir.join(INDEX_FILE);
    if !index.is_file() {
        let missing = io::Error::new(
            io::ErrorKind::NotFound,
            format!("neither {SINGLE_FILE} nor {INDEX_FILE} exists"),
        );
        return Err(WeightsError::io(&single, missing));
    }
    let weight_map = read_index(&index)?;
    for name in weight_map.keys() {
        check_known(name, &index)?;
    }
    let mut embed_print = Fingerprint::of(tied_embed.filter(|_| weight_map.contains_key(LM_HEAD)));
    let mut by_shard: BTreeMap<&str, Vec<&ParamTensor>> = BTreeMap::new();
    for param in &params {
        let shard = weight_map
            .get(&param.name)
            .ok_or_else(|| WeightsError::MissingTensor {
                tensor: param.name.clone(),
                file: index.clone(),
            })?;
        by_shard.entry(shard).or_default().push(param);
    }
    for (shard, wanted) in by_shard {
        let path = shard_path(dir, shard, &index)?;
        let bytes = read_file(&path)?;
        let file = parse(&bytes, &path)?;
        for param in wanted {
            let values = load_tensor(k, model, param, &path, &file)?;
            embed_print.note(param, &values);
        }
    }
    // Checked once every shard is loaded, since the embedding may be in a later one.
    if let (Some(embed), Some(shard)) = (tied_embed, weight_map.get(LM_HEAD)) {
        let path = shard_path(dir, shard, &index)?;
        let bytes = read_file(&path)?;
        check_tied_head(embed, embed_print, &path, &parse(&bytes, &path)?)?;
    }
    Ok(())
}

/// Loads `param` from `file` (the parsed contents of `path`) into `model`; returns the
/// values written.
fn load_tensor<K: Kernels>(
    k: &mut K,
    model: &Transformer,
    param: &ParamTensor,
    path: &Path,
    file: &SafeTensors<'_>,
) -> Result<Vec<f32>, WeightsError> {
    let view = tensor(file, &param.name, path)?;
    check_shape(param, view.shape(), path)?;
    let values = decode(&view, &param.name, path)?;
    write_param(k, model, param, &values)?;
    Ok(values)
}

/// A hash of the bits of one parameter's values as loaded: the tied embedding table's,
/// which a checkpoint's `lm_head.weight` must equal (none when the checkpoint has no
/// head to check).
struct Fingerprint<'a> {
    param: Option<&'a ParamTensor>,
    hash: Option<u64>,
}

impl<'a> Fingerprint<'a> {
    /// The fingerprint of `param`'s values, once [`Fingerprint::note`] has seen them.
    fn of(param: Option<&'a ParamTensor>) -> Fingerprint<'a> {
        Fingerprint { param, hash: None }
    }

    /// Takes `values` in when they are the fingerprinted parameter's.
    fn note(&mut self, param: &ParamTensor, values: &[f32]) {
        if self.param.is_some_and(|p| p.name == param.name) {
            self.hash = Some(hash_bits(values));
        }
    }
}

/// A hash of the bits of `values`.
fn hash_bits(values: &[f32]) -> u64 {
    let bits: Vec<u32> = values.iter().map(|v| v.to_bits()).collect();
    let mut hasher = DefaultHasher::new();
    bits.hash(&mut hasher);
    hasher.finish()
}

/// Tensor `name` of `file` (the contents of `path`).
fn tensor<'a>(
    file: &SafeTensors<'a>,
    name: &str,
    path: &Path,
) -> Result<TensorView<'a>, WeightsError> {
    file.tensor(name).map_err(|_| WeightsError::MissingTensor {
        tensor: name.to_string(),
        file: path.to_path_buf(),
    })
}

/// Checks that the `lm_head.weight` of `file` (the parsed contents of `path`) equals
/// the embedding table `embed` already loaded, whose fingerprint is `loaded`.
fn check_tied_head(
    embed: &ParamTensor,
    loaded: Fingerprint<'_>,
    path: &Path,
    file: &SafeTensors<'_>,
) -> Result<(), WeightsError> {
    let head = tensor(file, LM_HEAD, path)?;
    let as_head = ParamTensor {
        name: LM_HEAD.to_string(),
        ..embed.clone()
    };
    check_shape(&as_head, head.shape(), path)?;
    let head_values = decode(&head, LM_HEAD, path)?;
    if loaded.hash == Some(hash_bits(&head_values)) {
        Ok(())
    } else {
        Err(WeightsError::TiedMismatch {
            file: path.to_path_buf(),
        })
    }
}

/// The `weight_map` of a shard index: tensor name -> shard file name.
#[derive(Deserialize)]
struct ShardIndex {
    weight_map: BTreeMap<String, String>,
}

fn read_index(index: &Path) -> Result<BTreeMap<String, String>, WeightsError> {
    let bytes = read_file(index)?;
    let parsed: ShardIndex =
        serde_json::from_slice(&bytes).map_err(|e| WeightsError::format(index, e))?;
    Ok(parsed.weight_map)
}

/// The path of shard `name` in `dir`, which must be a plain file name that exists.
fn shard_path(dir: &Path, name: &str, index: &Path) -> Result<PathBuf, WeightsError> {
    if Path::new(name).file_name() != Some(OsStr::new(name)) {
        return Err(WeightsError::format(
            index,
            format_args!("shard name {name:?} is not a file name"),
        ));
    }
    let path = dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(WeightsError::MissingShard {
            shard: path,
            index: index.to_path_buf(),
        })
    }
}
