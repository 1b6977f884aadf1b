//! The workspace's thread lock: `.ralph/threads.lock`, an exclusive OS file lock (the one
//! [`JsonlStore`](crate::store::JsonlStore) takes on its state) held by the process that
//! checks "no other thread is running" and then runs a loop.
//!
//! Without it two `start`s racing in two processes could both see no thread Running and
//! both go on. The lock dies with its process, so a crashed runner never blocks the next.

use std::fs::File;

use super::phase::PhaseKind;
use super::{ThreadError, Threads};
use crate::store::StoreError;

/// Held while preflight checks and while a loop runs; dropping it releases the lock.
#[derive(Debug)]
pub(super) struct RunLock {
    file: File,
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // Unlock explicitly: closing is not enough while a child forked by another thread
        // (a git or gate process not yet exec'd) still shares the open file.
        let _ = self.file.unlock();
    }
}

impl Threads {
    /// Takes the lock, or says which thread holds it (and in which process).
    pub(super) fn lock_runs(&self) -> Result<RunLock, ThreadError> {
        std::fs::create_dir_all(&self.root).map_err(|error| ThreadError::Io {
            path: self.root.clone(),
            error,
        })?;
        match crate::store::jsonl::lock(&self.root.join("threads")) {
            Ok(file) => Ok(RunLock { file }),
            Err(StoreError::Locked { path, holder }) => Err(ThreadError::Busy {
                message: self.holder_message(&path, holder),
            }),
            Err(StoreError::Io { path, source }) => Err(ThreadError::Io {
                path,
                error: source,
            }),
            Err(other) => Err(ThreadError::Io {
                path: self.root.join("threads.lock"),
                error: std::io::Error::other(other.to_string()),
            }),
        }
    }

    /// "thread X is Running in process N", from the records; the lock file's note otherwise.
    fn holder_message(&self, path: &std::path::Path, holder: Option<String>) -> String {
        let running = self.list().unwrap_or_default().into_iter().find_map(|id| {
            let record = self.get(&id).ok()?;
            let phase = record.phase.kind();
            let pid = record.runner_pid?;
            matches!(phase, PhaseKind::Running | PhaseKind::Verifying)
                .then(|| format!("thread {id} is {phase} in process {pid}"))
        });
        let note = holder.map(|h| format!(" ({h})")).unwrap_or_default();
        match running {
            Some(running) => format!(
                "{running} (it holds {}{note}); pause or finish it first",
                path.display()
            ),
            None => format!(
                "another ralph process holds {}{note}; wait for it to finish",
                path.display()
            ),
        }
    }
}
