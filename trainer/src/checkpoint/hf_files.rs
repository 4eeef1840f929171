//! The files Hugging Face tools read beside a model and its `tokenizer.json`:
//! `tokenizer_config.json` (the ChatML chat template and the special tokens, so that
//! `AutoTokenizer` reports `<|im_end|>` as the end of a turn and
//! `apply_chat_template` renders the text this project trains on) and
//! `generation_config.json` (when to stop generating). A run that starts from a model
//! directory keeps that model's own files ([`CarriedFiles`]): its tokenizer
//! configuration (chat template, system prompt, bos and unk tokens), its generation
//! configuration, and the special-token ids of its `config.json`.

use std::path::Path;

use serde_json::{json, Map, Value};

use super::{read_json, write_json, CheckpointError};
use crate::tokenizer::Tokenizer;

/// The tokenizer's Hugging Face configuration in a checkpoint.
pub const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";
/// The generation settings in a checkpoint.
pub const GENERATION_CONFIG_FILE: &str = "generation_config.json";

/// The ChatML layout the trainer's chats use (`chat::ChatTemplate`), as a Jinja chat
/// template: each message is `<|im_start|>role\ncontent<|im_end|>\n`, and the
/// generation prompt opens an assistant turn.
pub const CHATML_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// `tokenizer_config.json` of every tokenizer this project trains (they all carry the
/// three ChatML special tokens): ChatML template, `<|im_end|>` as the end of a turn,
/// `<|endoftext|>` as padding, no beginning-of-text token.
pub fn tokenizer_config() -> Value {
    json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": CHATML_TEMPLATE,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "bos_token": null,
        "unk_token": null,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "clean_up_tokenization_spaces": false,
        "split_special_tokens": false,
    })
}

/// The default `generation_config.json` for `tokenizer`: stop at `<|im_end|>` or
/// `<|endoftext|>`, pad with `<|endoftext|>`.
pub fn default_generation_config(tokenizer: &Tokenizer) -> Value {
    let special = tokenizer.special_tokens();
    json!({
        "eos_token_id": [special.im_end, special.end_of_text],
        "pad_token_id": special.end_of_text,
        "bos_token_id": special.end_of_text,
    })
}

/// The `generation_config.json` of the model directory `dir`, if it has one.
pub fn read_generation_config(dir: &Path) -> Result<Option<Value>, CheckpointError> {
    read_if_present(&dir.join(GENERATION_CONFIG_FILE))
}

/// The JSON file at `path`, if there is one.
fn read_if_present(path: &Path) -> Result<Option<Value>, CheckpointError> {
    if path.is_file() {
        read_json(path).map(Some)
    } else {
        Ok(None)
    }
}

/// The special-token ids a `config.json` may hold.
const CONFIG_TOKEN_IDS: [&str; 3] = ["bos_token_id", "eos_token_id", "pad_token_id"];

/// The Hugging Face files of the model a run started from, which its checkpoints keep.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CarriedFiles {
    /// Its `generation_config.json`.
    pub generation_config: Option<Value>,
    /// Its `tokenizer_config.json`.
    pub tokenizer_config: Option<Value>,
    /// The special-token ids of its `config.json` (`bos_token_id`, `eos_token_id`,
    /// `pad_token_id`, those it has).
    pub config_token_ids: Map<String, Value>,
}

impl CarriedFiles {
    /// The files of the model directory `dir` (each absent one stays `None`).
    pub fn read(dir: &Path) -> Result<CarriedFiles, CheckpointError> {
        let config = read_if_present(&dir.join(crate::weights::CONFIG_FILE))?;
        let config_token_ids = CONFIG_TOKEN_IDS
            .iter()
            .filter_map(|&key| {
                let value = config.as_ref()?.get(key)?;
                (!value.is_null()).then(|| (key.to_owned(), value.clone()))
            })
            .collect();
        Ok(CarriedFiles {
            generation_config: read_generation_config(dir)?,
            tokenizer_config: read_if_present(&dir.join(TOKENIZER_CONFIG_FILE))?,
            config_token_ids,
        })
    }
}

/// Writes both files into `dir`, the carried ones where given, else the defaults, and
/// adds the carried special-token ids to the `config.json` already written there.
pub fn write_hf_files(
    dir: &Path,
    tokenizer: &Tokenizer,
    carried: Option<&CarriedFiles>,
) -> Result<(), CheckpointError> {
    let carried_or = |file: Option<&Value>, default: Value| file.cloned().unwrap_or(default);
    let tokenizer_file = carried_or(
        carried.and_then(|c| c.tokenizer_config.as_ref()),
        tokenizer_config(),
    );
    write_json(&dir.join(TOKENIZER_CONFIG_FILE), &tokenizer_file)?;
    let generation = carried_or(
        carried.and_then(|c| c.generation_config.as_ref()),
        default_generation_config(tokenizer),
    );
    write_json(&dir.join(GENERATION_CONFIG_FILE), &generation)?;
    if let Some(ids) = carried
        .map(|c| &c.config_token_ids)
        .filter(|ids| !ids.is_empty())
    {
        let path = dir.join(crate::weights::CONFIG_FILE);
        let mut config: Value = read_json(&path)?;
        if let Some(fields) = config.as_object_mut() {
            fields.extend(ids.clone());
        }
        write_json(&path, &config)?;
    }
    Ok(())
}
