//! Threads: one piece of work (a feature, a fix) taken from a spec to a commit through seed
//! 001's lifecycle, with human checkpoints, preflight checks and git safety.
//!
//! [`Threads`] is the registry of a workspace's threads, kept under `.ralph/`:
//!
//! | what | where |
//! |---|---|
//! | a thread's state (phase, baseline, pointers) | `threads/<id>/thread.json` (atomic writes, [`record::SCHEMA_VERSION`]) |
//! | spec revisions, never rewritten | `threads/<id>/spec/v<N>.md` |
//! | the Drafting conversation, append-only | `threads/<id>/spec/conversation.jsonl` ([`Turn`]s) |
//! | one agent run | `runs/<run-id>/run.json` and its transcript `runs/<run-id>/output.log` |
//! | the selected thread | `active_thread` (its id) |
//!
//! Every move is checked against the table of transitions between [`PhaseKind`]s and persisted before the call
//! returns. The four human checkpoints are separate methods a person calls:
//! [`finalize`](Threads::finalize), the choices of a stuck thread
//! ([`revise`](Threads::revise), [`reconfigure`](Threads::reconfigure),
//! [`manual_assist`](Threads::manual_assist), [`abandon`](Threads::abandon),
//! [`diagnose`](Threads::diagnose)), [`approve`](Threads::approve) and
//! [`commit`](Threads::commit). Quick mode ([`ThreadOptions::quick`]) advances *to* a
//! checkpoint and never past it.
//!
//! # Git
//!
//! When implementation starts (Finalized → Preflight) the current branch and HEAD are
//! captured as the thread's baseline and the work moves to the branch `ralph/<id>`. Going
//! back to Drafting from Stuck or PendingReview resets the work tree to the baseline and
//! deletes that branch, and only with an explicit confirmation. [`commit`](Threads::commit)
//! is the person's own call: it commits the changes on `ralph/<id>` and leaves merging to
//! them. [`abandon`](Threads::abandon) deletes nothing: the branch and its changes stay for
//! the person. ralph's `.ralph/` folder is never committed, reset or counted as a change.
//!
//! # One loop at a time
//!
//! Preflight's "no other thread running" check and every running loop hold an exclusive
//! OS lock on `.ralph/ralph.lock` (the one every mode takes), so a second process (or a second [`Threads`] on the
//! same workspace) cannot slip in between: its `start` ends PreflightFailed and its `run`,
//! `resume` or `abandon` of a running thread fail with [`ThreadError::Busy`], naming the
//! thread and the process that runs it.
//!
//! # Drafting, assessing and agents
//!
//! [`discuss`](Threads::discuss) talks with a read-only agent about the spec while it is
//! drafted; each turn is kept, and a reply that revises the spec writes its next revision.
//! [`assess`](Threads::assess) asks a read-only agent to review the spec; its feedback is
//! kept in the thread. [`RunConfig::agents`] names agents registered with
//! [`agent`](Threads::agent) to fall back on, in order: the thread is Stuck with "all
//! agents exhausted" only when every one failed fatally or kept failing transiently.
//!
//! A rate-limited run is waited out until the limit resets (the reset time in
//! [`ThreadRecord::rate_limited_until`] meanwhile; the stop token pauses the thread), then the
//! same iteration runs again: the wait is not an iteration. A transient failure backs off
//! [`ThreadOptions::transient_backoff`], doubling, before the next try.
//!
//! # Example
//!
//! ```
//! use ralph::agent::{FakeAgent, Script};
//! use ralph::thread::{PhaseKind, ThreadOptions, Threads};
//! # use std::process::Command;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! # let git = |args: &[&str]| Command::new("git").args(args).current_dir(dir.path()).output();
//! # git(&["init", "-q", "-b", "main"])?;
//! std::fs::write(dir.path().join(".gitignore"), ".ralph/\n")?;
//! # git(&["add", "-A"])?;
//! # git(&["-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-qm", "init"])?;
//! // A git repository with one commit: a thread works on its own branch.
//!
//! let agent = FakeAgent::new().then(Script::new().write("hello.txt", "hello\n").answer("Wrote it.\nSHIPPED"));
//! let threads = Threads::new(dir.path(), agent)?.options(ThreadOptions::default().quick(true));
//! let spec = "# Hello\n<promise>SHIPPED</promise>\n## Acceptance Criteria\n- [ ] greets: `grep -q hello hello.txt`\n";
//! let id = threads.create("Hello", spec)?.id;
//!
//! threads.finalize(&id)?;                     // checkpoint 1: a person approves the spec
//! let thread = threads.start(&id).await?;     // quick: preflight, defaults, the loop, review
//! assert_eq!(thread.phase.kind(), PhaseKind::PendingReview);
//! threads.approve(&id).await?;                // checkpoint 3
//! let done = threads.commit(&id, None).await?; // checkpoint 4: commits on ralph/<id>
//! assert_eq!(done.phase.kind(), PhaseKind::Done);
//! # let branch = git(&["branch", "--show-current"])?.stdout;
//! # assert_eq!(String::from_utf8(branch)?.trim(), format!("ralph/{id}"));
//! # Ok(())
//! # }
//! ```

mod ask;
mod assess;
mod draft;
mod dry_run;
mod error;
mod lifecycle;
mod lock;
mod options;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub))] // reached through `__internals`
pub(crate) mod phase;
mod preflight;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub))] // reached through `__internals`
pub(crate) mod record;
mod registry;
mod repair;
mod running;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub))] // reached through `__internals`
pub(crate) mod spec;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::event::Observer;
use crate::files::seen::Watch;
pub use crate::git::Baseline;
use crate::git::Git;
use crate::prompt::Prompts;
use crate::runtime::logs::Emitter;
pub use assess::{AssessIssue, Assessment};
pub use draft::Turn;
pub use dry_run::ThreadDryRun;
pub use error::ThreadError;
pub use options::{Confirm, ThreadOptions};
pub use phase::{Phase, PhaseKind, TransitionError};
pub use record::{IterationRecord, RunConfig, RunRecord, StuckReport, ThreadRecord};

/// An agent and the name the loop knows it by.
type Named = (String, Arc<dyn Agent>);

pub use crate::runtime::workspace::STATE_DIR;

/// What git must never count, commit or reset: ralph's state.
const KEEP: &[&str] = &[STATE_DIR];

use registry::transition;

/// The threads of one workspace. See the [module docs](self).
pub struct Threads {
    workspace: PathBuf,
    root: PathBuf,
    agent: Arc<dyn Agent>,
    /// Agents registered by name, for [`RunConfig::agents`].
    agents: Vec<Named>,
    options: ThreadOptions,
    stop: CancellationToken,
    prompts: Prompts,
    /// Sends events to the observers: warnings (leftovers killed), and each agent run and
    /// criterion check of the loop.
    emitter: Emitter,
    observers: Vec<Arc<dyn Observer>>,
    /// Each `thread.json` as this handle last read or wrote it.
    seen: Watch,
}

impl std::fmt::Debug for Threads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Threads")
            .field("workspace", &self.workspace)
            .field("agent", &self.agent.name())
            .field(
                "agents",
                &self.agents.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Threads {
    /// The threads of `workspace`, run by `agent`.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Workspace`] when it is not a directory.
    pub fn new(
        workspace: impl AsRef<Path>,
        agent: impl Agent + 'static,
    ) -> Result<Self, ThreadError> {
        let path = workspace.as_ref();
        let workspace = path
            .canonicalize()
            .ok()
            .filter(|p| p.is_dir())
            .ok_or_else(|| ThreadError::Workspace {
                path: path.to_path_buf(),
                reason: "is not a directory".into(),
            })?;
        Ok(Threads {
            root: workspace.join(STATE_DIR),
            workspace,
            agent: Arc::new(agent),
            agents: Vec::new(),
            options: ThreadOptions::default(),
            stop: CancellationToken::new(),
            prompts: Prompts::builtin(),
            emitter: Emitter::new(&[]),
            observers: Vec::new(),
            seen: Watch::default(),
        })
    }

    /// Adds an observer of the [`Event`](crate::Event)s of this workspace's runs: a warning
    /// when starting a loop killed what an earlier, killed run left running, each agent run
    /// (`AgentFinished`) and each criterion command (`GateFinished`).
    #[must_use]
    pub fn observer(mut self, observer: impl Observer + 'static) -> Self {
        self.observers.push(Arc::new(observer));
        self.emitter = Emitter::new(&self.observers);
        self
    }

    /// Sets the options.
    #[must_use]
    pub fn options(mut self, options: ThreadOptions) -> Self {
        self.options = options;
        self
    }

    /// Registers `agent` under `name`, for [`RunConfig::agents`] to name it as a model to
    /// run with or fall back on. A later registration of the same name replaces it.
    ///
    /// ```
    /// use ralph::agent::FakeAgent;
    /// use ralph::thread::{RunConfig, ThreadOptions, Threads};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let threads = Threads::new(dir.path(), FakeAgent::new())?
    ///     .agent("opus", FakeAgent::new())
    ///     .agent("sonnet", FakeAgent::new())
    ///     .options(ThreadOptions::default().config(RunConfig::default().agents(["opus", "sonnet"])));
    /// # let _ = threads;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn agent(mut self, name: impl Into<String>, agent: impl Agent + 'static) -> Self {
        let name = name.into();
        self.agents.retain(|(n, _)| *n != name);
        self.agents.push((name, Arc::new(agent)));
        self
    }

    /// The agents `config` runs with, in order, with their names; an unknown name is an
    /// error naming the known ones.
    fn chain(&self, config: &RunConfig) -> Result<Vec<Named>, String> {
        if config.agents.is_empty() {
            return Ok(vec![(
                self.agent.name().to_owned(),
                Arc::clone(&self.agent),
            )]);
        }
        config
            .agents
            .iter()
            .map(|name| {
                self.agents
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(n, a)| (n.clone(), Arc::clone(a)))
                    .ok_or_else(|| {
                        let known: Vec<&str> =
                            self.agents.iter().map(|(n, _)| n.as_str()).collect();
                        format!(
                            "no agent named {name:?} (registered: {})",
                            if known.is_empty() {
                                "none; register them with `Threads::agent`".to_owned()
                            } else {
                                known.join(", ")
                            }
                        )
                    })
            })
            .collect()
    }

    /// The agents `record`'s settings run with; an unknown name is [`ThreadError::Config`].
    fn record_chain(&self, record: &ThreadRecord) -> Result<Vec<Named>, ThreadError> {
        self.chain(&record.config)
            .map_err(|reason| ThreadError::Config {
                id: record.id.clone(),
                reason,
            })
    }

    /// Uses `token` to interrupt the loop (see [`stop_token`](Self::stop_token)).
    #[must_use]
    pub fn with_stop_token(mut self, token: CancellationToken) -> Self {
        self.stop = token;
        self
    }

    /// The token that pauses a running loop: cancel it (on Ctrl+C, say) and the agent is
    /// stopped, the thread saved as Paused at the interrupted iteration, and the running
    /// call returns. Cancelled stays cancelled: make a new `Threads` to resume.
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// The workspace.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// `.ralph/` of the workspace.
    pub fn state_dir(&self) -> &Path {
        &self.root
    }

    fn git(&self) -> Git {
        Git::new(&self.workspace)
    }

    fn thread_dir(&self, id: &str) -> PathBuf {
        self.root.join("threads").join(id)
    }

    fn record_path(&self, id: &str) -> PathBuf {
        self.thread_dir(id).join("thread.json")
    }

    /// The file of spec revision `version` of thread `id`.
    pub fn spec_path(&self, id: &str, version: u32) -> PathBuf {
        self.thread_dir(id)
            .join("spec")
            .join(format!("v{version}.md"))
    }

    /// The folder of run `run_id` (`run.json`, `output.log`).
    pub fn run_dir(&self, run_id: &str) -> PathBuf {
        self.root.join("runs").join(run_id)
    }

    /// Agent run `run_id` (`runs/<run-id>/run.json`): its thread, iteration, role, times and
    /// how it ended. A thread's latest run is [`ThreadRecord::current_run_id`]; its
    /// transcript is `output.log` in [`run_dir`](Self::run_dir).
    ///
    /// # Errors
    ///
    /// [`ThreadError::Io`] naming the file when there is no such run (an id that is not one
    /// plain name, such as `../x`, is none), or [`ThreadError::Corrupt`] naming it.
    pub fn run_record(&self, run_id: &str) -> Result<RunRecord, ThreadError> {
        let path = self.run_dir(run_id).join("run.json");
        let plain = std::path::Path::new(run_id)
            .components()
            .eq([std::path::Component::Normal(run_id.as_ref())]);
        if !plain {
            return Err(ThreadError::Io {
                path,
                error: std::io::Error::new(std::io::ErrorKind::NotFound, "not a run id"),
            });
        }
        record::load_run(&path)
    }
}
