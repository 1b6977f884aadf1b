//! The errors of a run, in every mode, and of building one.

use std::path::PathBuf;

use crate::agent::AgentError;
use crate::config::ConfigError;
use crate::gate::GateError;
use crate::prioritize::PrioritizeError;
use crate::prompt::PromptError;
use crate::store::StoreError;

/// [`RalphBuilder::build`](crate::RalphBuilder::build) found something wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// No workspace was given.
    #[error("no workspace: call `.workspace(dir)`")]
    MissingWorkspace,
    /// No agent was given.
    #[error("no agent: call `.agent(…)` (e.g. `FakeAgent` in tests)")]
    MissingAgent,
    /// The workspace is not a usable directory.
    #[error("workspace {path}: {reason}")]
    Workspace {
        /// The path given.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Two gates share a name.
    #[error("two gates are named {0:?}; gate names must be unique")]
    DuplicateGate(String),
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The store could not be opened (e.g. another ralph holds its lock).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// `[sandbox] mode = "required"`, and no sandbox can be made on this machine: why, and
    /// the fix.
    #[error("[sandbox] mode = \"required\", but no sandbox can be made here: {0}")]
    Sandbox(String),
    /// A prompt template override (`[prompts]`) cannot be read or does not compile.
    #[error("{}", prompt_message(template, file, message))]
    Prompt {
        /// The template's name (`build`, `thread_verify`).
        template: String,
        /// The override file.
        file: Option<String>,
        /// What is wrong, with the line when the template engine knows it.
        message: String,
    },
}

impl From<PromptError> for BuildError {
    fn from(e: PromptError) -> Self {
        BuildError::Prompt {
            template: e.name,
            file: e.origin,
            message: e.message,
        }
    }
}

/// `prompt template build (prompts/build.md): …`: the template, its file when it is an
/// override, and what is wrong.
pub(crate) fn prompt_message(template: &str, file: &Option<String>, message: &str) -> String {
    let file = file.as_ref().map(|f| format!(" ({f})")).unwrap_or_default();
    format!("prompt template {template}{file}: {message}")
}

/// Plan mode or build mode could not go on (feature `specs`): what is missing or unusable
/// in their files or in the agent's answer, named.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpecsError {
    /// Build mode found no `implementation.json`.
    #[error("no {}: run plan mode first (`ralph plan`, `Ralph::plan`)", .path.display())]
    NoImplementation {
        /// The file looked for.
        path: PathBuf,
    },
    /// Plan mode found no markdown spec to plan.
    #[error("plan mode: no markdown specs in {}{}", .dir.display(), skipped_note(.skipped))]
    NoSpecs {
        /// The specs folder.
        dir: PathBuf,
        /// The `.md` files of the folder left out, each with why (a link that leads outside
        /// the folder).
        skipped: Vec<String>,
    },
    /// Plan mode's agent gave no usable plan, even when asked again with the error shown.
    #[error("plan mode: no usable plan ({reason}); {} was not changed", .implementation.display())]
    NoUsablePlan {
        /// Why the answer could not be used.
        reason: String,
        /// `implementation.json`, left as it was.
        implementation: PathBuf,
    },
    /// Plan mode's agent asked a person a question, and no answer came within
    /// `question_wait`: answer it (`ralph answer plan-mode "…"`), then run plan mode again,
    /// whose agent gets the question and the answer.
    #[error("plan mode: the agent asks a person: {question}; {} was not changed", .implementation.display())]
    AwaitingAnswer {
        /// The question.
        question: String,
        /// `implementation.json`, left as it was.
        implementation: PathBuf,
    },
    /// Plan mode was stopped (an interrupt, the stop token) before its agent answered.
    #[error("plan mode: stopped before the agent answered; {} was not changed", .implementation.display())]
    Stopped {
        /// `implementation.json`, left as it was.
        implementation: PathBuf,
    },
    /// A spec of `implementation.json` names a file that breaks the spec-path rule.
    #[error("{}: specs[{index}].file of spec {spec:?}: spec path {file:?} {reason}", .implementation.display())]
    SpecFile {
        /// `implementation.json`.
        implementation: PathBuf,
        /// The spec's index in `specs`.
        index: usize,
        /// The spec's id.
        spec: String,
        /// The file as written.
        file: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `ralph build --force SPEC` ([`Ralph::rebuild`](crate::Ralph::rebuild)) named a spec
    /// that `implementation.json` does not have.
    #[error("{}: no spec {spec:?} to rebuild (its specs: {})", .implementation.display(), .known.join(", "))]
    UnknownSpec {
        /// The spec as named (an id or a file).
        spec: String,
        /// `implementation.json`.
        implementation: PathBuf,
        /// The ids it has.
        known: Vec<String>,
    },
    /// A spec build mode was working on is no longer in `implementation.json` (a person
    /// removed it while the run went on).
    #[error("spec {spec} is no longer in {}", .implementation.display())]
    SpecGone {
        /// The spec's id.
        spec: String,
        /// `implementation.json`.
        implementation: PathBuf,
    },
}

/// A run failed, in any mode: the construct loop, plan mode, build mode or a thread's
/// builder. Running out of a limit is not an error but an [`Outcome`](crate::Outcome) (or
/// build mode's `SpecsOutcome`, a thread's phase).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Building failed.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The state could not be loaded or saved.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The agent could not run.
    /// Its message names no cause: the [`AgentError`] is its source (a chain printer shows
    /// it once).
    #[error("agent could not run")]
    Agent(#[from] AgentError),
    /// The agent reported a failure no retry can fix (e.g. bad credentials).
    #[error(
        "agent {agent} failed on {role}{} and no retry can fix it: {reason}",
        .subject.as_ref().map(|s| format!(" {s}")).unwrap_or_default()
    )]
    AgentFatal {
        /// The agent ([`Agent::name`](crate::Agent::name); a fallback chain's names
        /// joined).
        agent: String,
        /// What the run was for.
        role: crate::agent::Role,
        /// The task, issue or spec it was about, if any.
        subject: Option<String>,
        /// Why, as the agent said it (`invalid API key`).
        reason: String,
    },
    /// The agent could not reach its API: it printed only connection errors for
    /// `unreachable_after` (see [`FailureKind::Unreachable`](crate::agent::FailureKind::Unreachable)).
    /// Not the task's fault: the attempt was not counted, and nothing was decomposed; run
    /// again once the agent's network or endpoint is back.
    #[error(
        "agent {agent} stopped on {role}{}: it cannot reach its API ({reason})",
        .subject.as_ref().map(|s| format!(" {s}")).unwrap_or_default()
    )]
    AgentUnreachable {
        /// The agent ([`Agent::name`](crate::Agent::name); a fallback chain's names
        /// joined).
        agent: String,
        /// What the run was for.
        role: crate::agent::Role,
        /// The task, issue or spec it was about, if any.
        subject: Option<String>,
        /// Why, naming the agent and its last connection error.
        reason: String,
    },
    /// The run-wide budget (`max_cost_usd`, `max_tokens`) is spent over the state the run
    /// belongs to: no new agent run started. The pipelines turn it into their outcome
    /// ([`Outcome::BudgetExhausted`](crate::Outcome::BudgetExhausted)); a thread stops
    /// with it.
    #[error(
        "budget exhausted: spent ${spent_usd:.2} and {spent_tokens} tokens (limit: {})",
        crate::outcome::budget_limits(*max_cost_usd, *max_tokens)
    )]
    BudgetExhausted {
        /// Dollars spent over the scope.
        spent_usd: f64,
        /// Input and output tokens spent over the scope.
        spent_tokens: u64,
        /// `max_cost_usd`, if set.
        max_cost_usd: Option<f64>,
        /// `max_tokens`, if set.
        max_tokens: Option<u64>,
    },
    /// A gate could not run.
    #[error(transparent)]
    Gate(#[from] GateError),
    /// The tasks' dependencies form a cycle.
    #[error(transparent)]
    Prioritize(#[from] PrioritizeError),
    /// A prompt could not be rendered.
    #[error("{}", prompt_message(template, file, message))]
    Prompt {
        /// The template's name (`build`, `verify`).
        template: String,
        /// Its override file, when it is not the built-in one.
        file: Option<String>,
        /// What is wrong, with the line when the template engine knows it.
        message: String,
    },
    /// The spec file could not be read.
    #[error("spec {path}")]
    Spec {
        /// The spec.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The spec file holds nothing an agent can work from: it is empty, is not UTF-8 text,
    /// or holds a control character other than tab, CR and LF (the reason gives its byte
    /// offset).
    #[error("spec {} {reason}", .path.display())]
    SpecText {
        /// The spec.
        path: PathBuf,
        /// What is wrong, as the rest of a sentence that starts with the file.
        reason: String,
    },
    /// The workspace's state belongs to another spec.
    #[error(
        "the board in this workspace is {recorded}'s, not {given}'s: one board at a time, so switch boards (`ralph construct {given} --switch`, `Ralph::switch_spec`), which archives this one, or use another workspace"
    )]
    SpecMismatch {
        /// The spec on record.
        recorded: String,
        /// The spec asked for.
        given: String,
    },
    /// A person's edit of the board (`add_task`, `unblock`, `accept`, …) was refused;
    /// nothing was changed.
    #[error(transparent)]
    Edit(#[from] EditError),
    /// No spec was given and none is on record.
    #[error("no spec on record in this workspace: pass one to `construct`")]
    NoSpec,
    /// `construct` is already running on this `Ralph`.
    #[error("a construct run is already in progress on this Ralph")]
    AlreadyRunning,
    /// `ralph stop` ([`steer::stop`](crate::steer::stop), [`steer::stop_now`](crate::steer::stop_now)) with no run holding the
    /// workspace: a stop is for a run in progress, never queued for the next one.
    #[error("no run in progress in {}: nothing to stop", .workspace.display())]
    NoRunInProgress {
        /// The workspace.
        workspace: PathBuf,
    },
    /// A steering command was called from inside a run: by an agent, a gate or a hook, whose
    /// processes carry the run's cookie. The run's verdict and its stopping are a person's.
    #[error(
        "`{command}` refused: this process is part of a ralph run (an agent, a gate or a \
         hook carries {cookie}); only a person steers a run"
    )]
    InsideARun {
        /// The command refused: `ralph stop`, `ralph stop --now`.
        command: String,
        /// The cookie's environment variable.
        cookie: String,
    },
    /// A git command failed (build mode commits each completed spec; tasks built at once
    /// work in git work trees).
    #[error(transparent)]
    Git(#[from] crate::git::GitError),
    /// A spec path breaks the rule every mode applies: relative to the workspace, and
    /// inside it (and inside the specs folder, in plan and build mode) once symlinks are
    /// resolved.
    #[error("spec path {path:?} {reason}")]
    SpecPath {
        /// The path as given.
        path: String,
        /// What is wrong with it: it is absolute, goes up with `..`, cannot be read, or
        /// resolves outside the workspace (or the specs folder).
        reason: String,
    },
    /// Another ralph process runs on this workspace (it holds `.ralph/ralph.lock`).
    #[error(
        "{path} is locked by another ralph process{holder}; stop it first, or use another workspace",
        holder = .holder.as_ref().map(|h| format!(" ({h})")).unwrap_or_default()
    )]
    Busy {
        /// The lock file.
        path: PathBuf,
        /// What the lock file says about its holder (`pid N, since T`), if anything.
        holder: Option<String>,
    },
    /// Plan mode or build mode could not go on (feature `specs`).
    #[error(transparent)]
    Specs(#[from] SpecsError),
    /// The user's work tree has uncommitted changes to tracked files, and ralph, which
    /// commits each task on the user's branch, would mix them into its commits; or, with
    /// `since`, files changed since a run stopped during that task's attempt, which the
    /// next run would commit with the task's work.
    #[error("{}", uncommitted(paths, branch, since.as_deref()))]
    Uncommitted {
        /// The changed files (relative to the top of the work tree).
        paths: Vec<String>,
        /// The branch (`branch main`, `the detached HEAD`).
        branch: String,
        /// The task (or spec) whose interrupted turn the files were changed in since its
        /// run stopped; `None` for a run that starts afresh.
        since: Option<String>,
    },
    /// Files the run judges with (`ralph.toml`, a gate's script, the spec) changed during
    /// the run, not by ralph nor by an agent it could have stopped: a person's edit. The
    /// run stops before its next gate, so the change neither judges it nor lands in its
    /// commits; the same command run again uses the new files.
    #[error(
        "{} changed during the run: ralph judges a run with the files as they were when it started, so it stops here rather than judge or commit with the change. Run the same command again to use them",
        crate::output::list_some(&paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(), 5)
    )]
    ChangedDuringRun {
        /// The files, relative to the workspace where inside it.
        paths: Vec<PathBuf>,
    },
    /// A `[[hooks]]` entry marked `required` failed (it exited non-zero, timed out, or
    /// could not start) during the run or on its end; the run went on to its end, and its
    /// `Finished` event was sent.
    #[error("required hook {hook} failed on {event}: {reason}")]
    Hook {
        /// The hook: its `name`, or `hooks[<index>]`.
        hook: String,
        /// The event it ran on (`finished`, `task_blocked`).
        event: String,
        /// How it failed (`exited with code 1: <its last line>`).
        reason: String,
    },
    /// An I/O error on a file ralph manages (logs).
    #[error("i/o error on {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Why a person's edit of the board was refused ([`Ralph::add_task`](crate::Ralph::add_task),
/// [`Ralph::unblock`](crate::Ralph::unblock), [`Ralph::accept`](crate::Ralph::accept), …):
/// the records it names, or what it asks, do not fit the board. Nothing was changed. A run
/// never fails with one; it reaches the caller as [`Error::Edit`].
///
/// ```
/// use ralph::model::{Task, TaskId};
/// use ralph::{EditError, Error, FakeAgent, MemoryStore, Ralph};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
/// let dir = tempfile::tempdir()?;
/// let ralph = Ralph::builder()
///     .workspace(dir.path())
///     .agent(FakeAgent::new())
///     .store(MemoryStore::new())
///     .build()?;
/// let task = |name: &str| Task::new("t-1", name).with_acceptance("it parses");
/// ralph.add_task(task("Parser")).await?;
/// let refused = ralph.add_task(task("Parser again")).await.unwrap_err();
/// assert!(matches!(&refused, Error::Edit(EditError::DuplicateTask(id)) if *id == TaskId::new("t-1")));
/// assert_eq!(refused.to_string(), "task t-1 already exists");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EditError {
    /// A task with this id is already on the board.
    #[error("task {0} already exists")]
    DuplicateTask(crate::model::TaskId),
    /// No task on the board has this id.
    #[error("no task {0} on the board")]
    UnknownTask(crate::model::TaskId),
    /// The task is not in the state the change needs (`unblock` of a task that is not
    /// blocked, say).
    #[error("task {task} is {status:?}; {wanted}")]
    TaskState {
        /// The task.
        task: crate::model::TaskId,
        /// Its status.
        status: crate::model::TaskStatus,
        /// What the change needs, as a sentence.
        wanted: &'static str,
    },
    /// No issue on the board has this id.
    #[error("no issue {0} on the board")]
    UnknownIssue(crate::model::IssueId),
    /// The issue is not in the state the change needs (`unblock_issue` of an issue that is
    /// not blocked, say).
    #[error("issue {issue} is {status:?}; {wanted}")]
    IssueState {
        /// The issue.
        issue: crate::model::IssueId,
        /// Its status.
        status: crate::model::IssueStatus,
        /// What the change needs, as a sentence.
        wanted: &'static str,
    },
    /// A person's edit of the board was refused because a field of it is unusable (`task
    /// add: deps[0] names t-99, which is not on the board`); nothing was changed.
    #[error("{edit}: {field} {reason}")]
    Invalid {
        /// The edit (`task add`, `issue add`).
        edit: &'static str,
        /// The field, as written in the task's JSON (`name`, `deps[0]`, `id`, `text`).
        field: String,
        /// What is wrong with it, as the rest of a sentence that starts with the field.
        reason: String,
    },
}

impl From<PromptError> for Error {
    fn from(e: PromptError) -> Self {
        Error::Prompt {
            template: e.name,
            file: e.origin,
            message: e.message,
        }
    }
}

impl From<crate::files::LockError> for Error {
    fn from(e: crate::files::LockError) -> Self {
        match e {
            crate::files::LockError::Held { path, holder } => Error::Busy { path, holder },
            crate::files::LockError::Io { path, source } => Error::Io { path, source },
        }
    }
}

impl From<super::hooks::HookFailed> for Error {
    fn from(e: super::hooks::HookFailed) -> Self {
        Error::Hook {
            hook: e.hook,
            event: e.event,
            reason: e.reason,
        }
    }
}

/// The result of a run whose end `hooks` reported: the run's own error first, then a
/// required hook's failure.
pub(crate) fn after_hooks<T>(
    result: Result<T, Error>,
    hooks: Result<(), super::hooks::HookFailed>,
) -> Result<T, Error> {
    let value = result?;
    hooks?;
    Ok(value)
}

/// `; skipped: WHY; WHY` after "no markdown specs", or nothing when nothing was skipped.
fn skipped_note(skipped: &[String]) -> String {
    match skipped.is_empty() {
        true => String::new(),
        false => format!("; skipped: {}", skipped.join("; ")),
    }
}

/// The message of [`Error::Uncommitted`].
fn uncommitted(paths: &[String], branch: &str, since: Option<&str>) -> String {
    let listed = crate::output::list_some(paths, 5);
    match since {
        None => format!(
            "the work tree has uncommitted changes ({listed}): ralph commits each task's work on {branch} and would mix them into its commits. Commit them, or set them aside with `git stash`, then run the same command again"
        ),
        Some(subject) => format!(
            "the work tree changed since the run working on {subject} stopped ({listed}): ralph would commit those changes on {branch} as {subject}'s work. Set them aside with `git stash push --include-untracked -- <those paths>` (`git stash pop` brings them back after the run), then run the same command again"
        ),
    }
}
