//! Threads: one piece of work (a feature, a fix) taken from a spec to a commit through seed
//! 001's lifecycle, with human checkpoints, preflight checks and git safety.
//!
//! [`Threads`] is the registry of a workspace's threads, kept under `.ralph/`:
//!
//! | what | where |
//! |---|---|
//! | a thread's state (phase, baseline, pointers) | `threads/<id>/thread.json` (atomic writes, [`record::SCHEMA_VERSION`]) |
//! | spec revisions, never rewritten | `threads/<id>/spec/v<N>.md` |
//! | one agent run | `runs/<run-id>/run.json` and its transcript `runs/<run-id>/output.log` |
//! | the selected thread | `active_thread` (its id) |
//!
//! Every move is checked against the table of [`phase`] and persisted before the call
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
//! # Assessing and agents
//!
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
//! use ralph::git::Git;
//! use ralph::thread::{Threads, ThreadOptions, phase::PhaseKind};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let git = Git::new(dir.path());
//! git.init().await?;
//! std::fs::write(dir.path().join(".gitignore"), ".ralph/\n")?;
//! git.commit_all("init", &[]).await?;
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
//! assert_eq!(git.current_branch().await?.as_deref(), Some(format!("ralph/{id}").as_str()));
//! # Ok(())
//! # }
//! ```

mod assess;
mod dry_run;
mod lock;
pub mod phase;
mod preflight;
pub mod record;
mod running;
pub mod spec;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::event::Observer;
use crate::files::seen::Watch;
use crate::git::{Git, GitError};
use crate::prompt::Prompts;
use crate::runtime::logs::Emitter;
pub use assess::{AssessAnswer, AssessIssue, Assessment};
pub use dry_run::ThreadDryRun;
use phase::{Phase, PhaseKind, TransitionError};
pub use record::{IterationRecord, RunConfig, RunRecord, StuckReport, ThreadRecord};

/// An agent and the name the loop knows it by.
type Named = (String, Arc<dyn Agent>);

pub use crate::runtime::workspace::STATE_DIR;

/// What git must never count, commit or reset: ralph's state.
const KEEP: &[&str] = &[STATE_DIR];

/// A thread operation failed. Refused moves name both phases.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ThreadError {
    /// The move is not in seed 001's tables.
    #[error("thread {id}: {refused}")]
    Transition {
        /// The thread.
        id: String,
        /// The refused move (its message is part of this one's).
        refused: TransitionError,
    },
    /// The call needs a phase the thread is not in (a data-only call such as `configure`).
    #[error("thread {id} is {phase}; {action} needs it to be {needed}")]
    WrongPhase {
        /// The thread.
        id: String,
        /// Its phase.
        phase: PhaseKind,
        /// What was asked.
        action: &'static str,
        /// The phase(s) it needs.
        needed: &'static str,
    },
    /// A reset of the work tree was asked without the person's confirmation.
    #[error(
        "thread {id}: going back to Drafting resets the work tree to {baseline} and deletes its changes; call again with the confirmation to continue"
    )]
    NeedsConfirmation {
        /// The thread.
        id: String,
        /// The baseline commit.
        baseline: String,
    },
    /// No such thread.
    #[error("no thread {0} (looked in {1})")]
    NotFound(String, PathBuf),
    /// A file could not be read or written.
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why (its message is part of this one's).
        error: std::io::Error,
    },
    /// `thread.json` or `run.json` is not what ralph wrote.
    #[error("{path} is corrupt: {message}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What serde said (with line and column), or what is missing.
        message: String,
    },
    /// `thread.json` was deleted, replaced or rewritten by someone else while this handle
    /// used it; nothing was written over it.
    #[error(
        "{path} {how} while ralph was using it; stopped without writing over it (restore the file, or check which other process changed it)"
    )]
    Changed {
        /// The file.
        path: PathBuf,
        /// What happened to it.
        how: String,
    },
    /// `thread.json` comes from a newer ralph.
    #[error(
        "{path} has schema_version {found}, but this ralph knows versions up to {known}; upgrade ralph"
    )]
    NewerSchema {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: u64,
        /// The newest this build reads.
        known: u32,
    },
    /// git failed.
    #[error(transparent)]
    Git(#[from] GitError),
    /// The workspace cannot be used.
    #[error("workspace {path}: {reason}")]
    Workspace {
        /// The path given.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A prompt could not be rendered.
    #[error(transparent)]
    Prompt(#[from] crate::prompt::PromptError),
    /// The loop's settings cannot be used (an unknown agent name).
    #[error("thread {id}: {reason}")]
    Config {
        /// The thread.
        id: String,
        /// What is wrong.
        reason: String,
    },
    /// Another process runs a thread of this workspace (it holds `.ralph/ralph.lock`).
    #[error("{message}")]
    Busy {
        /// Which thread runs where, and what to do.
        message: String,
    },
    /// The AI review of the spec gave no usable feedback; the thread stays Assessing.
    #[error(
        "thread {id}: the assessment failed: {reason}; the thread stays Assessing, call `assess` again or `finalize`"
    )]
    Assessment {
        /// The thread.
        id: String,
        /// Why (the agent's failure, or the parse error of its second answer).
        reason: String,
    },
}

/// How threads run.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ThreadOptions {
    /// Quick mode: skip assessment, configuration and polish, advancing to the next human
    /// checkpoint (never past it).
    pub quick: bool,
    /// The loop's settings for new threads (and for quick mode).
    pub config: RunConfig,
    /// Time a stopped agent gets to return before it is dropped (which kills it).
    pub grace: Duration,
    /// The wait before the loop tries again after a transient failure (overload, 5xx); it
    /// doubles with each failure in a row, up to a minute. Default: the workspace
    /// [`Config`](crate::Config)'s `transient_backoff` (2 s).
    pub transient_backoff: Duration,
}

impl Default for ThreadOptions {
    fn default() -> Self {
        ThreadOptions {
            quick: false,
            config: RunConfig::default(),
            grace: crate::process::DEFAULT_GRACE,
            transient_backoff: crate::config::Config::default().transient_backoff,
        }
    }
}

impl ThreadOptions {
    /// Sets quick mode.
    #[must_use]
    pub fn quick(mut self, quick: bool) -> Self {
        self.quick = quick;
        self
    }

    /// Sets the default loop settings.
    #[must_use]
    pub fn config(mut self, config: RunConfig) -> Self {
        self.config = config;
        self
    }

    /// Sets the first wait after a transient failure (see
    /// [`transient_backoff`](Self::transient_backoff)).
    #[must_use]
    pub fn transient_backoff(mut self, wait: Duration) -> Self {
        self.transient_backoff = wait;
        self
    }

    /// The workspace settings threads share with the engine: `grace` and
    /// `transient_backoff` of `config`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ralph::Config;
    /// use ralph::thread::ThreadOptions;
    ///
    /// let mut config = Config::default();
    /// config.transient_backoff = Duration::from_millis(500);
    /// let options = ThreadOptions::from_config(&config);
    /// assert_eq!(options.transient_backoff, Duration::from_millis(500));
    /// ```
    #[must_use]
    pub fn from_config(config: &crate::config::Config) -> Self {
        ThreadOptions {
            grace: config.grace,
            transient_backoff: config.transient_backoff,
            ..ThreadOptions::default()
        }
    }
}

/// Whether the person agreed to reset the work tree (see [`Threads::revise`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Confirm {
    /// Not confirmed: the call is refused and nothing changes.
    No,
    /// "This will reset changes. Continue?" — yes.
    ResetToBaseline,
}

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

    /// Creates a thread in Drafting with `spec` as revision 1, and makes it the active one.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Io`] when the files cannot be written.
    pub fn create(&self, title: &str, spec: &str) -> Result<ThreadRecord, ThreadError> {
        let id = format!("{}-{}", self.list()?.len() + 1, slug(title));
        let mut record = ThreadRecord {
            schema_version: record::SCHEMA_VERSION,
            id: id.clone(),
            title: title.to_owned(),
            phase: Phase::Drafting,
            spec_version: 0,
            current_run_id: None,
            runner_pid: None,
            runs: 0,
            baseline: None,
            branch: None,
            config: self.options.config.clone(),
            iteration_limit: 0,
            attempts: Vec::new(),
            closest: None,
            stuck: None,
            assessment: None,
            current_agent: None,
            exhausted: Vec::new(),
            transient_failures: 0,
            rate_limited_until: None,
            updated_at: String::new(),
        };
        self.write_spec(&mut record, spec)?;
        self.save(&mut record)?;
        self.set_active(&id)?;
        Ok(record)
    }

    /// Loads thread `id`.
    ///
    /// # Errors
    ///
    /// [`ThreadError::NotFound`], or a corrupt or newer `thread.json` (naming the file).
    pub fn get(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        let path = self.record_path(id);
        if !path.exists() {
            return Err(ThreadError::NotFound(
                id.to_owned(),
                self.root.join("threads"),
            ));
        }
        let record = record::load(&path)?;
        self.saw(&path)?;
        Ok(record)
    }

    /// The ids of every thread, sorted.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Io`] when `.ralph/threads` cannot be listed.
    pub fn list(&self) -> Result<Vec<String>, ThreadError> {
        let dir = self.root.join("threads");
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(ThreadError::Io {
                    path: dir,
                    error: source,
                });
            }
        };
        let mut ids: Vec<String> = entries
            .flatten()
            .filter(|e| e.path().join("thread.json").exists())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// The active thread's id (`.ralph/active_thread`), if one is set.
    pub fn active(&self) -> Option<String> {
        let text = std::fs::read_to_string(self.root.join("active_thread")).ok()?;
        let id = text.trim();
        (!id.is_empty()).then(|| id.to_owned())
    }

    /// Makes `id` the active thread.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Io`] naming `active_thread`.
    pub fn set_active(&self, id: &str) -> Result<(), ThreadError> {
        let path = self.root.join("active_thread");
        crate::files::atomic::replace(&path, format!("{id}\n").as_bytes())
            .map_err(|error| ThreadError::Io { path, error })
    }

    /// The text of the spec revision in force.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Io`] naming the file.
    pub fn spec_text(&self, record: &ThreadRecord) -> Result<String, ThreadError> {
        let path = self.spec_path(&record.id, record.spec_version);
        std::fs::read_to_string(&path).map_err(|error| ThreadError::Io { path, error })
    }

    /// Writes `text` as the next spec revision (revisions are never rewritten).
    fn write_spec(&self, record: &mut ThreadRecord, text: &str) -> Result<(), ThreadError> {
        let version = record.spec_version + 1;
        let path = self.spec_path(&record.id, version);
        let io = |source| ThreadError::Io {
            path: path.clone(),
            error: source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        // `create_new`: an existing revision is immutable, whatever the record says.
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(io)?;
        std::io::Write::write_all(&mut file, text.as_bytes()).map_err(io)?;
        file.sync_all().map_err(io)?;
        record.spec_version = version;
        Ok(())
    }

    /// Saves `record`, refusing when its `thread.json` was deleted, replaced or rewritten by
    /// someone else since this handle read or wrote it: a thread's state lost under a
    /// running loop stops the loop with an error naming the file.
    fn save(&self, record: &mut ThreadRecord) -> Result<(), ThreadError> {
        let path = self.record_path(&record.id);
        let io = |error| ThreadError::Io {
            path: path.clone(),
            error,
        };
        if let Some(how) = self.seen.change(&path).map_err(io)? {
            return Err(ThreadError::Changed { path, how });
        }
        record::save(&path, record)?;
        self.saw(&path)
    }

    fn saw(&self, path: &Path) -> Result<(), ThreadError> {
        self.seen.saw(path).map_err(|error| ThreadError::Io {
            path: path.to_path_buf(),
            error,
        })
    }

    /// Moves `record` to `to` if the table allows it, and saves. A new value of the same
    /// phase (the next iteration of Running) is an update, not a move.
    fn advance(&self, record: &mut ThreadRecord, to: Phase) -> Result<(), ThreadError> {
        let from = record.phase.kind();
        if from != to.kind() {
            phase::check(from, to.kind()).map_err(|source| ThreadError::Transition {
                id: record.id.clone(),
                refused: source,
            })?;
        }
        record.phase = to;
        self.save(record)
    }

    /// Loads `id` and refuses unless it is in one of `allowed`; the error of a refused move
    /// names both phases.
    fn load_for(&self, id: &str, to: PhaseKind) -> Result<ThreadRecord, ThreadError> {
        let record = self.get(id)?;
        phase::check(record.phase.kind(), to).map_err(|source| ThreadError::Transition {
            id: id.to_owned(),
            refused: source,
        })?;
        Ok(record)
    }

    fn wrong_phase(
        record: &ThreadRecord,
        action: &'static str,
        needed: &'static str,
    ) -> ThreadError {
        ThreadError::WrongPhase {
            id: record.id.clone(),
            phase: record.phase.kind(),
            action,
            needed,
        }
    }

    // ---- Phase 1: the spec --------------------------------------------------------------

    /// Replaces the spec while Drafting: writes the next revision `spec/v<N+1>.md`.
    ///
    /// # Errors
    ///
    /// [`ThreadError::WrongPhase`] outside Drafting.
    pub fn edit_spec(&self, id: &str, text: &str) -> Result<ThreadRecord, ThreadError> {
        let mut record = self.get(id)?;
        if record.phase.kind() != PhaseKind::Drafting {
            return Err(Self::wrong_phase(&record, "editing the spec", "Drafting"));
        }
        self.write_spec(&mut record, text)?;
        self.save(&mut record)?;
        Ok(record)
    }

    /// **Checkpoint 1**, Drafting or Assessing → Finalized: the person approves the spec.
    /// Quick mode stops here too: starting is the person's next call.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase.
    pub fn finalize(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        self.simple(id, Phase::Finalized)
    }

    /// Finalized → Drafting: reopen the spec.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase.
    pub fn reopen(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        self.only(id, &[PhaseKind::Finalized], PhaseKind::Drafting)?;
        self.simple(id, Phase::Drafting)
    }

    /// PreflightFailed → Drafting: the spec needs fixes.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase.
    pub fn fix_spec(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        self.only(id, &[PhaseKind::PreflightFailed], PhaseKind::Drafting)?;
        self.simple(id, Phase::Drafting)
    }

    /// Loads `id` and refuses (naming both phases) unless it is in one of `from`: for calls
    /// that are one row of the table although the table has other rows into `to`.
    fn only(
        &self,
        id: &str,
        from: &[PhaseKind],
        to: PhaseKind,
    ) -> Result<ThreadRecord, ThreadError> {
        let record = self.get(id)?;
        if from.contains(&record.phase.kind()) {
            Ok(record)
        } else {
            Err(transition(&record, to))
        }
    }

    fn simple(&self, id: &str, to: Phase) -> Result<ThreadRecord, ThreadError> {
        let mut record = self.load_for(id, to.kind())?;
        self.advance(&mut record, to)?;
        Ok(record)
    }

    // ---- Phase 2: implementation --------------------------------------------------------

    /// Finalized (or PreflightFailed, to retry) → Preflight, then Configuring or
    /// PreflightFailed. Entering Preflight from Finalized captures the git baseline; passing
    /// moves the work to the branch `ralph/<id>`. In quick mode the loop then runs with the
    /// default settings, up to the next checkpoint.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase; I/O and git errors. Failed checks
    /// are not errors: the thread is PreflightFailed with one message per check.
    pub async fn start(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        let mut record = self.load_for(id, PhaseKind::Preflight)?;
        self.advance(&mut record, Phase::Preflight)?;
        // Held from the "no other thread running" check through the loop quick mode runs.
        let _lock = match self.lock_runs().await {
            Ok(lock) => lock,
            Err(ThreadError::Busy { message }) => {
                let failures = vec![message];
                self.advance(&mut record, Phase::PreflightFailed { failures })?;
                return Ok(record);
            }
            Err(e) => return Err(e),
        };
        let failures = preflight::run(self, &mut record).await?;
        if !failures.is_empty() {
            self.advance(&mut record, Phase::PreflightFailed { failures })?;
            return Ok(record);
        }
        self.advance(&mut record, Phase::Configuring)?;
        if self.options.quick {
            record.config = self.options.config.clone();
            return self.run_record(record).await;
        }
        Ok(record)
    }

    /// Sets the loop's settings while Configuring.
    ///
    /// # Errors
    ///
    /// [`ThreadError::WrongPhase`] outside Configuring; [`ThreadError::Config`] when
    /// `config.agents` names an agent not registered with [`agent`](Self::agent).
    pub fn configure(&self, id: &str, config: RunConfig) -> Result<ThreadRecord, ThreadError> {
        let mut record = self.get(id)?;
        if record.phase.kind() != PhaseKind::Configuring {
            return Err(Self::wrong_phase(&record, "configure", "Configuring"));
        }
        self.chain(&config).map_err(|reason| ThreadError::Config {
            id: id.to_owned(),
            reason,
        })?;
        record.config = config;
        self.save(&mut record)?;
        Ok(record)
    }

    /// Configuring → Running: runs the loop from iteration 1 until it needs a person
    /// (Implemented, Stuck, Paused; PendingReview in quick mode).
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase; I/O and git errors.
    /// [`ThreadError::Busy`] while a loop runs in another process or handle.
    ///
    /// # Cancel safety
    ///
    /// Cancel through [`stop_token`](Self::stop_token), which saves the thread as Paused;
    /// dropping the future kills the agent but may leave the thread Running.
    pub async fn run(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        let _lock = self.lock_runs().await?;
        let record = self.only(id, &[PhaseKind::Configuring], PhaseKind::Running)?;
        self.run_record(record).await
    }

    async fn run_record(&self, mut record: ThreadRecord) -> Result<ThreadRecord, ThreadError> {
        let chain = self.record_chain(&record)?;
        let first = record.attempts.last().map_or(1, |a| a.iteration + 1);
        record.iteration_limit =
            first.saturating_add(record.config.max_iterations.saturating_sub(1));
        record.runner_pid = Some(std::process::id());
        // A new round starts with the first agent again.
        record.current_agent = chain.first().map(|(name, _)| name.clone());
        record.exhausted.clear();
        record.transient_failures = 0;
        self.advance(&mut record, Phase::Running { iteration: first })?;
        self.drive(record).await
    }

    /// Paused → Running: continues from the interrupted iteration. A thread left Running or
    /// Verifying by a process that died (killed, crashed, the machine went down) is first
    /// recovered as Paused at that iteration, which then runs again.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase; I/O and git errors.
    /// [`ThreadError::Busy`] while a loop runs in another process or handle.
    pub async fn resume(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        let _lock = self.lock_runs().await?;
        let mut record = self.get(id)?;
        if record.is_orphaned() {
            self.recover(&mut record)?;
        }
        let Phase::Paused { iteration, .. } = record.phase else {
            return Err(transition(&record, PhaseKind::Running));
        };
        record.runner_pid = Some(std::process::id());
        self.advance(&mut record, Phase::Running { iteration })?;
        self.drive(record).await
    }

    /// A thread left Running or Verifying by a process that died is Paused at the iteration
    /// it was in (through Verifying → Running → Paused, all rows of the table): that
    /// iteration runs again.
    fn recover(&self, record: &mut ThreadRecord) -> Result<(), ThreadError> {
        let iteration = match record.phase {
            Phase::Verifying { iteration } => {
                self.advance(record, Phase::Running { iteration })?;
                iteration
            }
            Phase::Running { iteration } => iteration,
            _ => return Ok(()),
        };
        let criteria_passing = record.attempts.last().map_or(0, |a| a.passed.len());
        let criteria_total = self
            .spec_text(record)
            .ok()
            .and_then(|t| spec::ThreadSpec::parse(&t).ok())
            .map_or(0, |s| s.criteria.len());
        record.runner_pid = None;
        self.advance(
            record,
            Phase::Paused {
                iteration,
                criteria_passing,
                criteria_total,
            },
        )
    }

    /// Paused or Stuck → Configuring: change the settings, keeping the changes made.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase.
    pub fn reconfigure(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        self.only(
            id,
            &[PhaseKind::Paused, PhaseKind::Stuck],
            PhaseKind::Configuring,
        )?;
        self.simple(id, Phase::Configuring)
    }

    /// **Checkpoint 2** (Stuck), manual assist → Running: the person edited files; the loop
    /// runs another round of `max_iterations`.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] unless Stuck.
    /// [`ThreadError::Busy`] while a loop runs in another process or handle.
    pub async fn manual_assist(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        let _lock = self.lock_runs().await?;
        let record = self.get(id)?;
        if record.phase.kind() != PhaseKind::Stuck {
            return Err(transition(&record, PhaseKind::Running));
        }
        self.run_record(record).await
    }

    /// **Checkpoint 2** (Stuck), diagnose: the stuck report; the thread stays Stuck.
    ///
    /// # Errors
    ///
    /// [`ThreadError::WrongPhase`] unless Stuck.
    pub fn diagnose(&self, id: &str) -> Result<StuckReport, ThreadError> {
        let record = self.get(id)?;
        match (&record.phase, record.stuck) {
            (Phase::Stuck { .. }, Some(report)) => Ok(report),
            _ => Err(Self::wrong_phase(&self.get(id)?, "diagnose", "Stuck")),
        }
    }

    /// **Checkpoint 2** (Stuck) or review (PendingReview) → Drafting: the spec was wrong.
    /// Resets the work tree to the baseline, deletes `ralph/<id>`, and writes `new_spec` (if
    /// given) as the next revision. Refused unless `confirm` is [`Confirm::ResetToBaseline`].
    ///
    /// # Errors
    ///
    /// [`ThreadError::NeedsConfirmation`] without it (nothing changes),
    /// [`ThreadError::Transition`] from another phase, git errors.
    pub async fn revise(
        &self,
        id: &str,
        new_spec: Option<&str>,
        confirm: Confirm,
    ) -> Result<ThreadRecord, ThreadError> {
        let mut record = self.load_for(id, PhaseKind::Drafting)?;
        if !matches!(
            record.phase.kind(),
            PhaseKind::Stuck | PhaseKind::PendingReview
        ) {
            return Err(transition(&record, PhaseKind::Drafting));
        }
        if confirm != Confirm::ResetToBaseline {
            return Err(ThreadError::NeedsConfirmation {
                id: id.to_owned(),
                baseline: record
                    .baseline
                    .as_ref()
                    .map_or_else(|| "the baseline".to_owned(), |b| b.commit_sha.clone()),
            });
        }
        self.reset_to_baseline(&mut record).await?;
        if let Some(text) = new_spec {
            self.write_spec(&mut record, text)?;
        }
        record.attempts.clear();
        record.closest = None;
        self.advance(&mut record, Phase::Drafting)?;
        Ok(record)
    }

    async fn reset_to_baseline(&self, record: &mut ThreadRecord) -> Result<(), ThreadError> {
        let git = self.git();
        if let Some(baseline) = &record.baseline {
            // Leaves `ralph/<id>` for the baseline branch, or the baseline commit detached.
            git.reset_to(baseline, KEEP).await?;
            if let Some(branch) = &record.branch
                && git.branch_exists(branch).await?
            {
                git.delete_branch(branch).await?;
            }
        }
        record.baseline = None;
        record.branch = None;
        Ok(())
    }

    // ---- Phases 3–5: polish, review, commit ---------------------------------------------

    /// Implemented → Polishing.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase.
    pub fn polish(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        self.simple(id, Phase::Polishing)
    }

    /// Polishing → Implemented.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase.
    pub fn polish_done(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        self.only(id, &[PhaseKind::Polishing], PhaseKind::Implemented)?;
        self.simple(id, Phase::Implemented)
    }

    /// Implemented → PendingReview, with "recommend approve" when every criterion passed
    /// at the last verification.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase.
    pub fn submit_for_review(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        let mut record = self.load_for(id, PhaseKind::PendingReview)?;
        let recommend_approve = all_passed(&record);
        self.advance(&mut record, Phase::PendingReview { recommend_approve })?;
        Ok(record)
    }

    /// PendingReview → Running: the review found implementation bugs; the loop runs
    /// another round in the same work tree.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] unless PendingReview.
    /// [`ThreadError::Busy`] while a loop runs in another process or handle.
    pub async fn send_back(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        let _lock = self.lock_runs().await?;
        let record = self.get(id)?;
        if record.phase.kind() != PhaseKind::PendingReview {
            return Err(transition(&record, PhaseKind::Running));
        }
        self.run_record(record).await
    }

    /// **Checkpoint 3**, PendingReview → Approved. Quick mode then prepares the commit
    /// message (ReadyToCommit) and stops there.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase.
    pub async fn approve(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        let mut record = self.load_for(id, PhaseKind::Approved)?;
        self.advance(&mut record, Phase::Approved)?;
        if self.options.quick {
            return self.prepare_commit(id, None);
        }
        Ok(record)
    }

    /// Approved → ReadyToCommit with `message`, or one generated from the title and spec.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase.
    pub fn prepare_commit(
        &self,
        id: &str,
        message: Option<&str>,
    ) -> Result<ThreadRecord, ThreadError> {
        let mut record = self.load_for(id, PhaseKind::ReadyToCommit)?;
        let message = match message {
            Some(m) => m.to_owned(),
            None => format!(
                "{}\n\nImplemented by ralph (thread {}, spec v{}).",
                record.title, record.id, record.spec_version
            ),
        };
        self.advance(&mut record, Phase::ReadyToCommit { message })?;
        Ok(record)
    }

    /// **Checkpoint 4**, ReadyToCommit → Done: the person's explicit commit. Commits every
    /// change (except `.ralph/`) on the thread's branch `ralph/<id>` with `message` or the
    /// prepared one; merging it is left to the person.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase; git errors (a refusing hook).
    pub async fn commit(
        &self,
        id: &str,
        message: Option<&str>,
    ) -> Result<ThreadRecord, ThreadError> {
        let mut record = self.load_for(id, PhaseKind::Done)?;
        let Phase::ReadyToCommit { message: prepared } = &record.phase else {
            return Err(transition(&record, PhaseKind::Done));
        };
        let message = message.unwrap_or(prepared).to_owned();
        let git = self.git();
        if let Some(branch) = &record.branch
            && git.current_branch().await?.as_deref() != Some(branch.as_str())
        {
            git.switch(branch).await?;
        }
        let commit = git.commit_all(&message, KEEP).await?;
        self.advance(&mut record, Phase::Done { commit })?;
        Ok(record)
    }

    /// Any non-terminal phase → Abandoned. Nothing is deleted: the branch `ralph/<id>`
    /// and every change on it are kept for the person (to read, cherry-pick or delete), and
    /// the spec revisions and run records stay in `.ralph/`. When the work tree is on
    /// `ralph/<id>` and clean (the changes were committed there, or there were none), HEAD
    /// goes back to the baseline branch (or the baseline commit, detached) so the person is
    /// where they started; with uncommitted changes it stays on `ralph/<id>`, since switching
    /// would carry them along or fail.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from Done or Abandoned; [`ThreadError::Busy`] when the
    /// thread's loop runs in another live process (pause it first); git errors.
    pub async fn abandon(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        let mut record = self.load_for(id, PhaseKind::Abandoned)?;
        // A loop running elsewhere would overwrite the abandoned record with its next phase.
        let _lock = if matches!(
            record.phase.kind(),
            PhaseKind::Running | PhaseKind::Verifying
        ) {
            let lock = self.lock_runs().await?;
            record = self.load_for(id, PhaseKind::Abandoned)?;
            Some(lock)
        } else {
            None
        };
        self.leave_branch(&record).await?;
        record.runner_pid = None;
        self.advance(&mut record, Phase::Abandoned)?;
        Ok(record)
    }

    /// Back to the baseline when on the thread's branch with nothing uncommitted.
    async fn leave_branch(&self, record: &ThreadRecord) -> Result<(), ThreadError> {
        let (Some(branch), Some(baseline)) = (&record.branch, &record.baseline) else {
            return Ok(());
        };
        let git = self.git();
        if git.current_branch().await?.as_deref() != Some(branch.as_str())
            || !git.changes(KEEP).await?.is_empty()
        {
            return Ok(());
        }
        match &baseline.branch {
            Some(base) => git.switch(base).await?,
            None => git.detach(&baseline.commit_sha).await?,
        }
        Ok(())
    }

    /// The diff of the work tree from the thread's baseline (empty before Preflight).
    ///
    /// # Errors
    ///
    /// git errors.
    pub async fn diff(&self, id: &str) -> Result<String, ThreadError> {
        let record = self.get(id)?;
        match &record.baseline {
            Some(b) => Ok(self.git().diff_from(&b.commit_sha).await?),
            None => Ok(String::new()),
        }
    }
}

fn transition(record: &ThreadRecord, to: PhaseKind) -> ThreadError {
    ThreadError::Transition {
        id: record.id.clone(),
        refused: TransitionError {
            from: record.phase.kind(),
            to,
        },
    }
}

/// Whether the latest attempt passed every criterion.
fn all_passed(record: &ThreadRecord) -> bool {
    record
        .attempts
        .last()
        .is_some_and(|a| a.failed.is_empty() && !a.passed.is_empty())
}

/// `Add a greeting!` → `add-a-greeting` (at most 40 characters; `thread` if nothing is left).
fn slug(title: &str) -> String {
    let mut out = String::new();
    for c in title.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
        if out.len() >= 40 {
            break;
        }
    }
    let out = out.trim_end_matches('-');
    if out.is_empty() {
        "thread".to_owned()
    } else {
        out.to_owned()
    }
}
