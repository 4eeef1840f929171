//! The checkpoint directory's file-system side: step directory names, durable writes,
//! installing a finished temporary directory under its final name, and pruning.
//!
//! A checkpoint is written into `.tmp-step-NNNNNN-PID`, every file synced, then renamed
//! to `step-NNNNNN`. A directory leaves the listing (pruned, or replaced by a new save
//! of the same step) by a rename to `.del-step-NNNNNN-PID` before it is deleted, so at
//! no moment does a `step-*` name hold a partial checkpoint. Names starting with a dot
//! are never listed.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::error::CheckpointError;

/// Prefix of a complete checkpoint's directory name.
const STEP_PREFIX: &str = "step-";
/// Prefix of a checkpoint being written.
const TEMP_PREFIX: &str = ".tmp-";
/// Prefix of a checkpoint being deleted.
const DELETE_PREFIX: &str = ".del-";

/// The directory name of the checkpoint of `step`: `step-000123` (six digits at least).
pub fn step_dir_name(step: u64) -> String {
    format!("{STEP_PREFIX}{step:06}")
}

/// The step of a directory named `step-` followed by decimal digits.
pub(super) fn parse_step_dir_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(STEP_PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Where the checkpoint `final_name` is written before it is installed.
pub(super) fn temp_dir_for(checkpoints_dir: &Path, final_name: &str) -> PathBuf {
    checkpoints_dir.join(format!("{TEMP_PREFIX}{final_name}-{}", std::process::id()))
}

/// Writes `bytes` to `path` (created or truncated) and syncs it.
pub(super) fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    let mut file = File::create(path).map_err(|e| CheckpointError::io("cannot create", path, e))?;
    file.write_all(bytes)
        .map_err(|e| CheckpointError::io("cannot write", path, e))?;
    file.sync_all()
        .map_err(|e| CheckpointError::io("cannot sync", path, e))
}

/// Syncs a file that another module wrote.
pub(super) fn sync_file(path: &Path) -> Result<(), CheckpointError> {
    OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|file| file.sync_all())
        .map_err(|e| CheckpointError::io("cannot sync", path, e))
}

/// Syncs a directory's entries (the names created or renamed in it). Only Unix can
/// open a directory for syncing; elsewhere this does nothing.
pub(super) fn sync_dir(dir: &Path) -> Result<(), CheckpointError> {
    if cfg!(unix) {
        File::open(dir)
            .and_then(|handle| handle.sync_all())
            .map_err(|e| CheckpointError::io("cannot sync", dir, e))
    } else {
        Ok(())
    }
}

/// Removes `dir` and everything in it; a directory already gone is not an error.
pub(super) fn remove_tree(dir: &Path) -> Result<(), CheckpointError> {
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(CheckpointError::io("cannot remove", dir, e))
        }
        _ => Ok(()),
    }
}

/// Takes `dir` (a direct child of its parent) out of the listing by renaming it to a
/// dot name, then deletes it.
pub(super) fn retire(dir: &Path) -> Result<(), CheckpointError> {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return remove_tree(dir);
    };
    let doomed = parent.join(format!(
        "{DELETE_PREFIX}{}-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    remove_tree(&doomed)?;
    fs::rename(dir, &doomed).map_err(|e| CheckpointError::io("cannot rename", dir, e))?;
    remove_tree(&doomed)
}

/// Renames the finished `temp` directory to `final_dir`, first retiring a checkpoint
/// already there, then syncs the parent so the new name is durable.
pub(super) fn install(temp: &Path, final_dir: &Path) -> Result<(), CheckpointError> {
    if final_dir.exists() {
        retire(final_dir)?;
    }
    fs::rename(temp, final_dir).map_err(|e| CheckpointError::io("cannot rename", temp, e))?;
    match final_dir.parent() {
        Some(parent) => sync_dir(parent),
        None => Ok(()),
    }
}

/// Deletes the dot directories that interrupted saves or deletions left in
/// `checkpoints_dir` (only one process may save into a checkpoints directory).
pub(super) fn remove_leftovers(checkpoints_dir: &Path) -> Result<(), CheckpointError> {
    let entries = fs::read_dir(checkpoints_dir)
        .map_err(|e| CheckpointError::io("cannot list", checkpoints_dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| CheckpointError::io("cannot list", checkpoints_dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let leftover = [TEMP_PREFIX, DELETE_PREFIX]
            .iter()
            .any(|prefix| name.starts_with(&format!("{prefix}{STEP_PREFIX}")));
        if leftover && entry.path().is_dir() {
            remove_tree(&entry.path())?;
        }
    }
    Ok(())
}
