//! The note that a completed spec's commit is due: written before the spec is marked
//! completed, removed once its commit is made. The commit holds the spec's completion
//! (`implementation.json`, `PROGRESS.md`), so the completion is written first; a run stopped
//! between the two finds the note at its start and makes the commit then.

use std::path::PathBuf;

use crate::files::atomic;
use crate::runtime::error::Error;

/// The note's file name in ralph's state folder.
const NOTE: &str = "spec-commit-due";

/// `.ralph/spec-commit-due`: the id of the spec whose commit is due.
#[derive(Debug)]
pub(super) struct DueCommit {
    path: PathBuf,
}

impl DueCommit {
    pub(super) fn in_state_dir(dir: PathBuf) -> Self {
        DueCommit {
            path: dir.join(NOTE),
        }
    }

    /// Notes that `spec`'s commit is due.
    pub(super) fn write(&self, spec: &str) -> Result<(), Error> {
        crate::files::own::create_dir_all(&atomic::dir_of(&self.path))
            .and_then(|()| atomic::replace(&self.path, spec.as_bytes()))
            .map_err(|source| self.io(source))
    }

    /// The spec whose commit is due, if any.
    pub(super) fn read(&self) -> Result<Option<String>, Error> {
        match std::fs::read_to_string(&self.path) {
            Ok(spec) if !spec.trim().is_empty() => Ok(Some(spec.trim().to_owned())),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(self.io(source)),
        }
    }

    /// The commit is made.
    pub(super) fn clear(&self) -> Result<(), Error> {
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(self.io(e)),
            _ => Ok(()),
        }
    }

    fn io(&self, source: std::io::Error) -> Error {
        Error::Io {
            path: self.path.clone(),
            source,
        }
    }
}
