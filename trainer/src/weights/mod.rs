//! Hugging Face Qwen2 and Llama checkpoints, both ways: a `Qwen2ForCausalLM` or
//! `LlamaForCausalLM` (no attention or MLP bias, default RoPE) saved by transformers
//! loads into a [`sage_transformer::Transformer`] on any
//! [`Kernels`](sage_transformer::Kernels) backend, and a model of this project
//! saves into a directory transformers loads (as Qwen2, or as Llama when it has no
//! q/k/v bias).
//!
//! This module owns the on-disk side: `config.json` ([`read_config`],
//! [`write_config`]), safetensors files in F32, BF16 or F16 ([`read_safetensors`],
//! [`write_safetensors`]), single-file and sharded checkpoints ([`load_model`],
//! [`load_params`], [`save_model`]), and the mapping between the tensor names both families share
//! (`model.layers.{i}.self_attn.q_proj.weight`, ...) and the parameter slab. The
//! model computes in f32: narrower dtypes are converted on load and on save.
//!
//! Files are read whole into memory (no memory mapping), one shard at a time.
//! Nothing here panics on a malformed file: every problem is a [`WeightsError`]
//! naming the file and, where there is one, the tensor.

mod adapters;
mod config_json;
mod dtype;
mod error;
mod load;
mod params;
mod save;
mod tensor_file;

#[cfg(all(test, feature = "cpu"))]
mod tests;

pub use adapters::{
    read_adapter_config, restore_adapters, save_adapters, ADAPTER_CONFIG_FILE, ADAPTER_DIR,
    ADAPTER_WEIGHTS_FILE,
};
pub use config_json::{read_config, write_config, write_config_with};
pub use dtype::Dtype;
pub use error::WeightsError;
pub use load::{load_frozen_model, load_model, load_params};
pub use save::{save_model, SaveOptions};
pub use tensor_file::{read_safetensors, write_safetensors, HostTensor};

/// The model's configuration in a checkpoint directory.
pub const CONFIG_FILE: &str = "config.json";
/// The weights of an unsharded checkpoint.
pub const SINGLE_FILE: &str = "model.safetensors";
/// The index of a sharded checkpoint: which shard holds each tensor.
pub const INDEX_FILE: &str = "model.safetensors.index.json";
