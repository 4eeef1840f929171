//! A walk-through of `sage-core` without a model: parse agent responses, keep their
//! skills in a library, retrieve skills for new tasks by query n-grams, and turn the
//! outcomes of a chain of tasks into rewards and GRPO advantages.
//!
//! Run: `cargo run --release -p sage-examples --example skill_library`
#![forbid(unsafe_code)]

use std::error::Error;
use std::num::NonZeroUsize;

use sage_core::grpo::chain_advantages;
use sage_core::retrieval::{HashingEmbedder, RetrievalMode, Retriever};
use sage_core::reward::{Reward, RewardKind, TaskOutcome};
use sage_core::skill::{parse_response, redefinitions, used_skills, HashSkillLibrary};
use sage_core::{Origin, Skill, SkillLibrary, Task};

/// Responses an agent might have written for three earlier tasks.
const EARLIER: [(&str, &str); 3] = [
    (
        "How much money did Bob send me on Venmo in March?",
        r#"Let me define a reusable function.
```python
def total_received(sender: str, month: int) -> float:
    """Total amount `sender` sent me in `month`."""
    token = login("venmo")
    return sum([t["amount"] for t in all_pages(apis.venmo.list_received, token)
                if t["sender"] == sender and t["month"] == month])

print(total_received("Bob", 3))
```"#,
    ),
    (
        "Add every song of my 'Road trip' playlist to my liked songs.",
        r#"```python
def like_playlist(playlist: str, *, dry_run: bool = False):
    """Like every song of `playlist`; returns the song ids."""
    token = login("music")
    ids = [s["id"] for s in apis.music.show_playlist(name=playlist, access_token=token)["songs"]]
    if not dry_run:
        for song_id in ids:
            apis.music.like_song(song_id=song_id, access_token=token)
    return ids

like_playlist("Road trip")
```"#,
    ),
    (
        "Which of my notes mention 'passport'?",
        r#"```python
def notes_mentioning(word):
    token = login("notes")
    return [n["title"] for n in apis.notes.search_notes(query=word, access_token=token)]
```"#,
    ),
];

fn main() -> Result<(), Box<dyn Error>> {
    let n = NonZeroUsize::new(2).ok_or("n-gram size must be positive")?;
    let mut retriever = Retriever::new(
        RetrievalMode::QueryNgram { n },
        2,
        HashingEmbedder::default(),
    )?;
    let mut library = HashSkillLibrary::new();

    println!("== parsing responses into skills");
    for (i, (instruction, response)) in EARLIER.iter().enumerate() {
        let parsed = parse_response(response);
        for def in &parsed.analysis.defs {
            let origin = Origin {
                scenario_id: format!("scenario-{i}"),
                task_id: format!("task-{i}"),
            };
            let skill = Skill::from_def(def, &parsed.code, origin);
            println!(
                "  {:<56} {}",
                skill.signature(),
                skill.docstring.as_deref().unwrap_or("(no docstring)")
            );
            retriever.add(&skill, instruction)?;
            library.insert(skill)?;
        }
        let calls: Vec<&str> = parsed
            .analysis
            .calls
            .iter()
            .map(|c| c.callee.as_str())
            .collect();
        println!("    calls: {}", calls.join(", "));
    }

    println!("\n== retrieval by query bigram Jaccard");
    let task = Task {
        id: "task-9".into(),
        scenario_id: "scenario-9".into(),
        instruction: "How much money did Carol send me on Venmo in June?".into(),
    };
    for hit in retriever.retrieve(&mut library, &task)? {
        println!("  {:<20} score {:.3}", hit.name, hit.score);
    }

    println!("\n== what a new response uses and redefines");
    let response = r#"```python
def notes_mentioning(word: str) -> list:
    """Titles of my notes that mention `word`."""
    return [n["title"] for n in apis.notes.search_notes(query=word)]

apis.supervisor.complete_task(answer=total_received("Carol", 6))
```"#;
    let parsed = parse_response(response);
    let used = used_skills(&parsed.analysis, &library);
    let redefined: Vec<&str> = redefinitions(&parsed.analysis, &library)
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    println!("  uses {used:?}, redefines {redefined:?}");

    println!("\n== rewards of a K=2 chain (r1, r2, task 2 reused task 1's skill)");
    println!(
        "  {:<26} {:>16} {:>14} {:>10}",
        "outcome", "skill-integrated", "outcome-only", "chain"
    );
    let cases = [
        ("both pass, skill reused", 1.0, 1.0, true),
        ("both pass, no reuse", 1.0, 1.0, false),
        ("task 2 half done, reused", 1.0, 0.5, true),
        ("task 1 fails, reused", 0.0, 1.0, true),
    ];
    let mut group_rewards = Vec::new();
    for (name, r1, r2, reused) in cases {
        let task2 = TaskOutcome::new(r2, true);
        let chain = [
            TaskOutcome::new(r1, true),
            if reused {
                task2.using_skill_from(0)
            } else {
                task2
            },
        ];
        let mut row = Vec::new();
        for kind in [
            RewardKind::SkillIntegrated,
            RewardKind::OutcomeOnly,
            RewardKind::Chain,
        ] {
            let mut rewards = [0.0f32; 2];
            kind.rewards(&chain, &mut rewards)?;
            row.push(format!("{:?}", rewards));
        }
        println!("  {name:<26} {:>16} {:>14} {:>10}", row[0], row[1], row[2]);
        let mut rewards = [0.0f32; 2];
        RewardKind::SkillIntegrated.rewards(&chain, &mut rewards)?;
        group_rewards.extend_from_slice(&rewards);
    }

    println!("\n== GRPO advantages if those four were one group of rollouts");
    let mut advantages = vec![0.0f32; group_rewards.len()];
    chain_advantages(&group_rewards, cases.len(), 2, false, 1e-6, &mut advantages)?;
    for ((name, ..), a) in cases.iter().zip(advantages.chunks(2)) {
        println!("  {name:<26} A1 {:+.3}  A2 {:+.3}", a[0], a[1]);
    }

    println!("\n== the library as JSON lines ({} skills)", library.len());
    print!("{}", library.to_jsonl());
    Ok(())
}
