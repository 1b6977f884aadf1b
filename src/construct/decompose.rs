//! DECOMPOSE: a task killed by a limit (in BUILD or VERIFY), or rejected by verifiers
//! `decompose_after_rejections` times, is replaced by 2–5 subtasks, and an issue whose
//! investigator was killed becomes 2–5 tasks, designed by an agent that sees only the head
//! and tail of the killed run's log (the whole log is what overflowed), or for a rejected
//! task, of its last passing build's log, with the rejections' reasons.

use serde::Serialize;

use super::{Engine, Flow, Priorities};
use crate::agent::Role;
use crate::answer::{DecomposeAnswer, DepRef, ProposedTask};
use crate::event::Event;
use crate::logfile;
use crate::model::{Change, Issue, IssueStatus, KillReason, Task, TaskId, TaskStatus};
use crate::runtime::call::Structured;
use crate::runtime::deadline;
use crate::runtime::error::Error;

/// Lines of the kill log the decomposer sees from the start and from the end (seed 000).
use crate::logfile::{DEFAULT_HEAD_LINES as LOG_HEAD_LINES, DEFAULT_TAIL_LINES as LOG_TAIL_LINES};

impl Engine {
    pub(super) async fn decompose(&mut self) -> Result<Flow, Error> {
        let tasks = self.board.tasks.values().filter(|t| t.is_killed());
        let issues = self.board.issues.values().filter(|i| i.is_killed());
        let killed: Vec<Killed> = tasks
            .cloned()
            .map(|t| Killed::Task(Box::new(t)))
            .chain(issues.cloned().map(Killed::Issue))
            .collect();
        let iteration = self.board.run.iteration;
        let last = killed.len().saturating_sub(1);
        for (i, subject) in killed.into_iter().enumerate() {
            if self.stopped() {
                return Ok(Flow::Interrupted);
            }
            if let Some(stop) = self.asked_to_stop() {
                return Ok(stop);
            }
            let decomposed = match subject {
                Killed::Task(task) => self.decompose_task(*task).await?,
                Killed::Issue(issue) => self.decompose_issue(issue).await?,
            };
            let Some((mut changes, event)) = decomposed else {
                return Ok(Flow::Interrupted);
            };
            // Seed 000: after decomposition, the next iteration starts at once. The increment
            // rides in the last task's batch, so a crash cannot separate the two.
            if i == last {
                let note = format!("decomposed {} killed task(s) or issue(s)", last + 1);
                changes.push(Change::Run(self.next_iteration(0, &note)));
            }
            // The subtasks are prioritized with everything else that can be built.
            let prioritized = self.prioritize(&mut changes, Priorities::Inherit)?;
            self.commit(changes).await?;
            self.emit(event);
            self.emit(prioritized);
        }
        self.emit(Event::IterationFinished { iteration });
        Ok(Flow::Continue)
    }

    /// The changes that replace (or block) one killed task, and the event to report; `None`
    /// if the run was interrupted.
    async fn decompose_task(&mut self, task: Task) -> Result<Option<(Vec<Change>, Event)>, Error> {
        if let Some(reason) = self.timed_out_like_its_parent(&task) {
            return Ok(Some(blocked(task, reason)));
        }
        let Some(result) = self.ask_decomposer(&task, "task").await? else {
            return Ok(None);
        };
        Ok(Some(match result {
            Ok(answer) => self.replace_with_subtasks(task, &answer),
            Err(reason) => blocked(task, reason),
        }))
    }

    /// Why a subtask stopped by the timeout, as its parent was, is not decomposed again:
    /// smaller parts did not help once, and an agent that hangs would otherwise be given
    /// ever smaller tasks (t-1, t-1a, t-1aa, …) at the cost of one timeout each.
    fn timed_out_like_its_parent(&self, task: &Task) -> Option<String> {
        let parent = self.board.tasks.get(task.parent.as_ref()?)?;
        let timeout = Some(KillReason::Timeout);
        if task.kill_reason != timeout || parent.kill_reason != timeout {
            return None;
        }
        let log = task
            .kill_log
            .as_ref()
            .map(|path| format!(" (its log: {})", path.display()))
            .unwrap_or_default();
        // The kill's own note names the agent stopped and the setting whose clock fired.
        let note = task
            .tombstones
            .last()
            .map_or("stopped by a timeout", |t| t.reason.as_str());
        Some(format!(
            "{note}, as {} was before it was decomposed: smaller parts did not help, so the \
             agent or the limit needs a look{log}; raise the setting named, then unblock it \
             to build it again",
            parent.id
        ))
    }

    /// The changes that turn one issue whose investigator was killed into tasks (or block
    /// it), and the event to report; `None` if the run was interrupted.
    async fn decompose_issue(
        &mut self,
        mut issue: Issue,
    ) -> Result<Option<(Vec<Change>, Event)>, Error> {
        // The decomposer's prompt speaks of a task: the issue's text is its name.
        let mut view = Task::new(issue.id.as_str(), issue.text.clone());
        view.kill_reason = issue.kill_reason;
        view.kill_log = issue.kill_log.clone();
        let Some(result) = self.ask_decomposer(&view, "issue").await? else {
            return Ok(None);
        };
        Ok(Some(match result {
            Ok(answer) => {
                let mut run = self.board.run.clone();
                let origin = issue.id.to_string();
                let mut tasks = self.materialize(&answer.subtasks, None, &mut run, &origin);
                for task in &mut tasks {
                    task.priority = task.priority.or(issue.priority);
                }
                issue.status = IssueStatus::Resolved;
                issue.tasks = tasks.iter().map(|t| t.id.clone()).collect();
                let event = Event::IssueDecomposed {
                    issue: issue.id.clone(),
                    into: issue.tasks.clone(),
                };
                let mut changes = vec![Change::Run(run)];
                changes.extend(tasks.into_iter().map(Change::Task));
                changes.push(Change::Issue(issue));
                (changes, event)
            }
            Err(reason) => {
                issue.status = IssueStatus::Blocked;
                issue.reason = Some(reason.clone());
                let event = Event::Warning {
                    message: format!("{} blocked: {reason}", issue.id),
                };
                (vec![Change::Issue(issue)], event)
            }
        }))
    }

    /// The decomposer's subtasks for `task` (a killed task, or an issue seen as one):
    /// `Ok(answer)`, `Err(why not)`, or `None` if the run was interrupted.
    async fn ask_decomposer(
        &mut self,
        task: &Task,
        kind: &str,
    ) -> Result<Option<Result<DecomposeAnswer, String>>, Error> {
        #[derive(Serialize)]
        struct DecomposePrompt<'a> {
            task: &'a Task,
            kind: &'a str,
            log: String,
            head: usize,
            tail: usize,
            rejections: Vec<String>,
        }
        let log = match &task.kill_log {
            Some(path) => {
                match logfile::excerpt(&self.logs.resolve(path), LOG_HEAD_LINES, LOG_TAIL_LINES) {
                    Ok(excerpt) => excerpt.to_string(),
                    Err(e) => format!("(the log {} cannot be read: {e})", path.display()),
                }
            }
            None => "(no log was recorded)".to_owned(),
        };
        let ctx = DecomposePrompt {
            task,
            kind,
            log,
            head: LOG_HEAD_LINES,
            tail: LOG_TAIL_LINES,
            rejections: rejections(task),
        };
        let call = self.call(
            Role::Decompose,
            task.id.as_str(),
            1,
            self.ctx.prompts.render("decompose", &ctx)?,
            deadline::after(self.config().stage_timeout),
        );
        let (result, _) = self
            .caller
            .structured::<DecomposeAnswer>(call, |a| {
                self.check_dep_ids("subtasks", &a.subtasks)?;
                not_on_the_parent(&task.id, &a.subtasks)
            })
            .await?;
        // A killed decomposer is not decomposed again: the subject waits for a person.
        Ok(match result {
            Structured::Interrupted => None,
            Structured::Answer(answer) => Some(Ok(answer)),
            Structured::Unusable { reason, .. } => {
                Some(Err(format!("could not be decomposed: {reason}")))
            }
        })
    }

    /// One batch: the subtasks (`t-3a`, `t-3b`, …, inheriting the parent's priority and
    /// dependencies), the parent marked decomposed, and dependents of the parent rewired to
    /// wait for all subtasks.
    fn replace_with_subtasks(
        &self,
        parent: Task,
        answer: &DecomposeAnswer,
    ) -> (Vec<Change>, Event) {
        let ids = self.board.subtask_ids(&parent.id, answer.subtasks.len());
        let mut run = self.board.run.clone();
        let mut subtasks = self.materialize(
            &answer.subtasks,
            Some(ids.clone()),
            &mut run,
            parent.id.as_str(),
        );
        for sub in &mut subtasks {
            sub.parent = Some(parent.id.clone());
            sub.priority = sub.priority.or(parent.priority);
            sub.computed_priority = parent.computed_priority;
            sub.rank = parent.rank;
            for dep in &parent.deps {
                if !sub.deps.contains(dep) {
                    sub.deps.push(dep.clone());
                }
            }
        }
        let mut changes: Vec<Change> = subtasks.into_iter().map(Change::Task).collect();
        let mut replaced = parent.clone();
        replaced.status = TaskStatus::Decomposed;
        changes.push(Change::Task(replaced));
        for dependent in self
            .board
            .tasks
            .values()
            .filter(|t| t.deps.contains(&parent.id))
        {
            let mut rewired = dependent.clone();
            rewired.deps.retain(|d| *d != parent.id);
            rewired.deps.extend(ids.iter().cloned());
            changes.push(Change::Task(rewired));
        }
        let event = Event::Decomposed {
            task: parent.id,
            into: ids,
        };
        (changes, event)
    }
}

/// Refuses a subtask that depends on the task it replaces: that task is decomposed with
/// this answer, so it never finishes, and rewired to its subtasks it would be a cycle.
fn not_on_the_parent(parent: &TaskId, subtasks: &[ProposedTask]) -> Result<(), String> {
    for (i, task) in subtasks.iter().enumerate() {
        if task
            .deps
            .iter()
            .any(|d| matches!(d, DepRef::Id(id) if id.as_str() == parent.as_str()))
        {
            return Err(format!(
                "subtasks[{i}].deps names {parent}, the task these subtasks replace: name \
                 another subtask (by index) instead"
            ));
        }
    }
    Ok(())
}

/// How many of a task's latest rejections the decomposer is shown, and how much of each.
const REJECTIONS_SHOWN: usize = 10;
const REJECTION_BYTES: usize = 2 * 1024;

/// The reasons of `task`'s latest rejections (its tombstones that are not kills), oldest
/// first, each bounded: what the verifiers found wrong, for the decomposer.
fn rejections(task: &Task) -> Vec<String> {
    let rejected: Vec<&str> = task
        .tombstones
        .iter()
        .map(|t| t.reason.as_str())
        .filter(|r| r.starts_with("rejected by"))
        .collect();
    rejected[rejected.len().saturating_sub(REJECTIONS_SHOWN)..]
        .iter()
        .map(|r| crate::output::truncate_middle(r, REJECTION_BYTES))
        .collect()
}

/// What DECOMPOSE takes: a killed task, or an issue whose investigator was killed.
enum Killed {
    Task(Box<Task>),
    Issue(Issue),
}

/// `task` blocked for `reason`, and the event that says so.
fn blocked(mut task: Task, reason: String) -> (Vec<Change>, Event) {
    task.status = TaskStatus::Blocked;
    task.blocked_reason = Some(reason.clone());
    let event = Event::TaskBlocked {
        task: task.id.clone(),
        reason,
    };
    (vec![Change::Task(task)], event)
}
