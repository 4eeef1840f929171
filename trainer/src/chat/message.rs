//! Chat messages as SFT data holds them: roles, contents, and the JSON lines they come
//! in (a bare array of messages, or a record with a `messages` field, as the expert's
//! export writes).

use serde::{Deserialize, Serialize};

use super::ChatError;
use crate::tokenizer::{IM_END, IM_START};

/// Who wrote a message. Observations are `user` messages (Qwen2's base template has
/// no tool role), their contents starting with [`super::OBSERVATION_PREFIX`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The system prompt: agent rules and retrieved skills.
    System,
    /// The task, and every observation after it.
    User,
    /// An agent turn: the only role trained on.
    Assistant,
}

impl Role {
    /// The role's name as ChatML writes it after `<|im_start|>`.
    pub fn name(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// One chat message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// Its text.
    pub content: String,
    /// On an agent turn, whether SFT trains on it: JSON's `"weight": 1` (the default)
    /// or `0` (context the model sees but is not taught to write, such as the expert's
    /// deliberate mistakes); no other value is accepted.
    #[serde(
        rename = "weight",
        default = "trained_by_default",
        skip_serializing_if = "is_trained",
        with = "weight"
    )]
    pub trained: bool,
}

impl Message {
    /// A message of `role` with `content`, trained on if it is an agent turn.
    pub fn new(role: Role, content: impl Into<String>) -> Message {
        Message {
            role,
            content: content.into(),
            trained: true,
        }
    }
}

fn trained_by_default() -> bool {
    true
}

fn is_trained(trained: &bool) -> bool {
    *trained
}

/// `trained` as JSON's `weight`: 1 or 0.
mod weight {
    use serde::de::{Deserializer, Error};
    use serde::{Deserialize, Serializer};

    pub fn serialize<S: Serializer>(trained: &bool, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u8(u8::from(*trained))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
        match f64::deserialize(deserializer)? {
            1.0 => Ok(true),
            0.0 => Ok(false),
            w => Err(D::Error::custom(format!("weight must be 0 or 1, got {w}"))),
        }
    }
}

/// A JSON line that is a record with the conversation in `messages`; other fields
/// (ids, scores) are ignored.
#[derive(Deserialize)]
struct Record {
    messages: Vec<Message>,
}

/// The messages of one JSON line: either an array of `{"role", "content"}` objects or
/// an object whose `messages` field is such an array.
pub fn messages_from_json_line(line: &str) -> Result<Vec<Message>, ChatError> {
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|e| ChatError::Json(e.to_string()))?;
    let parsed = if value.is_array() {
        serde_json::from_value::<Vec<Message>>(value)
    } else {
        serde_json::from_value::<Record>(value).map(|r| r.messages)
    };
    parsed.map_err(|e| ChatError::Json(e.to_string()))
}

/// The ChatML text of `messages` (Qwen2's template), each message closed by
/// `<|im_end|>` and a newline; with `generation_prompt`, the opening of the next
/// assistant turn follows. For logs and inspection: token ids come from
/// [`super::ChatTemplate`], which tokenises every piece on its own.
pub fn render_chatml(messages: &[Message], generation_prompt: bool) -> String {
    let mut text = String::new();
    for message in messages {
        text.push_str(IM_START);
        text.push_str(message.role.name());
        text.push('\n');
        text.push_str(&message.content);
        text.push_str(IM_END);
        text.push('\n');
    }
    if generation_prompt {
        text.push_str(IM_START);
        text.push_str(Role::Assistant.name());
        text.push('\n');
    }
    text
}
