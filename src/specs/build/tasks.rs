//! The tasks of a spec: one fresh implementer session per attempt, its marker, then the
//! required gates; a failure goes into the next session's prompt.

use std::path::Path;

use serde::Serialize;

use super::SpecBuild;
use crate::agent::Role;
use crate::event::Event;
use crate::model::{KillReason, TaskId};
use crate::output::{bounded_failure, first_line};
use crate::runtime::attempt::{self, Attempt, AttemptEnd, gate_log_name};
use crate::runtime::call::Call;
use crate::runtime::deadline;
use crate::runtime::error::Error;
use crate::runtime::gates::GateRun;
use crate::runtime::gave_up;
use crate::runtime::logs::sanitize;
use crate::specs::implementation::{SpecEntry, Status, TaskEntry};
use crate::specs::logs::folder_log;
use crate::time::now_rfc3339;

/// How a task's turn ended.
pub(super) enum TaskTurn {
    Completed,
    Blocked,
    /// Its agent asked a person a question: the task waits for the answer.
    Asked,
    /// `once`: the run's one session is made; the task goes on next time.
    Paused,
    Interrupted,
}

impl SpecBuild {
    /// Sessions of one task until it is completed, blocked, out of retries or interrupted.
    /// A session counts against the retries when it ends (done, blocked or failed): one cut
    /// short by a stop, or by ralph's death, is run again under the same number.
    pub(super) async fn build_task(
        &mut self,
        dir: &Path,
        id: &str,
        index: usize,
        plan: &str,
    ) -> Result<TaskTurn, Error> {
        loop {
            if self.stopped() {
                return Ok(TaskTurn::Interrupted);
            }
            let task = self.spec(id)?.tasks[index].clone();
            if task.tries() > self.ctx.config.retries {
                let reason = gave_up(task.tries(), task.last_failure.as_deref());
                return self.block_task(id, index, reason);
            }
            let session = task.attempts.saturating_add(1);
            let prompt = self.task_prompt(id, &task, session, plan)?;
            if task.status != Status::InProgress {
                self.spec_mut(id)?.tasks[index].status = Status::InProgress;
                self.save()?;
            }
            // Announced only for an attempt whose agent runs: past the budget none does.
            if !self.caller.spent_out() {
                self.emit(Event::TaskStarted {
                    task: TaskId::new(task.id.as_str()),
                    name: task.description.clone(),
                    attempt: session,
                });
            }
            if self.ctx.config.once && self.step.is_some() {
                return Ok(TaskTurn::Paused);
            }
            let attempt = self.session(dir, &task, session, prompt).await?;
            let (mut ended, gate) = (attempt.end, attempt.gate);
            if ended != AttemptEnd::Interrupted
                && let Some(moved) = self.guard(&format!("task {}", task.id)).await?
            {
                ended = AttemptEnd::Failed(moved);
            }
            if ended != AttemptEnd::Interrupted {
                self.spec_mut(id)?.tasks[index].attempts = session;
                self.step = Some(format!("ran task {} (session {session})", task.id));
            }
            let failure = match ended {
                AttemptEnd::Done => return self.complete_task(id, index),
                AttemptEnd::Blocked(reason) => return self.block_task(id, index, reason),
                AttemptEnd::Question(question) => return self.ask_task(id, index, question),
                AttemptEnd::Interrupted => return Ok(TaskTurn::Interrupted),
                AttemptEnd::Failed(failure) => failure,
                AttemptEnd::Killed(limit) => killed(limit.reason(), gate.as_deref()),
            };
            if let Some(blocked) = self.record_failure(id, index, session, &failure)? {
                return Ok(blocked);
            }
        }
    }

    /// Records why session `session` of task `index` failed. When it was the task's last
    /// allowed session the task is blocked, and that turn returned; otherwise the retry is
    /// announced and `None` returned.
    fn record_failure(
        &mut self,
        id: &str,
        index: usize,
        session: u32,
        failure: &str,
    ) -> Result<Option<TaskTurn>, Error> {
        let task = &mut self.spec_mut(id)?.tasks[index];
        task.last_failure = Some(bounded_failure(failure));
        let task_id = TaskId::new(task.id.as_str());
        let tries = session.saturating_sub(task.asked);
        // The last allowed session failed: blocked now, with no retry announced.
        if tries > self.ctx.config.retries {
            return self
                .block_task(id, index, gave_up(tries, Some(failure)))
                .map(Some);
        }
        self.save()?;
        self.emit(Event::TaskRetry {
            task: task_id,
            attempt: session,
            reason: first_line(failure),
        });
        Ok(None)
    }

    fn task_prompt(
        &self,
        id: &str,
        task: &TaskEntry,
        session: u32,
        plan: &str,
    ) -> Result<String, Error> {
        #[derive(Serialize)]
        struct TaskPrompt<'a> {
            spec: &'a SpecEntry,
            task: &'a TaskEntry,
            criteria: Vec<&'a str>,
            completed: Vec<&'a TaskEntry>,
            completed_earlier: usize,
            plan: &'a str,
            gates: Vec<&'a str>,
            attempt: u32,
            failure: Option<&'a str>,
        }
        let entry = self.spec(id)?;
        let mut criteria: Vec<&str> = task
            .acceptance_criteria
            .iter()
            .map(String::as_str)
            .collect();
        if criteria.is_empty() {
            criteria.push("The task is implemented and the quality gates pass.");
        }
        let mut completed: Vec<&TaskEntry> = entry
            .tasks
            .iter()
            .filter(|t| t.status == Status::Completed)
            .collect();
        // The last few by name and the rest as a count: the prompt stays the same size
        // however many tasks the spec has.
        let completed_earlier = completed
            .len()
            .saturating_sub(crate::prompt::RECENT_COMPLETED);
        completed.drain(..completed_earlier);
        let ctx = TaskPrompt {
            spec: entry,
            task,
            criteria,
            completed,
            completed_earlier,
            plan,
            gates: self.gate_names(),
            attempt: session,
            failure: task.last_failure.as_deref(),
        };
        Ok(self.ctx.prompts.render(template(task), &ctx)?)
    }

    /// One implementer session: the runtime's one attempt (a fresh agent run, its marker,
    /// then the gates).
    async fn session(
        &self,
        dir: &Path,
        task: &TaskEntry,
        session: u32,
        prompt: String,
    ) -> Result<Attempt, Error> {
        let call = Call {
            announce: None,
            role: Role::Build,
            subject: Some(task.id.clone()),
            attempt: session,
            prompt,
            deadline: deadline::after(self.ctx.config.stage_timeout),
            log: folder_log(dir, Role::Build, session),
        };
        let id = TaskId::new(task.id.as_str());
        let gate_run = GateRun {
            home: self.home.as_ref(),
            ..self.ctx.gate_run(
                &self.emitter,
                call.deadline,
                (&id, &task.description, session),
            )
        };
        let gate_log = |gate: &str| {
            let name = gate_log_name(gate, &task.id, session);
            dir.join(format!("{}.log", sanitize(&name)))
        };
        attempt::run(&self.caller, call, &self.ctx.gates, gate_run, gate_log).await
    }

    fn complete_task(&mut self, id: &str, index: usize) -> Result<TaskTurn, Error> {
        let entry = &mut self.spec_mut(id)?.tasks[index];
        entry.status = Status::Completed;
        entry.last_failure = None;
        entry.completed_at = Some(now_rfc3339());
        let task = TaskId::new(entry.id.as_str());
        self.save()?;
        self.tasks_done += 1;
        self.emit(Event::TaskDone { task });
        Ok(TaskTurn::Completed)
    }

    /// Records the question task `index`'s agent asked: the task waits for a person's
    /// answer, and its session does not count against its retries.
    fn ask_task(&mut self, id: &str, index: usize, question: String) -> Result<TaskTurn, Error> {
        let task = self.spec(id)?.tasks[index].id.clone();
        // The journal first: a question whose task a crash left unmarked is answered, harmlessly.
        let asked =
            crate::runtime::questions::record(&self.ctx.workspace, &task, Role::Build, &question)?;
        let entry = &mut self.spec_mut(id)?.tasks[index];
        entry.question = Some(question);
        entry.asked = entry.asked.saturating_add(1);
        entry.last_failure = None;
        self.save()?;
        self.emit(asked);
        Ok(TaskTurn::Asked)
    }

    fn block_task(&mut self, id: &str, index: usize, reason: String) -> Result<TaskTurn, Error> {
        let entry = &mut self.spec_mut(id)?.tasks[index];
        entry.status = Status::Blocked;
        entry.blocked_reason = Some(reason.clone());
        let task = TaskId::new(entry.id.as_str());
        self.save()?;
        self.emit(Event::TaskBlocked { task, reason });
        Ok(TaskTurn::Blocked)
    }
}

/// The failure of a session a limit stopped, of the agent or of `gate`: build mode has no
/// DECOMPOSE, the next session does less.
fn killed(reason: KillReason, gate: Option<&str>) -> String {
    match gate {
        Some(gate) => format!("Quality gate `{gate}` did not finish in time."),
        None => {
            format!("The agent was stopped ({reason}) before it finished; do less per session.")
        }
    }
}

/// The prompt template of `task`'s next session: a retry carries the last failure.
pub(crate) fn template(task: &TaskEntry) -> &'static str {
    match task.last_failure {
        Some(_) => "task_retry",
        None => "task",
    }
}
