//! The `Agent` seam: run one prompt in a fresh session and report what happened.
//!
//! An agent returns raw facts ([`AgentRun`]): the final answer's text, an optional structured
//! answer, usage, how it ended, where its log is. Whether a task is *done* is decided by the
//! engine from those facts (see [`Claim`]), never by the agent.

mod claim;
mod fallback;
mod layer;

pub use claim::Claim;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::config::ContextThresholds;
use crate::model::KillReason;
use crate::process::StopToken;

pub use fallback::{AgentChoice, Fallback};
pub use layer::AgentLayer;
use layer::Layered;

/// What an agent run is for. Prompts, schemas, permissions and fake scripts are chosen by role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Role {
    /// Turn an issue into tasks (structured answer).
    Investigate,
    /// Implement one task (answer ends with a marker).
    Build,
    /// Judge one done task (structured answer).
    Verify,
    /// Compare the work with the spec and name what is missing (structured answer).
    GapAnalysis,
    /// Split a killed task into 2–5 subtasks (structured answer).
    Decompose,
    /// Plan mode: break the markdown specs down into specs, tasks and acceptance criteria
    /// for `implementation.json` (structured answer). Read from scripts as `breakdown`, or
    /// `plan` as before.
    #[serde(alias = "plan")]
    Breakdown,
    /// Build mode's planner: write one spec's implementation plan before it is implemented;
    /// read-only; the final answer is the plan, ending with the magic phrase.
    Planner,
    /// Review a thread's spec before it is finalized (seed 001's Assessing): read-only,
    /// structured answer.
    Assess,
    /// Talk with the person about a thread's spec while it is drafted (seed 001's
    /// Drafting): read-only, structured answer (a reply, and the revised spec when it
    /// changes).
    Draft,
}

impl Role {
    /// Whether this role answers with JSON against a schema.
    pub fn is_structured(self) -> bool {
        !matches!(self, Role::Build | Role::Planner)
    }

    /// Whether this role may end its answer with a question for a person
    /// (`<TASK_QUESTION question="…">`, or a structured role's `question` field): the roles
    /// that make the work. A verifier, the gap analysis and the decomposer give a verdict;
    /// a question from one of them is an invalid answer.
    pub fn may_ask(self) -> bool {
        matches!(
            self,
            Role::Build | Role::Investigate | Role::Breakdown | Role::Planner
        )
    }

    /// Whether this role may change files (planner-like roles must not).
    pub fn may_write(self) -> bool {
        matches!(self, Role::Build)
    }

    /// The snake_case name (`gap_analysis`).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Investigate => "investigate",
            Role::Build => "build",
            Role::Verify => "verify",
            Role::GapAnalysis => "gap_analysis",
            Role::Decompose => "decompose",
            Role::Breakdown => "breakdown",
            Role::Planner => "planner",
            Role::Assess => "assess",
            Role::Draft => "draft",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A sink for live [`AgentEvent`]s (usage, text, tool use) while a run is in progress: see
/// [`AgentRequest::on_event`] and [`AgentRequest::emit`].
#[derive(Clone, Default)]
#[doc(hidden)] // ralph's own plumbing, not the API
pub struct AgentEvents(Option<Arc<dyn Fn(AgentEvent) + Send + Sync>>);

impl AgentEvents {
    /// Events go to `f`.
    pub fn new(f: impl Fn(AgentEvent) + Send + Sync + 'static) -> Self {
        AgentEvents(Some(Arc::new(f)))
    }

    /// Events are dropped.
    pub fn none() -> Self {
        AgentEvents(None)
    }

    /// Reports one event.
    pub fn emit(&self, event: AgentEvent) {
        if let Some(f) = &self.0 {
            f(event);
        }
    }
}

impl fmt::Debug for AgentEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "AgentEvents(..)"
        } else {
            "AgentEvents(none)"
        })
    }
}

/// Something an agent reports while it runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum AgentEvent {
    /// The agent's session id is known.
    Session {
        /// The session id.
        id: String,
    },
    /// A piece of assistant text.
    Text {
        /// The text (possibly shortened).
        text: String,
    },
    /// The agent called a tool.
    ToolUse {
        /// The tool's name.
        name: String,
    },
    /// Context usage after an API call.
    Usage {
        /// Tokens in the context window now.
        context_tokens: u64,
        /// The model's window, when known.
        window: Option<u64>,
        /// Input tokens of the run so far (all calls, cache reads and writes included).
        input_tokens: u64,
        /// Output tokens of the run so far.
        output_tokens: u64,
    },
    /// What the run has spent so far, as the agent reported it: its tokens over every
    /// call up to now (cache reads and writes apart, as in [`AgentRun::usage`]) and its
    /// dollars when the agent reports them while it runs (Claude reports them only at the
    /// end). Each report replaces the last. A runtime with a budget appends each one to the
    /// spend ledger as it arrives (a provisional line), so a run cut short by a kill of
    /// ralph still counts what it reported; an [`Agent`] of your own sends it with
    /// [`AgentRequest::emit`] after each call it pays for.
    Spend {
        /// The run's tokens so far (its context fields are not used).
        usage: Usage,
        /// The run's dollars so far, when the agent reports them.
        cost_usd: Option<f64>,
    },
    /// Context pressure crossed a tier (see [`ContextThresholds`]).
    ContextPressure {
        /// Context in use ÷ window.
        ratio: f64,
        /// `warn`, `compact` or `kill`.
        tier: String,
    },
    /// The session was compacted.
    Compacted {
        /// Ratio before.
        before: f64,
        /// Ratio after.
        after: f64,
    },
    /// The agent's API call is being retried.
    ApiRetry {
        /// Attempt number.
        attempt: u32,
        /// Error class, if reported.
        error: Option<String>,
    },
    /// A line the agent printed about its API rather than its work: an error it retries or
    /// waits out, a connection that failed (Codex's `Reconnecting... waiting for network
    /// (…)`, Claude's `api_retry`). The `ralph` command's live line shows the latest.
    Status {
        /// The agent ([`Agent::name`]).
        agent: String,
        /// The line, as the agent printed it (on one line, shortened).
        line: String,
    },
    /// A tool call was refused by permission rules.
    PermissionDenied {
        /// The tool.
        tool: String,
    },
    /// A rate limit rejected the agent's requests until `until` (a `rate_limit_event` with
    /// status `rejected`): wait, do not retry.
    #[non_exhaustive]
    RateLimited {
        /// When the limit resets.
        until: SystemTime,
        /// Which limit (`five_hour`, `seven_day`, …), when reported.
        limit: Option<String>,
    },
    /// A stdout line was longer than the line cap: its long strings were cut, and the run
    /// goes on (the whole line is in the log). Counted in [`AgentRun::oversized_lines`].
    OversizedLine,
    /// After the run, processes it left behind (background jobs, `setsid` children of its
    /// tools) were found alive and killed. Counted in [`AgentRun::leaked`].
    LeftoversKilled {
        /// How many.
        count: usize,
    },
    /// A [`Fallback`] chain gave the run to `agent`, passing over the ones before it.
    AgentChosen {
        /// The agent that takes the run.
        agent: String,
        /// Why the ones before it were passed over (`claude is rate limited until …`).
        reason: String,
    },
    /// Something worth a line in the log.
    Note {
        /// The message.
        message: String,
    },
    /// Something the person must hear about the run, not only its log: a runtime sends it
    /// on as a warning ([`Event::Warning`](crate::Event::Warning)). A [`CommandAgent`](https://docs.rs/ralph-loop/latest/ralph/agent/struct.CommandAgent.html)
    /// says so when the usage file its command wrote cannot be read.
    Warning {
        /// The message.
        message: String,
    },
}

/// One request to an agent: a prompt for a fresh session, plus everything needed to run it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AgentRequest {
    /// What the run is for.
    pub role: Role,
    /// The task or issue the run is about (`t-3`, `i-1`), if any.
    pub subject: Option<String>,
    /// 1-based attempt of this role on this subject (stable across restarts).
    pub attempt: u32,
    /// The prompt.
    pub prompt: String,
    /// How many bytes at the start of [`prompt`](Self::prompt) are its stable part: the
    /// role's instructions and the spec (and its plan), the same in every call of this role
    /// in a run, where the providers' prompt caches can reuse them. What follows (the task,
    /// its failure feedback, a person's answer and guidance) is this call's own. 0 when the
    /// template marks no stable part (a user's template without the marker line).
    pub stable_prefix: usize,
    /// The session of an earlier run of this subject that asked a person a question
    /// ([`AgentRun::session_id`]), to go on with now that the answer came: an agent whose
    /// CLI resumes a session by id ([`ClaudeCli`](https://docs.rs/ralph-loop/latest/ralph/agent/claude/struct.ClaudeCli.html)) continues that session
    /// with this prompt; any other ignores it. The prompt holds the question and the answer
    /// either way.
    pub resume: Option<String>,
    /// The directory the agent works in.
    pub workspace: PathBuf,
    /// JSON Schema the answer must satisfy, for structured roles.
    pub schema: Option<serde_json::Value>,
    /// Where to stream the run's transcript.
    pub log_path: Option<PathBuf>,
    /// Wall-clock limit of this run; past it the agent stops and reports [`AgentExit::TimedOut`].
    pub timeout: Option<Duration>,
    /// Context-pressure tiers.
    pub context: ContextThresholds,
    /// How long an agent may print only connection errors, with no successful API exchange,
    /// before it is stopped as unreachable ([`FailureKind::Unreachable`]). The clock starts
    /// at its first connection error; any answer of the API (a rate-limit wait it announced
    /// included) stops it. `None`: never. Agents that report their connection errors
    /// ([`CodexCli`](https://docs.rs/ralph-loop/latest/ralph/agent/struct.CodexCli.html), [`ClaudeCli`](https://docs.rs/ralph-loop/latest/ralph/agent/claude/struct.ClaudeCli.html), [`GeminiCli`](https://docs.rs/ralph-loop/latest/ralph/agent/struct.GeminiCli.html), [`OpencodeCli`](https://docs.rs/ralph-loop/latest/ralph/agent/struct.OpencodeCli.html)) honour it.
    pub unreachable_after: Option<Duration>,
    /// Dollars this run may spend at most: what is left of the run-wide `max_cost_usd`.
    /// An agent with a spending cap of its own (Claude's `--max-budget-usd`) sets it no
    /// higher. `None`: no run-wide limit.
    pub budget_usd: Option<f64>,
    /// Where live events go ([`on_event`](Self::on_event), [`emit`](Self::emit)).
    pub events: AgentEvents,
    /// Stopped when ralph wants the run stopped (interrupt, stage timeout). The agent then
    /// stops everything it started and returns [`AgentExit::Stopped`].
    pub stop: StopToken,
    /// How the processes of this run are confined: the run's sandbox, which the crate's
    /// process agents start their CLI in; unconfined in a request made with [`new`](Self::new).
    /// An agent that starts processes of its own runs them with [`command`](Self::command).
    #[doc(hidden)]
    pub sandbox: crate::process::Sandbox,
}

impl AgentEvent {
    /// [`AgentEvent::RateLimited`]: a rate limit rejected the run's requests until `until`,
    /// the limit named `limit` when the agent says which.
    pub fn rate_limited(until: SystemTime, limit: Option<String>) -> Self {
        AgentEvent::RateLimited { until, limit }
    }
}

impl AgentRequest {
    /// A request with no subject, attempt 1, no schema, log, timeout, unreachable time or events.
    pub fn new(role: Role, prompt: impl Into<String>, workspace: impl Into<PathBuf>) -> Self {
        AgentRequest {
            role,
            subject: None,
            attempt: 1,
            prompt: prompt.into(),
            stable_prefix: 0,
            resume: None,
            workspace: workspace.into(),
            schema: None,
            log_path: None,
            timeout: None,
            context: ContextThresholds::default(),
            unreachable_after: None,
            budget_usd: None,
            events: AgentEvents::none(),
            stop: StopToken::new(),
            sandbox: crate::process::Sandbox::unconfined(),
        }
    }

    /// Sets how the run's processes are confined (ralph's own tests: a run sets it).
    #[doc(hidden)]
    #[must_use]
    pub fn sandbox(mut self, sandbox: crate::process::Sandbox) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// `command` as this run must start it: inside the run's sandbox (bubblewrap) when the
    /// run is confined, with only the allowed variables of ralph's environment and those
    /// set on `command`; killing the returned process kills everything in the sandbox.
    /// Unconfined, a copy of `command`. The way for an agent written in Rust to run a
    /// program under the run's policy: ralph confines the processes it starts, never code
    /// in its own process (see "Sandbox" in docs/running.md).
    ///
    /// ```
    /// use ralph::{AgentRequest, Role};
    ///
    /// let request = AgentRequest::new(Role::Build, "Write hello.txt", ".");
    /// let mut make = std::process::Command::new("make");
    /// make.arg("hello.txt");
    /// let confined = request.command(&make);
    /// // A request made by hand is unconfined: the same command.
    /// assert_eq!(confined.get_program(), "make");
    /// ```
    // Builds a command for an embedder's adapter to start; ralph starts none here.
    #[allow(clippy::disallowed_types)]
    pub fn command(&self, command: &crate::process::StdCommand) -> crate::process::StdCommand {
        self.sandbox.command(command)
    }

    /// Whether the run's processes are confined by a sandbox.
    pub fn is_confined(&self) -> bool {
        self.sandbox.confines()
    }

    /// Sets the subject.
    #[must_use]
    pub fn subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = Some(subject.into());
        self
    }

    /// Sets the attempt number.
    #[must_use]
    pub fn attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// Sets the schema.
    #[must_use]
    pub fn schema(mut self, schema: serde_json::Value) -> Self {
        self.schema = Some(schema);
        self
    }

    /// Sets the log path.
    #[must_use]
    pub fn log_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.log_path = Some(path.into());
        self
    }

    /// Sets the timeout.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets the context thresholds.
    #[must_use]
    pub fn context(mut self, context: ContextThresholds) -> Self {
        self.context = context;
        self
    }

    /// Sets [`budget_usd`](Self::budget_usd).
    #[must_use]
    pub fn budget_usd(mut self, dollars: f64) -> Self {
        self.budget_usd = Some(dollars);
        self
    }

    /// Sets [`unreachable_after`](Self::unreachable_after).
    #[must_use]
    pub fn unreachable_after(mut self, after: Duration) -> Self {
        self.unreachable_after = Some(after);
        self
    }

    /// Sends the run's live events to `f` as they happen.
    #[must_use]
    pub fn on_event(mut self, f: impl Fn(AgentEvent) + Send + Sync + 'static) -> Self {
        self.events = AgentEvents::new(f);
        self
    }

    /// Reports a live event of the run to whoever asked for them
    /// ([`on_event`](Self::on_event)); nothing happens when nobody did. For agents of your
    /// own: ralph's observers get each one as [`Event::Agent`](crate::Event::Agent).
    pub fn emit(&self, event: AgentEvent) {
        self.events.emit(event);
    }

    /// Sets the stop token.
    #[must_use]
    pub fn stop(mut self, stop: StopToken) -> Self {
        self.stop = stop;
        self
    }
}

/// Token counts of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Usage {
    /// Input tokens over all calls.
    pub input_tokens: u64,
    /// Output tokens over all calls.
    pub output_tokens: u64,
    /// Cache-read input tokens over all calls.
    pub cache_read_tokens: u64,
    /// Cache-creation input tokens over all calls.
    pub cache_creation_tokens: u64,
    /// Tokens in the context window after the latest call.
    pub context_tokens: u64,
    /// The model's context window, when known.
    pub context_window: Option<u64>,
}

impl Usage {
    /// Token counts, with no context figures: input (uncached), output, cache reads and
    /// cache writes.
    pub fn tokens(input: u64, output: u64, cache_read: u64, cache_creation: u64) -> Self {
        Usage {
            input_tokens: input,
            output_tokens: output,
            cache_read_tokens: cache_read,
            cache_creation_tokens: cache_creation,
            ..Usage::default()
        }
    }

    /// Context in use ÷ window, when the window is known.
    pub fn context_ratio(&self) -> Option<f64> {
        self.context_window
            .filter(|w| *w > 0)
            .map(|w| self.context_tokens as f64 / w as f64)
    }
}

/// How a failed run should be treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailureKind {
    /// The attempt failed; it counts against the retry limit.
    Attempt,
    /// A passing fault (overload, 5xx): retry after a backoff.
    Transient,
    /// Nothing will work until a person acts (bad credentials): stop the run.
    Fatal,
    /// The agent could not reach its API: it printed only connection errors for
    /// [`AgentRequest::unreachable_after`] (ralph's runtime also concludes it when runs
    /// that each failed transiently for a connection error have lasted that long in a
    /// row). Not the task's fault: a [`Fallback`] chain passes the run to its next agent,
    /// and a run with no agent left ends with
    /// [`Error::AgentUnreachable`](https://docs.rs/ralph-loop/latest/ralph/enum.Error.html#variant.AgentUnreachable); the attempt is not
    /// counted and nothing is decomposed.
    Unreachable,
    /// The run's own spending cap stopped it (Claude's `--max-budget-usd`, from `[claude]
    /// max_budget_usd`): the attempt ends with the reason, without an ordinary retry, which
    /// would spend the same again.
    RunBudget,
    /// The run-wide budget (`max_cost_usd`, `max_tokens`) is spent: no new agent run
    /// starts, and the run ends "budget exhausted"
    /// ([`Outcome::BudgetExhausted`](crate::Outcome::BudgetExhausted)). Set by ralph's
    /// runtime, never by an agent.
    BudgetExhausted,
}

impl FailureKind {
    /// Whether a failure of this kind ends the whole run, in every mode: no retry can fix it
    /// ([`Fatal`](Self::Fatal)), the agent cannot reach its API
    /// ([`Unreachable`](Self::Unreachable)), or the run-wide budget is spent
    /// ([`BudgetExhausted`](Self::BudgetExhausted)). None of these is the task's fault: the
    /// attempt is not counted, and nothing is decomposed.
    ///
    /// ```
    /// use ralph::agent::FailureKind;
    ///
    /// assert!(FailureKind::Fatal.ends_the_run());
    /// assert!(!FailureKind::Attempt.ends_the_run());
    /// ```
    pub fn ends_the_run(self) -> bool {
        matches!(
            self,
            FailureKind::Fatal | FailureKind::Unreachable | FailureKind::BudgetExhausted
        )
    }
}

/// How an agent run ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "exit", rename_all = "snake_case")]
#[non_exhaustive]
pub enum AgentExit {
    /// The agent finished and gave a final answer.
    Completed,
    /// The agent ran but failed.
    Failed {
        /// What went wrong.
        reason: String,
        /// How the engine should treat it.
        kind: FailureKind,
    },
    /// Stopped because [`AgentRequest::stop`] has stopped.
    Stopped,
    /// The agent's wall-clock timeout ([`AgentRequest::timeout`]) fired, or the step's
    /// deadline stopped it.
    TimedOut,
    /// The agent printed nothing for `after`, its own idle timeout, and was stopped: a
    /// limit, as [`TimedOut`](Self::TimedOut) is, told apart so that a kill's message names
    /// the clock that fired.
    Silent {
        /// The idle timeout that fired.
        #[serde(
            rename = "after_secs",
            serialize_with = "crate::time::secs",
            deserialize_with = "crate::time::from_secs"
        )]
        after: Duration,
    },
    /// Stopped at the context kill tier (or after a failed compaction).
    ContextLimit,
    /// Rejected by a rate limit until the given time; not the task's fault.
    RateLimited {
        /// When the limit resets.
        until: SystemTime,
    },
}

impl AgentExit {
    /// The limit that stopped the run, when one did: the agent's or the step's timeout
    /// ([`TimedOut`](Self::TimedOut)) or its context ([`ContextLimit`](Self::ContextLimit)).
    /// A task whose run a limit stopped goes to DECOMPOSE.
    ///
    /// ```
    /// use ralph::agent::AgentExit;
    /// use ralph::model::KillReason;
    ///
    /// assert_eq!(AgentExit::TimedOut.kill_reason(), Some(KillReason::Timeout));
    /// let idle = AgentExit::Silent { after: std::time::Duration::from_secs(15) };
    /// assert_eq!(idle.kill_reason(), Some(KillReason::Timeout));
    /// assert_eq!(AgentExit::Completed.kill_reason(), None);
    /// ```
    pub fn kill_reason(&self) -> Option<KillReason> {
        match self {
            AgentExit::TimedOut | AgentExit::Silent { .. } => Some(KillReason::Timeout),
            AgentExit::ContextLimit => Some(KillReason::ContextLimit),
            _ => None,
        }
    }
}

/// What one agent run produced. Raw data: what it means for a task is
/// [`claim`](AgentRun::claim), the rule every mode applies.
///
/// Serializable, so a tool can keep the facts of each run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AgentRun {
    /// How the run ended.
    pub exit: AgentExit,
    /// The agent that made the run, when a [`Fallback`] chain chose it among others.
    pub agent: Option<String>,
    /// The final answer's text (the last assistant message), or empty.
    pub final_text: String,
    /// The structured answer, for structured roles that gave one.
    pub structured: Option<serde_json::Value>,
    /// Token counts.
    pub usage: Usage,
    /// The session id, when the agent has sessions.
    pub session_id: Option<String>,
    /// The model that ran, when the agent knows it (the `model` its section sets): what a
    /// price of `[prices]` is looked up by when the agent reports no cost.
    #[serde(default)]
    pub model: Option<String>,
    /// The run's transcript.
    pub log_path: Option<PathBuf>,
    /// Wall time of the run.
    pub duration: Duration,
    /// Cost in USD, when known.
    pub cost_usd: Option<f64>,
    /// API round trips, when known.
    pub turns: Option<u32>,
    /// Processes the run left behind (background jobs, `setsid` children of its tools),
    /// found alive after it ended and killed.
    #[serde(default)]
    pub leaked: usize,
    /// Output lines longer than the agent's line cap, whose long strings were cut.
    #[serde(default)]
    pub oversized_lines: u64,
    /// The agent process's exit code, when it exited (a process agent; last process of the
    /// run).
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// The signal that ended the agent process, when one did.
    #[serde(default)]
    pub exit_signal: Option<i32>,
}

impl AgentRun {
    /// A run that ended with `exit` and nothing else to report.
    pub fn new(exit: AgentExit) -> Self {
        AgentRun {
            exit,
            agent: None,
            final_text: String::new(),
            structured: None,
            usage: Usage::default(),
            session_id: None,
            model: None,
            log_path: None,
            duration: Duration::ZERO,
            cost_usd: None,
            turns: None,
            leaked: 0,
            oversized_lines: 0,
            exit_code: None,
            exit_signal: None,
        }
    }

    /// What the final answer claims about the task, by the rule every mode applies (the
    /// marker parser's: `<TASK_DONE>` as the last line of the final answer, …): see
    /// [`Claim`]. Only a completed run claims anything.
    ///
    /// ```
    /// use ralph::agent::{AgentRun, Claim};
    ///
    /// assert_eq!(AgentRun::completed("Did it.\n<TASK_DONE>").claim(), Claim::Done);
    /// assert!(matches!(AgentRun::completed("I will say <TASK_DONE> later.").claim(), Claim::NotDone(_)));
    /// ```
    pub fn claim(&self) -> Claim {
        match self.exit {
            AgentExit::Completed => claim::of(&self.final_text),
            _ => Claim::NotDone("The agent run did not complete.".into()),
        }
    }

    /// A completed run whose final answer is `text`.
    pub fn completed(text: impl Into<String>) -> Self {
        AgentRun {
            final_text: text.into(),
            ..Self::new(AgentExit::Completed)
        }
    }

    /// Sets the structured answer.
    #[must_use]
    pub fn with_structured(mut self, value: serde_json::Value) -> Self {
        self.structured = Some(value);
        self
    }

    /// Sets the usage.
    #[must_use]
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = usage;
        self
    }

    /// The same run, ended as `exit`: how a runtime or an [`AgentLayer`] judges a run
    /// again (stopped by a deadline, failed for a reason of its own).
    #[must_use]
    pub fn with_exit(mut self, exit: AgentExit) -> Self {
        self.exit = exit;
        self
    }

    /// Sets the log path.
    #[must_use]
    pub fn with_log_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.log_path = Some(path.into());
        self
    }

    /// Sets the duration.
    #[must_use]
    pub fn with_duration(mut self, duration: Duration) -> Self {
        self.duration = duration;
        self
    }
}

/// An agent could not run at all (as opposed to running and failing, which is an [`AgentExit`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The agent's program could not be started.
    #[error("could not start {program}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An I/O error on a file the agent needs.
    #[error("i/o error on {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Supervising the agent's process failed: waiting for it, or reading its output.
    #[error("i/o error while supervising {program}")]
    Supervise {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The agent's program is not there: not at the path given, nor on `PATH`.
    #[error("agent {agent}: {program} (from {from}) was not found or is not executable; {help}")]
    NotFound {
        /// The agent ([`Agent::name`]).
        agent: String,
        /// The program looked for.
        program: String,
        /// Where its name came from (`claude.bin`, `$RALPH_CLAUDE_BIN`, `PATH`,
        /// `agent.aider.command`).
        from: String,
        /// What a person can do about it.
        help: &'static str,
    },
    /// No `[agent.NAME]` table names this agent.
    #[error("no agent {name:?}: add an [agent.{name}] table with a `command` to ralph.toml")]
    UnknownAgent {
        /// The name asked for.
        name: String,
    },
    /// The agent's `command` is empty.
    #[error("agent.{agent}.command is empty: give the program and its arguments")]
    NoCommand {
        /// The agent.
        agent: String,
    },
    /// No agent of a [`Fallback`] chain can take the run (or the chain has none): each
    /// agent's reason.
    #[error(
        "no agent of the chain {chain:?} can run: {}",
        if .reasons.is_empty() { "it has no agent".to_owned() } else { .reasons.join("; ") }
    )]
    NoAgentCanRun {
        /// The chain's name (its agents' names joined by `→`).
        chain: String,
        /// Why each agent was passed over (`claude: …`).
        reasons: Vec<String>,
    },
    /// A [`FakeAgent`](https://docs.rs/ralph-loop/latest/ralph/agent/struct.FakeAgent.html)'s scripts have no entry for a request.
    #[cfg(feature = "fake")]
    #[error(
        "fake agent has no script for {role} {subject} attempt {attempt}; unconsumed entries: {available}",
        subject = .subject.as_deref().unwrap_or("(no subject)"),
        available = if .available.is_empty() { "none".to_owned() } else { .available.join(", ") }
    )]
    NoScript {
        /// The request's role.
        role: Role,
        /// Its subject.
        subject: Option<String>,
        /// Its attempt.
        attempt: u32,
        /// Descriptions of the entries still unconsumed.
        available: Vec<String>,
    },
    /// A [`FakeAgent`](https://docs.rs/ralph-loop/latest/ralph/agent/struct.FakeAgent.html)'s entries were never used ([`FakeAgent::verify`](https://docs.rs/ralph-loop/latest/ralph/agent/struct.FakeAgent.html#method.verify)).
    #[cfg(feature = "fake")]
    #[error("fake agent scripts were not consumed: {}", .entries.join(", "))]
    ScriptsLeft {
        /// Descriptions of the unused entries.
        entries: Vec<String>,
    },
    /// A [`FakeAgent`](https://docs.rs/ralph-loop/latest/ralph/agent/struct.FakeAgent.html)'s script file could not be read or parsed.
    #[cfg(feature = "fake")]
    #[error("fake agent script {}: {message}", .path.display())]
    BadScript {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the TOML error's position.
        message: String,
    },
    /// A [`FakeAgent`](https://docs.rs/ralph-loop/latest/ralph/agent/struct.FakeAgent.html)'s step names a file outside the workspace (absolute, or going up
    /// with `..`).
    #[cfg(feature = "fake")]
    #[error(
        "fake agent step refused: path {} must be relative and stay inside the workspace",
        .path.display()
    )]
    OutsideWorkspace {
        /// The path as the script gives it.
        path: PathBuf,
    },
    /// The backend of an agent of your own failed (an HTTP API, a queue): the agent and the
    /// backend's own error. ralph's agents never return it.
    ///
    /// ```
    /// use ralph::AgentError;
    ///
    /// let e = AgentError::backend("my-api", std::io::Error::other("503 Service Unavailable"));
    /// assert_eq!(e.to_string(), "agent my-api: its backend failed");
    /// ```
    #[error("agent {agent}: its backend failed")]
    Backend {
        /// The agent ([`Agent::name`]).
        agent: String,
        /// The backend's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl AgentError {
    /// The supervisor's error, as the agent's: the program, or the file, it is about.
    pub fn from_process(error: crate::process::ProcessError) -> Self {
        use crate::process::ProcessError;
        match error {
            ProcessError::Spawn { program, source } => AgentError::Spawn { program, source },
            ProcessError::Cwd { cwd: path, source } | ProcessError::Log { path, source } => {
                AgentError::Io { path, source }
            }
            ProcessError::Io { program, source } => AgentError::Supervise { program, source },
        }
    }
}

impl AgentError {
    /// [`AgentError::Backend`]: the agent named `agent` could not run because its backend
    /// failed with `source`.
    pub fn backend(
        agent: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        AgentError::Backend {
            agent: agent.into(),
            source: source.into(),
        }
    }
}

/// Runs one prompt in a fresh session.
///
/// Implementations take `&self` so one agent can serve parallel verifiers through an `Arc`;
/// keep mutable state behind a lock. The trait is usable as `dyn Agent`.
///
/// # Cancel safety
///
/// Dropping the future of [`run`](Agent::run) must not leave processes behind: implementations
/// that spawn processes kill them on drop. The graceful path is [`AgentRequest::stop`].
///
/// # What ralph retries
///
/// How a run ends decides what the runtime does next, in every mode:
///
/// | the run | what follows |
/// |---|---|
/// | `Ok` with [`AgentExit::Completed`] | its final answer is read ([`AgentRun::claim`]); a claim the gates or the verifier refuse is a failed attempt, retried up to `retries` |
/// | `Ok` with [`AgentExit::RateLimited`] | waited out until its reset, and run again; not counted |
/// | `Ok` with `Failed` of [`FailureKind::Transient`] | run again after a backoff, `transient_retries` times; not counted |
/// | `Ok` with `Failed` of [`FailureKind::Attempt`] | a failed attempt, retried up to `retries` |
/// | `Ok` with `Failed` of [`FailureKind::RunBudget`] | the task is blocked with the reason |
/// | `Ok` with `Failed` of [`FailureKind::Fatal`] or [`FailureKind::Unreachable`] | the run ends ([`Error::AgentFatal`](https://docs.rs/ralph-loop/latest/ralph/enum.Error.html#variant.AgentFatal), [`Error::AgentUnreachable`](https://docs.rs/ralph-loop/latest/ralph/enum.Error.html#variant.AgentUnreachable)); not counted |
/// | `Ok` with [`AgentExit::TimedOut`] or [`AgentExit::ContextLimit`] | a limit stopped it: the task goes to DECOMPOSE (build mode: a failed session) |
/// | `Ok` with [`AgentExit::Stopped`] | the run was stopped (a signal, [`Ralph::stop_token`](https://docs.rs/ralph-loop/latest/ralph/struct.Ralph.html#method.stop_token)): it ends, the attempt not counted |
/// | `Err(`[`AgentError`]`)` | the agent could not run at all: the run ends with [`Error::Agent`](https://docs.rs/ralph-loop/latest/ralph/enum.Error.html#variant.Agent), nothing retried; a [`Fallback`] chain passes a run that could not start ([`AgentError::Spawn`]) to its next agent |
///
/// So an agent whose start can fail for a passing reason says so as an
/// `Ok(AgentRun)` with `Failed` of kind `Transient`, not as an `Err`.
///
/// # Wrapping an agent
///
/// A wrapper (a retry layer, a journal) is an [`AgentLayer`]: `agent.layer(retries)` runs
/// each request through it, and the agent's other methods (`name`, `check`,
/// `in_process`, and `configure`, which hands a [`ClaudeCli`](https://docs.rs/ralph-loop/latest/ralph/agent/claude/struct.ClaudeCli.html) its
/// `[claude]` settings) reach the agent inside unchanged. A wrapper written by hand as an
/// `Agent` of its own must forward each of them itself.
///
/// # Implementing
///
/// Put `#[ralph::async_trait]` on the impl (the trait's methods are async; without it the
/// compiler reports E0195). Answer with an [`AgentRun`]: its final text is where the task
/// markers are read ([`AgentRun::claim`]), and a run that ends early says why in
/// [`AgentRun::exit`].
///
/// ```
/// use ralph::agent::{Agent, AgentError, AgentExit, AgentRequest, AgentRun, Claim, Role};
/// use ralph::async_trait;
///
/// /// Says every task is done, without doing anything: the gates and the verifier will
/// /// disagree, which is what such an agent is for in a test.
/// struct Boaster;
///
/// #[async_trait]
/// impl Agent for Boaster {
///     fn name(&self) -> &str {
///         "boaster"
///     }
///
///     async fn run(&self, request: AgentRequest) -> Result<AgentRun, AgentError> {
///         if request.stop.is_stopped() {
///             return Ok(AgentRun::new(AgentExit::Stopped));
///         }
///         Ok(AgentRun::completed(format!(
///             "Read {} bytes of {} prompt.\n<TASK_DONE>",
///             request.prompt.len(),
///             request.role.as_str(),
///         )))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), AgentError> {
/// let run = Boaster.run(AgentRequest::new(Role::Build, "Write hello.txt", ".")).await?;
/// assert_eq!(run.claim(), Claim::Done);
/// # Ok(())
/// # }
/// ```
#[diagnostic::on_unimplemented(
    note = "implement `ralph::Agent` for your type, or use `ralph::FakeAgent` in tests"
)]
#[async_trait]
pub trait Agent: Send + Sync {
    /// A short name for logs and events (`claude`, `fake`).
    fn name(&self) -> &str {
        "agent"
    }

    /// Runs `request` to its end, or until it is stopped or times out.
    ///
    /// # Errors
    ///
    /// [`AgentError`] when the agent could not run at all. A run that started and failed is
    /// `Ok` with [`AgentExit::Failed`].
    async fn run(&self, request: AgentRequest) -> Result<AgentRun, AgentError>;

    /// Checks that the agent can run at all (its program exists, say), before a thread's
    /// loop starts. The default has nothing to check.
    ///
    /// # Errors
    ///
    /// [`AgentError`] saying why the agent is unavailable.
    async fn check(&self) -> Result<(), AgentError> {
        Ok(())
    }

    /// Takes the workspace's [`Config`] when [`RalphBuilder::build`](https://docs.rs/ralph-loop/latest/ralph/struct.RalphBuilder.html#method.build)
    /// loads it, before any run. [`ClaudeCli`](https://docs.rs/ralph-loop/latest/ralph/agent/claude/struct.ClaudeCli.html) takes `[claude]` and `grace` from it, except
    /// the settings set in code. The default takes nothing.
    ///
    /// An agent passed to the builder inside an `Arc` that is shared elsewhere keeps its own
    /// settings: the builder cannot change what others hold.
    fn configure(&mut self, config: &Config) {
        let _ = config;
    }

    /// Whether the agent's work runs in ralph's own process, where no sandbox reaches (an
    /// agent written in Rust): dry runs say so. The default is true; the crate's agents
    /// that run a CLI say false, and run it in [`AgentRequest::sandbox`].
    fn in_process(&self) -> bool {
        true
    }

    /// The agents (by name) whose runs may report no usage, tokens or dollars, so that the
    /// run-wide limits (`max_cost_usd`, `max_tokens`) cannot count what they spend: a
    /// [`CommandAgent`](https://docs.rs/ralph-loop/latest/ralph/agent/struct.CommandAgent.html) names itself (it reports only what its command writes to the file
    /// `RALPH_USAGE_FILE` names), a [`Fallback`] chain each such agent in it. A run with a
    /// limit says so at its start. The default is none: an agent that reports its usage
    /// ([`AgentRun::usage`], [`AgentRun::cost_usd`]).
    fn unmetered(&self) -> Vec<String> {
        Vec::new()
    }

    /// This agent inside `layer`, which then runs each request; the agent's other methods
    /// reach this agent unchanged (see [`AgentLayer`]).
    fn layer<L: AgentLayer>(self, layer: L) -> impl Agent
    where
        Self: Sized,
    {
        Layered::new(self, layer)
    }
}

#[async_trait]
impl<T: Agent + ?Sized> Agent for Box<T> {
    fn name(&self) -> &str {
        (**self).name()
    }

    async fn run(&self, request: AgentRequest) -> Result<AgentRun, AgentError> {
        (**self).run(request).await
    }

    async fn check(&self) -> Result<(), AgentError> {
        (**self).check().await
    }

    fn configure(&mut self, config: &Config) {
        (**self).configure(config);
    }

    fn in_process(&self) -> bool {
        (**self).in_process()
    }

    fn unmetered(&self) -> Vec<String> {
        (**self).unmetered()
    }
}

#[async_trait]
impl<T: Agent + ?Sized> Agent for Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn in_process(&self) -> bool {
        (**self).in_process()
    }

    async fn run(&self, request: AgentRequest) -> Result<AgentRun, AgentError> {
        (**self).run(request).await
    }

    async fn check(&self) -> Result<(), AgentError> {
        (**self).check().await
    }

    fn configure(&mut self, config: &Config) {
        if let Some(agent) = Arc::get_mut(self) {
            agent.configure(config);
        }
    }

    fn unmetered(&self) -> Vec<String> {
        (**self).unmetered()
    }
}

/// Breaks the build if `Agent` stops being usable as `dyn`.
#[allow(dead_code)]
fn _assert_agent_object_safe(_: &dyn Agent, _: Box<dyn Agent>, _: Arc<dyn Agent>) {}
