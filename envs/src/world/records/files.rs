//! Rows of the `files` app: each person's file tree, one row per file or directory.

use serde::Serialize;

use crate::world::table::PersonId;
use crate::world::time::Timestamp;

/// A file or a directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A file with text content.
    File,
    /// A directory.
    Directory,
}

impl EntryKind {
    /// The name APIs show.
    pub fn name(self) -> &'static str {
        match self {
            EntryKind::File => "file",
            EntryKind::Directory => "directory",
        }
    }
}

/// A file or directory of a person's tree. The root `/` always exists and has no row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FileEntry {
    /// Whose tree.
    pub owner: PersonId,
    /// Absolute path, `/` separated, no trailing slash (`/documents/taxes.txt`).
    pub path: String,
    /// File or directory.
    pub kind: EntryKind,
    /// Text content (empty for directories).
    pub content: String,
    /// When it was made.
    pub created_at: Timestamp,
    /// When its content or path last changed.
    pub modified_at: Timestamp,
}

impl FileEntry {
    /// The last component of the path.
    pub fn name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or("")
    }

    /// The path of the containing directory (`/` for top-level entries).
    pub fn parent(&self) -> &str {
        parent_path(&self.path)
    }
}

/// The directory holding `path` (`/` for top-level paths and for `/` itself).
pub fn parent_path(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}
