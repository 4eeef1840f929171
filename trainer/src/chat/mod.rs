//! Chat episodes in Qwen2's ChatML template, assembled token-exactly.
//!
//! This module owns the chat format of an agent episode and its token sequence:
//! the system prompt, the task as the first `user`
//! message, each agent turn as an `assistant` message, and each observation as the
//! next `user` message. Episodes are built incrementally from the tokens the policy
//! sampled, with a mask marking the agent's own tokens, so training sees exactly what
//! was sampled; SFT conversations are tokenised by the same code path. It does not
//! sample, run code or compute losses.
//!
//! - [`ChatTemplate`]: the template's token pieces for one tokenizer, the length limit,
//!   [`ChatTemplate::start`] and [`ChatTemplate::from_messages`];
//! - [`ChatEpisode`]: tokens, agent mask, pushes of agent turns and observations;
//! - `message`: [`Message`], [`Role`], JSON lines of SFT data, ChatML text;
//! - [`ChatError`]: what can go wrong.
//!
//! Text that spells a special token (`<|im_end|>`) inside a message is encoded as
//! ordinary text: no message can close itself or open another.

mod episode;
mod error;
mod message;
mod template;

pub use episode::ChatEpisode;
pub use error::ChatError;
pub use message::{messages_from_json_line, render_chatml, Message, Role};
pub use template::ChatTemplate;

/// The text every observation message starts with (observations are `user`
/// messages: Qwen2's base template has no tool role); the built-in world's, so the
/// expert's exported trajectories and sampled episodes agree.
pub use sage_envs::prompt::OBSERVATION_PREFIX;
