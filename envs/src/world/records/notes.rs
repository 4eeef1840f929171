//! Rows of the `notes` app.

use serde::Serialize;

use crate::world::table::PersonId;
use crate::world::time::Timestamp;

/// A note.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Note {
    /// Whose note.
    pub owner: PersonId,
    /// Title.
    pub title: String,
    /// Text.
    pub body: String,
    /// Tags, lower case, no duplicates.
    pub tags: Vec<String>,
    /// Whether it is pinned to the top.
    pub pinned: bool,
    /// When it was made.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}
