//! The tokenizer: text to token ids and back, over the `tokenizers` crate.
//!
//! This module owns loading any Hugging Face `tokenizer.json` (Qwen2's included),
//! training the built-in model's byte-level BPE tokenizer, saving it beside the model,
//! and the ids of the ChatML special tokens. It knows nothing of chats: the template
//! and episode assembly live in [`crate::chat`].
//!
//! [`Tokenizer::encode`] treats its input as plain text: a literal `<|im_end|>` in a
//! message is split into ordinary tokens, never turned into the control token, so a
//! message can never close itself or open another.
//!
//! - [`Tokenizer`]: load, save, encode, decode, special-token ids;
//! - `train`: the BPE training pipeline and its [`TrainConfig`];
//! - `special`: the ChatML token texts and [`SpecialTokens`];
//! - [`TokenizerError`]: what can go wrong.

mod error;
mod special;
mod train;

use crate::files::write_atomic;
use std::fs;
use std::path::{Path, PathBuf};

pub use error::TokenizerError;
pub use special::{SpecialTokens, CHATML_SPECIAL_TOKENS, END_OF_TEXT, IM_END, IM_START};
pub use train::TrainConfig;

/// The file name of a tokenizer saved beside a model.
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// A loaded or trained tokenizer with the ChatML special tokens.
#[derive(Clone, Debug)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    special: SpecialTokens,
    vocab_size: usize,
}

impl Tokenizer {
    /// Wraps a `tokenizers` tokenizer, checking its special tokens; `path` names the
    /// file it came from, for error messages.
    fn from_inner(
        mut inner: tokenizers::Tokenizer,
        path: Option<&Path>,
    ) -> Result<Tokenizer, TokenizerError> {
        let id = |token: &'static str| {
            inner
                .token_to_id(token)
                .ok_or_else(|| TokenizerError::MissingSpecialToken {
                    path: path.map(Path::to_path_buf),
                    token,
                })
        };
        let special = SpecialTokens {
            im_start: id(IM_START)?,
            im_end: id(IM_END)?,
            end_of_text: id(END_OF_TEXT)?,
        };
        inner.set_encode_special_tokens(true);
        let vocab_size = inner.get_vocab_size(true);
        Ok(Tokenizer {
            inner,
            special,
            vocab_size,
        })
    }

    /// Loads a `tokenizer.json` file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Tokenizer, TokenizerError> {
        let path = path.as_ref();
        let json = fs::read(path).map_err(|source| TokenizerError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Tokenizer::parse(&json, Some(path))
    }

    /// Loads the `tokenizer.json` saved in a model directory.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Tokenizer, TokenizerError> {
        Tokenizer::from_file(dir.as_ref().join(TOKENIZER_FILE))
    }

    /// Parses the contents of a `tokenizer.json`.
    pub fn from_json(json: &str) -> Result<Tokenizer, TokenizerError> {
        Tokenizer::parse(json.as_bytes(), None)
    }

    /// Parses `json`, naming `path` in errors.
    fn parse(json: &[u8], path: Option<&Path>) -> Result<Tokenizer, TokenizerError> {
        let inner = tokenizers::Tokenizer::from_bytes(json).map_err(|e| TokenizerError::Parse {
            path: path.map(Path::to_path_buf),
            message: e.to_string(),
        })?;
        Tokenizer::from_inner(inner, path)
    }

    /// The tokenizer as `tokenizer.json` text (deterministic for a given tokenizer), BPE
    /// merges written as `"a b"` strings where that is unambiguous, so every version of
    /// the tokenizers library reads it (see `merges_as_strings`).
    pub fn to_json(&self) -> Result<String, TokenizerError> {
        let json = self
            .inner
            .to_string(true)
            .map_err(|e| TokenizerError::Write {
                path: PathBuf::from("<memory>"),
                message: e.to_string(),
            })?;
        Ok(merges_as_strings(&json).unwrap_or(json))
    }

    /// Writes the tokenizer to `path` atomically: a temporary file beside it is
    /// renamed over it, so a reader never sees a half-written file.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), TokenizerError> {
        let path = path.as_ref();
        let write_error = |message: String| TokenizerError::Write {
            path: path.to_path_buf(),
            message,
        };
        let json = self.to_json().map_err(|e| write_error(e.to_string()))?;
        write_atomic(path, json.as_bytes()).map_err(|e| write_error(e.to_string()))
    }

    /// Writes the tokenizer as `tokenizer.json` in a model directory (which must
    /// exist) and returns the file's path.
    pub fn save_to_dir(&self, dir: impl AsRef<Path>) -> Result<PathBuf, TokenizerError> {
        let path = dir.as_ref().join(TOKENIZER_FILE);
        self.save(&path)?;
        Ok(path)
    }

    /// Token ids of `text`, taken as plain text: special tokens spelled in it are
    /// split like any other text, and no token is added around it.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let encoding = self
            .inner
            .encode_fast(text, false)
            .map_err(|e| TokenizerError::Encode(e.to_string()))?;
        let ids = encoding.get_ids();
        self.refuse_special(ids)?;
        Ok(ids.to_vec())
    }

    /// Fails when `ids` hold a special token (text never encodes to one here).
    fn refuse_special(&self, ids: &[u32]) -> Result<(), TokenizerError> {
        match ids.iter().find(|&&id| self.special.contains(id)) {
            Some(&id) => Err(TokenizerError::SpecialTokenInText {
                token: self.inner.id_to_token(id).unwrap_or_default(),
            }),
            None => Ok(()),
        }
    }

    /// Like [`Tokenizer::encode`], with the byte offset in `text` where each token ends.
    pub fn encode_with_ends(&self, text: &str) -> Result<Vec<(u32, usize)>, TokenizerError> {
        // `encode` (not `encode_fast`) tracks the byte offsets.
        let encoding = self
            .inner
            .encode(text, false)
            .map_err(|e| TokenizerError::Encode(e.to_string()))?;
        let ids = encoding.get_ids();
        self.refuse_special(ids)?;
        Ok(ids
            .iter()
            .zip(encoding.get_offsets())
            .map(|(&id, &(_, end))| (id, end))
            .collect())
    }

    /// The text of `ids`, special tokens written out (`<|im_end|>`). Bytes that do
    /// not form valid UTF-8 (a sequence cut inside a character) become U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.check_ids(ids)?;
        self.inner
            .decode(ids, false)
            .map_err(|e| TokenizerError::Decode(e.to_string()))
    }

    /// Fails on the first id outside the vocabulary.
    pub fn check_ids(&self, ids: &[u32]) -> Result<(), TokenizerError> {
        match ids.iter().find(|&&id| self.id_to_token(id).is_none()) {
            Some(&id) => Err(TokenizerError::UnknownId {
                id,
                vocab_size: self.vocab_size,
            }),
            None => Ok(()),
        }
    }

    /// The ids of the ChatML special tokens.
    pub fn special_tokens(&self) -> SpecialTokens {
        self.special
    }

    /// Id of `<|im_start|>`.
    pub fn im_start(&self) -> u32 {
        self.special.im_start
    }

    /// Id of `<|im_end|>`, the end of an agent turn.
    pub fn im_end(&self) -> u32 {
        self.special.im_end
    }

    /// Id of `<|endoftext|>`.
    pub fn end_of_text(&self) -> u32 {
        self.special.end_of_text
    }

    /// Number of tokens, added tokens included (the model's embedding may be larger).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// The id of a token's text in the vocabulary.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The text of a token id in the vocabulary (byte-level tokens in their mapped
    /// form, e.g. `Ġ` for a space).
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }
}

/// `json` (a `tokenizer.json`) with its BPE merges written as `"a b"` strings instead of
/// `["a", "b"]` pairs, the rest of the text unchanged; `None` when there is nothing to
/// rewrite or a pair cannot be written so (a token holding a space, as byte-level BPE
/// tokens never do). The tokenizers library writes pairs since 0.20, which its earlier
/// versions (0.19, the one transformers 4.44 requires) cannot parse; every version reads
/// the strings.
fn merges_as_strings(json: &str) -> Option<String> {
    let key = "\"merges\": [";
    let open = json.rfind(key)? + key.len() - 1;
    // The matching bracket, skipping brackets inside strings.
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let mut close = None;
    for (offset, byte) in json.as_bytes()[open..].iter().enumerate() {
        match (in_string, escaped, byte) {
            (true, true, _) => escaped = false,
            (true, false, b'\\') => escaped = true,
            (true, false, b'"') => in_string = false,
            (true, false, _) => {}
            (false, _, b'"') => in_string = true,
            (false, _, b'[') => depth += 1,
            (false, _, b']') => {
                depth -= 1;
                if depth == 0 {
                    close = Some(open + offset);
                    break;
                }
            }
            _ => {}
        }
    }
    let close = close?;
    let pairs: Vec<(String, String)> = serde_json::from_str(&json[open..=close]).ok()?;
    let merges = pairs
        .iter()
        .map(|(a, b)| (!a.contains(' ') && !b.contains(' ')).then(|| format!("{a} {b}")))
        .collect::<Option<Vec<String>>>()?;
    let merges = serde_json::to_string(&merges).ok()?;
    Some(format!("{}{merges}{}", &json[..open], &json[close + 1..]))
}

#[cfg(test)]
mod tests {
    use super::merges_as_strings;

    #[test]
    fn merge_pairs_become_strings_and_brackets_in_strings_are_skipped() {
        let json = "{\"model\": {\"vocab\": {\"[\": 0}, \"merges\": [[\"[\", \"]\\\"\"], [\"a\", \"b\"]]}, \"z\": 1}";
        assert_eq!(
            merges_as_strings(json).unwrap(),
            "{\"model\": {\"vocab\": {\"[\": 0}, \"merges\": [\"[ ]\\\"\",\"a b\"]}, \"z\": 1}"
        );
        // Already strings, or a token with a space: left as they are.
        assert_eq!(merges_as_strings("{\"merges\": [\"a b\"]}"), None);
        assert_eq!(merges_as_strings("{\"merges\": [[\"a c\", \"b\"]]}"), None);
        assert_eq!(merges_as_strings("{\"merges\": [[\"a\", \"b\"]"), None);
    }
}
