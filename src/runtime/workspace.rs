//! The workspace as every mode uses it: ralph's state folder, the one lock per workspace,
//! and the sweep of what a killed run left running.
//!
//! Every run of every mode (the construct loop, plan mode, build mode, a thread's
//! preflight and loop) holds `.ralph/ralph.lock` while it runs, so two ralphs never work on
//! one workspace at once. Holding it, nothing of an earlier run on the workspace can still
//! be wanted: the processes its agents and gates started carry the workspace's owner tag
//! ([`process::owner_of`](crate::process::owner_of)), and any still alive (because that run
//! was SIGKILLed and could not clean up) are killed before the new run starts, and the task
//! work trees it left are removed ([`worktrees`](super::worktrees)).

use std::path::{Path, PathBuf};

use crate::files::{LockError, LockFile};

/// The folder of ralph's own state, inside the workspace.
pub const STATE_DIR: &str = crate::files::own::STATE_DIR_NAME;

/// The lock file, inside [`STATE_DIR`].
const LOCK_FILE: &str = "ralph.lock";

/// `.ralph/` of `workspace`.
pub(crate) fn state_dir(workspace: &Path) -> PathBuf {
    workspace.join(STATE_DIR)
}

/// The workspace's lock, held for a run; dropping it releases the lock.
#[derive(Debug)]
pub(crate) struct RunLock {
    _file: LockFile,
    /// Processes of an earlier, killed run found alive and killed when the lock was taken.
    pub(crate) swept: usize,
    /// What became of the task work trees an earlier, killed run left (`build_concurrency`).
    worktrees: Option<String>,
}

impl RunLock {
    /// Takes the workspace's lock (creating `.ralph/`), then kills what an earlier, killed run
    /// on the workspace left running.
    ///
    /// # Errors
    ///
    /// [`LockError::Held`] while another run holds it (its note names the process);
    /// [`LockError::Io`] when `.ralph/` or the lock file cannot be created.
    pub(crate) async fn take(workspace: &Path) -> Result<RunLock, LockError> {
        let dir = state_dir(workspace);
        crate::files::own::create_dir_all(&dir).map_err(|source| LockError::Io {
            path: dir.clone(),
            source,
        })?;
        let file = LockFile::take(dir.join(LOCK_FILE))?;
        let owner = crate::process::owner_of(workspace);
        let swept = tokio::task::spawn_blocking(move || crate::process::sweep_owner(&owner))
            .await
            .unwrap_or(0);
        // After the sweep: nothing runs in them any more.
        let worktrees = match super::worktrees::remove_leftovers(workspace).await {
            Ok(tasks) if tasks.is_empty() => None,
            Ok(tasks) => Some(format!(
                "removed the work trees an earlier, killed run left for {} (they are built again)",
                tasks.join(", ")
            )),
            // The run can go on: a work tree left over only costs disk, and it is tried again.
            Err(e) => Some(format!(
                "could not remove the work trees an earlier, killed run left: {e}"
            )),
        };
        Ok(RunLock {
            _file: file,
            swept,
            worktrees,
        })
    }

    /// The warning to show when the lock's sweep killed anything, or an earlier run's work
    /// trees were removed.
    pub(crate) fn swept_warning(&self) -> Option<String> {
        let killed = (self.swept > 0).then(|| {
            format!(
                "killed {} process(es) left running by an earlier, killed run of this workspace",
                self.swept
            )
        });
        let said: Vec<String> = killed.into_iter().chain(self.worktrees.clone()).collect();
        (!said.is_empty()).then(|| said.join("; "))
    }
}
