//! Bill-splitting groups of the user with roommates, friends, coworkers and family,
//! a few groups of other people, their expenses and some settlements.

use super::words::{CITIES, PAYMENT_REASONS};
use super::{acquaintances, others, past_moment};
use crate::world::db::Db;
use crate::world::money::Money;
use crate::world::records::{BillGroup, Expense, RelationKind, Settlement, Share};
use crate::world::rng::Rng;
use crate::world::table::{Id, PersonId};
use crate::world::time::today;
use crate::world::USER;

const OTHER_GROUPS: usize = 4;

pub(super) fn generate(db: &mut Db, rng: &mut Rng) {
    let (city, _, _) = *rng.pick(&CITIES);
    let trip = format!("{city} trip");
    let user_groups: [(&str, RelationKind, usize); 4] = [
        ("Apartment", RelationKind::Roommate, 2),
        (&trip, RelationKind::Friend, 4),
        ("Team lunches", RelationKind::Coworker, 4),
        ("Family dinners", RelationKind::Family, 3),
    ];
    for (name, kind, size) in user_groups {
        let mut members = vec![USER];
        members.extend(rng.sample(&db.related(USER, kind), size));
        let expenses = rng.range(8, 16) as usize;
        add_group(db, rng, name, members, expenses);
    }
    let everyone = others(db);
    for i in 0..OTHER_GROUPS {
        let Some(&founder) = rng.choose(&everyone) else {
            break;
        };
        let mut members = vec![founder];
        members.extend(
            acquaintances(db, founder)
                .into_iter()
                .filter(|&p| p != USER)
                .take(3),
        );
        let expenses = rng.range(3, 8) as usize;
        add_group(
            db,
            rng,
            &format!("Shared costs {}", i + 1),
            members,
            expenses,
        );
    }
}

fn add_group(db: &mut Db, rng: &mut Rng, name: &str, member_ids: Vec<PersonId>, expenses: usize) {
    if member_ids.len() < 2 {
        return;
    }
    let created_at = past_moment(rng, 300);
    let creator = member_ids[0];
    let group_id = db.bill_groups.insert(BillGroup {
        name: name.to_owned(),
        creator,
        member_ids: member_ids.clone(),
        created_at,
    });
    let age_days = today().days() - created_at.date().days();
    let mut moments: Vec<_> = (0..expenses)
        .map(|_| past_moment(rng, age_days).max(created_at))
        .collect();
    moments.sort();
    for created_at in moments {
        let Some(&payer) = rng.choose(&member_ids) else {
            continue;
        };
        let (reason, low, high) = *rng.pick(&PAYMENT_REASONS);
        let amount = Money::from_cents(rng.range(low * 100, high * 100));
        let sharers: Vec<PersonId> = if rng.chance(0.7) {
            member_ids.clone()
        } else {
            let count = rng.range(2, member_ids.len() as i64) as usize;
            let mut some = rng.sample(&member_ids, count);
            some.sort_by_key(|p| member_ids.iter().position(|m| m == p));
            some
        };
        let shares = sharers
            .iter()
            .zip(amount.split_evenly(sharers.len()))
            .map(|(&person, amount)| Share { person, amount })
            .collect();
        db.expenses.insert(Expense {
            group_id,
            payer,
            description: reason.to_owned(),
            amount,
            shares,
            created_at,
        });
    }
    add_settlements(db, rng, group_id, &member_ids);
}

/// Some members pay back part of what they owe the group's first member.
fn add_settlements(db: &mut Db, rng: &mut Rng, group_id: Id, members: &[PersonId]) {
    let Some(&first) = members.first() else {
        return;
    };
    for (other, owed) in db.group_debts(group_id, first) {
        if owed > Money::ZERO && rng.chance(0.3) {
            let amount = Money::from_cents(owed.cents() / 2);
            if amount > Money::ZERO {
                let created_at = past_moment(rng, 20);
                db.settlements.insert(Settlement {
                    group_id,
                    from: other,
                    to: first,
                    amount,
                    created_at,
                });
            }
        }
    }
}
