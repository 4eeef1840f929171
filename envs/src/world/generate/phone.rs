//! Phones: address books built from relations, text conversations and calls (each
//! recorded on both phones), and alarms.

use super::words::TEXT_LINES;
use super::{acquaintances, others, past_moment};
use crate::world::db::Db;
use crate::world::records::{Alarm, Call, CallKind, Contact, MessageDirection, TextMessage};
use crate::world::rng::Rng;
use crate::world::table::PersonId;
use crate::world::time::{today, Timestamp};
use crate::world::USER;

const USER_TEXTS: usize = 200;
const USER_CALLS: usize = 60;
const OTHER_TEXTS_PER_PERSON: usize = 3;

const ALARMS: [(&str, &str, &[&str]); 5] = [
    (
        "06:30",
        "Wake up",
        &["monday", "tuesday", "wednesday", "thursday", "friday"],
    ),
    ("08:00", "Weekend wake up", &["saturday", "sunday"]),
    ("13:45", "Take medicine", &[]),
    ("18:30", "Gym", &["monday", "wednesday", "friday"]),
    (
        "22:15",
        "Wind down",
        &["sunday", "monday", "tuesday", "wednesday", "thursday"],
    ),
];

pub(super) fn generate(db: &mut Db, rng: &mut Rng) {
    let mut people = vec![USER];
    people.extend(others(db));
    for &owner in &people {
        add_contacts(db, rng, owner);
    }
    let mut texts: Vec<(PersonId, PersonId, String, Timestamp)> = Vec::new();
    let friends = acquaintances(db, USER);
    for _ in 0..USER_TEXTS {
        let Some(&other) = rng.choose(&friends) else {
            break;
        };
        let (from, to) = if rng.chance(0.5) {
            (USER, other)
        } else {
            (other, USER)
        };
        texts.push((
            from,
            to,
            rng.pick(&TEXT_LINES).to_string(),
            past_moment(rng, 120),
        ));
    }
    for &person in &people[1..] {
        let known = acquaintances(db, person);
        for _ in 0..OTHER_TEXTS_PER_PERSON {
            let Some(&other) = rng.choose(&known) else {
                break;
            };
            if other != USER {
                texts.push((
                    person,
                    other,
                    rng.pick(&TEXT_LINES).to_string(),
                    past_moment(rng, 120),
                ));
            }
        }
    }
    texts.sort_by_key(|t| t.3);
    let recent = today().add_days(-3).at(0, 0, 0);
    for (from, to, body, sent_at) in texts {
        let (from_number, to_number) = (number(db, from), number(db, to));
        db.text_messages.insert(TextMessage {
            owner: from,
            other_number: to_number,
            direction: MessageDirection::Sent,
            body: body.clone(),
            sent_at,
            read: true,
        });
        db.text_messages.insert(TextMessage {
            owner: to,
            other_number: from_number,
            direction: MessageDirection::Received,
            body,
            sent_at,
            read: sent_at < recent || rng.chance(0.3),
        });
    }
    add_calls(db, rng, &friends);
    for (time, label, days) in rng.sample(&ALARMS, 4) {
        db.alarms.insert(Alarm {
            owner: USER,
            time: time.to_owned(),
            label: label.to_owned(),
            repeat_days: days.iter().map(|d| d.to_string()).collect(),
            enabled: rng.chance(0.8),
        });
    }
    for &owner in &people[1..] {
        let count = rng.below(3);
        for (time, label, days) in rng.sample(&ALARMS, count) {
            db.alarms.insert(Alarm {
                owner,
                time: time.to_owned(),
                label: label.to_owned(),
                repeat_days: days.iter().map(|d| d.to_string()).collect(),
                enabled: true,
            });
        }
    }
}

fn number(db: &Db, person: PersonId) -> String {
    db.people
        .get(person)
        .map(|p| p.phone_number.clone())
        .unwrap_or_default()
}

fn add_contacts(db: &mut Db, rng: &mut Rng, owner: PersonId) {
    let mut contacts: Vec<Contact> = db
        .relations_of(owner)
        .into_iter()
        .filter_map(|(other, kind)| {
            let p = db.people.get(other)?;
            Some(Contact {
                owner,
                first_name: p.first_name.clone(),
                last_name: p.last_name.clone(),
                phone_number: p.phone_number.clone(),
                email: Some(p.email.clone()),
                relationships: vec![kind.name().to_owned()],
                birthday: Some(p.birthday),
            })
        })
        .collect();
    for contact in &mut contacts {
        if rng.chance(0.3) {
            contact.birthday = None;
        }
        if rng.chance(0.15) {
            contact.email = None;
        }
    }
    contacts.sort_by(|a, b| (&a.first_name, &a.last_name).cmp(&(&b.first_name, &b.last_name)));
    for contact in contacts {
        db.contacts.insert(contact);
    }
}

fn add_calls(db: &mut Db, rng: &mut Rng, friends: &[PersonId]) {
    let mut calls: Vec<(PersonId, PersonId, bool, Timestamp, u32)> = (0..USER_CALLS)
        .filter_map(|_| {
            let &other = rng.choose(friends)?;
            let (caller, callee) = if rng.chance(0.5) {
                (USER, other)
            } else {
                (other, USER)
            };
            let answered = rng.chance(0.75);
            let duration = if answered {
                rng.range(20, 2400) as u32
            } else {
                0
            };
            Some((caller, callee, answered, past_moment(rng, 90), duration))
        })
        .collect();
    calls.sort_by_key(|c| c.3);
    for (caller, callee, answered, started_at, duration_seconds) in calls {
        let (caller_number, callee_number) = (number(db, caller), number(db, callee));
        db.calls.insert(Call {
            owner: caller,
            other_number: callee_number,
            kind: CallKind::Outgoing,
            started_at,
            duration_seconds,
        });
        db.calls.insert(Call {
            owner: callee,
            other_number: caller_number,
            kind: if answered {
                CallKind::Incoming
            } else {
                CallKind::Missed
            },
            started_at,
            duration_seconds,
        });
    }
}
