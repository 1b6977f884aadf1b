//! The construct loop: the stage is derived from the board, each stage's transitions are
//! persisted before the next agent or gate runs, so a restarted process resumes where the
//! work stood.
//!
//! ```text
//! loop until complete | max iterations | blocked | interrupted
//!   DECOMPOSE    a killed task (or one rejected `decompose_after_rejections` times) -> 2-5
//!                subtasks from its log's head and tail; iteration ends
//!   INVESTIGATE  open issues -> tasks (or out of scope)
//!   BUILD        next unblocked task by priority: prompt -> agent -> marker -> gates
//!                -> done | retry with the failure | blocked | killed
//!   VERIFY       one verifier per done task, concurrently; gap analysis -> new tasks and
//!                issues; verdicts applied; re-prioritized; iteration ends
//! ```

mod build;
mod decompose;
pub(crate) mod dry_run;
mod final_gates;
mod in_place;
mod investigate;
mod parallel;
mod ready;
mod spec_change;
pub(crate) mod switch;
mod verify;

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;

use indexmap::IndexMap;
use serde_json::json;
use tokio::time::Instant;
use tracing::Instrument;

use crate::agent::Role;
use crate::answer::{DepRef, ProposedTask};
use crate::config::Config;
use crate::event::Event;
use crate::model::rules;
use crate::model::{
    AcceptedBy, Board, Change, Issue, IssueStatus, IterationEntry, Priority, RunState, Stage, Task,
    TaskId, TaskStatus,
};
use crate::outcome::{BlockedItem, Outcome};
use crate::output::{bounded_failure, first_line};
use crate::prioritize::{Prioritizer, PriorityReport};
use crate::runtime::Context;
use crate::runtime::call::{Call, Caller, Limit};
use crate::runtime::error::{EditError, Error};
use crate::runtime::guidance::Journal;
use crate::runtime::home::Home;
use crate::runtime::logs::{Emitter, Logs};
use crate::runtime::spec::{self, SpecDoc};
use crate::runtime::workspace::RunLock;
use crate::time::now_rfc3339;

/// The origin of the issue a spec is seeded as.
pub(super) const SPEC_ORIGIN: &str = "spec";

/// How many recently finished task names the BUILD prompt lists.
const RECENT_TASKS: usize = crate::prompt::RECENT_COMPLETED;

/// What a stage tells the loop.
#[derive(Debug, PartialEq)]
pub(crate) enum Flow {
    /// Derive the next stage from the board.
    Continue,
    /// The user stopped the run.
    Interrupted,
    /// The run ends here with this outcome (a gate that looks broken).
    Stop(Outcome),
}

/// Runs the construct loop on `spec` (the one on record when `None`) to an outcome, and
/// ends it, an error included, with its `Finished` event and the hooks on it, while the
/// run still holds the workspace's lock.
///
/// # Errors
///
/// The run's error, else a required hook's failure ([`Error::Hook`]).
///
/// With `plan_only` the run stops before the first BUILD (seed 000's `plan` mode): the
/// spec seeded and its issues investigated into tasks, which a person can then read and
/// edit before any code is written.
pub(crate) async fn run(
    ctx: Arc<Context>,
    spec: Option<&Path>,
    plan_only: bool,
) -> Result<Outcome, Error> {
    let (result, engine) = match Engine::start(ctx.clone(), spec).await {
        Ok(mut engine) => {
            engine.plan_only = plan_only;
            (engine.run().await, Some(engine))
        }
        Err(e) => (Err(e), None),
    };
    let emitter = match &engine {
        Some(engine) => engine.emitter.clone(),
        None => ctx.emitter(&[]),
    };
    let event = match &result {
        Ok(outcome) => Event::construct_finished(outcome.clone()),
        Err(e) => Event::failed("construct", "the construct loop", e),
    };
    let event = crate::runtime::spend::stamped(event, &ctx.workspace, SPEND_SCOPE);
    let hooks = emitter.finish(event).await;
    drop(engine);
    crate::runtime::error::after_hooks(result, hooks)
}

/// One construct run.
pub(crate) struct Engine {
    ctx: Arc<Context>,
    board: Board,
    spec: SpecDoc,
    emitter: Emitter,
    /// The last required gate failure, while no task has passed the gates since.
    gate_streak: Option<build::GateStreak>,
    logs: Logs,
    caller: Caller,
    /// The workspace's lock, held for the run.
    lock: RunLock,
    recent: VecDeque<String>,
    /// The iteration this run started in: with `once`, the run ends when it is over.
    first_iteration: u32,
    /// When the current iteration started (for the iteration log).
    iteration_started: (std::time::Instant, String),
    /// Whether a gap analysis of this run gave no valid answer: an UNVERIFIED board then
    /// ends the run, where a new run asks once more.
    check_failed: bool,
    /// The user's branch, where each task's work lands as a commit; `None` outside a git
    /// repository (nothing is committed then).
    home: Option<Home>,
    /// Stop once the board is planned, before any BUILD ([`run`]'s `plan_only`).
    plan_only: bool,
}

/// The names of the last [`RECENT_TASKS`] tasks `board` has finished, oldest first: the
/// BUILD prompt's recent work, carried over from earlier runs.
fn recently_finished(board: &Board) -> VecDeque<String> {
    let finished = board
        .tasks
        .values()
        .filter(|t| t.is_finished())
        .map(|t| t.name.clone())
        .collect::<Vec<_>>();
    finished[finished.len().saturating_sub(RECENT_TASKS)..]
        .iter()
        .cloned()
        .collect()
}

impl Engine {
    /// Starts the run (the workspace's lock, the sweep of a killed run's leftovers), loads
    /// the board, settles which spec is constructed, and seeds a fresh board with the spec
    /// as its first issue.
    pub(crate) async fn start(ctx: Arc<Context>, spec: Option<&Path>) -> Result<Self, Error> {
        // A spec refused for its path or its text leaves no trace: checked before the lock
        // (which makes `.ralph/`) is taken. Its match with the spec on record needs the board.
        if let Some(given) = spec {
            spec::check(&ctx.workspace, given)?;
        }
        let before = ctx.emitter(&[]);
        let lock = ctx.begin(&before).await?;
        let mut board = ctx.load_board(&before).await?;
        let emitter = ctx.emitter(&[]);
        let rel = resolve_spec(&ctx.workspace, &board.run, spec)?;
        ctx.sandbox.record([std::path::PathBuf::from(&rel)]);
        let spec = SpecDoc::read(&ctx.workspace, &rel)?;
        let home = home(&ctx).await?;
        let logs = Logs::new(
            &ctx.workspace,
            &ctx.config.log_dir,
            ctx.config.log_files_kept,
        )?;
        let caller = ctx.spending_caller(emitter.clone(), SPEND_SCOPE)?;
        // The board's figures are the ledger's, whatever the store last saved.
        if let Some(budget) = caller.budget() {
            stamp(&mut board.run, &budget.ledger().spent());
        }
        let recent = recently_finished(&board);
        let mut engine = Engine {
            ctx,
            board,
            spec,
            emitter,
            gate_streak: None,
            logs,
            caller,
            lock,
            recent,
            first_iteration: 0,
            iteration_started: (std::time::Instant::now(), now_rfc3339()),
            check_failed: false,
            home,
            plan_only: false,
        };
        // One task at a time is built in the user's own work tree and committed there:
        // refused before anything runs if the user's uncommitted edits would be mixed in,
        // and an interrupted task's turn taken up with nothing but its own work.
        if let Some(home) = &engine.home
            && engine.ctx.config.build_concurrency == 1
        {
            let resumed = home.resume().await?;
            engine.emit_all(resumed.warning());
        }
        engine.begin(rel).await?;
        engine.ctx.warn_without_gates(&engine.emitter);
        engine.first_iteration = engine.board.run.iteration;
        Ok(engine)
    }

    /// Records the spec, the config line and iteration 1 on a new board; seeds the spec as
    /// an issue the first time, whatever a person added to the board before (a task or an
    /// issue added first must not stand in for the spec's own work); blocks the tasks that
    /// cannot be built as they stand ([`unsound_blocked`]).
    async fn begin(&mut self, rel: String) -> Result<(), Error> {
        let mut run = self.board.run.clone();
        let (mut changes, mut warnings) = unsound_blocked(&self.board);
        let config = config_line(&self.ctx.config);
        if self.board.config.as_ref() != Some(&config) {
            changes.push(Change::Config(config));
        }
        if !run.seeded {
            // A new board: what an earlier one spent no longer counts against the limits.
            if let Some(budget) = self.caller.budget() {
                budget.ledger().reset()?;
            }
            let id = run.next_issue_id(|id| self.board.issues.contains_key(id));
            let text = spec_issue_text(&rel, &self.spec);
            changes.push(Change::Issue(Issue::new(id, text).with_origin(SPEC_ORIGIN)));
        } else if let Some(change) = spec_change::since_taken(&self.ctx.workspace, &rel) {
            let id = run.next_issue_id(|id| self.board.issues.contains_key(id));
            warnings.push(Event::Warning {
                message: format!(
                    "{rel} changed since the board took it in: its change is issue {id}"
                ),
            });
            let text = format!(
                "The spec `{rel}` changed since its work was planned. Build what the change \
                 adds or alters (lines removed `-`, added `+`):\n\n```diff\n{change}```"
            );
            changes.push(Change::Issue(Issue::new(id, text).with_origin(SPEC_ORIGIN)));
        }
        run.seeded = true;
        run.spec = Some(rel);
        run.spec_title = Some(self.spec.name.clone());
        run.iteration = run.iteration.max(1);
        if run != self.board.run {
            changes.push(Change::Run(run));
        }
        self.commit(changes).await?;
        // After the board holds its work: a crash before this seeds the change again.
        spec_change::take_in(&self.ctx.workspace, self.spec.path.as_str())?;
        self.emit_all(warnings);
        Ok(())
    }

    /// After a person's edit of the board's file during the run: blocks what cannot be
    /// built as it stands, as [`begin`](Self::begin) does.
    async fn block_unsound(&mut self) -> Result<(), Error> {
        let (changes, warnings) = unsound_blocked(&self.board);
        self.commit(changes).await?;
        self.emit_all(warnings);
        Ok(())
    }

    fn emit_all(&self, events: impl IntoIterator<Item = Event>) {
        for event in events {
            self.emit(event);
        }
    }

    /// Puts the lock's note back when it went missing, saying so (`RunLock::check`): at
    /// every step of the loop and before every attempt, so that a note deleted during an
    /// agent run is back before the next run starts, not only at the next stage.
    fn keep_lock_note(&mut self) {
        if let Some(message) = self.lock.check() {
            self.emit(Event::Warning { message });
        }
    }

    /// Runs stages until an outcome.
    pub(crate) async fn run(&mut self) -> Result<Outcome, Error> {
        loop {
            if self.ctx.stop.is_stopped() {
                return Ok(self.finish(Outcome::Interrupted).await);
            }
            if let Some(Flow::Stop(outcome)) = self.asked_to_stop() {
                return Ok(self.finish(outcome).await);
            }
            self.keep_lock_note();
            self.reload_if_edited().await?;
            self.take_answers().await?;
            let stage = self.board.stage();
            if stage == Stage::Blocked && self.questions_waiting().next().is_some() {
                match self.wait_for_answers().await? {
                    None => continue,
                    Some(outcome) => return Ok(self.finish(outcome).await),
                }
            }
            if stage == Stage::Complete && !self.board.declared_complete {
                match self.gates_on_final_tree().await? {
                    None => {}
                    Some(Flow::Continue) => continue,
                    Some(Flow::Interrupted) => return Ok(self.finish(Outcome::Interrupted).await),
                    Some(Flow::Stop(outcome)) => return Ok(self.finish(outcome).await),
                }
            }
            if let Some(outcome) = self
                .outcome_at(stage)
                .or_else(|| self.stop_asked_before(stage))
            {
                return Ok(self.finish(outcome).await);
            }
            match self.run_stage(stage).await? {
                Flow::Continue => {}
                Flow::Interrupted => return Ok(self.finish(Outcome::Interrupted).await),
                Flow::Stop(outcome) => return Ok(self.finish(outcome).await),
            }
        }
    }

    /// The tasks and issues waiting for a person's answer to their agent's question: each
    /// id and question.
    fn questions_waiting(&self) -> impl Iterator<Item = (&str, &str)> {
        let tasks = self
            .board
            .tasks
            .values()
            .filter(|t| t.status == TaskStatus::Pending)
            .filter_map(|t| Some((t.id.as_str(), t.question.as_deref()?)));
        let issues = self
            .board
            .issues
            .values()
            .filter(|i| i.is_asking())
            .filter_map(|i| Some((i.id.as_str(), i.question.as_deref()?)));
        tasks.chain(issues)
    }

    /// Takes in the answers a person posted (`ralph answer`): a task whose question is
    /// answered is built again, and its next attempt gets the question and the answer.
    /// Returns whether one was.
    async fn take_answers(&mut self) -> Result<bool, Error> {
        let waiting: Vec<String> = self
            .questions_waiting()
            .map(|(id, _)| id.to_owned())
            .collect();
        if waiting.is_empty() {
            return Ok(false);
        }
        let answered = crate::runtime::questions::answered(
            &self.ctx.workspace,
            &self.emitter,
            waiting.iter().map(String::as_str),
        );
        let mut changes = Vec::new();
        for id in answered {
            if let Some(issue) = self
                .board
                .issues
                .get(&crate::model::IssueId::new(id.as_str()))
            {
                let mut issue = issue.clone();
                issue.question = None;
                changes.push(Change::Issue(issue));
                continue;
            }
            let mut task = self.task(&TaskId::new(id))?;
            task.question = None;
            changes.push(Change::Task(task));
        }
        let any = !changes.is_empty();
        if any {
            self.commit(changes).await?;
        }
        Ok(any)
    }

    /// Nothing can go on but what waits for a person's answer: waits for one up to
    /// `question_wait`, then ends the run waiting for it. `None` when an answer came; a stop
    /// or a signal ends the wait with its own outcome.
    async fn wait_for_answers(&mut self) -> Result<Option<Outcome>, Error> {
        let wait = self.config().question_wait_or_default();
        let until = tokio::time::Instant::now() + wait;
        if !wait.is_zero() {
            self.emit(Event::Warning {
                message: format!(
                    "nothing else can go on: waiting up to {} for an answer (ralph answer ID \"…\")",
                    humantime::format_duration(wait)
                ),
            });
        }
        loop {
            if self.take_answers().await? {
                return Ok(None);
            }
            if self.stopped() {
                return Ok(Some(Outcome::Interrupted));
            }
            if let Some(Flow::Stop(outcome)) = self.asked_to_stop() {
                return Ok(Some(outcome));
            }
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                let questions = self
                    .questions_waiting()
                    .map(|(id, question)| BlockedItem::new(id, question))
                    .collect();
                return Ok(Some(Outcome::AwaitingAnswer { questions }));
            }
            let stop = self.ctx.stop.clone();
            tokio::select! {
                () = tokio::time::sleep(left.min(crate::runtime::questions::POLL)) => {}
                () = stop.stopped() => {}
            }
        }
    }

    /// Takes in the board's file if a person edited it since the last stage.
    async fn reload_if_edited(&mut self) -> Result<(), Error> {
        if self.ctx.store.edited_externally() {
            // Seed 003: a person may have ticked, added or removed tasks since the last
            // stage; their file is the truth.
            self.board = self.ctx.store.load().await?;
            self.block_unsound().await?;
        }
        Ok(())
    }

    /// The outcome if the run was asked to stop before `stage`: with `plan_only` once only
    /// building is left, with `once` once its iteration is over.
    fn stop_asked_before(&self, stage: Stage) -> Option<Outcome> {
        if self.plan_only && !matches!(stage, Stage::Investigate | Stage::Decompose) {
            // Only the stages that make tasks ran: what is left is building them.
            return Some(Outcome::Planned {
                tasks: self.board.remaining_tasks().count(),
            });
        }
        if self.config().once && self.board.run.iteration > self.first_iteration {
            return Some(Outcome::Once {
                iteration: self.first_iteration,
                remaining: self.remaining(),
            });
        }
        None
    }

    /// Runs `stage` under its own log and tracing span; a budget exhausted during it stops
    /// the run with that outcome. The user's branch is put back afterwards if an agent moved
    /// it.
    async fn run_stage(&mut self, stage: Stage) -> Result<Flow, Error> {
        let log = self.logs.enter(stage, &self.emitter)?;
        self.emit(Event::StageEntered {
            iteration: self.board.run.iteration,
            stage,
            log,
        });
        let span = tracing::info_span!(
            target: "ralph",
            "stage",
            iteration = self.board.run.iteration,
            stage = %stage,
        );
        let flow = match self.stage(stage).instrument(span).await {
            Err(Error::BudgetExhausted {
                spent_usd,
                spent_tokens,
                max_cost_usd,
                max_tokens,
            }) => Flow::Stop(Outcome::BudgetExhausted {
                spent_usd,
                spent_tokens,
                max_cost_usd,
                max_tokens,
            }),
            flow => flow?,
        };
        self.guard_home(stage).await?;
        Ok(flow)
    }

    /// Puts the user's branch back if an agent of `stage` moved it (the build attempts are
    /// checked one by one; this catches the other roles), and says so.
    pub(super) async fn guard_home(&mut self, stage: Stage) -> Result<(), Error> {
        let Some(home) = &mut self.home else {
            return Ok(());
        };
        if let Some(moved) = home.check().await? {
            self.emit(Event::Warning {
                message: format!("during {stage}: {moved}"),
            });
        }
        Ok(())
    }

    /// Runs one stage. An UNVERIFIED board (a gap analysis of an earlier run gave no valid
    /// answer) is verified again.
    async fn stage(&mut self, stage: Stage) -> Result<Flow, Error> {
        match stage {
            Stage::Decompose => self.decompose().await,
            Stage::Investigate => self.investigate().await,
            Stage::Build => self.build().await,
            _ => self.verify().await,
        }
    }

    /// The outcome if the loop should end at `stage`.
    fn outcome_at(&self, stage: Stage) -> Option<Outcome> {
        let ending = RunFacts {
            first_iteration: self.first_iteration,
            check_failed: self.check_failed,
        };
        stop_outcome(&self.board, &self.ctx.config, stage, ending)
    }

    /// Work not yet accepted: remaining tasks plus open issues (each becomes tasks).
    fn remaining(&self) -> usize {
        remaining(&self.board)
    }

    /// Ends the guidance (`ralph tell`) whose scope is over: a task's once it is accepted,
    /// the workspace's once the spec is complete.
    fn end_guidance(&self, outcome: &Outcome) {
        let complete = matches!(outcome, Outcome::Complete { .. });
        let accepted = |id: &str| {
            self.board
                .task(id)
                .is_some_and(|t| t.status == TaskStatus::Accepted)
        };
        let journal = Journal::in_state(&crate::runtime::workspace::state_dir(&self.ctx.workspace));
        if let Err(e) = journal.end(|scope| scope.map_or(complete, accepted)) {
            self.emit(Event::Warning {
                message: format!("the guidance whose scope ended was not marked so: {e}"),
            });
        }
    }

    /// Ends the run with `outcome`, after [`commit_board`](Self::commit_board). (Its
    /// `Finished` event is [`run`]'s, which sends one for an error too.)
    async fn finish(&mut self, outcome: Outcome) -> Outcome {
        self.end_guidance(&outcome);
        if let Some(home) = &self.home
            && let Err(e) = home.note_stop().await
        {
            self.emit(Event::Warning {
                message: format!("the work tree as this run leaves it was not noted: {e}"),
            });
        }
        // The board saved at the end carries the ledger's figures: the runs since its last
        // save are on it too.
        let mut run = self.board.run.clone();
        if let Some(budget) = self.caller.budget() {
            stamp(&mut run, &budget.ledger().spent());
        }
        if run != self.board.run
            && let Err(e) = self.commit(vec![Change::Run(run)]).await
        {
            self.emit(Event::Warning {
                message: format!("the board's spend was not saved: {e}"),
            });
        }
        if let Err(e) = self.commit_board().await {
            // The outcome stands; the board is saved, only not committed.
            self.emit(Event::Warning {
                message: format!("the board was not committed: {e}"),
            });
        }
        outcome
    }

    /// Commits a board kept for people in the work tree (a progress file), and only it, as
    /// it stands at the end of the run: each task's commit holds it as it was then, and the
    /// verdicts and the iteration log come after. So a run leaves nothing of ralph's in
    /// `git status`. Nothing happens outside git, for an ignored file, or with no change.
    async fn commit_board(&mut self) -> Result<(), Error> {
        let Some(home) = &mut self.home else {
            return Ok(());
        };
        let location = self
            .ctx
            .store
            .location()
            .filter(|_| self.ctx.store.edited_externally());
        let Some(rel) = location
            .as_deref()
            .and_then(|l| Path::new(l).strip_prefix(&self.ctx.workspace).ok())
        else {
            return Ok(());
        };
        let git = home.git().clone();
        if git.ignored(&rel.to_string_lossy()).await? {
            return Ok(());
        }
        let path = format!("{}{}", git.prefix().await?, rel.display());
        let message = format!(
            "ralph: {} after iteration {}",
            rel.display(),
            self.board.run.iteration
        );
        if let Some(commit) = git.commit_paths(&message, &[path]).await? {
            home.advanced(commit);
        }
        Ok(())
    }

    /// Persists `changes`, then applies them in memory: what the board says is on disk. A
    /// run state saved carries the tokens and cost spent so far.
    async fn commit(&mut self, mut changes: Vec<Change>) -> Result<(), Error> {
        if changes.is_empty() {
            return Ok(());
        }
        if let Some(budget) = self.caller.budget() {
            let spent = budget.ledger().spent();
            for change in &mut changes {
                if let Change::Run(run) = change {
                    stamp(run, &spent);
                }
            }
        }
        self.ctx.store.persist(&changes).await?;
        self.board.apply_all(changes);
        Ok(())
    }

    fn emit(&self, event: Event) {
        self.emitter.emit(&event);
    }

    /// A call of `role` about `subject`, with its log beside the stage's.
    fn call(
        &self,
        role: Role,
        subject: &str,
        attempt: u32,
        prompt: String,
        deadline: Instant,
    ) -> Call {
        Call {
            announce: None,
            role,
            subject: Some(subject.to_owned()),
            attempt,
            log: self.logs.run_log(subject, role.as_str(), attempt),
            prompt,
            deadline,
        }
    }

    fn config(&self) -> &Config {
        &self.ctx.config
    }

    fn stopped(&self) -> bool {
        self.ctx.stop.is_stopped()
    }

    /// The stage's end when a person asked the run to stop (`ralph stop`): checked between
    /// steps, so what is in flight finishes and is recorded first.
    fn asked_to_stop(&self) -> Option<Flow> {
        if self.lock.stop_news() {
            self.emit(Event::StopRequested {});
        }
        self.lock.stop_asked().then(|| {
            Flow::Stop(Outcome::Stopped {
                remaining: self.remaining(),
            })
        })
    }

    /// The task `id`, which the engine took from the board itself.
    fn task(&self, id: &TaskId) -> Result<Task, Error> {
        self.board
            .tasks
            .get(id)
            .cloned()
            .ok_or_else(|| Error::Edit(EditError::UnknownTask(id.clone())))
    }

    /// The run bookkeeping advanced to the next iteration, with the one ending now in the
    /// iteration log (`completed` tasks accepted in it, and a one-line note).
    fn next_iteration(&mut self, completed: usize, note: &str) -> RunState {
        let (started, at) = std::mem::replace(
            &mut self.iteration_started,
            (std::time::Instant::now(), now_rfc3339()),
        );
        let mut run = self.board.run.clone();
        run.log_iteration(IterationEntry::new(
            run.iteration,
            at,
            started.elapsed(),
            completed,
            note,
        ));
        run.iteration += 1;
        run
    }

    fn remember_finished(&mut self, name: &str) {
        if self.recent.len() == RECENT_TASKS {
            self.recent.pop_front();
        }
        self.recent.push_back(name.to_owned());
    }

    /// Adds to `changes` the ranks and priorities the prioritizer gives every task that can
    /// still be built once `changes` are applied: a changed task is updated in its change, any
    /// other appended; a buildable task the prioritizer leaves out loses its rank (it comes
    /// after the ordered ones). Called for every batch that adds tasks (INVESTIGATE,
    /// DECOMPOSE, the end of VERIFY), so BUILD always follows the prioritizer's order;
    /// `priorities` says which priorities it may change. Returns the event to report.
    fn prioritize(
        &self,
        changes: &mut Vec<Change>,
        priorities: Priorities,
    ) -> Result<Event, Error> {
        let spec = &self.spec.text;
        prioritize_changes(
            &self.board,
            spec,
            &*self.ctx.prioritizer,
            changes,
            priorities,
        )
    }

    /// Checks that every id dependency of proposed tasks (the answer's `field`: `tasks`,
    /// `subtasks`) names a task on the board that can finish: a decomposed one stands for its
    /// subtasks ([`materialize`](Self::materialize) rewires it), so one with none is refused
    /// as a missing task is.
    fn check_dep_ids(&self, field: &str, tasks: &[ProposedTask]) -> Result<(), String> {
        for (i, task) in tasks.iter().enumerate() {
            for dep in &task.deps {
                let DepRef::Id(id) = dep else { continue };
                let dep = TaskId::new(id.as_str());
                match self.board.tasks.get(&dep) {
                    None => {
                        return Err(format!("{field}[{i}].deps names {id}, which is not a task"));
                    }
                    Some(found)
                        if found.status == TaskStatus::Decomposed
                            && rules::dep_targets(&self.board, &dep).is_empty() =>
                    {
                        return Err(format!(
                            "{field}[{i}].deps names {id}, which was decomposed and has no \
                             subtask on the board, so it never finishes: name a task on the board"
                        ));
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(())
    }

    /// Turns proposals into tasks with fresh ids (or the given ids), advancing `run`'s counter.
    /// A dependency on a decomposed task becomes one on each of its subtasks: the agent named
    /// the work, which they do now, and the old id never finishes.
    fn materialize(
        &self,
        proposals: &[ProposedTask],
        ids: Option<Vec<TaskId>>,
        run: &mut RunState,
        origin: &str,
    ) -> Vec<Task> {
        let ids = ids.unwrap_or_else(|| {
            proposals
                .iter()
                .map(|_| run.next_task_id(|id| self.board.tasks.contains_key(id)))
                .collect()
        });
        proposals
            .iter()
            .zip(&ids)
            .map(|(p, id)| {
                let mut deps: Vec<TaskId> = Vec::with_capacity(p.deps.len());
                for dep in &p.deps {
                    let targets = match dep {
                        DepRef::Index(i) => ids.get(*i).cloned().into_iter().collect(),
                        DepRef::Id(id) => {
                            rules::dep_targets(&self.board, &TaskId::new(id.as_str()))
                        }
                    };
                    for target in targets {
                        if !deps.contains(&target) {
                            deps.push(target);
                        }
                    }
                }
                let mut task = Task::new(id.clone(), p.name.trim())
                    .with_acceptance(p.accept.trim())
                    .with_notes(p.notes.trim())
                    .with_deps(deps);
                task.priority = p.priority;
                task.complexity = p.complexity;
                task.origin = Some(origin.to_owned());
                task
            })
            .collect()
    }
}

/// What the end of a run depends on besides the board.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RunFacts {
    /// The iteration the run started in.
    pub(crate) first_iteration: u32,
    /// Whether a gap analysis of this run gave no valid answer.
    pub(crate) check_failed: bool,
}

/// The outcome if a run on `board` should end at `stage`.
/// The result of a job of a `JoinSet`. A job that panicked panics here, as if it had run on
/// this thread. No other end is possible: the loop never aborts its jobs, and a runtime that
/// shuts down drops this future with them.
pub(super) fn joined<T>(result: Result<T, tokio::task::JoinError>) -> T {
    match result {
        Ok(value) => value,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

fn stop_outcome(board: &Board, config: &Config, stage: Stage, ending: RunFacts) -> Option<Outcome> {
    let iteration = board.run.iteration;
    match stage {
        // A person's RALPH_DONE stops the loop; it does not make unverified work complete.
        Stage::Complete if board.declared_complete && remaining(board) > 0 => {
            Some(Outcome::Declared {
                remaining: remaining(board),
            })
        }
        Stage::Complete => Some(complete(board, iteration.saturating_sub(1).max(1))),
        Stage::Unverified if ending.check_failed => Some(Outcome::Unverified {
            reason: board
                .run
                .spec_check
                .as_ref()
                .and_then(|c| c.failed.clone())
                .unwrap_or_default(),
        }),
        Stage::Blocked => Some(Outcome::Blocked {
            items: blocked_items(board),
        }),
        // The limit is per invocation: the board's iteration number keeps counting, and
        // the same command run again gets as many iterations again.
        _ if iteration.saturating_sub(ending.first_iteration) >= config.max_iterations => {
            Some(Outcome::MaxIterations {
                limit: config.max_iterations,
                remaining: remaining(board),
            })
        }
        _ => None,
    }
}

/// The outcome of a complete board, with what it rests on: the gates its accepted tasks
/// passed, who accepted them, and the gap analysis that answered.
fn complete(board: &Board, iterations: u32) -> Outcome {
    let (mut gates, mut verifier, mut people) = (Vec::new(), Vec::new(), Vec::new());
    let accepted = board
        .tasks
        .values()
        .filter(|t| t.status == TaskStatus::Accepted);
    for task in accepted {
        for gate in &task.gates {
            if !gates.contains(gate) {
                gates.push(gate.clone());
            }
        }
        match task.accepted_by {
            Some(AcceptedBy::Person) => people.push(task.id.clone()),
            _ => verifier.push(task.id.clone()),
        }
    }
    Outcome::Complete {
        iterations,
        accepted: verifier.len() + people.len(),
        gates,
        verifier,
        people,
        gap_analysis: board.run.spec_check.as_ref().map_or(0, |c| c.iteration),
    }
}

/// Work not yet accepted: remaining tasks plus open issues (each becomes tasks).
fn remaining(board: &Board) -> usize {
    board.remaining_tasks().count() + board.open_issues().count()
}

/// The spec path relative to the workspace (by the one rule of every mode), reconciled with
/// the one on record.
fn resolve_spec(workspace: &Path, run: &RunState, given: Option<&Path>) -> Result<String, Error> {
    // The recorded spec is held to the rule too: state written by an older ralph may name
    // a path it no longer accepts.
    let Some(given) = given.or(run.spec.as_deref().map(Path::new)) else {
        return Err(Error::NoSpec);
    };
    let rel = spec::inside(workspace, Path::new(""), given)?;
    let rel = rel.to_string_lossy().into_owned();
    match &run.spec {
        Some(recorded) if *recorded != rel => Err(Error::SpecMismatch {
            recorded: recorded.clone(),
            given: rel,
        }),
        _ => Ok(rel),
    }
}

/// The construct board's scope in the spend ledger ([`spend`](crate::runtime::spend)).
pub(crate) const SPEND_SCOPE: &str = "construct";

/// The user's branch in `ctx`'s workspace, with ralph's own files: its state folder, its
/// logs and its store's file (never committed) — unless the store is a file kept for people
/// (a progress file), which is committed with the work and never counted as the user's edit.
async fn home(ctx: &Context) -> Result<Option<Home>, Error> {
    let mut own = vec![
        crate::runtime::workspace::STATE_DIR.to_owned(),
        ctx.config.log_dir.to_string_lossy().into_owned(),
    ];
    let mut bookkeeping = Vec::new();
    if let Some(store) = ctx.store.location()
        && let Ok(rel) = Path::new(&store).strip_prefix(&ctx.workspace)
    {
        let rel = rel.to_string_lossy().into_owned();
        match ctx.store.edited_externally() {
            true => bookkeeping.push(rel),
            false => own.push(rel),
        }
    }
    Ok(Home::record(ctx.git(&ctx.workspace), own)
        .await?
        .map(|home| home.with_bookkeeping(&bookkeeping, &[])))
}

/// The text of the issue a spec is seeded as.
fn spec_issue_text(rel: &str, spec: &SpecDoc) -> String {
    format!("Implement the spec `{rel}` ({}).", spec.name)
}

/// Seed 000's config line.
fn config_line(config: &Config) -> serde_json::Map<String, serde_json::Value> {
    let value = json!({
        "timeout_ms": config.stage_timeout.as_millis() as u64,
        "max_iterations": config.max_iterations,
        "context_warn": config.context.warn,
        "context_compact": config.context.compact,
        "context_kill": config.context.kill,
    });
    let mut map = match value {
        serde_json::Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    // The run-wide limits the run had, flags included: what `ralph status` shows after it.
    if let Some(usd) = config.max_cost_usd {
        map.insert("max_cost_usd".into(), json!(usd));
    }
    if let Some(tokens) = config.max_tokens {
        map.insert("max_tokens".into(), json!(tokens));
    }
    map
}

/// The changes that block each task of `board` that cannot be built as it stands (a
/// record written by an older ralph, or by hand: a dependency cycle, a dependency not on the
/// board or on a decomposed task with no subtask, an id that cannot name a git branch or
/// folder), and a warning for each. Such a record would otherwise fail every run (a cycle
/// leaves the prioritizer no order) or wait forever; blocked, it holds back only itself and
/// what waits on it, and `ralph task unblock` makes it buildable.
///
/// Before that, a waiting task's dependency on a decomposed task is rewired to the subtasks
/// (as DECOMPOSE rewires the dependents it sees), with a warning: the person who wrote it
/// meant the work, which the subtasks now do.
pub(crate) fn unsound_blocked(board: &Board) -> (Vec<Change>, Vec<Event>) {
    let (mut tasks, mut warnings) = rewired_to_subtasks(board);
    let rewired_board;
    let view = match tasks.is_empty() {
        true => board,
        false => {
            // Checked as rewired: a rewiring can close a cycle a hand-written plan left open.
            let mut copy = board.clone();
            copy.apply_all(tasks.values().cloned().map(Change::Task));
            rewired_board = copy;
            &rewired_board
        }
    };
    for (id, reason) in crate::model::rules::unsound(view) {
        let Some(task) = view.tasks.get(&id) else {
            continue;
        };
        let mut blocked = task.clone().with_status(TaskStatus::Blocked);
        blocked.blocked_reason = Some(reason.clone());
        tasks.insert(id.clone(), blocked);
        warnings.push(Event::Warning {
            message: format!("{id} blocked: {reason}"),
        });
    }
    (tasks.into_values().map(Change::Task).collect(), warnings)
}

/// The waiting tasks of `board` whose dependencies name a decomposed task with subtasks,
/// rewired to those subtasks, in board order, with a warning for each.
fn rewired_to_subtasks(board: &Board) -> (IndexMap<TaskId, Task>, Vec<Event>) {
    let mut tasks = IndexMap::new();
    let mut warnings = Vec::new();
    let waiting = board
        .tasks
        .values()
        .filter(|t| matches!(t.status, TaskStatus::Pending | TaskStatus::Blocked));
    for task in waiting {
        let Some(deps) = crate::model::rules::rewired_deps(board, task) else {
            continue;
        };
        let names = |ids: &mut dyn Iterator<Item = &TaskId>| {
            ids.map(TaskId::as_str).collect::<Vec<_>>().join(", ")
        };
        let replaced = names(&mut task.deps.iter().filter(|d| !deps.contains(d)));
        warnings.push(Event::Warning {
            message: format!(
                "{} depended on {replaced}, which was decomposed: it waits on {} now",
                task.id,
                names(&mut deps.iter())
            ),
        });
        let mut rewired = task.clone();
        rewired.deps = deps;
        tasks.insert(task.id.clone(), rewired);
    }
    (tasks, warnings)
}

/// What blocks the board: blocked tasks and issues, and tasks waiting on them.
fn blocked_items(board: &Board) -> Vec<BlockedItem> {
    let mut items = Vec::new();
    for issue in board
        .issues
        .values()
        .filter(|i| i.status == IssueStatus::Blocked || i.is_asking())
    {
        let reason = match &issue.question {
            Some(question) if issue.is_asking() => format!("asks a person: {question}"),
            _ => issue.reason.clone().unwrap_or_default(),
        };
        items.push(BlockedItem::new(issue.id.as_str(), reason));
    }
    for task in board.remaining_tasks() {
        let reason = match task.status {
            TaskStatus::Blocked => task.blocked_reason.clone().unwrap_or_default(),
            TaskStatus::Pending if task.question.is_some() => {
                format!(
                    "asks a person: {}",
                    task.question.as_deref().unwrap_or_default()
                )
            }
            TaskStatus::Pending => {
                let waiting: Vec<&str> = task
                    .deps
                    .iter()
                    .filter(|d| !board.tasks.get(*d).is_some_and(Task::is_finished))
                    .map(TaskId::as_str)
                    .collect();
                format!("waits on {}", waiting.join(", "))
            }
            _ => continue,
        };
        items.push(BlockedItem::new(task.id.as_str(), reason));
    }
    items
}

impl Engine {
    /// What a kill means, naming the agent it stopped (its `role`) and the limit that
    /// fired, with its setting: a tombstone's text, an issue's reason. A person reading it
    /// knows which setting to raise, and a killed verifier is not taken for a killed build.
    pub(super) fn kill_note(&self, limit: Limit, role: Role) -> String {
        let who = match role {
            Role::Verify => "the verifier",
            Role::Investigate => "the investigator",
            Role::Decompose => "the decomposer",
            _ => "the build agent",
        };
        let config = self.config();
        let shown = |d| humantime::format_duration(d);
        let what = match limit {
            Limit::Idle(after) => {
                format!("by its idle timeout ({} without output)", shown(after))
            }
            Limit::Agent => format!("by agent_timeout ({})", shown(config.agent_timeout)),
            Limit::Stage => format!("by stage_timeout ({})", shown(config.stage_timeout)),
            Limit::Context => format!("at the context limit ({:.0}%)", config.context.kill * 100.0),
        };
        format!("{who} was stopped {what}")
    }
}

/// Which priorities a prioritization may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Priorities {
    /// Every task without an explicit priority gets the prioritizer's: seed 000's PLAN and
    /// the end of VERIFY ("prioritize all pending tasks"), and `ralph task prioritize`.
    Assign,
    /// Seed 000's INVESTIGATE and DECOMPOSE do not prioritize: their tasks inherit the
    /// issue's or the parent's priority. The prioritizer is still asked, only to place the
    /// new tasks in BUILD's order, and sees every priority a task already has (computed or
    /// inherited) as fixed; a task with none at all (made from an issue without one, as the
    /// spec's `i-1` is) gets the prioritizer's.
    Inherit,
}

/// Runs `prioritizer` over the buildable tasks of `board` as `changes` leave them, and adds
/// (or updates) in `changes` every task whose rank or computed priority changed.
///
/// # Errors
///
/// [`Error::Prioritize`] on a dependency cycle.
pub(crate) fn prioritize_changes(
    board: &Board,
    spec: &str,
    prioritizer: &dyn Prioritizer,
    changes: &mut Vec<Change>,
    priorities: Priorities,
) -> Result<Event, Error> {
    // Where each task of `changes` is, to update it in place.
    let mut index: HashMap<TaskId, usize> = HashMap::new();
    for (i, change) in changes.iter().enumerate() {
        if let Change::Task(task) = change {
            index.insert(task.id.clone(), i);
        }
    }
    let pending = buildable_after(board, changes, &index);
    let order = match priorities {
        Priorities::Assign => prioritizer.prioritize_on(&pending, board, spec)?,
        Priorities::Inherit => prioritizer.prioritize_on(&fixed(&pending), board, spec)?,
    };
    let updates = ranked(&pending, &order, priorities);
    let event = Event::Prioritized {
        report: PriorityReport::of(&order),
        order: order
            .iter()
            .map(|(id, priority)| format!("{id}:{priority}"))
            .collect(),
    };
    for task in updates {
        match index.get(&task.id) {
            Some(&i) => changes[i] = Change::Task(task),
            None => changes.push(Change::Task(task)),
        }
    }
    Ok(event)
}

/// The tasks that can be built once `changes` (whose tasks `index` finds) are applied to
/// `board`: the board's in its order, then the new ones in the order they were made, so the
/// prioritizer sees creation order.
fn buildable_after(board: &Board, changes: &[Change], index: &HashMap<TaskId, usize>) -> Vec<Task> {
    let current = |id: &TaskId| match index.get(id).map(|&i| &changes[i]) {
        Some(Change::Task(task)) => Some(task),
        _ => board.tasks.get(id),
    };
    let new = changes.iter().filter_map(|c| match c {
        Change::Task(task) if !board.tasks.contains_key(&task.id) => Some(&task.id),
        _ => None,
    });
    board
        .tasks
        .keys()
        .chain(new)
        .filter_map(current)
        .filter(|t| t.is_buildable())
        .cloned()
        .collect()
}

/// The tasks of `pending` that the prioritizer's `order` changes: each ranked by its first
/// place in it (unranked if left out) and given its priority as the computed one unless
/// `priorities` keeps the one it has.
fn ranked(pending: &[Task], order: &[(TaskId, Priority)], priorities: Priorities) -> Vec<Task> {
    let mut places: HashMap<&TaskId, (u32, Priority)> = HashMap::new();
    for (rank, (id, priority)) in order.iter().enumerate() {
        places
            .entry(id)
            .or_insert((u32::try_from(rank).unwrap_or(u32::MAX), *priority));
    }
    let mut updates = Vec::new();
    for before in pending {
        let mut task = before.clone();
        match places.get(&task.id) {
            Some(&(rank, priority)) => {
                task.rank = Some(rank);
                let keeps = match priorities {
                    Priorities::Assign => task.priority.is_some(),
                    Priorities::Inherit => task.priority.or(task.computed_priority).is_some(),
                };
                if !keeps {
                    task.computed_priority = Some(priority);
                }
            }
            None => task.rank = None,
        }
        if task != *before {
            updates.push(task);
        }
    }
    updates
}

/// `tasks` as the prioritizer sees them when priorities are inherited: a computed (or
/// inherited) priority shown as the task's own, which a prioritizer keeps.
fn fixed(tasks: &[Task]) -> Vec<Task> {
    tasks
        .iter()
        .cloned()
        .map(|mut task| {
            task.priority = task.priority.or(task.computed_priority);
            task
        })
        .collect()
}

/// Writes the construct scope's spend (the ledger's) into the board's run state; a board
/// not seeded yet has spent nothing (its first run resets the scope).
pub(crate) fn stamp(run: &mut RunState, spent: &crate::runtime::spend::Spent) {
    let seeded = run.seeded;
    run.tokens_in = if seeded { spent.input_tokens } else { 0 };
    run.tokens_out = if seeded { spent.output_tokens } else { 0 };
    run.cost_usd = if seeded { spent.cost_usd } else { 0.0 };
}
