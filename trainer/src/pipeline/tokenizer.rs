//! The tokenizer stage: a byte-level BPE trained on the expert data's messages.

use std::fs;
use std::path::Path;

use super::{failed, PipelineError, Reporter};
use crate::config::TokenizerSection;
use crate::tokenizer::Tokenizer;

/// Trains a byte-level BPE on the message contents of a JSON-lines file and saves it
/// as `dir/tokenizer.json`.
pub fn train_tokenizer(
    settings: &TokenizerSection,
    train: &Path,
    dir: &Path,
    reporter: &mut dyn Reporter,
) -> Result<Tokenizer, PipelineError> {
    reporter.stage("tokenizer");
    let text = fs::read_to_string(train)
        .map_err(|e| PipelineError::new("tokenizer", format!("{}: {e}", train.display())))?;
    let mut contents = Vec::new();
    for (index, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let messages = crate::chat::messages_from_json_line(line).map_err(|e| {
            PipelineError::new(
                "tokenizer",
                format!("{}, line {}: {e}", train.display(), index + 1),
            )
        })?;
        contents.extend(messages.into_iter().map(|m| m.content));
    }
    let tokenizer =
        Tokenizer::train(contents.iter(), &settings.train_config()).map_err(failed("tokenizer"))?;
    fs::create_dir_all(dir).map_err(failed("tokenizer"))?;
    let path = tokenizer.save_to_dir(dir).map_err(failed("tokenizer"))?;
    reporter.info(&format!(
        "tokenizer: {} tokens -> {}",
        tokenizer.vocab_size(),
        path.display()
    ));
    Ok(tokenizer)
}
