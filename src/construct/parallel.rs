//! BUILD with `build_concurrency` = N > 1: up to N ready tasks at once, each attempt by a
//! fresh agent in its own git work tree (`.ralph/worktrees/<task>`, branch `ralph-task/<task>`,
//! from the checked-out branch's head when the attempt starts), its gates run there.
//!
//! An attempt that passes its gates is committed on its branch (`<task id>: <name>`), then
//! rebased onto the checked-out branch's head and fast-forwarded into it: the history stays
//! linear, one commit per task. Passing attempts merge in the order they started, which is
//! priority order: one that passes while an attempt started before it is still running
//! waits for that one to end (see [`MergeOrder`]). When the rebase conflicts with work
//! merged meanwhile, the attempt fails with the conflicting paths as its retry reason, and
//! the next attempt starts from the new head. Every other ending is the same as
//! one task at a time. The work tree and branch are removed when the attempt ends (kept
//! while the task's agent waits for the answer to its question); those of a killed run are
//! removed at the next start (see `runtime::worktrees`).

use std::collections::{BTreeMap, BTreeSet};

use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument;

use super::build::{TaskEnd, Worker};
use super::ready::ReadyQueue;
use super::{Engine, Flow};
use crate::event::Event;
use crate::git::{Forwarded, Git, Rebased};
use crate::model::{Task, TaskId};
use crate::runtime::attempt::{Attempt, AttemptEnd};
use crate::runtime::deadline;
use crate::runtime::error::Error;
use crate::runtime::home::Home;
use crate::runtime::worktrees;

/// How one attempt in a work tree ended.
struct Built {
    /// When the attempt started, in [`MergeOrder`].
    started: u64,
    task: Task,
    attempt: Attempt,
}

type Jobs = JoinSet<Result<Built, Error>>;

/// BUILD with tasks at once: what is ready, what runs, the merge order, and why the stage
/// ends (once it must).
struct AtOnce {
    queue: ReadyQueue,
    jobs: Jobs,
    order: MergeOrder,
    flow: Option<Flow>,
}

/// Holds back passing attempts so they merge in the order they started. Tasks start in
/// priority order, so the history follows priority rather than the agents' speed; an
/// attempt that does not pass (or is retried, starting anew at the back) holds back nothing.
#[derive(Default)]
struct MergeOrder {
    next: u64,
    running: BTreeSet<u64>,
    passed: BTreeMap<u64, Built>,
}

impl MergeOrder {
    /// A number for an attempt that starts now.
    fn start(&mut self) -> u64 {
        self.next += 1;
        self.running.insert(self.next);
        self.next
    }

    /// Takes in an attempt that ended; it lands now unless it passed and waits its turn.
    fn ended(&mut self, built: Built) -> Option<Built> {
        self.running.remove(&built.started);
        if built.attempt.done() {
            self.passed.insert(built.started, built);
            return None;
        }
        Some(built)
    }

    /// The next passed attempt whose turn it is: none started before it is still running.
    fn next_to_merge(&mut self) -> Option<Built> {
        let (&first, _) = self.passed.first_key_value()?;
        if self.running.first().is_some_and(|&running| running < first) {
            return None;
        }
        self.passed.remove(&first)
    }
}

impl Engine {
    /// Why tasks cannot be built at once here, if they cannot: merging needs a git
    /// repository with a commit. (The user's uncommitted edits are no reason: each attempt
    /// works in its own work tree, made from the branch's last commit, and leaves them be.)
    pub(super) fn why_not_at_once(&self) -> Option<String> {
        self.home
            .is_none()
            .then(|| "needs a git repository with a commit".into())
    }

    /// Builds the ready tasks, up to `at_once` at a time, until none is ready. A kill, a
    /// broken gate or a stop lets the attempts in flight end, then ends the stage.
    pub(super) async fn build_at_once(&mut self, at_once: usize) -> Result<Flow, Error> {
        let mut run = AtOnce {
            queue: ReadyQueue::new(&self.board),
            jobs: Jobs::new(),
            order: MergeOrder::default(),
            flow: None,
        };
        loop {
            while run.flow.is_none() && run.jobs.len() < at_once && !self.stopped() {
                if let Some(stop) = self.asked_to_stop() {
                    // The attempts in flight end and land; nothing new starts.
                    run.flow = Some(stop);
                    break;
                }
                let Some(id) = run.queue.pop() else { break };
                let deadline = deadline::after(self.config().stage_timeout);
                self.start_in_work_tree(&mut run, &id, deadline).await?;
            }
            let Some(joined) = run.jobs.join_next().await else {
                break;
            };
            let built = super::joined(joined)?;
            let mut landing: Vec<Built> = run.order.ended(built).into_iter().collect();
            while let Some(next) = run.order.next_to_merge() {
                landing.push(next);
            }
            for built in landing {
                self.land_and_follow_up(&mut run, built).await?;
            }
        }
        if self.stopped() {
            return Ok(Flow::Interrupted);
        }
        Ok(run.flow.unwrap_or(Flow::Continue))
    }

    /// Lands `built` and acts on how it ended: a retry starts again (under the task's
    /// deadline, moved by any rate limit waited out) unless the stage is ending; a done task
    /// releases its dependents; a kill, a stop or an interruption ends the stage.
    async fn land_and_follow_up(&mut self, run: &mut AtOnce, built: Built) -> Result<(), Error> {
        let (id, deadline) = (built.task.id.clone(), built.attempt.deadline);
        match self.land(built).await? {
            // Failed, with attempts left: built again.
            None if run.flow.is_none() && !self.stopped() && !self.lock.stop_asked() => {
                self.start_in_work_tree(run, &id, deadline).await?;
            }
            None | Some(TaskEnd::Blocked | TaskEnd::Asked) => {}
            Some(TaskEnd::Done) => run.queue.finished(&id),
            Some(TaskEnd::Killed) => {
                run.flow.get_or_insert(Flow::Continue);
            }
            Some(TaskEnd::Interrupted) => run.flow = Some(Flow::Interrupted),
            Some(TaskEnd::Stop(outcome)) => {
                run.flow.get_or_insert(Flow::Stop(outcome));
            }
        }
        Ok(())
    }

    /// Starts the next attempt of `id` in a fresh work tree, or blocks the task when it has
    /// no attempt left.
    async fn start_in_work_tree(
        &mut self,
        run: &mut AtOnce,
        id: &TaskId,
        deadline: Instant,
    ) -> Result<(), Error> {
        // Every attempt of this mode starts here, its retries too.
        self.keep_lock_note();
        match self.merge_kept(&self.task(id)?).await? {
            Some(TaskEnd::Done) => {
                run.queue.finished(id);
                return Ok(());
            }
            Some(_) => return Ok(()),
            // Nothing kept, or the kept work conflicts with what was merged since: built anew.
            None => {}
        }
        let task = self.task(id)?;
        if self.give_up_if_out_of_retries(&task).await?.is_some() {
            return Ok(());
        }
        let round = task.round_attempts() + 1;
        let prompt = self.build_prompt(&task, round)?;
        let base = self.home()?.head().to_owned();
        let worker = self.worker();
        let workspace = self.ctx.workspace.clone();
        let started = run.order.start();
        let span = tracing::info_span!(target: "ralph", "task", task = %id, attempt = round);
        run.jobs.spawn(
            async move {
                let start = Start {
                    started,
                    task,
                    prompt,
                    deadline,
                };
                attempt_in_work_tree(worker, &workspace, start, &base).await
            }
            .instrument(span),
        );
        Ok(())
    }

    /// Lands `built` on the user's branch and records how it ended: the branch is checked
    /// first (an agent may have moved it from its work tree: put back, and the attempt fails);
    /// a passing attempt is merged. The work tree goes; the task's branch too, unless it keeps
    /// work that could not be merged.
    async fn land(&mut self, built: Built) -> Result<Option<TaskEnd>, Error> {
        let Built { task, attempt, .. } = built;
        let attempt = match self.home_mut()?.check().await? {
            Some(moved) => {
                self.emit(Event::Warning {
                    message: format!("while {} was built: {moved}", task.id),
                });
                attempt.failed_unless_stopped(moved)
            }
            None => attempt,
        };
        let attempt = match attempt.done() {
            true => self.merge(&task, attempt).await?,
            false => attempt,
        };
        self.remove_work_tree(&task, &attempt).await?;
        self.settle(&task, attempt).await
    }

    /// Removes `task`'s work tree, and its branch unless `attempt` keeps work on it. The
    /// work tree of an attempt that asked a person a question is kept, with its branch,
    /// for the attempt after the answer.
    async fn remove_work_tree(&self, task: &Task, attempt: &Attempt) -> Result<(), Error> {
        let workspace = self.ctx.workspace.clone();
        let git = self.ctx.git(&workspace);
        match (&attempt.end, &attempt.kept) {
            (AttemptEnd::Question(_), _) => worktrees::keep_for_answer(&workspace, &task.id)?,
            (_, Some(_)) => worktrees::remove_keeping_branch(&git, &workspace, &task.id).await?,
            (_, None) => worktrees::remove(&git, &workspace, &task.id).await?,
        }
        Ok(())
    }

    /// A task whose passing work was kept on its branch (files of the user's were in the
    /// way of its merge): merges it now, without building it again, and records how that
    /// ended. `None` when the task keeps nothing, or its branch is gone (it is built again).
    pub(super) async fn merge_kept(&mut self, task: &Task) -> Result<Option<TaskEnd>, Error> {
        let (Some(branch), Some(home)) = (&task.kept, &self.home) else {
            return Ok(None);
        };
        if !home.git().branch_exists(branch).await? {
            return Ok(None);
        }
        let workspace = self.ctx.workspace.clone();
        let git = self.ctx.git(&workspace);
        worktrees::check_out(&git, &workspace, &task.id).await?;
        self.emit(Event::TaskStarted {
            task: task.id.clone(),
            name: format!("{} (merging its kept work)", task.name),
            attempt: task.attempts.saturating_add(1),
        });
        let kept = Attempt {
            tried: Some("merged the work kept on its branch".to_owned()),
            ..Attempt::ended(
                AttemptEnd::Done,
                deadline::after(self.config().stage_timeout),
            )
        };
        let attempt = self.merge(task, kept).await?;
        self.remove_work_tree(task, &attempt).await?;
        self.settle(task, attempt).await
    }

    /// Rebases the task's branch onto the user's branch and fast-forwards the branch to it:
    /// `attempt` with the commit. A conflict fails the attempt (the next one starts from the
    /// merged work); files of the user's work tree in the way block the task and keep its
    /// work on its branch.
    async fn merge(&mut self, task: &Task, attempt: Attempt) -> Result<Attempt, Error> {
        let tree = self
            .ctx
            .git(&worktrees::path(&self.ctx.workspace, &task.id));
        let head = self.home()?.head().to_owned();
        if let Rebased::Conflict(paths) = tree.rebase(&head).await? {
            return Ok(attempt.failed_unless_stopped(format!(
                "Merge conflict: the changes conflict with work merged while this task was built, in {}. The next attempt starts from the merged work.",
                paths.join(", ")
            )));
        }
        let branch = worktrees::branch(&task.id);
        let home = self.home_mut()?;
        match home.git().fast_forward(&branch).await? {
            Forwarded::Done => {}
            Forwarded::Blocked { paths, untracked } => {
                let what = match untracked {
                    true => "files that are untracked there",
                    false => "files with uncommitted changes there",
                };
                let reason = format!(
                    "its passing work could not be merged into {}: it would overwrite {what} ({}). \
                     The work is kept on branch {branch}. Commit, move or delete those files, \
                     then `ralph task unblock {}` and run again: the kept work is merged without \
                     building it again",
                    home.name(),
                    crate::output::list_some(&paths, 5),
                    task.id,
                );
                return Ok(Attempt {
                    end: AttemptEnd::Blocked(reason),
                    kept: Some(branch),
                    ..attempt
                });
            }
            // Forwarded is non-exhaustive; git's merge reports only these two.
            #[allow(unreachable_patterns)]
            _ => {}
        }
        let commit = home.git().head().await?.filter(|c| *c != head);
        if let Some(commit) = &commit {
            home.advanced(commit.clone());
            self.emit(Event::TaskMerged {
                task: task.id.clone(),
                commit: commit.clone(),
            });
        }
        Ok(Attempt { commit, ..attempt })
    }

    /// The user's branch; tasks are built at once only in a git repository with a commit.
    fn home(&self) -> Result<&Home, Error> {
        self.home
            .as_ref()
            .ok_or_else(|| crate::git::GitError::NoCommit(self.ctx.workspace.clone()).into())
    }

    fn home_mut(&mut self) -> Result<&mut Home, Error> {
        let workspace = self.ctx.workspace.clone();
        self.home
            .as_mut()
            .ok_or_else(|| crate::git::GitError::NoCommit(workspace).into())
    }
}

/// An attempt about to start.
struct Start {
    started: u64,
    task: Task,
    prompt: String,
    deadline: Instant,
}

/// One attempt in the task's own work tree from `base`: the agent, the gates, and, when
/// they pass, a commit on the task's branch.
async fn attempt_in_work_tree(
    worker: Worker,
    workspace: &std::path::Path,
    start: Start,
    base: &str,
) -> Result<Built, Error> {
    let Start {
        started,
        task,
        prompt,
        deadline,
    } = start;
    let git = worker.ctx.git(workspace);
    // The work tree kept while the task's question waited goes on from where it was.
    let (path, base) = match worktrees::take_kept(workspace, &task.id) {
        Some(path) => {
            let head = worker.ctx.git(&path).head().await?;
            (path, head.unwrap_or_else(|| base.to_owned()))
        }
        None => (
            worktrees::add(&git, workspace, &task.id, base).await?,
            base.to_owned(),
        ),
    };
    let base = base.as_str();
    let tree = worker.ctx.git(&path);
    let attempt = worker
        .in_work_tree(path.clone())
        .attempt(&task, prompt, deadline)
        .await?;
    let attempt = match stayed(&tree, &task.id, base).await? {
        Some(moved) => attempt.failed_unless_stopped(moved),
        None => attempt,
    };
    if attempt.done() {
        tree.commit_all(&format!("{}: {}", task.id, task.name), &[])
            .await?;
    }
    Ok(Built {
        started,
        task,
        attempt,
    })
}

/// Whether the agent left the task's work tree on the task's branch, holding `base`; what
/// it did otherwise, in words for its next attempt. (The work tree is removed after the
/// attempt, so nothing needs putting back there.)
async fn stayed(tree: &Git, task: &TaskId, base: &str) -> Result<Option<String>, Error> {
    let branch = worktrees::branch(task);
    let on = tree.current_branch().await?;
    let moved = if on.as_deref() != Some(branch.as_str()) {
        Some(match on {
            Some(other) => format!("switched to branch {other}"),
            None => "detached HEAD".to_owned(),
        })
    } else {
        match tree.head().await? {
            Some(head) if tree.is_ancestor(base, &head).await? => None,
            _ => Some("reset or rewrote the commits the work started from".to_owned()),
        }
    };
    Ok(moved.map(|what| {
        format!(
            "The agent {what} in the task's work tree, so its work was not merged. ralph builds \
             each task on {branch} and merges it itself: stay on the checked-out branch, and do \
             not create branches, reset, or rewrite commits."
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn built(started: u64, end: AttemptEnd) -> Built {
        Built {
            started,
            task: Task::new(format!("t-{started}"), "a task"),
            attempt: Attempt::ended(end, Instant::now()),
        }
    }

    fn landed(order: &mut MergeOrder) -> Vec<u64> {
        std::iter::from_fn(|| order.next_to_merge())
            .map(|b| b.started)
            .collect()
    }

    #[test]
    fn passing_attempts_merge_in_the_order_they_started() {
        let mut order = MergeOrder::default();
        let [one, two, three] = [order.start(), order.start(), order.start()];
        // The third passes first: it waits for the two started before it.
        assert!(order.ended(built(three, AttemptEnd::Done)).is_none());
        assert!(landed(&mut order).is_empty());
        // The first fails: it lands at once and holds nothing back.
        let failed = order.ended(built(one, AttemptEnd::Failed("no".into())));
        assert_eq!(failed.map(|b| b.started), Some(one));
        assert!(landed(&mut order).is_empty(), "the second still runs");
        // A retry of the first starts at the back and does not hold back the others.
        let again = order.start();
        assert!(order.ended(built(two, AttemptEnd::Done)).is_none());
        assert_eq!(landed(&mut order), [two, three]);
        assert!(order.ended(built(again, AttemptEnd::Done)).is_none());
        assert_eq!(landed(&mut order), [again]);
    }
}
