//! The run machinery every pipeline goes through, so that a promise made once holds in
//! every mode: the construct loop, plan mode, build mode and threads.
//!
//! | promise | where |
//! |---|---|
//! | one agent-call path: deadline, grace, rate limits, transient failures, events | [`call`] |
//! | one implementer attempt: the call, the claim in its final answer, the gates | [`attempt`] |
//! | one gate path: deadline, stop, events, the retry prompt's failure text | [`gates`] |
//! | one deadline rule and its backstop | [`deadline`] |
//! | one lock per workspace, and the sweep of a killed run's leftovers under it | [`workspace`] |
//! | one rule for spec paths | [`spec`] |
//! | logs and the event emitter | [`logs`] |
//! | `[[hooks]]`: run on events beside the run, awaited at its end | [`hooks`] |
//! | the record of a fallback chain's choices, for `ralph status` | [`choices`] |
//! | what every agent run spent, kept append-only, and the run-wide limits | [`spend`] |
//! | the work trees of tasks built at once, and the removal of a killed run's | [`worktrees`] |
//! | the user's branch: recorded at the start, checked after every agent run, put back | [`home`] |
//! | a read-only role's run changes no file of the work tree | [`read_only`] |
//! | SIGINT, SIGTERM and SIGHUP stop a run the same way | [`interrupt`] |
//!
//! Layers: the facade (`Ralph`, `Threads`' public calls) → the pipelines (`construct`,
//! `specs`, `thread`) → this runtime → the seams (`agent`, `gate`, `store`, `prioritize`,
//! and the data they exchange) → the foundation (`process`, `files`, `time`, `git`, the
//! marker parser). A module imports only from its own layer or those below, and pipelines
//! never import one another: cargo checks it between crates, review inside this one.

pub(crate) mod attempt;
pub(crate) mod call;
pub(crate) mod choices;
pub(crate) mod deadline;
pub(crate) mod error;
pub(crate) mod gates;
pub(crate) mod guidance;
pub(crate) mod home;
pub(crate) mod hooks;
pub(crate) mod inbox;
pub(crate) mod interrupt;
pub(crate) mod logs;
pub(crate) mod questions;
pub(crate) mod read_only;
pub(crate) mod referee;
pub(crate) mod sandbox;
pub(crate) mod spec;
pub(crate) mod spend;
pub(crate) mod workspace;
pub(crate) mod worktrees;

use std::path::PathBuf;
use std::sync::Arc;

use tokio::time::Instant;

use self::call::{CallLimits, Caller};
use self::error::Error;
use self::gates::GateRun;
use self::hooks::Hooks;
use self::logs::Emitter;
use self::sandbox::RunSandbox;
use self::workspace::RunLock;
use crate::agent::Agent;
use crate::config::{Config, GatesOrigin};
use crate::event::{Event, Observer};
use crate::gate::Gate;
use crate::model::{Board, TaskId};
use crate::prioritize::Prioritizer;
use crate::process::StopToken;
use crate::prompt::Prompts;
use crate::store::Store;

/// What a run of every pipeline works with: the workspace, the validated config, the four
/// seams (its agent given the config through [`Agent::configure`]), the observers, the
/// prompts (`[prompts]` applied) and the stop token. Built once by
/// [`RalphBuilder::build`](crate::RalphBuilder::build); the construct loop, plan mode, build
/// mode and threads ([`Ralph::threads`](crate::Ralph::threads)) all stand on it.
pub(crate) struct Context {
    /// Canonical.
    pub(crate) workspace: PathBuf,
    pub(crate) config: Config,
    pub(crate) agent: Arc<dyn Agent>,
    pub(crate) gates: Vec<Arc<dyn Gate>>,
    /// Where the config's list of gates came from, for the warning that none is required.
    pub(crate) gates_origin: GatesOrigin,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) prioritizer: Arc<dyn Prioritizer>,
    pub(crate) observers: Vec<Arc<dyn Observer>>,
    /// The `[[hooks]]` of the config; `None` when it sets none.
    pub(crate) hooks: Option<Hooks>,
    pub(crate) prompts: Prompts,
    pub(crate) stop: StopToken,
    /// How every agent run, gate and hook-running git command of its runs is confined.
    pub(crate) sandbox: Arc<RunSandbox>,
}

/// Why a task that used up its attempts is blocked, in every mode: the count and the last
/// failure's first line.
pub(crate) fn gave_up(attempts: u32, last_failure: Option<&str>) -> String {
    format!(
        "gave up after {attempts} attempts: {}",
        last_failure.map_or_else(|| "no detail".into(), crate::output::first_line)
    )
}

impl Context {
    /// An emitter to the context's observers and `extra`, offering each event to the
    /// `[[hooks]]`: the one every run of every mode sends its events through.
    pub(crate) fn emitter(&self, extra: &[Arc<dyn Observer>]) -> Emitter {
        let observers: Vec<Arc<dyn Observer>> =
            self.observers.iter().chain(extra).cloned().collect();
        Emitter::new(&observers)
            .with_hooks(self.hooks.clone())
            .with_sandbox(self.sandbox.label())
            .with_stop(self.stop.clone())
    }

    /// Starts a run of any mode: takes the workspace's lock (refused while another run holds
    /// it) and kills what an earlier, killed run left running, saying so on `emitter`, as
    /// it says that a limit may not act on the run's agent. Hold the returned lock for the
    /// whole run.
    ///
    /// # Errors
    ///
    /// [`Error::Busy`] while another ralph runs on the workspace; [`Error::Io`] when
    /// `.ralph/` cannot be created.
    pub(crate) async fn begin(&self, emitter: &Emitter) -> Result<RunLock, Error> {
        let lock = self
            .begin_starting(emitter, self.starts_processes())
            .await?;
        // A thread runs agents of its own, and begins with `begin_starting`.
        if let Some(message) = self.unmetered_note() {
            emitter.emit(&Event::Warning { message });
        }
        Ok(lock)
    }

    /// [`begin`](Self::begin), saying that the run goes unconfined when `processes`: when
    /// it starts any (an agent or a gate that is no code of ralph's own process).
    pub(crate) async fn begin_starting(
        &self,
        emitter: &Emitter,
        processes: bool,
    ) -> Result<RunLock, Error> {
        let lock = RunLock::take(&self.workspace).await?;
        self.sandbox.watch();
        if let Some(message) = self.sandbox.warning().filter(|_| processes) {
            emitter.emit(&Event::Warning { message });
        }
        if let Some(message) = lock.swept_warning() {
            emitter.emit(&Event::Warning { message });
        }
        Ok(lock)
    }

    /// When a run-wide limit is set and the run's agent (or one of its chain) may report no
    /// usage: that the limit may not act on it, and how the agent can report. A limit that
    /// silently never stops a command agent is what a person must hear before the run.
    pub(crate) fn unmetered_note(&self) -> Option<String> {
        let config = &self.config;
        let limits: Vec<String> = [
            config
                .max_cost_usd
                .map(|max| format!("max_cost_usd = {max}")),
            config.max_tokens.map(|max| format!("max_tokens = {max}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        let agents = self.agent.unmetered();
        if limits.is_empty() || agents.is_empty() {
            return None;
        }
        let runs = match agents.len() {
            1 => "runs a command, which reports",
            _ => "run commands, which report",
        };
        Some(format!(
            "{} may not act: agent {} {runs} no tokens or cost unless it writes them to the \
             file ${} names (see \"Any other CLI\" in docs/agent-clis.md)",
            limits.join(" and "),
            agents.join(", "),
            crate::agent::USAGE_FILE_VAR,
        ))
    }

    /// The dry run's budget line: the limits and what `scope` spent against them, and
    /// whether they can act on the agent ([`unmetered_note`](Self::unmetered_note));
    /// `None` without limits.
    ///
    /// # Errors
    ///
    /// As [`budget`](Self::budget).
    pub(crate) fn budget_line(&self, scope: &str) -> Result<Option<String>, Error> {
        let line = self.budget(scope)?.describe();
        Ok(line.map(|line| match self.unmetered_note() {
            Some(note) => format!("{line}; {note}"),
            None => line,
        }))
    }

    /// Whether the run's agent or a gate starts processes (is no code in ralph's own
    /// process): with an in-process agent and no gate, there is nothing to confine.
    fn starts_processes(&self) -> bool {
        !self.agent.in_process() || self.gates.iter().any(|gate| !gate.in_process())
    }

    /// What every dry run says of the sandbox: how far the run is confined, and which of
    /// its agent and gates run in ralph's own process, where nothing is confined.
    pub(crate) fn sandbox_line(&self) -> String {
        let mut line = self.sandbox.describe();
        let inside: Vec<String> = std::iter::once(&self.agent)
            .filter(|agent| agent.in_process())
            .map(|agent| format!("agent {}", agent.name()))
            .chain(
                self.gates
                    .iter()
                    .filter(|gate| gate.in_process())
                    .map(|gate| format!("gate {}", gate.name())),
            )
            .collect();
        if !inside.is_empty() {
            line.push_str(&format!(
                "; in-process, so never confined: {}",
                inside.join(", ")
            ));
        }
        line
    }

    /// Git in `dir`, its hook-running commands (commits, checkouts, merges) in the run's
    /// sandbox: every git handle a pipeline commits or checks out with comes from here.
    pub(crate) fn git(&self, dir: &std::path::Path) -> crate::git::Git {
        crate::git::Git::new(dir).hooks_in(self.sandbox.git(dir))
    }

    /// Says on `emitter` when no gate is required: every task is then done on the agent's
    /// word and the verifier's, which a run should never do in silence (`RALPH_GATES='[]'`
    /// turns every gate off).
    pub(crate) fn warn_without_gates(&self, emitter: &Emitter) {
        if self.gates.iter().any(|g| g.required()) {
            return;
        }
        // Named where the list came from: the environment wins over ralph.toml, and the
        // program over both, so the file is not always the place to look.
        let fix = self.gates_origin.fix(!self.config.gates.is_empty());
        emitter.emit(&Event::Warning {
            message: format!(
                "no required gate: each task is done on the agent's word and the verifier's \
                 ({fix})"
            ),
        });
    }

    /// Loads the board; a torn tail the store had to drop is reported on `emitter`.
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when it cannot be loaded.
    pub(crate) async fn load_board(&self, emitter: &Emitter) -> Result<Board, Error> {
        let board = self.store.load().await?;
        if let Some(note) = self.store.recovered() {
            emitter.emit(&Event::StateRepaired { note });
        }
        Ok(board)
    }

    /// The limits of this run's agent calls.
    pub(crate) fn limits(&self) -> CallLimits {
        let config = &self.config;
        CallLimits {
            agent_timeout: config.agent_timeout,
            grace: config.grace,
            context: config.context,
            transient_retries: config.transient_retries,
            transient_backoff: config.transient_backoff,
            unreachable_after: config.unreachable_after,
        }
    }

    /// A caller of the context's agent that rides out rate limits and transient failures.
    pub(crate) fn caller(&self, emitter: Emitter) -> Caller {
        Caller::new(
            self.agent.clone(),
            &self.workspace,
            self.limits(),
            self.stop.clone(),
            emitter,
            self.sandbox.clone(),
        )
        .keeping_out(self.own_paths())
    }

    /// ralph's own paths in the workspace, relative to it: its state folder, its logs, the
    /// board's file, and build mode's `implementation.json` and history.
    pub(crate) fn own_paths(&self) -> Vec<String> {
        let mut own = vec![
            workspace::STATE_DIR.to_owned(),
            self.config.log_dir.to_string_lossy().into_owned(),
            self.config
                .planning
                .implementation
                .to_string_lossy()
                .into_owned(),
            self.config.planning.progress.to_string_lossy().into_owned(),
        ];
        if let Some(store) = self.store.location()
            && let Ok(rel) = std::path::Path::new(&store).strip_prefix(&self.workspace)
        {
            own.push(rel.to_string_lossy().into_owned());
        }
        own
    }

    /// A caller whose runs count against the run-wide limits over `scope` (`construct`,
    /// `build`, `plan`, `thread/<id>`: see [`spend`]), each run's spend recorded in the
    /// workspace's ledger.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] or [`Error::Store`] when the ledger cannot be read.
    pub(crate) fn spending_caller(&self, emitter: Emitter, scope: &str) -> Result<Caller, Error> {
        Ok(self.caller(emitter).spending(self.budget(scope)?))
    }

    /// The run-wide limits over `scope`'s ledger.
    ///
    /// # Errors
    ///
    /// As [`spending_caller`](Self::spending_caller).
    pub(crate) fn budget(&self, scope: &str) -> Result<spend::Budget, Error> {
        let ledger = spend::Ledger::open(&self.workspace, scope)?;
        Ok(
            spend::Budget::new(ledger, self.config.max_cost_usd, self.config.max_tokens)
                .with_prices(spend::Prices::new(&self.config.prices)),
        )
    }

    /// How this run's gates check `attempt` of `task` (named `name`) until `deadline`.
    pub(crate) fn gate_run<'a>(
        &'a self,
        emitter: &'a Emitter,
        deadline: Instant,
        (task, name, attempt): (&'a TaskId, &'a str, u32),
    ) -> GateRun<'a> {
        GateRun {
            workspace: &self.workspace,
            sandbox: &self.sandbox,
            stop: &self.stop,
            grace: self.config.grace,
            deadline,
            emitter,
            task,
            task_name: name,
            attempt,
            home: None,
        }
    }
}
