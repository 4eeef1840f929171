//! The apps agent code can call, one module per app, each declaring its APIs (doc and
//! handler) in an `app()` function; plus what the apps share: login and logout,
//! person lookups and showing people, and common errors.
//!
//! Every app but `supervisor` and `api_docs` needs a login: `login(username, password)`
//! returns an access token that later calls pass as `access_token`; the token acts as
//! the person who logged in, and an API only shows or changes what that person may.

mod api_docs;
mod coinpay;
mod files;
mod mail;
mod notes;
mod phone;
mod shop;
mod splitbill;
mod supervisor;
mod todo;
mod tunes;

use std::cmp::Reverse;

use serde_json::{json, Value};

use super::args::Args;
use super::db::Db;
use super::declare::{api, ApiBuilder, AppDecl, Handler};
use super::table::{Id, PersonId};
use super::time::Timestamp;
use super::World;
use crate::sandbox::{ApiError, ParamType};

/// The apps with a login, in catalog order.
pub const LOGIN_APPS: [&str; 9] = [
    "tunes",
    "coinpay",
    "mail",
    "phone",
    "notes",
    "todo",
    "shop",
    "files",
    "splitbill",
];

/// Every app, in catalog order.
pub(crate) fn all() -> Vec<AppDecl> {
    vec![
        supervisor::app(),
        api_docs::app(),
        tunes::app(),
        coinpay::app(),
        mail::app(),
        phone::app(),
        notes::app(),
        todo::app(),
        shop::app(),
        files::app(),
        splitbill::app(),
    ]
}

/// The `login` and `logout` APIs of `app`; `username` says what its username is.
fn login_apis(app: &str, username: &str, login: Handler, logout: Handler) -> [ApiBuilder; 2] {
    [
        api(
            "login",
            &format!(
                "Logs in to {app}. Returns an access token that the app's other APIs take as `access_token`. \
                 A token acts as the person who logged in; it stops working after logout, or when it \
                 expires a fixed number of API calls after login: then log in again."
            ),
            login,
        )
        .req("username", ParamType::Str, username)
        .req(
            "password",
            ParamType::Str,
            &format!("The {app} password, as listed by apis.supervisor.show_account_passwords()."),
        )
        .returns(json!({"access_token": "str", "token_type": "str"}))
        .error("the username and password do not match an account"),
        api("logout", &format!("Logs out of {app}: the access token stops working."), logout)
            .token()
            .returns(json!({"message": "str"})),
    ]
}

/// Logs `args`' username into `app`.
fn login(world: &mut World, args: &Args, app: &'static str) -> Result<Value, ApiError> {
    let username = args.str("username")?.trim();
    let password = args.str("password")?;
    let person = world
        .db
        .accounts
        .find(|a| a.app == app && a.username.eq_ignore_ascii_case(username))
        .filter(|(_, a)| a.password == password)
        .map(|(_, a)| a.person)
        .ok_or_else(|| ApiError::new(format!("invalid {app} username or password")))?;
    let token = world.sessions.issue(world.seed, app, person, world.clock);
    Ok(json!({"access_token": token, "token_type": "Bearer"}))
}

/// Logs out the token in `args`.
fn logout(world: &mut World, args: &Args, app: &'static str) -> Result<Value, ApiError> {
    world.auth(app, args)?;
    world.sessions.log_out(args.str("access_token")?);
    Ok(message(&format!("Logged out of {app}.")))
}

/// `{"message": text}`.
fn message(text: &str) -> Value {
    json!({ "message": text })
}

/// A person as APIs show them: name and email.
fn person_json(db: &Db, person: PersonId) -> Value {
    json!({"name": db.name_of(person), "email": db.email_of(person)})
}

/// The person with this email, or an error naming the app.
fn person_by_email(db: &Db, app: &str, email: &str) -> Result<PersonId, ApiError> {
    db.person_by_email(email)
        .map(|(id, _)| id)
        .ok_or_else(|| ApiError::new(format!("no {app} user with email {email:?}")))
}

/// `no <what> with id <id>`.
fn not_found(what: &str, id: Id) -> ApiError {
    ApiError::new(format!("no {what} with id {id}"))
}

/// `<what> <id> belongs to another user`.
fn not_yours(what: &str, id: Id) -> ApiError {
    ApiError::new(format!("{what} {id} belongs to another user"))
}

/// A search text with ASCII letters lower-cased, `None` for no filter.
fn needle(query: Option<&str>) -> Option<String> {
    query
        .map(|q| q.trim().to_ascii_lowercase())
        .filter(|q| !q.is_empty())
}

/// Whether `text` contains the `needle`, ignoring the case of ASCII letters (no needle
/// matches everything). Allocation-free: list APIs run it on every row.
fn matches(needle: &Option<String>, text: &str) -> bool {
    let Some(needle) = needle else { return true };
    let (text, needle) = (text.as_bytes(), needle.as_bytes());
    needle.len() <= text.len()
        && text.windows(needle.len()).any(|window| {
            window
                .iter()
                .zip(needle)
                .all(|(a, b)| a.to_ascii_lowercase() == *b)
        })
}

/// Orders two strings ignoring the case of ASCII letters.
fn cmp_ignore_case(a: &str, b: &str) -> std::cmp::Ordering {
    a.bytes()
        .map(|c| c.to_ascii_lowercase())
        .cmp(b.bytes().map(|c| c.to_ascii_lowercase()))
}

/// Labels (tags, relationships), lower-cased, without blanks and repeats, in the given
/// order.
fn distinct_labels(list: Vec<String>) -> Vec<String> {
    let mut labels: Vec<String> = Vec::new();
    for label in list.into_iter().map(|l| l.trim().to_lowercase()) {
        if !label.is_empty() && !labels.contains(&label) {
            labels.push(label);
        }
    }
    labels
}

/// `value` if it is one of `options`, else an error listing them.
fn one_of<'a>(name: &str, value: &'a str, options: &[&str]) -> Result<&'a str, ApiError> {
    if options.contains(&value) {
        Ok(value)
    } else {
        Err(ApiError::new(format!(
            "`{name}` must be one of {}, got {value:?}",
            options
                .iter()
                .map(|o| format!("{o:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        )))
    }
}

/// Sorts rows by `key`, keeping id order among equal keys; `descending` reverses the
/// key order only.
fn sort_rows<T, K: Ord>(rows: &mut [(Id, &T)], descending: bool, key: impl Fn(&T) -> K) {
    if descending {
        rows.sort_by_key(|&(id, row)| (Reverse(key(row)), id));
    } else {
        rows.sort_by_key(|&(id, row)| (key(row), id));
    }
}

/// Sorts rows newest first by the moment `at`; among rows of the same moment, the
/// higher id (the later insert) first.
fn newest_first<T>(rows: &mut [(Id, &T)], at: impl Fn(&T) -> Timestamp) {
    rows.sort_by_key(|&(id, row)| Reverse((at(row), id)));
}
