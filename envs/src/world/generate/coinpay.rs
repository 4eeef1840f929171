//! Coinpay wallets, payments and payment requests.

use super::words::PAYMENT_REASONS;
use super::{acquaintances, moment_after, others, past_moment};
use crate::world::db::Db;
use crate::world::money::Money;
use crate::world::records::{PaymentRequest, RequestStatus, Transaction, Wallet};
use crate::world::rng::Rng;
use crate::world::table::PersonId;
use crate::world::time::Timestamp;
use crate::world::USER;

const USER_PAYMENTS: usize = 150;
const OTHER_PAYMENTS_PER_PERSON: usize = 4;
const USER_REQUESTS: usize = 36;

struct Payment {
    sender: PersonId,
    receiver: PersonId,
    amount: Money,
    description: String,
    created_at: Timestamp,
    by_card: bool,
}

pub(super) fn generate(db: &mut Db, rng: &mut Rng) {
    let mut people = vec![USER];
    people.extend(others(db));
    for &owner in &people {
        let dollars = if owner == USER {
            rng.range(800, 1500)
        } else {
            rng.range(0, 2000)
        };
        let balance = Money::from_cents(dollars * 100 + rng.range(0, 99));
        db.wallets.insert(Wallet { owner, balance });
    }
    let mut payments = Vec::new();
    let friends = acquaintances(db, USER);
    for _ in 0..USER_PAYMENTS {
        let Some(&other) = rng.choose(&friends) else {
            break;
        };
        let (sender, receiver) = if rng.chance(0.5) {
            (USER, other)
        } else {
            (other, USER)
        };
        payments.push(payment(rng, sender, receiver));
    }
    for &person in &people[1..] {
        let known = acquaintances(db, person);
        for _ in 0..OTHER_PAYMENTS_PER_PERSON {
            let Some(&other) = rng.choose(&known) else {
                break;
            };
            if other != USER {
                payments.push(payment(rng, person, other));
            }
        }
    }
    payments.sort_by_key(|p| p.created_at);
    for p in payments {
        let card = if p.by_card {
            db.payment_cards
                .find(|c| c.owner == p.sender)
                .map(|(id, _)| id)
        } else {
            None
        };
        db.transactions.insert(Transaction {
            sender: p.sender,
            receiver: p.receiver,
            amount: p.amount,
            description: p.description,
            created_at: p.created_at,
            payment_card_id: card,
        });
    }
    add_requests(db, rng, &friends);
}

fn payment(rng: &mut Rng, sender: PersonId, receiver: PersonId) -> Payment {
    let (reason, low, high) = *rng.pick(&PAYMENT_REASONS);
    let cents = rng.range(low * 100, high * 100);
    Payment {
        sender,
        receiver,
        amount: Money::from_cents(if rng.chance(0.5) {
            cents - cents % 100
        } else {
            cents
        }),
        description: reason.to_owned(),
        created_at: past_moment(rng, 365),
        by_card: rng.chance(0.2),
    }
}

fn add_requests(db: &mut Db, rng: &mut Rng, friends: &[PersonId]) {
    let mut requests = Vec::new();
    for _ in 0..USER_REQUESTS {
        let Some(&other) = rng.choose(friends) else {
            break;
        };
        let (requester, payer) = if rng.chance(0.5) {
            (USER, other)
        } else {
            (other, USER)
        };
        let p = payment(rng, payer, requester);
        let created_at = past_moment(rng, 90);
        let status = *rng.pick(&[
            RequestStatus::Pending,
            RequestStatus::Pending,
            RequestStatus::Approved,
            RequestStatus::Declined,
            RequestStatus::Cancelled,
        ]);
        requests.push((requester, payer, p, created_at, status));
    }
    requests.sort_by_key(|r| r.3);
    for (requester, payer, p, created_at, status) in requests {
        let resolved_at = (status != RequestStatus::Pending)
            .then(|| moment_after(rng, created_at, 600, 3 * 86_400));
        let transaction_id = match (status, resolved_at) {
            (RequestStatus::Approved, Some(at)) => Some(db.transactions.insert(Transaction {
                sender: payer,
                receiver: requester,
                amount: p.amount,
                description: p.description.clone(),
                created_at: at,
                payment_card_id: None,
            })),
            _ => None,
        };
        db.payment_requests.insert(PaymentRequest {
            requester,
            payer,
            amount: p.amount,
            description: p.description,
            status,
            created_at,
            resolved_at,
            transaction_id,
        });
    }
}
