//! Templates on the `mail` app alone.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::pick::{params, text};
use super::{SkillParam, Solution, TaskKind, Template};
use crate::world::records::Folder;
use crate::world::{Id, USER};

/// The mail templates.
pub(super) const TEMPLATES: &[Template] = &[Template {
    name: "mail_archive_from_sender",
    apps: &["mail"],
    kind: TaskKind::Action,
    pick: |p| {
        let senders: BTreeSet<String> = p
            .db()
            .emails
            .filter(|e| e.owner == USER && e.folder == Folder::Inbox)
            .map(|(_, e)| e.sender.clone())
            .collect();
        let senders: Vec<String> = senders.into_iter().collect();
        Some(params([("sender", json!(p.pick(&senders)?))]))
    },
    instruction: |p| {
        format!(
            "Move every email in my mail inbox from {} to the archive folder.",
            text(p, "sender")
        )
    },
    reference: |r, p| {
        let sender = text(p, "sender");
        let ids: Vec<Id> = r
            .db()
            .emails
            .filter(|e| {
                e.owner == USER
                    && e.folder == Folder::Inbox
                    && e.sender.eq_ignore_ascii_case(sender)
            })
            .map(|(id, _)| id)
            .collect();
        for id in ids {
            r.call(
                "mail",
                "move_email",
                json!({"email_id": id, "folder": "archive"}),
            )?;
        }
        Ok(Value::Null)
    },
    solution: Solution {
        names: &[
            "archive_emails_from",
            "archive_inbox_from_sender",
            "move_sender_emails_to_archive",
        ],
        summaries: &[
            "Moves every email in the user's inbox from one sender address to the archive.",
            "Archives all inbox emails sent by a given address.",
        ],
        params: &[SkillParam {
            name: "sender",
            ty: "str",
            doc: "the sender's email address",
        }],
        returns: ("int", "how many emails were archived"),
        docs: &[("mail", "show_emails"), ("mail", "move_email")],
        body: include_str!("skills/mail_archive_from_sender.star"),
    },
}];
