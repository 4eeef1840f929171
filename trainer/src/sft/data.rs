//! SFT examples: chat trajectories read from JSON lines and tokenised exactly as a
//! rollout would assemble them, with the loss mask on the agent's own tokens.

use std::fs;
use std::path::Path;

use crate::chat::{messages_from_json_line, ChatError, ChatTemplate};

use super::SftError;

/// One tokenised trajectory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SftExample {
    /// `tokens[n]`: the whole chat.
    pub tokens: Vec<u32>,
    /// loss_mask[n - 1]: position `i` is trained when token `i + 1` is the agent's.
    pub loss_mask: Vec<bool>,
}

impl SftExample {
    /// Number of tokens the loss covers.
    pub fn agent_tokens(&self) -> usize {
        self.loss_mask.iter().filter(|&&m| m).count()
    }
}

/// The examples of a JSON-lines file, and what was left out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SftData {
    /// Examples in file order.
    pub examples: Vec<SftExample>,
    /// Lines skipped because their chat exceeds the template's token limit.
    pub too_long: usize,
    /// Lines skipped because they hold no agent turn trained on.
    pub no_agent_turn: usize,
    /// Tokens of the longest agent turn over all examples, its `<|im_end|>` included:
    /// a rollout's per-turn token limit below this cuts such a turn short.
    pub longest_agent_turn: usize,
}

impl SftData {
    /// Reads `path`: one chat per non-empty line (an array of `{role, content}` or an
    /// object with a `messages` field, as the expert exports). A malformed line fails
    /// with its file and line number; a chat over the template's limit is skipped and
    /// counted.
    pub fn load(path: &Path, template: &ChatTemplate<'_>) -> Result<SftData, SftError> {
        let text = fs::read_to_string(path).map_err(|e| SftError::Io {
            path: path.to_owned(),
            detail: e.to_string(),
        })?;
        SftData::parse(&text, template).map_err(|(line, source)| SftError::Line {
            path: path.to_owned(),
            line,
            source,
        })
    }

    /// Parses JSON lines; an error carries its 1-based line number.
    pub fn parse(text: &str, template: &ChatTemplate<'_>) -> Result<SftData, (usize, ChatError)> {
        let mut data = SftData::default();
        for (index, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let messages = messages_from_json_line(line).map_err(|e| (index + 1, e))?;
            let episode = match template.from_messages(&messages) {
                Ok(episode) => episode,
                Err(ChatError::TooLong { .. }) => {
                    data.too_long += 1;
                    continue;
                }
                Err(e) => return Err((index + 1, e)),
            };
            if episode.agent_token_count() == 0 {
                data.no_agent_turn += 1;
                continue;
            }
            let longest = episode.agent_turns().iter().map(|turn| turn.len()).max();
            data.longest_agent_turn = data.longest_agent_turn.max(longest.unwrap_or(0));
            let loss_mask = episode.loss_mask();
            let (tokens, _) = episode.into_parts();
            data.examples.push(SftExample { tokens, loss_mask });
        }
        Ok(data)
    }

    /// Total tokens over all examples.
    pub fn tokens(&self) -> usize {
        self.examples.iter().map(|e| e.tokens.len()).sum()
    }
}
