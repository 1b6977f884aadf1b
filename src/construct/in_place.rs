//! BUILD one task at a time in the user's own work tree (the default, `build_concurrency =
//! 1`), in a git repository: each task that passes its gates is one commit on the user's
//! branch, `<task id>: <task name>`, holding what its attempts changed and nothing else.
//!
//! In place, the agent and the gates use the work tree as the user has it (ignored folders
//! such as `target/` or `node_modules/` included), which is why one task at a time is built
//! here rather than in a fresh git work tree. Each task's attempts are one turn of
//! [`Home`](crate::runtime::home): the run refuses to start over the user's uncommitted
//! edits, the user's untracked files stay out of the commit, and a task that ends without
//! passing (blocked, killed) has its unfinished work moved into a stash entry. A commit git
//! refuses (a hook, signing) ends the run before the attempt is counted, its work left in
//! the tree as the turn's and the index as it was (`GitError::CommitRefused`).

use super::Engine;
use super::build::TaskEnd;
use crate::event::Event;
use crate::model::Task;
use crate::runtime::attempt::{Attempt, AttemptEnd};
use crate::runtime::error::Error;
use crate::runtime::home::TurnNote;

/// Why a task's work is set aside while its agent's question waits: the stash entry's
/// suffix, by which it is found again.
const WAITS_FOR_AN_ANSWER: &str = "waits for a person's answer";

impl Engine {
    /// Begins `task`'s turn in place: takes up its own interrupted turn, or first sets aside
    /// another task's leftovers.
    pub(super) async fn begin_turn(&mut self, task: &Task) -> Result<(), Error> {
        let Some(home) = &self.home else {
            return Ok(());
        };
        if let Some(left) = home.begin_turn(task.id.as_str()).await? {
            self.set_aside(&left, "left by an interrupted run").await?;
            if let Some(home) = &self.home {
                home.begin_turn(task.id.as_str()).await?;
            }
        }
        Ok(())
    }

    /// What the agent did to the user's branch after an attempt in place: a moved branch is
    /// put back and fails the attempt; a passing attempt is committed.
    pub(super) async fn land_in_place(
        &mut self,
        task: &Task,
        attempt: Attempt,
    ) -> Result<Attempt, Error> {
        let Some(home) = &mut self.home else {
            return Ok(attempt);
        };
        if attempt.end == AttemptEnd::Interrupted {
            return Ok(attempt);
        }
        let moved = home.check().await?;
        // What a kill during the next attempt leaves beyond this is that attempt's.
        home.note_attempt().await?;
        if let Some(moved) = moved {
            self.emit(Event::Warning {
                message: format!("{}: {moved}", task.id),
            });
            return Ok(attempt.failed_unless_stopped(moved));
        }
        if !attempt.done() {
            return Ok(attempt);
        }
        let started = home.noted()?.map(|turn| turn.head);
        let message = format!("{}: {}", task.id, task.name);
        let commit = match home.commit_turn(&message).await? {
            Some(commit) => Some(commit),
            None => match started.filter(|start| start != home.head()) {
                // Nothing left to commit, and the branch moved since the turn began: ralph
                // committed the work before a run that stopped short of recording it (its
                // message says so, whatever the user committed since), or else the agent
                // committed it itself.
                Some(start) => Some(
                    match home.git().commit_with_subject(&start, &message).await? {
                        Some(ours) => ours,
                        None => home.head().to_owned(),
                    },
                ),
                None => None,
            },
        };
        if let Some(commit) = &commit {
            self.emit(Event::TaskMerged {
                task: task.id.clone(),
                commit: commit.clone(),
            });
        }
        // The gates passed on the tree this commit holds.
        let tree = self.tree().await?;
        self.gates_passed_on(tree).await?;
        Ok(Attempt { commit, ..attempt })
    }

    /// Ends `task`'s turn: a task that will not be built again as it is (blocked, killed)
    /// has its unfinished work set aside. An interrupted turn stays noted, for the next run
    /// to take up.
    pub(super) async fn end_turn(&mut self, task: &Task, end: &TaskEnd) -> Result<(), Error> {
        let Some(home) = &self.home else {
            return Ok(());
        };
        let why = match end {
            TaskEnd::Done => None,
            TaskEnd::Blocked => Some("blocked"),
            TaskEnd::Asked => Some(WAITS_FOR_AN_ANSWER),
            TaskEnd::Killed => Some("killed by a limit; its subtasks start afresh"),
            TaskEnd::Interrupted | TaskEnd::Stop(_) => return Ok(()),
        };
        match (why, home.noted()?) {
            (Some(why), Some(turn)) if turn.subject == task.id.as_str() => {
                self.set_aside(&turn, why).await
            }
            _ => Ok(home.end_turn()?),
        }
    }

    /// Gives back what `task`'s attempt that asked a person a question left (its stash
    /// entry), now that the answer is there: its next attempt goes on from it. A pop that
    /// conflicts leaves the entry, and says so.
    pub(super) async fn give_back_asked(&mut self, task: &Task) -> Result<(), Error> {
        let Some(home) = &self.home else {
            return Ok(());
        };
        let state = crate::runtime::workspace::state_dir(&self.ctx.workspace);
        let questions = crate::runtime::questions::Questions::in_state(&state);
        if questions
            .open(false)
            .answered_for(task.id.as_str())
            .is_none()
        {
            return Ok(());
        }
        let label = format!(
            "ralph: {}'s unfinished work ({WAITS_FOR_AN_ANSWER})",
            task.id
        );
        let Some((entry, _)) = home.git().stash_named(&label).await? else {
            return Ok(());
        };
        if let Err(e) = home.git().stash_pop(&entry).await {
            self.emit(Event::Warning {
                message: format!(
                    "{}'s unfinished work from before its question did not apply ({e}); it                      stays in `git stash list` as \"{label}\"",
                    task.id
                ),
            });
        }
        Ok(())
    }

    /// Moves what `turn` changed into a stash entry, and says so.
    async fn set_aside(&mut self, turn: &TurnNote, why: &str) -> Result<(), Error> {
        let Some(home) = &mut self.home else {
            return Ok(());
        };
        if let Some(entry) = home.set_aside(turn, why).await? {
            let message = format!(
                "{}'s unfinished work is kept in `git stash list` as \"{entry}\"; the work \
                 tree is back at {}",
                turn.subject,
                home.name()
            );
            self.emit(Event::Warning { message });
        }
        Ok(())
    }
}
