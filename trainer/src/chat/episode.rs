//! [`ChatEpisode`]: the token sequence of one multi-turn episode and the mask of the
//! agent's own tokens, built by appending turns as they happen.
//!
//! The agent's sampled tokens are appended verbatim, never re-tokenised, so what the
//! policy sampled is exactly what is trained. The mask is true exactly on those
//! tokens, their closing `<|im_end|>` included when the agent sampled it. When a
//! generation stops without `<|im_end|>` (it hit the token limit), the template's
//! `<|im_end|>` is appended to keep the chat well formed but masked out: the agent
//! did not choose to end there, and the policy has no sampled log-prob for it.

use std::ops::Range;

use super::{ChatError, ChatTemplate, Role, OBSERVATION_PREFIX};

/// One episode's tokens, the agent mask, and where each agent turn lies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatEpisode {
    tokens: Vec<u32>,
    agent_mask: Vec<bool>,
    prompt_len: usize,
    agent_turns: Vec<Range<usize>>,
    awaiting_agent: bool,
}

impl ChatEpisode {
    /// An episode holding only its prompt, awaiting the agent's first turn.
    pub(super) fn from_prompt(tokens: Vec<u32>) -> ChatEpisode {
        ChatEpisode {
            agent_mask: vec![false; tokens.len()],
            prompt_len: tokens.len(),
            tokens,
            agent_turns: Vec::new(),
            awaiting_agent: true,
        }
    }

    /// Appends an agent turn: the `generated` tokens verbatim (agent tokens), then a
    /// masked-out `<|im_end|>` if they do not end with one. Fails, changing nothing,
    /// when an observation is due, an id is outside the vocabulary, `<|im_end|>`
    /// occurs before the last position, or the episode would exceed the limit.
    pub fn push_agent(
        &mut self,
        template: &ChatTemplate<'_>,
        generated: &[u32],
    ) -> Result<(), ChatError> {
        if !self.awaiting_agent {
            return Err(ChatError::OutOfTurn {
                expected: "an observation",
                got: "an agent turn",
            });
        }
        template.tokenizer().check_ids(generated)?;
        let im_end = template.special_tokens().im_end;
        if let Some(position) = generated
            .iter()
            .position(|&t| t == im_end)
            .filter(|&p| p + 1 < generated.len())
        {
            return Err(ChatError::EndInsideTurn { position });
        }
        let forced_end = generated.last() != Some(&im_end);
        template.check_len(self.tokens.len() + generated.len() + usize::from(forced_end))?;
        let start = self.tokens.len();
        self.append(generated, true);
        if forced_end {
            self.append(&[im_end], false);
        }
        self.agent_turns.push(start..start + generated.len());
        self.awaiting_agent = false;
        Ok(())
    }

    /// Appends an agent turn given as text (SFT data): the opening `assistant\n` and the
    /// content are tokenised together, as Hugging Face tokenises a rendered chat, so a
    /// token may cover the header's newline and the content's start; the turn's agent
    /// tokens begin at the first token that covers content, and end with `<|im_end|>`.
    /// Untrained (`trained` false: context, not a target), its tokens are masked out.
    /// Fails, changing nothing, when an observation is due or the episode would exceed
    /// the limit.
    pub(super) fn push_agent_text(
        &mut self,
        template: &ChatTemplate<'_>,
        content: &str,
        trained: bool,
    ) -> Result<(), ChatError> {
        if !self.awaiting_agent {
            return Err(ChatError::OutOfTurn {
                expected: "an observation",
                got: "an agent turn",
            });
        }
        let (tokens, in_header) = template.assistant_message(content)?;
        let opening = &template.header(Role::Assistant)[1..];
        let kept = self.tokens.len() - opening.len();
        debug_assert_eq!(&self.tokens[kept..], opening);
        template.check_len(kept + tokens.len() + 1)?;
        let first_turn = self.agent_turns.is_empty();
        self.tokens.truncate(kept);
        self.agent_mask.truncate(kept);
        self.append(&tokens[..in_header], false);
        let start = self.tokens.len();
        if first_turn {
            self.prompt_len = start;
        }
        self.append(&tokens[in_header..], trained);
        self.append(&[template.special_tokens().im_end], trained);
        self.agent_turns.push(start..self.tokens.len());
        self.awaiting_agent = false;
        Ok(())
    }

    /// Appends an observation as the next `user` message, its content
    /// [`OBSERVATION_PREFIX`] followed by `text`, then opens the agent's next turn.
    pub fn push_observation(
        &mut self,
        template: &ChatTemplate<'_>,
        text: &str,
    ) -> Result<(), ChatError> {
        self.push_user(template, &format!("{OBSERVATION_PREFIX}{text}"))
    }

    /// Appends a `user` message with `content` as written (no prefix), then opens the
    /// agent's next turn: `\n<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n`,
    /// all masked out. Fails, changing nothing, when an agent turn is due or the
    /// episode would exceed the limit.
    pub fn push_user(
        &mut self,
        template: &ChatTemplate<'_>,
        content: &str,
    ) -> Result<(), ChatError> {
        if self.awaiting_agent {
            return Err(ChatError::OutOfTurn {
                expected: "an agent turn",
                got: "a user message",
            });
        }
        let mut tokens = template.separator().to_vec();
        tokens.extend(template.message_tokens(Role::User, content)?);
        tokens.extend_from_slice(template.separator());
        tokens.extend_from_slice(template.header(Role::Assistant));
        template.check_len(self.tokens.len() + tokens.len())?;
        self.append(&tokens, false);
        self.awaiting_agent = true;
        Ok(())
    }

    /// Appends `tokens` with the mask value `agent`.
    fn append(&mut self, tokens: &[u32], agent: bool) {
        self.tokens.extend_from_slice(tokens);
        self.agent_mask.resize(self.tokens.len(), agent);
    }

    /// The whole token sequence.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Per token: whether it is an agent token trained on (same length as
    /// [`Self::tokens`]): every token the agent generated, but none of an untrained
    /// turn of SFT data.
    pub fn agent_mask(&self) -> &[bool] {
        &self.agent_mask
    }

    /// The tokens and the agent mask, by value.
    pub fn into_parts(self) -> (Vec<u32>, Vec<bool>) {
        (self.tokens, self.agent_mask)
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the episode holds no token (never true for a started episode).
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Tokens before the agent's first turn: system prompt, task and the opening
    /// `<|im_start|>assistant\n`.
    pub fn prompt_len(&self) -> usize {
        self.prompt_len
    }

    /// Whether the next push must be an agent turn (otherwise an observation).
    pub fn awaiting_agent(&self) -> bool {
        self.awaiting_agent
    }

    /// Token ranges of the agent's turns, in order (a forced `<|im_end|>` excluded).
    pub fn agent_turns(&self) -> &[Range<usize>] {
        &self.agent_turns
    }

    /// Number of agent tokens trained on (the loss's token count for this episode):
    /// those of its turns but for the untrained ones of SFT data.
    pub fn agent_token_count(&self) -> usize {
        self.agent_mask.iter().filter(|&&agent| agent).count()
    }

    /// The loss mask in the `Policy` convention: length `len - 1` (empty for an empty
    /// episode), position `i` true when token `i + 1` is the agent's.
    pub fn loss_mask(&self) -> Vec<bool> {
        self.agent_mask.iter().skip(1).copied().collect()
    }

    /// The tokens of the agent's last turn, its closing `<|im_end|>` removed; `None`
    /// before the first turn.
    pub fn last_agent_tokens(&self, template: &ChatTemplate<'_>) -> Option<&[u32]> {
        let turn = &self.tokens[self.agent_turns.last()?.clone()];
        let im_end = template.special_tokens().im_end;
        Some(turn.strip_suffix(&[im_end]).unwrap_or(turn))
    }

    /// The text of the agent's last turn, without its closing `<|im_end|>`: what the
    /// environment executes. `None` before the first turn.
    pub fn last_agent_text(
        &self,
        template: &ChatTemplate<'_>,
    ) -> Result<Option<String>, ChatError> {
        self.last_agent_tokens(template)
            .map(|tokens| template.tokenizer().decode(tokens))
            .transpose()
            .map_err(ChatError::from)
    }
}
