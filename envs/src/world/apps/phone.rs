//! The `phone` app: contacts (with relationship labels), text messages, the call log
//! and alarms. The username is the phone number, not the email address.

use serde_json::{json, Value};

use super::{
    distinct_labels, login, login_apis, logout, matches, message, needle, newest_first, not_found,
    one_of,
};
use crate::sandbox::{ApiError, ParamType::*};
use crate::world::args::Args;
use crate::world::db::Db;
use crate::world::declare::{api, declare_app, AppDecl};
use crate::world::records::{Alarm, Call, CallKind, Contact, MessageDirection, TextMessage};
use crate::world::table::{Id, PersonId};
use crate::world::time::Date;
use crate::world::World;

const APP: &str = "phone";
const WEEKDAYS: [&str; 7] = [
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];

pub(super) fn app() -> AppDecl {
    let contact = json!({
        "contact_id": "int", "first_name": "str", "last_name": "str", "phone_number": "str",
        "email": "str or None", "relationships": ["str"], "birthday": "str (YYYY-MM-DD) or None"
    });
    let text = json!({"message_id": "int", "phone_number": "str", "direction": "str ('sent' or 'received')", "body": "str", "sent_at": "str", "read": "bool"});
    let alarm = json!({"alarm_id": "int", "time": "str (HH:MM)", "label": "str", "repeat_days": ["str"], "enabled": "bool"});
    let [login_api, logout_api] = login_apis(
        APP,
        "The phone number of the account (ten digits, as in the user's profile), not the email.",
        |w, a| login(w, a, APP),
        |w, a| logout(w, a, APP),
    );
    declare_app(
        APP,
        "The user's phone: contacts with relationships (friend, family, roommate, coworker), text messages, call log, alarms.",
        vec![
            login_api,
            logout_api,
            api("show_account", "Shows the phone's owner and number.", show_account)
                .token()
                .returns(json!({"name": "str", "phone_number": "str"})),
            api("show_contacts", "Lists the user's contacts, sorted by first then last name.", show_contacts)
                .token()
                .opt("query", Str, Value::Null, "Text that must occur (case-insensitive) in the full name, phone number or email.")
                .opt("relationship", Str, Value::Null, "Only contacts with this relationship label (e.g. friend, family, roommate, coworker).")
                .paged()
                .returns(json!([contact.clone()])),
            api("show_contact", "Shows one contact.", show_contact)
                .token()
                .req("contact_id", Int, "The contact.")
                .returns(contact)
                .error("there is no contact with that id in the user's contacts"),
            api("add_contact", "Adds a contact.", add_contact)
                .token()
                .req("first_name", Str, "Given name.")
                .req("last_name", Str, "Family name.")
                .req("phone_number", Str, "Phone number (digits; spaces, dashes and parentheses are dropped).")
                .opt("email", Str, Value::Null, "Email address.")
                .opt("relationships", List, json!([]), "Relationship labels (list of str).")
                .opt("birthday", Str, Value::Null, "Birthday, YYYY-MM-DD.")
                .returns(json!({"contact_id": "int", "message": "str"}))
                .error("a name is empty, or the phone number has no digits")
                .error("a contact with that phone number already exists")
                .error("birthday is not written YYYY-MM-DD"),
            api("update_contact", "Changes fields of a contact; fields left out keep their value.", update_contact)
                .token()
                .req("contact_id", Int, "The contact.")
                .opt("first_name", Str, Value::Null, "New given name.")
                .opt("last_name", Str, Value::Null, "New family name.")
                .opt("phone_number", Str, Value::Null, "New phone number.")
                .opt("email", Str, Value::Null, "New email address.")
                .opt("relationships", List, Value::Null, "New relationship labels; replaces the old ones.")
                .opt("birthday", Str, Value::Null, "New birthday, YYYY-MM-DD.")
                .returns(json!({"message": "str"}))
                .error("there is no contact with that id in the user's contacts")
                .error("another contact already has the new phone number"),
            api("delete_contact", "Deletes a contact.", delete_contact)
                .token()
                .req("contact_id", Int, "The contact.")
                .returns(json!({"message": "str"}))
                .error("there is no contact with that id in the user's contacts"),
            api("show_text_messages", "Lists the user's text messages, newest first.", show_text_messages)
                .token()
                .opt("phone_number", Str, Value::Null, "Only messages with this number.")
                .opt("direction", Str, Value::Null, "Only sent or only received messages.")
                .opt("query", Str, Value::Null, "Text that must occur (case-insensitive) in the message.")
                .paged()
                .returns(json!([text.clone()]))
                .error("direction is not sent or received"),
            api("show_text_message", "Shows one text message.", show_text_message)
                .token()
                .req("message_id", Int, "The message.")
                .returns(text)
                .error("there is no message with that id on the user's phone"),
            api("send_text_message", "Sends a text message to a phone number.", send_text_message)
                .token()
                .req("phone_number", Str, "The number to text.")
                .req("body", Str, "Text (not empty).")
                .returns(json!({"message_id": "int", "message": "str"}))
                .error("the phone number has no digits, or the text is empty"),
            api("delete_text_message", "Deletes a text message from the user's phone.", delete_text_message)
                .token()
                .req("message_id", Int, "The message.")
                .returns(json!({"message": "str"}))
                .error("there is no message with that id on the user's phone"),
            api("show_call_log", "Lists the user's calls, newest first.", show_call_log)
                .token()
                .opt("kind", Str, Value::Null, "Only incoming, outgoing or missed calls.")
                .opt("phone_number", Str, Value::Null, "Only calls with this number.")
                .paged()
                .returns(json!([{"call_id": "int", "phone_number": "str", "kind": "str", "started_at": "str", "duration_seconds": "int"}]))
                .error("kind is not incoming, outgoing or missed"),
            api("show_alarms", "Lists the user's alarms, by time of day.", show_alarms)
                .token()
                .paged()
                .returns(json!([alarm])),
            api("create_alarm", "Creates an alarm.", create_alarm)
                .token()
                .req("time", Str, "Time of day, HH:MM (24-hour).")
                .opt("label", Str, json!(""), "Label.")
                .opt("repeat_days", List, json!([]), "Weekdays to repeat on (monday ... sunday); empty: rings once.")
                .opt("enabled", Bool, json!(true), "Whether it is on.")
                .returns(json!({"alarm_id": "int", "message": "str"}))
                .error("time is not HH:MM, or a repeat day is not a weekday"),
            api("update_alarm", "Changes an alarm; fields left out keep their value.", update_alarm)
                .token()
                .req("alarm_id", Int, "The alarm.")
                .opt("time", Str, Value::Null, "New time of day, HH:MM.")
                .opt("label", Str, Value::Null, "New label.")
                .opt("repeat_days", List, Value::Null, "New repeat days.")
                .opt("enabled", Bool, Value::Null, "Turn it on or off.")
                .returns(json!({"message": "str"}))
                .error("there is no alarm with that id on the user's phone")
                .error("time is not HH:MM, or a repeat day is not a weekday"),
            api("delete_alarm", "Deletes an alarm.", delete_alarm)
                .token()
                .req("alarm_id", Int, "The alarm.")
                .returns(json!({"message": "str"}))
                .error("there is no alarm with that id on the user's phone"),
        ],
    )
}

/// The digits of a phone number; an error when there are none.
fn digits(number: &str) -> Result<String, ApiError> {
    let digits: String = number.chars().filter(char::is_ascii_digit).collect();
    if digits.is_empty()
        || number
            .chars()
            .any(|c| !(c.is_ascii_digit() || " -()+.".contains(c)))
    {
        return Err(ApiError::new(format!("{number:?} is not a phone number")));
    }
    Ok(digits)
}

fn contact_json(id: Id, c: &Contact) -> Value {
    json!({
        "contact_id": id, "first_name": c.first_name, "last_name": c.last_name,
        "phone_number": c.phone_number, "email": c.email, "relationships": c.relationships,
        "birthday": c.birthday,
    })
}

fn text_json(id: Id, m: &TextMessage) -> Value {
    json!({"message_id": id, "phone_number": m.other_number, "direction": m.direction, "body": m.body, "sent_at": m.sent_at, "read": m.read})
}

fn alarm_json(id: Id, a: &Alarm) -> Value {
    json!({"alarm_id": id, "time": a.time, "label": a.label, "repeat_days": a.repeat_days, "enabled": a.enabled})
}

fn own_contact(db: &Db, me: PersonId, id: Id) -> Result<&Contact, ApiError> {
    db.contacts
        .get(id)
        .filter(|c| c.owner == me)
        .ok_or_else(|| not_found("contact of yours", id))
}

fn birthday(args: &Args) -> Result<Option<Date>, ApiError> {
    args.opt_date("birthday")
}

fn number_taken(db: &Db, me: PersonId, number: &str, except: Option<Id>) -> bool {
    db.contacts
        .find(|c| c.owner == me && c.phone_number == number)
        .is_some_and(|(id, _)| Some(id) != except)
}

/// `HH:MM`, validated.
fn clock_time(text: &str) -> Result<String, ApiError> {
    let parsed = text
        .trim()
        .split_once(':')
        .and_then(|(h, m)| Some((h.parse::<u32>().ok()?, m.parse::<u32>().ok()?)));
    match parsed {
        Some((h, m)) if h < 24 && m < 60 => Ok(format!("{h:02}:{m:02}")),
        _ => Err(ApiError::new(format!(
            "time must be HH:MM (24-hour), got {text:?}"
        ))),
    }
}

/// Weekday names, lower-cased and in week order.
fn weekdays(days: Vec<String>) -> Result<Vec<String>, ApiError> {
    let days: Vec<String> = days.into_iter().map(|d| d.to_lowercase()).collect();
    if let Some(bad) = days.iter().find(|d| !WEEKDAYS.contains(&d.as_str())) {
        return Err(ApiError::new(format!(
            "{bad:?} is not a weekday (monday ... sunday)"
        )));
    }
    Ok(WEEKDAYS
        .iter()
        .filter(|w| days.iter().any(|d| d == *w))
        .map(|w| w.to_string())
        .collect())
}

fn show_account(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let phone_number = world
        .db
        .people
        .get(me)
        .map(|p| p.phone_number.clone())
        .unwrap_or_default();
    Ok(json!({"name": world.db.name_of(me), "phone_number": phone_number}))
}

fn show_contacts(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let page = args.page()?;
    let query = needle(args.opt_str("query")?);
    let relationship = args
        .opt_str("relationship")?
        .map(|r| r.trim().to_lowercase());
    let mut rows: Vec<(Id, &Contact)> = world
        .db
        .contacts
        .filter(|c| {
            c.owner == me
                && relationship
                    .as_ref()
                    .is_none_or(|r| c.relationships.contains(r))
                && (matches(&query, &format!("{} {}", c.first_name, c.last_name))
                    || matches(&query, &c.phone_number)
                    || c.email.as_deref().is_some_and(|e| matches(&query, e)))
        })
        .collect();
    rows.sort_by(|a, b| (&a.1.first_name, &a.1.last_name).cmp(&(&b.1.first_name, &b.1.last_name)));
    Ok(page.of(rows, |(id, c)| contact_json(id, c)))
}

fn show_contact(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("contact_id")?;
    Ok(contact_json(id, own_contact(&world.db, me, id)?))
}

fn add_contact(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let contact = Contact {
        owner: me,
        first_name: args.text("first_name")?.to_owned(),
        last_name: args.text("last_name")?.to_owned(),
        phone_number: digits(args.str("phone_number")?)?,
        email: args.opt_text("email")?.map(str::to_owned),
        relationships: distinct_labels(args.opt_str_list("relationships")?.unwrap_or_default()),
        birthday: birthday(args)?,
    };
    if number_taken(&world.db, me, &contact.phone_number, None) {
        return Err(ApiError::new(format!(
            "you already have a contact with number {}",
            contact.phone_number
        )));
    }
    let id = world.db.contacts.insert(contact);
    Ok(json!({"contact_id": id, "message": "Contact added."}))
}

fn update_contact(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("contact_id")?;
    let mut contact = own_contact(&world.db, me, id)?.clone();
    if let Some(first) = args.opt_text("first_name")? {
        contact.first_name = first.to_owned();
    }
    if let Some(last) = args.opt_text("last_name")? {
        contact.last_name = last.to_owned();
    }
    if let Some(number) = args.opt_str("phone_number")? {
        contact.phone_number = digits(number)?;
        if number_taken(&world.db, me, &contact.phone_number, Some(id)) {
            return Err(ApiError::new(format!(
                "another contact has number {}",
                contact.phone_number
            )));
        }
    }
    if let Some(email) = args.opt_text("email")? {
        contact.email = Some(email.to_owned());
    }
    if let Some(relationships) = args.opt_str_list("relationships")? {
        contact.relationships = distinct_labels(relationships);
    }
    if let Some(day) = birthday(args)? {
        contact.birthday = Some(day);
    }
    if let Some(row) = world.db.contacts.get_mut(id) {
        *row = contact;
    }
    Ok(message(&format!("Updated contact {id}.")))
}

fn delete_contact(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("contact_id")?;
    own_contact(&world.db, me, id)?;
    world.db.contacts.remove(id);
    Ok(message(&format!("Deleted contact {id}.")))
}

fn show_text_messages(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let page = args.page()?;
    let number = args.opt_str("phone_number")?.map(digits).transpose()?;
    let direction = args
        .opt_str("direction")?
        .map(|d| {
            one_of("direction", d, &["sent", "received"]).map(|d| match d {
                "sent" => MessageDirection::Sent,
                _ => MessageDirection::Received,
            })
        })
        .transpose()?;
    let query = needle(args.opt_str("query")?);
    let mut rows: Vec<(Id, &TextMessage)> = world
        .db
        .text_messages
        .filter(|m| {
            m.owner == me
                && number.as_ref().is_none_or(|n| &m.other_number == n)
                && direction.is_none_or(|d| m.direction == d)
                && matches(&query, &m.body)
        })
        .collect();
    newest_first(&mut rows, |r| r.sent_at);
    Ok(page.of(rows, |(id, m)| text_json(id, m)))
}

fn show_text_message(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("message_id")?;
    let m = world
        .db
        .text_messages
        .get(id)
        .filter(|m| m.owner == me)
        .ok_or_else(|| not_found("text message on your phone", id))?;
    Ok(text_json(id, m))
}

fn send_text_message(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let number = digits(args.str("phone_number")?)?;
    let body = args.text("body")?.to_owned();
    let sent_at = world.now();
    let own_number = world
        .db
        .people
        .get(me)
        .map(|p| p.phone_number.clone())
        .unwrap_or_default();
    let id = world.db.text_messages.insert(TextMessage {
        owner: me,
        other_number: number.clone(),
        direction: MessageDirection::Sent,
        body: body.clone(),
        sent_at,
        read: true,
    });
    if let Some((receiver, _)) = world.db.person_by_phone(&number) {
        world.db.text_messages.insert(TextMessage {
            owner: receiver,
            other_number: own_number,
            direction: MessageDirection::Received,
            body,
            sent_at,
            read: false,
        });
    }
    Ok(json!({"message_id": id, "message": format!("Text sent to {number}.")}))
}

fn delete_text_message(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("message_id")?;
    world
        .db
        .text_messages
        .get(id)
        .filter(|m| m.owner == me)
        .ok_or_else(|| not_found("text message on your phone", id))?;
    world.db.text_messages.remove(id);
    Ok(message(&format!("Deleted text message {id}.")))
}

fn show_call_log(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let page = args.page()?;
    let kind = args
        .opt_str("kind")?
        .map(|k| {
            one_of("kind", k, &["incoming", "outgoing", "missed"])
                .map(|k| CallKind::parse(k).unwrap_or(CallKind::Missed))
        })
        .transpose()?;
    let number = args.opt_str("phone_number")?.map(digits).transpose()?;
    let mut rows: Vec<(Id, &Call)> = world
        .db
        .calls
        .filter(|c| {
            c.owner == me
                && kind.is_none_or(|k| c.kind == k)
                && number.as_ref().is_none_or(|n| &c.other_number == n)
        })
        .collect();
    newest_first(&mut rows, |r| r.started_at);
    Ok(page.of(rows, |(id, c)| {
        json!({"call_id": id, "phone_number": c.other_number, "kind": c.kind, "started_at": c.started_at, "duration_seconds": c.duration_seconds})
    }))
}

fn show_alarms(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let page = args.page()?;
    let mut rows: Vec<(Id, &Alarm)> = world.db.alarms.filter(|a| a.owner == me).collect();
    rows.sort_by(|a, b| a.1.time.cmp(&b.1.time));
    Ok(page.of(rows, |(id, a)| alarm_json(id, a)))
}

fn create_alarm(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let alarm = Alarm {
        owner: me,
        time: clock_time(args.str("time")?)?,
        label: args.opt_str("label")?.unwrap_or("").trim().to_owned(),
        repeat_days: weekdays(args.opt_str_list("repeat_days")?.unwrap_or_default())?,
        enabled: args.opt_bool("enabled")?.unwrap_or(true),
    };
    let id = world.db.alarms.insert(alarm);
    Ok(json!({"alarm_id": id, "message": "Alarm created."}))
}

fn update_alarm(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("alarm_id")?;
    let mut alarm = world
        .db
        .alarms
        .get(id)
        .filter(|a| a.owner == me)
        .ok_or_else(|| not_found("alarm on your phone", id))?
        .clone();
    if let Some(time) = args.opt_str("time")? {
        alarm.time = clock_time(time)?;
    }
    if let Some(label) = args.opt_str("label")? {
        alarm.label = label.trim().to_owned();
    }
    if let Some(days) = args.opt_str_list("repeat_days")? {
        alarm.repeat_days = weekdays(days)?;
    }
    if let Some(enabled) = args.opt_bool("enabled")? {
        alarm.enabled = enabled;
    }
    if let Some(row) = world.db.alarms.get_mut(id) {
        *row = alarm;
    }
    Ok(message(&format!("Updated alarm {id}.")))
}

fn delete_alarm(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("alarm_id")?;
    world
        .db
        .alarms
        .get(id)
        .filter(|a| a.owner == me)
        .ok_or_else(|| not_found("alarm on your phone", id))?;
    world.db.alarms.remove(id);
    Ok(message(&format!("Deleted alarm {id}.")))
}
