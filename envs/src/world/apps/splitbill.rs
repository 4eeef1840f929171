//! The `splitbill` app: bill splitting. Groups of people record shared expenses; each
//! expense says who paid and who owes what of it; members settle their debts with each
//! other. Debts are pairwise (see [`Db::group_debts`]).

use serde_json::{json, Value};

use super::{
    login, login_apis, logout, matches, message, needle, newest_first, not_found, person_by_email,
    person_json,
};
use crate::sandbox::{ApiError, ParamType::*};
use crate::world::args::Args;
use crate::world::db::Db;
use crate::world::declare::{api, declare_app, AppDecl};
use crate::world::money::Money;
use crate::world::records::{BillGroup, Expense, Settlement, Share};
use crate::world::table::{Id, PersonId};
use crate::world::World;

const APP: &str = "splitbill";

pub(super) fn app() -> AppDecl {
    let person = json!({"name": "str", "email": "str"});
    let expense = json!({
        "expense_id": "int", "group_id": "int", "description": "str", "amount": "float",
        "paid_by": person, "shares": [{"name": "str", "email": "str", "amount": "float"}], "created_at": "str"
    });
    let [login_api, logout_api] = login_apis(
        APP,
        "The email address of the splitbill account.",
        |w, a| login(w, a, APP),
        |w, a| logout(w, a, APP),
    );
    declare_app(
        APP,
        "Bill splitting: groups record shared expenses; see who owes whom and settle up.",
        vec![
            login_api,
            logout_api,
            api("show_groups", "Lists the groups the user belongs to, oldest first.", show_groups)
                .token()
                .paged()
                .returns(json!([{"group_id": "int", "name": "str", "member_count": "int", "created_at": "str"}])),
            api("show_group", "Shows a group the user belongs to, with its members.", show_group)
                .token()
                .req("group_id", Int, "The group.")
                .returns(json!({"group_id": "int", "name": "str", "created_by": person, "members": [person], "created_at": "str"}))
                .error("there is no group with that id that the user belongs to"),
            api("create_group", "Creates a group with the user and the given people as members.", create_group)
                .token()
                .req("name", Str, "The group's name (not empty).")
                .opt("member_emails", List, json!([]), "Email addresses of the other members (list of str).")
                .returns(json!({"group_id": "int", "message": "str"}))
                .error("the name is empty, or an email is not a splitbill user's"),
            api("add_group_member", "Adds a person to a group the user belongs to.", add_group_member)
                .token()
                .req("group_id", Int, "The group.")
                .req("email", Str, "The new member's email address.")
                .returns(json!({"message": "str"}))
                .error("there is no group with that id that the user belongs to")
                .error("the email is not a splitbill user's, or they are a member already"),
            api("show_expenses", "Lists a group's expenses, newest first.", show_expenses)
                .token()
                .req("group_id", Int, "The group.")
                .opt("query", Str, Value::Null, "Text that must occur (case-insensitive) in the description.")
                .opt("paid_by_email", Str, Value::Null, "Only expenses paid by this member.")
                .paged()
                .returns(json!([expense.clone()]))
                .error("there is no group with that id that the user belongs to"),
            api("show_expense", "Shows one expense of a group the user belongs to.", show_expense)
                .token()
                .req("expense_id", Int, "The expense.")
                .returns(expense)
                .error("there is no expense with that id in the user's groups"),
            api("add_expense", "Records an expense in a group, split evenly in cents among the given members (leftover cents go to the first ones, in the order given).", add_expense)
                .token()
                .req("group_id", Int, "The group.")
                .req("description", Str, "What it was for (not empty).")
                .req("amount", Float, "Dollars paid: positive, at most 2 decimals.")
                .opt("paid_by_email", Str, Value::Null, "The member who paid. Default: the user.")
                .opt("split_among_emails", List, Value::Null, "Members who share it (list of str). Default: every member, in group order.")
                .returns(json!({"expense_id": "int", "message": "str"}))
                .error("there is no group with that id that the user belongs to")
                .error("the payer or someone to split with is not a member")
                .error("the description is empty, or the amount is not positive or has more than 2 decimals"),
            api("delete_expense", "Deletes an expense the user paid.", delete_expense)
                .token()
                .req("expense_id", Int, "The expense.")
                .returns(json!({"message": "str"}))
                .error("there is no expense with that id in the user's groups")
                .error("someone else paid the expense"),
            api("show_balances", "Shows, for each other member of a group, how much they owe the user (positive) or the user owes them (negative), counting all the group's expenses and settlements.", show_balances)
                .token()
                .req("group_id", Int, "The group.")
                .returns(json!({"balances": [{"name": "str", "email": "str", "balance": "float"}], "total": "float"}))
                .error("there is no group with that id that the user belongs to"),
            api("settle_up", "Records a repayment between the user and another member of a group: from whichever of the two owes the other.", settle_up)
                .token()
                .req("group_id", Int, "The group.")
                .req("email", Str, "The other member's email address.")
                .opt("amount", Float, Value::Null, "Dollars repaid. Default: the whole debt between the two.")
                .returns(json!({"settlement_id": "int", "message": "str", "remaining_balance": "float"}))
                .error("there is no group with that id that the user belongs to, or the email is not a member's")
                .error("neither owes the other anything")
                .error("the amount is more than the debt, not positive, or has more than 2 decimals"),
            api("show_settlements", "Lists a group's repayments, newest first.", show_settlements)
                .token()
                .req("group_id", Int, "The group.")
                .paged()
                .returns(json!([{"settlement_id": "int", "from": person, "to": person, "amount": "float", "created_at": "str"}]))
                .error("there is no group with that id that the user belongs to"),
        ],
    )
}

fn my_group(db: &Db, me: PersonId, id: Id) -> Result<&BillGroup, ApiError> {
    db.bill_groups
        .get(id)
        .filter(|g| g.member_ids.contains(&me))
        .ok_or_else(|| not_found("group of yours", id))
}

fn member(db: &Db, group: &BillGroup, email: &str) -> Result<PersonId, ApiError> {
    let person = person_by_email(db, APP, email)?;
    if !group.member_ids.contains(&person) {
        return Err(ApiError::new(format!(
            "{email} is not a member of group {:?}",
            group.name
        )));
    }
    Ok(person)
}

fn expense_json(db: &Db, id: Id, e: &Expense) -> Value {
    let shares: Vec<Value> = e
        .shares
        .iter()
        .map(|s| json!({"name": db.name_of(s.person), "email": db.email_of(s.person), "amount": s.amount}))
        .collect();
    json!({
        "expense_id": id, "group_id": e.group_id, "description": e.description, "amount": e.amount,
        "paid_by": person_json(db, e.payer), "shares": shares, "created_at": e.created_at,
    })
}

fn show_groups(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let page = args.page()?;
    Ok(page.of(world.db.bill_groups.filter(|g| g.member_ids.contains(&me)), |(id, g)| {
        json!({"group_id": id, "name": g.name, "member_count": g.member_ids.len(), "created_at": g.created_at})
    }))
}

fn show_group(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("group_id")?;
    let db = &world.db;
    let group = my_group(db, me, id)?;
    let members: Vec<Value> = group
        .member_ids
        .iter()
        .map(|&m| person_json(db, m))
        .collect();
    Ok(json!({
        "group_id": id, "name": group.name, "created_by": person_json(db, group.creator),
        "members": members, "created_at": group.created_at,
    }))
}

fn create_group(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let name = args.text("name")?.to_owned();
    let mut member_ids = vec![me];
    for email in args.opt_str_list("member_emails")?.unwrap_or_default() {
        let person = person_by_email(&world.db, APP, &email)?;
        if !member_ids.contains(&person) {
            member_ids.push(person);
        }
    }
    let created_at = world.now();
    let id = world.db.bill_groups.insert(BillGroup {
        name: name.clone(),
        creator: me,
        member_ids,
        created_at,
    });
    Ok(json!({"group_id": id, "message": format!("Created group {name:?}.")}))
}

fn add_group_member(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("group_id")?;
    let email = args.str("email")?;
    let group = my_group(&world.db, me, id)?;
    let person = person_by_email(&world.db, APP, email)?;
    if group.member_ids.contains(&person) {
        return Err(ApiError::new(format!(
            "{email} is already a member of group {id}"
        )));
    }
    if let Some(group) = world.db.bill_groups.get_mut(id) {
        group.member_ids.push(person);
    }
    Ok(message(&format!("Added {email} to group {id}.")))
}

fn show_expenses(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let page = args.page()?;
    let group_id = args.id("group_id")?;
    let db = &world.db;
    my_group(db, me, group_id)?;
    let query = needle(args.opt_str("query")?);
    let payer = args
        .opt_str("paid_by_email")?
        .map(|e| person_by_email(db, APP, e))
        .transpose()?;
    let mut rows: Vec<(Id, &Expense)> = db
        .expenses
        .filter(|e| {
            e.group_id == group_id
                && payer.is_none_or(|p| e.payer == p)
                && matches(&query, &e.description)
        })
        .collect();
    newest_first(&mut rows, |r| r.created_at);
    Ok(page.of(rows, |(id, e)| expense_json(db, id, e)))
}

fn own_group_expense(db: &Db, me: PersonId, id: Id) -> Result<&Expense, ApiError> {
    db.expenses
        .get(id)
        .filter(|e| {
            db.bill_groups
                .get(e.group_id)
                .is_some_and(|g| g.member_ids.contains(&me))
        })
        .ok_or_else(|| not_found("expense in your groups", id))
}

fn show_expense(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("expense_id")?;
    Ok(expense_json(
        &world.db,
        id,
        own_group_expense(&world.db, me, id)?,
    ))
}

fn add_expense(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let group_id = args.id("group_id")?;
    let description = args.text("description")?.to_owned();
    let amount = args.money("amount")?;
    let db = &world.db;
    let group = my_group(db, me, group_id)?;
    let payer = match args.opt_str("paid_by_email")? {
        Some(email) => member(db, group, email)?,
        None => me,
    };
    let sharers = match args.opt_str_list("split_among_emails")? {
        None => group.member_ids.clone(),
        Some(emails) => {
            let mut people = Vec::new();
            for email in emails {
                let person = member(db, group, &email)?;
                if !people.contains(&person) {
                    people.push(person);
                }
            }
            people
        }
    };
    if sharers.is_empty() {
        return Err(ApiError::new(
            "split_among_emails must name at least one member",
        ));
    }
    let shares = sharers
        .iter()
        .zip(amount.split_evenly(sharers.len()))
        .map(|(&person, amount)| Share { person, amount })
        .collect();
    let created_at = world.now();
    let id = world.db.expenses.insert(Expense {
        group_id,
        payer,
        description,
        amount,
        shares,
        created_at,
    });
    Ok(json!({"expense_id": id, "message": format!("Added an expense of {amount}.")}))
}

fn delete_expense(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("expense_id")?;
    if own_group_expense(&world.db, me, id)?.payer != me {
        return Err(ApiError::new(format!(
            "expense {id} was paid by someone else: only its payer can delete it"
        )));
    }
    world.db.expenses.remove(id);
    Ok(message(&format!("Deleted expense {id}.")))
}

fn show_balances(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let group_id = args.id("group_id")?;
    let db = &world.db;
    my_group(db, me, group_id)?;
    let debts = db.group_debts(group_id, me);
    let total: Money = debts.iter().map(|&(_, m)| m).sum();
    let balances: Vec<Value> = debts
        .into_iter()
        .map(|(p, m)| json!({"name": db.name_of(p), "email": db.email_of(p), "balance": m}))
        .collect();
    Ok(json!({"balances": balances, "total": total}))
}

fn settle_up(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let group_id = args.id("group_id")?;
    let email = args.str("email")?;
    let amount = args.opt_money("amount")?;
    let db = &world.db;
    let group = my_group(db, me, group_id)?;
    let other = member(db, group, email)?;
    if other == me {
        return Err(ApiError::new("you cannot settle up with yourself"));
    }
    let debt = db
        .group_debts(group_id, me)
        .into_iter()
        .find(|&(p, _)| p == other)
        .map_or(Money::ZERO, |(_, m)| m);
    if debt == Money::ZERO {
        return Err(ApiError::new(format!(
            "you and {email} are settled up in group {group_id}"
        )));
    }
    let amount = amount.unwrap_or(debt.abs());
    if amount > debt.abs() {
        return Err(ApiError::new(format!(
            "the debt between you and {email} is only {}",
            debt.abs()
        )));
    }
    let (from, to) = if debt < Money::ZERO {
        (me, other)
    } else {
        (other, me)
    };
    let created_at = world.now();
    let id = world.db.settlements.insert(Settlement {
        group_id,
        from,
        to,
        amount,
        created_at,
    });
    let remaining = if debt < Money::ZERO {
        debt + amount
    } else {
        debt - amount
    };
    Ok(json!({
        "settlement_id": id,
        "message": format!("{} paid {} {amount}.", world.db.name_of(from), world.db.name_of(to)),
        "remaining_balance": remaining,
    }))
}

fn show_settlements(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let page = args.page()?;
    let group_id = args.id("group_id")?;
    let db = &world.db;
    my_group(db, me, group_id)?;
    let mut rows: Vec<(Id, &Settlement)> =
        db.settlements.filter(|s| s.group_id == group_id).collect();
    newest_first(&mut rows, |r| r.created_at);
    Ok(page.of(rows, |(id, s)| {
        json!({"settlement_id": id, "from": person_json(db, s.from), "to": person_json(db, s.to), "amount": s.amount, "created_at": s.created_at})
    }))
}
