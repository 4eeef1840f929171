//! Rows of the `mail` email app. Each mailbox holds its own copy of a message: sending
//! one adds a copy to the sender's `sent` folder and one to each recipient's `inbox`.

use serde::Serialize;

use crate::world::table::PersonId;
use crate::world::time::Timestamp;

/// A mailbox folder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Folder {
    /// Received mail.
    Inbox,
    /// Mail the owner sent.
    Sent,
    /// Kept out of the inbox.
    Archive,
    /// Deleted, not yet purged.
    Trash,
}

impl Folder {
    /// Every folder.
    pub const ALL: [Folder; 4] = [Folder::Inbox, Folder::Sent, Folder::Archive, Folder::Trash];

    /// The name APIs show.
    pub fn name(self) -> &'static str {
        match self {
            Folder::Inbox => "inbox",
            Folder::Sent => "sent",
            Folder::Archive => "archive",
            Folder::Trash => "trash",
        }
    }

    /// The folder with this name.
    pub fn parse(name: &str) -> Option<Folder> {
        Folder::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// One mailbox's copy of an email.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Email {
    /// Whose mailbox it is in.
    pub owner: PersonId,
    /// The folder.
    pub folder: Folder,
    /// The sender's address.
    pub sender: String,
    /// The recipients' addresses.
    pub recipients: Vec<String>,
    /// Subject line.
    pub subject: String,
    /// Text.
    pub body: String,
    /// When it was sent.
    pub sent_at: Timestamp,
    /// Whether the owner has read it.
    pub read: bool,
    /// Whether the owner starred it.
    pub starred: bool,
}
