//! Templates on the `splitbill` app alone (an app no training template uses: these are
//! test-challenge templates).

use serde_json::{json, Value};

use super::pick::{dollars, int, number, params, text, value, Picker};
use super::{SkillParam, Solution, TaskKind, Template};
use crate::sandbox::ApiError;
use crate::world::{Db, Id, Money, PersonId, USER};

/// Expenses the user may ask to record.
const EXPENSES: [&str; 5] = [
    "Cleaning supplies",
    "Internet bill",
    "Pizza night",
    "Museum tickets",
    "Gas for the drive",
];

/// The splitbill templates.
pub(super) const TEMPLATES: &[Template] = &[
    Template {
        name: "splitbill_owed_by_member",
        apps: &["splitbill"],
        kind: TaskKind::Question,
        pick: |p| {
            let db = p.db();
            let debts: Vec<(String, PersonId)> = user_groups(db)
                .into_iter()
                .flat_map(|(id, name)| {
                    db.group_debts(id, USER).into_iter().filter(|&(_, m)| m != Money::ZERO).map(move |(who, _)| (name.clone(), who))
                })
                .collect();
            let (group, member) = p.pick(&debts)?;
            Some(params([("group", json!(group)), ("name", json!(db.name_of(member)))]))
        },
        instruction: |p| {
            format!(
                "In my splitbill group \"{}\", how much does {} owe me? Answer with a negative amount if I owe them.",
                text(p, "group"),
                text(p, "name")
            )
        },
        reference: |r, p| {
            let db = r.db();
            let group = group_named(db, text(p, "group"))?;
            let owed = db
                .group_debts(group, USER)
                .into_iter()
                .find(|&(who, _)| db.name_of(who) == text(p, "name"))
                .map_or(Money::ZERO, |(_, m)| m);
            Ok(json!(owed.dollars()))
        },
        solution: Solution {
            names: &["amount_owed_by_member", "member_balance_in_group", "how_much_member_owes"],
            summaries: &[
                "Returns how much a member of a splitbill group owes the user (negative: the user owes them).",
                "Looks up one member's balance with the user in a splitbill group.",
            ],
            params: &[
                SkillParam { name: "group", ty: "str", doc: "the group's name" },
                SkillParam { name: "name", ty: "str", doc: "the member's full name" },
            ],
            returns: ("float", "the amount in dollars the member owes the user"),
            docs: &[("splitbill", "show_groups"), ("splitbill", "show_balances")],
            body: include_str!("skills/splitbill_owed_by_member.star"),
        },
    },
    Template {
        name: "splitbill_settle_debts",
        apps: &["splitbill"],
        kind: TaskKind::Action,
        pick: |p| pick_group_threshold(p, |owed| -owed),
        instruction: |p| {
            format!(
                "In my splitbill group \"{}\", settle up in full with every member I owe more than {}.",
                text(p, "group"),
                dollars(int(p, "minimum") as f64)
            )
        },
        reference: |r, p| {
            let db = r.db();
            let group = group_named(db, text(p, "group"))?;
            let minimum = Money::from_dollars(int(p, "minimum"));
            let emails: Vec<String> = db
                .group_debts(group, USER)
                .into_iter()
                .filter(|&(_, owed)| -owed > minimum)
                .map(|(who, _)| db.email_of(who))
                .collect();
            for email in emails {
                r.call("splitbill", "settle_up", json!({"group_id": group, "email": email}))?;
            }
            Ok(Value::Null)
        },
        solution: Solution {
            names: &["settle_debts_in_group", "pay_back_group_members", "settle_what_i_owe"],
            summaries: &[
                "Settles up in full with every member of a splitbill group the user owes more than an amount.",
                "Records full repayments to the group members the user owes over a threshold.",
            ],
            params: &[
                SkillParam { name: "group", ty: "str", doc: "the group's name" },
                SkillParam { name: "minimum", ty: "float", doc: "only debts above this many dollars are settled" },
            ],
            returns: ("list", "names of the members paid back"),
            docs: &[("splitbill", "show_balances"), ("splitbill", "settle_up")],
            body: include_str!("skills/splitbill_settle_debts.star"),
        },
    },
    Template {
        name: "splitbill_add_shared_expense",
        apps: &["splitbill"],
        kind: TaskKind::Action,
        pick: |p| {
            let groups: Vec<String> = user_groups(p.db()).into_iter().map(|(_, name)| name).collect();
            let group = p.pick(&groups)?;
            let description = p.pick(&EXPENSES)?;
            let amount = p.range(2_000, 20_000) as f64 / 100.0;
            Some(params([("group", json!(group)), ("description", json!(description)), ("amount", json!(amount))]))
        },
        instruction: |p| {
            format!(
                "Add a {} expense \"{}\" to my splitbill group \"{}\", paid by me and split evenly among all its members.",
                dollars(number(p, "amount")),
                text(p, "description"),
                text(p, "group")
            )
        },
        reference: |r, p| {
            let group = group_named(r.db(), text(p, "group"))?;
            r.call(
                "splitbill",
                "add_expense",
                json!({"group_id": group, "description": text(p, "description"), "amount": value(p, "amount")}),
            )?;
            Ok(Value::Null)
        },
        solution: Solution {
            names: &["add_group_expense", "record_shared_expense", "split_expense_in_group"],
            summaries: &[
                "Records an expense the user paid in a splitbill group, split evenly among all members.",
                "Adds a shared expense paid by the user to one of their splitbill groups.",
            ],
            params: &[
                SkillParam { name: "group", ty: "str", doc: "the group's name" },
                SkillParam { name: "description", ty: "str", doc: "what the expense was for" },
                SkillParam { name: "amount", ty: "float", doc: "the amount in dollars" },
            ],
            returns: ("int", "the new expense's id"),
            docs: &[("splitbill", "show_groups"), ("splitbill", "add_expense")],
            body: include_str!("skills/splitbill_add_shared_expense.star"),
        },
    },
];

/// The user's groups as `(id, name)`.
pub(super) fn user_groups(db: &Db) -> Vec<(Id, String)> {
    db.bill_groups
        .filter(|g| g.member_ids.contains(&USER))
        .map(|(id, g)| (id, g.name.clone()))
        .collect()
}

/// The id of the user's group named `name`.
pub(super) fn group_named(db: &Db, name: &str) -> Result<Id, ApiError> {
    user_groups(db)
        .into_iter()
        .find(|(_, n)| n == name)
        .map(|(id, _)| id)
        .ok_or_else(|| ApiError::new(format!("no group named {name:?}")))
}

/// A group and a whole-dollar minimum below the `amount` (what a member owes the user,
/// mapped by `amount`) of at least one member: parameters `group` and `minimum`.
pub(super) fn pick_group_threshold(
    p: &mut Picker<'_>,
    amount: fn(Money) -> Money,
) -> Option<super::Params> {
    let db = p.db();
    let candidates: Vec<(String, Money)> = user_groups(db)
        .into_iter()
        .flat_map(|(id, name)| {
            db.group_debts(id, USER)
                .into_iter()
                .map(move |(_, owed)| (name.clone(), amount(owed)))
        })
        .filter(|&(_, m)| m > Money::from_dollars(1))
        .collect();
    let (group, top) = p.pick(&candidates)?;
    let minimum = p.range(0, (top.cents() - 1) / 100);
    Some(params([
        ("group", json!(group)),
        ("minimum", json!(minimum)),
    ]))
}
