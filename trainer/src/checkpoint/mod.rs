//! Training checkpoints: everything a run needs to resume exactly, written atomically.
//!
//! This module owns the checkpoint directory `RUN/checkpoints/` and the layout of each
//! checkpoint in it, `step-000123/`:
//! - `model.safetensors` and `config.json`: the model, as a Hugging Face Qwen2
//!   checkpoint in f32 (lossless; see [`crate::weights`]), so transformers loads it;
//! - `tokenizer.json`: the tokenizer (see [`crate::tokenizer`]);
//! - `tokenizer_config.json` and `generation_config.json`: what Hugging Face tools read
//!   beside them (the ChatML template, the end-of-turn token; `hf_files.rs`);
//! - `optimizer.bin` (when the run trains): AdamW's config, step counter and moments,
//!   with a length check and a checksum;
//! - `state.json`: the trainer's own state (position in the data, RNG seeds, ...), any
//!   serde type;
//! - `library.json` (optional): a skill library;
//! - `checkpoint.json`: the manifest (step, which optional parts are present), written
//!   last.
//!
//! Saving writes into a dot directory, syncs every file and renames it into place, then
//! prunes old checkpoints; [`list`] and [`latest`] only see `step-*` directories that
//! hold a manifest, so a process killed at any moment never leaves a checkpoint that
//! [`latest`] would pick half written. Only one process may save into a checkpoints
//! directory at a time.

mod dirs;
mod error;
mod hf_files;
mod optimizer_file;

use std::fs;
use std::io;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

use sage_core::skill::HashSkillLibrary;
use sage_transformer::{AdapterLayout, Kernels, ModelConfig, ParamLayout, Transformer};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::optim::{AdamW, AdamWConfig, AdamWState};
use crate::tokenizer::{Tokenizer, TOKENIZER_FILE};
use crate::weights::{
    load_model, read_adapter_config, read_config, restore_adapters, save_adapters, save_model,
    SaveOptions, CONFIG_FILE, SINGLE_FILE,
};

pub use dirs::step_dir_name;
pub use error::CheckpointError;
pub use hf_files::{
    default_generation_config, read_generation_config, tokenizer_config, write_hf_files,
    CarriedFiles, CHATML_TEMPLATE, GENERATION_CONFIG_FILE, TOKENIZER_CONFIG_FILE,
};

/// The optimizer's state in a checkpoint.
pub const OPTIMIZER_FILE: &str = "optimizer.bin";
/// The trainer's state in a checkpoint.
pub const STATE_FILE: &str = "state.json";
/// The skill library in a checkpoint.
pub const LIBRARY_FILE: &str = "library.json";
/// The manifest, whose presence marks a checkpoint complete.
pub const MANIFEST_FILE: &str = "checkpoint.json";

/// The manifest layout this code writes and reads.
const MANIFEST_FORMAT: u32 = 1;

/// What a checkpoint holds besides the parts every checkpoint has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    /// Layout version.
    format: u32,
    /// The optimizer step the checkpoint was taken at.
    step: u64,
    /// `optimizer.bin` is present.
    optimizer: bool,
    /// `library.json` is present.
    library: bool,
}

/// What [`save`] writes, borrowed from the running trainer.
pub struct CheckpointParts<'a, T> {
    /// The model.
    pub model: &'a Transformer,
    /// The optimizer, when the run trains.
    pub optimizer: Option<&'a AdamW>,
    /// The tokenizer.
    pub tokenizer: &'a Tokenizer,
    /// The trainer's state.
    pub state: &'a T,
    /// The skill library, when the run keeps one.
    pub library: Option<&'a HashSkillLibrary>,
    /// The Hugging Face files of the model the run started from, to keep; `None` (or a
    /// file it lacks) writes the defaults.
    pub carried: Option<&'a CarriedFiles>,
}

/// A loaded checkpoint, its model and optimizer in the backend.
pub struct Checkpoint<T> {
    /// The checkpoint's directory.
    pub dir: PathBuf,
    /// The step it was taken at.
    pub step: u64,
    /// The model.
    pub model: Transformer,
    /// The optimizer, when the checkpoint holds one.
    pub optimizer: Option<AdamW>,
    /// The tokenizer.
    pub tokenizer: Tokenizer,
    /// The trainer's state.
    pub state: T,
    /// The skill library, when the checkpoint holds one.
    pub library: Option<HashSkillLibrary>,
}

/// Writes the checkpoint of `step` as `checkpoints_dir/step-NNNNNN` (created, or
/// replaced when it exists) and returns its path; then, with `keep_last`, deletes the
/// oldest checkpoints until only that many remain (the one just written is never
/// deleted). Leftovers of interrupted saves are removed too.
///
/// Refuses a tokenizer with more tokens than the model embeds
/// ([`CheckpointError::VocabMismatch`]) or an optimizer of another model
/// ([`CheckpointError::MomentLength`]). On error nothing is installed.
pub fn save<K: Kernels, T: Serialize>(
    k: &mut K,
    checkpoints_dir: &Path,
    step: u64,
    parts: &CheckpointParts<'_, T>,
    keep_last: Option<NonZeroUsize>,
) -> Result<PathBuf, CheckpointError> {
    let name = step_dir_name(step);
    let final_dir = checkpoints_dir.join(&name);
    check_vocab(
        parts.tokenizer.vocab_size(),
        parts.model.config(),
        &final_dir.join(TOKENIZER_FILE),
    )?;
    fs::create_dir_all(checkpoints_dir)
        .map_err(|e| CheckpointError::io("cannot create", checkpoints_dir, e))?;
    let temp = dirs::temp_dir_for(checkpoints_dir, &name);
    dirs::remove_tree(&temp)?;
    fs::create_dir(&temp).map_err(|e| CheckpointError::io("cannot create", &temp, e))?;
    let written = write_parts(k, &temp, step, parts)
        .and_then(|()| dirs::sync_dir(&temp))
        .and_then(|()| dirs::install(&temp, &final_dir));
    if let Err(e) = written {
        // The write error is the one worth reporting; the temporary directory is
        // invisible to `list` and removed by the next save in any case.
        let _ = dirs::remove_tree(&temp);
        return Err(e);
    }
    if let Some(keep) = keep_last {
        let checkpoints = list(checkpoints_dir)?;
        let excess = checkpoints.len().saturating_sub(keep.get());
        for (_, dir) in checkpoints.iter().take(excess) {
            if *dir != final_dir {
                dirs::retire(dir)?;
            }
        }
    }
    dirs::remove_leftovers(checkpoints_dir)?;
    Ok(final_dir)
}

/// Writes every part of a checkpoint into `dir`, the manifest last.
fn write_parts<K: Kernels, T: Serialize>(
    k: &mut K,
    dir: &Path,
    step: u64,
    parts: &CheckpointParts<'_, T>,
) -> Result<(), CheckpointError> {
    save_model(k, parts.model, dir, &SaveOptions::default())?;
    dirs::sync_file(&dir.join(SINGLE_FILE))?;
    dirs::sync_file(&dir.join(CONFIG_FILE))?;
    let tokenizer_path = dir.join(TOKENIZER_FILE);
    parts.tokenizer.save(&tokenizer_path)?;
    dirs::sync_file(&tokenizer_path)?;
    hf_files::write_hf_files(dir, parts.tokenizer, parts.carried)?;
    save_adapters(k, parts.model, dir)?;
    write_json(&dir.join(STATE_FILE), parts.state)?;
    if let Some(optimizer) = parts.optimizer {
        let path = dir.join(OPTIMIZER_FILE);
        let state = optimizer
            .export_state(k)
            .map_err(|e| CheckpointError::Optimizer {
                file: path.clone(),
                action: "cannot export the optimizer to",
                detail: e.to_string(),
            })?;
        let params = parts.model.trainable().0.len;
        for moment in [&state.m, &state.v] {
            if moment.len() != params {
                return Err(CheckpointError::MomentLength {
                    file: path,
                    moments: moment.len(),
                    params,
                });
            }
        }
        optimizer_file::write(&path, &state)?;
    }
    if let Some(library) = parts.library {
        write_json(&dir.join(LIBRARY_FILE), library)?;
    }
    let manifest = Manifest {
        format: MANIFEST_FORMAT,
        step,
        optimizer: parts.optimizer.is_some(),
        library: parts.library.is_some(),
    };
    write_json(&dir.join(MANIFEST_FILE), &manifest)
}

/// The complete checkpoints in `checkpoints_dir` as `(step, directory)`, by ascending
/// step. A directory that does not exist holds none. Dot directories (saves or
/// deletions in progress) and `step-*` directories without a manifest are skipped.
pub fn list(checkpoints_dir: &Path) -> Result<Vec<(u64, PathBuf)>, CheckpointError> {
    let entries = match fs::read_dir(checkpoints_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(CheckpointError::io("cannot list", checkpoints_dir, e)),
    };
    let mut checkpoints = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| CheckpointError::io("cannot list", checkpoints_dir, e))?;
        let Some(step) = entry
            .file_name()
            .to_str()
            .and_then(dirs::parse_step_dir_name)
        else {
            continue;
        };
        let dir = entry.path();
        if dir.join(MANIFEST_FILE).is_file() {
            checkpoints.push((step, dir));
        }
    }
    checkpoints.sort();
    Ok(checkpoints)
}

/// The directory of the complete checkpoint with the highest step, if any.
pub fn latest(checkpoints_dir: &Path) -> Result<Option<PathBuf>, CheckpointError> {
    Ok(list(checkpoints_dir)?.pop().map(|(_, dir)| dir))
}

/// Loads the checkpoint in `dir`: model and optimizer into backend `k`, the rest on
/// the host.
///
/// The optimizer keeps its saved moments and step counter; with `optimizer_config` it
/// takes that config (schedule, betas, ...) instead of the saved one. Every file is
/// checked before the model is allocated: a missing or malformed part, a tokenizer
/// larger than the model's vocabulary, or moments of another size is an error naming
/// the file.
pub fn load<K: Kernels, T: DeserializeOwned>(
    k: &mut K,
    dir: &Path,
    optimizer_config: Option<AdamWConfig>,
) -> Result<Checkpoint<T>, CheckpointError> {
    let manifest_path = dir.join(MANIFEST_FILE);
    if !manifest_path.is_file() {
        return Err(CheckpointError::Incomplete {
            dir: dir.to_path_buf(),
        });
    }
    let manifest: Manifest = read_json(&manifest_path)?;
    if manifest.format != MANIFEST_FORMAT {
        return Err(CheckpointError::json(
            &manifest_path,
            format_args!(
                "format {}; this build reads format {MANIFEST_FORMAT}",
                manifest.format
            ),
        ));
    }
    let config_path = required(dir, CONFIG_FILE)?;
    required(dir, SINGLE_FILE)?;
    let tokenizer_path = required(dir, TOKENIZER_FILE)?;
    let state_path = required(dir, STATE_FILE)?;
    let config = read_config(&config_path)?;
    let tokenizer = Tokenizer::from_file(&tokenizer_path)?;
    check_vocab(tokenizer.vocab_size(), &config, &tokenizer_path)?;
    let state: T = read_json(&state_path)?;
    let library = if manifest.library {
        Some(read_json::<HashSkillLibrary>(&required(
            dir,
            LIBRARY_FILE,
        )?)?)
    } else {
        None
    };
    let adapters = read_adapter_config(dir)?;
    let optimizer_state = if manifest.optimizer {
        let path = required(dir, OPTIMIZER_FILE)?;
        let mut state = optimizer_file::read(&path)?;
        let params = match &adapters {
            Some(lora) => AdapterLayout::new(&ParamLayout::new(&config), lora).total,
            None => ParamLayout::new(&config).total,
        };
        if state.m.len() != params {
            return Err(CheckpointError::MomentLength {
                file: path,
                moments: state.m.len(),
                params,
            });
        }
        if let Some(config) = optimizer_config {
            state.config = config;
        }
        Some((path, state))
    } else {
        None
    };
    let mut model = load_model(k, dir)?;
    if let Some(lora) = adapters {
        if let Err(e) = restore_adapters(k, &mut model, dir, lora) {
            // The restore error is the one worth reporting; freeing is best effort.
            let _ = model.free(k);
            return Err(e.into());
        }
    }
    let optimizer = match optimizer_state {
        Some((path, state)) => match restore_optimizer(k, &model, &path, &state) {
            Ok(optimizer) => Some(optimizer),
            Err(e) => {
                // The restore error is the one worth reporting; freeing the model's
                // buffers is best effort.
                let _ = model.free(k);
                return Err(e);
            }
        },
        None => None,
    };
    Ok(Checkpoint {
        dir: dir.to_path_buf(),
        step: manifest.step,
        model,
        optimizer,
        tokenizer,
        state,
        library,
    })
}

/// Loads the [`latest`] checkpoint of `checkpoints_dir` (see [`load`]); `None` when
/// there is none.
pub fn load_latest<K: Kernels, T: DeserializeOwned>(
    k: &mut K,
    checkpoints_dir: &Path,
    optimizer_config: Option<AdamWConfig>,
) -> Result<Option<Checkpoint<T>>, CheckpointError> {
    match latest(checkpoints_dir)? {
        Some(dir) => load(k, &dir, optimizer_config).map(Some),
        None => Ok(None),
    }
}

/// An optimizer for `model` holding `state` read from `path`.
fn restore_optimizer<K: Kernels>(
    k: &mut K,
    model: &Transformer,
    path: &Path,
    state: &AdamWState,
) -> Result<AdamW, CheckpointError> {
    AdamW::from_state(k, model, state).map_err(|e| CheckpointError::Optimizer {
        file: path.to_path_buf(),
        action: "cannot restore the optimizer from",
        detail: e.to_string(),
    })
}

/// Fails unless every id of a tokenizer of `tokenizer_vocab` tokens (saved as
/// `tokenizer_path`) has a row in the embedding of a model of `config`.
fn check_vocab(
    tokenizer_vocab: usize,
    config: &ModelConfig,
    tokenizer_path: &Path,
) -> Result<(), CheckpointError> {
    if tokenizer_vocab > config.vocab_size {
        return Err(CheckpointError::VocabMismatch {
            file: tokenizer_path.to_path_buf(),
            tokenizer_vocab,
            model_vocab: config.vocab_size,
        });
    }
    Ok(())
}

/// `dir/name`, which must be a file.
fn required(dir: &Path, name: &str) -> Result<PathBuf, CheckpointError> {
    let path = dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(CheckpointError::Missing { file: path })
    }
}

/// Writes `value` as pretty JSON to `path` and syncs it.
fn write_json<V: Serialize + ?Sized>(path: &Path, value: &V) -> Result<(), CheckpointError> {
    let mut text = serde_json::to_vec_pretty(value).map_err(|e| CheckpointError::json(path, e))?;
    text.push(b'\n');
    dirs::write_synced(path, &text)
}

/// Reads the JSON file `path` as a `V`.
fn read_json<V: DeserializeOwned>(path: &Path) -> Result<V, CheckpointError> {
    let bytes = fs::read(path).map_err(|e| CheckpointError::io("cannot read", path, e))?;
    serde_json::from_slice(&bytes).map_err(|e| CheckpointError::json(path, e))
}
