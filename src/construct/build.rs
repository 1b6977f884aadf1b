//! BUILD: the next unblocked task by priority, in a fresh agent session; the signal from
//! its final answer; the required gates; retries that carry the failure.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use tokio::time::Instant;
use tracing::Instrument;

use super::ready::ReadyQueue;
use super::{Engine, Flow, bounded_failure, first_line};
use crate::agent::Role;
use crate::event::Event;
use crate::model::{Change, RecentAttempt, Task, TaskId, TaskStatus};
use crate::outcome::Outcome;
use crate::runtime::Context;
use crate::runtime::attempt::{self, Attempt, AttemptEnd, gate_log_name};
use crate::runtime::call::{Call, Caller, Limit};
use crate::runtime::deadline;
use crate::runtime::error::Error;
use crate::runtime::gates::GateRun;
use crate::runtime::gave_up;
use crate::runtime::logs::{Emitter, Logs};
use crate::runtime::spec::SpecDoc;
use crate::time::now_rfc3339;

/// How a task's turn in BUILD ended.
pub(super) enum TaskEnd {
    Done,
    Blocked,
    /// Its agent asked a person a question: the task waits for the answer.
    Asked,
    Killed,
    Interrupted,
    /// The run stops with this outcome.
    Stop(Outcome),
}

/// The same required gate failing with the same output for one task after another, with no
/// task passing the gates in between: a broken gate, not broken tasks.
#[derive(Debug)]
pub(super) struct GateStreak {
    gate: String,
    failure: String,
    tasks: Vec<TaskId>,
}

impl GateStreak {
    /// Adds `task`'s failure of `gate`; the run's outcome once a second task failed the same
    /// way.
    fn add(
        streak: &mut Option<GateStreak>,
        task: &TaskId,
        gate: &str,
        failure: &str,
    ) -> Option<Outcome> {
        match streak {
            Some(s) if s.gate == gate && s.failure == failure => {
                if !s.tasks.contains(task) {
                    s.tasks.push(task.clone());
                }
            }
            _ => {
                *streak = Some(GateStreak {
                    gate: gate.to_owned(),
                    failure: failure.to_owned(),
                    tasks: vec![task.clone()],
                });
            }
        }
        let s = streak.as_ref()?;
        (s.tasks.len() >= 2).then(|| Outcome::GateBroken {
            gate: s.gate.clone(),
            failure: bounded_failure(&s.failure),
            tasks: s.tasks.clone(),
        })
    }
}

impl Engine {
    /// Builds tasks until none is ready; a kill ends the stage early (DECOMPOSE is next).
    /// With `build_concurrency` above 1 and a git repository, several at once, each in its
    /// own work tree ([`build_at_once`](Self::build_at_once)).
    pub(super) async fn build(&mut self) -> Result<Flow, Error> {
        let at_once = self.config().build_concurrency;
        if at_once > 1 {
            match self.why_not_at_once() {
                None => return self.build_at_once(at_once).await,
                Some(why) => self.emit(Event::Warning {
                    message: format!(
                        "build_concurrency = {at_once} {why}; building one task at a time"
                    ),
                }),
            }
        }
        let mut queue = ReadyQueue::new(&self.board);
        while let Some(id) = queue.pop() {
            if let Some(stop) = self.asked_to_stop() {
                return Ok(stop);
            }
            match self.build_task(&id).await? {
                TaskEnd::Done => queue.finished(&id),
                TaskEnd::Blocked | TaskEnd::Asked => {}
                TaskEnd::Killed => break,
                TaskEnd::Interrupted => return Ok(Flow::Interrupted),
                TaskEnd::Stop(outcome) => return Ok(Flow::Stop(outcome)),
            }
        }
        Ok(Flow::Continue)
    }

    /// One task's turn in the workspace itself: in a git repository, what it changed is
    /// committed on the user's branch when it passes, and set aside when it ends otherwise
    /// (see `in_place`).
    async fn build_task(&mut self, id: &TaskId) -> Result<TaskEnd, Error> {
        if let Some(end) = self.merge_kept(&self.task(id)?).await? {
            return Ok(end);
        }
        // Nothing kept, or the kept work conflicts with what was merged since: built anew.
        let task = self.task(id)?;
        self.begin_turn(&task).await?;
        self.give_back_asked(&task).await?;
        let end = self.attempts(id).await?;
        self.end_turn(&task, &end).await?;
        Ok(end)
    }

    /// Runs attempts of one task until it is done, blocked, killed or interrupted.
    async fn attempts(&mut self, id: &TaskId) -> Result<TaskEnd, Error> {
        let mut deadline = deadline::after(self.config().stage_timeout);
        loop {
            if self.stopped() {
                return Ok(TaskEnd::Interrupted);
            }
            self.keep_lock_note();
            let task = self.task(id)?;
            let round = task.round_attempts() + 1;
            if let Some(end) = self.give_up_if_out_of_retries(&task).await? {
                return Ok(end);
            }
            let span = tracing::info_span!(target: "ralph", "task", task = %id, attempt = round);
            let prompt = self.build_prompt(&task, round)?;
            let attempt = self
                .worker()
                .attempt(&task, prompt, deadline)
                .instrument(span)
                .await?;
            deadline = attempt.deadline;
            let attempt = self.land_in_place(&task, attempt).await?;
            if let Some(end) = self.settle(&task, attempt).await? {
                return Ok(end);
            }
            // Failed, with attempts left: the retry waits for the next run when a person
            // asked this one to stop.
            if let Some(Flow::Stop(outcome)) = self.asked_to_stop() {
                return Ok(TaskEnd::Stop(outcome));
            }
        }
    }

    /// Blocks `task` when its round has no attempt left.
    pub(super) async fn give_up_if_out_of_retries(
        &mut self,
        task: &Task,
    ) -> Result<Option<TaskEnd>, Error> {
        let round = task.round_attempts() + 1;
        if round <= self.config().retries.saturating_add(1) {
            return Ok(None);
        }
        let reason = gave_up(round - 1, task.last_failure.as_deref());
        self.block_task(task.clone(), reason, None).await.map(Some)
    }

    /// Records how an attempt of `task` (as it was before the attempt) ended: done,
    /// blocked, killed, or failed and retried (or blocked on its last attempt). Returns how
    /// the task's turn ended, or `None` when the task is to be built again.
    pub(super) async fn settle(
        &mut self,
        task: &Task,
        attempt: Attempt,
    ) -> Result<Option<TaskEnd>, Error> {
        let id = &task.id;
        let round = task.round_attempts() + 1;
        let mut after = task.clone();
        after.attempts += 1;
        // Whatever the kept work was, this attempt merged it, kept it again, or went past it.
        after.kept = attempt.kept.clone();
        let memo = self.memo(task, &attempt);
        let broken = match (&attempt.end, &attempt.gate) {
            (AttemptEnd::Failed(failure), Some(gate)) => {
                GateStreak::add(&mut self.gate_streak, id, gate, failure)
            }
            (AttemptEnd::Done, _) => {
                self.gate_streak = None;
                None
            }
            _ => None,
        };
        let end = match attempt.end {
            AttemptEnd::Done => {
                after.commit = attempt.commit;
                after.build_log = attempt.log;
                self.finish_task(after, memo).await?
            }
            AttemptEnd::Blocked(reason) => self.block_task(after, reason, memo).await?,
            AttemptEnd::Question(question) => self.ask_task(after, question, memo).await?,
            AttemptEnd::Killed(limit) => self.kill_task(after, limit, attempt.log, memo).await?,
            AttemptEnd::Interrupted => TaskEnd::Interrupted,
            // The last allowed attempt failed: blocked now, with no retry announced.
            AttemptEnd::Failed(failure) if round > self.config().retries => {
                after.last_failure = Some(bounded_failure(&failure));
                let reason = gave_up(round, Some(&failure));
                let end = self.block_task(after, reason, memo).await?;
                broken.map_or(end, TaskEnd::Stop)
            }
            AttemptEnd::Failed(failure) => {
                self.retry_task(after, failure, memo).await?;
                return Ok(broken.map(TaskEnd::Stop));
            }
        };
        Ok(Some(end))
    }

    /// What runs an attempt in the workspace itself.
    pub(super) fn worker(&self) -> Worker {
        Worker {
            ctx: self.ctx.clone(),
            caller: self.caller.clone(),
            emitter: self.emitter.clone(),
            logs: self.logs.clone(),
            work_dir: self.ctx.workspace.clone(),
            home: self.home.clone(),
        }
    }

    /// The run state with this attempt remembered (seed 003's recent attempts), to persist
    /// with the attempt's result; `None` for an interrupted attempt, which is run again.
    fn memo(&self, task: &Task, attempt: &Attempt) -> Option<Change> {
        let round = task.round_attempts() + 1;
        let allowed = self.config().retries.saturating_add(1);
        let retry_or_block = || {
            if round < allowed {
                format!("retry (attempt {} of {allowed})", round + 1)
            } else {
                "blocked: out of attempts; a person decides".to_owned()
            }
        };
        let (result, next) = match (&attempt.end, &attempt.gate) {
            (AttemptEnd::Blocked(_), _) if attempt.kept.is_some() => (
                "passed, but files in the way kept it from being merged".to_owned(),
                "a person clears the way, then it is merged".to_owned(),
            ),
            (AttemptEnd::Done, _) => ("done".to_owned(), "verify".to_owned()),
            (AttemptEnd::Blocked(reason), _) => {
                (format!("blocked: {reason}"), "a person decides".to_owned())
            }
            (AttemptEnd::Question(question), _) => (
                format!("asked a person: {}", first_line(question)),
                "the same attempt again, with the answer".to_owned(),
            ),
            (AttemptEnd::Failed(_), Some(gate)) => {
                (format!("gates failed: {gate}"), retry_or_block())
            }
            (AttemptEnd::Failed(failure), None) => {
                (format!("failed: {}", first_line(failure)), retry_or_block())
            }
            (AttemptEnd::Killed(limit), _) => (
                format!("killed: {}", limit.reason()),
                "decompose".to_owned(),
            ),
            (AttemptEnd::Interrupted, _) => return None,
        };
        let tried = attempt
            .tried
            .clone()
            .unwrap_or_else(|| format!("attempt {} of {}", task.attempts + 1, task.name));
        let record = RecentAttempt::new(
            self.board.run.iteration,
            task.id.clone(),
            tried,
            result,
            now_rfc3339(),
        )
        .with_next(next);
        let mut run = self.board.run.clone();
        run.remember_attempt(record, self.config().recent_attempts);
        Some(Change::Run(run))
    }

    pub(super) fn build_prompt(&self, task: &Task, round: u32) -> Result<String, Error> {
        #[derive(Serialize)]
        struct BuildPrompt<'a> {
            spec: &'a SpecDoc,
            task: &'a Task,
            completed: Vec<&'a str>,
            completed_earlier: usize,
            gates: Vec<&'a str>,
            attempt: u32,
            failure: Option<&'a str>,
            attempts: &'a [RecentAttempt],
            branch: Option<String>,
        }
        let finished = self
            .board
            .tasks
            .values()
            .filter(|t| t.is_finished())
            .count();
        let ctx = BuildPrompt {
            spec: &self.spec,
            task,
            completed: self.recent.iter().map(String::as_str).collect(),
            completed_earlier: finished.saturating_sub(self.recent.len()),
            gates: self.ctx.gates.iter().map(|g| g.name()).collect(),
            attempt: round,
            failure: task.last_failure.as_deref(),
            attempts: &self.board.run.attempts,
            branch: self
                .home
                .as_ref()
                .map(|home| match self.config().build_concurrency {
                    // Tasks at once: each in its own work tree, on its own branch.
                    1 => home.name(),
                    _ => format!("branch {}", crate::runtime::worktrees::branch(&task.id)),
                }),
        };
        Ok(self.ctx.prompts.render(template(task), &ctx)?)
    }

    async fn finish_task(
        &mut self,
        mut task: Task,
        memo: Option<Change>,
    ) -> Result<TaskEnd, Error> {
        task.status = TaskStatus::Done;
        task.last_failure = None;
        // The evidence a complete run rests on: the gates this attempt had to pass.
        task.gates = self
            .ctx
            .gates
            .iter()
            .filter(|g| g.required())
            .map(|g| g.name().to_owned())
            .collect();
        let (id, name) = (task.id.clone(), task.name.clone());
        let mut memo = memo;
        if self.home.is_none()
            && let Some(Change::Run(run)) = &mut memo
        {
            // Outside git the workspace is the tree the gates just passed on (in git, the
            // commit is recorded as it is made).
            run.gates_passed_on = Some(String::new());
        }
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

    /// Records the question `task`'s agent asked: the task waits for a person's answer,
    /// and the attempt that asked does not count against its retries.
    async fn ask_task(
        &mut self,
        mut task: Task,
        question: String,
        memo: Option<Change>,
    ) -> Result<TaskEnd, Error> {
        // The journal first: a question whose task a crash left unmarked is answered, harmlessly.
        let asked = crate::runtime::questions::record(
            &self.ctx.workspace,
            task.id.as_str(),
            Role::Build,
            &question,
        )?;
        task.retry_base = task.retry_base.saturating_add(1);
        task.last_failure = None;
        task.question = Some(question);
        self.commit(with_memo(task, memo)).await?;
        self.emit(asked);
        Ok(TaskEnd::Asked)
    }

    async fn retry_task(
        &mut self,
        mut task: Task,
        failure: String,
        memo: Option<Change>,
    ) -> Result<(), Error> {
        task.last_failure = Some(bounded_failure(&failure));
        let id = task.id.clone();
        // The attempt that failed (`task` counts it already), as its log names it.
        let attempt = task.attempts;
        self.commit(with_memo(task, memo)).await?;
        self.emit(Event::TaskRetry {
            task: id,
            attempt,
            reason: first_line(&failure),
        });
        Ok(())
    }

    /// Records a kill (seed 000: `kill_reason`, `kill_log`, a tombstone); DECOMPOSE follows.
    async fn kill_task(
        &mut self,
        mut task: Task,
        limit: Limit,
        log: Option<PathBuf>,
        memo: Option<Change>,
    ) -> Result<TaskEnd, Error> {
        let reason = limit.reason();
        task.record_kill(reason, log.clone(), &self.kill_note(limit, Role::Build));
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

/// What one attempt needs, owned, so that the attempts of several tasks can run at once
/// (`build_concurrency`): one agent run and, if it claims done, the gates, in `work_dir`.
#[derive(Clone)]
pub(super) struct Worker {
    pub(super) ctx: Arc<Context>,
    caller: Caller,
    emitter: Emitter,
    logs: Logs,
    /// Where the agent and the gates work: the workspace, or the task's work tree.
    work_dir: PathBuf,
    /// The user's branch, when the attempt works in the user's own work tree.
    home: Option<crate::runtime::home::Home>,
}

impl Worker {
    /// This worker in `work_tree` instead.
    pub(super) fn in_work_tree(mut self, work_tree: PathBuf) -> Worker {
        self.caller = self.caller.in_work_tree(work_tree.clone());
        self.work_dir = work_tree;
        self.home = None;
        self
    }

    /// One agent run and, if it claims done, the gates (the runtime's one attempt), under
    /// `deadline`; the attempt returned carries it on, moved by the time waited out (rate
    /// limits, transient failures). A kill, of the agent or of a gate by the deadline,
    /// sends the task to DECOMPOSE with the agent's log.
    pub(super) async fn attempt(
        &self,
        task: &Task,
        prompt: String,
        deadline: Instant,
    ) -> Result<Attempt, Error> {
        let attempt = task.attempts.saturating_add(1);
        let call = Call {
            role: Role::Build,
            subject: Some(task.id.to_string()),
            attempt,
            log: self
                .logs
                .run_log(task.id.as_str(), Role::Build.as_str(), attempt),
            prompt,
            deadline,
            // Announced as its agent starts: past the budget none does.
            announce: Some(Event::TaskStarted {
                task: task.id.clone(),
                name: task.name.clone(),
                attempt,
            }),
        };
        let gate_run = GateRun {
            workspace: &self.work_dir,
            home: self.home.as_ref(),
            ..self
                .ctx
                .gate_run(&self.emitter, deadline, (&task.id, &task.name, attempt))
        };
        let logs = &self.logs;
        let gate_log =
            |gate: &str| logs.stage_file(&gate_log_name(gate, task.id.as_str(), attempt));
        attempt::run(&self.caller, call, &self.ctx.gates, gate_run, gate_log).await
    }
}

/// The task's change and, in the same batch, the run state that remembers the attempt.
fn with_memo(task: Task, memo: Option<Change>) -> Vec<Change> {
    std::iter::once(Change::Task(task)).chain(memo).collect()
}

/// The prompt template of `task`'s next attempt: a retry carries the last failure.
pub(super) fn template(task: &Task) -> &'static str {
    match task.round_attempts() {
        0 => "build",
        _ => "retry",
    }
}
