//! To-do lists and their items, due around today, some done.

use super::{moment_after, others, past_moment};
use crate::world::db::Db;
use crate::world::records::{Priority, TodoItem, TodoList};
use crate::world::rng::Rng;
use crate::world::table::PersonId;
use crate::world::time::today;
use crate::world::USER;

const LISTS: [(&str, [&str; 10]); 5] = [
    (
        "Groceries",
        [
            "Buy eggs",
            "Buy coffee",
            "Buy fruit",
            "Buy bread",
            "Restock pasta",
            "Buy detergent",
            "Pick up cheese",
            "Buy oat milk",
            "Get vegetables",
            "Buy snacks",
        ],
    ),
    (
        "Work",
        [
            "Prepare slides",
            "Review pull request",
            "Send weekly report",
            "Book meeting room",
            "Update roadmap",
            "Reply to client",
            "Plan sprint",
            "Write design doc",
            "Expense report",
            "Team lunch order",
        ],
    ),
    (
        "Home",
        [
            "Fix leaky faucet",
            "Vacuum living room",
            "Water plants",
            "Change bed sheets",
            "Clean fridge",
            "Replace light bulb",
            "Organize closet",
            "Take out recycling",
            "Descale kettle",
            "Wash windows",
        ],
    ),
    (
        "Errands",
        [
            "Return library books",
            "Post office",
            "Renew passport",
            "Car service",
            "Dry cleaning",
            "Pharmacy pickup",
            "Bank appointment",
            "Buy birthday card",
            "Drop off donations",
            "Key copy",
        ],
    ),
    (
        "Weekend",
        [
            "Hike the ridge trail",
            "Farmers market",
            "Call grandparents",
            "Bake bread",
            "Bike ride",
            "Visit museum",
            "Board game night",
            "Read a novel",
            "Try new cafe",
            "Picnic in the park",
        ],
    ),
];

pub(super) fn generate(db: &mut Db, rng: &mut Rng) {
    add_lists(db, rng, USER, LISTS.len());
    for person in others(db) {
        let count = rng.range(0, 2) as usize;
        add_lists(db, rng, person, count);
    }
}

fn add_lists(db: &mut Db, rng: &mut Rng, owner: PersonId, count: usize) {
    let user = owner == USER;
    for (name, titles) in rng.sample(&LISTS, count) {
        let created_at = past_moment(rng, 300);
        let list_id = db.todo_lists.insert(TodoList {
            owner,
            name: name.to_owned(),
            created_at,
        });
        let size = if user {
            rng.range(6, 10) as usize
        } else {
            rng.range(2, 5) as usize
        };
        for title in rng.sample(&titles, size) {
            let created_at = past_moment(rng, 40);
            let due_date = rng
                .chance(0.75)
                .then(|| created_at.date().add_days(rng.range(1, 45) as i32));
            let done = rng.chance(if due_date.is_some_and(|d| d < today()) {
                0.7
            } else {
                0.2
            });
            let completed_at = done.then(|| moment_after(rng, created_at, 3600, 20 * 86_400));
            db.todo_items.insert(TodoItem {
                owner,
                list_id,
                title: title.to_owned(),
                due_date,
                priority: *rng.pick(&Priority::ALL),
                done,
                completed_at,
                created_at,
            });
        }
    }
}
