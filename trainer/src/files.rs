//! Writing a file so that a reader never sees half of it, and a killed process never
//! leaves half of one: the bytes go to a temporary file beside the destination, are
//! synced to disk, and the temporary file is renamed over the destination.

use std::ffi::OsString;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` atomically, creating its directory first. The caller names
/// `path` in its error: an [`io::Error`] does not.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent)?;
    }
    let temporary = temporary_beside(path);
    let mut file = fs::File::create(&temporary)?;
    file.write_all(bytes).and_then(|()| file.sync_all())?;
    fs::rename(&temporary, path)
}

/// `path` with `.tmp` appended (`eval.json` -> `eval.json.tmp`).
fn temporary_beside(path: &Path) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(".tmp");
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_replaced_whole_and_no_temporary_is_left() {
        let dir = std::env::temp_dir().join(format!("sage-files-{}", std::process::id()));
        let path = dir.join("nested").join("out.json");
        write_atomic(&path, b"first").unwrap();
        write_atomic(&path, b"second").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second");
        assert!(!temporary_beside(&path).exists());
        assert!(
            write_atomic(&dir.join("nested"), b"x").is_err(),
            "a directory is no file"
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
