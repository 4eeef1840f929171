//! The `coinpay` app: payments between people. Each person has a wallet balance; a
//! payment moves money from the sender's balance (or charges one of their payment
//! cards) to the receiver's balance. People can also request money from each other.

use serde_json::{json, Value};

use super::{
    login, login_apis, logout, matches, message, needle, newest_first, not_found, one_of,
    person_by_email, person_json,
};
use crate::sandbox::{ApiError, ParamType::*};
use crate::world::args::Args;
use crate::world::db::Db;
use crate::world::declare::{api, declare_app, AppDecl};
use crate::world::money::Money;
use crate::world::records::{PaymentRequest, RequestStatus, Transaction, Wallet};
use crate::world::table::{Id, PersonId};
use crate::world::World;

const APP: &str = "coinpay";

pub(super) fn app() -> AppDecl {
    let transaction = json!({
        "transaction_id": "int", "sender": {"name": "str", "email": "str"},
        "receiver": {"name": "str", "email": "str"}, "amount": "float", "description": "str",
        "created_at": "str (YYYY-MM-DDTHH:MM:SS)", "paid_with": "str ('balance' or 'card')"
    });
    let request = json!({
        "payment_request_id": "int", "requester": {"name": "str", "email": "str"},
        "payer": {"name": "str", "email": "str"}, "amount": "float", "description": "str",
        "status": "str", "created_at": "str", "resolved_at": "str or None"
    });
    let [login_api, logout_api] = login_apis(
        APP,
        "The email address of the coinpay account.",
        |w, a| login(w, a, APP),
        |w, a| logout(w, a, APP),
    );
    declare_app(
        APP,
        "Payments between people: balances, sending money, requesting money, payment history.",
        vec![
            login_api,
            logout_api,
            api("show_account", "Shows the user's coinpay account and balance.", show_account)
                .token()
                .returns(json!({"name": "str", "email": "str", "balance": "float"})),
            api("search_users", "Searches coinpay users by name or email, in id order.", search_users)
                .token()
                .opt("query", Str, Value::Null, "Text that must occur (case-insensitive) in the user's full name or email.")
                .paged()
                .returns(json!([{"name": "str", "email": "str"}])),
            api("show_transactions", "Lists payments the user sent or received, newest first.", show_transactions)
                .token()
                .opt("direction", Str, json!("all"), "Which payments: sent, received or all.")
                .opt("user_email", Str, Value::Null, "Only payments with this other user.")
                .opt("min_date", Str, Value::Null, "Only payments made on or after this day (YYYY-MM-DD).")
                .opt("max_date", Str, Value::Null, "Only payments made on or before this day (YYYY-MM-DD).")
                .opt("query", Str, Value::Null, "Text that must occur (case-insensitive) in the description.")
                .paged()
                .returns(json!([transaction.clone()]))
                .error("direction is not sent, received or all")
                .error("a date is not written YYYY-MM-DD")
                .error("there is no user with user_email"),
            api("show_transaction", "Shows one payment the user sent or received.", show_transaction)
                .token()
                .req("transaction_id", Int, "The payment.")
                .returns(transaction)
                .error("there is no payment with that id involving the user"),
            api("send_payment", "Sends money to another user. Paid from the user's balance unless payment_card_id is given, in which case that card is charged and the balance is untouched.", send_payment)
                .token()
                .req("receiver_email", Str, "Email address of the user to pay.")
                .req("amount", Float, "Dollars to send: positive, at most 2 decimals.")
                .opt("description", Str, json!(""), "A note for the receiver.")
                .opt("payment_card_id", Int, Value::Null, "One of the user's payment cards (see apis.supervisor.show_payment_cards) to charge instead of the balance.")
                .returns(json!({"transaction_id": "int", "message": "str", "balance": "float"}))
                .error("there is no user with that email, or it is the user's own")
                .error("the amount is not positive or has more than 2 decimals")
                .error("the balance is too low (and no card was given)")
                .error("the card is not the user's, or it has expired"),
            api("show_payment_requests", "Lists payment requests the user received (to pay) or sent (to be paid), newest first.", show_payment_requests)
                .token()
                .opt("direction", Str, json!("received"), "received: requests asking the user to pay; sent: requests the user made.")
                .opt("status", Str, Value::Null, "Only requests with this status: pending, approved, declined or cancelled.")
                .opt("user_email", Str, Value::Null, "Only requests with this other user.")
                .paged()
                .returns(json!([request.clone()]))
                .error("direction or status is not one of the listed values"),
            api("show_payment_request", "Shows one payment request the user made or received.", show_payment_request)
                .token()
                .req("payment_request_id", Int, "The request.")
                .returns(request)
                .error("there is no request with that id involving the user"),
            api("request_payment", "Asks another user to pay the user an amount.", request_payment)
                .token()
                .req("payer_email", Str, "Email address of the user asked to pay.")
                .req("amount", Float, "Dollars requested: positive, at most 2 decimals.")
                .opt("description", Str, json!(""), "What the money is for.")
                .returns(json!({"payment_request_id": "int", "message": "str"}))
                .error("there is no user with that email, or it is the user's own")
                .error("the amount is not positive or has more than 2 decimals"),
            api("approve_payment_request", "Pays a pending request the user received: sends the requested amount to the requester (from the balance, or charging payment_card_id) and marks the request approved.", approve_payment_request)
                .token()
                .req("payment_request_id", Int, "The request.")
                .opt("payment_card_id", Int, Value::Null, "One of the user's payment cards to charge instead of the balance.")
                .returns(json!({"transaction_id": "int", "message": "str", "balance": "float"}))
                .error("there is no request with that id that the user received")
                .error("the request is not pending")
                .error("the balance is too low (and no card was given), or the card is not the user's or has expired"),
            api("decline_payment_request", "Declines a pending request the user received.", decline_payment_request)
                .token()
                .req("payment_request_id", Int, "The request.")
                .returns(json!({"message": "str"}))
                .error("there is no request with that id that the user received")
                .error("the request is not pending"),
            api("cancel_payment_request", "Cancels a pending request the user sent.", cancel_payment_request)
                .token()
                .req("payment_request_id", Int, "The request.")
                .returns(json!({"message": "str"}))
                .error("there is no request with that id that the user sent")
                .error("the request is not pending"),
            api("add_funds", "Moves money from one of the user's payment cards into their coinpay balance.", add_funds)
                .token()
                .req("amount", Float, "Dollars to add: positive, at most 2 decimals.")
                .req("payment_card_id", Int, "The card to charge.")
                .returns(json!({"message": "str", "balance": "float"}))
                .error("the amount is not positive or has more than 2 decimals")
                .error("the card is not the user's, or it has expired"),
            api("withdraw_funds", "Moves money from the user's coinpay balance to one of their payment cards.", withdraw_funds)
                .token()
                .req("amount", Float, "Dollars to withdraw: positive, at most 2 decimals.")
                .req("payment_card_id", Int, "The card to pay out to.")
                .returns(json!({"message": "str", "balance": "float"}))
                .error("the amount is not positive or has more than 2 decimals")
                .error("the balance is too low")
                .error("the card is not the user's, or it has expired"),
        ],
    )
}

fn transaction_json(db: &Db, id: Id, t: &Transaction) -> Value {
    json!({
        "transaction_id": id,
        "sender": person_json(db, t.sender),
        "receiver": person_json(db, t.receiver),
        "amount": t.amount,
        "description": t.description,
        "created_at": t.created_at,
        "paid_with": if t.payment_card_id.is_some() { "card" } else { "balance" },
    })
}

fn request_json(db: &Db, id: Id, r: &PaymentRequest) -> Value {
    json!({
        "payment_request_id": id,
        "requester": person_json(db, r.requester),
        "payer": person_json(db, r.payer),
        "amount": r.amount,
        "description": r.description,
        "status": r.status,
        "created_at": r.created_at,
        "resolved_at": r.resolved_at,
    })
}

fn balance(db: &Db, person: PersonId) -> Money {
    db.wallet_of(person)
        .map(|(_, w)| w.balance)
        .unwrap_or_default()
}

/// Adds `delta` to `person`'s balance, opening a wallet if they have none.
fn adjust_balance(db: &mut Db, person: PersonId, delta: Money) {
    match db.wallet_of(person).map(|(id, _)| id) {
        Some(id) => {
            if let Some(wallet) = db.wallets.get_mut(id) {
                wallet.balance += delta;
            }
        }
        None => {
            db.wallets.insert(Wallet {
                owner: person,
                balance: delta,
            });
        }
    }
}

/// Checks that `card_id` is `me`'s card and valid today.
fn usable_card(world: &World, me: PersonId, card_id: Id) -> Result<(), ApiError> {
    let card = world
        .db
        .payment_cards
        .get(card_id)
        .filter(|c| c.owner == me)
        .ok_or_else(|| not_found("payment card of yours", card_id))?;
    if card.is_expired_on(world.now().date()) {
        return Err(ApiError::new(format!("payment card {card_id} has expired")));
    }
    Ok(())
}

fn other_user(db: &Db, me: PersonId, email: &str) -> Result<PersonId, ApiError> {
    let other = person_by_email(db, APP, email)?;
    if other == me {
        return Err(ApiError::new(
            "you cannot pay or request money from yourself",
        ));
    }
    Ok(other)
}

/// Moves `amount` from `me` to `receiver` and records the payment.
fn pay(
    world: &mut World,
    me: PersonId,
    receiver: PersonId,
    amount: Money,
    description: &str,
    card: Option<Id>,
) -> Result<Id, ApiError> {
    match card {
        Some(card_id) => usable_card(world, me, card_id)?,
        None => {
            let available = balance(&world.db, me);
            if available < amount {
                return Err(ApiError::new(format!(
                    "your balance ({available}) is lower than {amount}: pass payment_card_id to pay by card"
                )));
            }
            adjust_balance(&mut world.db, me, -amount);
        }
    }
    adjust_balance(&mut world.db, receiver, amount);
    let created_at = world.now();
    Ok(world.db.transactions.insert(Transaction {
        sender: me,
        receiver,
        amount,
        description: description.trim().to_owned(),
        created_at,
        payment_card_id: card,
    }))
}

fn show_account(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let db = &world.db;
    Ok(json!({"name": db.name_of(me), "email": db.email_of(me), "balance": balance(db, me)}))
}

fn search_users(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    world.auth(APP, args)?;
    let page = args.page()?;
    let query = needle(args.opt_str("query")?);
    let people = world
        .db
        .people
        .filter(|p| matches(&query, &p.full_name()) || matches(&query, &p.email));
    Ok(page.of(
        people,
        |(_, p)| json!({"name": p.full_name(), "email": p.email}),
    ))
}

fn show_transactions(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let page = args.page()?;
    let direction = one_of(
        "direction",
        args.opt_str("direction")?.unwrap_or("all"),
        &["sent", "received", "all"],
    )?;
    let db = &world.db;
    let other = args
        .opt_str("user_email")?
        .map(|e| person_by_email(db, APP, e))
        .transpose()?;
    let min_date = args.opt_date("min_date")?;
    let max_date = args.opt_date("max_date")?;
    let query = needle(args.opt_str("query")?);
    let (sent, received) = (direction != "received", direction != "sent");
    let mut rows: Vec<(Id, &Transaction)> = db
        .transactions
        .filter(|t| {
            let mine = (sent && t.sender == me) || (received && t.receiver == me);
            let day = t.created_at.date();
            mine && other.is_none_or(|o| t.sender == o || t.receiver == o)
                && min_date.is_none_or(|d| day >= d)
                && max_date.is_none_or(|d| day <= d)
                && matches(&query, &t.description)
        })
        .collect();
    newest_first(&mut rows, |r| r.created_at);
    Ok(page.of(rows, |(id, t)| transaction_json(db, id, t)))
}

fn show_transaction(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("transaction_id")?;
    let t = world
        .db
        .transactions
        .get(id)
        .filter(|t| t.sender == me || t.receiver == me)
        .ok_or_else(|| not_found("payment of yours", id))?;
    Ok(transaction_json(&world.db, id, t))
}

fn send_payment(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let receiver = other_user(&world.db, me, args.str("receiver_email")?)?;
    let amount = args.money("amount")?;
    let description = args.opt_str("description")?.unwrap_or("");
    let card = args.opt_id("payment_card_id")?;
    let id = pay(world, me, receiver, amount, description, card)?;
    Ok(json!({
        "transaction_id": id,
        "message": format!("Sent {amount} to {}.", world.db.name_of(receiver)),
        "balance": balance(&world.db, me),
    }))
}

fn show_payment_requests(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let page = args.page()?;
    let direction = one_of(
        "direction",
        args.opt_str("direction")?.unwrap_or("received"),
        &["sent", "received"],
    )?;
    let status = args
        .opt_str("status")?
        .map(|s| {
            one_of(
                "status",
                s,
                &["pending", "approved", "declined", "cancelled"],
            )
            .map(|s| RequestStatus::parse(s).unwrap_or(RequestStatus::Pending))
        })
        .transpose()?;
    let sent = direction == "sent";
    let db = &world.db;
    let other = args
        .opt_str("user_email")?
        .map(|e| person_by_email(db, APP, e))
        .transpose()?;
    let mut rows: Vec<(Id, &PaymentRequest)> = db
        .payment_requests
        .filter(|r| {
            let (mine, theirs) = if sent {
                (r.requester, r.payer)
            } else {
                (r.payer, r.requester)
            };
            mine == me && other.is_none_or(|o| theirs == o) && status.is_none_or(|s| r.status == s)
        })
        .collect();
    newest_first(&mut rows, |r| r.created_at);
    Ok(page.of(rows, |(id, r)| request_json(db, id, r)))
}

fn show_payment_request(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("payment_request_id")?;
    let r = world
        .db
        .payment_requests
        .get(id)
        .filter(|r| r.requester == me || r.payer == me)
        .ok_or_else(|| not_found("payment request of yours", id))?;
    Ok(request_json(&world.db, id, r))
}

fn request_payment(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let payer = other_user(&world.db, me, args.str("payer_email")?)?;
    let amount = args.money("amount")?;
    let description = args.opt_str("description")?.unwrap_or("").trim().to_owned();
    let created_at = world.now();
    let id = world.db.payment_requests.insert(PaymentRequest {
        requester: me,
        payer,
        amount,
        description,
        status: RequestStatus::Pending,
        created_at,
        resolved_at: None,
        transaction_id: None,
    });
    Ok(
        json!({"payment_request_id": id, "message": format!("Requested {amount} from {}.", world.db.name_of(payer))}),
    )
}

/// The pending request `id` that `me` received (`as_payer`) or sent.
fn pending_request(
    db: &Db,
    me: PersonId,
    id: Id,
    as_payer: bool,
) -> Result<PaymentRequest, ApiError> {
    let request = db
        .payment_requests
        .get(id)
        .filter(|r| {
            if as_payer {
                r.payer == me
            } else {
                r.requester == me
            }
        })
        .ok_or_else(|| {
            not_found(
                if as_payer {
                    "payment request to you"
                } else {
                    "payment request you sent"
                },
                id,
            )
        })?;
    if request.status != RequestStatus::Pending {
        return Err(ApiError::new(format!(
            "payment request {id} is {}, not pending",
            request.status.name()
        )));
    }
    Ok(request.clone())
}

fn resolve(world: &mut World, id: Id, status: RequestStatus, transaction_id: Option<Id>) {
    let now = world.now();
    if let Some(request) = world.db.payment_requests.get_mut(id) {
        request.status = status;
        request.resolved_at = Some(now);
        request.transaction_id = transaction_id;
    }
}

fn approve_payment_request(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("payment_request_id")?;
    let card = args.opt_id("payment_card_id")?;
    let request = pending_request(&world.db, me, id, true)?;
    let transaction_id = pay(
        world,
        me,
        request.requester,
        request.amount,
        &request.description,
        card,
    )?;
    resolve(world, id, RequestStatus::Approved, Some(transaction_id));
    Ok(json!({
        "transaction_id": transaction_id,
        "message": format!("Paid {} to {}.", request.amount, world.db.name_of(request.requester)),
        "balance": balance(&world.db, me),
    }))
}

fn decline_payment_request(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("payment_request_id")?;
    pending_request(&world.db, me, id, true)?;
    resolve(world, id, RequestStatus::Declined, None);
    Ok(message(&format!("Declined payment request {id}.")))
}

fn cancel_payment_request(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("payment_request_id")?;
    pending_request(&world.db, me, id, false)?;
    resolve(world, id, RequestStatus::Cancelled, None);
    Ok(message(&format!("Cancelled payment request {id}.")))
}

fn add_funds(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let amount = args.money("amount")?;
    usable_card(world, me, args.id("payment_card_id")?)?;
    adjust_balance(&mut world.db, me, amount);
    Ok(json!({"message": format!("Added {amount}."), "balance": balance(&world.db, me)}))
}

fn withdraw_funds(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let amount = args.money("amount")?;
    usable_card(world, me, args.id("payment_card_id")?)?;
    let available = balance(&world.db, me);
    if available < amount {
        return Err(ApiError::new(format!(
            "your balance ({available}) is lower than {amount}"
        )));
    }
    adjust_balance(&mut world.db, me, -amount);
    Ok(json!({"message": format!("Withdrew {amount}."), "balance": balance(&world.db, me)}))
}
