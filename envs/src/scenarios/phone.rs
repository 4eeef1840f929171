//! Templates on the `phone` app alone: contacts, texts, calls and alarms.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::pick::{params, text};
use super::{SkillParam, Solution, TaskKind, Template};
use crate::world::records::{CallKind, MessageDirection};
use crate::world::{Db, Id, USER};

/// Relationship labels the user's contacts carry.
pub(super) const RELATIONS: [&str; 4] = ["roommate", "family", "coworker", "friend"];

/// Texts the user may be asked to send.
const TEXTS: [&str; 6] = [
    "Running late tonight, start without me",
    "Dinner at my place on Sunday at 7?",
    "Happy Friday! Any plans for the weekend?",
    "Reminder: the meeting moved to 3pm",
    "I found your umbrella, I'll bring it tomorrow",
    "Thanks for the help today!",
];

/// Times the user may move alarms to.
const ALARM_TIMES: [&str; 5] = ["05:45", "06:15", "07:10", "07:40", "09:05"];

/// The phone templates.
pub(super) const TEMPLATES: &[Template] = &[
    Template {
        name: "phone_text_relation",
        apps: &["phone"],
        kind: TaskKind::Action,
        pick: |p| {
            let relation = p.pick(&RELATIONS)?;
            let message = p.pick(&TEXTS)?;
            Some(params([
                ("relation", json!(relation)),
                ("message", json!(message)),
            ]))
        },
        instruction: |p| {
            format!(
                "Text \"{}\" to each of my phone contacts labelled {}.",
                text(p, "message"),
                text(p, "relation")
            )
        },
        reference: |r, p| {
            for number in contact_numbers(r.db(), text(p, "relation")) {
                r.call(
                    "phone",
                    "send_text_message",
                    json!({"phone_number": number, "body": text(p, "message")}),
                )?;
            }
            Ok(Value::Null)
        },
        solution: Solution {
            names: &[
                "text_contacts_with_relationship",
                "send_text_to_relation",
                "message_contacts_labelled",
            ],
            summaries: &[
                "Sends the same text message to every phone contact with a relationship label.",
                "Texts a message to all of the user's contacts labelled with a relationship.",
            ],
            params: &[
                SkillParam {
                    name: "relation",
                    ty: "str",
                    doc: "the relationship label, e.g. family",
                },
                SkillParam {
                    name: "message",
                    ty: "str",
                    doc: "the text to send",
                },
            ],
            returns: ("int", "how many texts were sent"),
            docs: &[("phone", "show_contacts"), ("phone", "send_text_message")],
            body: include_str!("skills/phone_text_relation.star"),
        },
    },
    Template {
        name: "phone_missed_calls_from",
        apps: &["phone"],
        kind: TaskKind::Question,
        pick: |p| {
            let db = p.db();
            let callers: Vec<String> = db
                .calls
                .filter(|c| c.owner == USER && c.kind == CallKind::Missed)
                .filter_map(|(_, c)| contact_name(db, &c.other_number))
                .collect();
            Some(params([("name", json!(p.pick(&callers)?))]))
        },
        instruction: |p| {
            format!(
                "How many missed calls from {} are in my phone's call log?",
                text(p, "name")
            )
        },
        reference: |r, p| {
            let db = r.db();
            let number = contact_number(db, text(p, "name"));
            let count = db
                .calls
                .filter(|c| {
                    c.owner == USER
                        && c.kind == CallKind::Missed
                        && Some(&c.other_number) == number.as_ref()
                })
                .count();
            Ok(json!(count))
        },
        solution: Solution {
            names: &[
                "count_missed_calls_from",
                "missed_calls_from_contact",
                "missed_call_count",
            ],
            summaries: &[
                "Counts the missed calls from one of the user's contacts.",
                "Returns how many calls from a contact the user missed.",
            ],
            params: &[SkillParam {
                name: "name",
                ty: "str",
                doc: "the contact's full name",
            }],
            returns: ("int", "the number of missed calls"),
            docs: &[("phone", "show_contacts"), ("phone", "show_call_log")],
            body: include_str!("skills/phone_missed_calls_from.star"),
        },
    },
    Template {
        name: "phone_delete_texts_from",
        apps: &["phone"],
        kind: TaskKind::Action,
        pick: |p| {
            let db = p.db();
            let senders: Vec<String> = db
                .text_messages
                .filter(|m| m.owner == USER && m.direction == MessageDirection::Received)
                .filter_map(|(_, m)| contact_name(db, &m.other_number))
                .collect();
            Some(params([("name", json!(p.pick(&senders)?))]))
        },
        instruction: |p| {
            format!(
                "Delete every text message I received from {} from my phone.",
                text(p, "name")
            )
        },
        reference: |r, p| {
            let db = r.db();
            let number = contact_number(db, text(p, "name"));
            let ids: Vec<Id> = db
                .text_messages
                .filter(|m| {
                    m.owner == USER
                        && m.direction == MessageDirection::Received
                        && Some(&m.other_number) == number.as_ref()
                })
                .map(|(id, _)| id)
                .collect();
            for id in ids {
                r.call("phone", "delete_text_message", json!({"message_id": id}))?;
            }
            Ok(Value::Null)
        },
        solution: Solution {
            names: &[
                "delete_texts_from_contact",
                "delete_received_texts_from",
                "clear_texts_from",
            ],
            summaries: &[
                "Deletes every text message the user received from one contact.",
                "Removes all texts a contact sent the user from the phone.",
            ],
            params: &[SkillParam {
                name: "name",
                ty: "str",
                doc: "the contact's full name",
            }],
            returns: ("int", "how many messages were deleted"),
            docs: &[
                ("phone", "show_text_messages"),
                ("phone", "delete_text_message"),
            ],
            body: include_str!("skills/phone_delete_texts_from.star"),
        },
    },
    Template {
        name: "phone_move_alarms_on",
        apps: &["phone"],
        kind: TaskKind::Action,
        pick: |p| {
            let days: BTreeSet<String> = p
                .db()
                .alarms
                .filter(|a| a.owner == USER)
                .flat_map(|(_, a)| a.repeat_days.clone())
                .collect();
            let days: Vec<String> = days.into_iter().collect();
            let weekday = p.pick(&days)?;
            let time = p.pick(&ALARM_TIMES)?;
            Some(params([("weekday", json!(weekday)), ("time", json!(time))]))
        },
        instruction: |p| {
            format!(
                "Set every alarm on my phone that repeats on {} to ring at {} instead.",
                text(p, "weekday"),
                text(p, "time")
            )
        },
        reference: |r, p| {
            let (day, time) = (text(p, "weekday"), text(p, "time"));
            let ids: Vec<Id> = r
                .db()
                .alarms
                .filter(|a| a.owner == USER && a.repeat_days.iter().any(|d| d == day))
                .map(|(id, _)| id)
                .collect();
            for id in ids {
                r.call(
                    "phone",
                    "update_alarm",
                    json!({"alarm_id": id, "time": time}),
                )?;
            }
            Ok(Value::Null)
        },
        solution: Solution {
            names: &[
                "move_weekday_alarms",
                "retime_alarms_on_day",
                "set_alarm_time_for_weekday",
            ],
            summaries: &[
                "Sets a new time on every alarm that repeats on a given weekday.",
                "Moves the user's alarms that ring on one day of the week to another time.",
            ],
            params: &[
                SkillParam {
                    name: "weekday",
                    ty: "str",
                    doc: "the weekday in lower case, e.g. monday",
                },
                SkillParam {
                    name: "time",
                    ty: "str",
                    doc: "the new time, HH:MM",
                },
            ],
            returns: ("int", "how many alarms were changed"),
            docs: &[("phone", "show_alarms"), ("phone", "update_alarm")],
            body: include_str!("skills/phone_move_alarms_on.star"),
        },
    },
];

/// The full name of the user's contact with this number.
pub(super) fn contact_name(db: &Db, number: &str) -> Option<String> {
    db.contacts
        .find(|c| c.owner == USER && c.phone_number == number)
        .map(|(_, c)| format!("{} {}", c.first_name, c.last_name))
}

/// The number of the user's contact with this full name.
pub(super) fn contact_number(db: &Db, name: &str) -> Option<String> {
    db.contacts
        .find(|c| c.owner == USER && format!("{} {}", c.first_name, c.last_name) == name)
        .map(|(_, c)| c.phone_number.clone())
}

/// The numbers of the user's contacts labelled `relation`, in the order the phone lists
/// them (by first, then last name).
pub(super) fn contact_numbers(db: &Db, relation: &str) -> Vec<String> {
    let mut contacts: Vec<_> = db
        .contacts
        .filter(|c| c.owner == USER && c.relationships.iter().any(|r| r == relation))
        .map(|(_, c)| c)
        .collect();
    contacts.sort_by(|a, b| (&a.first_name, &a.last_name).cmp(&(&b.first_name, &b.last_name)));
    contacts
        .into_iter()
        .map(|c| c.phone_number.clone())
        .collect()
}
