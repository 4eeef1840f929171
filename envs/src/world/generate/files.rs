//! File trees: the user's documents, receipts, photos, work reports, recipes,
//! downloads and music; a small tree for everyone else.

use super::words::{CITIES, NOUNS, VERBS};
use super::{others, past_moment};
use crate::world::db::Db;
use crate::world::records::{EntryKind, FileEntry};
use crate::world::rng::Rng;
use crate::world::table::PersonId;
use crate::world::time::Timestamp;
use crate::world::USER;

const STORES: [&str; 6] = [
    "greengrocer",
    "hardware",
    "pharmacy",
    "bookshop",
    "bakery",
    "electronics",
];
const RECIPES: [&str; 4] = ["lemon_pasta", "veggie_curry", "banana_bread", "shakshuka"];

pub(super) fn generate(db: &mut Db, rng: &mut Rng) {
    let mut tree = Tree {
        owner: USER,
        entries: Vec::new(),
    };
    for dir in [
        "/documents",
        "/documents/taxes",
        "/documents/receipts",
        "/photos",
        "/work",
        "/work/reports",
        "/recipes",
        "/downloads",
        "/music",
    ] {
        tree.dir(rng, dir);
    }
    tree.file(
        rng,
        "/documents/resume.txt",
        "Experienced professional. Skills: planning, writing, data analysis.".to_owned(),
    );
    for year in [2023, 2024] {
        let income = rng.range(55_000, 140_000);
        let tax = income * rng.range(15, 28) / 100;
        tree.file(
            rng,
            &format!("/documents/taxes/tax_return_{year}.txt"),
            format!("Tax year: {year}\nTotal income: ${income}\nTax paid: ${tax}\n"),
        );
    }
    for _ in 0..8 {
        let at = past_moment(rng, 200);
        let store = rng.pick(&STORES);
        let cents = rng.range(500, 25_000);
        let path = format!("/documents/receipts/receipt_{}_{store}.txt", at.date());
        tree.file(
            rng,
            &path,
            format!(
                "Store: {store}\nDate: {}\nTotal: ${}.{:02}\n",
                at.date(),
                cents / 100,
                cents % 100
            ),
        );
    }
    let (city, _, _) = *rng.pick(&CITIES);
    let trip = format!("/photos/{}_trip", city.to_lowercase().replace(' ', "_"));
    tree.dir(rng, &trip);
    for n in 1..=rng.range(4, 7) {
        tree.file(
            rng,
            &format!("{trip}/IMG_{:04}.jpg", 1000 + n * 7),
            "JPEG image, 4032x3024".to_owned(),
        );
    }
    tree.file(rng, "/photos/profile.png", "PNG image, 512x512".to_owned());
    for month in 1..=5 {
        let body = format!(
            "# Report 2025-{month:02}\n\nRevenue grew {}%. Next steps: {} the {}.\n",
            rng.range(1, 15),
            rng.pick(&VERBS).to_lowercase(),
            rng.pick(&NOUNS).to_lowercase()
        );
        tree.file(
            rng,
            &format!("/work/reports/report_2025-{month:02}.md"),
            body,
        );
    }
    tree.file(
        rng,
        "/work/todo.txt",
        "- finish quarterly review\n- email the team\n".to_owned(),
    );
    for recipe in RECIPES {
        let serves = rng.range(2, 6);
        tree.file(
            rng,
            &format!("/recipes/{recipe}.txt"),
            format!("Recipe: {}\nServes {serves}.\n", recipe.replace('_', " ")),
        );
    }
    for name in ["manual", "boarding_pass", "lease_agreement", "invoice"] {
        let pages = rng.range(1, 40);
        tree.file(
            rng,
            &format!("/downloads/{name}.pdf"),
            format!("PDF document, {pages} pages"),
        );
    }
    let songs: Vec<String> = db
        .songs
        .iter()
        .map(|(_, s)| s.title.to_lowercase().replace(' ', "_"))
        .collect();
    for song in rng.sample(&songs, 5) {
        tree.file(
            rng,
            &format!("/music/{song}.mp3"),
            "MP3 audio, 3:45".to_owned(),
        );
    }
    tree.save(db);
    for owner in others(db) {
        let mut tree = Tree {
            owner,
            entries: Vec::new(),
        };
        tree.dir(rng, "/documents");
        tree.file(rng, "/documents/notes.txt", "Personal notes.".to_owned());
        tree.dir(rng, "/photos");
        for n in 1..=rng.range(0, 3) {
            tree.file(
                rng,
                &format!("/photos/IMG_{:04}.jpg", 2000 + n),
                "JPEG image, 4032x3024".to_owned(),
            );
        }
        tree.save(db);
    }
}

/// A person's tree being built; entries are saved parents first.
struct Tree {
    owner: PersonId,
    entries: Vec<FileEntry>,
}

impl Tree {
    fn add(&mut self, rng: &mut Rng, path: &str, kind: EntryKind, content: String) {
        let created_at: Timestamp = past_moment(rng, 500);
        let modified_at = if rng.chance(0.3) {
            past_moment(rng, 30).max(created_at)
        } else {
            created_at
        };
        self.entries.push(FileEntry {
            owner: self.owner,
            path: path.to_owned(),
            kind,
            content,
            created_at,
            modified_at,
        });
    }

    fn dir(&mut self, rng: &mut Rng, path: &str) {
        self.add(rng, path, EntryKind::Directory, String::new());
    }

    fn file(&mut self, rng: &mut Rng, path: &str, content: String) {
        if !self.entries.iter().any(|e| e.path == path) {
            self.add(rng, path, EntryKind::File, content);
        }
    }

    fn save(self, db: &mut Db) {
        for entry in self.entries {
            db.files.insert(entry);
        }
    }
}
