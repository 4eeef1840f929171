//! Mailboxes: emails between people who know each other (a copy in the sender's sent
//! folder and in each recipient's inbox) and service emails to the user.

use super::words::{PERSONAL_SUBJECTS, SERVICE_EMAILS};
use super::{acquaintances, others, past_moment};
use crate::world::db::Db;
use crate::world::records::{Email, Folder};
use crate::world::rng::Rng;
use crate::world::table::PersonId;
use crate::world::time::{today, Timestamp};
use crate::world::USER;

const USER_PERSONAL_EMAILS: usize = 90;
const USER_SERVICE_EMAILS: usize = 40;
const OTHER_EMAILS_PER_PERSON: usize = 2;

pub(super) fn generate(db: &mut Db, rng: &mut Rng) {
    let mut messages: Vec<(PersonId, Vec<PersonId>, String, String, Timestamp)> = Vec::new();
    let friends = acquaintances(db, USER);
    for _ in 0..USER_PERSONAL_EMAILS {
        let Some(&other) = rng.choose(&friends) else {
            break;
        };
        let subject = rng.pick(&PERSONAL_SUBJECTS).to_string();
        let at = past_moment(rng, 240);
        if rng.chance(0.55) {
            let mut recipients = vec![USER];
            if rng.chance(0.2) {
                if let Some(&third) = rng.choose(&friends) {
                    if third != other {
                        recipients.push(third);
                    }
                }
            }
            let body = personal_body(db, rng, other, USER, &subject);
            messages.push((other, recipients, subject, body, at));
        } else {
            let body = personal_body(db, rng, USER, other, &subject);
            messages.push((USER, vec![other], subject, body, at));
        }
    }
    for person in others(db) {
        let known = acquaintances(db, person);
        for _ in 0..OTHER_EMAILS_PER_PERSON {
            let Some(&other) = rng.choose(&known) else {
                break;
            };
            let subject = rng.pick(&PERSONAL_SUBJECTS).to_string();
            let body = personal_body(db, rng, person, other, &subject);
            messages.push((person, vec![other], subject, body, past_moment(rng, 240)));
        }
    }
    messages.sort_by_key(|m| m.4);
    for (sender, recipients, subject, body, sent_at) in messages {
        deliver(db, rng, sender, &recipients, &subject, &body, sent_at);
    }
    add_service_emails(db, rng);
}

fn personal_body(db: &Db, rng: &mut Rng, from: PersonId, to: PersonId, subject: &str) -> String {
    let to_name = db
        .people
        .get(to)
        .map(|p| p.first_name.as_str())
        .unwrap_or("there");
    let from_name = db
        .people
        .get(from)
        .map(|p| p.first_name.as_str())
        .unwrap_or("");
    let middle = match subject {
        "Dinner on Friday?" => {
            "Are you free for dinner on Friday? I was thinking of trying the new place downtown."
        }
        "Happy birthday!" => "Happy birthday! Hope you have a wonderful day.",
        "Thank you!" => "Thank you so much for your help last week, it meant a lot.",
        "Trip itinerary" => {
            "Here is the plan: we leave Friday morning and come back Sunday evening."
        }
        _ => *rng.pick(&[
            "Let me know what you think when you get a chance.",
            "It has been a while, we should catch up soon.",
            "I will send more details later this week.",
            "Just wanted to follow up on what we talked about.",
        ]),
    };
    format!("Hi {to_name},\n\n{middle}\n\nBest,\n{from_name}")
}

#[allow(clippy::too_many_arguments)]
fn deliver(
    db: &mut Db,
    rng: &mut Rng,
    sender: PersonId,
    recipients: &[PersonId],
    subject: &str,
    body: &str,
    sent_at: Timestamp,
) {
    let old = sent_at < today().add_days(-14).at(0, 0, 0);
    let email = Email {
        owner: sender,
        folder: Folder::Sent,
        sender: db.email_of(sender),
        recipients: recipients.iter().map(|&r| db.email_of(r)).collect(),
        subject: subject.to_owned(),
        body: body.to_owned(),
        sent_at,
        read: true,
        starred: false,
    };
    db.emails.insert(email.clone());
    for &owner in recipients {
        let folder = if old && rng.chance(0.25) {
            Folder::Archive
        } else {
            Folder::Inbox
        };
        db.emails.insert(Email {
            owner,
            folder,
            read: old || rng.chance(0.4),
            starred: rng.chance(0.1),
            ..email.clone()
        });
    }
}

fn add_service_emails(db: &mut Db, rng: &mut Rng) {
    let user_address = db.email_of(USER);
    let mut emails: Vec<Email> = (0..USER_SERVICE_EMAILS)
        .map(|_| {
            let (sender, subject) = *rng.pick(&SERVICE_EMAILS);
            let sent_at = past_moment(rng, 120);
            Email {
                owner: USER,
                folder: if rng.chance(0.15) {
                    Folder::Trash
                } else {
                    Folder::Inbox
                },
                sender: sender.to_owned(),
                recipients: vec![user_address.clone()],
                subject: subject.to_owned(),
                body: format!("{subject}.\n\nThis is an automated message; please do not reply."),
                sent_at,
                read: rng.chance(0.6),
                starred: false,
            }
        })
        .collect();
    emails.sort_by_key(|e| e.sent_at);
    for email in emails {
        db.emails.insert(email);
    }
}
