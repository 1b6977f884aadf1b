//! The board from the shell: `status`, `query`, `task …`, `issue …` (seed 000's commands),
//! and `repair`.
//! Reading needs no agent; every change goes through the library under the workspace lock.

use std::path::Path;

use clap::{Subcommand, ValueEnum};
use ralph::Spent;
use ralph::agent::FailureKind;
use ralph::model::{
    Board, Issue, IssueId, IssueStatus, KillReason, Priority, Stage, Task, TaskId, TaskStatus,
};
use ralph::{Agent, AgentError, AgentExit, AgentRequest, AgentRun, Ralph, async_trait};
use serde::Deserialize;

use crate::Result;
use crate::out::{inert, out};

/// `ralph query`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum Query {
    /// The stage: INVESTIGATE, BUILD, VERIFY, DECOMPOSE or COMPLETE; NONE before any run.
    Stage,
    /// The iteration number: the one running or to run next (0 before any run); once the
    /// spec is complete, the one that completed it.
    Iteration,
    /// The next action and its item, as JSON (action `none` before any run).
    Next,
    /// The issues still to act on, open and blocked, one JSON object per line; its
    /// `status` is `open` or `blocked` (then `reason` says why: unblock it with `ralph
    /// issue unblock ID`).
    Issues,
    /// The tasks still in the plan, one JSON object per line (`--done`: the done ones only).
    Tasks,
    /// Build mode's specs from `implementation.json`, one JSON object per line: id, name,
    /// status, tasks done and in all.
    Specs,
    /// The threads, one JSON object per line: id, title, phase.
    Threads,
}

/// `ralph task …`.
#[derive(Debug, Subcommand)]
pub(crate) enum TaskCommand {
    /// Add a task: `{"name": "…", "accept": "…", "deps": ["t-1"], "priority": "high"}`
    /// (an `id` is given when it has none).
    Add {
        /// The task as JSON.
        json: String,
    },
    /// Mark a pending task done (default: the task BUILD would take next).
    Done {
        /// The task.
        id: Option<String>,
    },
    /// Accept done tasks in a verifier's place (default: every done task).
    Accept {
        /// The tasks.
        ids: Vec<String>,
    },
    /// Reject a done task; the reason goes into its next attempt's prompt.
    Reject {
        /// Why. With two arguments, the first is the task.
        #[arg(num_args = 1..=2, required = true)]
        args: Vec<String>,
    },
    /// Order the pending tasks again and print the counts as JSON. Tasks that can never be
    /// built as they stand (a dependency cycle) are blocked first, as `construct` blocks
    /// them, and listed under `blocked`.
    Prioritize {
        /// The spec whose tasks to order. A workspace's board holds the tasks of one spec,
        /// the one on record, so this only checks that it is that one.
        #[arg(long)]
        spec: Option<std::path::PathBuf>,
    },
    /// Put blocked tasks back to pending with a fresh retry budget (an issue's id opens
    /// the issue again, as `ralph issue unblock` does). Build mode's tasks are named
    /// SPEC/TASK (`auth/auth-2`).
    Unblock {
        /// The tasks.
        #[arg(required = true)]
        ids: Vec<String>,
        /// Build mode: give back the work set aside when the spec blocked (the stash entry
        /// `ralph status` lists), as the spec's, for the next `ralph build` to take up.
        #[arg(long)]
        restore: bool,
    },
    /// The tasks, one per line.
    List,
}

/// `ralph issue …`.
#[derive(Debug, Subcommand)]
pub(crate) enum IssueCommand {
    /// Add an issue for INVESTIGATE.
    Add {
        /// What is wrong or missing.
        text: String,
        /// Its priority (low, medium, high), which the tasks made from it inherit.
        #[arg(long, value_parser = priority)]
        priority: Option<Priority>,
    },
    /// Open blocked issues again with a fresh retry budget (after what blocked them, an
    /// agent that was down or answered prose, is fixed).
    Unblock {
        /// The issues.
        #[arg(required = true)]
        ids: Vec<String>,
    },
}

/// `--priority`'s value: `low`, `medium` or `high`.
fn priority(text: &str) -> std::result::Result<Priority, String> {
    match text {
        "low" => Ok(Priority::Low),
        "medium" => Ok(Priority::Medium),
        "high" => Ok(Priority::High),
        _ => Err(format!("{text:?} is no priority: low, medium or high")),
    }
}

/// Whether `spec` names the spec the board holds the tasks of (`./spec.md` is `spec.md`).
fn same_spec(board: &Board, spec: &Path) -> Result<()> {
    let plain = |p: &Path| -> std::path::PathBuf {
        p.components()
            .filter(|c| !matches!(c, std::path::Component::CurDir))
            .collect()
    };
    match &board.run.spec {
        Some(recorded) if plain(Path::new(recorded)) == plain(spec) => Ok(()),
        Some(recorded) => Err(format!(
            "the board holds the tasks of {recorded}, not {}: one workspace builds one spec \
             at a time",
            spec.display()
        )
        .into()),
        None => Err(format!(
            "no spec on record here, so no tasks of {} to order: `ralph construct {}` starts it",
            spec.display(),
            spec.display()
        )
        .into()),
    }
}

/// A task as `ralph task add` takes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewTask {
    id: Option<String>,
    name: String,
    #[serde(default, alias = "acceptance")]
    accept: String,
    #[serde(default)]
    notes: String,
    #[serde(default)]
    deps: Vec<String>,
    priority: Option<Priority>,
}

/// The shape `ralph task add` takes, for the messages that refuse another.
const TASK_SHAPE: &str =
    r#"{"name": "…", "accept": "…"} (optional: "id", "notes", "deps", "priority")"#;

impl NewTask {
    /// `json` as a task. Only an object is one: serde would read an array as the struct's
    /// fields in order and answer with its own type name ("expected struct NewTask").
    fn parse(json: &str) -> Result<NewTask> {
        let value: serde_json::Value =
            serde_json::from_str(json).map_err(|e| format!("the task JSON does not parse: {e}"))?;
        if !value.is_object() {
            return Err(format!(
                "a task is a JSON object, {TASK_SHAPE}; got {}",
                json_kind(&value)
            )
            .into());
        }
        NewTask::deserialize(value)
            .map_err(|e| format!("the task JSON is not a task: {e}; a task is {TASK_SHAPE}").into())
    }
}

/// What kind of JSON value `value` is, as the messages name it.
fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// The board commands run no agent: this one says so if anything asks it to, as a failure
/// no retry can fix.
struct NoAgent;

#[async_trait]
impl Agent for NoAgent {
    fn name(&self) -> &str {
        "none"
    }

    async fn run(&self, _: AgentRequest) -> std::result::Result<AgentRun, AgentError> {
        Ok(AgentRun::new(AgentExit::Failed {
            reason: "the board commands run no agent".into(),
            kind: FailureKind::Fatal,
        }))
    }
}

fn open(workspace: &Path) -> Result<Ralph> {
    Ok(Ralph::builder()
        .workspace(workspace)
        .agent(NoAgent)
        .observer(crate::display::Warnings)
        .build()?)
}

/// `ralph status`: every mode that ran here, each in its own section (the construct
/// board, build mode's specs from `implementation.json`, the threads and their phases),
/// then the one next step.
pub(crate) async fn status(workspace: &Path) -> Result<()> {
    let ralph = open(workspace)?;
    let board = ralph.board().await?;
    let specs = implementation(&ralph)?;
    let threads = thread_records(&ralph)?;
    let mut next = Vec::new();
    if no_run(&board) {
        out!(
            "no construct run yet in this workspace ({})",
            ralph.workspace().display()
        );
    } else {
        next.extend(construct_status(&ralph, &board, workspace)?);
    }
    if let Some(plan) = &specs {
        next.extend(specs_status(&ralph, plan, workspace));
    }
    for thread in &threads {
        out!("thread {}  {}  {}", thread.id, thread.phase, thread.title);
    }
    spend_status(&ralph, &board)?;
    for told in ralph::steer::guidance(workspace) {
        out!("guidance {told}");
    }
    let questions = ralph::steer::questions(workspace);
    for (subject, question, age) in &questions {
        out!("question from {subject} (waiting {age}): {question}");
    }
    if let Some((subject, ..)) = questions.first() {
        // An answer is what lets the work go on: it comes before any other next step.
        next.insert(0, format!("ralph answer {subject} \"…\" (then run again)"));
    }
    match ralph::steer::in_progress_run(workspace)? {
        Some((run, true)) => out!(
            "run in progress ({run}): a stop is requested; it ends once its agent runs and gates in flight are recorded"
        ),
        Some((run, false)) => out!("run in progress ({run}); `ralph stop` ends it gently"),
        None => {}
    }
    if let Some(thread) = threads.iter().find(|t| crate::thread::has_a_next_step(t)) {
        next.push(format!(
            "thread {}: {}",
            thread.id,
            crate::thread::next(thread)
        ));
    }
    match next.first() {
        Some(next) => out!("next: {next}"),
        None if no_run(&board) && specs.is_none() && threads.is_empty() => {
            let again = crate::next::Again::new(workspace, "construct").command("");
            out!("next: `{again} SPEC.md` starts on a spec")
        }
        None => out!("next: nothing: every run here is complete"),
    }
    Ok(())
}

/// What the agents spent, by scope (the board, build mode's run, each thread), with the
/// agents and the subjects under it, beside the run-wide limits.
fn spend_status(ralph: &Ralph, board: &Board) -> Result<()> {
    use ralph::Totals;
    let totals = Totals::read(ralph.workspace())?;
    let limit = spend_limit(ralph.config(), board);
    if let Some(notice) = &totals.notice {
        eprintln!("warning: {notice}");
    }
    for (scope, spent) in &totals.scopes {
        out!(
            "spend {scope}: {}, {} in / {} out tokens (cache {} read, {} written), {} {}; {limit}",
            money(spent),
            spent.input_tokens,
            spent.output_tokens,
            spent.cache_read_tokens,
            spent.cache_creation_tokens,
            spent.runs,
            crate::display::plural(spent.runs as usize, "run", "runs"),
        );
        out!("  by agent: {}", costliest(&totals.agents, scope));
        out!("  by subject: {}", costliest(&totals.subjects, scope));
    }
    Ok(())
}

/// The run-wide spend limits `config` sets, in its keys' words: `no limit` when it sets
/// none.
fn spend_limit(config: &ralph::Config, board: &Board) -> String {
    let limits: Vec<String> = [
        config.max_cost_usd.map(|m| format!("max_cost_usd = {m}")),
        config.max_tokens.map(|m| format!("max_tokens = {m}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !limits.is_empty() {
        return format!("limit {}", limits.join(", "));
    }
    // None in ralph.toml: the last construct run's, which a flag may have set.
    let recorded = board.config.as_ref().map(|line| {
        ["max_cost_usd", "max_tokens"]
            .into_iter()
            .filter_map(|key| line.get(key).map(|value| format!("{key} = {value}")))
            .collect::<Vec<_>>()
    });
    match recorded {
        Some(limits) if !limits.is_empty() => {
            format!("limit {} (the last run's)", limits.join(", "))
        }
        _ => "no limit".to_owned(),
    }
}

/// What `spent` cost in dollars, with the runs that had no price and those whose cost is
/// an estimate.
fn money(spent: &Spent) -> String {
    let mut text = match spent.unpriced_runs {
        0 => format!("${:.2}", spent.cost_usd),
        n => format!("${:.2} (+{n} unpriced)", spent.cost_usd),
    };
    if spent.priced_runs > 0 {
        text.push_str(&format!(" ({} priced by [prices])", spent.priced_runs));
    }
    if spent.estimated_runs > 0 {
        text.push_str(&format!(
            " (an estimate: {} cut short)",
            spent.estimated_runs
        ));
    }
    text
}

/// The names under `scope` in `map` (its agents or its subjects) with what each cost: the
/// costliest first, at most SHOWN_SPEND of them, so that a 2,000-task board stays legible.
fn costliest(map: &std::collections::BTreeMap<(String, String), Spent>, scope: &str) -> String {
    let mut rows: Vec<(&String, &Spent)> = map
        .iter()
        .filter(|((s, _), _)| s == scope)
        .map(|((_, name), spent)| (name, spent))
        .collect();
    rows.sort_by(|a, b| b.1.cost_usd.total_cmp(&a.1.cost_usd).then(a.0.cmp(b.0)));
    let more = rows.len().saturating_sub(SHOWN_SPEND);
    let mut shown: Vec<String> = rows
        .iter()
        .take(SHOWN_SPEND)
        .map(|(name, spent)| format!("{name} {}", money(spent)))
        .collect();
    if more > 0 {
        shown.push(format!("and {more} more"));
    }
    shown.join(", ")
}

/// The construct board; its next step unless the spec is complete.
fn construct_status(ralph: &Ralph, board: &Board, workspace: &Path) -> Result<Option<String>> {
    out!(
        "stage {}, iteration {}",
        stage_name(board.stage()),
        iteration_shown(board)
    );
    if let Some(spec) = &board.run.spec {
        out!("spec {spec}");
    }
    let in_flight = ralph.tasks_in_flight();
    for task in board.tasks() {
        let mut line = task_line(board, task);
        if in_flight.contains(&task.id) {
            line.push_str("  — in flight (its own work tree)");
        }
        out!("{line}");
    }
    for issue in board.issues() {
        if let Some(line) = issue_line(issue) {
            out!("{line}");
        }
    }
    // What the board's run spent is the ledger's construct scope: the `spend construct`
    // line says it, once, with the limit beside it.
    if let Some(last) = board.run.log.last() {
        out!("last iteration {}: {}", last.iteration, inert(&last.note));
    }
    let choices = ralph.agent_choices()?;
    for choice in choices.iter().rev().take(SHOWN_CHOICES).rev() {
        out!("{}", choice_line(choice));
    }
    let again = crate::next::Again::new(workspace, "construct");
    Ok(crate::next::for_board(board, ralph.config().max_iterations, &again).map(|n| n.to_string()))
}

/// Build mode's file, when the workspace has one.
fn implementation(ralph: &Ralph) -> Result<Option<ralph::specs::Implementation>> {
    let file = ralph
        .workspace()
        .join(&ralph.config().planning.implementation);
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", file.display()).into()),
    };
    let plan = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(Some(plan))
}

/// The threads of the workspace, in the order `thread list` shows them.
fn thread_records(ralph: &Ralph) -> Result<Vec<ralph::thread::ThreadRecord>> {
    let threads = ralph::thread::Threads::new(ralph.workspace(), NoAgent)?;
    let mut records = Vec::new();
    for id in threads.list()? {
        records.push(threads.get(&id)?);
    }
    Ok(records)
}

/// Build mode's progress: each spec with its status and tasks; its next step unless every
/// spec is complete.
fn specs_status(
    ralph: &Ralph,
    plan: &ralph::specs::Implementation,
    workspace: &Path,
) -> Option<String> {
    let done = plan.specs.iter().filter(|s| completed(s.status)).count();
    out!(
        "build mode ({}): {done} of {} {} complete",
        ralph.config().planning.implementation.display(),
        plan.specs.len(),
        crate::display::plural(plan.specs.len(), "spec", "specs")
    );
    let stashed = stash_messages(workspace);
    let mut unblock = None;
    for spec in &plan.specs {
        if let Some(blocked) = spec_line(spec, &stashed) {
            unblock.get_or_insert(blocked);
        }
    }
    let again = |mode: &str| crate::next::Again::new(workspace, mode).command("");
    if let Some((task, aside)) = unblock {
        let restore = if aside { " --restore" } else { "" };
        let unblock = crate::next::Again::new(workspace, "task unblock")
            .command(&format!(" {task}{restore}"));
        return Some(format!(
            "fix what blocked {task} (its reason above), then `{unblock} && {}` builds it again",
            again("build")
        ));
    }
    match (plan.specs.is_empty(), done == plan.specs.len()) {
        (true, _) => Some(format!(
            "`{}` plans the specs of the specs folder",
            again("plan")
        )),
        (false, false) => Some(format!("`{}` builds the specs left", again("build"))),
        (false, true) => None,
    }
}

/// Says `spec`'s line of `ralph status` (and, for a spec blocked at a task, where build mode
/// set its work aside, if it did: one of `stashed`); the blocked task (`auth/auth-2`) and
/// whether its work is set aside.
fn spec_line(spec: &ralph::specs::SpecEntry, stashed: &[String]) -> Option<(String, bool)> {
    let tasks_done = spec.tasks.iter().filter(|t| completed(t.status)).count();
    let blocked_task = spec
        .tasks
        .iter()
        .find(|t| t.status == ralph::specs::Status::Blocked);
    let status = match blocked_task {
        Some(_) => "blocked".to_owned(),
        None => spec_status_name(spec.status),
    };
    let mut line = format!(
        "{:<10} {status:<12} tasks {tasks_done}/{} {}",
        spec.id,
        spec.tasks.len(),
        spec.display_name()
    );
    let reason = blocked_task
        .and_then(|t| t.blocked_reason.as_ref())
        .or(spec.blocked_reason.as_ref());
    if let Some(reason) = reason {
        let first = reason.lines().next().unwrap_or_default();
        line.push_str(&format!("  — blocked: {first}"));
    }
    out!("{line}");
    let task = blocked_task?;
    let label = format!("ralph: {}/{}'s unfinished work", spec.id, task.id);
    let aside = stashed.iter().find(|m| m.starts_with(&label));
    if let Some(entry) = aside {
        out!(
            "{:<10} its work is set aside in `git stash list` as \"{entry}\"",
            ""
        );
    }
    Some((format!("{}/{}", spec.id, task.id), aside.is_some()))
}

/// The messages of the repository's stash entries (none outside git), as ralph names them.
// A person's query of their own repository, outside any run: nothing to confine or sweep.
#[allow(clippy::disallowed_types)]
fn stash_messages(workspace: &Path) -> Vec<String> {
    let out = std::process::Command::new("git")
        .args(["stash", "list", "--format=%s"])
        .current_dir(workspace)
        .stderr(std::process::Stdio::null())
        .output();
    let Some(out) = out.ok().filter(|o| o.status.success()) else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        // git shows `On <branch>: <message>`.
        .map(|line| line.split_once(": ").map_or(line, |(_, m)| m).to_owned())
        .collect()
}

fn completed(status: ralph::specs::Status) -> bool {
    status == ralph::specs::Status::Completed
}

/// A spec's status as `implementation.json` writes it (`in_progress`).
fn spec_status_name(status: ralph::specs::Status) -> String {
    serde_json::to_value(status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{status:?}"))
}

/// Whether no construct run has happened here: nothing on record, nothing on the board.
/// The board's stage is then COMPLETE (nothing is left), which must not be read as done.
fn no_run(board: &Board) -> bool {
    board.run.spec.is_none() && board.tasks().next().is_none() && board.issues().next().is_none()
}

/// What `query stage` prints before any run: not a stage, so a script waiting for COMPLETE
/// is not satisfied by a workspace where nothing ran.
const NO_RUN: &str = "NONE";

/// An issue still to be dealt with (open, waiting for DECOMPOSE, or blocked), with why.
fn issue_line(issue: &Issue) -> Option<String> {
    let state = match issue.status {
        IssueStatus::Open if issue.is_killed() => "decompose",
        IssueStatus::Open => "open",
        IssueStatus::Blocked => "blocked",
        _ => return None,
    };
    let mut line = format!(
        "{:<6} {state:<10} issue: {}",
        issue.id.as_str(),
        inert(&issue.text)
    );
    if let Some(reason) = issue.reason.as_ref().filter(|_| state != "open") {
        line.push_str(&format!("  — {state}: {}", inert(reason)));
    }
    Some(line)
}

/// How many agents and subjects `ralph status` shows under a scope's spend.
const SHOWN_SPEND: usize = 10;

/// How many of a fallback chain's last choices `ralph status` shows.
const SHOWN_CHOICES: usize = 3;

/// `agent codex took t-1 at 2026-…: claude is rate limited until …`.
fn choice_line(choice: &ralph::agent::AgentChoice) -> String {
    format!(
        "agent {} took {} at {}: {}",
        choice.agent,
        choice.subject.as_deref().unwrap_or("a run"),
        choice.at,
        inert(&choice.reason)
    )
}

fn task_line(board: &Board, task: &Task) -> String {
    let mut line = format!(
        "{:<6} {:<10} {:<6} attempts {:<2} {}",
        task.id.as_str(),
        task.status.as_str(),
        task.effective_priority().to_string(),
        task.attempts,
        inert(&task.name)
    );
    if let Some(reason) = &task.blocked_reason {
        line.push_str(&format!("  — blocked: {}", inert(reason)));
    } else if task.is_killed() {
        let why = match task.kill_reason {
            Some(KillReason::Rejected) => format!("rejected {} times", task.rejections),
            Some(reason) => format!("stopped ({reason})"),
            None => String::new(),
        };
        line.push_str(&format!("  — to decompose: {why}"));
    } else if task.status == TaskStatus::Pending {
        // What it really waits on: a dependency on a decomposed task is its subtasks.
        let waiting: Vec<String> = board
            .waits_on(task)
            .into_iter()
            .filter(|d| !board.task(d).is_some_and(Task::is_finished))
            .map(|d| inert(d.as_str()).into_owned())
            .collect();
        if !waiting.is_empty() {
            line.push_str(&format!("  — waits on {}", waiting.join(", ")));
        }
    }
    line
}

/// `task` as `query tasks` prints it: a waiting task's dependencies as it
/// [waits on](Board::waits_on) them, a dependency on a decomposed task being its subtasks
/// (as the next run rewrites it).
fn task_json(board: &Board, task: &Task) -> Result<String> {
    let mut value = serde_json::to_value(task)?;
    // The record's one-letter code (`s`) spelled out, for scripts: `pending`, `accepted`, …
    value["status"] = task.status.as_str().into();
    if matches!(task.status, TaskStatus::Pending | TaskStatus::Blocked) && !task.deps.is_empty() {
        value["deps"] = serde_json::to_value(board.waits_on(task))?;
    }
    Ok(value.to_string())
}

/// `ralph query`.
pub(crate) async fn query(workspace: &Path, what: Query, done: bool) -> Result<()> {
    if done && !matches!(what, Query::Tasks) {
        return Err("--done goes with `ralph query tasks` only".into());
    }
    let ralph = open(workspace)?;
    let board = ralph.board().await?;
    match what {
        Query::Stage if no_run(&board) => out!("{NO_RUN}"),
        Query::Stage => out!("{}", stage_name(board.stage())),
        Query::Iteration => out!("{}", iteration_shown(&board)),
        Query::Next if no_run(&board) => {
            out!("{}", serde_json::json!({"action": "none", "item": null}))
        }
        Query::Next => out!("{}", next_action(&board)),
        Query::Issues => {
            for line in issue_lines(&board) {
                out!("{}", line?);
            }
        }
        Query::Tasks => {
            // Every task with its status (accepted ones too: a script lists what was
            // accepted here); `--done` the done ones, which VERIFY takes next.
            let tasks = board
                .tasks()
                .filter(|t| !done || t.status == TaskStatus::Done);
            for task in tasks {
                out!("{}", task_json(&board, task)?);
            }
        }
        Query::Specs => {
            let specs = implementation(&ralph)?.map(|p| p.specs).unwrap_or_default();
            for spec in specs {
                let done = spec.tasks.iter().filter(|t| completed(t.status)).count();
                let line = serde_json::json!({
                    "id": spec.id,
                    "name": spec.display_name(),
                    "status": spec.status,
                    "tasks_done": done,
                    "tasks": spec.tasks.len(),
                });
                out!("{line}");
            }
        }
        Query::Threads => {
            for thread in thread_records(&ralph)? {
                let line = serde_json::json!({
                    "id": thread.id,
                    "title": thread.title,
                    "phase": thread.phase.to_string(),
                });
                out!("{line}");
            }
        }
    }
    Ok(())
}

/// The next action and its item, as seed 000's `query next` prints it.
fn next_action(board: &Board) -> serde_json::Value {
    let stage = board.stage();
    let item = match stage {
        Stage::Investigate => board
            .open_issues()
            .next()
            .map(|i| serde_json::json!({"id": i.id, "text": i.text})),
        Stage::Build => next_task(board).map(|t| serde_json::json!({"id": t.id, "name": t.name})),
        Stage::Verify => Some(serde_json::json!({"tasks": done_ids(board)})),
        Stage::Decompose => board
            .tasks()
            .find(|t| t.is_killed())
            .map(|t| serde_json::json!({"id": t.id, "name": t.name}))
            .or_else(|| {
                let issue = board.issues().find(|i| i.is_killed())?;
                Some(serde_json::json!({"id": issue.id, "text": issue.text}))
            }),
        _ => None,
    };
    serde_json::json!({"action": stage_name(stage).to_lowercase(), "item": item})
}

/// `ralph query issues`: the issues a person or INVESTIGATE still has to act on, open and
/// blocked (a script must see what is blocked, not only that something is), each as stored
/// with its `status` spelled out.
fn issue_lines(board: &Board) -> impl Iterator<Item = Result<String>> + '_ {
    board.issues().filter_map(|issue| {
        let status = match issue.status {
            IssueStatus::Open => "open",
            IssueStatus::Blocked => "blocked",
            _ => return None,
        };
        let line = serde_json::to_value(issue).map(|mut value| {
            value["status"] = status.into();
            value.to_string()
        });
        Some(line.map_err(Into::into))
    })
}

/// The task BUILD takes next: ready, by the prioritizer's rank, then priority, then age.
fn next_task(board: &Board) -> Option<&Task> {
    board
        .tasks()
        .enumerate()
        .filter(|(_, t)| t.is_buildable() && board.deps_satisfied(t))
        .min_by_key(|(i, t)| (t.rank.unwrap_or(u32::MAX), t.effective_priority(), *i))
        .map(|(_, t)| t)
}

/// `ralph task …`.
pub(crate) async fn task(workspace: &Path, command: TaskCommand) -> Result<()> {
    let ralph = open(workspace)?;
    match command {
        TaskCommand::Add { json } => out!("{}", task_add(&ralph, &json).await?),
        TaskCommand::Done { id } => {
            let id = match id {
                Some(id) => TaskId::from(id),
                None => next_task(&ralph.board().await?)
                    .map(|t| t.id.clone())
                    .ok_or("no task is ready to build: name one, as in `ralph task done t-1`")?,
            };
            ralph.mark_done(&id).await?;
            out!("{id} done");
        }
        TaskCommand::Accept { ids } if ids.is_empty() => {
            let accepted = ralph.accept_done().await?;
            out!("accepted {}", accepted.len());
        }
        TaskCommand::Accept { ids } => {
            for id in ids.into_iter().map(TaskId::from) {
                ralph.accept(&id).await?;
                out!("{id} accepted");
            }
        }
        TaskCommand::Reject { args } => {
            let (id, reason) = match args.as_slice() {
                [id, reason] => (TaskId::from(id.as_str()), reason.clone()),
                [reason] => (only_done(&ralph.board().await?)?, reason.clone()),
                _ => return Err("ralph task reject [ID] REASON".into()),
            };
            ralph.reject(&id, &reason).await?;
            out!("{id} rejected");
        }
        TaskCommand::Prioritize { spec } => {
            task_prioritize(&ralph, workspace, spec.as_deref()).await?
        }
        TaskCommand::Unblock { ids, restore } => task_unblock(&ralph, ids, restore).await?,
        TaskCommand::List => {
            let board = ralph.board().await?;
            for task in board.tasks() {
                out!("{}", task_line(&board, task));
            }
        }
    }
    Ok(())
}

/// `ralph task add JSON`: the task added, as the board says it.
async fn task_add(ralph: &Ralph, json: &str) -> Result<String> {
    let new = NewTask::parse(json)?;
    let id = match new.id {
        Some(id) => TaskId::from(id),
        None => ralph.board().await?.next_task_id(),
    };
    let mut task = Task::new(id, new.name)
        .with_acceptance(new.accept)
        .with_notes(new.notes)
        .with_deps(new.deps);
    if let Some(priority) = new.priority {
        task = task.with_priority(priority);
    }
    Ok(ralph.add_task(task).await?.to_string())
}

/// `ralph task prioritize`: the prioritizer's report as JSON, and the way on for the tasks
/// it blocked.
async fn task_prioritize(ralph: &Ralph, workspace: &Path, spec: Option<&Path>) -> Result<()> {
    if let Some(spec) = spec {
        same_spec(&ralph.board().await?, spec)?;
    }
    // Its warnings (a dependency rewired, a task blocked) are on stderr, as a run's.
    let report = ralph.prioritize().await?;
    out!("{}", serde_json::to_string(&report)?);
    // The JSON names them too; a person reading the terminal needs the way on.
    if !report.blocked.is_empty() {
        let ids: Vec<&str> = report.blocked.iter().map(|b| b.id.as_str()).collect();
        let unblock = crate::next::Again::new(workspace, "task unblock")
            .command(&crate::next::shell_words(&ids));
        eprintln!(
            "next: fix what blocked {} (the {} above), then `{unblock}`",
            if ids.len() == 1 { "it" } else { "them" },
            if ids.len() == 1 { "reason" } else { "reasons" },
        );
    }
    Ok(())
}

/// `ralph task unblock IDS`: each a construct task, an issue of the board (the command
/// takes those too), or build mode's `SPEC/TASK` (`restore`: with its set-aside work).
async fn task_unblock(ralph: &Ralph, ids: Vec<String>, restore: bool) -> Result<()> {
    let board = ralph.board().await?;
    for id in ids {
        if let Some((spec, task)) = id.rsplit_once('/') {
            unblock_spec_task(ralph, spec, task, restore).await?;
            continue;
        }
        if restore {
            return Err(format!(
                "--restore gives back what build mode set aside: name the task as \
                 SPEC/TASK (`{id}` is the construct board's)"
            )
            .into());
        }
        match board.issue(id.as_str()).is_some() && board.task(id.as_str()).is_none() {
            true => unblock_issue(ralph, IssueId::from(id)).await?,
            false => unblock_task(ralph, TaskId::from(id)).await?,
        }
    }
    Ok(())
}

/// The tasks waiting for VERIFY.
fn done_ids(board: &Board) -> Vec<&TaskId> {
    board
        .tasks()
        .filter(|t| t.status == TaskStatus::Done)
        .map(|t| &t.id)
        .collect()
}

/// The one done task, for `reject` without an id.
fn only_done(board: &Board) -> Result<TaskId> {
    match done_ids(board).as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err("no task is done, so none can be rejected".into()),
        many => Err(format!(
            "{} tasks are done: name one, as in `ralph task reject {} \"reason\"`",
            many.len(),
            many[0]
        )
        .into()),
    }
}

/// Unblocks task `id` and says what that took.
async fn unblock_task(ralph: &Ralph, id: TaskId) -> Result<()> {
    let unblocked = ralph.unblock(&id).await?;
    if unblocked.task != id {
        out!(
            "{id} is {} now (its id could not name a git branch or folder)",
            unblocked.task
        );
    }
    let mut line = format!("{} pending again", unblocked.task);
    if !unblocked.dropped.is_empty() {
        let dropped: Vec<&str> = unblocked.dropped.iter().map(TaskId::as_str).collect();
        line.push_str(&format!(
            ", without its dependencies on {} (they could never be met: not on the board, or \
             waiting on it in turn)",
            dropped.join(", ")
        ));
    }
    out!("{line}");
    Ok(())
}

/// Unblocks build mode's task `task` of `spec` and says what that took.
async fn unblock_spec_task(ralph: &Ralph, spec: &str, task: &str, restore: bool) -> Result<()> {
    let given_back = ralph.unblock_spec_task(spec, task, restore).await?;
    let mut line = format!("{spec}/{task} pending again");
    match (given_back, restore) {
        (Some(entry), _) => line.push_str(&format!(
            "; its set-aside work is back in the work tree (from \"{entry}\")"
        )),
        (None, true) => line.push_str("; nothing was set aside: its work is where it was left"),
        (None, false) => {}
    }
    out!("{line}");
    Ok(())
}

/// Opens issue `id` again.
async fn unblock_issue(ralph: &Ralph, id: IssueId) -> Result<()> {
    ralph.unblock_issue(&id).await?;
    out!("{id} open again");
    Ok(())
}

/// `ralph issue …`.
pub(crate) async fn issue(workspace: &Path, command: IssueCommand) -> Result<()> {
    let ralph = open(workspace)?;
    match command {
        IssueCommand::Add { text, priority } => {
            out!("{}", ralph.add_issue_with_priority(text, priority).await?)
        }
        IssueCommand::Unblock { ids } => {
            for id in ids {
                unblock_issue(&ralph, IssueId::from(id)).await?;
            }
        }
    }
    Ok(())
}

/// `ralph repair [--adopt]`: the board's state file, then the threads' records.
pub(crate) async fn repair(workspace: &Path, adopt: bool) -> Result<()> {
    let mut repairs: Vec<String> = Vec::new();
    if let Some(repair) = open(workspace)?.repair(adopt).await? {
        repairs.push(repair.to_string());
    }
    let threads = ralph::thread::Threads::new(workspace, NoAgent)?;
    repairs.extend(threads.repair(adopt).await?.iter().map(ToString::to_string));
    if repairs.is_empty() {
        out!("nothing to repair");
    }
    for repair in repairs {
        out!("{repair}");
    }
    Ok(())
}

/// The iteration to show: the one running, or to run next; once the spec is complete, the
/// one that completed it (the counter has moved on to one that will never run).
fn iteration_shown(board: &Board) -> u32 {
    match board.stage() {
        Stage::Complete if board.run.iteration > 1 => board.run.iteration - 1,
        _ => board.run.iteration,
    }
}

fn stage_name(stage: Stage) -> String {
    stage.to_string().to_uppercase()
}
