//! The `todo` app: named to-do lists of items with due dates and priorities.

use serde_json::{json, Value};

use super::{login, login_apis, logout, matches, message, needle, not_found, one_of};
use crate::sandbox::{ApiError, ParamType::*};
use crate::world::args::Args;
use crate::world::db::Db;
use crate::world::declare::{api, declare_app, AppDecl};
use crate::world::records::{Priority, TodoItem, TodoList};
use crate::world::table::{Id, PersonId};
use crate::world::World;

const APP: &str = "todo";

pub(super) fn app() -> AppDecl {
    let item = json!({
        "item_id": "int", "list_id": "int", "list_name": "str", "title": "str",
        "due_date": "str (YYYY-MM-DD) or None", "priority": "str ('low', 'medium' or 'high')",
        "done": "bool", "completed_at": "str or None", "created_at": "str"
    });
    let [login_api, logout_api] = login_apis(
        APP,
        "The email address of the todo account.",
        |w, a| login(w, a, APP),
        |w, a| logout(w, a, APP),
    );
    declare_app(
        APP,
        "To-do lists: lists of items with due dates and priorities; add, edit, complete and delete items.",
        vec![
            login_api,
            logout_api,
            api("show_lists", "Lists the user's to-do lists, oldest first, with item counts.", show_lists)
                .token()
                .paged()
                .returns(json!([{"list_id": "int", "name": "str", "item_count": "int", "open_item_count": "int", "created_at": "str"}])),
            api("create_list", "Creates a to-do list.", create_list)
                .token()
                .req("name", Str, "Its name; must differ from the user's other lists' names.")
                .returns(json!({"list_id": "int", "message": "str"}))
                .error("the name is empty or taken"),
            api("rename_list", "Renames a to-do list.", rename_list)
                .token()
                .req("list_id", Int, "The list.")
                .req("name", Str, "The new name; must differ from the user's other lists' names.")
                .returns(json!({"message": "str"}))
                .error("there is no list with that id among the user's lists")
                .error("the name is empty or taken"),
            api("delete_list", "Deletes a to-do list and every item on it.", delete_list)
                .token()
                .req("list_id", Int, "The list.")
                .returns(json!({"message": "str", "deleted_item_count": "int"}))
                .error("there is no list with that id among the user's lists"),
            api("show_items", "Lists items of the user's lists: open items first, then by due date (items without one last), then oldest first.", show_items)
                .token()
                .opt("list_id", Int, Value::Null, "Only items of this list. Default: all lists.")
                .opt("done", Bool, Value::Null, "Only done (True) or only open (False) items.")
                .opt("priority", Str, Value::Null, "Only items of this priority: low, medium or high.")
                .opt("due_before", Str, Value::Null, "Only items due on or before this day (YYYY-MM-DD).")
                .opt("query", Str, Value::Null, "Text that must occur (case-insensitive) in the title.")
                .paged()
                .returns(json!([item.clone()]))
                .error("there is no list with that id among the user's lists")
                .error("priority is not low, medium or high, or due_before is not YYYY-MM-DD"),
            api("show_item", "Shows one item.", show_item)
                .token()
                .req("item_id", Int, "The item.")
                .returns(item)
                .error("there is no item with that id among the user's items"),
            api("add_item", "Adds an open item to a list.", add_item)
                .token()
                .req("list_id", Int, "The list.")
                .req("title", Str, "What to do (not empty).")
                .opt("due_date", Str, Value::Null, "When it is due, YYYY-MM-DD.")
                .opt("priority", Str, json!("medium"), "low, medium or high.")
                .returns(json!({"item_id": "int", "message": "str"}))
                .error("there is no list with that id among the user's lists")
                .error("the title is empty, priority is not low, medium or high, or due_date is not YYYY-MM-DD"),
            api("update_item", "Changes an item; fields left out keep their value.", update_item)
                .token()
                .req("item_id", Int, "The item.")
                .opt("title", Str, Value::Null, "New title.")
                .opt("due_date", Str, Value::Null, "New due date, YYYY-MM-DD.")
                .opt("priority", Str, Value::Null, "New priority: low, medium or high.")
                .opt("list_id", Int, Value::Null, "Move it to this list of the user's.")
                .returns(json!({"message": "str"}))
                .error("there is no item (or target list) with that id among the user's")
                .error("a new value is not valid"),
            api("complete_item", "Marks an item done.", complete_item)
                .token()
                .req("item_id", Int, "The item.")
                .returns(json!({"message": "str"}))
                .error("there is no item with that id among the user's items")
                .error("the item is already done"),
            api("reopen_item", "Marks a done item open again.", reopen_item)
                .token()
                .req("item_id", Int, "The item.")
                .returns(json!({"message": "str"}))
                .error("there is no item with that id among the user's items")
                .error("the item is not done"),
            api("delete_item", "Deletes an item.", delete_item)
                .token()
                .req("item_id", Int, "The item.")
                .returns(json!({"message": "str"}))
                .error("there is no item with that id among the user's items"),
        ],
    )
}

fn item_json(db: &Db, id: Id, i: &TodoItem) -> Value {
    json!({
        "item_id": id, "list_id": i.list_id,
        "list_name": db.todo_lists.get(i.list_id).map(|l| l.name.as_str()).unwrap_or(""),
        "title": i.title, "due_date": i.due_date, "priority": i.priority, "done": i.done,
        "completed_at": i.completed_at, "created_at": i.created_at,
    })
}

fn own_list(db: &Db, me: PersonId, id: Id) -> Result<&TodoList, ApiError> {
    db.todo_lists
        .get(id)
        .filter(|l| l.owner == me)
        .ok_or_else(|| not_found("to-do list of yours", id))
}

fn own_item(db: &Db, me: PersonId, id: Id) -> Result<&TodoItem, ApiError> {
    db.todo_items
        .get(id)
        .filter(|i| i.owner == me)
        .ok_or_else(|| not_found("to-do item of yours", id))
}

fn name_taken(db: &Db, me: PersonId, name: &str, except: Option<Id>) -> bool {
    db.todo_lists
        .find(|l| l.owner == me && l.name.eq_ignore_ascii_case(name))
        .is_some_and(|(id, _)| Some(id) != except)
}

fn priority(text: &str) -> Result<Priority, ApiError> {
    Priority::parse(one_of("priority", text.trim(), &["low", "medium", "high"])?)
        .ok_or_else(|| ApiError::new("bad priority"))
}

fn show_lists(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let page = args.page()?;
    let db = &world.db;
    Ok(page.of(db.todo_lists.filter(|l| l.owner == me), |(id, l)| {
        let items: Vec<&TodoItem> = db
            .todo_items
            .filter(|i| i.list_id == id)
            .map(|(_, i)| i)
            .collect();
        json!({
            "list_id": id, "name": l.name, "item_count": items.len(),
            "open_item_count": items.iter().filter(|i| !i.done).count(), "created_at": l.created_at,
        })
    }))
}

fn create_list(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let name = args.text("name")?;
    if name_taken(&world.db, me, name, None) {
        return Err(ApiError::new(format!(
            "you already have a list named {name:?}"
        )));
    }
    let created_at = world.now();
    let id = world.db.todo_lists.insert(TodoList {
        owner: me,
        name: name.to_owned(),
        created_at,
    });
    Ok(json!({"list_id": id, "message": format!("Created list {name:?}.")}))
}

fn rename_list(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("list_id")?;
    let name = args.text("name")?;
    own_list(&world.db, me, id)?;
    if name_taken(&world.db, me, name, Some(id)) {
        return Err(ApiError::new(format!(
            "you already have a list named {name:?}"
        )));
    }
    if let Some(list) = world.db.todo_lists.get_mut(id) {
        list.name = name.to_owned();
    }
    Ok(message(&format!("Renamed list {id} to {name:?}.")))
}

fn delete_list(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("list_id")?;
    own_list(&world.db, me, id)?;
    let deleted = world.db.todo_items.remove_where(|i| i.list_id == id);
    world.db.todo_lists.remove(id);
    Ok(json!({"message": format!("Deleted list {id}."), "deleted_item_count": deleted}))
}

fn show_items(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let page = args.page()?;
    let db = &world.db;
    let list_id = args.opt_id("list_id")?;
    if let Some(list_id) = list_id {
        own_list(db, me, list_id)?;
    }
    let done = args.opt_bool("done")?;
    let wanted = args.opt_str("priority")?.map(priority).transpose()?;
    let due_before = args.opt_date("due_before")?;
    let query = needle(args.opt_str("query")?);
    let mut rows: Vec<(Id, &TodoItem)> = db
        .todo_items
        .filter(|i| {
            i.owner == me
                && list_id.is_none_or(|l| i.list_id == l)
                && done.is_none_or(|d| i.done == d)
                && wanted.is_none_or(|p| i.priority == p)
                && due_before.is_none_or(|d| i.due_date.is_some_and(|due| due <= d))
                && matches(&query, &i.title)
        })
        .collect();
    rows.sort_by_key(|(_, i)| (i.done, i.due_date.is_none(), i.due_date, i.created_at));
    Ok(page.of(rows, |(id, i)| item_json(db, id, i)))
}

fn show_item(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("item_id")?;
    Ok(item_json(&world.db, id, own_item(&world.db, me, id)?))
}

fn add_item(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let list_id = args.id("list_id")?;
    own_list(&world.db, me, list_id)?;
    let item = TodoItem {
        owner: me,
        list_id,
        title: args.text("title")?.to_owned(),
        due_date: args.opt_date("due_date")?,
        priority: priority(args.opt_str("priority")?.unwrap_or("medium"))?,
        done: false,
        completed_at: None,
        created_at: world.now(),
    };
    let id = world.db.todo_items.insert(item);
    Ok(json!({"item_id": id, "message": "Item added."}))
}

fn update_item(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("item_id")?;
    let mut item = own_item(&world.db, me, id)?.clone();
    if let Some(title) = args.opt_text("title")? {
        item.title = title.to_owned();
    }
    if let Some(day) = args.opt_date("due_date")? {
        item.due_date = Some(day);
    }
    if let Some(p) = args.opt_str("priority")? {
        item.priority = priority(p)?;
    }
    if let Some(list_id) = args.opt_id("list_id")? {
        own_list(&world.db, me, list_id)?;
        item.list_id = list_id;
    }
    if let Some(row) = world.db.todo_items.get_mut(id) {
        *row = item;
    }
    Ok(message(&format!("Updated item {id}.")))
}

fn complete_item(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("item_id")?;
    if own_item(&world.db, me, id)?.done {
        return Err(ApiError::new(format!("item {id} is already done")));
    }
    let now = world.now();
    if let Some(item) = world.db.todo_items.get_mut(id) {
        item.done = true;
        item.completed_at = Some(now);
    }
    Ok(message(&format!("Completed item {id}.")))
}

fn reopen_item(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("item_id")?;
    if !own_item(&world.db, me, id)?.done {
        return Err(ApiError::new(format!("item {id} is not done")));
    }
    if let Some(item) = world.db.todo_items.get_mut(id) {
        item.done = false;
        item.completed_at = None;
    }
    Ok(message(&format!("Reopened item {id}.")))
}

fn delete_item(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("item_id")?;
    own_item(&world.db, me, id)?;
    world.db.todo_items.remove(id);
    Ok(message(&format!("Deleted item {id}.")))
}
