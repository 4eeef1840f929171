//! Templates on the `todo` app alone.

use serde_json::{json, Value};

use super::pick::{params, text, texts};
use super::{SkillParam, Solution, TaskKind, Template};
use crate::world::records::Priority;
use crate::world::{today, Date, Db, Id, USER};

/// Names of lists the user may ask to create.
const NEW_LISTS: [&str; 6] = [
    "Moving day",
    "Party prep",
    "Trip prep",
    "Garden work",
    "Car care",
    "Tax season",
];

/// Items the user may ask to put on a new list.
const NEW_ITEMS: [&str; 10] = [
    "Book a van",
    "Buy tape",
    "Label boxes",
    "Send invitations",
    "Order the cake",
    "Check tire pressure",
    "Renew insurance",
    "Gather receipts",
    "Buy seeds",
    "Print tickets",
];

/// The todo templates.
pub(super) const TEMPLATES: &[Template] = &[
    Template {
        name: "todo_complete_due",
        apps: &["todo"],
        kind: TaskKind::Action,
        pick: |p| {
            let db = p.db();
            let open: Vec<(String, Date)> = db
                .todo_items
                .filter(|i| i.owner == USER && !i.done)
                .filter_map(|(_, i)| Some((list_name(db, i.list_id)?, i.due_date?)))
                .collect();
            let (list, due) = p.pick(&open)?;
            let date = due.add_days(p.range(0, 5) as i32);
            Some(params([("list_name", json!(list)), ("date", json!(date.to_string()))]))
        },
        instruction: |p| {
            format!(
                "In my \"{}\" to-do list, mark as done every open item that is due on or before {}.",
                text(p, "list_name"),
                text(p, "date")
            )
        },
        reference: |r, p| {
            let date = Date::parse(text(p, "date"));
            let list = text(p, "list_name");
            let db = r.db();
            let ids: Vec<Id> = db
                .todo_items
                .filter(|i| {
                    i.owner == USER
                        && !i.done
                        && list_name(db, i.list_id).as_deref() == Some(list)
                        && i.due_date.is_some_and(|d| Some(d) <= date)
                })
                .map(|(id, _)| id)
                .collect();
            for id in ids {
                r.call("todo", "complete_item", json!({"item_id": id}))?;
            }
            Ok(Value::Null)
        },
        solution: Solution {
            names: &["complete_items_due_by", "finish_due_items", "mark_due_items_done"],
            summaries: &[
                "Marks done every open item of a to-do list that is due on or before a day.",
                "Completes the open items of one of the user's lists that are due by a date.",
            ],
            params: &[
                SkillParam { name: "list_name", ty: "str", doc: "the list's name" },
                SkillParam { name: "date", ty: "str", doc: "the last due day included, YYYY-MM-DD" },
            ],
            returns: ("list", "titles of the items marked done"),
            docs: &[("todo", "show_lists"), ("todo", "show_items"), ("todo", "complete_item")],
            body: include_str!("skills/todo_complete_due.star"),
        },
    },
    Template {
        name: "todo_count_priority",
        apps: &["todo"],
        kind: TaskKind::Question,
        pick: |p| {
            let priority = p.pick(&Priority::ALL)?;
            Some(params([("priority", json!(priority.name()))]))
        },
        instruction: |p| {
            format!(
                "How many open {}-priority items do I have across all my to-do lists?",
                text(p, "priority")
            )
        },
        reference: |r, p| {
            let priority = Priority::parse(text(p, "priority"));
            Ok(json!(r
                .db()
                .todo_items
                .filter(|i| i.owner == USER && !i.done && Some(i.priority) == priority)
                .count()))
        },
        solution: Solution {
            names: &["count_open_items_with_priority", "open_items_by_priority", "count_priority_todos"],
            summaries: &[
                "Counts the user's open to-do items of a priority across every list.",
                "Returns how many open items of a given priority the user has.",
            ],
            params: &[SkillParam { name: "priority", ty: "str", doc: "low, medium or high" }],
            returns: ("int", "the number of open items"),
            docs: &[("todo", "show_items")],
            body: include_str!("skills/todo_count_priority.star"),
        },
    },
    Template {
        name: "todo_new_list_with_items",
        apps: &["todo"],
        kind: TaskKind::Action,
        pick: |p| {
            let name = p.pick(&NEW_LISTS)?;
            let mut items: Vec<&str> = Vec::new();
            while items.len() < 3 {
                let item = p.pick(&NEW_ITEMS)?;
                if !items.contains(&item) {
                    items.push(item);
                }
            }
            let due = today().add_days(p.range(3, 20) as i32);
            Some(params([("name", json!(name)), ("items", json!(items)), ("due_date", json!(due.to_string()))]))
        },
        instruction: |p| {
            let items = texts(p, "items");
            format!(
                "Create a to-do list named \"{}\" with these items, each high priority and due {}: {}.",
                text(p, "name"),
                text(p, "due_date"),
                items.join(", ")
            )
        },
        reference: |r, p| {
            let created = r.call("todo", "create_list", json!({"name": text(p, "name")}))?;
            for item in texts(p, "items") {
                r.call(
                    "todo",
                    "add_item",
                    json!({"list_id": created["list_id"], "title": item, "due_date": text(p, "due_date"), "priority": "high"}),
                )?;
            }
            Ok(Value::Null)
        },
        solution: Solution {
            names: &["create_list_with_items", "new_todo_list", "make_high_priority_list"],
            summaries: &[
                "Creates a to-do list holding the given items, all high priority with one due date.",
                "Makes a new list and adds each item to it as a high-priority task due on a day.",
            ],
            params: &[
                SkillParam { name: "name", ty: "str", doc: "the new list's name" },
                SkillParam { name: "items", ty: "list", doc: "the items' titles" },
                SkillParam { name: "due_date", ty: "str", doc: "the due day of every item, YYYY-MM-DD" },
            ],
            returns: ("int", "the new list's id"),
            docs: &[("todo", "create_list"), ("todo", "add_item")],
            body: include_str!("skills/todo_new_list_with_items.star"),
        },
    },
];

/// The name of the list `id`.
pub(super) fn list_name(db: &Db, id: Id) -> Option<String> {
    db.todo_lists.get(id).map(|l| l.name.clone())
}
