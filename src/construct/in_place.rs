//! BUILD one task at a time in the user's own work tree (the default, `build_concurrency =
//! 1`), in a git repository: each task that passes its gates is one commit on the user's
//! branch, `<task id>: <task name>`, holding what its attempts changed and nothing else.
//!
//! In place, the agent and the gates use the work tree as the user has it (ignored folders
//! such as `target/` or `node_modules/` included), which is why one task at a time is built
//! here rather than in a fresh git work tree. So that ralph never sweeps the user's own
//! edits into its commits:
//!
//! - a run refuses to start over uncommitted changes to tracked files
//!   ([`Error::Uncommitted`], saying how to go on), unless they are an interrupted turn's;
//! - a task's turn notes the untracked files already there (`.ralph/in-place.json`) and
//!   leaves them out of its commit;
//! - what a turn that ends without passing (blocked, killed) changed is moved into a stash
//!   entry (`git stash list`: `ralph: t-3's unfinished work …`), so the next task starts
//!   from the branch as it is, and nothing is lost.
//!
//! The note outlives a crash or a stop: the next run takes up the same task's turn with its
//! work tree as the attempt left it, and a turn of another task first stashes the leftovers.

use std::collections::HashSet;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::Engine;
use super::build::{AttemptEnd, TaskEnd};
use crate::event::Event;
use crate::files::atomic;
use crate::git::GitError;
use crate::model::{Task, TaskId};
use crate::runtime::error::Error;
use crate::runtime::home::Home;
use crate::runtime::workspace::state_dir;

/// The file that notes a task's turn in place, in ralph's state folder.
const NOTE: &str = "in-place.json";

/// A task's turn in the user's work tree.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Turn {
    /// The task.
    task: TaskId,
    /// The branch's head when the turn began.
    head: String,
    /// The untracked files that were there before (the user's), relative to the top of the
    /// work tree: never committed or stashed by ralph.
    untracked: Vec<String>,
}

impl Engine {
    fn note_path(&self) -> PathBuf {
        state_dir(&self.ctx.workspace).join(NOTE)
    }

    /// The turn noted by an earlier attempt, if any.
    fn noted_turn(&self) -> Result<Option<Turn>, Error> {
        let path = self.note_path();
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(Error::Io { path, source }),
        };
        // A note that does not parse is treated as none: it only says whose leftovers the
        // work tree holds, and the refusal below names them either way.
        Ok(serde_json::from_str(&text).ok())
    }

    fn write_turn(&self, turn: &Turn) -> Result<(), Error> {
        let path = self.note_path();
        let bytes = serde_json::to_vec(turn).unwrap_or_default();
        atomic::replace(&path, &bytes).map_err(|source| Error::Io { path, source })
    }

    fn clear_turn(&self) -> Result<(), Error> {
        let path = self.note_path();
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::Io { path, source: e })
            }
            _ => Ok(()),
        }
    }

    /// Refuses to build in place over uncommitted changes to tracked files that are not an
    /// interrupted turn's.
    pub(super) async fn refuse_uncommitted(&self, home: &Home) -> Result<(), Error> {
        if self.noted_turn()?.is_some() {
            return Ok(());
        }
        let tracked: Vec<String> = home
            .git()
            .changed_paths(&home.kept_out())
            .await?
            .into_iter()
            .filter(|(_, untracked)| !untracked)
            .map(|(path, _)| path)
            .collect();
        match tracked.is_empty() {
            true => Ok(()),
            false => Err(Error::Uncommitted {
                paths: tracked,
                branch: home.name(),
            }),
        }
    }

    /// Begins `task`'s turn in place: takes up its own interrupted turn, or first moves
    /// another task's leftovers into a stash entry; notes the untracked files already there.
    pub(super) async fn begin_turn(&mut self, task: &Task) -> Result<(), Error> {
        let Some(home) = self.home.clone() else {
            return Ok(());
        };
        if let Some(turn) = self.noted_turn()? {
            if turn.task == task.id {
                return Ok(());
            }
            let why = "left by an interrupted run".to_owned();
            self.stash_turn(&turn, &why).await?;
        }
        let untracked = self
            .changed(&home)
            .await?
            .into_iter()
            .filter(|(_, untracked)| *untracked)
            .map(|(path, _)| path)
            .collect();
        let head = home.head().to_owned();
        self.write_turn(&Turn {
            task: task.id.clone(),
            head,
            untracked,
        })
    }

    /// What the agent did to the user's branch after an attempt in place: a moved branch is
    /// put back and fails the attempt; a passing attempt is committed.
    pub(super) async fn land_in_place(
        &mut self,
        task: &Task,
        attempt: AttemptEnd,
    ) -> Result<AttemptEnd, Error> {
        let Some(home) = &mut self.home else {
            return Ok(attempt);
        };
        if matches!(attempt, AttemptEnd::Interrupted) {
            return Ok(attempt);
        }
        if let Some(moved) = home.check().await? {
            self.emit(Event::Warning {
                message: format!("{}: {moved}", task.id),
            });
            return Ok(match attempt {
                AttemptEnd::Killed(..) => attempt,
                _ => AttemptEnd::Failed(moved),
            });
        }
        match attempt {
            AttemptEnd::Done(_) => Ok(AttemptEnd::Done(self.commit_turn(task).await?)),
            other => Ok(other),
        }
    }

    /// Commits what `task`'s turn changed on the user's branch; the commit (the agent's own,
    /// when it committed its work itself), or `None` when nothing changed.
    async fn commit_turn(&mut self, task: &Task) -> Result<Option<String>, Error> {
        let Some(turn) = self.noted_turn()? else {
            return Ok(None);
        };
        let paths = self.turn_paths(&turn).await?;
        let Some(home) = &mut self.home else {
            return Ok(None);
        };
        let message = format!("{}: {}", task.id, task.name);
        let commit = match home.git().commit_paths(&message, &paths).await? {
            Some(commit) => {
                home.advanced(commit.clone());
                Some(commit)
            }
            None => (home.head() != turn.head).then(|| home.head().to_owned()),
        };
        if let Some(commit) = &commit {
            self.emit(Event::TaskMerged {
                task: task.id.clone(),
                commit: commit.clone(),
            });
        }
        Ok(commit)
    }

    /// Ends `task`'s turn: a task that will not be built again as it is (blocked, killed)
    /// has its leftovers moved into a stash entry. An interrupted turn stays noted, for the
    /// next run to take up.
    pub(super) async fn end_turn(&mut self, task: &Task, end: &TaskEnd) -> Result<(), Error> {
        if self.home.is_none() {
            return Ok(());
        }
        let why = match end {
            TaskEnd::Done => None,
            TaskEnd::Blocked => Some("blocked"),
            TaskEnd::Killed => Some("killed by a limit; its subtasks start afresh"),
            TaskEnd::Interrupted | TaskEnd::Stop(_) => return Ok(()),
        };
        if let (Some(why), Some(turn)) = (why, self.noted_turn()?)
            && turn.task == task.id
        {
            self.stash_turn(&turn, why).await?;
        }
        self.clear_turn()
    }

    /// Moves what `turn` changed into a stash entry, and says so.
    async fn stash_turn(&mut self, turn: &Turn, why: &str) -> Result<(), Error> {
        let paths = self.turn_paths(turn).await?;
        let Some(home) = &self.home else {
            return Ok(());
        };
        let message = format!("ralph: {}'s unfinished work ({why})", turn.task);
        if home.git().stash_paths(&message, &paths).await? {
            self.emit(Event::Warning {
                message: format!(
                    "{}'s unfinished work ({why}) is kept in `git stash list` as \"{message}\"; \
                     the work tree is back at {}",
                    turn.task,
                    home.name()
                ),
            });
        }
        self.clear_turn()
    }

    /// The paths `turn` changed: every change in the work tree but ralph's own files and the
    /// untracked files that were there before it.
    async fn turn_paths(&self, turn: &Turn) -> Result<Vec<String>, Error> {
        let Some(home) = &self.home else {
            return Ok(Vec::new());
        };
        let before: HashSet<&str> = turn.untracked.iter().map(String::as_str).collect();
        Ok(self
            .changed(home)
            .await?
            .into_iter()
            .filter(|(path, untracked)| !(*untracked && before.contains(path.as_str())))
            .map(|(path, _)| path)
            .collect())
    }

    async fn changed(&self, home: &Home) -> Result<Vec<(String, bool)>, GitError> {
        home.git().changed_paths(&home.kept_out()).await
    }
}
