//! A GGUF file's GPT-2-style BPE tokenizer rebuilt as the Hugging Face files that load
//! it: `tokenizer.json` (vocabulary, merges written as `"a b"` strings, which every
//! version of the tokenizers library reads, the pre-tokenizer the file names, byte-level
//! decoding, its control tokens as special added tokens) and `tokenizer_config.json` (the
//! special tokens by name and the file's chat template); `generation_config.json` holds
//! the bos and eos ids.

use serde_json::{json, Map, Value as Json};

use super::gguf::{GgufFile, Value};
use super::ImportError;

/// GGUF's token type of control (special) tokens.
const CONTROL: i64 = 3;
/// GGUF's token type of user-defined added tokens.
const USER_DEFINED: i64 = 4;

/// Qwen2's pre-tokenizer pattern (published with its tokenizer): contractions, letters
/// with one leading non-letter, single digits, punctuation runs, newlines, spaces.
const QWEN2_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The three files' contents.
pub struct TokenizerFiles {
    /// `tokenizer.json`.
    pub tokenizer: Json,
    /// `tokenizer_config.json`.
    pub config: Json,
    /// `generation_config.json`.
    pub generation: Json,
    /// The special-token ids for `config.json` (`bos_token_id`, `eos_token_id`,
    /// `pad_token_id`, those the file names).
    pub ids: Map<String, Json>,
}

/// Rebuilds the tokenizer of `file`; `context` is the model's context length.
pub fn tokenizer_files(file: &GgufFile, context: usize) -> Result<TokenizerFiles, ImportError> {
    let model = super::model::text(file, "tokenizer.ggml.model")?;
    if model != "gpt2" {
        return Err(ImportError::Unsupported(format!(
            "tokenizer.ggml.model is {model:?}: only GPT-2-style byte-level BPE (\"gpt2\") is supported"
        )));
    }
    let tokens = strings(file, "tokenizer.ggml.tokens")?;
    let merges = strings(file, "tokenizer.ggml.merges")?;
    let types: Vec<i64> = match file.get("tokenizer.ggml.token_type") {
        None => vec![1; tokens.len()],
        Some(value) => value
            .as_array()
            .filter(|a| a.len() == tokens.len())
            .and_then(|a| {
                a.iter()
                    .map(|v| match v {
                        Value::Int(i) => Some(*i),
                        _ => None,
                    })
                    .collect()
            })
            .ok_or_else(|| {
                ImportError::Metadata(format!(
                    "tokenizer.ggml.token_type is not {} integers",
                    tokens.len()
                ))
            })?,
    };
    let pre = file
        .get("tokenizer.ggml.pre")
        .and_then(|v| v.as_str())
        .unwrap_or("default");
    let pre_tokenizer = pre_tokenizer(pre)?;
    let mut vocab = Map::new();
    for (id, token) in tokens.iter().enumerate() {
        if vocab.insert(token.clone(), json!(id)).is_some() {
            return Err(ImportError::Metadata(format!(
                "tokenizer.ggml.tokens holds {token:?} twice"
            )));
        }
    }
    for merge in &merges {
        if merge.split(' ').count() != 2 {
            return Err(ImportError::Metadata(format!(
                "tokenizer.ggml.merges: {merge:?} is not two tokens separated by a space"
            )));
        }
    }
    let added: Vec<Json> = tokens
        .iter()
        .zip(&types)
        .enumerate()
        .filter(|(_, (_, &kind))| kind == CONTROL || kind == USER_DEFINED)
        .map(|(id, (token, &kind))| {
            json!({
                "id": id, "content": token, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": kind == CONTROL,
            })
        })
        .collect();
    let byte_level = json!({
        "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true,
    });
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null,
            "continuing_subword_prefix": null, "end_of_word_suffix": null,
            "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab, "merges": merges,
        },
    });
    let token_of = |key: &str| -> Result<Option<(u64, String)>, ImportError> {
        match file.get(key) {
            None => Ok(None),
            Some(value) => {
                let id = value
                    .as_u64()
                    .filter(|&id| (id as usize) < tokens.len())
                    .ok_or_else(|| {
                        ImportError::Metadata(format!("{key} is not a token id of the vocabulary"))
                    })?;
                Ok(Some((id, tokens[id as usize].clone())))
            }
        }
    };
    let bos = token_of("tokenizer.ggml.bos_token_id")?;
    let eos = token_of("tokenizer.ggml.eos_token_id")?;
    let unk = token_of("tokenizer.ggml.unknown_token_id")?;
    let pad = token_of("tokenizer.ggml.padding_token_id")?;
    let name = |t: &Option<(u64, String)>| t.as_ref().map_or(Json::Null, |(_, s)| json!(s));
    let mut config = json!({
        "tokenizer_class": "GPT2Tokenizer",
        "bos_token": name(&bos),
        "eos_token": name(&eos),
        "unk_token": name(&unk),
        "pad_token": name(&pad),
        "add_bos_token": file.get("tokenizer.ggml.add_bos_token").is_some_and(|v| *v == Value::Bool(true)),
        "add_prefix_space": false,
        "clean_up_tokenization_spaces": false,
        "model_max_length": context,
    });
    if let Some(template) = file.get("tokenizer.chat_template").and_then(|v| v.as_str()) {
        config["chat_template"] = json!(template);
    }
    let mut generation = Map::new();
    if let Some((id, _)) = &bos {
        generation.insert("bos_token_id".into(), json!(id));
    }
    if let Some((id, _)) = &eos {
        generation.insert("eos_token_id".into(), json!(id));
    }
    let mut ids = generation.clone();
    if let Some((id, _)) = &pad {
        ids.insert("pad_token_id".into(), json!(id));
    }
    Ok(TokenizerFiles {
        tokenizer,
        config,
        generation: Json::Object(generation),
        ids,
    })
}

/// The pre-tokenizer llama.cpp's name `pre` stands for.
fn pre_tokenizer(pre: &str) -> Result<Json, ImportError> {
    let byte_level = |use_regex: bool| {
        json!({
            "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
            "use_regex": use_regex,
        })
    };
    Ok(match pre {
        "default" | "gpt2" => byte_level(true),
        // Every digit on its own, then GPT-2's byte-level split.
        "smollm" => json!({
            "type": "Sequence",
            "pretokenizers": [{"type": "Digits", "individual_digits": true}, byte_level(true)],
        }),
        "qwen2" => json!({
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split", "pattern": {"Regex": QWEN2_PATTERN},
                    "behavior": "Isolated", "invert": false,
                },
                byte_level(false),
            ],
        }),
        other => {
            return Err(ImportError::Unsupported(format!(
                "tokenizer.ggml.pre is {other:?}: supported are \"smollm\", \"qwen2\", \"gpt2\" and \"default\""
            )))
        }
    })
}

/// The text array of metadata `key`.
fn strings(file: &GgufFile, key: &str) -> Result<Vec<String>, ImportError> {
    file.get(key)
        .and_then(|v| v.as_array())
        .and_then(|values| {
            values
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(|| ImportError::Metadata(format!("{key} is missing or not an array of text")))
}
