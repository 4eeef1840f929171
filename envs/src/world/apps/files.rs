//! The `files` app: each person's private file tree of text files and directories,
//! addressed by absolute paths such as `/documents/taxes/2024.txt`.

use serde_json::{json, Value};

use super::{login, login_apis, logout, matches, message, needle, one_of};
use crate::sandbox::{ApiError, ParamType::*};
use crate::world::args::Args;
use crate::world::db::Db;
use crate::world::declare::{api, declare_app, AppDecl};
use crate::world::records::{parent_path, EntryKind, FileEntry};
use crate::world::table::{Id, PersonId};
use crate::world::World;

const APP: &str = "files";
const MAX_PATH_BYTES: usize = 512;

pub(super) fn app() -> AppDecl {
    let entry = json!({"name": "str", "path": "str", "kind": "str ('file' or 'directory')", "size": "int (bytes; 0 for directories)", "modified_at": "str"});
    let [login_api, logout_api] = login_apis(
        APP,
        "The email address of the files account.",
        |w, a| login(w, a, APP),
        |w, a| logout(w, a, APP),
    );
    declare_app(
        APP,
        "A private file system of text files and directories: list, read, search, create, edit, move, copy and delete.",
        vec![
            login_api,
            logout_api,
            api("list_directory", "Lists what a directory holds: directories first, then files, each by name.", list_directory)
                .token()
                .opt("path", Str, json!("/"), "Absolute path of the directory, e.g. /documents.")
                .paged()
                .returns(json!([entry.clone()]))
                .error("the path is not absolute, or holds . or .. or empty parts")
                .error("there is no directory at the path"),
            api("show_file", "Shows a file with its content.", show_file)
                .token()
                .req("path", Str, "Absolute path of the file.")
                .returns(json!({"name": "str", "path": "str", "content": "str", "size": "int", "created_at": "str", "modified_at": "str"}))
                .error("there is no file at the path (or it is a directory)"),
            api("search_files", "Searches the user's tree, by path.", search_files)
                .token()
                .opt("query", Str, Value::Null, "Text that must occur (case-insensitive) in the entry's name.")
                .opt("content_query", Str, Value::Null, "Text that must occur (case-insensitive) in a file's content; directories never match.")
                .opt("extension", Str, Value::Null, "Only files whose name ends with this extension (e.g. txt or .txt).")
                .opt("kind", Str, Value::Null, "Only files or only directories.")
                .opt("under", Str, json!("/"), "Only entries inside this directory, at any depth.")
                .paged()
                .returns(json!([entry]))
                .error("kind is not file or directory, or under is not a valid path"),
            api("create_file", "Creates a text file in an existing directory.", create_file)
                .token()
                .req("path", Str, "Absolute path of the new file.")
                .opt("content", Str, json!(""), "Its text.")
                .opt("overwrite", Bool, json!(false), "Replace the content of a file already at the path instead of failing.")
                .returns(json!({"message": "str", "size": "int"}))
                .error("the path is not valid, or its directory does not exist")
                .error("something already exists at the path (and overwrite is False, or it is a directory)"),
            api("update_file", "Replaces a file's content, or appends to it.", update_file)
                .token()
                .req("path", Str, "Absolute path of the file.")
                .req("content", Str, "The new text.")
                .opt("append", Bool, json!(false), "Add the text at the end instead of replacing.")
                .returns(json!({"message": "str", "size": "int"}))
                .error("there is no file at the path"),
            api("create_directory", "Creates a directory.", create_directory)
                .token()
                .req("path", Str, "Absolute path of the new directory.")
                .opt("parents", Bool, json!(false), "Also create missing parent directories.")
                .returns(json!({"message": "str"}))
                .error("the path is not valid, or its parent does not exist (and parents is False)")
                .error("something already exists at the path"),
            api("move_path", "Moves or renames a file or a directory (with everything in it).", move_path)
                .token()
                .req("source", Str, "Absolute path of what to move.")
                .req("destination", Str, "Its new absolute path; must not exist yet, and its directory must.")
                .returns(json!({"message": "str"}))
                .error("there is nothing at the source")
                .error("the destination exists, its directory does not, or it lies inside the source"),
            api("copy_file", "Copies a file.", copy_file)
                .token()
                .req("source", Str, "Absolute path of the file to copy.")
                .req("destination", Str, "Absolute path of the copy; must not exist yet, and its directory must.")
                .returns(json!({"message": "str"}))
                .error("there is no file at the source")
                .error("the destination exists or its directory does not"),
            api("delete_path", "Deletes a file, or a directory (a non-empty one only with recursive=True).", delete_path)
                .token()
                .req("path", Str, "Absolute path of what to delete.")
                .opt("recursive", Bool, json!(false), "Delete a directory with everything in it.")
                .returns(json!({"message": "str", "deleted_count": "int"}))
                .error("there is nothing at the path, or it is the root")
                .error("the directory is not empty and recursive is False"),
            api("show_disk_usage", "Counts the user's files and directories and the bytes their files hold.", show_disk_usage)
                .token()
                .returns(json!({"file_count": "int", "directory_count": "int", "total_size": "int"})),
        ],
    )
}

/// A valid absolute path in canonical form (no trailing or repeated slashes), or why not.
fn normalize(path: &str) -> Result<String, ApiError> {
    let path = path.trim();
    if !path.starts_with('/') {
        return Err(ApiError::new(format!(
            "{path:?} is not an absolute path (it must start with /)"
        )));
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(ApiError::new(format!(
            "paths are at most {MAX_PATH_BYTES} bytes"
        )));
    }
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    if let Some(bad) = parts
        .iter()
        .find(|p| **p == "." || **p == ".." || p.trim() != **p)
    {
        return Err(ApiError::new(format!(
            "{path:?} has an invalid part {bad:?}"
        )));
    }
    Ok(format!("/{}", parts.join("/")))
}

fn entry_at<'a>(db: &'a Db, me: PersonId, path: &str) -> Option<(Id, &'a FileEntry)> {
    db.file_at(me, path)
}

fn is_directory(db: &Db, me: PersonId, path: &str) -> bool {
    path == "/" || entry_at(db, me, path).is_some_and(|(_, e)| e.kind == EntryKind::Directory)
}

/// Whether `path` lies strictly inside the directory `dir`.
fn inside(path: &str, dir: &str) -> bool {
    dir == "/" && path != "/"
        || path.len() > dir.len() && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/'
}

/// Whether `name` ends with `suffix`, ignoring the case of ASCII letters.
fn ends_with_ignore_case(name: &str, suffix: &str) -> bool {
    name.len() >= suffix.len()
        && name.as_bytes()[name.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
}

fn entry_json(e: &FileEntry) -> Value {
    json!({"name": e.name(), "path": e.path, "kind": e.kind, "size": e.content.len(), "modified_at": e.modified_at})
}

/// Checks that `path` is free and its directory exists.
fn free_slot(db: &Db, me: PersonId, path: &str) -> Result<(), ApiError> {
    if path == "/" || entry_at(db, me, path).is_some() {
        return Err(ApiError::new(format!("{path} already exists")));
    }
    if !is_directory(db, me, parent_path(path)) {
        return Err(ApiError::new(format!(
            "there is no directory {}",
            parent_path(path)
        )));
    }
    Ok(())
}

fn list_directory(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let page = args.page()?;
    let path = normalize(args.opt_str("path")?.unwrap_or("/"))?;
    let db = &world.db;
    if !is_directory(db, me, &path) {
        return Err(ApiError::new(format!("there is no directory {path}")));
    }
    let mut rows: Vec<&FileEntry> = db
        .files
        .filter(|e| e.owner == me && e.parent() == path)
        .map(|(_, e)| e)
        .collect();
    rows.sort_by(|a, b| {
        (a.kind != EntryKind::Directory, a.name()).cmp(&(b.kind != EntryKind::Directory, b.name()))
    });
    Ok(page.of(rows, entry_json))
}

fn show_file(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let path = normalize(args.str("path")?)?;
    let (_, e) = entry_at(&world.db, me, &path)
        .filter(|(_, e)| e.kind == EntryKind::File)
        .ok_or_else(|| ApiError::new(format!("there is no file {path}")))?;
    Ok(json!({
        "name": e.name(), "path": e.path, "content": e.content, "size": e.content.len(),
        "created_at": e.created_at, "modified_at": e.modified_at,
    }))
}

fn search_files(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let page = args.page()?;
    let query = needle(args.opt_str("query")?);
    let content_query = needle(args.opt_str("content_query")?);
    let extension = args
        .opt_str("extension")?
        .map(|e| format!(".{}", e.trim().trim_start_matches('.')));
    let kind = args
        .opt_str("kind")?
        .map(|k| {
            one_of("kind", k, &["file", "directory"]).map(|k| match k {
                "file" => EntryKind::File,
                _ => EntryKind::Directory,
            })
        })
        .transpose()?;
    let under = normalize(args.opt_str("under")?.unwrap_or("/"))?;
    let mut rows: Vec<&FileEntry> = world
        .db
        .files
        .filter(|e| {
            e.owner == me
                && inside(&e.path, &under)
                && kind.is_none_or(|k| e.kind == k)
                && matches(&query, e.name())
                && (content_query.is_none()
                    || e.kind == EntryKind::File && matches(&content_query, &e.content))
                && extension
                    .as_ref()
                    .is_none_or(|x| e.kind == EntryKind::File && ends_with_ignore_case(e.name(), x))
        })
        .map(|(_, e)| e)
        .collect();
    rows.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(page.of(rows, entry_json))
}

fn create_file(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let path = normalize(args.str("path")?)?;
    let content = args.opt_str("content")?.unwrap_or("").to_owned();
    let overwrite = args.opt_bool("overwrite")?.unwrap_or(false);
    let now = world.now();
    let size = content.len();
    match entry_at(&world.db, me, &path) {
        Some((id, e)) if overwrite && e.kind == EntryKind::File => {
            if let Some(file) = world.db.files.get_mut(id) {
                file.content = content;
                file.modified_at = now;
            }
        }
        _ => {
            free_slot(&world.db, me, &path)?;
            world.db.files.insert(FileEntry {
                owner: me,
                path: path.clone(),
                kind: EntryKind::File,
                content,
                created_at: now,
                modified_at: now,
            });
        }
    }
    Ok(json!({"message": format!("Wrote {path}."), "size": size}))
}

fn update_file(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let path = normalize(args.str("path")?)?;
    let content = args.str("content")?;
    let append = args.opt_bool("append")?.unwrap_or(false);
    let id = entry_at(&world.db, me, &path)
        .filter(|(_, e)| e.kind == EntryKind::File)
        .map(|(id, _)| id)
        .ok_or_else(|| ApiError::new(format!("there is no file {path}")))?;
    let now = world.now();
    let file = world
        .db
        .files
        .get_mut(id)
        .ok_or_else(|| ApiError::new(format!("there is no file {path}")))?;
    if append {
        file.content.push_str(content);
    } else {
        file.content = content.to_owned();
    }
    file.modified_at = now;
    Ok(json!({"message": format!("Wrote {path}."), "size": file.content.len()}))
}

fn create_directory(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let path = normalize(args.str("path")?)?;
    let parents = args.opt_bool("parents")?.unwrap_or(false);
    if path == "/" || entry_at(&world.db, me, &path).is_some() {
        return Err(ApiError::new(format!("{path} already exists")));
    }
    let mut missing = vec![path.clone()];
    let mut dir = parent_path(&path).to_owned();
    while !is_directory(&world.db, me, &dir) {
        if !parents || entry_at(&world.db, me, &dir).is_some() {
            return Err(ApiError::new(format!("there is no directory {dir}")));
        }
        missing.push(dir.clone());
        dir = parent_path(&dir).to_owned();
    }
    let now = world.now();
    for dir in missing.into_iter().rev() {
        world.db.files.insert(FileEntry {
            owner: me,
            path: dir,
            kind: EntryKind::Directory,
            content: String::new(),
            created_at: now,
            modified_at: now,
        });
    }
    Ok(message(&format!("Created directory {path}.")))
}

fn move_path(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let source = normalize(args.str("source")?)?;
    let destination = normalize(args.str("destination")?)?;
    entry_at(&world.db, me, &source)
        .ok_or_else(|| ApiError::new(format!("there is nothing at {source}")))?;
    if inside(&destination, &source) {
        return Err(ApiError::new(format!("cannot move {source} inside itself")));
    }
    free_slot(&world.db, me, &destination)?;
    let moved: Vec<Id> = world
        .db
        .files
        .filter(|e| e.owner == me && (e.path == source || inside(&e.path, &source)))
        .map(|(id, _)| id)
        .collect();
    let now = world.now();
    for id in moved {
        if let Some(e) = world.db.files.get_mut(id) {
            e.path = format!("{destination}{}", &e.path[source.len()..]);
            e.modified_at = now;
        }
    }
    Ok(message(&format!("Moved {source} to {destination}.")))
}

fn copy_file(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let source = normalize(args.str("source")?)?;
    let destination = normalize(args.str("destination")?)?;
    let content = entry_at(&world.db, me, &source)
        .filter(|(_, e)| e.kind == EntryKind::File)
        .map(|(_, e)| e.content.clone())
        .ok_or_else(|| ApiError::new(format!("there is no file {source}")))?;
    free_slot(&world.db, me, &destination)?;
    let now = world.now();
    world.db.files.insert(FileEntry {
        owner: me,
        path: destination.clone(),
        kind: EntryKind::File,
        content,
        created_at: now,
        modified_at: now,
    });
    Ok(message(&format!("Copied {source} to {destination}.")))
}

fn delete_path(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let path = normalize(args.str("path")?)?;
    let recursive = args.opt_bool("recursive")?.unwrap_or(false);
    if path == "/" {
        return Err(ApiError::new("the root directory cannot be deleted"));
    }
    entry_at(&world.db, me, &path)
        .ok_or_else(|| ApiError::new(format!("there is nothing at {path}")))?;
    let has_children = world
        .db
        .files
        .find(|e| e.owner == me && inside(&e.path, &path))
        .is_some();
    if has_children && !recursive {
        return Err(ApiError::new(format!(
            "{path} is not empty: pass recursive=True to delete it with everything in it"
        )));
    }
    let deleted = world
        .db
        .files
        .remove_where(|e| e.owner == me && (e.path == path || inside(&e.path, &path)));
    Ok(json!({"message": format!("Deleted {path}."), "deleted_count": deleted}))
}

fn show_disk_usage(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let (mut files, mut directories, mut bytes) = (0, 0, 0);
    for (_, e) in world.db.files.filter(|e| e.owner == me) {
        match e.kind {
            EntryKind::File => {
                files += 1;
                bytes += e.content.len();
            }
            EntryKind::Directory => directories += 1,
        }
    }
    Ok(json!({"file_count": files, "directory_count": directories, "total_size": bytes}))
}
