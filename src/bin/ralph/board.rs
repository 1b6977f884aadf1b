//! The board from the shell: `status`, `query`, `task …`, `issue …` (seed 000's commands),
//! and `repair`.
//! Reading needs no agent; every change goes through the library under the workspace lock.

use std::path::Path;

use clap::{Subcommand, ValueEnum};
use ralph::model::{Board, Priority, Stage, Task, TaskId, TaskStatus};
use ralph::{Agent, AgentError, AgentRequest, AgentRun, Ralph, async_trait};
use serde::Deserialize;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// `ralph query`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum Query {
    /// The stage: INVESTIGATE, BUILD, VERIFY, DECOMPOSE or COMPLETE.
    Stage,
    /// The iteration number.
    Iteration,
    /// The next action and its item, as JSON.
    Next,
    /// The open issues, one JSON object per line.
    Issues,
    /// The tasks still in the plan, one JSON object per line (`--done`: the done ones only).
    Tasks,
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
    /// Accept every done task.
    Accept,
    /// Reject a done task; the reason goes into its next attempt's prompt.
    Reject {
        /// Why. With two arguments, the first is the task.
        #[arg(num_args = 1..=2, required = true)]
        args: Vec<String>,
    },
    /// Order the pending tasks again and print the counts as JSON.
    Prioritize {
        /// The spec whose tasks to order. A workspace's board holds the tasks of one spec,
        /// the one on record, so this only checks that it is that one.
        #[arg(long)]
        spec: Option<std::path::PathBuf>,
    },
    /// Put a blocked task back to pending with a fresh retry budget.
    Unblock {
        /// The task.
        id: String,
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
    },
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

/// The board commands run no agent: this one says so if anything asks it to.
struct NoAgent;

#[async_trait]
impl Agent for NoAgent {
    fn name(&self) -> &str {
        "none"
    }

    async fn run(&self, _: AgentRequest) -> std::result::Result<AgentRun, AgentError> {
        Err(AgentError::Other("the board commands run no agent".into()))
    }
}

fn open(workspace: &Path) -> Result<Ralph> {
    Ok(Ralph::builder()
        .workspace(workspace)
        .agent(NoAgent)
        .build()?)
}

/// `ralph status`.
pub(crate) async fn status(workspace: &Path) -> Result<()> {
    let ralph = open(workspace)?;
    let board = ralph.board().await?;
    let stage = board.stage();
    println!(
        "stage {}, iteration {}",
        stage_name(stage),
        board.run.iteration
    );
    if let Some(spec) = &board.run.spec {
        println!("spec {spec}");
    }
    let in_flight = ralph.tasks_in_flight();
    for task in board.tasks.values() {
        let mut line = task_line(task);
        if in_flight.contains(&task.id) {
            line.push_str("  — in flight (its own work tree)");
        }
        println!("{line}");
    }
    for issue in board.open_issues() {
        println!("{:<6} issue    {}", issue.id, issue.text);
    }
    println!(
        "spent {} tokens in, {} out, ${:.4}",
        board.run.tokens_in, board.run.tokens_out, board.run.cost_usd
    );
    if let Some(last) = board.run.log.last() {
        println!("last iteration {}: {}", last.iteration, last.note);
    }
    let choices = ralph.agent_choices()?;
    for choice in choices.iter().rev().take(SHOWN_CHOICES).rev() {
        println!("{}", choice_line(choice));
    }
    println!("next: {}", next_hint(&board));
    Ok(())
}

/// How many of a fallback chain's last choices `ralph status` shows.
const SHOWN_CHOICES: usize = 3;

/// `agent codex took t-1 at 2026-…: claude is rate limited until …`.
fn choice_line(choice: &ralph::agent::AgentChoice) -> String {
    format!(
        "agent {} took {} at {}: {}",
        choice.agent,
        choice.subject.as_deref().unwrap_or("a run"),
        choice.at,
        choice.reason
    )
}

fn task_line(task: &Task) -> String {
    let mut line = format!(
        "{:<6} {:<10} {:<6} attempts {:<2} {}",
        task.id,
        status_name(task.status),
        task.effective_priority().to_string(),
        task.attempts,
        task.name
    );
    if let Some(reason) = &task.blocked_reason {
        line.push_str(&format!("  — blocked: {reason}"));
    }
    line
}

/// What a person would do next, given the board.
fn next_hint(board: &Board) -> String {
    if board
        .tasks
        .values()
        .any(|t| t.status == TaskStatus::Blocked)
    {
        return "fix what blocked the tasks, `ralph task unblock ID`, then `ralph construct`"
            .into();
    }
    match (board.stage(), &board.run.spec) {
        (Stage::Complete, Some(_)) => "nothing: the spec is complete".into(),
        (Stage::Unverified, Some(_)) => {
            "`ralph construct` asks the gap analysis again (it gave no valid answer)".into()
        }
        (_, Some(_)) => "`ralph construct` resumes the work".into(),
        (_, None) => "`ralph construct SPEC` starts on a spec".into(),
    }
}

/// `ralph query`.
pub(crate) async fn query(workspace: &Path, what: Query, done: bool) -> Result<()> {
    if done && !matches!(what, Query::Tasks) {
        return Err("--done goes with `ralph query tasks` only".into());
    }
    let board = open(workspace)?.board().await?;
    match what {
        Query::Stage => println!("{}", stage_name(board.stage())),
        Query::Iteration => println!("{}", board.run.iteration),
        Query::Next => println!("{}", next_action(&board)),
        Query::Issues => {
            for issue in board.open_issues() {
                println!("{}", serde_json::to_string(issue)?);
            }
        }
        Query::Tasks => {
            let tasks = board.tasks.values().filter(|t| match done {
                true => t.status == TaskStatus::Done,
                false => t.is_remaining(),
            });
            for task in tasks {
                println!("{}", serde_json::to_string(task)?);
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
            .tasks
            .values()
            .find(|t| t.is_killed())
            .map(|t| serde_json::json!({"id": t.id, "name": t.name}))
            .or_else(|| {
                let issue = board.issues.values().find(|i| i.is_killed())?;
                Some(serde_json::json!({"id": issue.id, "text": issue.text}))
            }),
        _ => None,
    };
    serde_json::json!({"action": stage_name(stage).to_lowercase(), "item": item})
}

/// The task BUILD takes next: ready, by the prioritizer's rank, then priority, then age.
fn next_task(board: &Board) -> Option<&Task> {
    board
        .tasks
        .values()
        .enumerate()
        .filter(|(_, t)| t.is_buildable() && board.deps_satisfied(t))
        .min_by_key(|(i, t)| (t.rank.unwrap_or(u32::MAX), t.effective_priority(), *i))
        .map(|(_, t)| t)
}

/// `ralph task …`.
pub(crate) async fn task(workspace: &Path, command: TaskCommand) -> Result<()> {
    let ralph = open(workspace)?;
    match command {
        TaskCommand::Add { json } => {
            let new: NewTask = serde_json::from_str(&json)
                .map_err(|e| format!("the task JSON does not parse: {e}"))?;
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
            println!("{}", ralph.add_task(task).await?);
        }
        TaskCommand::Done { id } => {
            let id = match id {
                Some(id) => TaskId::from(id),
                None => next_task(&ralph.board().await?)
                    .map(|t| t.id.clone())
                    .ok_or("no task is ready to build: name one, as in `ralph task done t-1`")?,
            };
            ralph.mark_done(&id).await?;
            println!("{id} done");
        }
        TaskCommand::Accept => {
            let accepted = ralph.accept_done().await?;
            println!("accepted {}", accepted.len());
        }
        TaskCommand::Reject { args } => {
            let (id, reason) = match args.as_slice() {
                [id, reason] => (TaskId::from(id.as_str()), reason.clone()),
                [reason] => (only_done(&ralph.board().await?)?, reason.clone()),
                _ => return Err("ralph task reject [ID] REASON".into()),
            };
            ralph.reject(&id, &reason).await?;
            println!("{id} rejected");
        }
        TaskCommand::Prioritize { spec } => {
            if let Some(spec) = spec {
                same_spec(&ralph.board().await?, &spec)?;
            }
            let report = ralph.prioritize().await?;
            println!("{}", serde_json::to_string(&report)?);
        }
        TaskCommand::Unblock { id } => {
            let id = TaskId::from(id);
            ralph.unblock(&id).await?;
            println!("{id} pending again");
        }
        TaskCommand::List => {
            for task in ralph.board().await?.tasks.values() {
                println!("{}", task_line(task));
            }
        }
    }
    Ok(())
}

/// The tasks waiting for VERIFY.
fn done_ids(board: &Board) -> Vec<&TaskId> {
    board
        .tasks
        .values()
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

/// `ralph issue …`.
pub(crate) async fn issue(workspace: &Path, command: IssueCommand) -> Result<()> {
    let IssueCommand::Add { text } = command;
    println!("{}", open(workspace)?.add_issue(text).await?);
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
        println!("nothing to repair");
    }
    for repair in repairs {
        println!("{repair}");
    }
    Ok(())
}

fn stage_name(stage: Stage) -> String {
    stage.to_string().to_uppercase()
}

fn status_name(status: TaskStatus) -> &'static str {
    match status {
        TaskStatus::Pending => "pending",
        TaskStatus::Done => "done",
        TaskStatus::Accepted => "accepted",
        TaskStatus::Blocked => "blocked",
        TaskStatus::Decomposed => "decomposed",
        _ => "other",
    }
}
