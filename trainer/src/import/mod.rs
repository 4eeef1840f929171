//! `sage import`: a GGUF file (the format llama.cpp and most published quantized models
//! use) turned into a Hugging Face model directory that this project and transformers
//! load: `config.json`, `model.safetensors` (every tensor dequantized), `tokenizer.json`,
//! `tokenizer_config.json` (with the file's chat template) and `generation_config.json`.
//!
//! Supported: Llama and Qwen2 models (`general.architecture`), tensors in F32, F16, BF16,
//! Q4_0, Q4_1, Q8_0, Q4_K and Q6_K, GPT-2-style byte-level BPE tokenizers. Anything
//! else, and every truncated or corrupt file, is an [`ImportError`] naming the tensor or
//! the metadata key and what is wrong with it; nothing is written then.
//!
//! - `gguf.rs`: the container (metadata, tensor directory), bounds-checked;
//! - `quant.rs`: the tensor encodings and their dequantization;
//! - `model.rs`: the model's settings, tensor names and llama.cpp's q/k permutation;
//! - `tokenizer_files.rs`: the tokenizer's Hugging Face files.

use std::fmt;
use std::path::{Path, PathBuf};

mod gguf;
mod model;
mod quant;
mod tokenizer_files;

pub use gguf::{GgufFile, TensorInfo, Value};
pub use model::Architecture;
pub use quant::TensorType;

use crate::files::write_atomic;
use crate::weights::{
    write_config_with, write_safetensors, Dtype, WeightsError, CONFIG_FILE, SINGLE_FILE,
};

/// Why a GGUF file could not be imported.
#[derive(Debug)]
pub enum ImportError {
    /// The file could not be read, or the output not written.
    Io(PathBuf, std::io::Error),
    /// The container is malformed or truncated.
    Format(String),
    /// A metadata key is missing or has the wrong type.
    Metadata(String),
    /// A tensor is malformed, of an unsupported type, or not part of a supported model.
    Tensor {
        /// The tensor's GGUF name.
        name: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The model or tokenizer is of a kind this importer does not support.
    Unsupported(String),
    /// Writing the weights or the config failed.
    Weights(WeightsError),
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImportError::Io(path, e) => write!(f, "{}: {e}", path.display()),
            ImportError::Format(m) => write!(f, "GGUF: {m}"),
            ImportError::Metadata(m) => write!(f, "GGUF metadata: {m}"),
            ImportError::Tensor { name, problem } => write!(f, "GGUF tensor {name}: {problem}"),
            ImportError::Unsupported(m) => write!(f, "unsupported model: {m}"),
            ImportError::Weights(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ImportError {}

/// What an import wrote.
#[derive(Clone, Debug)]
pub struct ImportSummary {
    /// The model's architecture.
    pub architecture: Architecture,
    /// Its settings, as `config.json` has them.
    pub config: sage_transformer::ModelConfig,
    /// Tensors written.
    pub tensors: usize,
    /// How many tensors of each GGML type the file held.
    pub types: Vec<(TensorType, usize)>,
}

/// Imports the GGUF file `gguf` into the new directory `out`, the weights stored as
/// `dtype`; `on_tensor` sees each tensor's transformers name as it is converted.
pub fn import_gguf(
    gguf: &Path,
    out: &Path,
    dtype: Dtype,
    on_tensor: &mut dyn FnMut(&str),
) -> Result<ImportSummary, ImportError> {
    if out.join(CONFIG_FILE).exists() {
        return Err(ImportError::Io(
            out.to_path_buf(),
            std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "already holds a model (config.json); import into a new directory",
            ),
        ));
    }
    let bytes = std::fs::read(gguf).map_err(|e| ImportError::Io(gguf.to_path_buf(), e))?;
    let file = GgufFile::parse(&bytes)?;
    let (architecture, config) = model::model_config(&file)?;
    let tokenizer = tokenizer_files::tokenizer_files(&file, config.max_position_embeddings)?;
    let tensors = model::hf_tensors(&file, &bytes, architecture, &config, on_tensor)?;
    let mut types: Vec<(TensorType, usize)> = Vec::new();
    for info in &file.tensors {
        match types.iter_mut().find(|(kind, _)| *kind == info.kind) {
            Some((_, count)) => *count += 1,
            None => types.push((info.kind, 1)),
        }
    }
    std::fs::create_dir_all(out).map_err(|e| ImportError::Io(out.to_path_buf(), e))?;
    write_safetensors(&out.join(SINGLE_FILE), &tensors, dtype).map_err(ImportError::Weights)?;
    for (name, json) in [
        ("tokenizer.json", &tokenizer.tokenizer),
        ("tokenizer_config.json", &tokenizer.config),
        ("generation_config.json", &tokenizer.generation),
    ] {
        let path = out.join(name);
        let text =
            serde_json::to_string_pretty(json).map_err(|e| ImportError::Format(e.to_string()))?;
        write_atomic(&path, text.as_bytes()).map_err(|e| ImportError::Io(path.clone(), e))?;
    }
    // Written last: a directory with a config.json holds a whole model. Its
    // special-token ids are the tokenizer's, as transformers' configs carry them.
    write_config_with(&out.join(CONFIG_FILE), &config, dtype, &tokenizer.ids)
        .map_err(ImportError::Weights)?;
    Ok(ImportSummary {
        architecture,
        config,
        tensors: tensors.len(),
        types,
    })
}
