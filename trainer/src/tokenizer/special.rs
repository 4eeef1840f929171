//! The ChatML special tokens and their ids in a given vocabulary.

/// Opens a chat message: `<|im_start|>role\n`.
pub const IM_START: &str = "<|im_start|>";
/// Closes a chat message; the agent's turn ends when it samples this token.
pub const IM_END: &str = "<|im_end|>";
/// Ends a document (Qwen2's padding and end-of-text token).
pub const END_OF_TEXT: &str = "<|endoftext|>";

/// The ChatML special tokens, in the order the built-in tokenizer gives them ids.
pub const CHATML_SPECIAL_TOKENS: [&str; 3] = [END_OF_TEXT, IM_START, IM_END];

/// Ids of the ChatML special tokens in one vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SpecialTokens {
    /// Id of `<|im_start|>`.
    pub im_start: u32,
    /// Id of `<|im_end|>`.
    pub im_end: u32,
    /// Id of `<|endoftext|>`.
    pub end_of_text: u32,
}

impl SpecialTokens {
    /// Whether `id` is one of the three special tokens.
    pub fn contains(&self, id: u32) -> bool {
        id == self.im_start || id == self.im_end || id == self.end_of_text
    }
}
