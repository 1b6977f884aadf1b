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

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use super::inbox::Inbox;
use crate::files::{FolderLock, LockError, LockFile};

/// The folder of ralph's own state, inside the workspace.
pub const STATE_DIR: &str = crate::files::own::STATE_DIR_NAME;

/// The lock file, inside [`STATE_DIR`].
const LOCK_FILE: &str = "ralph.lock";

/// `path` relative to `workspace` when inside it, else as it is: how events, logs and
/// `kill_log` name a file.
pub(crate) fn relative(workspace: &Path, path: &Path) -> PathBuf {
    path.strip_prefix(workspace)
        .map_or_else(|_| path.to_path_buf(), Path::to_path_buf)
}

/// The first of ralph's own paths in `workspace` (`own`, relative to it: the state folder,
/// the log folder, the store's file, build mode's files) that leads out of it through a
/// link, with where it leads: ralph's own writes inside the tree never follow a link out of
/// it (an agent of an unconfined run, or a person, may have put one there).
pub(crate) fn link_out(workspace: &Path, own: &[&Path]) -> Option<(PathBuf, PathBuf)> {
    own.iter().find_map(|rel| {
        let path = workspace.join(rel);
        // The deepest part that exists decides: what is made below it stays where it is.
        let existing = path.ancestors().find(|a| a.symlink_metadata().is_ok())?;
        let resolved = resolve(existing, 8)?;
        (!resolved.starts_with(workspace)).then(|| (path.clone(), resolved))
    })
}

/// Where `path`, which exists, leads: a dangling link leads where its target would be made
/// (the most dangerous link of all, as ralph would create the file through it), followed
/// at most `hops` times.
fn resolve(path: &Path, hops: u8) -> Option<PathBuf> {
    if let Ok(resolved) = path.canonicalize() {
        return Some(resolved);
    }
    let target = path.parent()?.join(std::fs::read_link(path).ok()?);
    let existing = target.ancestors().find(|a| a.symlink_metadata().is_ok())?;
    let rest = target.strip_prefix(existing).ok()?;
    Some(resolve(existing, hops.checked_sub(1)?)?.join(rest))
}

/// `.ralph/` of `workspace`.
pub(crate) fn state_dir(workspace: &Path) -> PathBuf {
    workspace.join(STATE_DIR)
}

/// The lock note of the run holding `workspace` (`pid N, since T`), or `None` when no run
/// holds it. `Err` when a run holds it but its note cannot be read.
pub(crate) fn running(workspace: &Path) -> io::Result<Option<String>> {
    if FolderLock::take(workspace)?.is_some() {
        return Ok(None);
    }
    let path = state_dir(workspace).join(LOCK_FILE);
    crate::files::lock::holder_of(&path)
        .map(Some)
        .ok_or_else(|| {
            io::Error::other(format!(
                "a run holds the workspace, but {} does not say which",
                path.display()
            ))
        })
}

/// Whether a person asked the run that holds `workspace`'s lock in this process to stop
/// (`ralph stop`), for a holder that keeps no [`RunLock`] at hand (a thread's loop). The
/// stop is taken from the inbox: ask once.
#[cfg_attr(not(feature = "threads"), allow(dead_code))] // a thread's loop
pub(crate) fn stop_asked(workspace: &Path) -> bool {
    let path = state_dir(workspace).join(LOCK_FILE);
    crate::files::lock::holder_of(&path)
        .is_some_and(|run| Inbox::in_state(&state_dir(workspace)).take_stop(&run))
}

/// The workspace's lock, held for a run; dropping it releases the lock.
#[derive(Debug)]
pub(crate) struct RunLock {
    /// What holds the workspace: a lock on the workspace folder itself.
    _folder: FolderLock,
    /// The note of who holds it, `.ralph/ralph.lock` (locked too, for older ralphs).
    file: LockFile,
    /// Processes of an earlier, killed run found alive and killed when the lock was taken.
    pub(crate) swept: usize,
    /// What became of the task work trees an earlier, killed run left (`build_concurrency`).
    worktrees: Option<String>,
    /// Where a person's messages to the run wait.
    inbox: Inbox,
    /// A `ralph stop` for this run was read: it ends at its next step.
    stop_asked: AtomicBool,
    /// The stop was announced (its event sent).
    stop_announced: AtomicBool,
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
        let path = dir.join(LOCK_FILE);
        let io = |source| LockError::Io {
            path: workspace.to_path_buf(),
            source,
        };
        let Some(folder) = FolderLock::take(workspace).map_err(io)? else {
            let holder = crate::files::lock::holder_of(&path);
            return Err(LockError::Held { path, holder });
        };
        let file = LockFile::take(path)?;
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
            _folder: folder,
            file,
            swept,
            worktrees,
            inbox: Inbox::in_state(&state_dir(workspace)),
            stop_asked: AtomicBool::new(false),
            stop_announced: AtomicBool::new(false),
        })
    }

    /// Whether a person asked this run to stop once what is in flight is done and recorded
    /// (`ralph stop`): read from the inbox between steps, and true from then on. A stop
    /// meant for an earlier run (which ended before it read it) is deleted unread.
    pub(crate) fn stop_asked(&self) -> bool {
        if self.stop_asked.load(Ordering::Relaxed) {
            return true;
        }
        if self.inbox.take_stop(self.file.note()) {
            self.stop_asked.store(true, Ordering::Relaxed);
        }
        self.stop_asked.load(Ordering::Relaxed)
    }

    /// Whether the stop was asked and not yet announced: true once, for its event.
    pub(crate) fn stop_news(&self) -> bool {
        self.stop_asked() && !self.stop_announced.swap(true, Ordering::Relaxed)
    }

    /// Puts the lock file back when it was deleted or replaced during the run (by a
    /// person, or an agent run unconfined), saying so: the folder lock kept the workspace
    /// held, so no other run got in, but the note of who holds it must be there.
    pub(crate) fn check(&mut self) -> Option<String> {
        if self.file.in_place() {
            return None;
        }
        let path = self.file.path().to_path_buf();
        let _ = std::fs::remove_file(&path);
        let said = match LockFile::take(path.clone()) {
            Ok(file) => {
                self.file = file;
                "put it back"
            }
            Err(_) => "could not put it back",
        };
        Some(format!(
            "{} was deleted or replaced during the run (not by ralph); ralph holds the \
             workspace through its folder too, so no other run got in, and {said}",
            path.display()
        ))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_or_log_folder_that_leads_out_through_a_link_is_found() {
        let outside = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let ws = ws.path().canonicalize().unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.join(".ralph")).unwrap();
        std::fs::create_dir(ws.join("build")).unwrap();
        let own = [Path::new(".ralph"), Path::new("build/ralph-logs")];
        let (path, to) = link_out(&ws, &own).unwrap();
        assert_eq!(path, ws.join(".ralph"));
        assert_eq!(to, outside.path().canonicalize().unwrap());
        std::fs::remove_file(ws.join(".ralph")).unwrap();
        assert_eq!(link_out(&ws, &own), None, "a missing folder is made inside");
        let dangling = outside.path().join("made/later");
        std::os::unix::fs::symlink(&dangling, ws.join(".ralph")).unwrap();
        let (_, to) = link_out(&ws, &own).unwrap();
        let outside = outside.path().canonicalize().unwrap();
        assert_eq!(
            to,
            outside.join("made/later"),
            "a dangling link leads out too"
        );
    }
}
