//! The tables of the loop itself: `[context]`, `[store]`, `[planning]`, `[prompts]`,
//! `[sandbox]`, `[[gates]]` and `[[hooks]]`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration;

/// `[planning]`: where plan mode and build mode keep their files, and their limits.
///
/// ```toml
/// [planning]
/// specs_dir = "specs"                      # the markdown specs; plans go to specs/plans
/// implementation = "implementation.json"
/// progress = "PROGRESS.md"
/// max_attempts = 3                         # failed rounds per spec (planner, verifier)
/// magic_phrase = "PLAN_COMPLETE"           # the planner's last line
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct PlanningConfig {
    /// The folder of the markdown specs, relative to the workspace. Default `specs`.
    pub specs_dir: PathBuf,
    /// The file plan mode writes and build mode reads. Default `implementation.json`.
    pub implementation: PathBuf,
    /// The append-only audit trail of completed specs. Default `PROGRESS.md`.
    pub progress: PathBuf,
    /// Failed rounds of one spec (a planner run without a plan, a verifier rejection)
    /// before build mode gives up on it. Default 3.
    pub max_attempts: u32,
    /// The line that must end the planner's answer. Default `PLAN_COMPLETE`.
    pub magic_phrase: String,
}

impl Default for PlanningConfig {
    fn default() -> Self {
        PlanningConfig {
            specs_dir: PathBuf::from("specs"),
            implementation: PathBuf::from("implementation.json"),
            progress: PathBuf::from("PROGRESS.md"),
            max_attempts: 3,
            magic_phrase: "PLAN_COMPLETE".into(),
        }
    }
}

/// One `[[gates]]` entry: a shell command run as a [`ShellGate`](crate::ShellGate).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct GateConfig {
    /// The gate's name.
    pub name: String,
    /// Run with `sh -c` in the workspace.
    pub command: String,
    /// Whether a failure blocks the task. Default true.
    #[serde(default = "yes")]
    pub required: bool,
    /// Wall-clock limit. Default 5m.
    #[serde(with = "duration", default = "five_minutes")]
    pub timeout: Duration,
    /// Whether the gate has the network in the sandbox. Default false: a gate gets only a
    /// loopback of its own, so a test that would reach a server outside fails, and the
    /// gate's report says it ran without network.
    #[serde(default)]
    pub network: bool,
}

impl GateConfig {
    /// A required gate with a 5-minute timeout, without network in the sandbox.
    pub fn new(name: impl Into<String>, command: impl Into<String>) -> Self {
        GateConfig {
            name: name.into(),
            command: command.into(),
            required: true,
            timeout: five_minutes(),
            network: false,
        }
    }
}

/// `[sandbox]`: how the processes ralph starts for work are confined (every agent run,
/// every gate, the git hooks of ralph's commits), and what they may do. See "Sandbox" in
/// docs/running.md for what is confined and what is not.
///
/// ```toml
/// [sandbox]
/// mode = "auto"                    # "auto", "required", "off" or "machine"
/// write = ["~/.cache/my-tool"]     # more paths they may write
/// protect = ["deploy/keys.toml"]   # more paths in the work tree they may read, not write
/// hide = ["~/.config/my-token"]    # more paths they may not see
/// env = ["MY_SETTING", "MYTOOL_*"] # more of ralph's variables they get
/// ```
///
/// The lists add to ralph's defaults; a relative path is the workspace's, `~/` the home's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
#[doc(hidden)] // ralph's own: `Config`'s field, set through `ralph.toml` or the builder
pub struct SandboxConfig {
    /// How far to confine. Default [`SandboxMode::Auto`].
    pub mode: SandboxMode,
    /// Paths agents and gates may write besides their work tree, the caches ralph lets them
    /// write and their CLI's own state.
    pub write: Vec<PathBuf>,
    /// Paths they may read but not write, besides ralph's own files.
    pub protect: Vec<PathBuf>,
    /// Paths they may not see, besides the secrets and sockets ralph hides.
    pub hide: Vec<PathBuf>,
    /// Variables of ralph's environment they get, by name (`PREFIX*` for a prefix), besides
    /// the locale, `PATH`, `HOME`, the proxy and certificate settings and the agent CLI's own.
    pub env: Vec<String>,
}

/// How far the processes of a run are confined (`[sandbox] mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
// Exhaustive: the runtime acts on each; a new one must reach it.
#[doc(hidden)] // ralph's own: `Config`'s field, set through `ralph.toml` or the builder
pub enum SandboxMode {
    /// In bubblewrap where it works here; elsewhere unconfined, with a warning at the start,
    /// in the dry run and in the summary. The default.
    #[default]
    Auto,
    /// In bubblewrap, or not at all: without a working bubblewrap a run refuses to start,
    /// naming the cause and the fix.
    Required,
    /// Unconfined, as chosen: every dry run and summary says so.
    Off,
    /// Unconfined by ralph, because the machine itself is a sandbox (a container or a VM
    /// with nothing of value in it): no warning; dry runs and summaries say so.
    Machine,
}

impl std::fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SandboxMode::Auto => "auto",
            SandboxMode::Required => "required",
            SandboxMode::Off => "off",
            SandboxMode::Machine => "machine",
        })
    }
}

fn yes() -> bool {
    true
}

/// One `[[hooks]]` entry: a command run when a run emits one of the events it is `on`,
/// given the event's JSON on stdin (see [`Config`](super::Config)'s docs). Read from
/// `ralph.toml` (or `RALPH_HOOKS`, or [`RalphBuilder::config`](https://docs.rs/ralph-loop/latest/ralph/struct.RalphBuilder.html#method.config));
/// a library user who wants to react to events in Rust adds an
/// [`Observer`](crate::Observer) instead, which is why this type is not public.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[doc(hidden)] // ralph's own: `Config`'s field, set through `ralph.toml` or the builder
pub struct HookConfig {
    /// The events that run it, by name: [`HOOK_EVENTS`].
    pub on: Vec<String>,
    /// The program and its arguments (no shell, unless it is `["sh", "-c", "…"]`).
    pub command: Vec<String>,
    /// What messages call it. Default: `hooks[<index>]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Wall-clock limit of one run of it. Default 30s.
    #[serde(with = "duration", default = "thirty_seconds")]
    pub timeout: Duration,
    /// Whether its failure fails the run (exit 1) rather than being a warning. Default
    /// false.
    #[serde(default)]
    pub required: bool,
}

fn thirty_seconds() -> Duration {
    Duration::from_secs(30)
}

/// The hook-level event a `[[hooks]]` entry may name besides the events' own names: a run
/// ended in a state a person must act on (see [`Config`](super::Config)'s docs).
pub const NEEDS_PERSON: &str = "needs_person";

/// Every name a `[[hooks]]` entry's `on` may hold, in one place: the `event` tag of each
/// [`Event`](crate::Event) (as `--json` prints it), then the hook-level [`NEEDS_PERSON`].
/// `budget_exhausted` is the event of a run refused at the run-wide budget. A test in `runtime::hooks` checks that every event's tag is
/// here.
pub const HOOK_EVENTS: [&str; 35] = [
    "stage_entered",
    "issue_investigated",
    "task_started",
    "agent_finished",
    "agent",
    "gate_finished",
    "task_retry",
    "task_done",
    "task_merged",
    "task_blocked",
    "task_killed",
    "issue_killed",
    "verdict",
    "gaps_found",
    "gap_answered",
    "prioritized",
    "decomposed",
    "issue_decomposed",
    "answer_invalid",
    "rate_limited",
    "state_repaired",
    "guidance_given",
    "question_asked",
    "question_answered",
    "stop_requested",
    "warning",
    "iteration_finished",
    "plan_written",
    "plan_invalidated",
    "spec_committed",
    "specs_finished",
    "plan_saved",
    "finished",
    "budget_exhausted",
    NEEDS_PERSON,
];

fn five_minutes() -> Duration {
    Duration::from_secs(300)
}

/// `[store]`: where the board is kept when the builder is given no
/// [`Store`](crate::Store): the `kind`, and for a kind with a file, its `path` (relative to
/// the workspace), whose default is the kind's own.
///
/// ```toml
/// [store]
/// kind = "progress"        # "jsonl" (the default), "progress" or "memory"
/// path = "docs/PROGRESS.md" # default: .ralph/plan.jsonl for jsonl, PROGRESS.md for progress
/// ```
///
/// ```
/// use ralph::config::{Config, StoreConfig};
///
/// let config = Config::default();
/// assert_eq!(config.store.path(), Some(std::path::Path::new(".ralph/plan.jsonl")));
/// assert_eq!(StoreConfig::progress().path(), Some(std::path::Path::new("PROGRESS.md")));
/// assert_eq!(StoreConfig::Memory {}.path(), None);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
// Exhaustive: a `Ralph` opens each; a new one must reach it.
pub enum StoreConfig {
    /// [`JsonlStore`](crate::JsonlStore): an append-only log of every change.
    #[non_exhaustive]
    Jsonl {
        /// The file. Default `.ralph/plan.jsonl`.
        #[serde(default = "jsonl_file", skip_serializing_if = "is_jsonl_file")]
        path: PathBuf,
    },
    /// [`MemoryStore`](crate::MemoryStore): nothing survives the process.
    Memory {},
    /// [`ProgressStore`](crate::store::ProgressStore): a markdown progress file people can
    /// edit (seed 003).
    #[non_exhaustive]
    Progress {
        /// The file. Default `PROGRESS.md`.
        #[serde(default = "progress_file", skip_serializing_if = "is_progress_file")]
        path: PathBuf,
    },
}

impl StoreConfig {
    /// A JSONL store at its default file.
    pub fn jsonl() -> Self {
        StoreConfig::Jsonl { path: jsonl_file() }
    }

    /// A progress store at its default file.
    pub fn progress() -> Self {
        StoreConfig::Progress {
            path: progress_file(),
        }
    }

    /// The same kind of store at `path`; a memory store has none.
    #[must_use]
    pub fn at(self, path: impl Into<PathBuf>) -> Self {
        match self {
            StoreConfig::Jsonl { .. } => StoreConfig::Jsonl { path: path.into() },
            StoreConfig::Progress { .. } => StoreConfig::Progress { path: path.into() },
            StoreConfig::Memory {} => StoreConfig::Memory {},
        }
    }

    /// The state file, relative to the workspace; `None` for a memory store.
    pub fn path(&self) -> Option<&Path> {
        match self {
            StoreConfig::Jsonl { path } | StoreConfig::Progress { path } => Some(path),
            StoreConfig::Memory {} => None,
        }
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig::jsonl()
    }
}

// Each kind's default file is left out when written, so that a layer that sets only the
// kind (`kind = "progress"` in ralph.toml over the built-in jsonl) gets that kind's default.
fn jsonl_file() -> PathBuf {
    PathBuf::from(".ralph/plan.jsonl")
}

fn is_jsonl_file(path: &Path) -> bool {
    *path == jsonl_file()
}

fn progress_file() -> PathBuf {
    PathBuf::from("PROGRESS.md")
}

fn is_progress_file(path: &Path) -> bool {
    *path == progress_file()
}

/// The prompt templates a `[prompts]` entry can replace, by name: the keys of
/// [`Config::prompts`](super::Config::prompts).
pub const TEMPLATES: [&str; 16] = [
    "build",
    "retry",
    "investigate",
    "verify",
    "gap_analysis",
    "decompose",
    "task",
    "task_retry",
    "planner",
    "spec_verify",
    "plan_mode",
    "thread",
    "thread_verify",
    "thread_assess",
    "thread_draft",
    "thread_polish",
];

/// `[context]`: the three context-pressure tiers, as fractions of the model's window
/// (seed 000's warn 0.70, compact 0.85, kill 0.95).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ContextThresholds {
    /// Emit a warning event.
    pub warn: f64,
    /// Ask the agent to compact its session.
    pub compact: f64,
    /// Stop the run with `kill_reason: context_limit`.
    pub kill: f64,
}

impl Default for ContextThresholds {
    fn default() -> Self {
        ContextThresholds {
            warn: 0.70,
            compact: 0.85,
            kill: 0.95,
        }
    }
}

impl ContextThresholds {
    /// Thresholds from the three fractions.
    pub fn new(warn: f64, compact: f64, kill: f64) -> Self {
        ContextThresholds {
            warn,
            compact,
            kill,
        }
    }

    /// Checks `0 < warn < compact < kill <= 1`.
    ///
    /// # Errors
    ///
    /// A message naming the offending values.
    pub fn validate(&self) -> Result<(), String> {
        let ok = 0.0 < self.warn
            && self.warn < self.compact
            && self.compact < self.kill
            && self.kill <= 1.0;
        if ok {
            Ok(())
        } else {
            Err(format!(
                "context thresholds must satisfy 0 < warn < compact < kill <= 1, got warn={} compact={} kill={}",
                self.warn, self.compact, self.kill
            ))
        }
    }
}
