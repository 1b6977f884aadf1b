//! BUILD (seeds 000 and 004): the next unblocked task by priority, in a fresh agent session;
//! the signal from its final answer; the required gates; retries that carry the failure.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::call::{Call, Ending, until_deadline};
use super::{Engine, Flow, SpecDoc, bounded_failure, first_line};
use crate::agent::{FailureKind, Role};
use crate::error::Error;
use crate::event::Event;
use crate::gate::{GateContext, GateReport, GateStatus};
use crate::model::{
    Attempt as AttemptRecord, Board, Change, KillReason, Priority, Task, TaskId, TaskStatus,
    Tombstone,
};
use crate::signal::{self, TaskSignal};

/// How a task's turn in BUILD ended.
enum TaskEnd {
    Done,
    Blocked,
    Killed,
    Interrupted,
}

/// How one attempt ended.
enum Attempt {
    Done,
    Blocked(String),
    Failed(String),
    /// A required gate failed: its name, and the failure for the retry prompt.
    GateFailed(String, String),
    Killed(KillReason, Option<PathBuf>),
    Interrupted,
}

impl Engine {
    /// Builds tasks until none is ready; a kill ends the stage early (DECOMPOSE is next).
    pub(super) async fn build(&mut self) -> Result<Flow, Error> {
        let mut queue = ReadyQueue::new(&self.board);
        while let Some(id) = queue.pop() {
            match self.build_task(&id).await? {
                TaskEnd::Done => queue.finished(&id),
                TaskEnd::Blocked => {}
                TaskEnd::Killed => break,
                TaskEnd::Interrupted => return Ok(Flow::Interrupted),
            }
        }
        Ok(Flow::Continue)
    }

    /// Runs attempts of one task until it is done, blocked, killed or interrupted.
    async fn build_task(&mut self, id: &TaskId) -> Result<TaskEnd, Error> {
        let mut deadline = Instant::now() + self.config().stage_timeout;
        loop {
            if self.stopped() {
                return Ok(TaskEnd::Interrupted);
            }
            let task = self.task(id)?;
            let round = task.round_attempts() + 1;
            if round > self.config().retries + 1 {
                let last = task.last_failure.as_deref().map(first_line);
                let reason = format!(
                    "gave up after {} attempts: {}",
                    round - 1,
                    last.unwrap_or_else(|| "no detail".into())
                );
                return self.block_task(task, reason, None).await;
            }
            self.emit(Event::TaskStarted {
                task: id.clone(),
                name: task.name.clone(),
                attempt: round,
            });
            let mut tried = None;
            let attempt = self
                .attempt(&task, round, &mut deadline, &mut tried)
                .await?;
            let mut after = task.clone();
            after.attempts += 1;
            let memo = self.memo(&task, tried, &attempt);
            match attempt {
                Attempt::Done => return self.finish_task(after, memo).await,
                Attempt::Blocked(reason) => return self.block_task(after, reason, memo).await,
                Attempt::Killed(reason, log) => {
                    return self.kill_task(after, reason, log, memo).await;
                }
                Attempt::Interrupted => return Ok(TaskEnd::Interrupted),
                Attempt::Failed(failure) | Attempt::GateFailed(_, failure) => {
                    self.retry_task(after, round, failure, memo).await?;
                }
            }
        }
    }

    /// The run state with this attempt remembered (seed 003's recent attempts), to persist
    /// with the attempt's result; `None` for an interrupted attempt, which is run again.
    fn memo(&self, task: &Task, tried: Option<String>, attempt: &Attempt) -> Option<Change> {
        let result = match attempt {
            Attempt::Done => "done".to_owned(),
            Attempt::Blocked(reason) => format!("blocked: {reason}"),
            Attempt::Failed(failure) => format!("failed: {}", first_line(failure)),
            Attempt::GateFailed(gate, _) => format!("gates failed: {gate}"),
            Attempt::Killed(reason, _) => format!("killed: {reason}"),
            Attempt::Interrupted => return None,
        };
        let tried =
            tried.unwrap_or_else(|| format!("attempt {} of {}", task.attempts + 1, task.name));
        let record = AttemptRecord::new(
            self.board.run.iteration,
            task.id.clone(),
            tried,
            result,
            super::logs::now_rfc3339(),
        );
        let mut run = self.board.run.clone();
        run.remember_attempt(record, self.config().recent_attempts);
        Some(Change::Run(run))
    }

    /// One agent run and, if it claims done, the gates. Time spent waiting out rate limits
    /// and transient failures moves `deadline`. `tried` gets the first line of the agent's
    /// answer.
    async fn attempt(
        &mut self,
        task: &Task,
        round: u32,
        deadline: &mut Instant,
        tried: &mut Option<String>,
    ) -> Result<Attempt, Error> {
        let mut call = Call {
            role: Role::Build,
            subject: Some(task.id.to_string()),
            attempt: task.attempts + 1,
            prompt: self.build_prompt(task, round)?,
            deadline: *deadline,
        };
        let ending = self.caller.call(&mut call, None).await?;
        *deadline = call.deadline;
        let run = match ending {
            Ending::Answer(run) => run,
            Ending::Interrupted => return Ok(Attempt::Interrupted),
            Ending::Killed { reason, log } => return Ok(Attempt::Killed(reason, log)),
            Ending::Failed {
                reason,
                kind: FailureKind::Fatal,
            } => return Err(Error::AgentFatal(reason)),
            Ending::Failed { reason, .. } => {
                return Ok(Attempt::Failed(format!("The agent run failed: {reason}")));
            }
        };
        *tried = summary(&run.final_text);
        let killed_log = run
            .log_path
            .as_deref()
            .map(|p| self.caller.logs.relative(p));
        match signal::parse(&run.final_text).task {
            TaskSignal::Done => self.run_gates(task, call.attempt, *deadline, killed_log).await,
            TaskSignal::Blocked { reason } if reason.trim().is_empty() => {
                Ok(Attempt::Blocked("the agent gave no reason".into()))
            }
            TaskSignal::Blocked { reason } => Ok(Attempt::Blocked(reason)),
            TaskSignal::Conflict => Ok(Attempt::Failed(
                "Your final answer contained both <TASK_DONE> and <TASK_BLOCKED …>; end it with exactly one of them.".into(),
            )),
            _ => Ok(Attempt::Failed(
                "Your final answer did not end with <TASK_DONE> on a line of its own, so the task was not counted as done.".into(),
            )),
        }
    }

    /// Runs the gates in order; the first required failure fails the attempt.
    async fn run_gates(
        &self,
        task: &Task,
        attempt: u32,
        deadline: Instant,
        agent_log: Option<PathBuf>,
    ) -> Result<Attempt, Error> {
        for gate in &self.inner.gates {
            let token = self.inner.stop.child_token();
            let log = self.caller.logs.run_log(
                &format!("gate-{}", gate.name()),
                task.id.as_str(),
                attempt,
            );
            let ctx = GateContext::new(&self.inner.workspace)
                .stop(token.clone())
                .log_path(&log);
            let backstop = self.config().grace + Duration::from_secs(5);
            let Some(report) = until_deadline(deadline, &token, backstop, gate.check(ctx)).await
            else {
                return Ok(Attempt::Killed(KillReason::Timeout, agent_log));
            };
            let report = report?;
            self.emit(Event::GateFinished {
                task: task.id.clone(),
                gate: report.name.clone(),
                required: report.required,
                status: report.status.clone(),
                duration: report.duration,
            });
            if self.stopped() {
                return Ok(Attempt::Interrupted);
            }
            if report.status == GateStatus::Stopped {
                return Ok(Attempt::Killed(KillReason::Timeout, agent_log));
            }
            if report.blocks() {
                return Ok(Attempt::GateFailed(
                    report.name.clone(),
                    gate_failure(&report),
                ));
            }
        }
        Ok(Attempt::Done)
    }

    fn build_prompt(&self, task: &Task, round: u32) -> Result<String, Error> {
        #[derive(Serialize)]
        struct Ctx<'a> {
            spec: &'a SpecDoc,
            task: &'a Task,
            completed: Vec<&'a str>,
            gates: Vec<&'a str>,
            attempt: u32,
            failure: Option<&'a str>,
            attempts: &'a [AttemptRecord],
        }
        let ctx = Ctx {
            spec: &self.spec,
            task,
            completed: self.recent.iter().map(String::as_str).collect(),
            gates: self.inner.gates.iter().map(|g| g.name()).collect(),
            attempt: round,
            failure: task.last_failure.as_deref(),
            attempts: &self.board.run.attempts,
        };
        let template = if round > 1 { "retry" } else { "build" };
        Ok(self.inner.prompts.render(template, &ctx)?)
    }

    async fn finish_task(
        &mut self,
        mut task: Task,
        memo: Option<Change>,
    ) -> Result<TaskEnd, Error> {
        task.status = TaskStatus::Done;
        task.last_failure = None;
        let (id, name) = (task.id.clone(), task.name.clone());
        self.commit(with_memo(task, memo)).await?;
        self.remember_finished(&name);
        self.emit(Event::TaskDone { task: id });
        Ok(TaskEnd::Done)
    }

    async fn block_task(
        &mut self,
        mut task: Task,
        reason: String,
        memo: Option<Change>,
    ) -> Result<TaskEnd, Error> {
        task.status = TaskStatus::Blocked;
        task.blocked_reason = Some(reason.clone());
        let id = task.id.clone();
        self.commit(with_memo(task, memo)).await?;
        self.emit(Event::TaskBlocked { task: id, reason });
        Ok(TaskEnd::Blocked)
    }

    async fn retry_task(
        &mut self,
        mut task: Task,
        round: u32,
        failure: String,
        memo: Option<Change>,
    ) -> Result<(), Error> {
        task.last_failure = Some(bounded_failure(&failure));
        let id = task.id.clone();
        self.commit(with_memo(task, memo)).await?;
        self.emit(Event::TaskRetry {
            task: id,
            attempt: round,
            reason: first_line(&failure),
        });
        Ok(())
    }

    /// Records a kill (seed 000: `kill_reason`, `kill_log`, a tombstone); DECOMPOSE follows.
    async fn kill_task(
        &mut self,
        mut task: Task,
        reason: KillReason,
        log: Option<PathBuf>,
        memo: Option<Change>,
    ) -> Result<TaskEnd, Error> {
        let limit = match reason {
            KillReason::Timeout => format!(
                "stopped by the timeout ({})",
                humantime::format_duration(
                    self.config().stage_timeout.min(self.config().agent_timeout)
                )
            ),
            _ => format!(
                "stopped at the context limit ({:.0}%)",
                self.config().context.kill * 100.0
            ),
        };
        task.kill_reason = Some(reason);
        task.kill_log = log.clone();
        task.tombstones.push(Tombstone {
            reason: limit,
            at: super::logs::now_rfc3339(),
        });
        let id = task.id.clone();
        self.commit(with_memo(task, memo)).await?;
        self.emit(Event::TaskKilled {
            task: id,
            reason,
            log,
        });
        Ok(TaskEnd::Killed)
    }
}

/// The task's change and, in the same batch, the run state that remembers the attempt.
fn with_memo(task: Task, memo: Option<Change>) -> Vec<Change> {
    std::iter::once(Change::Task(task)).chain(memo).collect()
}

/// What an attempt tried, for the recent-attempts memory: the first line of the agent's
/// answer that is not a marker.
fn summary(answer: &str) -> Option<String> {
    answer
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("<TASK_") && *l != "RALPH_DONE")
        .map(first_line)
}

/// The failure for the retry prompt: a headline with the output's last line (usually the
/// error), then the bounded output itself.
pub(super) fn gate_failure(report: &GateReport) -> String {
    let output = report.output.to_string();
    let last = output.lines().rev().find(|l| !l.trim().is_empty());
    let headline = match last {
        Some(line) => format!(
            "Quality gate `{}` {}: {}",
            report.name,
            report.status,
            line.trim()
        ),
        None => format!(
            "Quality gate `{}` {} with no output.",
            report.name, report.status
        ),
    };
    format!(
        "{headline}\n\nIts output:\n\n```\n{}\n```",
        output.trim_end()
    )
}

/// Buildable tasks whose dependencies are finished, highest priority first, then by the
/// prioritizer's rank, then by creation order. Finishing a task releases its dependents, so
/// each pick costs O(log n) instead of a scan of the board.
pub(crate) struct ReadyQueue {
    heap: BinaryHeap<(Priority, Reverse<u32>, Reverse<usize>, TaskId)>,
    waiting: HashMap<TaskId, usize>,
    dependents: HashMap<TaskId, Vec<TaskId>>,
    keys: HashMap<TaskId, (Priority, Reverse<u32>, Reverse<usize>)>,
}

impl ReadyQueue {
    pub(crate) fn new(board: &Board) -> Self {
        let mut queue = ReadyQueue {
            heap: BinaryHeap::new(),
            waiting: HashMap::new(),
            dependents: HashMap::new(),
            keys: HashMap::new(),
        };
        for (index, task) in board.tasks.values().enumerate() {
            if !task.is_buildable() {
                continue;
            }
            let key = (
                task.effective_priority(),
                Reverse(task.rank.unwrap_or(u32::MAX)),
                Reverse(index),
            );
            let unmet: Vec<&TaskId> = task
                .deps
                .iter()
                .filter(|d| !board.tasks.get(*d).is_some_and(Task::is_finished))
                .collect();
            for dep in &unmet {
                queue
                    .dependents
                    .entry((*dep).clone())
                    .or_default()
                    .push(task.id.clone());
            }
            if unmet.is_empty() {
                queue.heap.push((key.0, key.1, key.2, task.id.clone()));
            } else {
                queue.waiting.insert(task.id.clone(), unmet.len());
                queue.keys.insert(task.id.clone(), key);
            }
        }
        queue
    }

    pub(crate) fn pop(&mut self) -> Option<TaskId> {
        self.heap.pop().map(|(.., id)| id)
    }

    /// `id` is done: dependents with no other unmet dependency become ready.
    fn finished(&mut self, id: &TaskId) {
        for dependent in self.dependents.remove(id).unwrap_or_default() {
            let Some(count) = self.waiting.get_mut(&dependent) else {
                continue;
            };
            *count -= 1;
            if *count == 0 {
                self.waiting.remove(&dependent);
                if let Some((p, r, i)) = self.keys.remove(&dependent) {
                    self.heap.push((p, r, i, dependent));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Change;

    #[test]
    fn ready_queue_orders_by_priority_then_rank_and_releases_dependents() {
        let mut board = Board::new();
        let mut low = Task::new("t-1", "docs").with_priority(Priority::Low);
        low.rank = Some(0);
        let mut b = Task::new("t-2", "b");
        b.rank = Some(2);
        let mut c = Task::new("t-3", "c");
        c.rank = Some(1);
        let waits = Task::new("t-4", "d")
            .with_deps(["t-1"])
            .with_priority(Priority::High);
        let done = Task::new("t-5", "e").with_status(TaskStatus::Done);
        board.apply_all([low, b, c, waits, done].into_iter().map(Change::Task));
        let mut q = ReadyQueue::new(&board);
        assert_eq!(q.pop().unwrap(), "t-3");
        assert_eq!(q.pop().unwrap(), "t-2");
        assert_eq!(q.pop().unwrap(), "t-1");
        assert!(q.pop().is_none());
        q.finished(&TaskId::new("t-1"));
        assert_eq!(q.pop().unwrap(), "t-4");
    }
}
