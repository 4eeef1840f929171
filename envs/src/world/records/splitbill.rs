//! Rows of the `splitbill` bill-splitting app: groups, shared expenses and settlements.

use serde::Serialize;

use crate::world::money::Money;
use crate::world::table::{Id, PersonId};
use crate::world::time::Timestamp;

/// A group of people who share expenses.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BillGroup {
    /// Name.
    pub name: String,
    /// Who made it.
    pub creator: PersonId,
    /// Members, in the order they joined.
    pub member_ids: Vec<PersonId>,
    /// When it was made.
    pub created_at: Timestamp,
}

/// One member's part of an expense.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Share {
    /// The member.
    pub person: PersonId,
    /// What they owe of it.
    pub amount: Money,
}

/// An expense one member paid for several.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Expense {
    /// The group.
    pub group_id: Id,
    /// Who paid.
    pub payer: PersonId,
    /// What it was.
    pub description: String,
    /// How much was paid.
    pub amount: Money,
    /// Who owes what of it; the shares add up to `amount`.
    pub shares: Vec<Share>,
    /// When it was added.
    pub created_at: Timestamp,
}

/// A repayment between two members of a group.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Settlement {
    /// The group.
    pub group_id: Id,
    /// Who paid back.
    pub from: PersonId,
    /// Who was paid back.
    pub to: PersonId,
    /// How much.
    pub amount: Money,
    /// When.
    pub created_at: Timestamp,
}
