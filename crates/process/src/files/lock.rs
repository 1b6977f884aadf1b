//! An exclusive OS file lock with a note saying who holds it, and a lock on a folder
//! itself.
//!
//! The lock is `flock`-style (`File::try_lock`): it dies with its process, so a lock file
//! left behind by a killed process never blocks the next one. The holder writes
//! `pid N, since T` into the file, which a refused process quotes in its error.
//!
//! A lock file can be deleted or replaced while it is held (a person, an agent run
//! unconfined): the next taker then locks a new file and gets in. A [`FolderLock`] is taken
//! on the open folder itself, which no file operation inside it can remove: the lock file
//! says who holds the workspace, the folder lock is what holds it.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// The lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process (or another handle in this one) holds it.
    #[error(
        "{path} is locked by another ralph process{holder}",
        holder = .holder.as_ref().map(|h| format!(" ({h})")).unwrap_or_default()
    )]
    Held {
        /// The lock file.
        path: PathBuf,
        /// What the lock file says about its holder, if anything.
        holder: Option<String>,
    },
    /// The lock file could not be created or locked.
    #[error("i/o error on {path}")]
    Io {
        /// The lock file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// A held lock; dropping it releases the lock.
#[derive(Debug)]
pub struct LockFile {
    file: File,
    path: PathBuf,
    /// What it says about its holder: `pid N, since T`.
    note: String,
}

/// A held lock on a folder; dropping it releases the lock.
#[derive(Debug)]
pub struct FolderLock {
    folder: File,
}

impl FolderLock {
    /// Takes the exclusive lock on the folder `dir`; `None` while another holds it.
    pub fn take(dir: &Path) -> io::Result<Option<FolderLock>> {
        let folder = File::open(dir)?;
        match folder.try_lock() {
            Ok(()) => Ok(Some(FolderLock { folder })),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => Err(e),
        }
    }
}

impl FolderLock {
    /// Takes the exclusive lock on the folder `dir`, waiting while another holds it: for
    /// holders that keep it a moment (a `ralph tell` choosing its id).
    pub fn wait(dir: &Path) -> io::Result<FolderLock> {
        let folder = File::open(dir)?;
        folder.lock()?;
        Ok(FolderLock { folder })
    }
}

impl Drop for FolderLock {
    fn drop(&mut self) {
        let _ = self.folder.unlock();
    }
}

impl LockFile {
    /// Takes the exclusive lock on `path` (creating the file, not its directory) and records
    /// the holder in it.
    pub fn take(path: impl Into<PathBuf>) -> Result<LockFile, LockError> {
        let path = path.into();
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        // No truncate: the holder's note must survive for whoever finds the lock taken.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let holder = holder(&mut file);
                return Err(LockError::Held { path, holder });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        let note = stamp(&mut file).map_err(io)?;
        Ok(LockFile { file, path, note })
    }

    /// Whether the file at the lock's path is still the one this lock holds (not deleted
    /// or replaced since).
    pub fn in_place(&self) -> bool {
        use std::os::unix::fs::MetadataExt as _;
        match (self.file.metadata(), std::fs::metadata(&self.path)) {
            (Ok(held), Ok(there)) => held.dev() == there.dev() && held.ino() == there.ino(),
            _ => false,
        }
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What it says about its holder (`pid N, since T`): which run holds it, for a message
    /// meant for that run alone.
    pub fn note(&self) -> &str {
        &self.note
    }
}

/// What the lock file at `path` says about its holder, if it is there and says anything.
pub fn holder_of(path: &Path) -> Option<String> {
    holder(&mut File::open(path).ok()?)
}

impl Drop for LockFile {
    fn drop(&mut self) {
        // Unlock explicitly: closing is not enough while a child forked by another thread
        // (a git or gate process not yet exec'd) still shares the open file.
        let _ = self.file.unlock();
    }
}

/// Writes who holds the lock into the lock file, for the error another process will show;
/// returns the note, without its newline.
fn stamp(file: &mut File) -> io::Result<String> {
    file.set_len(0)?;
    let note = format!(
        "pid {}, since {}",
        std::process::id(),
        jiff::Timestamp::now()
    );
    file.write_all(format!("{note}\n").as_bytes())?;
    Ok(note)
}

/// The lock holder's note, if it wrote one.
fn holder(file: &mut File) -> Option<String> {
    let mut note = String::new();
    file.read_to_string(&mut note).ok()?;
    let note = note.trim();
    (!note.is_empty()).then(|| note.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_taker_is_refused_with_the_holders_note_until_the_first_drops() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let first = LockFile::take(&path).unwrap();
        let err = LockFile::take(&path).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("x.lock") && text.contains("pid "), "{text}");
        drop(first);
        LockFile::take(&path).unwrap();
    }

    #[test]
    fn a_folder_lock_holds_whatever_happens_to_the_files_inside() {
        let dir = tempfile::tempdir().unwrap();
        let first = FolderLock::take(dir.path()).unwrap().expect("free");
        let held = LockFile::take(dir.path().join("x.lock")).unwrap();
        std::fs::remove_file(dir.path().join("x.lock")).unwrap();
        assert!(!held.in_place(), "deleted");
        assert!(
            FolderLock::take(dir.path()).unwrap().is_none(),
            "still held"
        );
        drop(first);
        assert!(FolderLock::take(dir.path()).unwrap().is_some());
    }
}
