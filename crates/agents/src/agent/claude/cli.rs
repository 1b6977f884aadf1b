//! [`ClaudeCli`]: the Claude Code CLI as an [`Agent`].

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::agent::cli_files::Cli;
use crate::agent::{
    Agent, AgentError, AgentEvent, AgentExit, AgentRequest, AgentRun, Claim, FailureKind, Usage,
};
use crate::config::{Config, ConfigError};
use crate::context::ContextAction;
use crate::process::ProcessSpec;

use super::command::{self, Invocation, Program};
use super::segment::{self, Halt, Inputs, Pressure, Segment, SegmentClocks};
use super::session;
use super::stream::{ContextWindows, DEFAULT_MAX_LINE, RunOutcome, StreamOptions};
use crate::config::{ClaudeConfig, PermissionMode};

/// Compactions one run may go through before it is stopped at the context limit.
const MAX_COMPACTIONS: u32 = 2;

/// The prompt that resumes the task after a compaction.
const CONTINUE_PROMPT: &str = "Your context was compacted. Continue the task from where you \
     stopped, and end your final answer exactly as the original instructions say.";

/// Runs the Claude Code CLI (`claude -p --output-format stream-json --verbose`), one fresh
/// process per agent run, and reads its stream as it comes.
///
/// * **Invocation.** The prompt goes on stdin, which is then closed (argv is limited to
///   128 KiB per argument). Flags come from `[claude]` in `ralph.toml` (below) and the
///   builder methods, which win over it.
///   Roles that must not write (everything but BUILD) run in
///   [`read_only_mode`](Self::read_only_mode), `plan` by default; structured roles
///   pass their schema with `--json-schema` and take the CLI's `structured_output`, never
///   prose. As root, bypassing permissions sets `IS_SANDBOX=1`, without which the CLI
///   refuses to start.
/// * **Outcome.** From the `result` line alone : never from
///   the exit code or `subtype`. A CLI that exits without writing anything (a bad flag, a
///   missing runtime) is [`FailureKind::Fatal`] with its stderr: every run would fail alike.
/// * **Clocks.** The request's timeout bounds the whole run; [`idle_timeout`](Self::idle_timeout)
///   bounds a silence on stdout (the CLI waits forever on a stalled API stream); after the
///   `result` line the process gets [`result_grace`](Self::result_grace) to exit. Stopping is
///   SIGTERM (the CLI then kills its tool processes), the grace, SIGKILL.
/// * **Cleanup.** The CLI's Bash tool runs commands in sessions of their own, and background
///   jobs outlive even a clean exit. Every process the CLI starts inherits ralph's run cookie
///   so when the run ends, however it ends, every one of them
///   is found and killed.
/// * **Context.** The context in use after each API call is checked against the request's
///   tiers: *warn* emits an event; *compact* interrupts the CLI (SIGINT keeps the session),
///   resumes the session with the CLI's `/compact` command, checks that the context fell to
///   0.80 or below, and resumes again to continue the task; *kill*, or a compaction that did
///   not help, ends the run with [`AgentExit::ContextLimit`] and its log, so the engine
///   decomposes the task. Compaction resumes the session, so those runs keep their session
///   file even when [`session_persistence`](Self::session_persistence) is off.
/// * **Questions.** A run of a role that may ask a person ([`Role::may_ask`](crate::agent::Role::may_ask)) keeps its
///   session when it ends with a question, and a request whose
///   [`resume`](AgentRequest::resume) names that session, the answer's, continues it
///   (`--resume`) while the CLI still has it; the session is removed once that run ends.
///
/// Every key of `[claude]`, each the builder method of the same name (a key is also set
/// from the environment: `RALPH_CLAUDE__MODEL=sonnet`):
///
/// ```toml
/// [claude]
/// bin = "/opt/claude/bin/claude"   # else $RALPH_CLAUDE_BIN, else `claude` on PATH
/// model = "sonnet"
/// max_turns = 40
/// max_budget_usd = 5.0
/// permission_mode = "bypassPermissions"   # of BUILD runs
/// read_only_mode = "plan"                 # of the roles that must not write
/// allowed_tools = ["Bash(cargo *)", "Edit", "Read"]
/// disallowed_tools = ["WebFetch"]     # AskUserQuestion is always added (see below)
/// append_system_prompt = "Never push to a remote."
/// bare = true
/// session_persistence = false
/// max_retries = 3
/// idle_timeout = "3m"
/// result_grace = "2s"
/// args = ["--effort", "high"]
///
/// [claude.env]
/// API_TIMEOUT_MS = "60000"
///
/// [claude.context_windows]
/// "my-gateway-model" = 128000
/// ```
///
/// ```no_run
/// use std::time::Duration;
/// use ralph::agent::claude::ClaudeCli;
/// use ralph::Ralph;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let claude = ClaudeCli::from_workspace("my-project")?   // [claude] of ralph.toml
///     .model("sonnet")
///     .max_turns(40)
///     .idle_timeout(Duration::from_secs(120));
/// let ralph = Ralph::builder().workspace("my-project").agent(claude).build()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct ClaudeCli {
    config: ClaudeConfig,
    grace: Duration,
    /// The settings set in code (by the builder methods; all of them for
    /// [`from_config`](Self::from_config)): the workspace's `[claude]` does not replace
    /// them (see [`Agent::configure`]).
    explicit: SetInCode,
}

/// Which of a [`ClaudeCli`]'s settings were set in code.
#[derive(Clone, Debug)]
enum SetInCode {
    /// Every one ([`ClaudeCli::from_config`]).
    All,
    /// These, by their name in `[claude]`.
    These(BTreeSet<&'static str>),
}

impl SetInCode {
    fn insert(&mut self, name: &'static str) {
        if let SetInCode::These(names) = self {
            names.insert(name);
        }
    }

    fn contains(&self, name: &str) -> bool {
        match self {
            SetInCode::All => true,
            SetInCode::These(names) => names.contains(name),
        }
    }
}

impl Default for ClaudeCli {
    fn default() -> Self {
        Self::new()
    }
}

impl ClaudeCli {
    /// The CLI with the default settings and a 5-second grace; a `Ralph` it is given to
    /// gives it the workspace's `[claude]` and `grace`, except the settings made here.
    pub fn new() -> Self {
        Self::configured(ClaudeConfig::default())
    }

    /// The CLI as `[claude]` and `grace` of `config` say. Every setting counts as set in
    /// code: a `Ralph` it is given to keeps them all (the workspace's `[claude]` and
    /// `grace` replace none of them).
    pub fn from_config(config: &Config) -> Self {
        ClaudeCli {
            grace: config.grace,
            explicit: SetInCode::All,
            ..Self::configured(config.claude.clone())
        }
    }

    fn configured(config: ClaudeConfig) -> Self {
        ClaudeCli {
            config,
            grace: Config::default().grace,
            explicit: SetInCode::These(BTreeSet::new()),
        }
    }

    /// The CLI as the workspace's configuration says: `[claude]` and `grace` of its
    /// `ralph.toml`, with `RALPH_*` environment overrides.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the bad key and where it was set.
    pub fn from_workspace(workspace: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let config = Config::load(workspace.as_ref())?;
        let mut cli = Self::configured(config.claude);
        cli.grace = config.grace;
        Ok(cli)
    }

    /// How long a stopped CLI gets between SIGTERM and SIGKILL.
    pub fn grace_period(&self) -> Duration {
        self.grace
    }

    /// The settings, as `[claude]` holds them (ralph's own tests look).
    #[doc(hidden)]
    pub fn config(&self) -> &ClaudeConfig {
        &self.config
    }

    /// Sets the `claude` binary.
    #[must_use]
    pub fn bin(mut self, bin: impl Into<PathBuf>) -> Self {
        self.config.bin = Some(bin.into());
        self.explicit.insert("bin");
        self
    }

    /// Sets `--model`.
    #[must_use]
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.config.model = Some(model.into());
        self.explicit.insert("model");
        self
    }

    /// Sets `--max-turns`.
    #[must_use]
    pub fn max_turns(mut self, turns: u32) -> Self {
        self.config.max_turns = Some(turns);
        self.explicit.insert("max_turns");
        self
    }

    /// Sets `--max-budget-usd`.
    #[must_use]
    pub fn max_budget_usd(mut self, dollars: f64) -> Self {
        self.config.max_budget_usd = Some(dollars);
        self.explicit.insert("max_budget_usd");
        self
    }

    /// Sets the permission mode of BUILD runs.
    #[must_use]
    pub fn permission_mode(mut self, mode: PermissionMode) -> Self {
        self.config.permission_mode = mode;
        self.explicit.insert("permission_mode");
        self
    }

    /// Sets the permission mode of the roles that must not write.
    #[must_use]
    pub fn read_only_mode(mut self, mode: PermissionMode) -> Self {
        self.config.read_only_mode = mode;
        self.explicit.insert("read_only_mode");
        self
    }

    /// Adds an `--allowedTools` entry (`"Bash(cargo *)"`).
    #[must_use]
    pub fn allowed_tool(mut self, tool: impl Into<String>) -> Self {
        self.config.allowed_tools.push(tool.into());
        self.explicit.insert("allowed_tools");
        self
    }

    /// Adds a `--disallowedTools` entry. The CLI's own `AskUserQuestion` is always
    /// disallowed: headless, nobody answers it, and it resolves with empty answers. An agent
    /// asks a person by ending its answer with `<TASK_QUESTION question="…">`, which waits
    /// for `ralph answer`.
    #[must_use]
    pub fn disallowed_tool(mut self, tool: impl Into<String>) -> Self {
        self.config.disallowed_tools.push(tool.into());
        self.explicit.insert("disallowed_tools");
        self
    }

    /// Sets `--append-system-prompt`.
    #[must_use]
    pub fn append_system_prompt(mut self, text: impl Into<String>) -> Self {
        self.config.append_system_prompt = Some(text.into());
        self.explicit.insert("append_system_prompt");
        self
    }

    /// Sets `--bare` (default on).
    #[must_use]
    pub fn bare(mut self, bare: bool) -> Self {
        self.config.bare = bare;
        self.explicit.insert("bare");
        self
    }

    /// Keeps the CLI's session files (default off: `--no-session-persistence`).
    #[must_use]
    pub fn session_persistence(mut self, keep: bool) -> Self {
        self.config.session_persistence = keep;
        self.explicit.insert("session_persistence");
        self
    }

    /// Sets `CLAUDE_CODE_MAX_RETRIES` (default 3).
    #[must_use]
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.config.max_retries = retries;
        self.explicit.insert("max_retries");
        self
    }

    /// Sets the longest silence on stdout (default 3 minutes).
    #[must_use]
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.config.idle_timeout = idle;
        self.explicit.insert("idle_timeout");
        self
    }

    /// Sets how long the CLI may run on after its `result` line (default 2 seconds).
    #[must_use]
    pub fn result_grace(mut self, grace: Duration) -> Self {
        self.config.result_grace = grace;
        self.explicit.insert("result_grace");
        self
    }

    /// Sets the time between SIGTERM and SIGKILL (default 5 seconds).
    #[must_use]
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self.explicit.insert("grace");
        self
    }

    /// Appends extra arguments.
    #[must_use]
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config.args.extend(args.into_iter().map(Into::into));
        self.explicit.insert("args");
        self
    }

    /// Sets an environment variable of the CLI.
    #[must_use]
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.config.env.insert(key.into(), value.into());
        self.explicit.insert("env");
        self
    }

    /// Sets the context window of a model (and of the names it is a prefix of).
    #[must_use]
    pub fn context_window(mut self, model: impl Into<String>, tokens: u64) -> Self {
        self.config.context_windows.insert(model.into(), tokens);
        self.explicit.insert("context_windows");
        self
    }

    /// The arguments of the first process of a run of `request` (for logs and tests).
    pub fn command_line(&self, request: &AgentRequest) -> Vec<String> {
        let schema = request.schema.as_ref().map(schema_arg);
        command::args(
            &self.config,
            self.invocation(request, schema.as_deref(), None),
        )
    }

    fn invocation<'a>(
        &self,
        request: &'a AgentRequest,
        schema: Option<&'a str>,
        resume: Option<&'a str>,
    ) -> Invocation<'a> {
        Invocation {
            role: request.role,
            schema,
            resume,
            // A session that may need compacting, or that may ask a person a question,
            // must stay resumable.
            persist: self.config.session_persistence
                || request.context.compact < 1.0
                || request.role.may_ask(),
            budget_usd: request.budget_usd,
            stable: split(request).0,
        }
    }

    fn windows(&self) -> ContextWindows {
        self.config
            .context_windows
            .iter()
            .fold(ContextWindows::new(), |w, (model, tokens)| {
                w.with(model.clone(), *tokens)
            })
    }

    fn spec(
        &self,
        request: &AgentRequest,
        invocation: Invocation<'_>,
        prompt: &str,
    ) -> ProcessSpec {
        let program = Program::resolve(self.config.bin.as_ref());
        let confined = request.sandbox.confines() || request.sandbox.is_machine();
        let sandbox = Cli::Claude
            .sandbox(request.sandbox.clone(), |k| self.config.env.get(k).cloned())
            .read(&program.path);
        let spec = ProcessSpec::new(&program.path)
            .sandbox(sandbox)
            .args(command::args(&self.config, invocation))
            .envs(command::env(
                &self.config,
                request.role,
                confined && command::is_root(),
            ))
            .owner(crate::process::owner_of(&request.workspace))
            .cwd(&request.workspace)
            .stdin(prompt.as_bytes().to_vec())
            .stop(request.stop.clone())
            .grace(self.grace);
        match &request.log_path {
            Some(log) => spec.log_path(log),
            None => spec,
        }
    }

    async fn segment(
        &self,
        request: &AgentRequest,
        invocation: Invocation<'_>,
        prompt: &str,
        deadline: Option<Instant>,
        pressure: Option<&mut Pressure>,
    ) -> Result<Segment, AgentError> {
        let watch = Inputs {
            clocks: SegmentClocks {
                deadline,
                idle: self.config.idle_timeout,
                result_grace: self.config.result_grace,
                unreachable_after: request.unreachable_after,
            },
            events: &request.events,
            pressure,
            options: StreamOptions::default().windows(self.windows()),
            max_line: DEFAULT_MAX_LINE,
        };
        let spec = self.spec(request, invocation, prompt);
        segment::run(&spec, watch)
            .await
            .map_err(|e| self.explain(e))
    }

    /// Adds where the binary came from to a spawn error.
    fn explain(&self, error: AgentError) -> AgentError {
        match error {
            AgentError::Spawn { program, source } => {
                let from = Program::resolve(self.config.bin.as_ref()).source;
                AgentError::Spawn {
                    program: format!(
                        "{program} (from {from}; set `claude.bin` in ralph.toml or \
                         $RALPH_CLAUDE_BIN, or install it: npm install -g @anthropic-ai/claude-code)"
                    ),
                    source,
                }
            }
            other => other,
        }
    }
}

#[async_trait]
impl Agent for ClaudeCli {
    /// The CLI runs in its own process, in the request's sandbox.
    fn in_process(&self) -> bool {
        false
    }

    fn name(&self) -> &str {
        "claude"
    }

    /// Resolves the `claude` binary (`claude.bin`, `$RALPH_CLAUDE_BIN`, or `PATH`) without
    /// running it.
    async fn check(&self) -> Result<(), AgentError> {
        let program = Program::resolve(self.config.bin.as_ref());
        if find_program(&program.path).is_some() {
            return Ok(());
        }
        Err(AgentError::NotFound {
            agent: self.name().to_owned(),
            program: program.path.to_string_lossy().into_owned(),
            from: program.source.to_owned(),
            help: "install the Claude Code CLI (npm install -g @anthropic-ai/claude-code), \
                   or name it in ralph.toml ([claude] bin) or RALPH_CLAUDE_BIN",
        })
    }

    /// Takes the workspace's `[claude]` (from `ralph.toml`, `RALPH_CLAUDE__*` and
    /// `RalphBuilder::config("claude.…")`) and `grace`, except the settings set in code,
    /// which win.
    fn configure(&mut self, config: &Config) {
        if !self.explicit.contains("grace") {
            self.grace = config.grace;
        }
        let SetInCode::These(mine) = &self.explicit else {
            return;
        };
        let (Ok(serde_json::Value::Object(mut merged)), Ok(serde_json::Value::Object(set))) = (
            serde_json::to_value(&config.claude),
            serde_json::to_value(&self.config),
        ) else {
            return;
        };
        for name in mine {
            match set.get(*name) {
                Some(value) => merged.insert((*name).to_owned(), value.clone()),
                None => merged.remove(*name),
            };
        }
        if let Ok(claude) = serde_json::from_value(serde_json::Value::Object(merged)) {
            self.config = claude;
        }
    }

    async fn run(&self, request: AgentRequest) -> Result<AgentRun, AgentError> {
        let run = self.run_to_end(&request).await?;
        // A run that asked a person keeps its session: the answer's run resumes it.
        let asked = request.role.may_ask() && matches!(run.claim(), Claim::Question(_));
        if self.config.session_persistence || asked {
            return Ok(run);
        }
        let sessions = run.session_id.iter().chain(&request.resume);
        for id in sessions {
            if let Err(e) = session::forget(&self.config, id) {
                request.events.emit(AgentEvent::Note {
                    message: format!("could not remove the CLI's session {id}: {e}"),
                });
            }
        }
        Ok(run)
    }
}

impl ClaudeCli {
    /// Runs the request's processes: the first, and after each compaction, the compacting one
    /// and the continuing one.
    async fn run_to_end(&self, request: &AgentRequest) -> Result<AgentRun, AgentError> {
        let started = Instant::now();
        let deadline = request.timeout.and_then(|t| started.checked_add(t));
        let schema = request.schema.as_ref().map(schema_arg);
        let mut pressure = Pressure::new(request.context);
        let mut totals = RunTotals::default();
        let mut prompt = split(request).1.to_owned();
        // The session that asked the question this run brings the answer to, while the
        // CLI still has it; else a fresh one, the prompt holding the question and answer.
        let mut session = request
            .resume
            .clone()
            .filter(|id| session::exists(&self.config, id));
        let mut compactions = 0;
        loop {
            let invocation = self.invocation(request, schema.as_deref(), session.as_deref());
            let segment = self
                .segment(request, invocation, &prompt, deadline, Some(&mut pressure))
                .await?;
            totals.add(&segment);
            let compact = match segment.cut {
                Halt::Compact(ratio) if !segment.summary.outcome.is_completed() => ratio,
                _ => return Ok(totals.finish(&segment, request, started)),
            };
            let Some(id) = segment.summary.session_id.clone() else {
                return Ok(totals.context_limit(&segment, request, started, "no session id"));
            };
            if compactions == MAX_COMPACTIONS {
                let why = format!("still at {compact:.2} after {compactions} compactions");
                return Ok(totals.context_limit(&segment, request, started, &why));
            }
            compactions += 1;
            // The CLI's `/compact`, with ralph's policy of what to keep (`compact.rs`).
            let compact_request = super::compact::request(&request.workspace).await;
            let compacted = self
                .segment(
                    request,
                    self.invocation(request, None, Some(&id)),
                    &compact_request,
                    deadline,
                    None,
                )
                .await?;
            totals.add(&compacted);
            if let Some(run) = self.check_compaction(&compacted, &mut pressure, compact, request) {
                return Ok(totals.finish_with(run, &compacted, request, started));
            }
            session = compacted.summary.session_id.clone().or(Some(id));
            prompt = CONTINUE_PROMPT.to_owned();
        }
    }

    /// `None` when the compaction worked; else how the run ends.
    fn check_compaction(
        &self,
        compacted: &Segment,
        pressure: &mut Pressure,
        before: f64,
        request: &AgentRequest,
    ) -> Option<AgentExit> {
        if let Some(exit) = cut_exit(compacted) {
            return Some(exit);
        }
        let usage = &compacted.summary.usage;
        let window = usage
            .context_window
            .unwrap_or(ContextWindows::DEFAULT_WINDOW);
        let after = if compacted.summary.compactions > 0 {
            usage.context_tokens
        } else {
            // No boundary: nothing was compacted, the context is as large as before.
            (before * window as f64) as u64
        };
        let ratio = after as f64 / window.max(1) as f64;
        request.events.emit(AgentEvent::Note {
            message: format!("compaction took the context from {before:.2} to {ratio:.2}"),
        });
        match pressure.after_compaction(after, window) {
            ContextAction::Continue => None,
            _ => Some(AgentExit::ContextLimit),
        }
    }
}

/// The schema as the CLI takes it. Its validator knows draft-07 only and refuses a schema that
/// names another draft (schemars writes `"$schema": ".../draft/2020-12/schema"`), so the
/// `$schema` key is left out; the rest is the same in both drafts for ralph's answers.
fn schema_arg(schema: &serde_json::Value) -> String {
    match schema {
        serde_json::Value::Object(map) if map.contains_key("$schema") => {
            let mut map = map.clone();
            map.remove("$schema");
            serde_json::Value::Object(map).to_string()
        }
        other => other.to_string(),
    }
}

/// The exit a segment's cut forces, whatever the stream says.
fn cut_exit(segment: &Segment) -> Option<AgentExit> {
    match segment.cut {
        Halt::Stopped => Some(AgentExit::Stopped),
        Halt::Deadline => Some(AgentExit::TimedOut),
        Halt::Idle(after) => Some(AgentExit::Silent { after }),
        Halt::ContextLimit(_) => Some(AgentExit::ContextLimit),
        Halt::Unreachable => Some(crate::agent::reach::unreachable(
            segment.unreachable.clone().unwrap_or_default(),
        )),
        Halt::None | Halt::Lingered | Halt::Compact(_) => None,
    }
}

/// What the stream says, with the CLI's exit and stderr where the stream is silent.
fn stream_exit(segment: &Segment) -> AgentExit {
    let summary = &segment.summary;
    if summary.outcome != RunOutcome::NoResult {
        return summary.agent_exit();
    }
    let code = segment.exit.and_then(|e| e.code());
    let exit = match (segment.exit, code) {
        (_, Some(code)) => format!("exited with code {code}"),
        (Some(exit), None) => format!("was killed by signal {}", exit.signal().unwrap_or(0)),
        (None, None) => "did not exit".to_owned(),
    };
    let stderr = if segment.stderr.is_empty() {
        String::new()
    } else {
        format!(": {}", segment.stderr)
    };
    if summary.lines == 0 && code.is_some_and(|c| c != 0) && segment.cut == Halt::None {
        // Nothing on stdout, not even the init line: a usage error, a missing runtime, a
        // refusal to run as root. Every run would end the same way.
        return AgentExit::Failed {
            reason: format!("the claude CLI {exit} before starting{stderr}"),
            kind: FailureKind::Fatal,
        };
    }
    match summary.agent_exit() {
        AgentExit::Failed { reason, kind } => AgentExit::Failed {
            reason: format!("{reason}; the CLI {exit}{stderr}"),
            kind,
        },
        other => other,
    }
}

/// Sums over the processes of one run.
#[derive(Debug, Default)]
struct RunTotals {
    usage: Usage,
    cost_usd: Option<f64>,
    turns: Option<u32>,
    leaked: usize,
    oversized_lines: u64,
}

impl RunTotals {
    fn add(&mut self, segment: &Segment) {
        let summary = &segment.summary;
        let u = &summary.usage;
        self.usage.input_tokens += u.input_tokens;
        self.usage.output_tokens += u.output_tokens;
        self.usage.cache_read_tokens += u.cache_read_tokens;
        self.usage.cache_creation_tokens += u.cache_creation_tokens;
        self.usage.context_tokens = u.context_tokens;
        self.usage.context_window = u.context_window.or(self.usage.context_window);
        // A resumed session reports the cost of the whole session so far: the latest wins.
        self.cost_usd = summary.cost_usd.or(self.cost_usd);
        if let Some(turns) = summary.num_turns {
            self.turns = Some(self.turns.unwrap_or(0).saturating_add(turns));
        }
        self.leaked = self.leaked.saturating_add(segment.leaked);
        self.oversized_lines = self.oversized_lines.saturating_add(summary.oversized_lines);
    }

    fn finish(self, segment: &Segment, request: &AgentRequest, started: Instant) -> AgentRun {
        let exit = cut_exit(segment)
            .filter(|_| !segment.summary.outcome.is_completed())
            .unwrap_or_else(|| stream_exit(segment));
        self.finish_with(exit, segment, request, started)
    }

    fn context_limit(
        self,
        segment: &Segment,
        request: &AgentRequest,
        started: Instant,
        why: &str,
    ) -> AgentRun {
        request.events.emit(AgentEvent::Note {
            message: format!("context limit: {why}"),
        });
        self.finish_with(AgentExit::ContextLimit, segment, request, started)
    }

    fn finish_with(
        self,
        exit: AgentExit,
        segment: &Segment,
        request: &AgentRequest,
        started: Instant,
    ) -> AgentRun {
        let summary = &segment.summary;
        let completed = exit == AgentExit::Completed;
        let mut run = AgentRun::new(exit);
        if completed {
            run.final_text = summary.final_text.clone().unwrap_or_default();
            run.structured = summary.structured_output.clone();
        }
        run.usage = self.usage;
        run.session_id = summary.session_id.clone();
        run.log_path = request.log_path.clone();
        run.duration = started.elapsed();
        run.cost_usd = self.cost_usd;
        run.turns = self.turns;
        run.leaked = self.leaked;
        run.oversized_lines = self.oversized_lines;
        run.exit_code = segment.exit.and_then(|e| e.code());
        run.exit_signal = segment.exit.and_then(|e| e.signal());
        run
    }
}

/// The executable file `program` names: a path as given, a bare name searched on `PATH`.
fn find_program(program: &std::ffi::OsStr) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let executable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let path = std::path::Path::new(program);
    if path.components().count() > 1 {
        return executable(path).then(|| path.to_path_buf());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|p| executable(p))
}

/// The request's prompt as the CLI gets it: its stable part for the system prompt, when it
/// has one and something follows it, and the rest for stdin.
fn split(request: &AgentRequest) -> (Option<&str>, &str) {
    let at = request.stable_prefix;
    match request.prompt.get(..at).zip(request.prompt.get(at..)) {
        Some((stable, rest)) if at > 0 && !rest.trim().is_empty() => (Some(stable), rest),
        _ => (None, &request.prompt),
    }
}
