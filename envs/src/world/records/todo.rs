//! Rows of the `todo` app: lists and their items.

use serde::Serialize;

use crate::world::table::{Id, PersonId};
use crate::world::time::{Date, Timestamp};

/// A to-do list.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TodoList {
    /// Whose list.
    pub owner: PersonId,
    /// Name, unique per owner.
    pub name: String,
    /// When it was made.
    pub created_at: Timestamp,
}

/// How urgent an item is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// Low.
    Low,
    /// Medium.
    Medium,
    /// High.
    High,
}

impl Priority {
    /// Every priority, lowest first.
    pub const ALL: [Priority; 3] = [Priority::Low, Priority::Medium, Priority::High];

    /// The name APIs show.
    pub fn name(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::Medium => "medium",
            Priority::High => "high",
        }
    }

    /// The priority with this name.
    pub fn parse(name: &str) -> Option<Priority> {
        Priority::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// An item of a to-do list.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TodoItem {
    /// Whose item (the list's owner).
    pub owner: PersonId,
    /// The list it is on.
    pub list_id: Id,
    /// What to do.
    pub title: String,
    /// When it is due, if ever.
    pub due_date: Option<Date>,
    /// How urgent.
    pub priority: Priority,
    /// Whether it is done.
    pub done: bool,
    /// When it was marked done.
    pub completed_at: Option<Timestamp>,
    /// When it was added.
    pub created_at: Timestamp,
}
