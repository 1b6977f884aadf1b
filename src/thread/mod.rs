//! Threads: one piece of work (a feature, a fix) taken from a spec to a commit through seed
//! 001's lifecycle, with human checkpoints, preflight checks and git safety.
//!
//! [`Threads`] is the registry of a workspace's threads, kept under `.ralph/`:
//!
//! | what | where |
//! |---|---|
//! | a thread's state (phase, baseline, pointers) | `threads/<id>/thread.json` (atomic writes, its layout versioned) |
//! | spec revisions, never rewritten | `threads/<id>/spec/v<N>.md` |
//! | the Drafting conversation, append-only | `threads/<id>/spec/conversation.jsonl` ([`Turn`]s) |
//! | one agent run | `runs/<run-id>/run.json` and its transcript `runs/<run-id>/output.log` |
//! | the selected thread | `active_thread` (its id) |
//!
//! Every move is checked against the table of transitions between [`PhaseKind`]s and persisted before the call
//! returns. The four human checkpoints are separate methods a person calls:
//! [`finalize`](Thread::finalize), the choices of a stuck thread
//! ([`revise`](Thread::revise), [`reconfigure`](Thread::reconfigure),
//! [`manual_assist`](Thread::manual_assist), [`abandon`](Thread::abandon),
//! [`diagnose`](Thread::diagnose)), [`approve`](Thread::approve) and
//! [`commit`](Thread::commit). Quick mode ([`Threads::quick`]) advances *to* a
//! checkpoint and never past it.
//!
//! # Git
//!
//! When implementation starts (Finalized → Preflight) the current branch and HEAD are
//! captured as the thread's baseline and the work moves to the branch `ralph/<id>`. Going
//! back to Drafting from Stuck or PendingReview resets the work tree to the baseline and
//! deletes that branch ([`revise`](Thread::revise): the `ralph` command asks for `--yes`
//! first). [`commit`](Thread::commit)
//! is the person's own call: it commits the changes on `ralph/<id>` and leaves merging to
//! them. [`abandon`](Thread::abandon) deletes nothing: the branch and its changes stay for
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
//! # The context: config, prompts, agents
//!
//! Threads stand on the runtime's context, as the construct loop, plan mode and build mode
//! do: [`Ralph::threads`](crate::Ralph::threads) gives the threads of a built [`Ralph`](crate::Ralph), and
//! [`Threads::new`] is short for that with the workspace's `ralph.toml` (and `RALPH_*`).
//! So `[context]` thresholds reach every agent request, `[prompts]` can replace the
//! templates `thread`, `thread_verify`, `thread_assess` and `thread_draft`, every agent is
//! given the config ([`Agent::configure`]), `grace` and `transient_backoff` are the
//! workspace's (the agent timeout and the retries are the thread's own, in [`RunConfig`]),
//! and the stop token is the [`Ralph`](crate::Ralph)'s.
//!
//! # Drafting, assessing and agents
//!
//! [`discuss`](Thread::discuss) talks with a read-only agent about the spec while it is
//! drafted; each turn is kept, and a reply that revises the spec writes its next revision.
//! [`assess`](Thread::assess) asks a read-only agent to review the spec; its feedback is
//! kept in the thread.
//!
//! **One fallback mechanism.** A thread's models are names ([`RunConfig::agents`], chosen
//! in Configuring and kept in `thread.json`) of agents registered with
//! [`agent`](Threads::agent); the loop drives them as one [`Fallback`]
//! chain, made afresh for each round and each resume, with the chain's rules: a rate-limited
//! agent rests until its reset and the next takes the run; one that fails fatally (bad
//! credentials, no program) is passed over for the rest of the round; one that fails
//! transiently is passed over for that run. The thread keeps only which agent took the last
//! run and why ([`ThreadRecord::current_agent`], [`ThreadRecord::agent_reason`]) for
//! `status` and `show`: rests are facts about the moment (a limit that may have reset,
//! credentials a person may have fixed while the thread was paused), so a resume in another
//! process starts the chain from its first agent again, and an agent still down costs one
//! short run before it is passed over. The thread is Stuck with "all agents exhausted" when
//! the chain has no agent left that can run. Criteria without a command are judged by
//! [`RunConfig::verifier`], or by the chain when none is named.
//!
//! A rate limit of the whole chain is waited out until it resets (the reset time in
//! [`ThreadRecord::rate_limited_until`] meanwhile; the stop token pauses the thread), then
//! the same iteration runs again: the wait is not an iteration. A transient failure backs
//! off `transient_backoff` of the config, doubling, at most [`RunConfig::transient_retries`]
//! times; then the iteration counts as failed. Both go through the runtime's one call path.
//!
//! # Review
//!
//! [`approve`](Thread::approve) records the tree the person approved (the work tree, ralph's
//! `.ralph/` left out, as a git tree id: [`ThreadRecord::approved_tree`]), and
//! [`commit`](Thread::commit) commits only that tree: a work tree changed since (an edit
//! after approval) sends the thread back to PendingReview with
//! [`ThreadError::ChangedSinceApproval`] naming the changed paths, since any change needs a
//! review of its own. [`send_back`](Thread::send_back) takes the reviewer's feedback, keeps
//! it in the thread ([`ThreadRecord::feedback`]) and shows it to the agent in every prompt
//! of the next round.
//!
//! # Example
//!
//! ```
//! use ralph::agent::{FakeAgent, Script};
//! use ralph::thread::{PhaseKind, Threads};
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
//! let threads = Threads::new(dir.path(), agent)?.quick(true);
//! let spec = "# Hello\n<promise>SHIPPED</promise>\n## Acceptance Criteria\n- [ ] greets: `grep -q hello hello.txt`\n";
//! let id = threads.create("Hello", spec)?.id;
//!
//! let thread = threads.thread(&id);           // the lifecycle of one thread
//! thread.finalize()?;                          // checkpoint 1: a person approves the spec
//! let record = thread.start().await?;          // quick: preflight, defaults, the loop, review
//! assert_eq!(record.phase.kind(), PhaseKind::PendingReview);
//! thread.approve().await?;                     // checkpoint 3
//! let done = thread.commit(None).await?;       // checkpoint 4: commits on ralph/<id>
//! assert_eq!(done.phase.kind(), PhaseKind::Done);
//! # let branch = git(&["branch", "--show-current"])?.stdout;
//! # assert_eq!(String::from_utf8(branch)?.trim(), format!("ralph/{id}"));
//! # Ok(())
//! # }
//! ```

mod ask;
mod assess;
mod call;
mod criteria;
mod draft;
mod dry_run;
mod error;
mod handle;
mod lifecycle;
mod lock;
#[doc(hidden)] // ralph's own tests reach it: no promise
pub mod phase;
mod polish;
mod preflight;
#[doc(hidden)] // ralph's own tests reach it: no promise
pub mod record;
mod registry;
mod repair;
mod running;
#[doc(hidden)] // ralph's own code and doc examples reach it: no promise
pub mod spec;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::process::StopToken;

use crate::agent::{Agent, Fallback};
use crate::event::Observer;
use crate::files::watch::Watch;
use crate::git::Git;
use crate::runtime::Context;
use crate::runtime::logs::Emitter;
pub(crate) use assess::AssessAnswer;
pub use assess::{AssessIssue, Assessment};
pub(crate) use draft::DraftAnswer;
pub use dry_run::ThreadDryRun;
pub use error::ThreadError;
pub use handle::Thread;
pub use phase::{Phase, PhaseKind};
pub use record::{IterationRecord, RunConfig, RunRecord, StuckReport, ThreadRecord, Turn};

/// An agent and the name the loop knows it by.
type Named = (String, Arc<dyn Agent>);

use crate::runtime::workspace::STATE_DIR;

use registry::transition;

/// The threads of one workspace. See the [module docs](self).
pub struct Threads {
    /// The workspace, the config, the agent, the prompts, the observers and the stop token,
    /// as every pipeline has them.
    ctx: Arc<Context>,
    /// `.ralph/` of the workspace.
    root: PathBuf,
    /// Agents registered by name, for [`RunConfig::agents`] and [`RunConfig::verifier`].
    agents: Vec<Named>,
    /// Quick mode ([`quick`](Self::quick)).
    quick: bool,
    /// The loop's settings a thread takes when it starts ([`run_config`](Self::run_config)).
    run_config: RunConfig,
    /// Observers added with [`observer`](Self::observer), beside the context's.
    observers: Vec<Arc<dyn Observer>>,
    /// Sends events to every observer: warnings (leftovers killed), and each agent run and
    /// criterion check of the loop.
    emitter: Emitter,
    /// Each `thread.json` as this handle last read or wrote it.
    seen: Watch,
}

impl std::fmt::Debug for Threads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Threads")
            .field("workspace", &self.ctx.workspace)
            .field("agent", &self.ctx.agent.name())
            .field(
                "agents",
                &self.agents.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("quick", &self.quick)
            .field("run_config", &self.run_config)
            .finish_non_exhaustive()
    }
}

/// The agents one round of the loop runs with.
#[derive(Clone)]
pub(super) struct LoopAgents {
    /// The models as one agent: a [`Fallback`] chain when there are several.
    work: Arc<dyn Agent>,
    /// The first model's name: the one a round starts with.
    first: String,
    /// The read-only verifier of the criteria without a command.
    verifier: Arc<dyn Agent>,
}

impl Threads {
    /// What git must never count, commit or reset: ralph's state and its logs.
    pub(crate) fn kept_out(&self) -> Vec<&str> {
        let logs = self.ctx.config.log_dir.to_str().unwrap_or(STATE_DIR);
        vec![STATE_DIR, logs]
    }

    /// The threads of the workspace of `ctx`, run by its agent (see
    /// [`Ralph::threads`](crate::Ralph::threads)). `Threads::new` is in `src/ralph.rs`: a
    /// pipeline does not load its own context, the facade builds it for every pipeline.
    pub(crate) fn from_context(ctx: Arc<Context>) -> Self {
        Threads {
            root: ctx.workspace.join(STATE_DIR),
            emitter: ctx.emitter(&[]),
            ctx,
            agents: Vec::new(),
            quick: false,
            run_config: RunConfig::default(),
            observers: Vec::new(),
            seen: Watch::default(),
        }
    }

    /// Adds an observer of the [`Event`](crate::Event)s of this workspace's runs: a warning
    /// when starting a loop killed what an earlier, killed run left running, each agent run
    /// (`AgentFinished`), each criterion command (`GateFinished`), and the end of each call
    /// that runs the loop or preflight ([`start`](Thread::start), [`run`](Thread::run),
    /// [`resume`](Thread::resume), [`manual_assist`](Thread::manual_assist),
    /// [`send_back`](Thread::send_back)), an error included (`Finished`, with the thread and
    /// the phase it was left in).
    #[must_use]
    pub fn observer(mut self, observer: impl Observer + 'static) -> Self {
        self.observers.push(Arc::new(observer));
        self.emitter = self.ctx.emitter(&self.observers);
        self
    }

    /// Quick mode: skip assessment, configuration and polish, advancing to the next human
    /// checkpoint (never past it). Default off (methodical). A thread made in quick mode
    /// ([`create`](Self::create)) keeps it: its later calls are quick whatever this says.
    #[must_use]
    pub fn quick(mut self, quick: bool) -> Self {
        self.quick = quick;
        self
    }

    /// Whether `record`'s calls run in quick mode: these `Threads` ask for it, or the thread
    /// was made in it.
    pub(crate) fn quick_for(&self, record: &ThreadRecord) -> bool {
        self.quick || record.quick
    }

    /// The loop's settings a thread takes when it starts (Configuring may change them), and
    /// the models a thread not yet started asks (`discuss`, `assess`). Default
    /// [`RunConfig::default`].
    #[must_use]
    pub fn run_config(mut self, config: RunConfig) -> Self {
        self.run_config = config;
        self
    }

    /// Registers `agent` under `name`, for [`RunConfig::agents`] to name it as a model to
    /// run with or fall back on, or [`RunConfig::verifier`] as the verifier. It is given the
    /// workspace's config first ([`Agent::configure`]), as the context's agent was. A later
    /// registration of the same name replaces it.
    ///
    /// ```
    /// use ralph::agent::FakeAgent;
    /// use ralph::thread::{RunConfig, Threads};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let threads = Threads::new(dir.path(), FakeAgent::new())?
    ///     .agent("opus", FakeAgent::new())
    ///     .agent("sonnet", FakeAgent::new())
    ///     .run_config(RunConfig::default().agents(["opus", "sonnet"]));
    /// # let _ = threads;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn agent(mut self, name: impl Into<String>, agent: impl Agent + 'static) -> Self {
        let name = name.into();
        let mut agent = agent;
        agent.configure(&self.ctx.config);
        self.agents.retain(|(n, _)| *n != name);
        self.agents.push((name, Arc::new(agent)));
        self
    }

    /// The agent registered as `name`; an unknown name is an error naming the known ones.
    fn named(&self, name: &str) -> Result<Named, String> {
        self.agents
            .iter()
            .find(|(n, _)| n == name)
            .map(|(n, a)| (n.clone(), Arc::clone(a)))
            .ok_or_else(|| {
                let known: Vec<&str> = self.agents.iter().map(|(n, _)| n.as_str()).collect();
                format!(
                    "no agent named {name:?} (registered: {})",
                    if known.is_empty() {
                        "none; register them with `Threads::agent`".to_owned()
                    } else {
                        known.join(", ")
                    }
                )
            })
    }

    /// The models `config` runs with, in order, with their names: the context's agent when
    /// it names none.
    fn chain(&self, config: &RunConfig) -> Result<Vec<Named>, String> {
        if config.agents.is_empty() {
            let agent = &self.ctx.agent;
            return Ok(vec![(agent.name().to_owned(), Arc::clone(agent))]);
        }
        config.agents.iter().map(|name| self.named(name)).collect()
    }

    /// Every agent `config` names, models then verifier, each once: what preflight checks.
    fn every_agent(&self, config: &RunConfig) -> Result<Vec<Named>, String> {
        let mut all = self.chain(config)?;
        if let Some(name) = &config.verifier
            && !all.iter().any(|(n, _)| n == name)
        {
            all.push(self.named(name)?);
        }
        Ok(all)
    }

    /// The agents a round of `config` runs with: the models as one agent (a fresh
    /// [`Fallback`] chain when there are several, so each round starts with the first), and
    /// the verifier (the same chain when none is named).
    fn loop_agents(&self, config: &RunConfig) -> Result<LoopAgents, String> {
        let chain = self.chain(config)?;
        let first = chain.first().map_or_else(String::new, |(n, _)| n.clone());
        let work: Arc<dyn Agent> = match <[Named; 1]>::try_from(chain) {
            Ok([(_, only)]) => only,
            Err(chain) => Arc::new(
                chain
                    .into_iter()
                    .fold(Fallback::new(), |fallback, (name, agent)| {
                        fallback.agent(name, agent)
                    }),
            ),
        };
        let verifier = match &config.verifier {
            Some(name) => self.named(name)?.1,
            None => Arc::clone(&work),
        };
        Ok(LoopAgents {
            work,
            first,
            verifier,
        })
    }

    /// [`loop_agents`](Self::loop_agents) of `record`'s settings; an unknown name is
    /// [`ThreadError::Config`].
    fn record_agents(&self, record: &ThreadRecord) -> Result<LoopAgents, ThreadError> {
        self.loop_agents(&record.config)
            .map_err(|reason| ThreadError::Config {
                id: record.id.clone(),
                reason,
            })
    }

    /// The token that pauses a running loop: stop it (on Ctrl+C, say) and the agent is
    /// stopped, the thread saved as Paused at the interrupted iteration, and the running
    /// call returns. It is the context's ([`RalphBuilder::stop_token`](crate::RalphBuilder::stop_token)
    /// sets it); stopped stays stopped: make a new `Threads` to resume.
    pub fn stop_token(&self) -> StopToken {
        self.ctx.stop.clone()
    }

    /// The workspace.
    pub fn workspace(&self) -> &Path {
        &self.ctx.workspace
    }

    /// `.ralph/` of the workspace.
    pub fn state_dir(&self) -> &Path {
        &self.root
    }

    fn git(&self) -> Git {
        self.ctx.git(&self.ctx.workspace)
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
