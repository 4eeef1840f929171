//! LoRA adapters on disk in PEFT's layout, in the `adapter/` directory of the merged
//! model's: `adapter_config.json` (`r`, `lora_alpha`, `target_modules`) and
//! `adapter_model.safetensors` (every `base_model.model.model.layers.L.<module>.lora_A.weight`
//! `[r, in]` and `lora_B.weight` `[out, r]`, f32). The model directory's own weights are
//! already merged; the adapter applies to the model the run started from (PEFT's
//! `PeftModel.from_pretrained(base, DIR/adapter)`). It lives in a directory of its own
//! because transformers, where PEFT is installed, loads a directory holding an
//! `adapter_config.json` as an adapter of the base model that file names.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Value};

use sage_transformer::{AdapterLayout, Kernels, LoraConfig, Projection, Transformer};

use super::dtype::Dtype;
use super::error::WeightsError;
use super::tensor_file::{read_safetensors, write_safetensors, HostTensor};

/// The directory inside a model directory that holds its adapters.
pub const ADAPTER_DIR: &str = "adapter";
/// The adapters' settings, PEFT's name.
pub const ADAPTER_CONFIG_FILE: &str = "adapter_config.json";
/// The adapters' weights, PEFT's name.
pub const ADAPTER_WEIGHTS_FILE: &str = "adapter_model.safetensors";

/// Writes the adapters of `model` into `dir/adapter` (nothing when it has none).
pub fn save_adapters<K: Kernels>(
    k: &mut K,
    model: &Transformer,
    dir: &Path,
) -> Result<(), WeightsError> {
    let (Some(config), Some(layout), Some(slab)) = (
        model.lora_config(),
        model.adapter_layout(),
        model.adapter_params(),
    ) else {
        return Ok(());
    };
    let dir = dir.join(ADAPTER_DIR);
    std::fs::create_dir_all(&dir).map_err(|e| WeightsError::io(&dir, e))?;
    let mut values = vec![0.0f32; slab.len];
    k.read(slab, &mut values)
        .map_err(|e| WeightsError::backend("reading the LoRA adapters", e))?;
    let tensors: BTreeMap<String, HostTensor> = layout
        .named()
        .into_iter()
        .map(|(name, slot)| {
            let data = values[slot.offset..slot.offset + slot.len].to_vec();
            let shape = slot.shape.to_vec();
            (name, HostTensor { shape, data })
        })
        .collect();
    write_safetensors(&dir.join(ADAPTER_WEIGHTS_FILE), &tensors, Dtype::F32)?;
    let targets: Vec<&str> = config.targets.iter().map(|p| p.name()).collect();
    let peft = json!({
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": config.rank,
        "lora_alpha": config.alpha,
        "target_modules": targets,
        "lora_dropout": 0.0,
        "bias": "none",
        "fan_in_fan_out": false,
        "inference_mode": true,
        "base_model_name_or_path": Value::Null,
    });
    let path = dir.join(ADAPTER_CONFIG_FILE);
    let text = serde_json::to_string_pretty(&peft).map_err(|e| WeightsError::format(&path, e))?;
    std::fs::write(&path, text + "\n").map_err(|e| WeightsError::io(&path, e))
}

/// The adapters' config of the model directory `dir`, `None` when it holds no
/// `adapter/adapter_config.json`; a file
/// without a positive `r`, a positive `lora_alpha` or a list of known `target_modules`
/// is an error naming the field.
pub fn read_adapter_config(dir: &Path) -> Result<Option<LoraConfig>, WeightsError> {
    let path = dir.join(ADAPTER_DIR).join(ADAPTER_CONFIG_FILE);
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path).map_err(|e| WeightsError::io(&path, e))?;
    let peft: Value = serde_json::from_str(&text).map_err(|e| WeightsError::format(&path, e))?;
    let bad = |field: &str| WeightsError::config(&path, format!("`{field}` is missing or invalid"));
    let rank = peft["r"]
        .as_u64()
        .filter(|&r| r > 0)
        .ok_or_else(|| bad("r"))?;
    let alpha = peft["lora_alpha"]
        .as_f64()
        .ok_or_else(|| bad("lora_alpha"))?;
    let targets = peft["target_modules"]
        .as_array()
        .ok_or_else(|| bad("target_modules"))?
        .iter()
        .map(|name| {
            name.as_str()
                .and_then(Projection::from_name)
                .ok_or_else(|| bad(&format!("target_modules: {name}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let config = LoraConfig {
        rank: rank as usize,
        alpha: alpha as f32,
        targets,
    };
    config
        .validate()
        .map_err(|why| WeightsError::config(&path, why))?;
    Ok(Some(config))
}

/// Puts the adapters saved in `dir/adapter` (of `config`) on `model`, which holds the merged
/// weights saved with them, and takes the frozen weights back from those: the state the
/// run that saved them had. Every tensor is checked for presence and shape first.
pub fn restore_adapters<K: Kernels>(
    k: &mut K,
    model: &mut Transformer,
    dir: &Path,
    config: LoraConfig,
) -> Result<(), WeightsError> {
    let path = dir.join(ADAPTER_DIR).join(ADAPTER_WEIGHTS_FILE);
    let tensors = read_safetensors(&path)?;
    let layout = AdapterLayout::new(model.layout(), &config);
    let mut values = vec![0.0f32; layout.total];
    for (name, slot) in layout.named() {
        let tensor = tensors
            .get(&name)
            .ok_or_else(|| WeightsError::MissingTensor {
                tensor: name.clone(),
                file: path.clone(),
            })?;
        if tensor.shape != slot.shape {
            return Err(WeightsError::Shape {
                tensor: name,
                file: path,
                expected: slot.shape.to_vec(),
                found: tensor.shape.clone(),
            });
        }
        values[slot.offset..slot.offset + slot.len].copy_from_slice(&tensor.data);
    }
    model
        .restore_lora(k, config, &values)
        .map_err(|e| WeightsError::backend("restoring the LoRA adapters", e))
}
