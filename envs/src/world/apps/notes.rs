//! The `notes` app: titled notes with tags and pins.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::{distinct_labels, login, login_apis, logout, matches, message, needle, not_found};
use crate::sandbox::{ApiError, ParamType::*};
use crate::world::args::Args;
use crate::world::db::Db;
use crate::world::declare::{api, declare_app, AppDecl};
use crate::world::records::Note;
use crate::world::table::{Id, PersonId};
use crate::world::World;

const APP: &str = "notes";

pub(super) fn app() -> AppDecl {
    let note = json!({
        "note_id": "int", "title": "str", "body": "str", "tags": ["str"], "pinned": "bool",
        "created_at": "str (YYYY-MM-DDTHH:MM:SS)", "updated_at": "str"
    });
    let [login_api, logout_api] = login_apis(
        APP,
        "The email address of the notes account.",
        |w, a| login(w, a, APP),
        |w, a| logout(w, a, APP),
    );
    declare_app(
        APP,
        "Notes: titled text notes with tags; search, create, edit, pin and delete them.",
        vec![
            login_api,
            logout_api,
            api("show_notes", "Lists the user's notes: pinned ones first, then most recently updated first. Bodies are included.", show_notes)
                .token()
                .opt("query", Str, Value::Null, "Text that must occur (case-insensitive) in the title or body.")
                .opt("tag", Str, Value::Null, "Only notes with this tag.")
                .opt("pinned", Bool, Value::Null, "Only pinned (True) or only unpinned (False) notes.")
                .paged()
                .returns(json!([note.clone()])),
            api("show_note", "Shows one note.", show_note)
                .token()
                .req("note_id", Int, "The note.")
                .returns(note)
                .error("there is no note with that id among the user's notes"),
            api("show_tags", "Lists every tag the user's notes use, alphabetically, with how many notes use it.", show_tags)
                .token()
                .returns(json!([{"tag": "str", "note_count": "int"}])),
            api("create_note", "Creates a note.", create_note)
                .token()
                .req("title", Str, "Title (not empty).")
                .opt("body", Str, json!(""), "Text.")
                .opt("tags", List, json!([]), "Tags (list of str; stored lower case, without repeats).")
                .opt("pinned", Bool, json!(false), "Pin it to the top.")
                .returns(json!({"note_id": "int", "message": "str"}))
                .error("the title is empty"),
            api("update_note", "Changes a note; fields left out keep their value.", update_note)
                .token()
                .req("note_id", Int, "The note.")
                .opt("title", Str, Value::Null, "New title.")
                .opt("body", Str, Value::Null, "New text; replaces the old text.")
                .opt("tags", List, Value::Null, "New tags; replace the old ones.")
                .opt("pinned", Bool, Value::Null, "Pin or unpin.")
                .returns(json!({"message": "str"}))
                .error("there is no note with that id among the user's notes")
                .error("the new title is empty"),
            api("append_to_note", "Adds a line of text at the end of a note's body.", append_to_note)
                .token()
                .req("note_id", Int, "The note.")
                .req("text", Str, "The text to add; it goes on a new line unless the body is empty.")
                .returns(json!({"message": "str"}))
                .error("there is no note with that id among the user's notes"),
            api("delete_note", "Deletes a note.", delete_note)
                .token()
                .req("note_id", Int, "The note.")
                .returns(json!({"message": "str"}))
                .error("there is no note with that id among the user's notes"),
        ],
    )
}

fn note_json(id: Id, n: &Note) -> Value {
    json!({
        "note_id": id, "title": n.title, "body": n.body, "tags": n.tags, "pinned": n.pinned,
        "created_at": n.created_at, "updated_at": n.updated_at,
    })
}

fn own_note(db: &Db, me: PersonId, id: Id) -> Result<&Note, ApiError> {
    db.notes
        .get(id)
        .filter(|n| n.owner == me)
        .ok_or_else(|| not_found("note of yours", id))
}

fn show_notes(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let page = args.page()?;
    let query = needle(args.opt_str("query")?);
    let tag = args.opt_str("tag")?.map(|t| t.trim().to_lowercase());
    let pinned = args.opt_bool("pinned")?;
    let mut rows: Vec<(Id, &Note)> = world
        .db
        .notes
        .filter(|n| {
            n.owner == me
                && tag.as_ref().is_none_or(|t| n.tags.contains(t))
                && pinned.is_none_or(|p| n.pinned == p)
                && (matches(&query, &n.title) || matches(&query, &n.body))
        })
        .collect();
    rows.sort_by_key(|&(id, n)| Reverse((n.pinned, n.updated_at, id)));
    Ok(page.of(rows, |(id, n)| note_json(id, n)))
}

fn show_note(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("note_id")?;
    Ok(note_json(id, own_note(&world.db, me, id)?))
}

fn show_tags(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, note) in world.db.notes.filter(|n| n.owner == me) {
        for tag in &note.tags {
            *counts.entry(tag).or_default() += 1;
        }
    }
    Ok(Value::Array(
        counts
            .into_iter()
            .map(|(tag, n)| json!({"tag": tag, "note_count": n}))
            .collect(),
    ))
}

fn create_note(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let now = world.now();
    let note = Note {
        owner: me,
        title: args.text("title")?.to_owned(),
        body: args.opt_str("body")?.unwrap_or("").to_owned(),
        tags: distinct_labels(args.opt_str_list("tags")?.unwrap_or_default()),
        pinned: args.opt_bool("pinned")?.unwrap_or(false),
        created_at: now,
        updated_at: now,
    };
    let id = world.db.notes.insert(note);
    Ok(json!({"note_id": id, "message": "Note created."}))
}

fn update_note(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("note_id")?;
    let mut note = own_note(&world.db, me, id)?.clone();
    let before = note.clone();
    if let Some(title) = args.opt_text("title")? {
        note.title = title.to_owned();
    }
    if let Some(body) = args.opt_str("body")? {
        note.body = body.to_owned();
    }
    if let Some(list) = args.opt_str_list("tags")? {
        note.tags = distinct_labels(list);
    }
    if let Some(pinned) = args.opt_bool("pinned")? {
        note.pinned = pinned;
    }
    if note != before {
        note.updated_at = world.now();
        if let Some(row) = world.db.notes.get_mut(id) {
            *row = note;
        }
    }
    Ok(message(&format!("Updated note {id}.")))
}

fn append_to_note(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("note_id")?;
    let text = args.str("text")?.to_owned();
    own_note(&world.db, me, id)?;
    let now = world.now();
    if let Some(note) = world.db.notes.get_mut(id) {
        if !note.body.is_empty() {
            note.body.push('\n');
        }
        note.body.push_str(&text);
        note.updated_at = now;
    }
    Ok(message(&format!("Appended to note {id}.")))
}

fn delete_note(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("note_id")?;
    own_note(&world.db, me, id)?;
    world.db.notes.remove(id);
    Ok(message(&format!("Deleted note {id}.")))
}
