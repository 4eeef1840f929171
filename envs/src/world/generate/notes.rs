//! Notes: lists, plans, recipes and journal entries, tagged.

use super::words::{ADJECTIVES, CITIES, LAST_NAMES, NOUNS};
use super::{acquaintances, moment_after, others, past_moment};
use crate::world::db::Db;
use crate::world::records::Note;
use crate::world::rng::Rng;
use crate::world::table::PersonId;
use crate::world::USER;

const USER_NOTES: usize = 25;

const GROCERIES: [&str; 16] = [
    "eggs",
    "milk",
    "spinach",
    "rice",
    "coffee beans",
    "apples",
    "olive oil",
    "bread",
    "tomatoes",
    "cheddar",
    "chicken thighs",
    "yogurt",
    "lentils",
    "bananas",
    "garlic",
    "oats",
];
const EXERCISES: [&str; 8] = [
    "squats",
    "push-ups",
    "lunges",
    "plank",
    "rowing",
    "deadlifts",
    "cycling",
    "yoga",
];
const DISHES: [(&str, [&str; 4]); 4] = [
    ("Lemon pasta", ["spaghetti", "lemons", "parmesan", "butter"]),
    (
        "Veggie curry",
        ["chickpeas", "coconut milk", "curry paste", "spinach"],
    ),
    ("Banana bread", ["bananas", "flour", "brown sugar", "eggs"]),
    ("Shakshuka", ["eggs", "tomatoes", "peppers", "cumin"]),
];

pub(super) fn generate(db: &mut Db, rng: &mut Rng) {
    let mut notes: Vec<Note> = (0..USER_NOTES).map(|i| note(db, rng, USER, i)).collect();
    for person in others(db) {
        for i in 0..rng.range(2, 4) as usize {
            let kind = rng.below(USER_NOTES) + i;
            notes.push(note(db, rng, person, kind));
        }
    }
    notes.sort_by_key(|n| n.created_at);
    for n in notes {
        db.notes.insert(n);
    }
}

fn bullet_list(items: &[&str]) -> String {
    items
        .iter()
        .map(|i| format!("- {i}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn note(db: &Db, rng: &mut Rng, owner: PersonId, kind: usize) -> Note {
    let (title, body, tags): (String, String, &[&str]) = match kind % 8 {
        0 => {
            let n = rng.range(4, 9) as usize;
            (
                "Grocery list".to_owned(),
                bullet_list(&rng.sample(&GROCERIES, n)),
                &["shopping"],
            )
        }
        1 => {
            let books: Vec<String> = (0..rng.range(3, 6))
                .map(|_| {
                    format!(
                        "The {} {} by {}",
                        rng.pick(&ADJECTIVES),
                        rng.pick(&NOUNS),
                        rng.pick(&LAST_NAMES)
                    )
                })
                .collect();
            let books: Vec<&str> = books.iter().map(String::as_str).collect();
            (
                "Books to read".to_owned(),
                bullet_list(&books),
                &["reading"],
            )
        }
        2 => {
            let plan: Vec<String> = ["Monday", "Wednesday", "Friday"]
                .iter()
                .map(|day| {
                    format!(
                        "{day}: {} and {}",
                        rng.pick(&EXERCISES),
                        rng.pick(&EXERCISES)
                    )
                })
                .collect();
            (
                "Workout plan".to_owned(),
                plan.join("\n"),
                &["fitness", "health"],
            )
        }
        3 => {
            let friends = acquaintances(db, owner);
            let name = rng
                .choose(&friends)
                .and_then(|&p| db.people.get(p))
                .map_or("Mom".to_owned(), |p| p.first_name.clone());
            let ideas = [
                format!(
                    "a {} {}",
                    rng.pick(&ADJECTIVES).to_lowercase(),
                    rng.pick(&NOUNS).to_lowercase()
                ),
                "concert tickets".to_owned(),
                "a cookbook".to_owned(),
            ];
            let ideas: Vec<&str> = ideas.iter().map(String::as_str).collect();
            (
                format!("Gift ideas for {name}"),
                bullet_list(&ideas),
                &["gifts"],
            )
        }
        4 => {
            let (dish, ingredients) = *rng.pick(&DISHES);
            (
                format!("Recipe: {dish}"),
                format!(
                    "Ingredients:\n{}\n\nCook and enjoy.",
                    bullet_list(&ingredients)
                ),
                &["recipes", "cooking"],
            )
        }
        5 => {
            let (city, _, _) = *rng.pick(&CITIES);
            (
                format!("Packing list for {city}"),
                bullet_list(&["passport", "charger", "sunglasses", "walking shoes"]),
                &["travel"],
            )
        }
        6 => {
            let topic = format!("{} {}", rng.pick(&ADJECTIVES), rng.pick(&NOUNS));
            (
                format!("Meeting notes: {topic} project"),
                format!(
                    "Decisions:\n- ship the {topic} draft next week\n- review budget on Thursday"
                ),
                &["work"],
            )
        }
        _ => (
            "Journal".to_owned(),
            "Long day, but a good one. Went for a walk and called family.".to_owned(),
            &["journal"],
        ),
    };
    let created_at = past_moment(rng, 400);
    let updated_at = if rng.chance(0.4) {
        moment_after(rng, created_at, 3600, 30 * 86_400)
    } else {
        created_at
    };
    Note {
        owner,
        title,
        body,
        tags: tags.iter().map(|t| t.to_string()).collect(),
        pinned: rng.chance(0.12),
        created_at,
        updated_at,
    }
}
