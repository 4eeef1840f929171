//! Rows of the `phone` app: contacts, text messages (one copy per phone), the call log
//! and alarms.

use serde::Serialize;

use crate::world::table::PersonId;
use crate::world::time::{Date, Timestamp};

/// An entry of a person's address book.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Contact {
    /// Whose address book.
    pub owner: PersonId,
    /// Given name.
    pub first_name: String,
    /// Family name.
    pub last_name: String,
    /// Phone number.
    pub phone_number: String,
    /// Email address, if known.
    pub email: Option<String>,
    /// Relationship labels (`friend`, `family`, `roommate`, `coworker`, or any other).
    pub relationships: Vec<String>,
    /// Birthday, if known.
    pub birthday: Option<Date>,
}

/// Whether a text message was sent or received by its phone's owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageDirection {
    /// The owner sent it.
    Sent,
    /// The owner received it.
    Received,
}

/// One phone's copy of a text message.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TextMessage {
    /// Whose phone.
    pub owner: PersonId,
    /// The other party's number.
    pub other_number: String,
    /// Sent or received.
    pub direction: MessageDirection,
    /// Text.
    pub body: String,
    /// When it was sent.
    pub sent_at: Timestamp,
    /// Whether the owner has read it (always true for sent messages).
    pub read: bool,
}

/// What kind of call an entry of the call log is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallKind {
    /// Answered incoming call.
    Incoming,
    /// Call the owner made.
    Outgoing,
    /// Incoming call not answered.
    Missed,
}

impl CallKind {
    /// Every kind.
    pub const ALL: [CallKind; 3] = [CallKind::Incoming, CallKind::Outgoing, CallKind::Missed];

    /// The kind with this name.
    pub fn parse(name: &str) -> Option<CallKind> {
        CallKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The name APIs show.
    pub fn name(self) -> &'static str {
        match self {
            CallKind::Incoming => "incoming",
            CallKind::Outgoing => "outgoing",
            CallKind::Missed => "missed",
        }
    }
}

/// An entry of a person's call log.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Call {
    /// Whose phone.
    pub owner: PersonId,
    /// The other party's number.
    pub other_number: String,
    /// Incoming, outgoing or missed.
    pub kind: CallKind,
    /// When it started.
    pub started_at: Timestamp,
    /// How long it lasted (0 for missed calls).
    pub duration_seconds: u32,
}

/// An alarm on a person's phone.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Alarm {
    /// Whose phone.
    pub owner: PersonId,
    /// Time of day, `HH:MM`.
    pub time: String,
    /// Label.
    pub label: String,
    /// Weekdays it repeats on (`monday`, ...); empty: rings once.
    pub repeat_days: Vec<String>,
    /// Whether it is on.
    pub enabled: bool,
}
