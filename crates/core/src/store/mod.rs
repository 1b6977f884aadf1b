//! The `Store` seam: load the [`Board`] and persist [`Change`]s to it.
//!
//! The engine persists every transition before the next agent or gate runs, so a store must
//! make each [`persist`](Store::persist) durable before it returns.

mod chain;
mod jsonl;
mod memory;
mod progress;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;

use crate::model::{Board, Change};

pub use jsonl::JsonlStore;
pub use memory::MemoryStore;
pub use progress::ProgressStore;

/// A store could not load or save.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// An I/O error on a state file.
    #[error("i/o error on {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A state file holds something that is not a valid record.
    #[error("{path}:{line}: {message}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A state file holds something invalid at a known line and column
    /// (`implementation.json`: a syntax error, a repeated or empty id).
    #[error("{path}:{line}:{column}: {message}")]
    MalformedAt {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// 1-based column, in characters.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// Another orchestrator holds the state's lock.
    #[error(
        "{path} is locked by another ralph process{holder}; stop it first, or use another workspace",
        holder = .holder.as_ref().map(|h| format!(" ({h})")).unwrap_or_default()
    )]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// What the lock file says about its holder, if anything.
        holder: Option<String>,
    },
    /// The state file was deleted, replaced or changed by someone else while a run used
    /// it. Nothing is written over it: the run stops rather than report work whose state
    /// is gone.
    #[error(
        "{path} {how} while ralph was using it; stopped without writing, so that no work is reported done without its state (restore the file, or remove it to start over)"
    )]
    Changed {
        /// The state file.
        path: PathBuf,
        /// What happened to it: `was deleted`, `was replaced`, `was truncated (…)`, `grew (…)`.
        how: String,
    },
    /// A line of a state file that ralph did not write: appended, or edited in place, by
    /// someone else (its chain field `h` is missing or does not match; see
    /// [`JsonlStore`]'s format). Nothing of the file is trusted past it until a person
    /// decides: [`Store::repair`] (`ralph repair`) rolls back to the last line ralph wrote,
    /// keeping a copy of what it removes; with `adopt` (`ralph repair --adopt`) it accepts
    /// the lines as the person's own.
    #[error(
        "{path}:{line}: not written by ralph: {how}. `ralph repair` rolls the file back to the last record ralph wrote (keeping a copy of what it removes); `ralph repair --adopt` accepts the lines as your own"
    )]
    NotWritten {
        /// The state file.
        path: PathBuf,
        /// 1-based number of the first line that does not verify.
        line: usize,
        /// Why it does not.
        how: String,
    },
    /// A state file meant for people (`implementation.json`) changed while a run used it —
    /// an agent's edit, most likely: ralph put back its own version, so the next run goes
    /// on from what ralph recorded, and kept the changed one.
    #[error(
        "{path} {how} while ralph was using it (an agent's edit?); ralph put back its own version, so the next run goes on from what ralph recorded{}. If the change was yours, make it again between runs",
        .copy.as_ref().map(|c| format!(", and kept the changed one as {}", c.display())).unwrap_or_default()
    )]
    Restored {
        /// The state file.
        path: PathBuf,
        /// What happened to it: `was modified`, `was replaced`, `was deleted`…
        how: String,
        /// Where the changed file is kept (`None` when it was deleted).
        copy: Option<PathBuf>,
    },
    /// A record could not be written as JSON (a path that is not UTF-8, say); nothing was
    /// written.
    #[error("cannot write a record of {} as JSON", .path.display())]
    Encode {
        /// The state file.
        path: PathBuf,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// The store's work was cancelled before it finished: the async runtime shut down
    /// under it.
    #[error("the store's work on {} was cancelled before it finished (the runtime shut down)", .path.display())]
    Cancelled {
        /// The state file.
        path: PathBuf,
    },
    /// The backend of a store of your own failed (a database, a service): the store that
    /// failed and the backend's own error. ralph's stores never return it.
    ///
    /// ```
    /// use ralph::store::StoreError;
    ///
    /// let refused = std::io::Error::other("connection refused");
    /// let e = StoreError::backend("postgres://db/ralph", refused);
    /// assert_eq!(e.to_string(), "the store postgres://db/ralph failed");
    /// ```
    #[error("the store {store} failed")]
    Backend {
        /// The store, as a person finds it (a URL, a table, a file).
        store: String,
        /// The backend's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl StoreError {
    /// [`StoreError::Backend`]: `store` (where it is, as a person finds it) failed with
    /// `source`.
    pub fn backend(
        store: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        StoreError::Backend {
            store: store.into(),
            source: source.into(),
        }
    }
}

/// What [`Store::repair`] did to a state file whose lines ralph did not all write.
///
/// Its `Display` is the report `ralph repair` prints.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Repair {
    /// The file was cut at the first line that does not verify; the lines removed are kept
    /// in `copy`, beside it.
    RolledBack {
        /// The state file.
        path: PathBuf,
        /// 1-based number of the first line removed (the start of the batch the first bad
        /// line is in, if any: a batch is kept whole or not at all).
        from_line: usize,
        /// How many lines were removed.
        lines: usize,
        /// Where they are kept.
        copy: PathBuf,
        /// Why the first of them did not verify.
        reason: String,
    },
    /// The lines from the first that does not verify on were signed as ralph's own: a
    /// person said they are theirs.
    Adopted {
        /// The state file.
        path: PathBuf,
        /// 1-based number of the first line signed anew.
        from_line: usize,
        /// How many lines were signed anew.
        lines: usize,
    },
    /// A whole-file record (a thread's `thread.json`, a `run.json`) that was not what ralph
    /// wrote was replaced by the last version ralph wrote; the changed one is kept in
    /// `copy`.
    Restored {
        /// The file.
        path: PathBuf,
        /// Where the changed one is kept.
        copy: PathBuf,
        /// What was wrong with it.
        reason: String,
    },
    /// A whole-file record that was not what ralph wrote was sealed as it is: a person said
    /// it is theirs.
    Resealed {
        /// The file.
        path: PathBuf,
    },
}

impl fmt::Display for Repair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = |n: &usize| if *n == 1 { "line" } else { "lines" };
        match self {
            Repair::RolledBack {
                path,
                from_line,
                lines,
                copy,
                reason,
            } => write!(
                f,
                "rolled {} back to the last record ralph wrote: removed {lines} {} from line \
                 {from_line} on ({reason}); they are kept in {}",
                path.display(),
                plural(lines),
                copy.display()
            ),
            Repair::Adopted {
                path,
                from_line,
                lines,
            } => write!(
                f,
                "adopted {lines} {} of {} from line {from_line} on as your own: ralph trusts \
                 them from now on",
                plural(lines),
                path.display()
            ),
            Repair::Restored { path, copy, reason } => write!(
                f,
                "put back the last version ralph wrote of {} ({reason}); the changed one is \
                 kept in {}",
                path.display(),
                copy.display()
            ),
            Repair::Resealed { path } => write!(
                f,
                "adopted {} as your own: ralph trusts it from now on",
                path.display()
            ),
        }
    }
}

impl From<crate::files::LockError> for StoreError {
    fn from(e: crate::files::LockError) -> Self {
        match e {
            crate::files::LockError::Held { path, holder } => StoreError::Locked { path, holder },
            crate::files::LockError::Io { path, source } => StoreError::Io { path, source },
        }
    }
}

/// Runs `f` on `shared`, the store's file I/O and fsync, where that costs least.
///
/// On a current-thread runtime (the `ralph` command's) it runs right here. The task that
/// persists waits for the result before it goes on, so a handoff to the blocking pool
/// would buy nothing but two wake-ups across cores per call: in
/// `benches/command_overhead.rs` that was 0.06–0.1 ms per agent run, more than the append
/// itself. Other tasks on the runtime (concurrent verifiers, a display) wait out the sync
/// meanwhile: an append's `fdatasync`, a fraction of a millisecond on an SSD. On a
/// multi-thread runtime, where a blocked worker would hold up the tasks queued on it, `f`
/// runs on the blocking pool. Either way a panic in `f` reaches the caller.
pub async fn file_io<S, T, F>(
    path: &std::path::Path,
    shared: &Arc<S>,
    f: F,
) -> Result<T, StoreError>
where
    S: Send + Sync + 'static,
    T: Send + 'static,
    F: FnOnce(&S) -> Result<T, StoreError> + Send + 'static,
{
    use tokio::runtime::{Handle, RuntimeFlavor};
    let on_this_thread = Handle::try_current().map_or(true, |handle| {
        handle.runtime_flavor() == RuntimeFlavor::CurrentThread
    });
    if on_this_thread {
        return f(shared);
    }
    let shared = Arc::clone(shared);
    match tokio::task::spawn_blocking(move || f(&shared)).await {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(StoreError::Cancelled {
            path: path.to_path_buf(),
        }),
    }
}

/// Loads and persists the work state. Usable as `dyn Store`.
///
/// # Implementing
///
/// Put `#[ralph::async_trait]` on the impl. [`persist`](Store::persist) gets the changes of
/// one transition in order and returns once they are durable; [`load`](Store::load) rebuilds
/// the board, for instance by replaying them with [`Board::apply`]. Blocking I/O belongs on
/// `tokio::task::spawn_blocking`.
///
/// ```
/// use std::sync::{Mutex, PoisonError};
///
/// use ralph::async_trait;
/// use ralph::model::{Board, Change, Task};
/// use ralph::store::{Store, StoreError};
///
/// /// Keeps every change, in memory: an audit log a test can read.
/// #[derive(Default)]
/// struct Journal(Mutex<Vec<Change>>);
///
/// #[async_trait]
/// impl Store for Journal {
///     async fn load(&self) -> Result<Board, StoreError> {
///         let changes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
///         let mut board = Board::default();
///         board.apply_all(changes.iter().cloned());
///         Ok(board)
///     }
///
///     async fn persist(&self, changes: &[Change]) -> Result<(), StoreError> {
///         let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
///         kept.extend_from_slice(changes);
///         Ok(())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), StoreError> {
/// let journal = Journal::default();
/// journal.persist(&[Change::Task(Task::new("t-1", "Write hello.txt"))]).await?;
/// assert_eq!(journal.load().await?.tasks().len(), 1);
/// # Ok(())
/// # }
/// ```
///
/// # An attempt in flight
///
/// A task's attempt that has started is no change: the task is persisted when the attempt
/// ends (done, retried, blocked, killed), so a board loaded meanwhile shows it as it was
/// before the attempt, its `attempts` not yet counted (and one cut short by a stop or a
/// crash is never counted). [`Ralph::tasks_in_flight`](https://docs.rs/ralph-loop/latest/ralph/struct.Ralph.html#method.tasks_in_flight) and
/// the [`TaskStarted`](crate::Event::TaskStarted) event say what runs now.
#[diagnostic::on_unimplemented(
    note = "implement `ralph::Store`, or use `ralph::JsonlStore` / `ralph::MemoryStore`"
)]
#[async_trait]
pub trait Store: Send + Sync {
    /// Loads the whole board.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the state cannot be read or is malformed (naming file and line).
    async fn load(&self) -> Result<Board, StoreError>;

    /// Durably records `changes`, in order, before returning.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the changes could not be made durable; nothing may then be assumed
    /// saved.
    async fn persist(&self, changes: &[Change]) -> Result<(), StoreError>;

    /// Whether people may edit the store's file while a run goes on. The engine then
    /// reloads the board at the start of every stage (so at least every iteration), so a
    /// task added or ticked by hand between iterations is honored. Default false: the
    /// engine trusts its in-memory board.
    fn edited_externally(&self) -> bool {
        false
    }

    /// What the last load had to repair, if anything (a torn final line left by a crash
    /// was dropped): a note the runtime reports as an
    /// [`Event::StateRepaired`](crate::event::Event::StateRepaired). Default `None`.
    fn recovered(&self) -> Option<String> {
        None
    }

    /// Where the board is kept, for reports such as the dry run (a file's path, `memory`).
    /// Default `None`: the store does not say.
    fn location(&self) -> Option<String> {
        None
    }

    /// Repairs a state file that holds lines ralph did not write (the
    /// [`StoreError::NotWritten`] of a load): rolls it back to the last line ralph wrote,
    /// keeping what it removes in a copy beside it, or, with `adopt`, accepts the lines as a
    /// person's own. `Ok(None)` when there is nothing to repair. The caller holds the
    /// workspace's lock ([`Ralph::repair`](https://docs.rs/ralph-loop/latest/ralph/struct.Ralph.html#method.repair) does).
    ///
    /// Default: nothing to repair (a store that cannot tell whose its records are).
    ///
    /// ```
    /// use ralph::{JsonlStore, Store, model::{Change, Task}, store::Repair};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let dir = tempfile::tempdir()?;
    /// let plan = dir.path().join("plan.jsonl");
    /// JsonlStore::open(&plan)?.persist(&[Change::Task(Task::new("t-1", "Write hello.txt"))]).await?;
    /// // A person adds a task by hand, in the seed's format.
    /// let line = r#"{"t":"task","id":"t-9","name":"Write the docs","s":"p"}"#;
    /// std::fs::write(&plan, std::fs::read_to_string(&plan)? + line + "\n")?;
    /// assert!(JsonlStore::open(&plan)?.load().await.is_err(), "ralph did not write it");
    ///
    /// let store = JsonlStore::open(&plan)?;
    /// let repair = store.repair(true).await?;
    /// assert!(matches!(repair, Some(Repair::Adopted { from_line: 2, lines: 1, .. })));
    /// assert_eq!(store.load().await?.tasks().len(), 2, "the person's task is kept");
    /// assert_eq!(ralph::MemoryStore::new().repair(false).await?, None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the file cannot be read or written, or (adopting) a line is not
    /// a plan record.
    async fn repair(&self, adopt: bool) -> Result<Option<Repair>, StoreError> {
        let _ = adopt;
        Ok(None)
    }
}

#[async_trait]
impl<T: Store + ?Sized> Store for Box<T> {
    async fn load(&self) -> Result<Board, StoreError> {
        (**self).load().await
    }

    async fn persist(&self, changes: &[Change]) -> Result<(), StoreError> {
        (**self).persist(changes).await
    }

    fn edited_externally(&self) -> bool {
        (**self).edited_externally()
    }

    fn recovered(&self) -> Option<String> {
        (**self).recovered()
    }

    fn location(&self) -> Option<String> {
        (**self).location()
    }

    async fn repair(&self, adopt: bool) -> Result<Option<Repair>, StoreError> {
        (**self).repair(adopt).await
    }
}

#[async_trait]
impl<T: Store + ?Sized> Store for Arc<T> {
    async fn load(&self) -> Result<Board, StoreError> {
        (**self).load().await
    }

    async fn persist(&self, changes: &[Change]) -> Result<(), StoreError> {
        (**self).persist(changes).await
    }

    fn edited_externally(&self) -> bool {
        (**self).edited_externally()
    }

    fn recovered(&self) -> Option<String> {
        (**self).recovered()
    }

    fn location(&self) -> Option<String> {
        (**self).location()
    }

    async fn repair(&self, adopt: bool) -> Result<Option<Repair>, StoreError> {
        (**self).repair(adopt).await
    }
}

/// Breaks the build if `Store` stops being usable as `dyn`.
#[allow(dead_code)]
fn _assert_store_object_safe(_: &dyn Store, _: Box<dyn Store>, _: Arc<dyn Store>) {}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::thread::{self, ThreadId};

    use super::file_io;

    fn thread_of_f(runtime: &tokio::runtime::Runtime) -> (ThreadId, ThreadId) {
        runtime.block_on(async {
            let caller = thread::current().id();
            let ran_on = file_io(std::path::Path::new("x"), &Arc::new(()), |()| {
                Ok(thread::current().id())
            })
            .await
            .unwrap();
            (caller, ran_on)
        })
    }

    #[test]
    fn the_store_writes_on_the_calling_thread_of_a_current_thread_runtime_only() {
        let current = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (caller, ran_on) = thread_of_f(&current);
        assert_eq!(caller, ran_on, "no handoff where the caller waits anyway");
        let multi = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let (caller, ran_on) = thread_of_f(&multi);
        assert_ne!(caller, ran_on, "a worker is not blocked by a sync");
    }
}
