//! Build mode over `implementation.json`, with a planning phase before each spec.
//!
//! ```text
//! for each spec not completed, by priority:
//!   PLAN      resume rules over specs/plans/<rel>.{md,json}; a read-only planner when needed
//!   TASKS     each pending task in order, one fresh agent session per attempt:
//!               task prompt (+ plan) -> <TASK_DONE> | <TASK_BLOCKED> -> required gates
//!               -> completed | retry with the failure (bounded) | blocked (the spec stops)
//!   VERIFY    the whole spec, read-only, with the plan and the changed files:
//!               accept -> spec completed, PROGRESS.md, one git commit named after the spec
//!               PLAN_INVALIDATION: <reason> -> plan archived, re-plan, rework task
//!               reject -> a task carrying the feedback, same plan
//! ```
//!
//! Every transition is written to `implementation.json` (atomically) before the next agent,
//! gate or git command runs, so a killed process resumes where the work stood. A verdict is
//! written together with its consequences: an acceptance as the spec's `verified`, then the
//! spec marked completed with its `PROGRESS.md` entry, then one commit of the work with
//! both (a note in `.ralph/` says it is due: a restart makes it), an invalidation as its rework task plus `planInvalidation` (then the plan
//! files; a restart finishes that). Neither is asked of the verifier again. Failed rounds
//! of a spec (planner runs without a plan, rejections) count against
//! `[planning] max_attempts`; a session cut short by a stop or by ralph's death counts
//! against nothing.
//!
//! One file per step: [`plan`] (the planner), [`tasks`] (the implementer sessions and their
//! gates), [`verify`] (the verdict and what follows it).

mod due;
mod plan;
pub(crate) mod tasks;
mod verify;

use std::path::Path;
use std::sync::Arc;

use self::due::DueCommit;
use self::plan::PlanStep;
use self::verify::Judgement;
use super::history;
use super::implementation::{Implementation, ImplementationStore, SpecEntry, Status};
use super::plan_files::{PlanFiles, PlanStatus};
use crate::event::Event;
use crate::git::{Git, GitError};
use crate::outcome::{BlockedItem, SpecsOutcome};
use crate::output::first_line;
use crate::runtime::Context;
use crate::runtime::call::Caller;
use crate::runtime::error::{Error, SpecsError};
use crate::runtime::home::Home;
use crate::runtime::logs::{Emitter, Logs};
use crate::runtime::spec;
use crate::runtime::workspace::{RunLock, STATE_DIR};
use crate::time;

/// ralph's own files, which it never commits: its state folder and its logs.
fn kept_out(ctx: &Context) -> Vec<String> {
    vec![
        STATE_DIR.to_owned(),
        ctx.config.log_dir.to_string_lossy().into_owned(),
    ]
}

/// Build mode's user's branch in `ctx`'s workspace: ralph's own files kept out, its files
/// for people (`implementation.json`, `PROGRESS.md`) committed with the work, and the plan
/// folder, written between sessions, left out of the tree's record. Each spec's work is a
/// turn of its own on it (its subject the spec's id), committed when the spec is.
/// `None` before the repository's first commit.
pub(crate) async fn home(ctx: &Context) -> Result<Option<Home>, Error> {
    let config = &ctx.config.planning;
    let bookkeeping =
        [&config.implementation, &config.progress].map(|p| p.to_string_lossy().into_owned());
    Ok(Home::record(ctx.git(&ctx.workspace), kept_out(ctx))
        .await?
        .map(|home| home.with_bookkeeping(&bookkeeping, &[&config.specs_dir.join("plans")])))
}

/// The start of the stash entry that holds what spec `spec` (and its blocked task `task`,
/// when one is) left uncommitted when another spec's turn began: `ralph: auth/t-2's
/// unfinished work`. `ralph task unblock auth/t-2 --restore` looks for it.
pub(crate) fn set_aside_label(spec: &str, task: Option<&str>) -> String {
    match task {
        Some(task) => format!("ralph: {spec}/{task}'s unfinished work"),
        None => format!("ralph: {spec}'s unfinished work"),
    }
}

/// Runs build mode to an outcome, and ends it, an error included, with its `Finished`
/// event (after `SpecsFinished` for an outcome) and the hooks on it, while the run still
/// holds the workspace's lock. The run log ends with that event.
///
/// `force` names a spec (its id or file) to build again from its first task, done or not
/// (seed 002's "skip if done, unless forced"): it is reset before anything else runs.
pub(crate) async fn run(ctx: Arc<Context>, force: Option<String>) -> Result<SpecsOutcome, Error> {
    let emitter = ctx.emitter(&[]);
    let workspace = ctx.workspace.clone();
    let (result, build) = match open_log(&ctx, &emitter) {
        Err(e) => (Err(e), None),
        Ok(()) => match SpecBuild::start(ctx, emitter.clone(), force.as_deref()).await {
            Ok(mut build) => {
                let result = build.run().await;
                // An ending in order: its agents have stopped. After an error the next run
                // sets the last session's work aside instead.
                if matches!(result, Ok(_) | Err(Error::BudgetExhausted { .. })) {
                    build.note_stop().await;
                }
                (result, Some(build))
            }
            Err(e) => (Err(e), None),
        },
    };
    let result = match result {
        Err(Error::BudgetExhausted {
            spent_usd,
            spent_tokens,
            max_cost_usd,
            max_tokens,
        }) => Ok(SpecsOutcome::BudgetExhausted {
            spent_usd,
            spent_tokens,
            max_cost_usd,
            max_tokens,
        }),
        other => other,
    };
    if let Ok(SpecsOutcome::Complete { .. }) = &result {
        // Every spec is complete: every scope of `ralph tell` guidance has ended.
        let journal = crate::runtime::guidance::Journal::in_state(
            &crate::runtime::workspace::state_dir(&workspace),
        );
        if let Err(e) = journal.end(|_| true) {
            emitter.emit(&Event::Warning {
                message: format!("the guidance of the complete specs was not marked ended: {e}"),
            });
        }
    }
    let event = match &result {
        Ok(outcome) => {
            emitter.emit(&Event::SpecsFinished {
                outcome: outcome.clone(),
            });
            Event::build_finished(outcome.clone())
        }
        Err(e) => Event::failed("build", "build mode", e),
    };
    let event = crate::runtime::spend::stamped(event, &workspace, super::SPEND_SCOPE);
    let hooks = emitter.finish(event).await;
    drop(build);
    crate::runtime::error::after_hooks(result, hooks)
}

/// Opens build mode's run log, `<log_dir>/ralph-<timestamp>-build-specs.log`.
fn open_log(ctx: &Context, emitter: &Emitter) -> Result<(), Error> {
    let mut logs = Logs::new(
        &ctx.workspace,
        &ctx.config.log_dir,
        ctx.config.log_files_kept,
    )?;
    logs.open_run("build-specs", emitter)?;
    Ok(())
}

/// How one spec's turn ended.
enum SpecEnd {
    Completed,
    Stop(SpecsOutcome),
}

struct SpecBuild {
    ctx: Arc<Context>,
    emitter: Emitter,
    caller: Caller,
    store: ImplementationStore,
    plans: PlanFiles,
    git: Git,
    plan: Implementation,
    specs_done: usize,
    tasks_done: usize,
    /// The agent session this run made, when it made one: with `once`, the run stops after
    /// it.
    step: Option<String>,
    /// The user's branch, checked after every agent session; the specs' work is one turn
    /// on it (see `runtime::home`). `None` before the repository's first commit.
    home: Option<Home>,
    /// The note of a completed spec whose commit is due.
    due: DueCommit,
    /// The workspace's lock, held for the run.
    lock: RunLock,
}

/// Says that `build_concurrency` does not apply here, when it is set: a person who set it
/// expects tasks at once, and is not ignored silently.
fn warn_of_concurrency(ctx: &Context, emitter: &Emitter) {
    if ctx.config.build_concurrency > 1 {
        emitter.emit(&Event::Warning {
            message: format!(
                "build_concurrency = {} applies to the construct loop; build mode builds a spec's tasks one at a time, in order (they are the steps of one plan)",
                ctx.config.build_concurrency
            ),
        });
    }
}

/// Refuses a workspace that is no git repository (or where git cannot run), up front:
/// finding out at the first commit would waste the spec's work.
async fn require_repo(git: &Git, ctx: &Context) -> Result<(), Error> {
    if git.is_repo().await {
        return Ok(());
    }
    git.refuse_unrunnable().await?;
    Err(GitError::NotARepo(ctx.workspace.clone()).into())
}

/// Refuses a spec file path of `plan` that leaves the specs folder, before any agent runs:
/// a bad path found at its spec's turn would come after the work on the specs before it.
/// The error names the file and the key, as a person edits implementation.json by hand.
fn check_spec_files(
    plan: &Implementation,
    plans: &PlanFiles,
    store: &ImplementationStore,
) -> Result<(), Error> {
    for &index in &plan.build_order() {
        let entry = &plan.specs[index];
        match plans.spec_rel(&entry.file) {
            Ok(_) => {}
            Err(Error::SpecPath { path, reason }) => {
                return Err(SpecsError::SpecFile {
                    implementation: store.path().to_path_buf(),
                    index,
                    spec: entry.id.clone(),
                    file: path,
                    reason,
                }
                .into());
            }
            Err(other) => return Err(other),
        }
    }
    Ok(())
}

impl SpecBuild {
    /// Starts a build-mode run: the workspace's lock, the plan of implementation.json (with
    /// the spec `force` names reset to be built again), the user's branch taken up, and
    /// what an earlier run left due (a commit, a PROGRESS.md entry) finished.
    async fn start(
        ctx: Arc<Context>,
        emitter: Emitter,
        force: Option<&str>,
    ) -> Result<Self, Error> {
        let lock = ctx.begin(&emitter).await?;
        ctx.sandbox.record([ctx.config.planning.specs_dir.clone()]);
        ctx.warn_without_gates(&emitter);
        warn_of_concurrency(&ctx, &emitter);
        let config = &ctx.config.planning;
        let store = ImplementationStore::new(ctx.workspace.join(&config.implementation))
            .copies_in(crate::runtime::workspace::state_dir(&ctx.workspace));
        let mut plan = store.load()?.ok_or_else(|| SpecsError::NoImplementation {
            path: store.path().to_path_buf(),
        })?;
        let git = ctx.git(&ctx.workspace);
        require_repo(&git, &ctx).await?;
        let home = home(&ctx).await?;
        if let Some(home) = &home {
            // The specs' commits must hold their work only, never the user's own edits nor
            // what changed since an interrupted run.
            if let Some(warning) = home.resume().await?.warning() {
                emitter.emit(&warning);
            }
        }
        if let Some(name) = force {
            // After the check for uncommitted work: the reset is ralph's own write, and it
            // is saved before any agent runs, so a crash after it still rebuilds.
            let message = force_rebuild(&store, &mut plan, name)?;
            emitter.emit(&Event::Warning { message });
        }
        let plans = PlanFiles::new(&ctx.workspace, &config.specs_dir);
        check_spec_files(&plan, &plans, &store)?;
        let mut build = SpecBuild {
            due: DueCommit::in_state_dir(crate::runtime::workspace::state_dir(&ctx.workspace)),
            caller: ctx.spending_caller(emitter.clone(), super::SPEND_SCOPE)?,
            ctx,
            emitter,
            store,
            plans,
            git,
            plan,
            specs_done: 0,
            tasks_done: 0,
            step: None,
            home,
            lock,
        };
        // An earlier run may have stopped between completing a spec and its commit, or
        // between completing it and its entry.
        build.commit_due().await?;
        for id in build.reconcile_history()? {
            build.emit(Event::Warning {
                message: format!("PROGRESS.md lacked the entry of completed spec {id}; appended"),
            });
        }
        Ok(build)
    }

    /// Builds the specs in order. A blocked spec, or one out of attempts, holds back only
    /// the specs that depend on it (`dependsOn`); the rest are built, and the first such
    /// stop is the outcome once nothing else can go on.
    async fn run(&mut self) -> Result<SpecsOutcome, Error> {
        // The specs that cannot go on, with how each stopped, in the order they did.
        let mut stuck: Vec<(String, SpecsOutcome)> = Vec::new();
        loop {
            if self.stopped() {
                return Ok(SpecsOutcome::Interrupted);
            }
            if let Some(stop) = self.stop_between_sessions() {
                return Ok(stop);
            }
            // A spec whose question was answered goes on.
            let answered = self.take_answers()?;
            stuck.retain(|(spec, _)| !answered.contains(spec));
            let held: Vec<String> = stuck.iter().map(|(spec, _)| spec.clone()).collect();
            let Some(index) = self.plan.next_ready(&held) else {
                let awaiting = stuck
                    .iter()
                    .find(|(_, o)| matches!(o, SpecsOutcome::AwaitingAnswer { .. }));
                if let Some((_, awaiting)) = awaiting {
                    match self.wait_for_answers(awaiting.clone()).await? {
                        None => continue,
                        Some(outcome) => return Ok(outcome),
                    }
                }
                return self.end(stuck.into_iter().next().map(|(_, outcome)| outcome));
            };
            let id = self.plan.specs[index].id.clone();
            match self.build_spec(&id).await? {
                SpecEnd::Completed => {}
                SpecEnd::Stop(
                    outcome @ (SpecsOutcome::Blocked { .. }
                    | SpecsOutcome::AwaitingAnswer { .. }
                    | SpecsOutcome::AttemptsExhausted { .. }
                    | SpecsOutcome::Unverified { .. }),
                ) => {
                    self.emit(Event::Warning {
                        message: format!(
                            "{outcome}; going on with the specs that do not depend on {id}"
                        ),
                    });
                    stuck.push((id, outcome));
                }
                SpecEnd::Stop(outcome) => return Ok(outcome),
            }
        }
    }

    /// Takes in the answers a person posted (`ralph answer`): each task whose question is
    /// answered is built again, its next session given the question and the answer.
    /// Returns the specs of those tasks.
    fn take_answers(&mut self) -> Result<Vec<String>, Error> {
        let state = crate::runtime::workspace::state_dir(&self.ctx.workspace);
        let open = crate::runtime::questions::Questions::in_state(&state).open(false);
        // A task's question, or a spec's planner's (its subject the spec's id).
        let waiting: Vec<(String, String)> = self
            .plan
            .specs
            .iter()
            .flat_map(|s| {
                let planner = open.waiting_on(&s.id).map(|_| (s.id.clone(), s.id.clone()));
                s.tasks
                    .iter()
                    .filter(|t| t.question.is_some())
                    .map(|t| (s.id.clone(), t.id.clone()))
                    .chain(planner)
            })
            .collect();
        if waiting.is_empty() {
            return Ok(Vec::new());
        }
        let answered = crate::runtime::questions::answered(
            &self.ctx.workspace,
            &self.emitter,
            waiting.iter().map(|(_, task)| task.as_str()),
        );
        let mut specs = Vec::new();
        for (spec, task) in waiting.iter().filter(|(_, t)| answered.contains(t)) {
            if let Some(entry) = self
                .spec_mut(spec)?
                .tasks
                .iter_mut()
                .find(|t| &t.id == task)
            {
                entry.question = None;
            }
            specs.push(spec.clone());
        }
        if !specs.is_empty() {
            self.save()?;
        }
        Ok(specs)
    }

    /// Nothing can go on but what waits for a person's answer: waits for one up to
    /// `question_wait`. `None` when one came; the outcome otherwise (`awaiting`, the first
    /// spec waiting, or a stop, a signal).
    async fn wait_for_answers(
        &mut self,
        awaiting: SpecsOutcome,
    ) -> Result<Option<SpecsOutcome>, Error> {
        let wait = self.ctx.config.question_wait_or_default();
        let until = tokio::time::Instant::now() + wait;
        loop {
            if !self.take_answers()?.is_empty() {
                return Ok(None);
            }
            if self.stopped() {
                return Ok(Some(SpecsOutcome::Interrupted));
            }
            if let Some(stop) = self.stop_between_sessions() {
                return Ok(Some(stop));
            }
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Ok(Some(awaiting));
            }
            let stop = self.ctx.stop.clone();
            tokio::select! {
                () = tokio::time::sleep(left.min(crate::runtime::questions::POLL)) => {}
                () = stop.stopped() => {}
            }
        }
    }

    /// Gives back what spec `id`'s task that asked a question left, set aside while another
    /// spec had its turn, now that the answer is there. A pop that conflicts leaves the
    /// entry, and says so.
    async fn give_back_asked(&mut self, id: &str) -> Result<(), Error> {
        let Some(home) = &self.home else {
            return Ok(());
        };
        let state = crate::runtime::workspace::state_dir(&self.ctx.workspace);
        let open = crate::runtime::questions::Questions::in_state(&state).open(false);
        let entry = self.spec(id)?;
        let Some(task) = entry
            .tasks
            .iter()
            .find(|t| open.answered_for(&t.id).is_some())
        else {
            return Ok(());
        };
        let label = set_aside_label(id, Some(&task.id));
        let Some((stash, _)) = home.git().stash_named(&label).await? else {
            return Ok(());
        };
        if let Err(e) = home.git().stash_pop(&stash).await {
            self.emit(Event::Warning {
                message: format!(
                    "{id}'s work set aside while {} waited for an answer did not apply ({e}); \
                     it stays in `git stash list` as \"{label}\"",
                    task.id
                ),
            });
        }
        Ok(())
    }

    /// The outcome when no spec is left to build: the first stuck spec's stop, or complete
    /// (and the turn on the user's branch is over). (`dependsOn` is checked at load: it
    /// names known specs and has no cycle, so a spec left waiting waits on a stuck one.)
    fn end(&self, first_stuck: Option<SpecsOutcome>) -> Result<SpecsOutcome, Error> {
        if let Some(stuck) = first_stuck {
            return Ok(stuck);
        }
        if let Some(home) = &self.home {
            home.end_turn()?;
        }
        Ok(SpecsOutcome::Complete {
            specs: self.specs_done,
            tasks: self.tasks_done,
            gates: self
                .ctx
                .gates
                .iter()
                .filter(|g| g.required())
                .map(|g| g.name().to_owned())
                .collect(),
        })
    }

    /// Notes the work tree as the run leaves it, its agents stopped (see
    /// `runtime::home::record`); a failure is said, not fatal: the next run then sets the
    /// last session's work aside rather than take it up.
    async fn note_stop(&self) {
        if let Some(home) = &self.home
            && let Err(e) = home.note_stop().await
        {
            self.emit(Event::Warning {
                message: format!("the work tree as this run leaves it was not noted: {e}"),
            });
        }
    }

    /// Puts the user's branch back if the agent of `step` moved it, saying so; what the
    /// agent did, in words for its next session.
    async fn guard(&mut self, step: &str) -> Result<Option<String>, Error> {
        let Some(home) = &mut self.home else {
            return Ok(None);
        };
        let moved = home.check().await?;
        // What a kill during the next session leaves beyond this is that session's.
        home.note_attempt().await?;
        if let Some(moved) = &moved {
            // Checking the branch out again brought back its copy of implementation.json:
            // the run's own state is the truth.
            self.store.restore(&mut self.plan, "build-mode")?;
            self.emit(Event::Warning {
                message: format!("{step}: {moved}"),
            });
        }
        Ok(moved)
    }

    /// Plan, tasks, verify, until the spec is completed or cannot go on.
    async fn build_spec(&mut self, id: &str) -> Result<SpecEnd, Error> {
        if let Some(end) = self.already_stuck(id) {
            return Ok(end);
        }
        self.take_turn(id).await?;
        self.give_back_asked(id).await?;
        let entry = self.spec(id)?.clone();
        let rel = self.plans.spec_rel(&entry.file)?;
        let dir =
            crate::specs::logs::run_folder(&self.ctx.workspace, &self.ctx.config.log_dir, id)?;
        if let Some(end) = self.open_spec(id, &entry).await? {
            return Ok(end);
        }
        let mut planner_failures = 0;
        loop {
            self.apply_invalidation(id, &rel)?;
            if self.stopped() {
                return Ok(SpecEnd::Stop(SpecsOutcome::Interrupted));
            }
            if let Some(stop) = self.stop_between_sessions() {
                return Ok(SpecEnd::Stop(stop));
            }
            if let Some(end) = self.exhausted(id)? {
                return Ok(end);
            }
            let planned = self.ensure_plan(&dir, id, &rel).await?;
            self.guard(&format!("planning {id}")).await?;
            let plan = match planned {
                PlanStep::Ready(plan) => plan,
                PlanStep::Interrupted => return Ok(SpecEnd::Stop(SpecsOutcome::Interrupted)),
                PlanStep::Asked(question) => {
                    return Ok(SpecEnd::Stop(SpecsOutcome::AwaitingAnswer {
                        spec: id.to_owned(),
                        questions: vec![BlockedItem::new(id, question)],
                    }));
                }
                PlanStep::Failed(reason) => {
                    let waited = self
                        .wait_after_planner_failure(id, &reason, planner_failures)
                        .await?;
                    if !waited {
                        return Ok(SpecEnd::Stop(SpecsOutcome::Interrupted));
                    }
                    planner_failures += 1;
                    continue;
                }
            };
            if let Some(end) = self.build_tasks(&dir, id, &plan).await? {
                return Ok(end);
            }
            if let Some(stop) = self.stop_between_sessions() {
                return Ok(SpecEnd::Stop(stop));
            }
            // Each verdict and its consequences are one write of implementation.json, made
            // before any other side effect: a restart never asks the verifier again about a
            // verdict it already acted on.
            let judgement = self.verify_spec(&dir, id, &plan).await?;
            self.guard(&format!("verifying {id}")).await?;
            if let Some(end) = self.act_on_judgement(id, judgement).await? {
                return Ok(end);
            }
        }
    }

    /// Marks spec `id` (as `entry` was before its turn) in progress. A spec an earlier run
    /// accepted is completed now if nothing was added to it since, and its end returned;
    /// work added after the acceptance needs a verdict of its own.
    async fn open_spec(&mut self, id: &str, entry: &SpecEntry) -> Result<Option<SpecEnd>, Error> {
        if entry.status == Status::Pending {
            self.spec_mut(id)?.status = Status::InProgress;
            self.save()?;
        }
        if entry.verified {
            if entry.next_task().is_none() {
                // Accepted by an earlier run that stopped before the spec was completed.
                return self.complete_spec(id, true).await.map(Some);
            }
            self.spec_mut(id)?.verified = false;
            self.save()?;
        }
        Ok(None)
    }

    /// Counts the planner's failure (the `failures`-th in a row, from 0) against spec `id`,
    /// says so, and waits the backoff before the next planner. `false` if a stop came during
    /// the wait.
    async fn wait_after_planner_failure(
        &mut self,
        id: &str,
        reason: &str,
        failures: u32,
    ) -> Result<bool, Error> {
        self.count_attempt(id, &format!("the planner failed: {reason}"))?;
        let wait = time::backoff(self.ctx.config.transient_backoff, failures);
        self.emit(Event::Warning {
            message: format!(
                "planner of {id}: {reason}; retrying in {}",
                humantime::format_duration(wait)
            ),
        });
        Ok(self.caller.pause(wait).await)
    }

    /// Builds the pending tasks of spec `id` in order, under `plan`. `None` once none is
    /// left; the spec's end if one blocked or the run stopped.
    async fn build_tasks(
        &mut self,
        dir: &Path,
        id: &str,
        plan: &str,
    ) -> Result<Option<SpecEnd>, Error> {
        while let Some(index) = self.spec(id)?.next_task() {
            if let Some(stop) = self.stop_between_sessions() {
                return Ok(Some(SpecEnd::Stop(stop)));
            }
            match self.build_task(dir, id, index, plan).await? {
                tasks::TaskTurn::Completed => {}
                tasks::TaskTurn::Blocked => return Ok(Some(SpecEnd::Stop(self.blocked(id)?))),
                tasks::TaskTurn::Asked => {
                    return Ok(Some(SpecEnd::Stop(awaiting(self.spec(id)?))));
                }
                tasks::TaskTurn::Interrupted => {
                    return Ok(Some(SpecEnd::Stop(SpecsOutcome::Interrupted)));
                }
                tasks::TaskTurn::Paused => continue,
            }
        }
        Ok(None)
    }

    /// Records the verifier's `judgement` of spec `id` and what follows it: the spec's end
    /// (completed, unverified, interrupted), or `None` when a rejection or an invalidation
    /// sends it round again with a rework task.
    async fn act_on_judgement(
        &mut self,
        id: &str,
        judgement: Judgement,
    ) -> Result<Option<SpecEnd>, Error> {
        match judgement {
            Judgement::Unverified(reason) => {
                self.save()?;
                Ok(Some(SpecEnd::Stop(SpecsOutcome::Unverified {
                    spec: id.to_owned(),
                    reason,
                })))
            }
            Judgement::Accept => {
                self.spec_mut(id)?.verified = true;
                self.save()?;
                self.complete_spec(id, false).await.map(Some)
            }
            Judgement::Interrupted => {
                self.save()?;
                Ok(Some(SpecEnd::Stop(SpecsOutcome::Interrupted)))
            }
            Judgement::Reject(reason) => self.rework(id, &reason, None).map(|()| None),
            // Applied to the plan files at the top of the loop (`apply_invalidation`).
            Judgement::Invalidate { reason, full } => {
                self.rework(id, &full, Some(&reason)).map(|()| None)
            }
        }
    }

    /// Begins spec `id`'s turn on the user's branch. What another spec left uncommitted (one
    /// that blocked, or an interrupted run's) is set aside first, in a stash entry named
    /// after that spec and its blocked task ([`set_aside_label`]), so that each spec's commit
    /// holds its own work only; the same spec's turn is taken up as it was left.
    async fn take_turn(&mut self, id: &str) -> Result<(), Error> {
        let left = match &self.home {
            Some(home) => home.begin_turn(id).await?,
            None => None,
        };
        let Some(left) = left else {
            return Ok(());
        };
        let stuck = self.plan.spec(&left.subject).filter(|e| stuck(e).is_some());
        let task = stuck.and_then(|e| {
            e.tasks
                .iter()
                .find(|t| t.status == Status::Blocked || t.question.is_some())
        });
        let label = set_aside_label(&left.subject, task.map(|t| t.id.as_str()));
        let why = match task {
            Some(t) if t.question.is_some() => {
                format!("set aside while {} waits for an answer", left.subject)
            }
            Some(_) => format!("set aside while {} is blocked", left.subject),
            None => "left by an interrupted run".to_owned(),
        };
        let back = task
            .filter(|t| t.question.is_none())
            .map_or(String::new(), |task| {
                format!(
                    "; `ralph task unblock {}/{} --restore` gives it back",
                    left.subject, task.id
                )
            });
        let Some(home) = &mut self.home else {
            return Ok(());
        };
        if let Some(entry) = home.set_aside_as(&left, &label, &why).await? {
            self.emitter.emit(&Event::Warning {
                message: format!(
                    "{}'s uncommitted work is kept in `git stash list` as \"{entry}\"{back}",
                    left.subject
                ),
            });
        }
        home.begin_turn(id).await?;
        Ok(())
    }

    /// A spec left blocked or out of attempts by an earlier run stays so until a person
    /// changes `implementation.json` (resets the status or the task).
    fn already_stuck(&self, id: &str) -> Option<SpecEnd> {
        let state = crate::runtime::workspace::state_dir(&self.ctx.workspace);
        let open = crate::runtime::questions::Questions::in_state(&state).open(false);
        if let Some(asked) = open.waiting_on(id) {
            // Its planner asked a person: asking it again would answer nothing.
            return Some(SpecEnd::Stop(SpecsOutcome::AwaitingAnswer {
                spec: id.to_owned(),
                questions: vec![BlockedItem::new(id, asked.asked.question.clone())],
            }));
        }
        stuck(self.plan.spec(id)?).map(SpecEnd::Stop)
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
                archived: crate::runtime::workspace::relative(&self.ctx.workspace, &archived),
            });
        }
        self.spec_mut(id)?.plan_invalidation = None;
        self.save()
    }

    /// Stops the spec when its failed rounds reached the limit.
    fn exhausted(&mut self, id: &str) -> Result<Option<SpecEnd>, Error> {
        let max = self.ctx.config.planning.max_attempts;
        let entry = self.spec_mut(id)?;
        if entry.attempts < max {
            return Ok(None);
        }
        entry.status = Status::Blocked;
        let reason = format!(
            "gave up after {} failed attempts: {}",
            entry.attempts,
            entry.last_failure.as_deref().unwrap_or("no detail")
        );
        entry.blocked_reason = Some(reason.clone());
        let attempts = entry.attempts;
        self.save()?;
        Ok(Some(SpecEnd::Stop(SpecsOutcome::AttemptsExhausted {
            spec: id.to_owned(),
            attempts,
            reason,
        })))
    }

    /// Counts a failed round against the spec, remembering why.
    fn count_attempt(&mut self, id: &str, reason: &str) -> Result<(), Error> {
        let entry = self.spec_mut(id)?;
        entry.attempts = entry.attempts.saturating_add(1);
        entry.last_failure = Some(first_line(reason));
        self.save()
    }

    fn blocked(&self, id: &str) -> Result<SpecsOutcome, Error> {
        Ok(blocked(self.spec(id)?))
    }

    /// Appends the PROGRESS.md entries of completed specs that it lacks (see
    /// [`history`]); returns their spec ids.
    fn reconcile_history(&self) -> Result<Vec<String>, Error> {
        let workspace = &self.ctx.workspace;
        let file = history::History::new(workspace.join(&self.ctx.config.planning.progress));
        file.reconcile(&self.plan, |entry| match self.plans.spec_rel(&entry.file) {
            Ok(rel) => history::shown(&self.plans.plan_path(&rel), workspace),
            Err(_) => "(none)".to_owned(),
        })
    }

    // ── helpers ─────────────────────────────────────────────────────────────────────────

    fn spec_text(&self, entry: &SpecEntry) -> Result<String, Error> {
        spec::for_prompt(&self.ctx.workspace, &entry.file)
    }

    fn spec(&self, id: &str) -> Result<&SpecEntry, Error> {
        self.plan.spec(id).ok_or_else(|| gone(&self.store, id))
    }

    fn spec_mut(&mut self, id: &str) -> Result<&mut SpecEntry, Error> {
        self.plan.spec_mut(id).ok_or_else(|| gone(&self.store, id))
    }

    fn save(&mut self) -> Result<(), Error> {
        Ok(self.store.save(&mut self.plan, "build-mode")?)
    }

    fn emit(&self, event: Event) {
        self.emitter.emit(&event);
    }

    fn stopped(&self) -> bool {
        self.ctx.stop.is_stopped()
    }

    /// The outcome to stop with between two agent sessions: a person asked the run to stop
    /// (`ralph stop`), or, with `once`, this run made its session. The lock's note, deleted
    /// during the last session, is put back here first, so it is back before the next one.
    fn stop_between_sessions(&mut self) -> Option<SpecsOutcome> {
        if let Some(message) = self.lock.check() {
            self.emit(Event::Warning { message });
        }
        if self.lock.stop_news() {
            self.emit(Event::StopRequested {});
        }
        if self.lock.stop_asked() {
            return Some(SpecsOutcome::Stopped {
                remaining: self.plan.build_order().len(),
            });
        }
        let step = self.step.as_ref().filter(|_| self.ctx.config.once)?;
        Some(SpecsOutcome::Once {
            step: step.clone(),
            remaining: self.plan.build_order().len(),
        })
    }

    /// The gates' names, for the prompts.
    fn gate_names(&self) -> Vec<&str> {
        self.ctx.gates.iter().map(|g| g.name()).collect()
    }
}

/// How build mode stops at `entry`, if a task of it is blocked or it was given up (its
/// status blocked) by an earlier run: what the loop and the dry run both say.
pub(crate) fn stuck(entry: &SpecEntry) -> Option<SpecsOutcome> {
    if entry.tasks.iter().any(|t| t.question.is_some()) {
        return Some(awaiting(entry));
    }
    if entry.tasks.iter().any(|t| t.status == Status::Blocked) {
        return Some(blocked(entry));
    }
    (entry.status == Status::Blocked).then(|| SpecsOutcome::AttemptsExhausted {
        spec: entry.id.clone(),
        attempts: entry.attempts,
        reason: entry.blocked_reason.clone().unwrap_or_default(),
    })
}

/// The error of a spec the run was working on that is no longer in the file.
/// Resets the spec `name` names for `--force` and saves the file; what was done, in words.
fn force_rebuild(
    store: &ImplementationStore,
    plan: &mut Implementation,
    name: &str,
) -> Result<String, Error> {
    let Some(index) = plan.named(name) else {
        return Err(SpecsError::UnknownSpec {
            spec: name.to_owned(),
            implementation: store.path().to_path_buf(),
            known: plan.specs.iter().map(|s| s.id.clone()).collect(),
        }
        .into());
    };
    let entry = &mut plan.specs[index];
    let was = entry.status;
    entry.reset_for_rebuild();
    let message = format!(
        "spec {} ({was:?}, forced): built again from its first task; its {} tasks are pending",
        entry.id,
        entry.tasks.len()
    );
    store.save(plan, "build-mode")?;
    Ok(message)
}

fn gone(store: &ImplementationStore, id: &str) -> Error {
    Error::from(SpecsError::SpecGone {
        spec: id.to_owned(),
        implementation: store.path().to_path_buf(),
    })
}

/// `entry` blocked by its blocked tasks.
/// How build mode stops at `entry` while a task's question waits for a person's answer.
fn awaiting(entry: &SpecEntry) -> SpecsOutcome {
    let questions = entry
        .tasks
        .iter()
        .filter_map(|t| Some(BlockedItem::new(&t.id, t.question.clone()?)))
        .collect();
    SpecsOutcome::AwaitingAnswer {
        spec: entry.id.clone(),
        questions,
    }
}

fn blocked(entry: &SpecEntry) -> SpecsOutcome {
    let items = entry
        .tasks
        .iter()
        .filter(|t| t.status == Status::Blocked)
        .map(|t| BlockedItem::new(&t.id, t.blocked_reason.clone().unwrap_or_default()))
        .collect();
    SpecsOutcome::Blocked {
        spec: entry.id.clone(),
        items,
    }
}
