//! What a writer of whole files (replaced atomically) last read or wrote of each: build
//! mode's `implementation.json`, a thread's `thread.json`.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::seen::{Seen, change};

/// What a writer of whole files (replaced atomically) last read or wrote of each: a file
/// it has not read is not checked, one it has must still be as it was.
#[derive(Debug, Default)]
pub struct Watch(Mutex<HashMap<PathBuf, Option<Seen>>>);

impl Watch {
    /// Remembers `path` as it is now (after reading or writing it).
    pub fn saw(&self, path: &Path) -> io::Result<()> {
        let now = Seen::at(path)?;
        self.files().insert(path.to_path_buf(), now);
        Ok(())
    }

    /// What happened to `path` since it was last seen, if it was and anything did.
    pub fn change(&self, path: &Path) -> io::Result<Option<String>> {
        let Some(before) = self.files().get(path).copied() else {
            return Ok(None);
        };
        Ok(change(before, Seen::at(path)?))
    }

    fn files(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Option<Seen>>> {
        // Only ever updated whole per entry: a panic cannot leave one half-written.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
