//! Build mode over `implementation.json` (seed 004) with the planning phase (seed 002).
//!
//! ```text
//! for each spec not completed, by priority:
//!   PLAN      resume rules over specs/plans/<rel>.{md,json}; a read-only planner when needed
//!   TASKS     each pending task in order, one fresh agent session per attempt:
//!               task prompt (+ plan) -> <TASK_DONE> | <TASK_BLOCKED> -> required gates
//!               -> completed | retry with the failure (bounded) | blocked (the spec stops)
//!   VERIFY    the whole spec, read-only, with the plan and the changed files:
//!               accept -> git commit named after the spec, spec completed, PROGRESS.md
//!               PLAN_INVALIDATION: <reason> -> plan archived, re-plan, rework task
//!               reject -> a task carrying the feedback, same plan
//! ```
//!
//! Every transition is written to `implementation.json` (atomically) before the next agent,
//! gate or git command runs, so a killed process resumes where the work stood. A verdict is
//! written together with its consequences: an acceptance as the spec's `verified` (then the
//! commit; a restart commits what is uncommitted, or records HEAD when it is already the
//! spec's commit), an invalidation as its rework task plus `planInvalidation` (then the plan
//! files; a restart finishes that). Neither is asked of the verifier again. Failed rounds
//! of a spec (planner runs without a plan, rejections) count against
//! `[planning] max_attempts`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::build::gate_failure;
use super::call::{Call, Caller, Ending, Structured, backoff, until_deadline};
use super::logs::{Emitter, Logs, now_rfc3339};
use super::progress_md::{self, ProgressMd};
use super::{bounded_failure, first_line};
use crate::agent::{FailureKind, Role};
use crate::answer::{VerdictKind, VerifyAnswer};
use crate::error::Error;
use crate::event::Event;
use crate::gate::GateContext;
use crate::git::{Git, GitError};
use crate::model::TaskId;
use crate::outcome::{BlockedItem, SpecsOutcome};
use crate::output::truncate_middle;
use crate::planning::{PlanFiles, PlanStatus, Resume, plan_from_answer};
use crate::ralph::Inner;
use crate::signal::{self, TaskSignal};
use crate::store::implementation::{
    Implementation, ImplementationStore, SpecEntry, Status, TaskEntry,
};

/// How much of the scratchpad goes into the planner's prompt.
const SCRATCHPAD_BYTES: usize = 8 * 1024;
/// The planner's notes file in the workspace (seed 002); its content goes into the prompt.
const SCRATCHPAD: &str = "SCRATCHPAD.md";
/// How many `git status` lines the verifier sees.
const CHANGES_SHOWN: usize = 200;

/// The path of one agent run's log in a spec's run folder: `plan-attempt-N.log` (N the
/// plan's attempt), `impl-attempt-N.log` (N counts the implementer sessions of this run),
/// `verify.log`; a number is added when the name is taken.
pub(crate) fn run_log(dir: &Path, role: Role, attempt: u32) -> PathBuf {
    let base = match role {
        Role::Planner => format!("plan-attempt-{attempt}"),
        Role::Build => {
            let n = (1..)
                .find(|n| !dir.join(format!("impl-attempt-{n}.log")).exists())
                .unwrap_or(1);
            format!("impl-attempt-{n}")
        }
        Role::Verify => "verify".to_owned(),
        other => format!("{other}-attempt-{attempt}"),
    };
    let first = dir.join(format!("{base}.log"));
    if !first.exists() {
        return first;
    }
    (2..)
        .map(|n| dir.join(format!("{base}-{n}.log")))
        .find(|p| !p.exists())
        .unwrap_or(first)
}

/// Runs build mode to an outcome.
pub(crate) async fn run(inner: Arc<Inner>) -> Result<SpecsOutcome, Error> {
    let mut build = SpecBuild::start(inner).await?;
    let result = build.run().await;
    match &result {
        Ok(outcome) => build.emit(Event::SpecsFinished {
            outcome: outcome.clone(),
        }),
        // The run log then ends with why the run stopped, as the caller sees it.
        Err(e) => build.emit(Event::Warning {
            message: format!("build mode stopped: {e}"),
        }),
    }
    result
}

/// How one spec's turn ended.
enum SpecEnd {
    Completed,
    Stop(SpecsOutcome),
}

/// How a task's turn ended.
enum TaskEnd {
    Completed,
    Blocked,
    Interrupted,
}

/// How one implementer session ended.
enum Session {
    Done,
    Blocked(String),
    Failed(String),
    Interrupted,
}

/// What the planning step gave.
enum PlanStep {
    Ready(String),
    Failed(String),
    Interrupted,
}

/// The verifier's judgement of a spec.
enum Judgement {
    Accept,
    Reject(String),
    Invalidate { reason: String, full: String },
    Interrupted,
}

struct SpecBuild {
    inner: Arc<Inner>,
    base: Caller,
    store: ImplementationStore,
    plans: PlanFiles,
    git: Git,
    plan: Implementation,
    specs_done: usize,
    tasks_done: usize,
}

impl SpecBuild {
    async fn start(inner: Arc<Inner>) -> Result<Self, Error> {
        let config = &inner.config.planning;
        let store = ImplementationStore::new(inner.workspace.join(&config.implementation));
        let plan = store
            .load()?
            .ok_or_else(|| Error::NoImplementation(store.path().to_path_buf()))?;
        let git = Git::new(&inner.workspace);
        if !git.is_repo().await {
            // Checked up front: finding out at the first commit would waste the spec's work.
            return Err(GitError::NotARepo(inner.workspace.clone()).into());
        }
        let plans = PlanFiles::new(&inner.workspace, &config.specs_dir);
        // Refused before any agent runs: a bad path found at its spec's turn would come
        // after the work on the specs before it.
        // The error names the file and the key, as a person edits implementation.json by hand.
        for &index in &plan.build_order() {
            let spec = &plan.specs[index];
            plans.spec_rel(&spec.file).map_err(|e| {
                crate::store::StoreError::Other(format!(
                    "{}: specs[{index}].file of spec {:?}: {e}",
                    store.path().display(),
                    spec.id
                ))
            })?;
        }
        let emitter = Emitter::new(&inner.observers);
        let mut logs = Logs::new(&inner.workspace, &inner.config.log_dir)?;
        logs.open_run("build-specs", &emitter)?;
        let base = Caller {
            emitter,
            logs,
            inner: inner.clone(),
            run_dir: None,
        };
        let build = SpecBuild {
            plans,
            inner,
            base,
            store,
            git,
            plan,
            specs_done: 0,
            tasks_done: 0,
        };
        // An earlier run may have stopped between completing a spec and its entry.
        for id in build.reconcile_progress()? {
            build.emit(Event::Warning {
                message: format!("PROGRESS.md lacked the entry of completed spec {id}; appended"),
            });
        }
        Ok(build)
    }

    async fn run(&mut self) -> Result<SpecsOutcome, Error> {
        loop {
            if self.stopped() {
                return Ok(SpecsOutcome::Interrupted);
            }
            let Some(&index) = self.plan.build_order().first() else {
                return Ok(SpecsOutcome::Complete {
                    specs: self.specs_done,
                    tasks: self.tasks_done,
                });
            };
            let id = self.plan.specs[index].id.clone();
            if let SpecEnd::Stop(outcome) = self.build_spec(&id).await? {
                return Ok(outcome);
            }
        }
    }

    /// Plan, tasks, verify, until the spec is completed or cannot go on.
    async fn build_spec(&mut self, id: &str) -> Result<SpecEnd, Error> {
        if let Some(end) = self.already_stuck(id) {
            return Ok(end);
        }
        let spec = self.spec(id)?.clone();
        let rel = self.plans.spec_rel(&spec.file)?;
        let caller = self.spec_caller(id)?;
        if spec.status == Status::Pending {
            self.spec_mut(id)?.status = Status::InProgress;
            self.save()?;
        }
        if spec.verified {
            if spec.next_task().is_none() {
                // Accepted by an earlier run that stopped before the spec was completed.
                return self.complete_spec(id, true).await;
            }
            // A person added work after the acceptance: it needs a verdict of its own.
            self.spec_mut(id)?.verified = false;
            self.save()?;
        }
        let mut planner_failures = 0;
        loop {
            self.apply_invalidation(id, &rel)?;
            if self.stopped() {
                return Ok(SpecEnd::Stop(SpecsOutcome::Interrupted));
            }
            if let Some(end) = self.exhausted(id)? {
                return Ok(end);
            }
            let plan = match self.ensure_plan(&caller, id, &rel).await? {
                PlanStep::Ready(plan) => plan,
                PlanStep::Interrupted => return Ok(SpecEnd::Stop(SpecsOutcome::Interrupted)),
                PlanStep::Failed(reason) => {
                    self.count_attempt(id, &format!("the planner failed: {reason}"))?;
                    let wait = backoff(self.inner.config.transient_backoff, planner_failures);
                    planner_failures += 1;
                    self.emit(Event::Warning {
                        message: format!(
                            "planner of {id}: {reason}; retrying in {}",
                            humantime::format_duration(wait)
                        ),
                    });
                    if !caller.pause(wait).await {
                        return Ok(SpecEnd::Stop(SpecsOutcome::Interrupted));
                    }
                    continue;
                }
            };
            while let Some(index) = self.spec(id)?.next_task() {
                match self.build_task(&caller, id, index, &plan).await? {
                    TaskEnd::Completed => {}
                    TaskEnd::Blocked => return Ok(SpecEnd::Stop(self.blocked(id)?)),
                    TaskEnd::Interrupted => return Ok(SpecEnd::Stop(SpecsOutcome::Interrupted)),
                }
            }
            // Each verdict and its consequences are one write of implementation.json, made
            // before any other side effect: a restart never asks the verifier again about a
            // verdict it already acted on.
            match self.verify_spec(&caller, id, &plan).await? {
                Judgement::Accept => {
                    self.spec_mut(id)?.verified = true;
                    self.save()?;
                    return self.complete_spec(id, false).await;
                }
                Judgement::Interrupted => {
                    self.save()?;
                    return Ok(SpecEnd::Stop(SpecsOutcome::Interrupted));
                }
                Judgement::Reject(reason) => self.rework(id, &reason, None)?,
                // Applied to the plan files at the top of the loop (`apply_invalidation`).
                Judgement::Invalidate { reason, full } => self.rework(id, &full, Some(&reason))?,
            }
        }
    }

    /// A spec left blocked or out of attempts by an earlier run stays so until a person
    /// changes `implementation.json` (resets the status or the task).
    fn already_stuck(&self, id: &str) -> Option<SpecEnd> {
        let spec = self.plan.spec(id)?;
        if spec.tasks.iter().any(|t| t.status == Status::Blocked) {
            return self.blocked(id).ok().map(SpecEnd::Stop);
        }
        if spec.status == Status::Blocked {
            return Some(SpecEnd::Stop(SpecsOutcome::AttemptsExhausted {
                spec: id.to_owned(),
                attempts: spec.attempts,
                reason: spec.blocked_reason.clone().unwrap_or_default(),
            }));
        }
        None
    }

    /// Applies a recorded plan invalidation to the plan files: the plan is archived as
    /// `<rel>.attempt-N.md` and its metadata marked `invalidated`, then the record is
    /// cleared. A restart after a crash anywhere in between finishes it the same way.
    fn apply_invalidation(&mut self, id: &str, rel: &str) -> Result<(), Error> {
        let Some(reason) = self.spec(id)?.plan_invalidation.clone() else {
            return Ok(());
        };
        let done = self
            .plans
            .load_info(rel)?
            .is_some_and(|info| info.status == PlanStatus::Invalidated);
        if !done {
            let info = self.plans.invalidate(rel, &reason)?;
            let archived = self.plans.archive_path(rel, info.attempt);
            self.emit(Event::PlanInvalidated {
                spec: id.to_owned(),
                reason,
                archived: self.base.logs.relative(&archived),
            });
        }
        self.spec_mut(id)?.plan_invalidation = None;
        self.save()
    }

    /// Stops the spec when its failed rounds reached the limit.
    fn exhausted(&mut self, id: &str) -> Result<Option<SpecEnd>, Error> {
        let max = self.inner.config.planning.max_attempts;
        let spec = self.spec_mut(id)?;
        if spec.attempts < max {
            return Ok(None);
        }
        spec.status = Status::Blocked;
        let reason = format!(
            "gave up after {} failed attempts: {}",
            spec.attempts,
            spec.last_failure.as_deref().unwrap_or("no detail")
        );
        spec.blocked_reason = Some(reason.clone());
        let attempts = spec.attempts;
        self.save()?;
        Ok(Some(SpecEnd::Stop(SpecsOutcome::AttemptsExhausted {
            spec: id.to_owned(),
            attempts,
            reason,
        })))
    }

    /// Counts a failed round against the spec, remembering why.
    fn count_attempt(&mut self, id: &str, reason: &str) -> Result<(), Error> {
        let spec = self.spec_mut(id)?;
        spec.attempts += 1;
        spec.last_failure = Some(first_line(reason));
        self.save()
    }

    fn blocked(&self, id: &str) -> Result<SpecsOutcome, Error> {
        let items = self
            .spec(id)?
            .tasks
            .iter()
            .filter(|t| t.status == Status::Blocked)
            .map(|t| BlockedItem::new(&t.id, t.blocked_reason.clone().unwrap_or_default()))
            .collect();
        Ok(SpecsOutcome::Blocked {
            spec: id.to_owned(),
            items,
        })
    }

    /// A caller whose agent logs go to `runs/<spec>/<timestamp>/`.
    fn spec_caller(&self, id: &str) -> Result<Caller, Error> {
        let dir = self
            .inner
            .workspace
            .join(&self.inner.config.log_dir)
            .join("runs")
            .join(super::logs::sanitize(id))
            .join(super::logs::file_stamp());
        std::fs::create_dir_all(&dir).map_err(|source| Error::Io {
            path: dir.clone(),
            source,
        })?;
        let mut caller = self.base.clone();
        caller.run_dir = Some(dir);
        Ok(caller)
    }

    // ── PLAN ────────────────────────────────────────────────────────────────────────────

    /// An active plan's text, following seed 002's resume rules.
    async fn ensure_plan(
        &mut self,
        caller: &Caller,
        id: &str,
        rel: &str,
    ) -> Result<PlanStep, Error> {
        let (attempt, reason) = match self.plans.resume(rel)? {
            Resume::UseActive => return self.active_plan(rel),
            Resume::Adopt => {
                self.plans.adopt(rel, id)?;
                return self.active_plan(rel);
            }
            Resume::Replan { attempt, reason } => (attempt, reason),
            _ => (1, None),
        };
        let previous = match attempt {
            1 => None,
            n => self.plans.archived(rel, n - 1)?,
        };
        self.run_planner(caller, id, rel, attempt, previous, reason)
            .await
    }

    fn active_plan(&self, rel: &str) -> Result<PlanStep, Error> {
        Ok(match self.plans.load_content(rel)? {
            Some(text) => PlanStep::Ready(text.trim().to_owned()),
            None => PlanStep::Failed("the plan file disappeared".into()),
        })
    }

    async fn run_planner(
        &mut self,
        caller: &Caller,
        id: &str,
        rel: &str,
        attempt: u32,
        previous_plan: Option<String>,
        reason: Option<String>,
    ) -> Result<PlanStep, Error> {
        #[derive(Serialize)]
        struct Ctx<'a> {
            spec: &'a SpecEntry,
            spec_text: String,
            workspace: String,
            ralph_home: String,
            log_dir: String,
            spec_path: String,
            plan_path: String,
            scratchpad_path: String,
            phrase: &'a str,
            scratchpad: Option<String>,
            previous_plan: Option<String>,
            reason: Option<String>,
        }
        let spec = self.spec(id)?;
        let plan_path = self.plans.plan_path(rel);
        let phrase = self.inner.config.planning.magic_phrase.as_str();
        let workspace = &self.inner.workspace;
        let shown = |p: &Path| p.display().to_string();
        let scratchpad_path = workspace.join(SCRATCHPAD);
        let log_dir = match &caller.run_dir {
            Some(dir) => dir.clone(),
            None => workspace.join(&self.inner.config.log_dir),
        };
        let ctx = Ctx {
            spec,
            spec_text: self.spec_text(spec)?,
            workspace: shown(workspace),
            ralph_home: shown(&workspace.join(crate::thread::STATE_DIR)),
            log_dir: shown(&log_dir),
            spec_path: shown(&workspace.join(&spec.file)),
            plan_path: shown(&plan_path),
            scratchpad_path: shown(&scratchpad_path),
            phrase,
            scratchpad: scratchpad(&scratchpad_path),
            previous_plan,
            reason,
        };
        let mut call = Call {
            role: Role::Planner,
            subject: Some(id.to_owned()),
            attempt,
            prompt: self.inner.prompts.render("planner", &ctx)?,
            deadline: Instant::now() + self.inner.config.stage_timeout,
        };
        let run = match caller.call(&mut call, None).await? {
            Ending::Answer(run) => run,
            Ending::Interrupted => return Ok(PlanStep::Interrupted),
            Ending::Failed {
                reason,
                kind: FailureKind::Fatal,
            } => return Err(Error::AgentFatal(reason)),
            Ending::Failed { reason, .. } => return Ok(PlanStep::Failed(reason)),
            Ending::Killed { reason, .. } => {
                return Ok(PlanStep::Failed(format!(
                    "the planner was stopped ({reason})"
                )));
            }
        };
        let text = match plan_from_answer(&run.final_text, phrase) {
            Ok(text) => text,
            Err(why) => return Ok(PlanStep::Failed(why)),
        };
        self.plans.write_plan(rel, id, &text, attempt)?;
        self.emit(Event::PlanWritten {
            spec: id.to_owned(),
            attempt,
            path: self.base.logs.relative(&plan_path),
        });
        Ok(PlanStep::Ready(text))
    }

    // ── TASKS ───────────────────────────────────────────────────────────────────────────

    /// Sessions of one task until it is completed, blocked, out of retries or interrupted.
    async fn build_task(
        &mut self,
        caller: &Caller,
        id: &str,
        index: usize,
        plan: &str,
    ) -> Result<TaskEnd, Error> {
        loop {
            if self.stopped() {
                return Ok(TaskEnd::Interrupted);
            }
            let task = self.spec(id)?.tasks[index].clone();
            if task.attempts > self.inner.config.retries {
                let last = task.last_failure.as_deref().map(first_line);
                let reason = format!(
                    "gave up after {} attempts: {}",
                    task.attempts,
                    last.unwrap_or_else(|| "no detail".into())
                );
                return self.block_task(id, index, reason);
            }
            // Recorded before the agent runs: a restart counts the session it interrupted.
            let session = task.attempts + 1;
            let prompt = self.task_prompt(id, &task, session, plan)?;
            {
                let entry = &mut self.spec_mut(id)?.tasks[index];
                entry.status = Status::InProgress;
                entry.attempts = session;
            }
            self.save()?;
            self.emit(Event::TaskStarted {
                task: TaskId::new(task.id.as_str()),
                name: task.description.clone(),
                attempt: session,
            });
            match self.session(caller, &task, session, prompt).await? {
                Session::Done => return self.complete_task(id, index),
                Session::Blocked(reason) => return self.block_task(id, index, reason),
                Session::Interrupted => return Ok(TaskEnd::Interrupted),
                Session::Failed(failure) => {
                    self.spec_mut(id)?.tasks[index].last_failure = Some(bounded_failure(&failure));
                    self.save()?;
                    self.emit(Event::TaskRetry {
                        task: TaskId::new(task.id.as_str()),
                        attempt: session,
                        reason: first_line(&failure),
                    });
                }
            }
        }
    }

    fn task_prompt(
        &self,
        id: &str,
        task: &TaskEntry,
        session: u32,
        plan: &str,
    ) -> Result<String, Error> {
        #[derive(Serialize)]
        struct Ctx<'a> {
            spec: &'a SpecEntry,
            task: &'a TaskEntry,
            criteria: Vec<&'a str>,
            completed: Vec<&'a TaskEntry>,
            plan: &'a str,
            gates: Vec<&'a str>,
            attempt: u32,
            failure: Option<&'a str>,
        }
        let spec = self.spec(id)?;
        let mut criteria: Vec<&str> = task
            .acceptance_criteria
            .iter()
            .map(String::as_str)
            .collect();
        if criteria.is_empty() {
            criteria.push("The task is implemented and the quality gates pass.");
        }
        let ctx = Ctx {
            spec,
            task,
            criteria,
            completed: spec
                .tasks
                .iter()
                .filter(|t| t.status == Status::Completed)
                .collect(),
            plan,
            gates: self.inner.gates.iter().map(|g| g.name()).collect(),
            attempt: session,
            failure: task.last_failure.as_deref(),
        };
        let template = if task.last_failure.is_some() {
            "task_retry"
        } else {
            "task"
        };
        Ok(self.inner.prompts.render(template, &ctx)?)
    }

    /// One implementer session: a fresh agent run, its marker, then the gates.
    async fn session(
        &self,
        caller: &Caller,
        task: &TaskEntry,
        session: u32,
        prompt: String,
    ) -> Result<Session, Error> {
        let mut call = Call {
            role: Role::Build,
            subject: Some(task.id.clone()),
            attempt: session,
            prompt,
            deadline: Instant::now() + self.inner.config.stage_timeout,
        };
        let run = match caller.call(&mut call, None).await? {
            Ending::Answer(run) => run,
            Ending::Interrupted => return Ok(Session::Interrupted),
            Ending::Failed {
                reason,
                kind: FailureKind::Fatal,
            } => return Err(Error::AgentFatal(reason)),
            Ending::Failed { reason, .. } => {
                return Ok(Session::Failed(format!("The agent run failed: {reason}")));
            }
            Ending::Killed { reason, .. } => {
                return Ok(Session::Failed(format!(
                    "The agent was stopped ({reason}) before it finished; do less per session."
                )));
            }
        };
        Ok(match signal::parse(&run.final_text).task {
            TaskSignal::Done => self.gates(caller, task, session, call.deadline).await?,
            TaskSignal::Blocked { reason } if reason.trim().is_empty() => {
                Session::Blocked("the agent gave no reason".into())
            }
            TaskSignal::Blocked { reason } => Session::Blocked(reason),
            TaskSignal::Conflict => Session::Failed(
                "Your final answer contained both <TASK_DONE> and <TASK_BLOCKED …>; end it with exactly one of them.".into(),
            ),
            _ => Session::Failed(
                "Your final answer did not end with <TASK_DONE> on a line of its own, so the task was not counted as done.".into(),
            ),
        })
    }

    /// The gates in order: a required gate's failure fails the session; an optional gate's
    /// failure is reported (an event), not enforced.
    async fn gates(
        &self,
        caller: &Caller,
        task: &TaskEntry,
        session: u32,
        deadline: Instant,
    ) -> Result<Session, Error> {
        let dir = caller.run_dir.clone().unwrap_or_default();
        for gate in &self.inner.gates {
            let token = self.inner.stop.child_token();
            let name =
                super::logs::sanitize(&format!("gate-{}-{}-a{session}", gate.name(), task.id));
            let ctx = GateContext::new(&self.inner.workspace)
                .stop(token.clone())
                .log_path(dir.join(format!("{name}.log")));
            let backstop = self.inner.config.grace + Duration::from_secs(5);
            let Some(report) = until_deadline(deadline, &token, backstop, gate.check(ctx)).await
            else {
                return Ok(Session::Failed(format!(
                    "Quality gate `{}` did not finish in time.",
                    gate.name()
                )));
            };
            let report = report?;
            self.emit(Event::GateFinished {
                task: TaskId::new(task.id.as_str()),
                gate: report.name.clone(),
                required: report.required,
                status: report.status.clone(),
                duration: report.duration,
            });
            if self.stopped() {
                return Ok(Session::Interrupted);
            }
            if report.blocks() {
                return Ok(Session::Failed(gate_failure(&report)));
            }
        }
        Ok(Session::Done)
    }

    fn complete_task(&mut self, id: &str, index: usize) -> Result<TaskEnd, Error> {
        let entry = &mut self.spec_mut(id)?.tasks[index];
        entry.status = Status::Completed;
        entry.last_failure = None;
        entry.completed_at = Some(now_rfc3339());
        let task = TaskId::new(entry.id.as_str());
        self.save()?;
        self.tasks_done += 1;
        self.emit(Event::TaskDone { task });
        Ok(TaskEnd::Completed)
    }

    fn block_task(&mut self, id: &str, index: usize, reason: String) -> Result<TaskEnd, Error> {
        let entry = &mut self.spec_mut(id)?.tasks[index];
        entry.status = Status::Blocked;
        entry.blocked_reason = Some(reason.clone());
        let task = TaskId::new(entry.id.as_str());
        self.save()?;
        self.emit(Event::TaskBlocked { task, reason });
        Ok(TaskEnd::Blocked)
    }

    // ── VERIFY ──────────────────────────────────────────────────────────────────────────

    /// The verifier's judgement of the whole spec. `PLAN_INVALIDATION: <reason>` counts as a
    /// whole line of a rejection's `reason` (parsed by [`signal::parse`]).
    async fn verify_spec(
        &mut self,
        caller: &Caller,
        id: &str,
        plan: &str,
    ) -> Result<Judgement, Error> {
        #[derive(Serialize)]
        struct Ctx<'a> {
            spec: &'a SpecEntry,
            spec_text: String,
            plan: &'a str,
            changes: Vec<String>,
        }
        let log_dir = self.inner.config.log_dir.to_string_lossy().into_owned();
        let mut changes = self.git.changes(&[".ralph", &log_dir]).await?;
        changes.truncate(CHANGES_SHOWN);
        let spec = self.spec(id)?;
        let ctx = Ctx {
            spec,
            spec_text: self.spec_text(spec)?,
            plan,
            changes,
        };
        let call = Call {
            role: Role::Verify,
            subject: Some(id.to_owned()),
            attempt: spec.verifications + 1,
            prompt: self.inner.prompts.render("spec_verify", &ctx)?,
            deadline: Instant::now() + self.inner.config.stage_timeout,
        };
        let (result, runs) = caller.structured::<VerifyAnswer>(call, |_| Ok(())).await?;
        // Saved by the caller, with what the verdict leads to.
        self.spec_mut(id)?.verifications += runs;
        let answer = match result {
            Structured::Interrupted => return Ok(Judgement::Interrupted),
            Structured::Unusable(reason) => {
                return Ok(Judgement::Reject(format!("no usable verdict: {reason}")));
            }
            Structured::Answer(answer) => answer,
        };
        let task = TaskId::new(id);
        let accepted = answer.verdict == VerdictKind::Accept;
        self.emit(Event::Verdict {
            task,
            accepted,
            reason: answer.reason.clone(),
        });
        if accepted {
            return Ok(Judgement::Accept);
        }
        let mut full = answer.reason.clone();
        for gap in &answer.gaps {
            full.push_str(&format!("\n- {gap}"));
        }
        Ok(match signal::parse(&answer.reason).plan_invalidation {
            Some(reason) => Judgement::Invalidate { reason, full },
            None => Judgement::Reject(full),
        })
    }

    /// After a rejection: a task carrying the verifier's feedback, and a counted attempt.
    fn rework(
        &mut self,
        id: &str,
        feedback: &str,
        invalidation: Option<&str>,
    ) -> Result<(), Error> {
        let spec = self.spec_mut(id)?;
        let (description, failure) = match invalidation {
            Some(reason) => (
                format!("Rework per the new plan: {reason}"),
                format!("The verifier invalidated the previous plan: {feedback}"),
            ),
            None => (
                format!("Address the verifier's findings: {}", first_line(feedback)),
                format!("The verifier rejected the spec: {feedback}"),
            ),
        };
        let mut task = TaskEntry::new(spec.next_task_id(), description)
            .with_criteria(spec.acceptance_criteria.clone());
        task.last_failure = Some(bounded_failure(&failure));
        spec.tasks.push(task);
        spec.plan_invalidation = invalidation.map(|r| r.trim().to_owned());
        self.count_attempt(id, feedback)
    }

    /// Commit named after the spec, spec completed, PROGRESS.md; in that order. The spec is
    /// already marked `verified`, so a crash in between never runs the verifier again:
    /// `resumed` (a restart) commits what is uncommitted, or records HEAD when it already is
    /// the spec's commit.
    async fn complete_spec(&mut self, id: &str, resumed: bool) -> Result<SpecEnd, Error> {
        let name = self.spec(id)?.display_name().to_owned();
        let commit = self.commit_spec(&name, resumed).await?;
        let spec = self.spec_mut(id)?;
        spec.status = Status::Completed;
        spec.verified = false;
        spec.commit = commit.clone();
        spec.completed_at = Some(now_rfc3339());
        self.save()?;
        // Reconciled, not appended blindly: the entry of a spec completed by a run that
        // stopped before writing it comes first, and nothing is written twice.
        self.reconcile_progress()?;
        self.specs_done += 1;
        self.emit(Event::SpecCommitted {
            spec: id.to_owned(),
            commit,
        });
        Ok(SpecEnd::Completed)
    }

    /// The spec's commit. After a restart, nothing left to commit and HEAD named after the
    /// spec mean the earlier run committed and stopped before recording it.
    async fn commit_spec(&self, name: &str, resumed: bool) -> Result<Option<String>, Error> {
        let log_dir = self.inner.config.log_dir.to_string_lossy().into_owned();
        let exclude = [".ralph", log_dir.as_str()];
        if resumed
            && self.git.changes(&exclude).await?.is_empty()
            && self.git.head_subject().await?.as_deref() == Some(name.trim())
        {
            return Ok(self.git.head().await?);
        }
        Ok(self.git.commit_all(name, &exclude).await?)
    }

    /// Appends the PROGRESS.md entries of completed specs that it lacks (see
    /// [`progress_md`](super::progress_md)); returns their spec ids.
    fn reconcile_progress(&self) -> Result<Vec<String>, Error> {
        let workspace = &self.inner.workspace;
        let md = ProgressMd::new(workspace.join(&self.inner.config.planning.progress));
        md.reconcile(&self.plan, |spec| match self.plans.spec_rel(&spec.file) {
            Ok(rel) => progress_md::shown(&self.plans.plan_path(&rel), workspace),
            Err(_) => "(none)".to_owned(),
        })
    }

    // ── helpers ─────────────────────────────────────────────────────────────────────────

    fn spec_text(&self, spec: &SpecEntry) -> Result<String, Error> {
        super::spec_for_prompt(&self.inner.workspace, &spec.file)
    }

    fn spec(&self, id: &str) -> Result<&SpecEntry, Error> {
        self.plan.spec(id).ok_or_else(|| missing(id))
    }

    fn spec_mut(&mut self, id: &str) -> Result<&mut SpecEntry, Error> {
        self.plan.spec_mut(id).ok_or_else(|| missing(id))
    }

    fn save(&mut self) -> Result<(), Error> {
        Ok(self.store.save(&mut self.plan, "build-mode")?)
    }

    fn emit(&self, event: Event) {
        self.base.emitter.emit(&event);
    }

    fn stopped(&self) -> bool {
        self.inner.stop.is_cancelled()
    }
}

/// The scratchpad's content, bounded; `None` when there is none or it is blank. Read as
/// bytes: a non-UTF-8 scratchpad is shown lossily rather than silently dropped.
fn scratchpad(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let text = text.trim();
    (!text.is_empty()).then(|| truncate_middle(text, SCRATCHPAD_BYTES))
}

fn missing(id: &str) -> Error {
    Error::Store(crate::store::StoreError::Other(format!(
        "spec {id} is no longer in implementation.json"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_logs_are_named_by_role() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert!(run_log(d, Role::Planner, 2).ends_with("plan-attempt-2.log"));
        let first = run_log(d, Role::Build, 1);
        assert!(first.ends_with("impl-attempt-1.log"));
        std::fs::write(&first, "").unwrap();
        assert!(run_log(d, Role::Build, 1).ends_with("impl-attempt-2.log"));
        let verify = run_log(d, Role::Verify, 1);
        assert!(verify.ends_with("verify.log"));
        std::fs::write(&verify, "").unwrap();
        assert!(run_log(d, Role::Verify, 2).ends_with("verify-2.log"));
    }
}
