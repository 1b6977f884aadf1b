//! Append-only state files (journals: the store's `plan.jsonl`, the spend ledger, build
//! mode's history, a thread's conversation), opened here alone: a new journal's folder
//! entry is synced with it, so a crash cannot lose a file that was written to, and each
//! append is one write of whole lines. Logs are not journals (a log is cut and rotated).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use super::atomic::{dir_of, sync_dir};

/// Opens `path` for appending, creating it (durably) if missing; its folder must exist.
/// Whoever writes through it syncs what it wrote.
#[allow(clippy::disallowed_methods)] // the one place a journal is opened for appending
pub fn open(path: &Path) -> io::Result<File> {
    open_with(path, OpenOptions::new().append(true))
}

/// As [`open`], and readable: for a journal that verifies what is already in it.
#[allow(clippy::disallowed_methods)] // the one place a journal is opened for appending
pub fn open_readable(path: &Path) -> io::Result<File> {
    open_with(path, OpenOptions::new().read(true).append(true))
}

/// Appends `bytes` in one write and syncs the file, creating it and its folders if missing.
pub fn append(path: &Path, bytes: &[u8]) -> io::Result<()> {
    std::fs::create_dir_all(dir_of(path))?;
    let mut file = open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Cuts a journal opened by [`open`] back to its first `len` bytes (a torn last line, or
/// lines a repair rolls back): the next append then starts a line of its own. The caller
/// syncs, with the append that follows or at once.
pub fn cut(file: &File, len: u64) -> io::Result<()> {
    file.set_len(len)
}

fn open_with(path: &Path, options: &OpenOptions) -> io::Result<File> {
    match options.clone().create_new(true).open(path) {
        Ok(file) => {
            // A new file's directory entry is not durable until its directory is synced.
            sync_dir(&dir_of(path))?;
            Ok(file)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => options.open(path),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_whole_writes_and_keeps_what_was_there() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/journal.jsonl");
        append(&path, b"one\n").unwrap();
        append(&path, b"two\n").unwrap();
        let mut file = open(&path).unwrap();
        file.write_all(b"three\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\ntwo\nthree\n");
        assert!(
            open(&dir.path().join("missing/x")).is_err(),
            "no folder is made by open"
        );
    }
}
