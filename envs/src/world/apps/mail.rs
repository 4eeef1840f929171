//! The `mail` app: email. Every mailbox keeps its own copy of a message, so moving,
//! starring or deleting changes only the user's copy. Sending to an address of someone
//! in the world also delivers a copy to their inbox.

use serde_json::{json, Value};

use super::{login, login_apis, logout, matches, message, needle, newest_first, not_found, one_of};
use crate::sandbox::{ApiError, ParamType::*};
use crate::world::args::Args;
use crate::world::db::Db;
use crate::world::declare::{api, declare_app, AppDecl};
use crate::world::records::{Email, Folder};
use crate::world::table::{Id, PersonId};
use crate::world::World;

const APP: &str = "mail";
const FOLDERS: [&str; 4] = ["inbox", "sent", "archive", "trash"];

pub(super) fn app() -> AppDecl {
    let summary = json!({
        "email_id": "int", "folder": "str", "sender": "str", "recipients": ["str"], "subject": "str",
        "sent_at": "str (YYYY-MM-DDTHH:MM:SS)", "read": "bool", "starred": "bool"
    });
    let mut full = summary.clone();
    full["body"] = json!("str");
    let [login_api, logout_api] = login_apis(
        APP,
        "The email address of the mail account.",
        |w, a| login(w, a, APP),
        |w, a| logout(w, a, APP),
    );
    declare_app(
        APP,
        "Email: read, search, send, reply to, forward, star, archive and delete emails.",
        vec![
            login_api,
            logout_api,
            api("show_account", "Shows the user's mail address and how many unread emails their inbox holds.", show_account)
                .token()
                .returns(json!({"name": "str", "email": "str", "unread_count": "int"})),
            api("show_emails", "Lists the emails of one folder, newest first, without their bodies.", show_emails)
                .token()
                .opt("folder", Str, json!("inbox"), "inbox, sent, archive or trash.")
                .opt("sender", Str, Value::Null, "Only emails from this address.")
                .opt("query", Str, Value::Null, "Text that must occur (case-insensitive) in the subject or body.")
                .opt("unread_only", Bool, json!(false), "Only emails not yet read.")
                .opt("starred_only", Bool, json!(false), "Only starred emails.")
                .paged()
                .returns(json!([summary]))
                .error("folder is not one of the listed folders"),
            api("show_email", "Shows one email of the user's mailbox, with its body. Does not mark it read.", show_email)
                .token()
                .req("email_id", Int, "The email.")
                .returns(full)
                .error("there is no email with that id in the user's mailbox"),
            api("send_email", "Sends an email; a copy goes to the user's sent folder.", send_email)
                .token()
                .req("recipients", List, "Email addresses to send to (a list of str, at least one).")
                .req("subject", Str, "Subject line (not empty).")
                .opt("body", Str, json!(""), "Text.")
                .returns(json!({"email_id": "int", "message": "str"}))
                .error("recipients is empty or holds something that is not an email address")
                .error("the subject is empty"),
            api("reply_to_email", "Replies to the sender of an email of the user's mailbox, with subject 'Re: <subject>'.", reply_to_email)
                .token()
                .req("email_id", Int, "The email to reply to.")
                .req("body", Str, "Text of the reply.")
                .opt("reply_all", Bool, json!(false), "Also send to every other recipient of the original.")
                .returns(json!({"email_id": "int", "message": "str"}))
                .error("there is no email with that id in the user's mailbox"),
            api("forward_email", "Forwards an email of the user's mailbox, with subject 'Fwd: <subject>' and the original text below the note.", forward_email)
                .token()
                .req("email_id", Int, "The email to forward.")
                .req("recipients", List, "Email addresses to forward to (a list of str).")
                .opt("note", Str, json!(""), "Text written above the forwarded email.")
                .returns(json!({"email_id": "int", "message": "str"}))
                .error("there is no email with that id in the user's mailbox")
                .error("recipients is empty or holds something that is not an email address"),
            api("mark_email_read", "Marks an email read or unread.", mark_email_read)
                .token()
                .req("email_id", Int, "The email.")
                .opt("read", Bool, json!(true), "True: read; False: unread.")
                .returns(json!({"message": "str"}))
                .error("there is no email with that id in the user's mailbox"),
            api("star_email", "Stars or unstars an email.", star_email)
                .token()
                .req("email_id", Int, "The email.")
                .opt("starred", Bool, json!(true), "True: star; False: unstar.")
                .returns(json!({"message": "str"}))
                .error("there is no email with that id in the user's mailbox"),
            api("move_email", "Moves an email to another folder (inbox, archive or trash).", move_email)
                .token()
                .req("email_id", Int, "The email.")
                .req("folder", Str, "inbox, archive or trash (nothing can be moved into sent).")
                .returns(json!({"message": "str"}))
                .error("there is no email with that id in the user's mailbox")
                .error("folder is not inbox, archive or trash"),
            api("delete_email", "Deletes an email of the user's mailbox for good (whatever its folder).", delete_email)
                .token()
                .req("email_id", Int, "The email.")
                .returns(json!({"message": "str"}))
                .error("there is no email with that id in the user's mailbox"),
        ],
    )
}

fn email_json(id: Id, e: &Email, with_body: bool) -> Value {
    let mut value = json!({
        "email_id": id, "folder": e.folder, "sender": e.sender, "recipients": e.recipients,
        "subject": e.subject, "sent_at": e.sent_at, "read": e.read, "starred": e.starred,
    });
    if with_body {
        value["body"] = json!(e.body);
    }
    value
}

fn own_email(db: &Db, me: PersonId, id: Id) -> Result<&Email, ApiError> {
    db.emails
        .get(id)
        .filter(|e| e.owner == me)
        .ok_or_else(|| not_found("email in your mailbox", id))
}

fn update_email(
    world: &mut World,
    args: &Args,
    change: impl FnOnce(&mut Email),
) -> Result<Id, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("email_id")?;
    own_email(&world.db, me, id)?;
    if let Some(email) = world.db.emails.get_mut(id) {
        change(email);
    }
    Ok(id)
}

fn addresses(list: Vec<String>) -> Result<Vec<String>, ApiError> {
    if list.is_empty() {
        return Err(ApiError::new(
            "recipients must hold at least one email address",
        ));
    }
    for address in &list {
        let valid = address.split_once('@').is_some_and(|(user, domain)| {
            !user.is_empty() && domain.contains('.') && !address.contains(' ')
        });
        if !valid {
            return Err(ApiError::new(format!(
                "{address:?} is not an email address"
            )));
        }
    }
    Ok(list)
}

/// Sends a message from `me`: a copy in `me`'s sent folder and one in the inbox of
/// each recipient who is a person of the world. Returns the sent copy's id.
fn deliver(
    world: &mut World,
    me: PersonId,
    recipients: Vec<String>,
    subject: String,
    body: String,
) -> Id {
    let sent_at = world.now();
    let sender = world.db.email_of(me);
    let template = Email {
        owner: me,
        folder: Folder::Sent,
        sender,
        recipients: recipients.clone(),
        subject,
        body,
        sent_at,
        read: true,
        starred: false,
    };
    let sent_id = world.db.emails.insert(template.clone());
    let mut owners: Vec<PersonId> = recipients
        .iter()
        .filter_map(|r| world.db.person_by_email(r).map(|(id, _)| id))
        .collect();
    owners.sort_unstable();
    owners.dedup();
    for owner in owners {
        world.db.emails.insert(Email {
            owner,
            folder: Folder::Inbox,
            read: false,
            ..template.clone()
        });
    }
    sent_id
}

fn show_account(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let db = &world.db;
    let unread = db
        .emails
        .filter(|e| e.owner == me && e.folder == Folder::Inbox && !e.read)
        .count();
    Ok(json!({"name": db.name_of(me), "email": db.email_of(me), "unread_count": unread}))
}

fn show_emails(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let page = args.page()?;
    let folder = Folder::parse(one_of(
        "folder",
        args.opt_str("folder")?.unwrap_or("inbox"),
        &FOLDERS,
    )?)
    .unwrap_or(Folder::Inbox);
    let sender = args.opt_str("sender")?.map(str::trim);
    let query = needle(args.opt_str("query")?);
    let unread_only = args.opt_bool("unread_only")?.unwrap_or(false);
    let starred_only = args.opt_bool("starred_only")?.unwrap_or(false);
    let mut rows: Vec<(Id, &Email)> = world
        .db
        .emails
        .filter(|e| {
            e.owner == me
                && e.folder == folder
                && sender.is_none_or(|s| e.sender.eq_ignore_ascii_case(s))
                && (matches(&query, &e.subject) || matches(&query, &e.body))
                && (!unread_only || !e.read)
                && (!starred_only || e.starred)
        })
        .collect();
    newest_first(&mut rows, |r| r.sent_at);
    Ok(page.of(rows, |(id, e)| email_json(id, e, false)))
}

fn show_email(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("email_id")?;
    Ok(email_json(id, own_email(&world.db, me, id)?, true))
}

fn send_email(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let recipients = addresses(args.str_list("recipients")?)?;
    let subject = args.text("subject")?.to_owned();
    let body = args.opt_str("body")?.unwrap_or("").to_owned();
    let id = deliver(world, me, recipients, subject, body);
    Ok(json!({"email_id": id, "message": "Email sent."}))
}

fn reply_to_email(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let original = own_email(&world.db, me, args.id("email_id")?)?.clone();
    let body = args.str("body")?.to_owned();
    let own_address = world.db.email_of(me);
    let mut recipients = vec![if original.folder == Folder::Sent {
        original.recipients.first().cloned().unwrap_or_default()
    } else {
        original.sender.clone()
    }];
    if args.opt_bool("reply_all")?.unwrap_or(false) {
        for r in original.recipients.iter().chain([&original.sender]) {
            if !r.eq_ignore_ascii_case(&own_address)
                && !recipients.iter().any(|x| x.eq_ignore_ascii_case(r))
            {
                recipients.push(r.clone());
            }
        }
    }
    let recipients = addresses(recipients)?;
    let subject = if original.subject.starts_with("Re: ") {
        original.subject.clone()
    } else {
        format!("Re: {}", original.subject)
    };
    let id = deliver(world, me, recipients, subject, body);
    Ok(json!({"email_id": id, "message": "Reply sent."}))
}

fn forward_email(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let original = own_email(&world.db, me, args.id("email_id")?)?.clone();
    let recipients = addresses(args.str_list("recipients")?)?;
    let note = args.opt_str("note")?.unwrap_or("");
    let body = format!(
        "{note}\n\n---------- Forwarded message ----------\nFrom: {}\nSubject: {}\n\n{}",
        original.sender, original.subject, original.body
    );
    let id = deliver(
        world,
        me,
        recipients,
        format!("Fwd: {}", original.subject),
        body,
    );
    Ok(json!({"email_id": id, "message": "Email forwarded."}))
}

fn mark_email_read(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let read = args.opt_bool("read")?.unwrap_or(true);
    let id = update_email(world, args, |e| e.read = read)?;
    Ok(message(&format!(
        "Marked email {id} {}.",
        if read { "read" } else { "unread" }
    )))
}

fn star_email(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let starred = args.opt_bool("starred")?.unwrap_or(true);
    let id = update_email(world, args, |e| e.starred = starred)?;
    Ok(message(&format!(
        "{} email {id}.",
        if starred { "Starred" } else { "Unstarred" }
    )))
}

fn move_email(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let folder = Folder::parse(one_of(
        "folder",
        args.str("folder")?.trim(),
        &["inbox", "archive", "trash"],
    )?)
    .unwrap_or(Folder::Inbox);
    let id = update_email(world, args, |e| e.folder = folder)?;
    Ok(message(&format!("Moved email {id} to {}.", folder.name())))
}

fn delete_email(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("email_id")?;
    own_email(&world.db, me, id)?;
    world.db.emails.remove(id);
    Ok(message(&format!("Deleted email {id}.")))
}
