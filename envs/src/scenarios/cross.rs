//! Templates whose tasks span several apps: people found in the phone's contacts and
//! then paid, emailed or asked for money; a playlist emailed; a note turned into to-do
//! items; a file turned into a note; splitbill debts requested on coinpay.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::notes::unique_titles;
use super::phone::{contact_numbers, RELATIONS};
use super::pick::{dollars, number, params, text, value};
use super::splitbill::{group_named, pick_group_threshold};
use super::{SkillParam, Solution, TaskKind, Template};
use crate::sandbox::ApiError;
use crate::world::records::{EntryKind, Folder};
use crate::world::{Db, Id, Money, USER};

/// Reasons the user may give when asking for money.
const REASONS: [&str; 5] = [
    "Utilities",
    "Groceries",
    "Concert tickets",
    "Internet bill",
    "Pizza night",
];

/// Notes the user may attach to a payment.
const PAYMENT_NOTES: [&str; 4] = [
    "Happy birthday!",
    "Thanks for dinner",
    "For the trip",
    "Gift from me",
];

/// Tags the user may give a note.
const NOTE_TAGS: [&str; 4] = ["reference", "recipes", "work", "archive"];

/// The cross-app templates.
pub(super) const TEMPLATES: &[Template] = &[
    Template {
        name: "cross_request_from_relation",
        apps: &["phone", "coinpay"],
        kind: TaskKind::Action,
        pick: |p| {
            let relation = p.pick(&RELATIONS[..3])?;
            let amount = p.range(500, 6_000) as f64 / 100.0;
            let reason = p.pick(&REASONS)?;
            Some(params([("relation", json!(relation)), ("amount", json!(amount)), ("reason", json!(reason))]))
        },
        instruction: |p| {
            format!(
                "Request {} on coinpay from each of my phone contacts labelled {}, with the description \"{}\".",
                dollars(number(p, "amount")),
                text(p, "relation"),
                text(p, "reason")
            )
        },
        reference: |r, p| {
            for email in emails_of_numbers(r.db(), &contact_numbers(r.db(), text(p, "relation"))) {
                r.call(
                    "coinpay",
                    "request_payment",
                    json!({"payer_email": email, "amount": value(p, "amount"), "description": text(p, "reason")}),
                )?;
            }
            Ok(Value::Null)
        },
        solution: Solution {
            names: &["request_money_from_relation", "request_from_contacts_labelled", "ask_relation_for_money"],
            summaries: &[
                "Requests the same amount on coinpay from every phone contact with a relationship label.",
                "Asks each contact of a relationship for money on coinpay.",
            ],
            params: &[
                SkillParam { name: "relation", ty: "str", doc: "the contacts' relationship label" },
                SkillParam { name: "amount", ty: "float", doc: "dollars to request from each" },
                SkillParam { name: "reason", ty: "str", doc: "the requests' description" },
            ],
            returns: ("list", "names of the people asked"),
            docs: &[("phone", "show_contacts"), ("coinpay", "search_users"), ("coinpay", "request_payment")],
            body: include_str!("skills/cross_request_from_relation.star"),
        },
    },
    Template {
        name: "cross_inbox_count_from_contact",
        apps: &["phone", "mail"],
        kind: TaskKind::Question,
        pick: |p| {
            let db = p.db();
            let senders: Vec<String> = db
                .emails
                .filter(|e| e.owner == USER && e.folder == Folder::Inbox)
                .filter_map(|(_, e)| contact_with_email(db, &e.sender))
                .collect();
            Some(params([("name", json!(p.pick(&senders)?))]))
        },
        instruction: |p| format!("How many emails from {} are in my mail inbox, read or not?", text(p, "name")),
        reference: |r, p| {
            let db = r.db();
            let address = contact_email(db, text(p, "name")).ok_or_else(|| ApiError::new("no such contact"))?;
            Ok(json!(db
                .emails
                .filter(|e| e.owner == USER && e.folder == Folder::Inbox && e.sender.eq_ignore_ascii_case(&address))
                .count()))
        },
        solution: Solution {
            names: &["count_inbox_emails_from_contact", "inbox_emails_from", "inbox_count_from_person"],
            summaries: &[
                "Counts the emails in the user's inbox from one of their phone contacts.",
                "Looks a contact's address up on the phone and counts their emails in the inbox.",
            ],
            params: &[SkillParam { name: "name", ty: "str", doc: "the contact's full name" }],
            returns: ("int", "the number of inbox emails from the contact"),
            docs: &[("phone", "show_contacts"), ("mail", "show_emails")],
            body: include_str!("skills/cross_inbox_count_from_contact.star"),
        },
    },
    Template {
        name: "cross_forward_latest_subject",
        apps: &["mail", "phone"],
        kind: TaskKind::Action,
        pick: |p| {
            let db = p.db();
            let subjects: BTreeSet<String> = db
                .emails
                .filter(|e| e.owner == USER && e.folder == Folder::Inbox)
                .map(|(_, e)| e.subject.clone())
                .collect();
            let subjects: Vec<String> = subjects.into_iter().collect();
            let names = contacts_with_email(db);
            Some(params([("subject", json!(p.pick(&subjects)?)), ("name", json!(p.pick(&names)?))]))
        },
        instruction: |p| {
            format!(
                "Forward the most recent email in my inbox with the subject \"{}\" to {}.",
                text(p, "subject"),
                text(p, "name")
            )
        },
        reference: |r, p| {
            let address = contact_email(r.db(), text(p, "name")).ok_or_else(|| ApiError::new("no such contact"))?;
            let emails = r.all_pages("mail", "show_emails", json!({"folder": "inbox", "query": text(p, "subject")}))?;
            let latest = emails
                .iter()
                .find(|e| e["subject"] == *value(p, "subject"))
                .ok_or_else(|| ApiError::new("no such email"))?;
            r.call("mail", "forward_email", json!({"email_id": latest["email_id"], "recipients": [address]}))?;
            Ok(Value::Null)
        },
        solution: Solution {
            names: &["forward_latest_with_subject", "forward_newest_email_to", "forward_recent_subject"],
            summaries: &[
                "Forwards the newest inbox email with an exact subject to one of the user's contacts.",
                "Finds the most recent inbox email with a subject and forwards it to a contact.",
            ],
            params: &[
                SkillParam { name: "subject", ty: "str", doc: "the email's exact subject" },
                SkillParam { name: "name", ty: "str", doc: "the contact's full name" },
            ],
            returns: ("int", "the id of the email forwarded"),
            docs: &[("phone", "show_contacts"), ("mail", "show_emails"), ("mail", "forward_email")],
            body: include_str!("skills/cross_forward_latest_subject.star"),
        },
    },
    Template {
        name: "cross_email_playlist",
        apps: &["tunes", "phone", "mail"],
        kind: TaskKind::Action,
        pick: |p| {
            let db = p.db();
            let titles: Vec<String> = db.playlists.filter(|pl| pl.owner == USER).map(|(_, pl)| pl.title.clone()).collect();
            let names = contacts_with_email(db);
            Some(params([("title", json!(p.pick(&titles)?)), ("name", json!(p.pick(&names)?))]))
        },
        instruction: |p| {
            format!(
                "Email {} the songs of my tunes playlist \"{}\": the subject is the playlist's title and the body lists the song titles in playlist order, one per line.",
                text(p, "name"),
                text(p, "title")
            )
        },
        reference: |r, p| {
            let db = r.db();
            let title = text(p, "title");
            let songs: Vec<String> = db
                .playlists
                .find(|pl| pl.owner == USER && pl.title == title)
                .map(|(_, pl)| pl.song_ids.iter().filter_map(|s| db.songs.get(*s)).map(|s| s.title.clone()).collect())
                .unwrap_or_default();
            let address = contact_email(db, text(p, "name")).ok_or_else(|| ApiError::new("no such contact"))?;
            r.call("mail", "send_email", json!({"recipients": [address], "subject": title, "body": songs.join("\n")}))?;
            Ok(Value::Null)
        },
        solution: Solution {
            names: &["email_playlist_songs", "send_playlist_by_email", "share_playlist_titles"],
            summaries: &[
                "Emails a contact the song titles of one of the user's tunes playlists, one per line.",
                "Sends a contact an email listing a playlist's songs in order, titled like the playlist.",
            ],
            params: &[
                SkillParam { name: "title", ty: "str", doc: "the playlist's title" },
                SkillParam { name: "name", ty: "str", doc: "the contact's full name" },
            ],
            returns: ("int", "how many songs were listed"),
            docs: &[("tunes", "show_playlists"), ("tunes", "show_playlist"), ("phone", "show_contacts"), ("mail", "send_email")],
            body: include_str!("skills/cross_email_playlist.star"),
        },
    },
    Template {
        name: "cross_todo_from_note",
        apps: &["notes", "todo"],
        kind: TaskKind::Action,
        pick: |p| {
            let db = p.db();
            let titles: Vec<String> = unique_titles(db)
                .into_iter()
                .filter(|t| note_items(db, t).is_some_and(|items| !items.is_empty()))
                .collect();
            let lists: Vec<String> = db.todo_lists.filter(|l| l.owner == USER).map(|(_, l)| l.name.clone()).collect();
            Some(params([("note_title", json!(p.pick(&titles)?)), ("list_name", json!(p.pick(&lists)?))]))
        },
        instruction: |p| {
            format!(
                "Add each line of my note \"{}\" as an item of my \"{}\" to-do list, without the leading \"- \".",
                text(p, "note_title"),
                text(p, "list_name")
            )
        },
        reference: |r, p| {
            let db = r.db();
            let items = note_items(db, text(p, "note_title")).unwrap_or_default();
            let list = text(p, "list_name");
            let list_id: Id = db
                .todo_lists
                .find(|l| l.owner == USER && l.name == list)
                .map(|(id, _)| id)
                .ok_or_else(|| ApiError::new("no such list"))?;
            for item in items {
                r.call("todo", "add_item", json!({"list_id": list_id, "title": item}))?;
            }
            Ok(Value::Null)
        },
        solution: Solution {
            names: &["note_lines_to_todo", "todo_items_from_note", "copy_note_into_list"],
            summaries: &[
                "Adds each bullet line of one of the user's notes as an item of a to-do list.",
                "Turns the lines of a note into to-do items on a list.",
            ],
            params: &[
                SkillParam { name: "note_title", ty: "str", doc: "the note's exact title" },
                SkillParam { name: "list_name", ty: "str", doc: "the to-do list's name" },
            ],
            returns: ("list", "the items added"),
            docs: &[("notes", "show_notes"), ("todo", "show_lists"), ("todo", "add_item")],
            body: include_str!("skills/cross_todo_from_note.star"),
        },
    },
    Template {
        name: "cross_star_from_contact",
        apps: &["phone", "mail"],
        kind: TaskKind::Action,
        pick: |p| {
            let db = p.db();
            let senders: Vec<String> = db
                .emails
                .filter(|e| e.owner == USER && e.folder == Folder::Inbox && !e.starred)
                .filter_map(|(_, e)| contact_with_email(db, &e.sender))
                .collect();
            Some(params([("name", json!(p.pick(&senders)?))]))
        },
        instruction: |p| format!("Star every email in my inbox from {} that is not starred yet.", text(p, "name")),
        reference: |r, p| {
            let db = r.db();
            let address = contact_email(db, text(p, "name")).ok_or_else(|| ApiError::new("no such contact"))?;
            let ids: Vec<Id> = db
                .emails
                .filter(|e| e.owner == USER && e.folder == Folder::Inbox && !e.starred && e.sender.eq_ignore_ascii_case(&address))
                .map(|(id, _)| id)
                .collect();
            for id in ids {
                r.call("mail", "star_email", json!({"email_id": id}))?;
            }
            Ok(Value::Null)
        },
        solution: Solution {
            names: &["star_emails_from_contact", "star_inbox_from", "star_contact_emails"],
            summaries: &[
                "Stars every unstarred inbox email from one of the user's phone contacts.",
                "Looks a contact's address up and stars their emails in the inbox.",
            ],
            params: &[SkillParam { name: "name", ty: "str", doc: "the contact's full name" }],
            returns: ("int", "how many emails were starred"),
            docs: &[("phone", "show_contacts"), ("mail", "show_emails"), ("mail", "star_email")],
            body: include_str!("skills/cross_star_from_contact.star"),
        },
    },
    Template {
        name: "cross_pay_relation",
        apps: &["phone", "coinpay"],
        kind: TaskKind::Action,
        pick: |p| {
            let relation = p.pick(&RELATIONS[..2])?;
            let amount = p.range(5, 40) as f64;
            let note = p.pick(&PAYMENT_NOTES)?;
            Some(params([("relation", json!(relation)), ("amount", json!(amount)), ("note", json!(note))]))
        },
        instruction: |p| {
            format!(
                "Send {} on coinpay to each of my phone contacts labelled {}, with the note \"{}\".",
                dollars(number(p, "amount")),
                text(p, "relation"),
                text(p, "note")
            )
        },
        reference: |r, p| {
            for email in emails_of_numbers(r.db(), &contact_numbers(r.db(), text(p, "relation"))) {
                r.call(
                    "coinpay",
                    "send_payment",
                    json!({"receiver_email": email, "amount": value(p, "amount"), "description": text(p, "note")}),
                )?;
            }
            Ok(Value::Null)
        },
        solution: Solution {
            names: &["pay_contacts_with_relationship", "send_money_to_relation", "pay_each_relation"],
            summaries: &[
                "Sends the same amount on coinpay to every phone contact with a relationship label.",
                "Pays each of the user's contacts of one relationship on coinpay.",
            ],
            params: &[
                SkillParam { name: "relation", ty: "str", doc: "the contacts' relationship label" },
                SkillParam { name: "amount", ty: "float", doc: "dollars to send each" },
                SkillParam { name: "note", ty: "str", doc: "the payments' description" },
            ],
            returns: ("list", "names of the people paid"),
            docs: &[("phone", "show_contacts"), ("coinpay", "search_users"), ("coinpay", "send_payment")],
            body: include_str!("skills/cross_pay_relation.star"),
        },
    },
    Template {
        name: "cross_emails_sent_to_contact",
        apps: &["phone", "mail"],
        kind: TaskKind::Question,
        pick: |p| {
            let db = p.db();
            let names: Vec<String> = db
                .emails
                .filter(|e| e.owner == USER && e.folder == Folder::Sent)
                .flat_map(|(_, e)| e.recipients.iter().filter_map(|r| contact_with_email(db, r)))
                .collect();
            Some(params([("name", json!(p.pick(&names)?))]))
        },
        instruction: |p| format!("How many emails in my sent folder did I send to {}?", text(p, "name")),
        reference: |r, p| {
            let db = r.db();
            let address = contact_email(db, text(p, "name")).ok_or_else(|| ApiError::new("no such contact"))?;
            Ok(json!(db
                .emails
                .filter(|e| e.owner == USER
                    && e.folder == Folder::Sent
                    && e.recipients.iter().any(|x| x.eq_ignore_ascii_case(&address)))
                .count()))
        },
        solution: Solution {
            names: &["count_emails_sent_to", "sent_emails_to_contact", "emails_sent_count"],
            summaries: &[
                "Counts the emails in the user's sent folder addressed to one of their contacts.",
                "Returns how many sent emails went to a contact.",
            ],
            params: &[SkillParam { name: "name", ty: "str", doc: "the contact's full name" }],
            returns: ("int", "the number of emails"),
            docs: &[("phone", "show_contacts"), ("mail", "show_emails")],
            body: include_str!("skills/cross_emails_sent_to_contact.star"),
        },
    },
    Template {
        name: "cross_note_from_file",
        apps: &["files", "notes"],
        kind: TaskKind::Action,
        pick: |p| {
            let paths: Vec<String> = p
                .db()
                .files
                .filter(|f| {
                    f.owner == USER
                        && f.kind == EntryKind::File
                        && (f.parent() == "/recipes" || f.parent() == "/work/reports")
                })
                .map(|(_, f)| f.path.clone())
                .collect();
            let path = p.pick(&paths)?;
            let stem = path.rsplit('/').next()?.split('.').next()?.replace('_', " ");
            let title = format!("From files: {stem}");
            let tag = p.pick(&NOTE_TAGS)?;
            Some(params([("path", json!(path)), ("title", json!(title)), ("tag", json!(tag))]))
        },
        instruction: |p| {
            format!(
                "Create a note titled \"{}\" whose text is the content of my file {}, tagged \"{}\".",
                text(p, "title"),
                text(p, "path"),
                text(p, "tag")
            )
        },
        reference: |r, p| {
            let path = text(p, "path");
            let content = r
                .db()
                .files
                .find(|f| f.owner == USER && f.path == path)
                .map(|(_, f)| f.content.clone())
                .ok_or_else(|| ApiError::new("no such file"))?;
            r.call("notes", "create_note", json!({"title": text(p, "title"), "body": content, "tags": [text(p, "tag")]}))?;
            Ok(Value::Null)
        },
        solution: Solution {
            names: &["note_from_file", "copy_file_into_note", "save_file_as_note"],
            summaries: &[
                "Creates a tagged note whose text is the content of one of the user's files.",
                "Copies a file's content into a new note with a title and a tag.",
            ],
            params: &[
                SkillParam { name: "path", ty: "str", doc: "the file's absolute path" },
                SkillParam { name: "title", ty: "str", doc: "the new note's title" },
                SkillParam { name: "tag", ty: "str", doc: "the tag to give the note" },
            ],
            returns: ("int", "the new note's id"),
            docs: &[("files", "show_file"), ("notes", "create_note")],
            body: include_str!("skills/cross_note_from_file.star"),
        },
    },
    Template {
        name: "cross_request_group_debts",
        apps: &["splitbill", "coinpay"],
        kind: TaskKind::Action,
        pick: |p| pick_group_threshold(p, |owed| owed),
        instruction: |p| {
            format!(
                "For every member of my splitbill group \"{}\" who owes me more than {} there, request that whole amount from them on coinpay with the description \"{} balance\".",
                text(p, "group"),
                dollars(number(p, "minimum")),
                text(p, "group")
            )
        },
        reference: |r, p| {
            let db = r.db();
            let group = group_named(db, text(p, "group"))?;
            let minimum = Money::from_cents((number(p, "minimum") * 100.0).round() as i64);
            let debts: Vec<(String, Money)> = db
                .group_debts(group, USER)
                .into_iter()
                .filter(|&(_, owed)| owed > minimum)
                .map(|(who, owed)| (db.email_of(who), owed))
                .collect();
            let description = format!("{} balance", text(p, "group"));
            for (email, owed) in debts {
                r.call(
                    "coinpay",
                    "request_payment",
                    json!({"payer_email": email, "amount": owed.dollars(), "description": description}),
                )?;
            }
            Ok(Value::Null)
        },
        solution: Solution {
            names: &["request_group_debts", "collect_group_balances", "request_what_members_owe"],
            summaries: &[
                "Requests on coinpay what each member of a splitbill group owes the user, above a minimum.",
                "Turns the debts members owe the user in a splitbill group into coinpay requests.",
            ],
            params: &[
                SkillParam { name: "group", ty: "str", doc: "the group's name" },
                SkillParam { name: "minimum", ty: "float", doc: "only debts above this many dollars are requested" },
            ],
            returns: ("list", "names of the members asked"),
            docs: &[("splitbill", "show_balances"), ("coinpay", "request_payment")],
            body: include_str!("skills/cross_request_group_debts.star"),
        },
    },
];

/// The full name of the user's contact whose email is `address`.
fn contact_with_email(db: &Db, address: &str) -> Option<String> {
    db.contacts
        .find(|c| {
            c.owner == USER
                && c.email
                    .as_deref()
                    .is_some_and(|e| e.eq_ignore_ascii_case(address))
        })
        .map(|(_, c)| format!("{} {}", c.first_name, c.last_name))
}

/// The email of the user's contact named `name`, if the contact has one.
fn contact_email(db: &Db, name: &str) -> Option<String> {
    db.contacts
        .find(|c| c.owner == USER && format!("{} {}", c.first_name, c.last_name) == name)
        .and_then(|(_, c)| c.email.clone())
}

/// Names of the user's contacts that have an email.
fn contacts_with_email(db: &Db) -> Vec<String> {
    db.contacts
        .filter(|c| c.owner == USER && c.email.is_some())
        .map(|(_, c)| format!("{} {}", c.first_name, c.last_name))
        .collect()
}

/// The coinpay emails of the people with these phone numbers, in order.
fn emails_of_numbers(db: &Db, numbers: &[String]) -> Vec<String> {
    numbers
        .iter()
        .filter_map(|n| db.person_by_phone(n).map(|(_, p)| p.email.clone()))
        .collect()
}

/// The items of the user's note titled `title`: its lines without a leading `- `,
/// blank lines dropped.
fn note_items(db: &Db, title: &str) -> Option<Vec<String>> {
    let (_, note) = db.notes.find(|n| n.owner == USER && n.title == title)?;
    Some(
        note.body
            .lines()
            .map(|l| {
                let l = l.trim();
                l.strip_prefix("- ").unwrap_or(l).to_owned()
            })
            .filter(|l| !l.is_empty())
            .collect(),
    )
}
