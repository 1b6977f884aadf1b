//! Replacing a file so that a crash leaves either the old contents or the new, never a mix:
//! write a temp file in the same directory, fsync it, rename it over the target, fsync the
//! directory so the rename itself survives a power cut.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Atomically and durably replaces `path` with `bytes`, keeping its permissions.
pub fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let temp = temp_path(path);
    let written = write_new(&temp, bytes, path).and_then(|()| fs::rename(&temp, path));
    if written.is_err() {
        // Best effort: the error that matters is the one already in hand.
        let _ = fs::remove_file(&temp);
    }
    written?;
    sync_dir(&dir_of(path))
}

/// Durably writes `bytes` to `path`, which must not exist: for a record that is never
/// rewritten (a thread's spec revision), so an existing one is refused, not replaced.
pub fn create_new(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new().write(true).create_new(true).open(path)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    sync_dir(&dir_of(path))
}

/// Durably renames `from` to `to` (to archive a state file, or move it into a work tree):
/// both folders are synced, so a crash leaves the file at one place or the other.
pub fn rename(from: &Path, to: &Path) -> io::Result<()> {
    fs::rename(from, to)?;
    sync_dir(&dir_of(to))?;
    if dir_of(from) != dir_of(to) {
        sync_dir(&dir_of(from))?;
    }
    Ok(())
}

/// Makes a directory's entries (a created or renamed file) durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The directory holding `path` (`.` for a bare file name).
pub fn dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Deletes temp files a crashed [`replace`] of `path` left behind.
///
/// Call it only while holding the lock that serializes writers of `path`, so no temp file
/// being written right now can match. Best effort: a leftover costs disk space, not state.
pub fn remove_stale_temps(path: &Path) {
    let Ok(entries) = fs::read_dir(dir_of(path)) else {
        return;
    };
    let prefix = temp_prefix(path);
    for entry in entries.flatten() {
        if is_temp(
            entry.file_name().as_encoded_bytes(),
            prefix.as_encoded_bytes(),
        ) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Whether `name` is exactly `<prefix><pid>.<n>.tmp`: a looser match could catch the temp
/// file of a sibling store whose name merely starts the same (`plan.jsonl.old`).
fn is_temp(name: &[u8], prefix: &[u8]) -> bool {
    let Some(middle) = name
        .strip_prefix(prefix)
        .and_then(|rest| rest.strip_suffix(b".tmp"))
    else {
        return false;
    };
    let mut numbers = middle.split(|&b| b == b'.');
    let is_number = |part: Option<&[u8]>| {
        part.is_some_and(|p| !p.is_empty() && p.iter().all(u8::is_ascii_digit))
    };
    is_number(numbers.next()) && is_number(numbers.next()) && numbers.next().is_none()
}

fn write_new(temp: &Path, bytes: &[u8], original: &Path) -> io::Result<()> {
    let mut file = OpenOptions::new().write(true).create_new(true).open(temp)?;
    if let Ok(meta) = fs::metadata(original) {
        file.set_permissions(meta.permissions())?;
    }
    file.write_all(bytes)?;
    file.sync_all()
}

/// `.<name>.` — hidden, and distinct per target file.
fn temp_prefix(path: &Path) -> OsString {
    let mut prefix = OsString::from(".");
    prefix.push(path.file_name().unwrap_or_default());
    prefix.push(".");
    prefix
}

/// A pathspec (git's wildcard) of every temp file a [`replace`] of `path` makes, beside it:
/// what to leave out when looking for files someone else wrote while ralph writes `path`.
pub fn temp_pattern(path: &Path) -> PathBuf {
    let mut name = temp_prefix(path);
    name.push("*.tmp");
    dir_of(path).join(name)
}

/// `.<name>.<pid>.<n>.tmp`, unique across processes (pid) and calls (counter).
fn temp_path(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut name = temp_prefix(path);
    name.push(format!("{}.{n}.tmp", std::process::id()));
    dir_of(path).join(name)
}

/// Writes `bytes` to a new file beside `path`, named `<path>.<label>-<UTC time>` (with `-<n>`
/// added when one of that name exists), durably; returns its path. For keeping what ralph
/// is about to remove or replace, so nothing a person or an agent wrote is lost.
///
/// # Errors
///
/// The file it tried to write, and why.
pub fn keep_copy(
    path: &Path,
    label: &str,
    bytes: &[u8],
) -> Result<std::path::PathBuf, (std::path::PathBuf, io::Error)> {
    use std::io::Write as _;
    let stamp = crate::time::file_stamp();
    let mut n = 0;
    loop {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".{label}-{stamp}"));
        if n > 0 {
            name.push(format!("-{n}"));
        }
        let copy = std::path::PathBuf::from(name);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&copy)
        {
            Ok(mut file) => {
                let written = file
                    .write_all(bytes)
                    .and_then(|()| file.sync_all())
                    .and_then(|()| sync_dir(&dir_of(path)));
                return written.map(|()| copy.clone()).map_err(|e| (copy, e));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => n += 1,
            Err(e) => return Err((copy, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_swaps_contents_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plan.jsonl");
        fs::write(&path, "old\n").unwrap();
        replace(&path, b"new\n").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new\n");
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "temp file left behind");
    }

    #[test]
    fn temp_names_are_unique_and_cleaned_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plan.jsonl");
        let (a, b) = (temp_path(&path), temp_path(&path));
        assert_ne!(a, b);
        fs::write(&a, "x").unwrap();
        remove_stale_temps(&path);
        assert!(!a.exists());
    }

    #[test]
    fn only_exact_temp_names_count() {
        let prefix = b".plan.jsonl.";
        assert!(is_temp(b".plan.jsonl.41.0.tmp", prefix));
        assert!(
            !is_temp(b".plan.jsonl.old.41.0.tmp", prefix),
            "a sibling store's"
        );
        assert!(!is_temp(b".other.jsonl.41.0.tmp", prefix));
        assert!(!is_temp(b".plan.jsonl.41.tmp", prefix));
        assert!(!is_temp(b".plan.jsonl.41.0.1.tmp", prefix));
        assert!(!is_temp(b".plan.jsonl..0.tmp", prefix));
    }

    #[test]
    fn bare_file_name_lives_in_current_dir() {
        assert_eq!(dir_of(Path::new("plan.jsonl")), PathBuf::from("."));
        assert_eq!(dir_of(Path::new("a/plan.jsonl")), PathBuf::from("a"));
    }
}
