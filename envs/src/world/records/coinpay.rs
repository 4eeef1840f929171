//! Rows of the `coinpay` payments app: wallets, payments between people, and payment
//! requests.

use serde::Serialize;

use crate::world::money::Money;
use crate::world::table::{Id, PersonId};
use crate::world::time::Timestamp;

/// A person's coinpay balance.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Wallet {
    /// The holder.
    pub owner: PersonId,
    /// Money held.
    pub balance: Money,
}

/// A payment from one person to another.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Transaction {
    /// Who paid.
    pub sender: PersonId,
    /// Who was paid.
    pub receiver: PersonId,
    /// How much.
    pub amount: Money,
    /// The note attached to the payment.
    pub description: String,
    /// When it was made.
    pub created_at: Timestamp,
    /// The sender's payment card it was charged to; `None`: the sender's balance.
    pub payment_card_id: Option<Id>,
}

/// Where a payment request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestStatus {
    /// Waiting for the payer.
    Pending,
    /// Paid.
    Approved,
    /// Refused by the payer.
    Declined,
    /// Withdrawn by the requester.
    Cancelled,
}

impl RequestStatus {
    /// Every status.
    pub const ALL: [RequestStatus; 4] = [
        RequestStatus::Pending,
        RequestStatus::Approved,
        RequestStatus::Declined,
        RequestStatus::Cancelled,
    ];

    /// The status with this name.
    pub fn parse(name: &str) -> Option<RequestStatus> {
        RequestStatus::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The name APIs show.
    pub fn name(self) -> &'static str {
        match self {
            RequestStatus::Pending => "pending",
            RequestStatus::Approved => "approved",
            RequestStatus::Declined => "declined",
            RequestStatus::Cancelled => "cancelled",
        }
    }
}

/// A request for money from one person to another.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PaymentRequest {
    /// Who asks for money.
    pub requester: PersonId,
    /// Who is asked to pay.
    pub payer: PersonId,
    /// How much.
    pub amount: Money,
    /// What it is for.
    pub description: String,
    /// Where it stands.
    pub status: RequestStatus,
    /// When it was made.
    pub created_at: Timestamp,
    /// When it was approved, declined or cancelled.
    pub resolved_at: Option<Timestamp>,
    /// The payment that approved it.
    pub transaction_id: Option<Id>,
}
