//! Retrieval benchmarks over a library of 10,000 skills with varied, generated task
//! instructions: n-gram Jaccard top-5 (target under 1 ms per query), embedding cosine
//! top-5 at dimension 256, and the index builds.
//!
//! Run with `cargo bench -p sage-core --bench retrieval`.

// The shared harness prints literal table headers, which clippy flags.
#[path = "harness.rs"]
mod harness;

use std::hint::black_box;
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use sage_core::retrieval::{
    jaccard, same_scenario, Embedder, EmbeddingIndex, HashingEmbedder, NgramIndex,
};
use sage_core::skill::{HashSkillLibrary, SkillLibrary};
use sage_core::{Origin, Skill, SkillStats, Task};

const SKILLS: usize = 10_000;
const QUERIES: usize = 256;
const K: usize = 5;

const PEOPLE: &[&str] = &[
    "Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy", "Mallory",
    "Niaj", "Olivia", "Peggy", "Rupert", "Sybil", "Trent", "Victor", "Walter", "Yvonne", "Zoe",
    "Maria", "Chen", "Priya", "Omar", "Lena", "Kofi", "Sofia", "Mateo", "Aiko",
];
const MONTHS: &[&str] = &[
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: &[&str] = &[
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
    "tomorrow",
    "next week",
];
const ITEMS: &[&str] = &[
    "pizza",
    "groceries",
    "concert tickets",
    "coffee beans",
    "running shoes",
    "headphones",
    "books",
    "rent",
    "electricity",
    "movie night",
    "taxi ride",
    "birthday gift",
    "dinner",
    "phone case",
    "yoga mat",
    "board games",
];
const TOPICS: &[&str] = &[
    "project deadline",
    "family trip",
    "quarterly report",
    "gym schedule",
    "book club",
    "tax return",
    "wedding plans",
    "garden work",
    "job interview",
    "car repair",
];
const FOLDERS: &[&str] = &[
    "documents",
    "downloads",
    "photos",
    "backups",
    "work",
    "archive",
    "music",
];
const EXTENSIONS: &[&str] = &["pdf", "csv", "jpg", "txt", "mp3", "docx"];
const PLAYLISTS: &[&str] = &[
    "workout",
    "road trip",
    "chill",
    "focus",
    "party",
    "sleep",
    "classics",
];
const ARTISTS: &[&str] = &[
    "Adele",
    "Coldplay",
    "Miles Davis",
    "Beyonce",
    "Radiohead",
    "Shakira",
    "Queen",
];
const TEMPLATES: &[&str] = &[
    "How much money did I receive on Venmo from {person} in {month}?",
    "How much money did I send to {person} on Venmo for {item} in {month}?",
    "Request {amount} dollars from {person} on Venmo for the {item} we shared",
    "Split the {item} bill of {amount} dollars equally with {person} and {person} on Splitwise",
    "Play the most liked songs from my {playlist} playlist on Spotify",
    "Find the most played song by {artist} in my {playlist} playlist and like it",
    "Follow every artist whose songs are in my {playlist} playlist on Spotify",
    "Share the {playlist} playlist with {person} and {person}",
    "Send an email to {person} with the subject {topic} and attach the {ext} file from {folder}",
    "Reply to the latest email from {person} saying I will arrive on {day}",
    "Download the {ext} attachment from the email of {person} and save it in {folder}",
    "Mark all my todo tasks for {day} about the {topic} as done",
    "Set a reminder in my todo list to pay {person} {amount} dollars on {day}",
    "Add {count} {item} to my Amazon cart and check out with my {person} card",
    "What is the total cost of all {item} orders I placed on Amazon in {month}?",
    "How many {item} did I order from Amazon between {month} and {month}?",
    "Create a note titled {topic} listing every {item} I bought in {month}",
    "Delete every note that mentions the {topic} and was created before {month}",
    "Call {person} and then text them about the {topic} on {day}",
    "Move all {ext} files from the {folder} folder to the {folder} folder",
    "Rename every {ext} file in {folder} to include the date it was created",
    "Text {person} the total I spent on {item} in {month}",
];

/// A deterministic xorshift64 generator.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<'a>(&mut self, list: &[&'a str]) -> &'a str {
        list[(self.next() % list.len() as u64) as usize]
    }
}

/// One task instruction: a template with every slot filled at random.
fn instruction(rng: &mut XorShift) -> String {
    let mut text = rng.pick(TEMPLATES).to_string();
    while let Some(start) = text.find('{') {
        let end = start + text[start..].find('}').unwrap();
        let value = match &text[start + 1..end] {
            "person" => rng.pick(PEOPLE).to_string(),
            "month" => rng.pick(MONTHS).to_string(),
            "day" => rng.pick(DAYS).to_string(),
            "item" => rng.pick(ITEMS).to_string(),
            "topic" => rng.pick(TOPICS).to_string(),
            "folder" => rng.pick(FOLDERS).to_string(),
            "ext" => rng.pick(EXTENSIONS).to_string(),
            "playlist" => rng.pick(PLAYLISTS).to_string(),
            "artist" => rng.pick(ARTISTS).to_string(),
            "amount" => (5 + rng.next() % 500).to_string(),
            "count" => (1 + rng.next() % 9).to_string(),
            other => panic!("unknown slot {other}"),
        };
        text.replace_range(start..=end, &value);
    }
    text
}

/// A skill written by task `i` of scenario `i / 3`, with a source that mentions its
/// instruction's words.
fn skill(i: usize, instruction: &str) -> Skill {
    let words = sage_core::retrieval::words(instruction);
    let name = format!(
        "{}_{i}",
        words.iter().take(4).cloned().collect::<Vec<_>>().join("_")
    );
    Skill {
        source: format!("def {name}(who, month):\n    \"\"\"{instruction}\"\"\"\n    return apis.call(who, month)\n"),
        name,
        params: Vec::new(),
        docstring: Some(instruction.to_string()),
        origin: Origin {
            scenario_id: format!("scenario-{}", i / 3),
            task_id: format!("task-{i}"),
        },
        stats: SkillStats::default(),
        revision: 0,
    }
}

fn time_once<R>(f: impl FnOnce() -> R) -> (R, Duration) {
    let start = Instant::now();
    let value = f();
    (value, start.elapsed())
}

fn main() {
    let mut rng = XorShift(0x5a6e_5eed);
    let instructions: Vec<String> = (0..SKILLS).map(|_| instruction(&mut rng)).collect();
    let queries: Vec<String> = (0..QUERIES).map(|_| instruction(&mut rng)).collect();
    let skills: Vec<Skill> = instructions
        .iter()
        .enumerate()
        .map(|(i, text)| skill(i, text))
        .collect();
    let batch = Duration::from_millis(50);

    harness::header();
    for n in [2, 3] {
        let n = NonZeroUsize::new(n).unwrap();
        let (index, build) = time_once(|| {
            let mut index = NgramIndex::new(n);
            for (skill, text) in skills.iter().zip(&instructions) {
                index.insert(&skill.name, text);
            }
            index
        });
        harness::report(
            &format!("n-gram index build, n={n}, 10k skills"),
            build.as_secs_f64() * 1e3,
            "ms",
            "-",
            true,
        );
        let mut next = 0;
        let per_query = harness::median_time(
            || {
                next = (next + 1) % QUERIES;
                index.top_k(&queries[next], K)
            },
            21,
            batch,
        );
        let us = per_query.as_secs_f64() * 1e6;
        harness::report(
            &format!("n-gram top-{K}, n={n}, 10k skills"),
            us,
            "us/query",
            "< 1000 us",
            us < 1000.0,
        );
    }

    let two = NonZeroUsize::new(2).unwrap();
    let mut next = 0;
    let brute = harness::median_time(
        || {
            next = (next + 1) % QUERIES;
            instructions
                .iter()
                .map(|text| jaccard(&queries[next], text, two))
                .fold(0f32, f32::max)
        },
        5,
        batch,
    );
    harness::report(
        "Jaccard by brute force, n=2 (reference)",
        brute.as_secs_f64() * 1e3,
        "ms/query",
        "-",
        true,
    );

    let mut embedder = HashingEmbedder::new(256, two).unwrap();
    let (index, build) = time_once(|| {
        let mut index = EmbeddingIndex::new(embedder.dim()).unwrap();
        for (skill, text) in skills.iter().zip(&instructions) {
            let vector = embedder.embed(text).unwrap();
            index.insert(&skill.name, &vector).unwrap();
        }
        index
    });
    harness::report(
        "embed + index build, dim 256, 10k skills",
        build.as_secs_f64() * 1e3,
        "ms",
        "-",
        true,
    );
    let vectors: Vec<Vec<f32>> = queries.iter().map(|q| embedder.embed(q).unwrap()).collect();
    let mut next = 0;
    let search = harness::median_time(
        || {
            next = (next + 1) % QUERIES;
            index.top_k(&vectors[next], K).unwrap()
        },
        21,
        batch,
    );
    let us = search.as_secs_f64() * 1e6;
    harness::report(
        &format!("cosine top-{K}, dim 256, 10k skills"),
        us,
        "us/query",
        "< 1000 us",
        us < 1000.0,
    );
    let mut next = 0;
    let embed = harness::median_time(
        || {
            next = (next + 1) % QUERIES;
            embedder.embed(&queries[next]).unwrap()
        },
        21,
        batch,
    );
    harness::report(
        "hashing embed of one instruction, dim 256",
        embed.as_secs_f64() * 1e6,
        "us",
        "-",
        true,
    );

    let library = HashSkillLibrary::from_skills(skills.clone()).unwrap();
    let task = Task {
        id: "task-new".into(),
        scenario_id: "scenario-1234".into(),
        instruction: queries[0].clone(),
    };
    let scenario = harness::median_time(|| same_scenario(&library, &task, K), 21, batch);
    harness::report(
        "same-scenario scan, 10k skills",
        scenario.as_secs_f64() * 1e6,
        "us/query",
        "-",
        true,
    );
    black_box(library.len());
}
