//! The files Hugging Face tools read beside a model and its `tokenizer.json`:
//! `tokenizer_config.json` (the ChatML chat template and the special tokens, so that
//! `AutoTokenizer` reports `<|im_end|>` as the end of a turn and
//! `apply_chat_template` renders the text this project trains on) and
//! `generation_config.json` (when to stop generating; copied from the model a run
//! started from when that model had one).

use std::path::Path;

use serde_json::{json, Value};

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
    let path = dir.join(GENERATION_CONFIG_FILE);
    if path.is_file() {
        read_json(&path).map(Some)
    } else {
        Ok(None)
    }
}

/// Writes both files into `dir`: `generation` when given, else the default.
pub(super) fn write_hf_files(
    dir: &Path,
    tokenizer: &Tokenizer,
    generation: Option<&Value>,
) -> Result<(), CheckpointError> {
    write_json(&dir.join(TOKENIZER_CONFIG_FILE), &tokenizer_config())?;
    let generation = match generation {
        Some(config) => config.clone(),
        None => default_generation_config(tokenizer),
    };
    write_json(&dir.join(GENERATION_CONFIG_FILE), &generation)
}
