//! Templates on the `coinpay` payments app alone: payment history and payment requests.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::pick::{dollars, int, month_name, params, text};
use super::{SkillParam, Solution, TaskKind, Template};
use crate::sandbox::ApiError;
use crate::world::records::{PaymentRequest, RequestStatus, Transaction};
use crate::world::{Date, Db, Id, Money, PersonId, USER};

/// The coinpay templates.
pub(super) const TEMPLATES: &[Template] = &[
    Template {
        name: "coinpay_received_in_month",
        apps: &["coinpay"],
        kind: TaskKind::Question,
        pick: |p| {
            let received: Vec<(PersonId, String)> = p
                .db()
                .transactions
                .filter(|t| t.receiver == USER && t.sender != USER)
                .map(|(_, t)| (t.sender, month_of(t)))
                .collect();
            let (sender, month) = p.pick(&received)?;
            Some(params([("name", json!(p.db().name_of(sender))), ("month", json!(month))]))
        },
        instruction: |p| {
            format!(
                "How much money did {} send me on coinpay in {}?",
                text(p, "name"),
                month_name(text(p, "month"))
            )
        },
        reference: |r, p| {
            let sender = person_named(r.db(), text(p, "name"))?;
            let month = text(p, "month");
            let total: Money = r
                .db()
                .transactions
                .filter(|t| t.receiver == USER && t.sender == sender && month_of(t) == month)
                .map(|(_, t)| t.amount)
                .sum();
            Ok(json!(total.dollars()))
        },
        solution: Solution {
            names: &["total_received_from_in_month", "money_received_from", "sum_payments_from_in_month"],
            summaries: &[
                "Adds up the coinpay payments the user received from one person in a month.",
                "Returns how much money a person sent the user on coinpay during a given month.",
            ],
            params: &[
                SkillParam { name: "name", ty: "str", doc: "the sender's full name" },
                SkillParam { name: "month", ty: "str", doc: "the month, written YYYY-MM" },
            ],
            returns: ("float", "the total in dollars"),
            docs: &[("coinpay", "search_users"), ("coinpay", "show_transactions")],
            body: include_str!("skills/coinpay_received_in_month.star"),
        },
    },
    Template {
        name: "coinpay_spent_on_since",
        apps: &["coinpay"],
        kind: TaskKind::Question,
        pick: |p| {
            let sent: Vec<(String, Date)> = p
                .db()
                .transactions
                .filter(|t| t.sender == USER)
                .map(|(_, t)| (t.description.clone(), t.created_at.date()))
                .collect();
            let (description, day) = p.pick(&sent)?;
            let since = day.add_days(-(p.range(0, 40) as i32));
            Some(params([("description", json!(description)), ("since", json!(since.to_string()))]))
        },
        instruction: |p| {
            format!(
                "How much have I paid on coinpay for \"{}\" since {}, that day included?",
                text(p, "description"),
                text(p, "since")
            )
        },
        reference: |r, p| {
            let description = text(p, "description");
            let since = Date::parse(text(p, "since")).ok_or_else(|| ApiError::new("bad date"))?;
            let total: Money = r
                .db()
                .transactions
                .filter(|t| {
                    t.sender == USER
                        && t.description.eq_ignore_ascii_case(description)
                        && t.created_at.date() >= since
                })
                .map(|(_, t)| t.amount)
                .sum();
            Ok(json!(total.dollars()))
        },
        solution: Solution {
            names: &["total_paid_for_since", "spending_on_since", "sum_sent_payments_for"],
            summaries: &[
                "Adds up the coinpay payments the user sent with a given description since a day.",
                "Returns how much the user paid on coinpay for one purpose from a date on.",
            ],
            params: &[
                SkillParam { name: "description", ty: "str", doc: "the payments' description, e.g. Groceries" },
                SkillParam { name: "since", ty: "str", doc: "the first day counted, YYYY-MM-DD" },
            ],
            returns: ("float", "the total in dollars"),
            docs: &[("coinpay", "show_transactions")],
            body: include_str!("skills/coinpay_spent_on_since.star"),
        },
    },
    Template {
        name: "coinpay_decline_requests_from",
        apps: &["coinpay"],
        kind: TaskKind::Action,
        pick: |p| {
            let requesters: Vec<PersonId> = pending(p.db(), |r| r.payer == USER).map(|(_, r)| r.requester).collect();
            let requester = p.pick(&requesters)?;
            Some(params([("name", json!(p.db().name_of(requester)))]))
        },
        instruction: |p| format!("Decline every pending coinpay payment request that {} sent me.", text(p, "name")),
        reference: |r, p| {
            let requester = person_named(r.db(), text(p, "name"))?;
            let ids: Vec<Id> = pending(r.db(), |q| q.payer == USER && q.requester == requester).map(|(id, _)| id).collect();
            for id in ids {
                r.call("coinpay", "decline_payment_request", json!({"payment_request_id": id}))?;
            }
            Ok(Value::Null)
        },
        solution: Solution {
            names: &["decline_pending_requests_from", "decline_requests_from_person", "reject_pending_requests_from"],
            summaries: &[
                "Declines every pending coinpay payment request a person sent the user.",
                "Rejects all of one person's pending requests for money from the user.",
            ],
            params: &[SkillParam { name: "name", ty: "str", doc: "the requester's full name" }],
            returns: ("int", "how many requests were declined"),
            docs: &[("coinpay", "show_payment_requests"), ("coinpay", "decline_payment_request")],
            body: include_str!("skills/coinpay_decline_requests_from.star"),
        },
    },
    Template {
        name: "coinpay_approve_small_requests",
        apps: &["coinpay"],
        kind: TaskKind::Action,
        pick: |p| {
            let db = p.db();
            let amounts: Vec<Money> = pending(db, |r| r.payer == USER).map(|(_, r)| r.amount).collect();
            let amount = p.pick(&amounts)?;
            let limit = (amount.cents() + 99) / 100 + p.range(0, 10);
            let total: Money = amounts.iter().filter(|a| a.cents() <= limit * 100).copied().sum();
            let balance = db.wallet_of(USER).map_or(Money::ZERO, |(_, w)| w.balance);
            (total <= balance).then(|| params([("limit", json!(limit))]))
        },
        instruction: |p| {
            format!(
                "Pay every pending coinpay payment request I have received that asks for {} or less.",
                dollars(int(p, "limit") as f64)
            )
        },
        reference: |r, p| {
            let limit = Money::from_dollars(int(p, "limit"));
            let ids: Vec<Id> = pending(r.db(), |q| q.payer == USER && q.amount <= limit).map(|(id, _)| id).collect();
            for id in ids {
                r.call("coinpay", "approve_payment_request", json!({"payment_request_id": id}))?;
            }
            Ok(Value::Null)
        },
        solution: Solution {
            names: &["pay_small_pending_requests", "approve_requests_up_to", "approve_cheap_requests"],
            summaries: &[
                "Pays every pending coinpay request the user received for at most a given amount.",
                "Approves the user's pending incoming payment requests that ask for no more than a limit.",
            ],
            params: &[SkillParam { name: "limit", ty: "float", doc: "the largest amount in dollars to pay" }],
            returns: ("list", "the ids of the requests paid"),
            docs: &[("coinpay", "show_payment_requests"), ("coinpay", "approve_payment_request")],
            body: include_str!("skills/coinpay_approve_small_requests.star"),
        },
    },
    Template {
        name: "coinpay_top_sender_in_month",
        apps: &["coinpay"],
        kind: TaskKind::Question,
        pick: |p| {
            let months: Vec<String> = p
                .db()
                .transactions
                .filter(|t| t.receiver == USER)
                .map(|(_, t)| month_of(t))
                .collect();
            let month = p.pick(&months)?;
            top_sender(p.db(), &month)?;
            Some(params([("month", json!(month))]))
        },
        instruction: |p| {
            format!(
                "Who sent me the most money on coinpay in {}, adding up all their payments that month? Answer with their full name.",
                month_name(text(p, "month"))
            )
        },
        reference: |r, p| {
            let sender = top_sender(r.db(), text(p, "month")).ok_or_else(|| ApiError::new("no single top sender"))?;
            Ok(json!(r.db().name_of(sender)))
        },
        solution: Solution {
            names: &["top_sender_in_month", "biggest_sender_of_month", "who_sent_most_in_month"],
            summaries: &[
                "Finds the person who sent the user the most money on coinpay during a month.",
                "Returns the name of whoever paid the user the largest total in a given month.",
            ],
            params: &[SkillParam { name: "month", ty: "str", doc: "the month, written YYYY-MM" }],
            returns: ("str", "the sender's full name"),
            docs: &[("coinpay", "show_transactions")],
            body: include_str!("skills/coinpay_top_sender_in_month.star"),
        },
    },
    Template {
        name: "coinpay_sent_to_person",
        apps: &["coinpay"],
        kind: TaskKind::Question,
        pick: |p| {
            let receivers: Vec<PersonId> = p
                .db()
                .transactions
                .filter(|t| t.sender == USER)
                .map(|(_, t)| t.receiver)
                .collect();
            let receiver = p.pick(&receivers)?;
            Some(params([("name", json!(p.db().name_of(receiver)))]))
        },
        instruction: |p| format!("How much money have I sent to {} on coinpay in total?", text(p, "name")),
        reference: |r, p| {
            let receiver = person_named(r.db(), text(p, "name"))?;
            let total: Money = r
                .db()
                .transactions
                .filter(|t| t.sender == USER && t.receiver == receiver)
                .map(|(_, t)| t.amount)
                .sum();
            Ok(json!(total.dollars()))
        },
        solution: Solution {
            names: &["total_sent_to", "money_sent_to_person", "sum_payments_to"],
            summaries: &[
                "Adds up every coinpay payment the user sent to one person.",
                "Returns the total the user has paid a given person on coinpay.",
            ],
            params: &[SkillParam { name: "name", ty: "str", doc: "the receiver's full name" }],
            returns: ("float", "the total in dollars"),
            docs: &[("coinpay", "search_users"), ("coinpay", "show_transactions")],
            body: include_str!("skills/coinpay_sent_to_person.star"),
        },
    },
    Template {
        name: "coinpay_cancel_requests_to",
        apps: &["coinpay"],
        kind: TaskKind::Action,
        pick: |p| {
            let payers: Vec<PersonId> = pending(p.db(), |r| r.requester == USER).map(|(_, r)| r.payer).collect();
            let payer = p.pick(&payers)?;
            Some(params([("name", json!(p.db().name_of(payer)))]))
        },
        instruction: |p| format!("Cancel every pending coinpay payment request I sent to {}.", text(p, "name")),
        reference: |r, p| {
            let payer = person_named(r.db(), text(p, "name"))?;
            let ids: Vec<Id> = pending(r.db(), |q| q.requester == USER && q.payer == payer).map(|(id, _)| id).collect();
            for id in ids {
                r.call("coinpay", "cancel_payment_request", json!({"payment_request_id": id}))?;
            }
            Ok(Value::Null)
        },
        solution: Solution {
            names: &["cancel_requests_sent_to", "cancel_pending_requests_to", "withdraw_requests_to"],
            summaries: &[
                "Cancels every pending coinpay payment request the user sent to a person.",
                "Withdraws all of the user's pending requests for money from one person.",
            ],
            params: &[SkillParam { name: "name", ty: "str", doc: "the payer's full name" }],
            returns: ("int", "how many requests were cancelled"),
            docs: &[("coinpay", "show_payment_requests"), ("coinpay", "cancel_payment_request")],
            body: include_str!("skills/coinpay_cancel_requests_to.star"),
        },
    },
];

/// The month of a payment, `YYYY-MM`.
fn month_of(t: &Transaction) -> String {
    let day = t.created_at.date();
    format!("{:04}-{:02}", day.year(), day.month())
}

/// The person with this full name.
pub(super) fn person_named(db: &Db, name: &str) -> Result<PersonId, ApiError> {
    db.people
        .find(|p| p.full_name() == name)
        .map(|(id, _)| id)
        .ok_or_else(|| ApiError::new(format!("no person named {name:?}")))
}

/// Pending payment requests satisfying `keep`.
fn pending<'a>(
    db: &'a Db,
    keep: impl Fn(&PaymentRequest) -> bool + 'a,
) -> impl Iterator<Item = (Id, &'a PaymentRequest)> + 'a {
    db.payment_requests
        .filter(move |r| r.status == RequestStatus::Pending && keep(r))
}

/// The one person who sent the user the largest total in `month`, if exactly one did.
fn top_sender(db: &Db, month: &str) -> Option<PersonId> {
    let mut totals: BTreeMap<PersonId, Money> = BTreeMap::new();
    for (_, t) in db
        .transactions
        .filter(|t| t.receiver == USER && month_of(t) == month)
    {
        *totals.entry(t.sender).or_default() += t.amount;
    }
    let best = totals.values().copied().max()?;
    let mut top = totals.into_iter().filter(|&(_, m)| m == best);
    let (person, _) = top.next()?;
    top.next().is_none().then_some(person)
}
