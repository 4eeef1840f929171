//! [`ChatTemplate`]: the token pieces of Qwen2's ChatML template for one tokenizer,
//! the token limit of an episode, and the two ways to begin an episode.
//!
//! A message is `<|im_start|>`, the tokens of `"role\ncontent"` taken together, and
//! `<|im_end|>`; consecutive messages are separated by the tokens of `"\n"`. Special
//! tokens split the text for the tokenizer, so this gives exactly the tokens of
//! Hugging Face's `apply_chat_template` with the ChatML template followed by one
//! tokenisation of the whole text (a content that starts with a newline merges it with
//! the header's, as there). An assistant message of SFT data is masked in from the
//! first token that covers its content; the opening of a turn the agent is about to
//! generate is `<|im_start|>` and the tokens of `"assistant\n"` alone.

use super::{ChatEpisode, ChatError, Message, Role};
use crate::tokenizer::{SpecialTokens, Tokenizer};

/// The ChatML template of one tokenizer, with an episode length limit.
#[derive(Clone, Debug)]
pub struct ChatTemplate<'t> {
    tokenizer: &'t Tokenizer,
    special: SpecialTokens,
    separator: Vec<u32>,
    headers: [Vec<u32>; 3],
    max_len: usize,
}

impl<'t> ChatTemplate<'t> {
    /// The template of `tokenizer`, without a length limit.
    pub fn new(tokenizer: &'t Tokenizer) -> Result<ChatTemplate<'t>, ChatError> {
        let special = tokenizer.special_tokens();
        let header = |role: Role| -> Result<Vec<u32>, ChatError> {
            let mut tokens = vec![special.im_start];
            tokens.extend(tokenizer.encode(&format!("{}\n", role.name()))?);
            Ok(tokens)
        };
        Ok(ChatTemplate {
            tokenizer,
            special,
            separator: tokenizer.encode("\n")?,
            headers: [
                header(Role::System)?,
                header(Role::User)?,
                header(Role::Assistant)?,
            ],
            max_len: usize::MAX,
        })
    }

    /// The same template with episodes limited to `max_len` tokens: a push that would
    /// exceed it fails with [`ChatError::TooLong`] and leaves the episode unchanged.
    pub fn with_max_len(mut self, max_len: usize) -> ChatTemplate<'t> {
        self.max_len = max_len;
        self
    }

    /// The episode length limit in tokens.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &'t Tokenizer {
        self.tokenizer
    }

    /// The ChatML special-token ids.
    pub fn special_tokens(&self) -> SpecialTokens {
        self.special
    }

    /// Tokens of `<|im_start|>role\n`.
    pub fn header(&self, role: Role) -> &[u32] {
        match role {
            Role::System => &self.headers[0],
            Role::User => &self.headers[1],
            Role::Assistant => &self.headers[2],
        }
    }

    /// Tokens of the `\n` between a message's `<|im_end|>` and the next message.
    pub fn separator(&self) -> &[u32] {
        &self.separator
    }

    /// Tokens of a message's content, taken as plain text (a literal `<|im_end|>` in
    /// it is ordinary text, never the control token).
    pub fn encode_content(&self, text: &str) -> Result<Vec<u32>, ChatError> {
        Ok(self.tokenizer.encode(text)?)
    }

    /// Tokens of a whole message that is not an agent turn: `<|im_start|>`, the role and
    /// content tokenised together, `<|im_end|>`.
    pub(super) fn message_tokens(&self, role: Role, content: &str) -> Result<Vec<u32>, ChatError> {
        let mut tokens = vec![self.special.im_start];
        tokens.extend(
            self.tokenizer
                .encode(&format!("{}\n{content}", role.name()))?,
        );
        tokens.push(self.special.im_end);
        Ok(tokens)
    }

    /// Tokens of `"assistant\ncontent"` taken together (the assistant message of SFT
    /// data, after its `<|im_start|>`), and how many of them lie wholly in the
    /// `"assistant\n"` header: the rest cover the content and are the agent's.
    pub(super) fn assistant_message(&self, content: &str) -> Result<(Vec<u32>, usize), ChatError> {
        let header = format!("{}\n", Role::Assistant.name());
        let pieces = self
            .tokenizer
            .encode_with_ends(&format!("{header}{content}"))?;
        let in_header = pieces
            .iter()
            .take_while(|&&(_, end)| end <= header.len())
            .count();
        Ok((pieces.into_iter().map(|(id, _)| id).collect(), in_header))
    }

    /// Starts an episode: the system prompt and the task, then the opening of the
    /// agent's first turn (`<|im_start|>assistant\n`). All of it is prompt.
    pub fn start(&self, system: &str, user: &str) -> Result<ChatEpisode, ChatError> {
        let mut tokens = self.message_tokens(Role::System, system)?;
        tokens.extend_from_slice(&self.separator);
        tokens.extend(self.message_tokens(Role::User, user)?);
        tokens.extend_from_slice(&self.separator);
        tokens.extend_from_slice(self.header(Role::Assistant));
        self.check_len(tokens.len())?;
        Ok(ChatEpisode::from_prompt(tokens))
    }

    /// Tokenises a whole conversation (SFT data) as Hugging Face's ChatML template would:
    /// `system, user`, then alternating `assistant` and `user` messages. Assistant
    /// messages are agent turns closed by `<|im_end|>` (masked in from the first token
    /// that covers their content), every other message is prompt or observation
    /// (masked out). A conversation that ends on a `user` message ends awaiting the
    /// agent.
    pub fn from_messages(&self, messages: &[Message]) -> Result<ChatEpisode, ChatError> {
        let role_error = |index: usize, expected: &str| ChatError::Conversation {
            index,
            problem: format!(
                "expected a {expected} message, found {}",
                messages
                    .get(index)
                    .map_or("the end of the conversation", |m| m.role.name())
            ),
        };
        if let Some((index, message)) = messages
            .iter()
            .enumerate()
            .find(|(_, m)| !m.trained && m.role != Role::Assistant)
        {
            return Err(ChatError::Conversation {
                index,
                problem: format!(
                    "weight 0 on a {} message: only agent turns are trained",
                    message.role.name()
                ),
            });
        }
        let (system, user) = match messages {
            [s, u, ..] if s.role == Role::System && u.role == Role::User => (s, u),
            [s, ..] if s.role == Role::System => return Err(role_error(1, "user")),
            _ => return Err(role_error(0, "system")),
        };
        let mut episode = self.start(&system.content, &user.content)?;
        for (index, message) in messages.iter().enumerate().skip(2) {
            let expected = if index % 2 == 0 {
                Role::Assistant
            } else {
                Role::User
            };
            if message.role != expected {
                return Err(role_error(index, expected.name()));
            }
            if expected == Role::Assistant {
                episode.push_agent_text(self, &message.content, message.trained)?;
            } else {
                episode.push_user(self, &message.content)?;
            }
        }
        Ok(episode)
    }

    /// Fails when an episode of `len` tokens would exceed the limit.
    pub(super) fn check_len(&self, len: usize) -> Result<(), ChatError> {
        if len > self.max_len {
            return Err(ChatError::TooLong {
                len,
                max_len: self.max_len,
            });
        }
        Ok(())
    }
}
