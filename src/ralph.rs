//! [`Ralph`] and its builder, and [`answer_schema`], the schema of each structured answer.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Serialize;

use crate::agent::{Agent, Role};
use crate::config::{Config, ConfigError, Overrides, StoreConfig};
use crate::construct::dry_run::DryRun;
use crate::event::Observer;
use crate::gate::{Gate, ShellGate};
use crate::model::Board;
use crate::outcome::Outcome;
use crate::prioritize::{CriticalPath, Prioritizer};
use crate::process::StopToken;
use crate::prompt::Prompts;
use crate::runtime::Context;
use crate::runtime::error::{BuildError, Error};
use crate::runtime::spend::Spent;
use crate::store::{JsonlStore, MemoryStore, ProgressStore, Store};

/// The orchestrator: a workspace, an agent, gates, a store, a prioritizer and observers,
/// with a validated [`Config`]. Build one with [`Ralph::builder`].
///
/// ```
/// use ralph::{Ralph, FakeAgent, MemoryStore};
///
/// let dir = tempfile::tempdir()?;
/// let ralph = Ralph::builder()
///     .workspace(dir.path())
///     .agent(FakeAgent::new())
///     .store(MemoryStore::new())
///     .max_iterations(3)
///     .build()?;
/// assert_eq!(ralph.config().max_iterations, 3);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Ralph {
    pub(crate) inner: Arc<Context>,
    /// Set while a run of this `Ralph` goes on: one at a time.
    running: AtomicBool,
}

impl fmt::Debug for Ralph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.inner;
        f.debug_struct("Ralph")
            .field("workspace", &inner.workspace)
            .field("agent", &inner.agent.name())
            .field(
                "gates",
                &inner.gates.iter().map(|g| g.name()).collect::<Vec<_>>(),
            )
            .field("config", &inner.config)
            .finish_non_exhaustive()
    }
}

impl Ralph {
    /// Starts a builder.
    pub fn builder() -> RalphBuilder {
        RalphBuilder::default()
    }

    /// The effective configuration.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The workspace (canonical path).
    pub fn workspace(&self) -> &Path {
        &self.inner.workspace
    }

    /// The token that stops a run: stop it (e.g. on Ctrl+C) and the running agent or gate is
    /// stopped cleanly, the state saved, and [`construct`](Self::construct) returns
    /// [`Outcome::Interrupted`]. A stopped `Ralph` stays stopped; build a new one to resume.
    pub fn stop_token(&self) -> StopToken {
        self.inner.stop.clone()
    }

    /// The handle that steers this `Ralph`'s runs while they run, from another task or
    /// thread of the process: [`tell`](crate::steer::Steering::tell),
    /// [`answer`](crate::steer::Steering::answer), [`stop`](crate::steer::Steering::stop)
    /// (gently, unlike the [`stop_token`](Self::stop_token)). Clone it freely; it outlives
    /// the `Ralph` and works between runs too.
    ///
    /// ```
    /// use ralph::{FakeAgent, Ralph};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let ralph = Ralph::builder().workspace(dir.path()).agent(FakeAgent::new()).build()?;
    /// let id = ralph.steering().from("ana").tell("Keep the public API unchanged.")?;
    /// assert_eq!(ralph.steering().guidance().len(), 1);
    /// ralph.steering().withdraw(&id)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn steering(&self) -> crate::steer::Steering {
        crate::steer::Steering::new(self.workspace())
    }

    /// The current board, as the store has it.
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when it cannot be loaded.
    pub async fn board(&self) -> Result<Board, Error> {
        let mut board = self.inner.store.load().await?;
        // What the board spent is the ledger's figure, also after a run killed before
        // its board was saved.
        let spent = self.spent(crate::construct::SPEND_SCOPE)?;
        crate::construct::stamp(&mut board.run, &spent);
        Ok(board)
    }

    /// What the agents spent over `scope`, as the spend ledger (`.ralph/spend.jsonl`) has
    /// it: the figure the run-wide limits (`max_cost_usd`, `max_tokens`) count, the
    /// summary and `ralph status` show, and [`Board`]'s `run.tokens_in`, `run.tokens_out`
    /// and `run.cost_usd` carry for `"construct"`. A scope is `"construct"` (the board),
    /// `"build"` (plan mode and build mode), `"plan"`, or `"thread/<id>"`; one that never
    /// spent is all zeros. A run cut short by a kill of ralph counts by what its agent had
    /// reported (`is_estimate()`). Reading writes nothing.
    ///
    /// The figure, `ralph::Spent` (plain data, `Copy`, `Serialize`), has `input_tokens`
    /// and `output_tokens` (what `max_tokens` counts; `tokens()` is their sum),
    /// `cache_read_tokens` and `cache_creation_tokens` (shown apart, not counted),
    /// `cost_usd` (dollars as the agents reported them), `runs` (agent runs),
    /// `unpriced_runs` (runs that reported no cost: their dollars count as $0) and
    /// `estimated_runs` (runs cut short that count by what they had reported; when not 0,
    /// `is_estimate()` is true and the figure may be below what was spent).
    ///
    /// ```
    /// use ralph::{FakeAgent, MemoryStore, Ralph, Role, agent::Script};
    /// use serde_json::json;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = tempfile::tempdir()?;
    /// std::fs::write(dir.path().join("spec.md"), "# Nothing\nNothing to do.\n")?;
    /// // Every run reports 1000 tokens in, 200 out and $0.40.
    /// let agent = FakeAgent::new()
    ///     .always(Role::Investigate, Script::new()
    ///         .spend(1000, 200, Some(0.40))
    ///         .json(json!({"tasks": []})))
    ///     .always(Role::GapAnalysis, Script::new()
    ///         .spend(1000, 200, Some(0.40))
    ///         .json(json!({"tasks": [], "issues": []})));
    /// let ralph = Ralph::builder()
    ///     .workspace(dir.path())
    ///     .agent(agent)
    ///     .store(MemoryStore::new())
    ///     .build()?;
    /// ralph.construct("spec.md").await?;
    ///
    /// let spent = ralph.spent("construct")?;
    /// assert!(spent.runs > 0 && !spent.is_estimate());
    /// assert_eq!((spent.input_tokens, spent.output_tokens), (1000 * spent.runs, 200 * spent.runs));
    /// assert!((spent.cost_usd - 0.40 * spent.runs as f64).abs() < 1e-9);
    /// assert_eq!(ralph.board().await?.run.cost_usd, spent.cost_usd);
    /// assert_eq!(ralph.spent("build")?, ralph::Spent::default());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the ledger cannot be read, [`Error::Store`] naming the file and
    /// the line when a line of it is not a ledger line.
    pub fn spent(&self, scope: &str) -> Result<Spent, Error> {
        Ok(crate::runtime::spend::Ledger::open(self.workspace(), scope)?.spent())
    }

    /// The last choices a [`Fallback`](crate::agent::Fallback) chain made in this workspace
    /// (which agent took a run, and why), oldest first, as `ralph status` shows them. Kept
    /// in `.ralph/agent-choices.json`, in every mode.
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when that file cannot be read or is not a list of choices.
    pub fn agent_choices(&self) -> Result<Vec<crate::agent::AgentChoice>, Error> {
        Ok(crate::runtime::choices::load(self.workspace())?)
    }

    /// The tasks being built in git work trees right now (`build_concurrency`), or left
    /// in flight by a killed run (the next run removes those and builds them again).
    pub fn tasks_in_flight(&self) -> Vec<crate::model::TaskId> {
        crate::runtime::worktrees::in_flight(self.workspace())
            .into_iter()
            .map(crate::model::TaskId::new)
            .collect()
    }

    /// Runs the construct loop on `spec` (a path relative to the workspace, or absolute
    /// inside it) until the spec is complete, a limit is reached, everything left is
    /// blocked, or the run is stopped.
    ///
    /// On a fresh workspace the spec becomes the board's first issue; on a workspace with
    /// state the run resumes where the work stood (the stage is derived from the board).
    ///
    /// Every end of the run, an error included, is an [`Event::Finished`](crate::Event::Finished)
    /// to the observers and the `[[hooks]]`, whose hooks run before this returns (in every
    /// mode: plan mode, build mode and a thread's loop too).
    ///
    /// # Errors
    ///
    /// [`Error`] when the state cannot be loaded or saved, the agent or a gate cannot run,
    /// or the spec cannot be read; [`Error::Hook`] when a `required` hook failed. Limits,
    /// blocks and interrupts are [`Outcome`]s.
    ///
    /// # Cancel safety
    ///
    /// Every transition is persisted before the next agent or gate runs, so dropping this
    /// future loses at most the step in progress (which is then run again on resume). Agents
    /// and gates kill their processes when dropped. Prefer [`stop_token`](Self::stop_token)
    /// for a clean stop.
    pub async fn construct(&self, spec: impl AsRef<Path>) -> Result<Outcome, Error> {
        self.run(Some(spec.as_ref())).await
    }

    /// Switches the workspace's one board to `spec` (`ralph construct SPEC --switch`): the
    /// board of the spec on record, its spend included, is archived under
    /// `.ralph/archive/<spec>-<date>/`, and `spec`'s latest archived board, if any, comes
    /// back (the board then names `spec`); otherwise `spec`'s next
    /// [`construct`](Self::construct) starts afresh. Switching to the spec on record changes
    /// nothing. Returns the archive the board switched from went to, if there was one.
    ///
    /// # Errors
    ///
    /// [`Error::Busy`] while a run holds the workspace; [`Error::SpecPath`] /
    /// [`Error::Spec`] / [`Error::SpecText`] as for `construct`; [`Error::Uncommitted`]
    /// while the work tree holds an interrupted task's work or a person's edits (the other
    /// spec's run would commit them); [`EditError::Invalid`](crate::EditError::Invalid) for a store whose file is not
    /// in `.ralph/`, or a board with tasks tied to no spec that an archive would replace;
    /// [`Error::Io`] naming the file that could not be moved.
    pub async fn switch_spec(&self, spec: impl AsRef<Path>) -> Result<Option<PathBuf>, Error> {
        crate::construct::switch::switch(&self.inner, spec.as_ref()).await
    }

    /// Checks `spec` as [`construct`](Self::construct) takes it, without taking the
    /// workspace's lock or writing anything: its path (relative, no `..`, an existing file
    /// that resolves, symlinks followed, inside the workspace) and its text (UTF-8, not
    /// empty, no control characters). [`construct`](Self::construct) checks the same first,
    /// so a refused spec leaves no trace; this lets a caller refuse it before saying
    /// anything. Returns the path relative to the workspace.
    ///
    /// # Errors
    ///
    /// [`Error::SpecPath`] for the path; [`Error::Spec`] when it cannot be read;
    /// [`Error::SpecText`] for its text.
    pub fn check_spec(&self, spec: impl AsRef<Path>) -> Result<PathBuf, Error> {
        crate::runtime::spec::check(self.workspace(), spec.as_ref())
    }

    /// Resumes the construct loop on the spec on record in the workspace's state.
    ///
    /// # Errors
    ///
    /// [`Error::NoSpec`] if no run was ever started here; otherwise as
    /// [`construct`](Self::construct).
    pub async fn resume(&self) -> Result<Outcome, Error> {
        self.run(None).await
    }

    /// Seed 000's `plan` mode (`ralph construct --plan-only`): the construct loop up to its
    /// first BUILD, so that a person can read and edit the task list before any code is
    /// written. On `spec` (a fresh board seeds it as the issue `i-1`), or the spec on record
    /// when `None`; every open issue is investigated into tasks (a killed investigator's or
    /// task's work decomposed), prioritized, and the run returns
    /// [`Outcome::Planned`]. A later [`construct`](Self::construct) or
    /// [`resume`](Self::resume) builds the tasks as they then stand. On a board already
    /// planned it runs no agent and returns `Planned` at once.
    ///
    /// ```
    /// use ralph::{FakeAgent, MemoryStore, Outcome, Ralph, Role};
    /// use ralph::agent::Script;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
    /// let dir = tempfile::tempdir()?;
    /// std::fs::write(dir.path().join("spec.md"), "# Greeter\n")?;
    /// let agent = FakeAgent::new().on(
    ///     Role::Investigate,
    ///     "i-1",
    ///     Script::new().json(serde_json::json!({"tasks": [{"name": "Write greet.sh", "accept": "it greets"}]})),
    /// );
    /// let ralph = Ralph::builder().workspace(dir.path()).agent(agent).store(MemoryStore::new()).build()?;
    /// let outcome = ralph.construct_plan(Some("spec.md".as_ref())).await?;
    /// assert_eq!(outcome, Outcome::Planned { tasks: 1 });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`construct`](Self::construct) (or [`resume`](Self::resume) without a spec).
    pub async fn construct_plan(&self, spec: Option<&Path>) -> Result<Outcome, Error> {
        let _guard = self.guard()?;
        crate::construct::run(self.inner.clone(), spec, true).await
    }

    #[cfg(feature = "specs")]
    /// Plan mode (seed 004): the agent, in the read-only [`Role::Breakdown`](crate::Role::Breakdown),
    /// reads the markdown `specs` (paths relative to the workspace, inside `[planning]
    /// specs_dir`; none means every `.md` there except `plans/`) and answers with specs,
    /// tasks, acceptance criteria and priorities, which are merged into
    /// `implementation.json` (completed tasks are kept with their ids and history) and saved.
    /// Returns what was saved.
    ///
    /// # Errors
    ///
    /// [`Error::Specs`] when there are no specs or the agent gave no usable answer (the
    /// file is then unchanged); [`Error::SpecPath`] for a spec path outside the specs folder;
    /// [`Error::Store`] when `implementation.json` is malformed or cannot be written;
    /// [`Error::Hook`] when a `required` hook failed (the file was saved).
    ///
    /// # Cancel safety
    ///
    /// The file is written once, atomically, at the end.
    pub async fn plan<P: AsRef<Path>>(
        &self,
        specs: impl IntoIterator<Item = P>,
    ) -> Result<crate::specs::Implementation, Error> {
        let specs = specs
            .into_iter()
            .map(|p| p.as_ref().to_path_buf())
            .collect();
        let _guard = self.guard()?;
        crate::specs::plan_mode::run(self.inner.clone(), specs).await
    }

    #[cfg(feature = "specs")]
    /// Build mode (seeds 004 and 002) over `implementation.json`, with no agent parsing it:
    /// specs by priority; for each, an active plan (seed 002's resume rules; a read-only
    /// [`Role::Planner`](crate::Role::Planner) writes one when needed), then its pending
    /// tasks in order, one fresh agent session per attempt with the required gates after
    /// each; then a verifier of the whole spec, which accepts (a git commit named after the
    /// spec, the spec completed, an entry in `PROGRESS.md`), rejects (a task carrying its
    /// feedback) or invalidates the plan (`PLAN_INVALIDATION: <reason>` as a line of its
    /// reason: the plan is archived and re-planned). The workspace must be a git repository.
    ///
    /// Named `build_specs` because [`RalphBuilder::build`] builds the `Ralph` itself.
    ///
    /// # Errors
    ///
    /// [`Error::Specs`] without `implementation.json`; [`Error::Git`] outside a
    /// git repository or when a commit fails; [`Error::SpecPath`] for a spec outside the specs
    /// folder; otherwise as [`construct`](Self::construct) ([`Error::Hook`] included).
    /// Blocks, exhausted attempts and interrupts are
    /// [`SpecsOutcome`](crate::outcome::SpecsOutcome)s.
    ///
    /// # Cancel safety
    ///
    /// Every transition is saved to `implementation.json` before the next agent, gate or
    /// git command, so dropping the future loses at most the step in progress.
    pub async fn build_specs(&self) -> Result<crate::outcome::SpecsOutcome, Error> {
        let _guard = self.guard()?;
        crate::specs::build::run(self.inner.clone(), None).await
    }

    #[cfg(feature = "specs")]
    /// Build mode with one spec built again (`ralph build --force SPEC`; seed 002's "skip
    /// a done spec unless forced"): the spec `spec` names (its id, or its `file` as written
    /// in `implementation.json`) and every task of it go back to pending, with what the
    /// earlier build recorded cleared (attempts, failures, the verdict, `completedAt`), and
    /// the file is saved; then the run goes on as [`build_specs`](Self::build_specs). Its
    /// plan in `.ralph/plans/` is kept (delete it to have it planned again). The spec's
    /// second completion is a commit and a `PROGRESS.md` entry of its own.
    ///
    /// ```no_run
    /// # async fn f(ralph: ralph::Ralph) -> Result<(), ralph::Error> {
    /// let outcome = ralph.rebuild("greeter").await?;
    /// println!("{outcome}");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`SpecsError::UnknownSpec`](crate::specs::SpecsError::UnknownSpec) when the file has
    /// no such spec (nothing is changed); otherwise as [`build_specs`](Self::build_specs).
    pub async fn rebuild(&self, spec: &str) -> Result<crate::outcome::SpecsOutcome, Error> {
        let _guard = self.guard()?;
        crate::specs::build::run(self.inner.clone(), Some(spec.to_owned())).await
    }

    #[cfg(feature = "specs")]
    /// A blocked task of build mode pending again, after a person fixed what blocked it
    /// (`ralph task unblock SPEC/TASK`): task `task` of the spec `spec` names (its id, or its
    /// `file`) gets a fresh retry budget, its last failure kept for its next session's
    /// prompt; a spec given up after its failed rounds gets fresh rounds. With `restore`
    /// (`--restore`), the work build mode set aside in a stash entry when the spec blocked
    /// and another spec's turn began comes back into the work tree, as the spec's: the next
    /// [`build_specs`](Self::build_specs) takes it up and commits it with the spec. Returns
    /// that entry's name, `None` when nothing was set aside.
    ///
    /// ```no_run
    /// # async fn f(ralph: ralph::Ralph) -> Result<(), ralph::Error> {
    /// ralph.unblock_spec_task("auth", "auth-2", true).await?;
    /// let outcome = ralph.build_specs().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Busy`] while a run holds the workspace;
    /// [`SpecsError::UnknownSpec`](crate::specs::SpecsError::UnknownSpec);
    /// [`EditError::Invalid`](crate::EditError::Invalid) for a task the spec does not have or one not blocked (nothing
    /// is changed); with `restore`, [`Error::Uncommitted`] when the work tree holds other
    /// work (the task stays unblocked, its work in the stash) and [`Error::Git`] when the
    /// entry does not apply (git keeps it).
    pub async fn unblock_spec_task(
        &self,
        spec: &str,
        task: &str,
        restore: bool,
    ) -> Result<Option<String>, Error> {
        crate::specs::unblock::unblock(&self.inner, spec, task, restore).await
    }

    #[cfg(feature = "specs")]
    /// `implementation.json` as it is on disk (`None` before plan mode ran).
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when it cannot be read or is malformed.
    pub fn implementation(&self) -> Result<Option<crate::specs::Implementation>, Error> {
        let path = self
            .inner
            .workspace
            .join(&self.inner.config.planning.implementation);
        Ok(crate::specs::ImplementationStore::new(path).load()?)
    }

    #[cfg(feature = "threads")]
    /// The threads of this workspace ([`thread`](crate::thread)), on the same context as
    /// the construct loop, plan mode and build mode: the config (`[context]`, `grace`,
    /// `transient_backoff`), the agent (given the config), the `[prompts]`, the observers
    /// and the stop token. Threads and the other modes never run at once: each holds the
    /// workspace's lock while it runs.
    ///
    /// ```
    /// use ralph::{FakeAgent, Ralph};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let ralph = Ralph::builder().workspace(dir.path()).agent(FakeAgent::new()).build()?;
    /// let threads = ralph.threads();
    /// assert!(threads.list()?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn threads(&self) -> crate::thread::Threads {
        crate::thread::Threads::from_context(self.inner.clone())
    }

    fn guard(&self) -> Result<ResetOnDrop<'_>, Error> {
        if self.running.swap(true, Ordering::SeqCst) {
            return Err(Error::AlreadyRunning);
        }
        Ok(ResetOnDrop(&self.running))
    }

    /// Seed 003's `--dry-run`: what [`construct`](Self::construct) on `spec` would do next
    /// (the stage, the next task, the prompt template and its source, the limits), worked
    /// out from the stored state. Starts no agent and no gate and writes nothing.
    ///
    /// ```
    /// use ralph::{FakeAgent, MemoryStore, Ralph, model::{Change, Task}, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let dir = tempfile::tempdir()?;
    /// std::fs::write(dir.path().join("spec.md"), "# Greeter\n")?;
    /// let store = MemoryStore::new();
    /// store.persist(&[Change::Task(Task::new("t-1", "Write hello.txt"))]).await?;
    /// let ralph = Ralph::builder().workspace(dir.path()).agent(FakeAgent::new()).store(store).build()?;
    ///
    /// // A task added before the first run does not stand in for the spec: the run would
    /// // seed the spec as an issue and investigate it first.
    /// let report = ralph.dry_run("spec.md").await?;
    /// assert_eq!(report.next, Some(("i-1".into(), "Implement the spec `spec.md` (Greeter).".into())));
    /// assert!(report.to_string().contains("prompt:    investigate (built-in)"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when the state cannot be loaded; [`Error::Spec`] /
    /// [`Error::SpecMismatch`] as for `construct`.
    pub async fn dry_run(&self, spec: impl AsRef<Path>) -> Result<DryRun, Error> {
        crate::construct::dry_run::dry_run(&self.inner, Some(spec.as_ref())).await
    }

    #[cfg(feature = "specs")]
    /// What [`plan`](Self::plan) on `specs` would do: the specs it would read, the file it
    /// would write, the prompt it would use. Starts no agent, takes no lock, writes nothing.
    ///
    /// # Errors
    ///
    /// [`Error::SpecPath`] for a spec path that breaks the rule, [`Error::Specs`] when
    /// there are no specs.
    pub fn dry_run_plan<P: AsRef<Path>>(
        &self,
        specs: impl IntoIterator<Item = P>,
    ) -> Result<crate::specs::PlanDryRun, Error> {
        let specs = specs
            .into_iter()
            .map(|p| p.as_ref().to_path_buf())
            .collect();
        crate::specs::dry_run::plan(&self.inner, specs)
    }

    #[cfg(feature = "specs")]
    /// What [`build_specs`](Self::build_specs) would do next: the spec, its next step (plan,
    /// a task's session, the verification) and that step's prompt template, the gates and
    /// the limits. Starts no agent or gate, takes no lock, writes nothing.
    ///
    /// # Errors
    ///
    /// [`Error::Specs`] without `implementation.json`; [`Error::Store`] when it
    /// is malformed; [`Error::SpecPath`] for a spec path that breaks the rule.
    pub fn dry_run_build(&self) -> Result<crate::specs::BuildDryRun, Error> {
        crate::specs::dry_run::build(&self.inner)
    }

    async fn run(&self, spec: Option<&Path>) -> Result<Outcome, Error> {
        let _guard = self.guard()?;
        crate::construct::run(self.inner.clone(), spec, false).await
    }
}

#[cfg(feature = "threads")]
impl crate::thread::Threads {
    /// The threads of `workspace`, run by `agent`: short for
    /// `Ralph::builder().workspace(workspace).agent(agent).build()?.threads()`, so the
    /// workspace's `ralph.toml` and `RALPH_*` apply as in every mode. (It is written here,
    /// in the facade, because a pipeline does not build its own context.)
    ///
    /// # Errors
    ///
    /// [`ThreadError::Build`](crate::thread::ThreadError::Build) when the workspace is not
    /// a directory, its config is invalid (naming the key and the file), or a prompt
    /// override cannot be read.
    pub fn new(
        workspace: impl AsRef<Path>,
        agent: impl Agent + 'static,
    ) -> Result<Self, crate::thread::ThreadError> {
        let ralph = Ralph::builder()
            .workspace(workspace.as_ref())
            .agent(agent)
            .build()?;
        Ok(ralph.threads())
    }
}

struct ResetOnDrop<'a>(&'a AtomicBool);

impl Drop for ResetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// Builds a [`Ralph`]. Consuming: each method takes and returns the builder; validation
/// happens once, in [`build`](Self::build).
#[must_use]
#[derive(Default)]
pub struct RalphBuilder {
    workspace: Option<PathBuf>,
    agent: Option<Box<dyn Agent>>,
    gates: Vec<Arc<dyn Gate>>,
    store: Option<Arc<dyn Store>>,
    prioritizer: Option<Arc<dyn Prioritizer>>,
    observers: Vec<Arc<dyn Observer>>,
    overrides: Overrides,
    override_error: Option<ConfigError>,
    stop: Option<StopToken>,
}

impl fmt::Debug for RalphBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RalphBuilder")
            .field("workspace", &self.workspace)
            .field("agent", &self.agent.as_ref().map(|a| a.name().to_owned()))
            .field("gates", &self.gates.len())
            .field("overrides", &self.overrides)
            .finish_non_exhaustive()
    }
}

impl RalphBuilder {
    /// The directory the agent works in; `ralph.toml` is read from it. Required.
    pub fn workspace(mut self, dir: impl Into<PathBuf>) -> Self {
        self.workspace = Some(dir.into());
        self
    }

    /// The agent. Required. Pass an `Arc` to keep a handle (e.g. to a `FakeAgent`).
    ///
    /// [`build`](Self::build) hands it the loaded config ([`Agent::configure`]): a
    /// [`ClaudeCli`](crate::ClaudeCli) takes `[claude]` from `ralph.toml`, `RALPH_CLAUDE__*`
    /// and [`config("claude.…")`](Self::config), except what its own methods set, which wins.
    pub fn agent(mut self, agent: impl Agent + 'static) -> Self {
        self.agent = Some(Box::new(agent));
        self
    }

    /// Adds a gate, run after the gates of the config.
    pub fn gate(mut self, gate: impl Gate + 'static) -> Self {
        self.gates.push(Arc::new(gate));
        self
    }

    /// The store. Default: from `[store]` in the config (`.ralph/plan.jsonl`).
    pub fn store(mut self, store: impl Store + 'static) -> Self {
        self.store = Some(Arc::new(store));
        self
    }

    /// The prioritizer. Default: [`CriticalPath`].
    pub fn prioritizer(mut self, prioritizer: impl Prioritizer + 'static) -> Self {
        self.prioritizer = Some(Arc::new(prioritizer));
        self
    }

    /// Adds an observer of [`Event`](crate::Event)s.
    pub fn observer(mut self, observer: impl Observer + 'static) -> Self {
        self.observers.push(Arc::new(observer));
        self
    }

    /// Overrides one config key (dotted: `context.warn`), above `ralph.toml` and `RALPH_*`.
    pub fn config(mut self, key: &str, value: impl Serialize) -> Self {
        if let Err(e) = self.overrides.set(key, value) {
            self.override_error.get_or_insert(e);
        }
        self
    }

    /// Overrides `max_iterations`.
    pub fn max_iterations(self, n: u32) -> Self {
        self.config("max_iterations", n)
    }

    /// Overrides `stage_timeout`.
    pub fn stage_timeout(self, d: Duration) -> Self {
        self.config("stage_timeout", humantime::format_duration(d).to_string())
    }

    /// Overrides `agent_timeout`.
    pub fn agent_timeout(self, d: Duration) -> Self {
        self.config("agent_timeout", humantime::format_duration(d).to_string())
    }

    /// Overrides `retries`.
    pub fn retries(self, n: u32) -> Self {
        self.config("retries", n)
    }

    /// Overrides `decompose_after_rejections`: verifier rejections of one task after which
    /// it goes to DECOMPOSE instead of being built again.
    pub fn decompose_after_rejections(self, n: u32) -> Self {
        self.config("decompose_after_rejections", n)
    }

    /// Overrides `max_cost_usd`: dollars the agents may spend over the state a run belongs
    /// to, across resumes; then the run ends [`Outcome::BudgetExhausted`].
    pub fn max_cost_usd(self, dollars: f64) -> Self {
        self.config("max_cost_usd", dollars)
    }

    /// Overrides `max_tokens`: input and output tokens over the same scope.
    pub fn max_tokens(self, tokens: u64) -> Self {
        self.config("max_tokens", tokens)
    }

    /// Overrides `once`: run one iteration, then return [`Outcome::Once`].
    pub fn once(self, once: bool) -> Self {
        self.config("once", once)
    }

    /// Overrides `recent_attempts`: BUILD attempts remembered in the next prompts.
    pub fn recent_attempts(self, n: usize) -> Self {
        self.config("recent_attempts", n)
    }

    /// Overrides `verify_concurrency`.
    pub fn verify_concurrency(self, n: usize) -> Self {
        self.config("verify_concurrency", n)
    }

    /// Overrides `build_concurrency`: ready tasks built at once, each in its own git work
    /// tree.
    pub fn build_concurrency(self, n: usize) -> Self {
        self.config("build_concurrency", n)
    }

    /// Uses `token` as the stop token (see [`Ralph::stop_token`]).
    pub fn stop_token(mut self, token: StopToken) -> Self {
        self.stop = Some(token);
        self
    }

    /// Validates everything and builds the [`Ralph`].
    ///
    /// # Errors
    ///
    /// [`BuildError`] saying what is missing or wrong: no workspace or agent, a workspace
    /// that is not a directory, an invalid config (naming the key and the file), duplicate
    /// gate names, an unreadable prompt override, or a store that cannot be opened (another
    /// ralph holds its lock).
    pub fn build(self) -> Result<Ralph, BuildError> {
        let workspace = canonical_workspace(self.workspace.ok_or(BuildError::MissingWorkspace)?)?;
        let mut agent = self.agent.ok_or(BuildError::MissingAgent)?;
        if let Some(e) = self.override_error {
            return Err(e.into());
        }
        let (config, gates_origin) = Config::load_traced(&workspace, &self.overrides)?;
        agent.configure(&config);
        let gates = collect_gates(&config, self.gates)?;
        let prompts = Prompts::load(&workspace, &config.prompts)?;
        let store = match self.store {
            Some(store) => store,
            None => open_store(&workspace, &config)?,
        };
        let planning = &config.planning;
        let store_file = config.store.path().unwrap_or(Path::new(""));
        let own = [
            Path::new(crate::runtime::workspace::STATE_DIR),
            config.log_dir.as_path(),
            store_file,
            planning.implementation.as_path(),
            planning.progress.as_path(),
        ];
        if let Some((path, to)) = crate::runtime::workspace::link_out(&workspace, &own) {
            return Err(BuildError::Workspace {
                path,
                reason: format!(
                    "is a link out of the workspace (to {}): ralph writes its own files only inside it; remove the link",
                    to.display()
                ),
            });
        }
        let hooks = crate::runtime::hooks::Hooks::new(&config, &workspace);
        let sandbox = crate::runtime::sandbox::RunSandbox::new(&workspace, &config)
            .map_err(|why| BuildError::Sandbox(why.to_string()))?;
        let sandbox = Arc::new(sandbox);
        Ok(Ralph {
            running: AtomicBool::new(false),
            inner: Arc::new(Context {
                workspace,
                config,
                agent: Arc::from(agent),
                gates,
                gates_origin,
                store,
                prioritizer: self
                    .prioritizer
                    .unwrap_or_else(|| Arc::new(CriticalPath::new())),
                observers: self.observers,
                hooks,
                prompts,
                stop: self.stop.unwrap_or_default(),
                sandbox,
            }),
        })
    }
}

/// The JSON Schema `role`'s answer must match, exactly as ralph sends it to the agent
/// ([`AgentRequest::schema`](crate::AgentRequest::schema)) in every mode; `ralph schema
/// ROLE` prints it. `None` for the roles that answer in prose ([`Role::Build`],
/// [`Role::Planner`]), and for [`Role::Breakdown`], [`Role::Assess`] and [`Role::Draft`]
/// when their feature (`specs`, `threads`) is off.
///
/// ```
/// use ralph::Role;
///
/// let verify = ralph::answer_schema(Role::Verify).unwrap();
/// assert_eq!(verify["required"], serde_json::json!(["verdict", "reason"]));
/// assert!(ralph::answer_schema(Role::Build).is_none());
/// ```
pub fn answer_schema(role: Role) -> Option<serde_json::Value> {
    use crate::answer::{Answer, DecomposeAnswer, GapAnswer, InvestigateAnswer, VerifyAnswer};
    match role {
        Role::Investigate => Some(InvestigateAnswer::schema()),
        Role::Verify => Some(VerifyAnswer::schema()),
        Role::GapAnalysis => Some(GapAnswer::schema()),
        Role::Decompose => Some(DecomposeAnswer::schema()),
        #[cfg(feature = "specs")]
        Role::Breakdown => Some(crate::answer::PlanAnswer::schema()),
        #[cfg(feature = "threads")]
        Role::Assess => Some(crate::thread::AssessAnswer::schema()),
        #[cfg(feature = "threads")]
        Role::Draft => Some(crate::thread::DraftAnswer::schema()),
        _ => None,
    }
}

fn canonical_workspace(path: PathBuf) -> Result<PathBuf, BuildError> {
    let canonical = path.canonicalize().map_err(|e| BuildError::Workspace {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    if !canonical.is_dir() {
        return Err(BuildError::Workspace {
            path,
            reason: "is not a directory".into(),
        });
    }
    Ok(canonical)
}

fn collect_gates(
    config: &Config,
    extra: Vec<Arc<dyn Gate>>,
) -> Result<Vec<Arc<dyn Gate>>, BuildError> {
    let mut gates: Vec<Arc<dyn Gate>> = config
        .gates
        .iter()
        .map(|g| {
            Arc::new(
                ShellGate::new(&g.name, &g.command)
                    .with_required(g.required)
                    .timeout(g.timeout)
                    .grace(config.grace)
                    .network(g.network),
            ) as Arc<dyn Gate>
        })
        .collect();
    gates.extend(extra);
    let mut seen = std::collections::HashSet::new();
    for gate in &gates {
        if !seen.insert(gate.name().to_owned()) {
            return Err(BuildError::DuplicateGate(gate.name().to_owned()));
        }
    }
    Ok(gates)
}

fn open_store(workspace: &Path, config: &Config) -> Result<Arc<dyn Store>, BuildError> {
    Ok(match &config.store {
        StoreConfig::Progress { path, .. } => Arc::new(ProgressStore::open(workspace.join(path))?),
        StoreConfig::Jsonl { path, .. } => Arc::new(JsonlStore::open(workspace.join(path))?),
        StoreConfig::Memory {} => Arc::new(MemoryStore::new()),
    })
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests write their fixtures directly
mod tests {
    use super::*;
    use crate::FakeAgent;

    #[test]
    fn build_says_what_is_missing() {
        let err = Ralph::builder()
            .agent(FakeAgent::new())
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("workspace"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let err = Ralph::builder().workspace(dir.path()).build().unwrap_err();
        assert!(err.to_string().contains("agent"), "{err}");
        let err = Ralph::builder()
            .workspace(dir.path().join("missing"))
            .agent(FakeAgent::new())
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("missing"), "{err}");
    }

    #[test]
    fn build_validates_config_and_gates() {
        let dir = tempfile::tempdir().unwrap();
        let err = Ralph::builder()
            .workspace(dir.path())
            .agent(FakeAgent::new())
            .store(MemoryStore::new())
            .config("context.warn", 0.99)
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("context"), "{err}");
        std::fs::write(
            dir.path().join("ralph.toml"),
            "[[gates]]\nname = \"test\"\ncommand = \"true\"\n",
        )
        .unwrap();
        let err = Ralph::builder()
            .workspace(dir.path())
            .agent(FakeAgent::new())
            .store(MemoryStore::new())
            .gate(ShellGate::new("test", "false"))
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("\"test\""), "{err}");
    }

    #[test]
    fn builder_overrides_beat_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("ralph.toml"),
            "max_iterations = 7\nretries = 4\n",
        )
        .unwrap();
        let ralph = Ralph::builder()
            .workspace(dir.path())
            .agent(FakeAgent::new())
            .store(MemoryStore::new())
            .max_iterations(2)
            .stage_timeout(Duration::from_millis(1500))
            .build()
            .unwrap();
        assert_eq!(ralph.config().max_iterations, 2);
        assert_eq!(ralph.config().retries, 4);
        assert_eq!(ralph.config().stage_timeout, Duration::from_millis(1500));
    }

    /// The warning that no gate is required names where the empty list came from, as
    /// figment's metadata says: a `RALPH_GATES` listing a gate is not blamed when the
    /// program emptied the list over it.
    #[test]
    #[allow(clippy::result_large_err)]
    fn the_no_gate_warning_names_who_emptied_the_gates_not_any_variable_set() {
        fn warning(dir: &Path, builder: RalphBuilder) -> String {
            let ralph = builder
                .workspace(dir)
                .agent(FakeAgent::new())
                .store(MemoryStore::new())
                .build()
                .unwrap();
            let said = Arc::new(std::sync::Mutex::new(Vec::new()));
            let seen = said.clone();
            let observer: Arc<dyn crate::Observer> = Arc::new(move |e: &crate::Event| {
                if let crate::Event::Warning { message } = e {
                    seen.lock().unwrap().push(message.clone());
                }
            });
            let emitter = crate::runtime::logs::Emitter::new(&[observer]);
            ralph.inner.warn_without_gates(&emitter);
            said.lock().unwrap().join("\n")
        }
        figment::Jail::expect_with(|jail| {
            let dir = jail.directory().to_path_buf();
            jail.set_env("RALPH_GATES", r#"[{name = "env", command = "true"}]"#);
            let program = Ralph::builder().config("gates", Vec::<crate::config::GateConfig>::new());
            let said = warning(&dir, program);
            assert!(
                said.contains("no required gate") && said.contains("RalphBuilder::config"),
                "{said}"
            );
            assert!(!said.contains("RALPH_GATES sets"), "{said}");
            // The variable alone: its gate is required, nothing to warn of.
            assert_eq!(warning(&dir, Ralph::builder()), "");
            jail.set_env("RALPH_GATES", "[]");
            let said = warning(&dir, Ralph::builder());
            assert!(said.contains("RALPH_GATES sets the gates"), "{said}");
            Ok(())
        });
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests write their fixtures directly
mod claude_settings {
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;
    use crate::agent::claude::ClaudeCli;
    use crate::agent::{AgentError, AgentRequest, AgentRun};
    use crate::config::ClaudeConfig;

    /// A `ClaudeCli` that keeps, where the test can see it, the settings it ends up with.
    struct Spy(ClaudeCli, Arc<Mutex<Option<(ClaudeConfig, Duration)>>>);

    #[async_trait]
    impl Agent for Spy {
        async fn run(&self, request: AgentRequest) -> Result<AgentRun, AgentError> {
            self.0.run(request).await
        }

        fn configure(&mut self, config: &Config) {
            self.0.configure(config);
            let grace = self.0.grace_period();
            *self.1.lock().unwrap() = Some((self.0.config().clone(), grace));
        }
    }

    fn settings_after_build(cli: ClaudeCli) -> (ClaudeConfig, Duration) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("ralph.toml"),
            "grace = \"2s\"\n[claude]\nmodel = \"from-toml\"\nmax_turns = 9\n",
        )
        .unwrap();
        let seen = Arc::new(Mutex::new(None));
        Ralph::builder()
            .workspace(dir.path())
            .agent(Spy(cli, seen.clone()))
            .store(MemoryStore::new())
            .config("claude.max_turns", 7)
            .build()
            .unwrap();
        let settings = seen.lock().unwrap().take();
        settings.expect("build configures the agent")
    }

    #[test]
    fn a_claude_cli_given_to_the_builder_takes_the_workspace_settings() {
        let (claude, grace) = settings_after_build(ClaudeCli::new());
        assert_eq!(claude.model.as_deref(), Some("from-toml"));
        assert_eq!(
            claude.max_turns,
            Some(7),
            "the builder's config beats ralph.toml"
        );
        assert_eq!(grace, Duration::from_secs(2));
    }

    #[test]
    fn settings_made_in_code_win_over_the_workspace() {
        let cli = ClaudeCli::new().model("mine").grace(Duration::from_secs(1));
        let (claude, grace) = settings_after_build(cli);
        assert_eq!(claude.model.as_deref(), Some("mine"));
        assert_eq!(
            claude.max_turns,
            Some(7),
            "what code left unset still comes from config"
        );
        assert_eq!(grace, Duration::from_secs(1));
    }

    #[test]
    fn a_cli_built_from_a_whole_config_keeps_all_of_it() {
        let config = Config::default();
        let (claude, grace) = settings_after_build(ClaudeCli::from_config(&config));
        assert_eq!(
            claude, config.claude,
            "ralph.toml's [claude] replaced nothing"
        );
        assert_eq!(grace, config.grace, "nor its grace");
    }
}
