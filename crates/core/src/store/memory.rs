//! An in-memory store, for tests and for embedding ralph where persistence is the caller's job.

use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use super::{Store, StoreError};
use crate::model::{Board, Change};

/// Keeps the board in memory. Clones share the same board, so a test can keep a handle and
/// inspect what the engine persisted.
///
/// ```
/// # tokio_test_block_on(async {
/// use ralph::{Store, MemoryStore, model::{Change, Task}};
///
/// let store = MemoryStore::new();
/// store.persist(&[Change::Task(Task::new("t-1", "write docs"))]).await?;
/// assert_eq!(store.load().await?.tasks().len(), 1);
/// assert_eq!(store.persisted().len(), 1);
/// # Ok::<(), ralph::store::StoreError>(())
/// # }).unwrap();
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    board: Board,
    log: Vec<Change>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// A store that starts with `board`.
    pub fn with_board(board: Board) -> Self {
        let store = Self::default();
        store.lock().board = board;
        store
    }

    /// Every change persisted so far, in order.
    pub fn persisted(&self) -> Vec<Change> {
        self.lock().log.clone()
    }

    /// The current board.
    pub fn board(&self) -> Board {
        self.lock().board.clone()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave `Inner` half-updated (each update is
        // a single push/apply), so a poisoned lock is still consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn load(&self) -> Result<Board, StoreError> {
        Ok(self.lock().board.clone())
    }

    async fn persist(&self, changes: &[Change]) -> Result<(), StoreError> {
        let mut inner = self.lock();
        inner.log.extend_from_slice(changes);
        inner.board.apply_all(changes.iter().cloned());
        Ok(())
    }

    fn location(&self) -> Option<String> {
        Some("memory".into())
    }
}
