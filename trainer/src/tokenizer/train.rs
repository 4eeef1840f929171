//! Training the built-in model's byte-level BPE tokenizer on a corpus of texts.
//!
//! The pipeline is Qwen2's: a regex split (letters, single digits, punctuation runs,
//! newlines and spaces kept apart) followed by the byte-level mapping, no normalizer
//! (so decoding gives back exactly the bytes encoded), and the ChatML special tokens
//! as added special tokens with the first ids. Every one of the 256 bytes is in the
//! base alphabet, so any UTF-8 text encodes, whatever the corpus held.

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::models::TrainerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior};

use super::special::CHATML_SPECIAL_TOKENS;
use super::{Tokenizer, TokenizerError};

/// The pre-tokenizer's split pattern (Qwen2's): English contractions, letter runs with
/// one leading non-letter, single digits, punctuation runs with trailing newlines,
/// newline runs, and whitespace runs.
const SPLIT_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Number of distinct bytes, all of which are base tokens.
const BYTE_ALPHABET: usize = 256;

/// Settings of tokenizer training.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrainConfig {
    /// Final vocabulary size, special tokens and the 256 byte tokens included.
    pub vocab_size: usize,
    /// A pair must occur at least this often in the corpus to be merged.
    pub min_frequency: u64,
}

impl Default for TrainConfig {
    fn default() -> TrainConfig {
        TrainConfig {
            vocab_size: 4096,
            min_frequency: 2,
        }
    }
}

impl TrainConfig {
    /// The smallest vocabulary that holds the special tokens and every byte.
    pub const MIN_VOCAB_SIZE: usize = CHATML_SPECIAL_TOKENS.len() + BYTE_ALPHABET;

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), TokenizerError> {
        if self.vocab_size < Self::MIN_VOCAB_SIZE || self.vocab_size > u32::MAX as usize {
            return Err(TokenizerError::Config {
                field: "vocab_size",
                requirement: format!("at least {} and fit in u32", Self::MIN_VOCAB_SIZE),
            });
        }
        Ok(())
    }
}

/// The byte-level BPE pipeline with an empty model, ready to train.
fn untrained() -> Result<tokenizers::Tokenizer, TokenizerError> {
    let split = Split::new(
        SplitPattern::Regex(SPLIT_PATTERN.to_owned()),
        SplitDelimiterBehavior::Isolated,
        false,
    )
    .map_err(|e| TokenizerError::Train(format!("split pattern: {e}")))?;
    let pre_tokenizer = Sequence::new(vec![
        PreTokenizerWrapper::Split(split),
        PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, false, false)),
    ]);
    let mut tokenizer = tokenizers::Tokenizer::new(BPE::default());
    tokenizer
        .with_pre_tokenizer(Some(pre_tokenizer))
        .with_decoder(Some(ByteLevelDecoder::new(false, false, false)));
    Ok(tokenizer)
}

impl Tokenizer {
    /// Trains a byte-level BPE tokenizer on `texts` with the ChatML special tokens.
    ///
    /// Feed message contents, not rendered chats: the special tokens are never learnt
    /// from the corpus, and text that spells them is split like any other text.
    /// The same corpus and settings give the same tokenizer, byte for byte, when
    /// saved.
    pub fn train<I, S>(texts: I, config: &TrainConfig) -> Result<Tokenizer, TokenizerError>
    where
        I: IntoIterator<Item = S>,
        I::IntoIter: Send,
        S: AsRef<str> + Send,
    {
        config.validate()?;
        let specials: Vec<AddedToken> = CHATML_SPECIAL_TOKENS
            .iter()
            .map(|t| AddedToken::from(*t, true))
            .collect();
        let alphabet = ByteLevel::alphabet().into_iter().collect();
        let trainer = BpeTrainerBuilder::new()
            .vocab_size(config.vocab_size)
            .min_frequency(config.min_frequency)
            .special_tokens(specials)
            .initial_alphabet(alphabet)
            .show_progress(false)
            .build();
        let mut tokenizer = untrained()?;
        tokenizer
            .train(&mut TrainerWrapper::BpeTrainer(trainer), texts.into_iter())
            .map_err(|e| TokenizerError::Train(e.to_string()))?;
        Tokenizer::from_inner(tokenizer, None)
    }
}
