//! Templates on the `notes` app alone.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::pick::{params, text};
use super::{SkillParam, Solution, TaskKind, Template};
use crate::world::{Db, Id, USER};

/// Lines the user may ask to add to a note.
const LINES: [&str; 6] = [
    "Ask Sam about the weekend",
    "Double-check the dates",
    "Bring the blue folder",
    "Buy more batteries",
    "Call before noon",
    "Compare prices first",
];

/// The notes templates.
pub(super) const TEMPLATES: &[Template] = &[
    Template {
        name: "notes_tag_count",
        apps: &["notes"],
        kind: TaskKind::Question,
        pick: |p| {
            let tags: Vec<String> = user_tags(p.db()).into_iter().collect();
            Some(params([("tag", json!(p.pick(&tags)?))]))
        },
        instruction: |p| format!("How many of my notes are tagged \"{}\"?", text(p, "tag")),
        reference: |r, p| {
            let tag = text(p, "tag");
            Ok(json!(r
                .db()
                .notes
                .filter(|n| n.owner == USER && n.tags.iter().any(|t| t == tag))
                .count()))
        },
        solution: Solution {
            names: &[
                "count_notes_with_tag",
                "tagged_note_count",
                "notes_tagged_count",
            ],
            summaries: &[
                "Counts the user's notes that carry a given tag.",
                "Returns how many notes of the user have a tag.",
            ],
            params: &[SkillParam {
                name: "tag",
                ty: "str",
                doc: "the tag",
            }],
            returns: ("int", "the number of notes with the tag"),
            docs: &[("notes", "show_notes")],
            body: include_str!("skills/notes_tag_count.star"),
        },
    },
    Template {
        name: "notes_append_line",
        apps: &["notes"],
        kind: TaskKind::Action,
        pick: |p| {
            let titles = unique_titles(p.db());
            let title = p.pick(&titles)?;
            let line = p.pick(&LINES)?;
            Some(params([("title", json!(title)), ("line", json!(line))]))
        },
        instruction: |p| {
            format!(
                "Add the line \"{}\" at the end of my note titled \"{}\".",
                text(p, "line"),
                text(p, "title")
            )
        },
        reference: |r, p| {
            let title = text(p, "title");
            let id = r
                .db()
                .notes
                .find(|n| n.owner == USER && n.title == title)
                .map(|(id, _)| id)
                .unwrap_or(0);
            r.call(
                "notes",
                "append_to_note",
                json!({"note_id": id, "text": text(p, "line")}),
            )?;
            Ok(Value::Null)
        },
        solution: Solution {
            names: &[
                "append_line_to_note",
                "add_line_to_note",
                "append_to_titled_note",
            ],
            summaries: &[
                "Adds a line at the end of the user's note with a given title.",
                "Appends text to one of the user's notes, found by its exact title.",
            ],
            params: &[
                SkillParam {
                    name: "title",
                    ty: "str",
                    doc: "the note's exact title",
                },
                SkillParam {
                    name: "line",
                    ty: "str",
                    doc: "the line to add",
                },
            ],
            returns: ("int", "the id of the note changed"),
            docs: &[("notes", "show_notes"), ("notes", "append_to_note")],
            body: include_str!("skills/notes_append_line.star"),
        },
    },
    Template {
        name: "notes_pin_tag",
        apps: &["notes"],
        kind: TaskKind::Action,
        pick: |p| {
            let tags: BTreeSet<String> = p
                .db()
                .notes
                .filter(|n| n.owner == USER && !n.pinned)
                .flat_map(|(_, n)| n.tags.clone())
                .collect();
            let tags: Vec<String> = tags.into_iter().collect();
            Some(params([("tag", json!(p.pick(&tags)?))]))
        },
        instruction: |p| {
            format!(
                "Pin every note of mine tagged \"{}\" that is not pinned yet.",
                text(p, "tag")
            )
        },
        reference: |r, p| {
            let tag = text(p, "tag");
            let ids: Vec<Id> = r
                .db()
                .notes
                .filter(|n| n.owner == USER && !n.pinned && n.tags.iter().any(|t| t == tag))
                .map(|(id, _)| id)
                .collect();
            for id in ids {
                r.call(
                    "notes",
                    "update_note",
                    json!({"note_id": id, "pinned": true}),
                )?;
            }
            Ok(Value::Null)
        },
        solution: Solution {
            names: &["pin_notes_with_tag", "pin_tagged_notes", "pin_all_tagged"],
            summaries: &[
                "Pins every unpinned note of the user that carries a tag.",
                "Makes sure all of the user's notes with a given tag are pinned.",
            ],
            params: &[SkillParam {
                name: "tag",
                ty: "str",
                doc: "the tag",
            }],
            returns: ("int", "how many notes were pinned"),
            docs: &[("notes", "show_notes"), ("notes", "update_note")],
            body: include_str!("skills/notes_pin_tag.star"),
        },
    },
];

/// Every tag of the user's notes.
fn user_tags(db: &Db) -> BTreeSet<String> {
    db.notes
        .filter(|n| n.owner == USER)
        .flat_map(|(_, n)| n.tags.clone())
        .collect()
}

/// Titles that exactly one of the user's notes has.
pub(super) fn unique_titles(db: &Db) -> Vec<String> {
    let titles: Vec<&str> = db
        .notes
        .filter(|n| n.owner == USER)
        .map(|(_, n)| n.title.as_str())
        .collect();
    titles
        .iter()
        .filter(|t| titles.iter().filter(|u| u == t).count() == 1)
        .map(|t| t.to_string())
        .collect()
}
