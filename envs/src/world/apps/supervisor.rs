//! The `supervisor` app: the user's own profile, addresses, payment cards and app
//! passwords, the current date, and `complete_task`, which ends the task with an
//! answer. No login.

use serde_json::{json, Value};

use super::message;
use crate::sandbox::{ApiError, ParamType};
use crate::world::args::Args;
use crate::world::declare::{api, declare_app, AppDecl};
use crate::world::{Completion, World, LOGIN_APPS, USER};

pub(super) fn app() -> AppDecl {
    declare_app(
        "supervisor",
        "The user you work for: profile, addresses, payment cards, app passwords, the current date, and complete_task to finish the task.",
        vec![
            api("show_profile", "Shows the user's profile.", show_profile).returns(json!({
                "first_name": "str", "last_name": "str", "email": "str",
                "phone_number": "str", "birthday": "str (YYYY-MM-DD)", "city": "str"
            })),
            api(
                "show_current_date",
                "Shows the current date and time of the user's device.",
                show_current_date,
            )
            .returns(json!({"date": "str (YYYY-MM-DD)", "time": "str (HH:MM:SS)", "weekday": "str"})),
            api("show_addresses", "Lists the user's postal addresses.", show_addresses).returns(json!([{
                "address_id": "int", "label": "str", "street": "str", "city": "str",
                "state": "str", "zip_code": "str"
            }])),
            api(
                "show_payment_cards",
                "Lists the user's payment cards, usable in shop and coinpay by payment_card_id.",
                show_payment_cards,
            )
            .returns(json!([{
                "payment_card_id": "int", "card_name": "str", "owner_name": "str",
                "card_number": "str", "expiry_month": "int", "expiry_year": "int",
                "cvv": "str", "expired": "bool"
            }])),
            api(
                "show_account_passwords",
                "Lists the user's password for every app with a login.",
                show_account_passwords,
            )
            .returns(json!([{"account_name": "str", "password": "str"}])),
            api(
                "complete_task",
                "Marks the task complete, with the answer when the task asks a question. Call it exactly once, \
                 at the end: no API call is accepted afterwards.",
                complete_task,
            )
            .opt(
                "answer",
                ParamType::Any,
                Value::Null,
                "The answer to the task's question (a str, number, list, ...); leave it out when the task asks \
                 for actions only.",
            )
            .returns(json!({"message": "str"}))
            .error("the task was already completed"),
        ],
    )
}

fn show_profile(world: &mut World, _: &Args) -> Result<Value, ApiError> {
    let person = world
        .db
        .people
        .get(USER)
        .ok_or_else(|| ApiError::new("the user has no profile"))?;
    Ok(json!({
        "first_name": person.first_name,
        "last_name": person.last_name,
        "email": person.email,
        "phone_number": person.phone_number,
        "birthday": person.birthday,
        "city": person.city,
    }))
}

fn show_current_date(world: &mut World, _: &Args) -> Result<Value, ApiError> {
    let now = world.now();
    let (h, m, s) = now.hms();
    Ok(json!({
        "date": now.date(),
        "time": format!("{h:02}:{m:02}:{s:02}"),
        "weekday": now.date().weekday(),
    }))
}

fn show_addresses(world: &mut World, _: &Args) -> Result<Value, ApiError> {
    let addresses = world
        .db
        .addresses
        .filter(|a| a.owner == USER)
        .map(|(id, a)| {
            json!({
                "address_id": id, "label": a.label, "street": a.street, "city": a.city,
                "state": a.state, "zip_code": a.zip_code,
            })
        })
        .collect();
    Ok(Value::Array(addresses))
}

fn show_payment_cards(world: &mut World, _: &Args) -> Result<Value, ApiError> {
    let today = world.now().date();
    let cards = world
        .db
        .payment_cards
        .filter(|c| c.owner == USER)
        .map(|(id, c)| {
            json!({
                "payment_card_id": id, "card_name": c.card_name, "owner_name": c.owner_name,
                "card_number": c.card_number, "expiry_month": c.expiry_month,
                "expiry_year": c.expiry_year, "cvv": c.cvv, "expired": c.is_expired_on(today),
            })
        })
        .collect();
    Ok(Value::Array(cards))
}

fn show_account_passwords(world: &mut World, _: &Args) -> Result<Value, ApiError> {
    let passwords = LOGIN_APPS
        .iter()
        .filter_map(|&app| world.db.account(USER, app))
        .map(|a| json!({"account_name": a.app, "password": a.password}))
        .collect();
    Ok(Value::Array(passwords))
}

fn complete_task(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    if world.completion.is_some() {
        return Err(ApiError::new("the task was already completed"));
    }
    world.completion = Some(Completion {
        answer: args.0.get("answer").cloned().unwrap_or(Value::Null),
        at_call: world.clock,
    });
    Ok(message("Task marked complete."))
}
