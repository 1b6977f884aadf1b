//! The construct loop's dry run: what the next step of a run would be, worked out from the
//! stored board and the config without starting an agent or a gate, without taking the
//! workspace's lock and without writing anything.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::ready::ReadyQueue;
use super::{RunFacts, SPEND_SCOPE, resolve_spec, spec_issue_text, stop_outcome, unsound_blocked};
use crate::model::{Board, Change, Issue, Stage, TaskId, TaskStatus};
use crate::outcome::Outcome;
use crate::runtime::Context;
use crate::runtime::error::Error;
use crate::runtime::spec::SpecDoc;

/// What [`Ralph::dry_run`](crate::Ralph::dry_run) found: the stage that would run, its next
/// item, the prompt template it would use and where that comes from, and the limits.
///
/// Its `Display` is the report `ralph construct --dry-run` prints.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct DryRun {
    /// The spec, relative to the workspace.
    pub spec: String,
    /// Where the board is kept ([`Store::location`](crate::store::Store::location)): the
    /// store's file, relative to the workspace when inside it (`.ralph/plan.jsonl`,
    /// `PROGRESS.md`), or `memory`; `None` when the store does not say.
    pub state: Option<String>,
    /// The stage the run would enter.
    pub stage: Stage,
    /// The iteration it would run in.
    pub iteration: u32,
    /// In BUILD, the task that would be built (id, name); in INVESTIGATE, the issue that
    /// would be investigated (id, text).
    pub next: Option<(String, String)>,
    /// In BUILD with [`build_concurrency`](Self::build_concurrency) above 1, the ready tasks
    /// that would start beside [`next`](Self::next), in order (tasks are built at once only
    /// in a git repository whose tracked files are committed; otherwise one at a time).
    pub beside: Vec<(String, String)>,
    /// The prompt template the stage would render (`build`, `retry`, `investigate`,
    /// `verify`, `decompose`); `None` when no agent would run.
    pub template: Option<String>,
    /// The override file of that template (from `[prompts]`); `None` for the built-in one.
    pub template_source: Option<String>,
    /// Why the run would stop at once, if it would (the outcome's message).
    pub stop: Option<String>,
    /// Tasks not yet accepted, plus open issues.
    pub remaining: usize,
    /// Tasks accepted so far, of [`tasks`](Self::tasks) (seed 003's "tasks X/Y").
    pub accepted: usize,
    /// Tasks on the board, decomposed ones left out (their subtasks count instead).
    pub tasks: usize,
    /// `max_iterations`.
    pub max_iterations: u32,
    /// `stage_timeout`.
    #[serde(serialize_with = "crate::time::secs")]
    pub stage_timeout: Duration,
    /// `agent_timeout`.
    #[serde(serialize_with = "crate::time::secs")]
    pub agent_timeout: Duration,
    /// `retries`.
    pub retries: u32,
    /// `decompose_after_rejections`.
    pub decompose_after_rejections: u32,
    /// `once`.
    pub once: bool,
    /// `recent_attempts`.
    pub recent_attempts: usize,
    /// `build_concurrency`.
    pub build_concurrency: usize,
    /// `unreachable_after`.
    #[serde(serialize_with = "crate::time::secs")]
    pub unreachable_after: Duration,
    /// How long the run would wait for an answer to an agent's question
    /// ([`Config::question_wait_or_default`](crate::Config::question_wait_or_default)).
    #[serde(serialize_with = "crate::time::secs")]
    pub question_wait: Duration,
    /// The run-wide limits (`max_cost_usd`, `max_tokens`) and what the board's runs spent
    /// against them; `None` without limits.
    pub budget: Option<String>,
    /// What loading the state had to repair (a torn final write dropped), if anything; the
    /// run would redo the step that wrote it.
    pub repaired: Option<String>,
    /// The agent that would run ([`Agent::name`](crate::Agent::name)).
    pub agent: String,
    /// When the spec is longer than a prompt carries: its size and how much of it (head and
    /// tail) reaches the agent. `None` when all of it does.
    pub spec_cut: Option<String>,
    /// When the spec changed since the board took it in: the issue a run would seed for
    /// its change. `None` when it did not.
    pub spec_changed: Option<String>,
    /// The gates a task's attempt must pass, by name, in order; optional ones are marked
    /// `(optional)`. Empty when there is none.
    pub gates: Vec<String>,
    /// How the run's agent and gates would be confined ("Sandbox" in docs/running.md).
    pub sandbox: String,
}

impl fmt::Display for DryRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Dry run of {} (nothing was run or written)", self.spec)?;
        if let Some(cut) = &self.spec_cut {
            writeln!(f, "  spec:      {cut}")?;
        }
        if let Some(changed) = &self.spec_changed {
            writeln!(f, "  spec:      {changed}")?;
        }
        if let Some(state) = &self.state {
            writeln!(f, "  state:     {state}")?;
        }
        writeln!(
            f,
            "  stage:     {} (iteration {})",
            self.stage, self.iteration
        )?;
        if let Some((id, name)) = &self.next {
            writeln!(f, "  next:      {id}: {name}")?;
        }
        for (id, name) in &self.beside {
            writeln!(f, "  beside it: {id}: {name}")?;
        }
        if let Some(template) = &self.template {
            let source = self.template_source.as_deref().unwrap_or("built-in");
            writeln!(f, "  prompt:    {template} ({source})")?;
        }
        if let Some(stop) = &self.stop {
            writeln!(f, "  would stop: {}", stop.lines().next().unwrap_or(""))?;
        }
        if let Some(note) = &self.repaired {
            writeln!(f, "  repaired:  {note}")?;
        }
        writeln!(f, "  agent:     {}", self.agent)?;
        self.write_gates(f)?;
        writeln!(f, "  sandbox:   {}", self.sandbox)?;
        writeln!(f, "  tasks:     {}/{} accepted", self.accepted, self.tasks)?;
        writeln!(f, "  remaining: {}", self.remaining)?;
        self.write_limits(f)?;
        if let Some(budget) = &self.budget {
            write!(f, "\n  budget:    {budget}")?;
        }
        Ok(())
    }
}

impl DryRun {
    /// The `gates:` line: the gates in order, or that none is required.
    fn write_gates(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.gates.iter().all(|g| g.ends_with(OPTIONAL)) {
            writeln!(
                f,
                "  gates:     no required gate: a task is done on the agent's word and the verifier's{}",
                match self.gates.as_slice() {
                    [] => String::new(),
                    optional => format!(" ({})", optional.join(", ")),
                }
            )
        } else {
            writeln!(f, "  gates:     {}", self.gates.join(", "))
        }
    }

    /// The `limits:` line, without its line end.
    fn write_limits(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "  limits:    max iterations {}, stage timeout {}, agent timeout {}, retries {}, \
             decompose after {} rejections, once {}, recent attempts {}, build concurrency {}, \
             unreachable after {}, question wait {}",
            self.max_iterations,
            humantime::format_duration(self.stage_timeout),
            humantime::format_duration(self.agent_timeout),
            self.retries,
            self.decompose_after_rejections,
            if self.once { "yes" } else { "no" },
            self.recent_attempts,
            self.build_concurrency,
            humantime::format_duration(self.unreachable_after),
            humantime::format_duration(self.question_wait),
        )
    }
}

/// How an optional gate is marked in [`DryRun::gates`].
const OPTIONAL: &str = " (optional)";

/// Works out the [`DryRun`] for `spec` (or the spec on record). Reads the store; writes nothing.
pub(crate) async fn dry_run(ctx: &Context, spec: Option<&Path>) -> Result<DryRun, Error> {
    let mut board = ctx.store.load().await?;
    let spec = resolve_spec(&ctx.workspace, &board.run, spec)?;
    // Checked as the run would check it: an empty or binary spec is refused here too.
    let spec_cut = crate::runtime::spec::read(&ctx.workspace, &spec)?.cut_note();
    // As the run would begin: what cannot be built as it stands is blocked.
    board.apply_all(unsound_blocked(&board).0);
    let config = &ctx.config;
    let spec_changed = seed_as_a_run_would(&mut board, &ctx.workspace, &spec)?;
    let iteration = board.run.iteration.max(1);
    board.run.iteration = iteration;
    let stage = board.stage();
    let (next, beside) = next_up(&board, stage, config.build_concurrency);
    // A new run: its iterations start here, and no check of it has failed yet.
    let ending = RunFacts {
        first_iteration: iteration,
        check_failed: false,
    };
    let stop = stop_outcome(&board, config, stage, ending).map(|o: Outcome| o.to_string());
    let template = match stop {
        Some(_) => None,
        None => template_for(&board, stage, next.as_ref()),
    };
    Ok(DryRun {
        spec,
        state: state_place(ctx),
        stage,
        iteration,
        template_source: template.and_then(|t| ctx.prompts.origin(t).map(str::to_owned)),
        repaired: ctx.store.recovered(),
        template: template.map(str::to_owned),
        next,
        beside,
        stop,
        accepted: count_tasks(&board, |s| s == TaskStatus::Accepted),
        tasks: count_tasks(&board, |s| s != TaskStatus::Decomposed),
        remaining: board.remaining_tasks().count() + board.open_issues().count(),
        max_iterations: config.max_iterations,
        stage_timeout: config.stage_timeout,
        agent_timeout: config.agent_timeout,
        retries: config.retries,
        decompose_after_rejections: config.decompose_after_rejections,
        once: config.once,
        recent_attempts: config.recent_attempts,
        build_concurrency: config.build_concurrency,
        unreachable_after: config.unreachable_after,
        question_wait: config.question_wait_or_default(),
        budget: ctx.budget_line(SPEND_SCOPE)?,
        agent: ctx.agent.name().to_owned(),
        spec_cut,
        spec_changed,
        sandbox: ctx.sandbox_line(),
        gates: gate_names(ctx),
    })
}

/// Where the store keeps its state, relative to the workspace when it is inside it.
fn state_place(ctx: &Context) -> Option<String> {
    ctx.store.location().map(|place| {
        Path::new(&place)
            .strip_prefix(&ctx.workspace)
            .map_or(place.clone(), |rel| rel.display().to_string())
    })
}

/// The tasks on the board whose status passes `keep`.
fn count_tasks(board: &Board, keep: impl Fn(TaskStatus) -> bool) -> usize {
    board.tasks.values().filter(|t| keep(t.status)).count()
}

/// The gates by name, in order, the optional ones marked.
fn gate_names(ctx: &Context) -> Vec<String> {
    ctx.gates
        .iter()
        .map(|g| match g.required() {
            true => g.name().to_owned(),
            false => format!("{}{OPTIONAL}", g.name()),
        })
        .collect()
}

/// A task or issue as a dry run names it: its id, and its name (an issue's text).
type IdAndName = (String, String);

/// Seeds the board as a run would begin: the spec as an issue the first time, else its change
/// since the board took it in. Returns the dry run's note on that change, if there is one.
fn seed_as_a_run_would(
    board: &mut Board,
    workspace: &Path,
    spec: &str,
) -> Result<Option<String>, Error> {
    if !board.run.seeded {
        let id = board.next_issue_id();
        let text = spec_issue_text(spec, &SpecDoc::read(workspace, spec)?);
        board.apply(Change::Issue(Issue::new(id, text)));
        board.run.seeded = true;
        return Ok(None);
    }
    let Some(change) = super::spec_change::since_taken(workspace, spec) else {
        return Ok(None);
    };
    let id = board.next_issue_id();
    let note = format!("changed since the board took it in; a run seeds its change as issue {id}");
    board.apply(Change::Issue(Issue::new(id, change)));
    Ok(Some(note))
}

/// What the stage would work on next (id and name or text), and in build, the tasks that would
/// start beside it (up to `build_concurrency` in all).
fn next_up(
    board: &Board,
    stage: Stage,
    build_concurrency: usize,
) -> (Option<IdAndName>, Vec<IdAndName>) {
    let next = match stage {
        Stage::Build => {
            let mut ready = ReadyQueue::new(board);
            let mut take = || {
                ready
                    .pop()
                    .and_then(|id: TaskId| board.tasks.get(&id))
                    .map(|t| (t.id.to_string(), t.name.clone()))
            };
            let next = take();
            let beside = std::iter::from_fn(take)
                .take(build_concurrency.saturating_sub(1))
                .collect();
            return (next, beside);
        }
        Stage::Investigate => board
            .open_issues()
            .next()
            .map(|i| (i.id.to_string(), i.text.clone())),
        Stage::Decompose => board
            .tasks
            .values()
            .find(|t| t.is_killed())
            .map(|t| (t.id.to_string(), t.name.clone()))
            .or_else(|| {
                let issue = board.issues.values().find(|i| i.is_killed())?;
                Some((issue.id.to_string(), issue.text.clone()))
            }),
        _ => None,
    };
    (next, Vec::new())
}

/// The prompt template the stage's next agent run would use, for a run that would not stop.
fn template_for(board: &Board, stage: Stage, next: Option<&IdAndName>) -> Option<&'static str> {
    match stage {
        Stage::Build => next
            .and_then(|(id, _)| board.tasks.get(id.as_str()))
            .map(super::build::template),
        Stage::Investigate => Some("investigate"),
        Stage::Verify | Stage::Unverified
            if board.tasks.values().any(|t| t.status == TaskStatus::Done) =>
        {
            Some("verify")
        }
        Stage::Verify | Stage::Unverified => Some("gap_analysis"),
        Stage::Decompose => Some("decompose"),
        _ => None,
    }
}
