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
//! one task at a time. The work tree and branch are removed when the attempt ends; those of
//! a killed run are removed at the next start (see `runtime::worktrees`).

use std::collections::{BTreeMap, BTreeSet};

use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument;

use super::build::{AttemptEnd, Settled, TaskEnd, Worker};
use super::ready::ReadyQueue;
use super::{Engine, Flow};
use crate::event::Event;
use crate::git::{Git, Rebased};
use crate::model::{Task, TaskId};
use crate::runtime::deadline;
use crate::runtime::error::Error;
use crate::runtime::worktrees;

/// How one attempt in a work tree ended.
struct Built {
    /// When the attempt started, in [`MergeOrder`].
    started: u64,
    task: Task,
    tried: Option<String>,
    end: AttemptEnd,
    deadline: Instant,
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
        if matches!(built.end, AttemptEnd::Done) {
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
    /// The head of the checked-out branch (the integration branch), or `None` outside a git
    /// repository or before its first commit.
    pub(super) async fn integration_head(&self) -> Result<Option<String>, Error> {
        let git = Git::new(&self.ctx.workspace);
        if !git.is_repo().await {
            return Ok(None);
        }
        Ok(git.head().await?)
    }

    /// Why tasks cannot be built at once here, if they cannot: merging needs a git
    /// repository with a commit, and a work tree whose tracked files have no uncommitted
    /// changes (a merge would refuse to overwrite them).
    pub(super) async fn why_not_at_once(&self) -> Result<Option<String>, Error> {
        if self.integration_head().await?.is_none() {
            return Ok(Some("needs a git repository with a commit".into()));
        }
        let changed: Vec<String> = Git::new(&self.ctx.workspace)
            .changes(&[crate::runtime::workspace::STATE_DIR])
            .await?
            .into_iter()
            .filter(|line| !line.starts_with("??"))
            .map(|line| line.get(3..).unwrap_or_default().to_owned())
            .collect();
        Ok((!changed.is_empty()).then(|| {
            format!(
                "needs the tracked files committed, and {} have uncommitted changes",
                changed.join(", ")
            )
        }))
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
                let Some(id) = run.queue.pop() else { break };
                let deadline = deadline::after(self.config().stage_timeout);
                self.start_in_work_tree(&mut run, &id, deadline).await?;
            }
            let Some(joined) = run.jobs.join_next().await else {
                break;
            };
            let built = joined.map_err(|e| {
                Error::Agent(crate::agent::AgentError::Other(format!(
                    "a build job failed: {e}"
                )))
            })??;
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
        let (id, deadline) = (built.task.id.clone(), built.deadline);
        match self.land(built).await? {
            Settled::Retry if run.flow.is_none() && !self.stopped() => {
                self.start_in_work_tree(run, &id, deadline).await?;
            }
            Settled::Retry | Settled::End(TaskEnd::Blocked) => {}
            Settled::End(TaskEnd::Done) => run.queue.finished(&id),
            Settled::End(TaskEnd::Killed) => {
                run.flow.get_or_insert(Flow::Continue);
            }
            Settled::End(TaskEnd::Interrupted) => run.flow = Some(Flow::Interrupted),
            Settled::End(TaskEnd::Stop(outcome)) => {
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
        let task = self.task(id)?;
        if self.give_up_if_out_of_retries(&task).await?.is_some() {
            return Ok(());
        }
        let round = task.round_attempts() + 1;
        let prompt = self.build_prompt(&task, round)?;
        let base = self
            .integration_head()
            .await?
            .ok_or_else(|| crate::git::GitError::NoCommit(self.ctx.workspace.clone()))?;
        self.emit(Event::TaskStarted {
            task: id.clone(),
            name: task.name.clone(),
            attempt: round,
        });
        let worker = self.worker();
        let workspace = self.ctx.workspace.clone();
        let started = run.order.start();
        let span = tracing::info_span!(target: "ralph", "task", task = %id, attempt = round);
        run.jobs.spawn(
            async move {
                let attempt = Attempt {
                    started,
                    task,
                    prompt,
                    deadline,
                };
                attempt_in_work_tree(worker, &workspace, attempt, &base).await
            }
            .instrument(span),
        );
        Ok(())
    }

    /// Merges a passing attempt into the checked-out branch (a conflict fails it), removes
    /// its work tree, and records how it ended.
    async fn land(&mut self, built: Built) -> Result<Settled, Error> {
        let Built {
            task, tried, end, ..
        } = built;
        let workspace = self.ctx.workspace.clone();
        let git = Git::new(&workspace);
        let end = match end {
            AttemptEnd::Done => self.merge(&git, &task).await?,
            other => other,
        };
        worktrees::remove(&git, &workspace, &task.id).await?;
        self.settle(&task, tried, end).await
    }

    /// Rebases the task's branch onto the checked-out branch's head and fast-forwards the
    /// branch to it.
    async fn merge(&self, git: &Git, task: &Task) -> Result<AttemptEnd, Error> {
        let tree = Git::new(worktrees::path(&self.ctx.workspace, &task.id));
        let head = self
            .integration_head()
            .await?
            .ok_or_else(|| crate::git::GitError::NoCommit(self.ctx.workspace.clone()))?;
        match tree.rebase(&head).await? {
            Rebased::Clean => {
                git.fast_forward(&worktrees::branch(&task.id)).await?;
                if let Some(commit) = git.head().await?.filter(|c| *c != head) {
                    self.emit(Event::TaskMerged {
                        task: task.id.clone(),
                        commit,
                    });
                }
                Ok(AttemptEnd::Done)
            }
            Rebased::Conflict(paths) => Ok(AttemptEnd::Failed(format!(
                "Merge conflict: the changes conflict with work merged while this task was built, in {}. The next attempt starts from the merged work.",
                paths.join(", ")
            ))),
        }
    }
}

/// An attempt about to start.
struct Attempt {
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
    attempt: Attempt,
    base: &str,
) -> Result<Built, Error> {
    let Attempt {
        started,
        task,
        prompt,
        mut deadline,
    } = attempt;
    let path = worktrees::add(&Git::new(workspace), workspace, &task.id, base).await?;
    let mut tried = None;
    let end = worker
        .in_work_tree(path.clone())
        .attempt(&task, prompt, &mut deadline, &mut tried)
        .await?;
    if matches!(end, AttemptEnd::Done) {
        Git::new(&path)
            .commit_all(&format!("{}: {}", task.id, task.name), &[])
            .await?;
    }
    Ok(Built {
        started,
        task,
        tried,
        end,
        deadline,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn built(started: u64, end: AttemptEnd) -> Built {
        Built {
            started,
            task: Task::new(format!("t-{started}"), "a task"),
            tried: None,
            end,
            deadline: Instant::now(),
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
