//! `JsonlStore`: seed 000's `plan.jsonl`. Placeholder.

use std::path::{Path, PathBuf};

use async_trait::async_trait;

use super::{Store, StoreError};
use crate::model::{Board, Change};

/// The board as `plan.jsonl` lines.
#[derive(Debug)]
pub struct JsonlStore {
    path: PathBuf,
}

impl JsonlStore {
    /// Opens (creating if needed) the store at `path`.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the file cannot be opened or is locked.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Ok(JsonlStore {
            path: path.as_ref().to_path_buf(),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[async_trait]
impl Store for JsonlStore {
    async fn load(&self) -> Result<Board, StoreError> {
        Ok(Board::new())
    }

    async fn persist(&self, _changes: &[Change]) -> Result<(), StoreError> {
        Ok(())
    }
}
