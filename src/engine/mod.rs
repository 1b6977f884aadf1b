//! The construct loop (seed 000): the stage is derived from the board, each stage's
//! transitions are persisted before the next agent or gate runs, so a restarted process
//! resumes where the work stood.
//!
//! ```text
//! loop until complete | max iterations | blocked | interrupted
//!   DECOMPOSE    a killed task -> 2-5 subtasks from its log's head and tail; iteration ends
//!   INVESTIGATE  open issues -> tasks (or out of scope)
//!   BUILD        next unblocked task by priority: prompt -> agent -> marker -> gates
//!                -> done | retry with the failure | blocked | killed
//!   VERIFY       one verifier per done task, concurrently; gap analysis -> new tasks and
//!                issues; verdicts applied; re-prioritized; iteration ends
//! ```

pub(crate) mod build;
pub(crate) mod call;
mod decompose;
pub(crate) mod dry_run;
mod investigate;
pub(crate) mod logs;
pub(crate) mod plan_mode;
mod progress_md;
pub(crate) mod spec_build;
mod verify;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use serde_json::json;

use self::call::Caller;
use self::logs::{Emitter, Logs};
use crate::answer::{DepRef, ProposedTask};
use crate::config::Config;
use crate::error::Error;
use crate::event::Event;
use crate::model::{
    Board, Change, Issue, IssueStatus, IterationEntry, RunState, Stage, Task, TaskId, TaskStatus,
};
use crate::outcome::{BlockedItem, Outcome};
use crate::output::truncate_middle;
use crate::ralph::Inner;

/// How much of the spec goes into a prompt; agents can read the file for the rest.
const SPEC_PROMPT_BYTES: usize = 16 * 1024;
/// How many recently finished task names the BUILD prompt lists.
const RECENT_TASKS: usize = 20;
/// How much of a failure (gate output, verifier reason) goes into a retry prompt.
const FAILURE_PROMPT_BYTES: usize = 8 * 1024;

/// What a stage tells the loop.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Derive the next stage from the board.
    Continue,
    /// The user stopped the run.
    Interrupted,
}

/// The spec being constructed, as prompts see it.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct SpecDoc {
    name: String,
    path: String,
    text: String,
}

/// A spec file's text as prompts carry it: read as bytes (non-UTF-8 shown lossily), trimmed,
/// bounded to [`SPEC_PROMPT_BYTES`]; the agent can read the file for the rest.
pub(crate) fn spec_for_prompt(workspace: &Path, rel: impl AsRef<Path>) -> Result<String, Error> {
    let path = workspace.join(rel);
    let bytes = std::fs::read(&path).map_err(|source| Error::Spec { path, source })?;
    Ok(truncate_middle(
        String::from_utf8_lossy(&bytes).trim(),
        SPEC_PROMPT_BYTES,
    ))
}

impl SpecDoc {
    fn read(workspace: &Path, rel: &str) -> Result<Self, Error> {
        let text = spec_for_prompt(workspace, rel)?;
        let name = text
            .lines()
            .find_map(|l| l.strip_prefix("# "))
            .map(|t| t.trim().to_owned())
            .unwrap_or_else(|| {
                Path::new(rel)
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| rel.to_owned())
            });
        Ok(SpecDoc {
            name,
            path: rel.to_owned(),
            text,
        })
    }
}

/// One construct run.
pub(crate) struct Engine {
    inner: Arc<Inner>,
    board: Board,
    spec: SpecDoc,
    caller: Caller,
    recent: VecDeque<String>,
    /// The iteration this run started in: with `once`, the run ends when it is over.
    first_iteration: u32,
    /// When the current iteration started (for the iteration log).
    iteration_started: (std::time::Instant, String),
}

impl Engine {
    /// Loads the board, settles which spec is constructed, and seeds a fresh board with the
    /// spec as its first issue.
    pub(crate) async fn start(inner: Arc<Inner>, spec: Option<&Path>) -> Result<Self, Error> {
        let board = inner.store.load().await?;
        let rel = resolve_spec(&inner.workspace, &board.run, spec)?;
        let spec = SpecDoc::read(&inner.workspace, &rel)?;
        let logs = Logs::new(&inner.workspace, &inner.config.log_dir)?;
        let caller = Caller {
            emitter: Emitter::new(&inner.observers),
            inner: inner.clone(),
            logs,
            run_dir: None,
        };
        let recent = board
            .tasks
            .values()
            .filter(|t| t.is_finished())
            .map(|t| t.name.clone())
            .collect::<Vec<_>>();
        let recent = recent[recent.len().saturating_sub(RECENT_TASKS)..]
            .iter()
            .cloned()
            .collect();
        let mut engine = Engine {
            inner,
            board,
            spec,
            caller,
            recent,
            first_iteration: 0,
            iteration_started: (std::time::Instant::now(), logs::now_rfc3339()),
        };
        engine.sweep_leftovers().await;
        engine.begin(rel).await?;
        engine.first_iteration = engine.board.run.iteration;
        Ok(engine)
    }

    /// Kills what an earlier ralph on this workspace left running when it was killed (its
    /// gates' and agents' processes carry the workspace's owner tag). Only when ralph holds
    /// the store's lock: then none of them can belong to a live run.
    async fn sweep_leftovers(&self) {
        if !self.inner.exclusive {
            return;
        }
        let owner = crate::process::owner_of(&self.inner.workspace);
        let killed = tokio::task::spawn_blocking(move || crate::process::sweep_owner(&owner))
            .await
            .unwrap_or(0);
        if killed > 0 {
            self.emit(Event::Warning {
                message: format!(
                    "killed {killed} process(es) left running by an earlier, killed run of this workspace"
                ),
            });
        }
    }

    /// Records the spec, the config line and iteration 1 on a new board; seeds the issue.
    async fn begin(&mut self, rel: String) -> Result<(), Error> {
        let mut run = self.board.run.clone();
        let mut changes = Vec::new();
        let config = config_line(&self.inner.config);
        if self.board.config.as_ref() != Some(&config) {
            changes.push(Change::Config(config));
        }
        if !run.seeded && self.board.tasks.is_empty() && self.board.issues.is_empty() {
            let id = run.next_issue_id(|id| self.board.issues.contains_key(id));
            let text = format!("Implement the spec `{}` ({}).", rel, self.spec.name);
            changes.push(Change::Issue(Issue::new(id, text).with_origin("spec")));
        }
        run.seeded = true;
        run.spec = Some(rel);
        run.iteration = run.iteration.max(1);
        if run != self.board.run {
            changes.push(Change::Run(run));
        }
        self.commit(changes).await
    }

    /// Runs stages until an outcome.
    pub(crate) async fn run(&mut self) -> Result<Outcome, Error> {
        loop {
            if self.inner.stop.is_cancelled() {
                return Ok(self.finish(Outcome::Interrupted));
            }
            if self.inner.store.edited_externally() {
                // Seed 003: a person may have ticked, added or removed tasks since the last
                // stage; their file is the truth.
                self.board = self.inner.store.load().await?;
            }
            let stage = self.board.stage();
            if let Some(outcome) = self.outcome_at(stage) {
                return Ok(self.finish(outcome));
            }
            if self.config().once && self.board.run.iteration > self.first_iteration {
                return Ok(self.finish(Outcome::Once {
                    iteration: self.first_iteration,
                    remaining: self.remaining(),
                }));
            }
            let log = self.caller.logs.enter(stage, &self.caller.emitter)?;
            self.emit(Event::StageEntered {
                iteration: self.board.run.iteration,
                stage,
                log,
            });
            let flow = match stage {
                Stage::Decompose => self.decompose().await?,
                Stage::Investigate => self.investigate().await?,
                Stage::Build => self.build().await?,
                _ => self.verify().await?,
            };
            if flow == Flow::Interrupted {
                return Ok(self.finish(Outcome::Interrupted));
            }
        }
    }

    /// The outcome if the loop should end at `stage`.
    fn outcome_at(&self, stage: Stage) -> Option<Outcome> {
        stop_outcome(&self.board, &self.inner.config, stage)
    }

    /// Work not yet accepted: remaining tasks plus open issues (each becomes tasks).
    fn remaining(&self) -> usize {
        remaining(&self.board)
    }

    fn finish(&self, outcome: Outcome) -> Outcome {
        self.emit(Event::Finished {
            outcome: outcome.clone(),
        });
        outcome
    }

    /// Persists `changes`, then applies them in memory: what the board says is on disk.
    async fn commit(&mut self, changes: Vec<Change>) -> Result<(), Error> {
        if changes.is_empty() {
            return Ok(());
        }
        self.inner.store.persist(&changes).await?;
        self.board.apply_all(changes);
        Ok(())
    }

    fn emit(&self, event: Event) {
        self.caller.emitter.emit(&event);
    }

    fn config(&self) -> &Config {
        &self.inner.config
    }

    fn stopped(&self) -> bool {
        self.inner.stop.is_cancelled()
    }

    /// The task `id`, which the engine took from the board itself.
    fn task(&self, id: &TaskId) -> Result<Task, Error> {
        self.board.tasks.get(id).cloned().ok_or_else(|| {
            Error::Store(crate::store::StoreError::Other(format!(
                "task {id} is no longer on the board"
            )))
        })
    }

    /// The run bookkeeping advanced to the next iteration, with the one ending now in the
    /// iteration log (`completed` tasks accepted in it, and a one-line note).
    fn next_iteration(&mut self, completed: usize, note: &str) -> RunState {
        let (started, at) = std::mem::replace(
            &mut self.iteration_started,
            (std::time::Instant::now(), logs::now_rfc3339()),
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

    /// Checks that every id dependency of proposed tasks names a task on the board.
    fn check_dep_ids(&self, tasks: &[ProposedTask]) -> Result<(), String> {
        for (i, task) in tasks.iter().enumerate() {
            for dep in &task.deps {
                if let DepRef::Id(id) = dep
                    && !self.board.tasks.contains_key(&TaskId::new(id.as_str()))
                {
                    return Err(format!("tasks[{i}].deps names {id}, which is not a task"));
                }
            }
        }
        Ok(())
    }

    /// Turns proposals into tasks with fresh ids (or the given ids), advancing `run`'s counter.
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
                let deps = p.deps.iter().filter_map(|d| match d {
                    DepRef::Index(i) => ids.get(*i).cloned(),
                    DepRef::Id(id) => Some(TaskId::new(id.as_str())),
                });
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

/// The outcome if a run on `board` should end at `stage`.
fn stop_outcome(board: &Board, config: &Config, stage: Stage) -> Option<Outcome> {
    let iteration = board.run.iteration;
    match stage {
        // A person's RALPH_DONE stops the loop; it does not make unverified work complete.
        Stage::Complete if board.declared_complete && remaining(board) > 0 => {
            Some(Outcome::Declared {
                remaining: remaining(board),
            })
        }
        Stage::Complete => Some(Outcome::Complete {
            iterations: iteration.saturating_sub(1).max(1),
            accepted: board
                .tasks
                .values()
                .filter(|t| t.status == TaskStatus::Accepted)
                .count(),
        }),
        Stage::Blocked => Some(Outcome::Blocked {
            items: blocked_items(board),
        }),
        _ if iteration > config.max_iterations => Some(Outcome::MaxIterations {
            limit: config.max_iterations,
            remaining: remaining(board),
        }),
        _ => None,
    }
}

/// Work not yet accepted: remaining tasks plus open issues (each becomes tasks).
fn remaining(board: &Board) -> usize {
    board.remaining_tasks().count() + board.open_issues().count()
}

/// The spec path relative to the workspace, reconciled with the one on record.
fn resolve_spec(workspace: &Path, run: &RunState, given: Option<&Path>) -> Result<String, Error> {
    let Some(given) = given else {
        return run.spec.clone().ok_or(Error::NoSpec);
    };
    let absolute = if given.is_absolute() {
        given.to_path_buf()
    } else {
        workspace.join(given)
    };
    let canonical = absolute.canonicalize().map_err(|source| Error::Spec {
        path: absolute.clone(),
        source,
    })?;
    let rel: PathBuf = canonical
        .strip_prefix(workspace)
        .map(Path::to_path_buf)
        .unwrap_or(canonical);
    let rel = rel.to_string_lossy().into_owned();
    match &run.spec {
        Some(recorded) if *recorded != rel => Err(Error::SpecMismatch {
            recorded: recorded.clone(),
            given: rel,
        }),
        _ => Ok(rel),
    }
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
    match value {
        serde_json::Value::Object(map) => map,
        _ => serde_json::Map::new(),
    }
}

/// What blocks the board: blocked tasks and issues, and tasks waiting on them.
fn blocked_items(board: &Board) -> Vec<BlockedItem> {
    let mut items = Vec::new();
    for issue in board
        .issues
        .values()
        .filter(|i| i.status == IssueStatus::Blocked)
    {
        items.push(BlockedItem::new(
            issue.id.as_str(),
            issue.reason.clone().unwrap_or_default(),
        ));
    }
    for task in board.remaining_tasks() {
        let reason = match task.status {
            TaskStatus::Blocked => task.blocked_reason.clone().unwrap_or_default(),
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

/// The first line of `text`, for one-line event reasons.
fn first_line(text: &str) -> String {
    truncate_middle(text.lines().next().unwrap_or(""), 300)
}

/// Bounds a failure for a retry prompt.
fn bounded_failure(text: &str) -> String {
    truncate_middle(text, FAILURE_PROMPT_BYTES)
}
