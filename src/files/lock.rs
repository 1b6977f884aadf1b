//! An exclusive OS file lock with a note saying who holds it.
//!
//! The lock is `flock`-style (`File::try_lock`): it dies with its process, so a lock file
//! left behind by a killed process never blocks the next one. The holder writes
//! `pid N, since T` into the file, which a refused process quotes in its error.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read, Write};
use std::path::PathBuf;

/// The lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LockError {
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
pub(crate) struct LockFile {
    file: File,
}

impl LockFile {
    /// Takes the exclusive lock on `path` (creating the file, not its directory) and records
    /// the holder in it.
    pub(crate) fn take(path: impl Into<PathBuf>) -> Result<LockFile, LockError> {
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
        stamp(&mut file).map_err(io)?;
        Ok(LockFile { file })
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        // Unlock explicitly: closing is not enough while a child forked by another thread
        // (a git or gate process not yet exec'd) still shares the open file.
        let _ = self.file.unlock();
    }
}

/// Writes who holds the lock into the lock file, for the error another process will show.
fn stamp(file: &mut File) -> io::Result<()> {
    file.set_len(0)?;
    let note = format!(
        "pid {}, since {}\n",
        std::process::id(),
        jiff::Timestamp::now()
    );
    file.write_all(note.as_bytes())
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
}
