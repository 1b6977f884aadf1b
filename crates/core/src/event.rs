//! Events for observers: what the construct loop is doing, as it happens.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::agent::{AgentEvent, AgentExit, Role, Usage};
use crate::gate::GateStatus;
use crate::model::{IssueId, KillReason, Stage, TaskId};
use crate::outcome::Outcome;
use crate::prioritize::PriorityReport;

/// Something that happened in a run. Serialized as one NDJSON object with an `event` field;
/// durations are seconds, as numbers.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Event {
    /// The loop entered a stage.
    StageEntered {
        /// Iteration number.
        iteration: u32,
        /// The stage.
        stage: Stage,
        /// The stage's log file.
        log: PathBuf,
    },
    /// An issue was investigated.
    IssueInvestigated {
        /// The issue.
        issue: IssueId,
        /// The tasks that resolve it: those created from it, and those already planned
        /// that cover it.
        tasks: Vec<TaskId>,
        /// Set when the issue was judged out of scope or blocked.
        reason: Option<String>,
    },
    /// A build attempt of a task began: its agent runs next. Past the run-wide budget no
    /// agent runs, and no attempt is announced.
    TaskStarted {
        /// The task.
        task: TaskId,
        /// Its name.
        name: String,
        /// The task's attempt, counted over every round (a rebuild after a rejection goes
        /// on from the last), as its log names it (`…-a2.log`); 1 = the first try.
        attempt: u32,
    },
    /// An agent run ended.
    AgentFinished {
        /// What it was for.
        role: Role,
        /// Its subject.
        subject: Option<String>,
        /// How it ended.
        exit: AgentExit,
        /// Tokens.
        usage: Usage,
        /// Wall time.
        #[serde(serialize_with = "crate::time::secs")]
        duration: Duration,
        /// Cost in USD, when the agent reports it.
        cost_usd: Option<f64>,
        /// API round trips, when the agent reports them.
        turns: Option<u32>,
        /// The agent's session id, when it has sessions.
        session_id: Option<String>,
        /// Its transcript.
        log: Option<PathBuf>,
    },
    /// A live event from an agent.
    Agent {
        /// Its subject.
        subject: Option<String>,
        /// The event.
        #[serde(flatten)]
        detail: AgentEvent,
    },
    /// A gate ran.
    GateFinished {
        /// The task it checked.
        task: TaskId,
        /// The gate.
        gate: String,
        /// Whether a failure blocks the task.
        required: bool,
        /// How it ended.
        status: GateStatus,
        /// Wall time.
        #[serde(serialize_with = "crate::time::secs")]
        duration: Duration,
    },
    /// An attempt failed and the task will be tried again.
    TaskRetry {
        /// The task.
        task: TaskId,
        /// The attempt that failed.
        attempt: u32,
        /// Why (shortened).
        reason: String,
    },
    /// A task passed its required gates.
    TaskDone {
        /// The task.
        task: TaskId,
    },
    /// A task's work landed on the user's branch as this commit: committed in the user's
    /// work tree (one task at a time), or, built in its own git work tree
    /// (`build_concurrency`), rebased onto the branch and fast-forwarded.
    TaskMerged {
        /// The task.
        task: TaskId,
        /// The commit, now the branch's head.
        commit: String,
    },
    /// A task is blocked.
    TaskBlocked {
        /// The task.
        task: TaskId,
        /// Why.
        reason: String,
    },
    /// A task's agent was killed; the task goes to DECOMPOSE.
    TaskKilled {
        /// The task.
        task: TaskId,
        /// Why.
        reason: KillReason,
        /// The killed run's log.
        log: Option<PathBuf>,
    },
    /// An issue's investigator was killed; the issue goes to DECOMPOSE.
    IssueKilled {
        /// The issue.
        issue: IssueId,
        /// Why.
        reason: KillReason,
        /// The killed run's log.
        log: Option<PathBuf>,
    },
    /// The verifier's verdict on a task.
    Verdict {
        /// The task.
        task: TaskId,
        /// Accepted or rejected.
        accepted: bool,
        /// Why.
        reason: String,
    },
    /// VERIFY's gap analysis created work.
    GapsFound {
        /// New tasks.
        tasks: Vec<TaskId>,
        /// New issues.
        issues: Vec<IssueId>,
    },
    /// The gap analysis answered a gap a verifier named (seed 000, fork/join step 5).
    GapAnswered {
        /// The task whose verifier named it.
        task: TaskId,
        /// The gap, as the verifier put it.
        gap: String,
        /// The answer: `task t-5`, `issue i-3`, or `no new work: <why>`.
        answer: String,
    },
    /// Pending tasks were re-prioritized.
    Prioritized {
        /// The counts.
        report: PriorityReport,
        /// The order, with priorities (`t-3b:high`).
        order: Vec<String>,
    },
    /// A killed task was replaced by subtasks.
    Decomposed {
        /// The killed task.
        task: TaskId,
        /// Its replacements.
        into: Vec<TaskId>,
    },
    /// An issue whose investigator was killed became tasks, made from its log.
    IssueDecomposed {
        /// The issue.
        issue: IssueId,
        /// The tasks made from it.
        into: Vec<TaskId>,
    },
    /// An agent's structured answer (an investigation, a verdict, a gap analysis, a plan…)
    /// was invalid: what did not parse, and where. The agent is asked once more.
    AnswerInvalid {
        /// The role that answered.
        role: Role,
        /// Its subject.
        subject: Option<String>,
        /// The attempt whose answer it was.
        attempt: u32,
        /// What is wrong with it: not JSON (with the line and column), a field that does
        /// not fit the schema (named), or prose where JSON was asked for (its start).
        cause: String,
    },
    /// The run-wide budget (`max_cost_usd`, `max_tokens`) is spent over the run's scope:
    /// the agent run about to start did not start, and the run ends "budget exhausted".
    BudgetExhausted {
        /// The scope: `construct`, `build` or `thread/<id>`.
        scope: String,
        /// Dollars spent over it.
        spent_usd: f64,
        /// Input and output tokens spent over it.
        spent_tokens: u64,
        /// `max_cost_usd`, if set.
        max_cost_usd: Option<f64>,
        /// `max_tokens`, if set.
        max_tokens: Option<u64>,
    },
    /// A rate limit: the loop waits until it resets.
    RateLimited {
        /// Seconds until the reset.
        wait_secs: u64,
    },
    /// Loading the state had to repair it: a torn final write, left by a crash, was
    /// dropped. Nothing acknowledged was lost (the dropped changes were never reported
    /// saved); the step that wrote them runs again.
    StateRepaired {
        /// What was dropped, and where.
        note: String,
    },
    /// A person asked the run to stop (`ralph stop`): what is in flight finishes and is
    /// recorded, then the run ends (exit 4).
    StopRequested {},
    /// A person's guidance (`ralph tell`) reached an agent's prompt for the first time.
    GuidanceGiven {
        /// Its id (`g-1`).
        id: String,
        /// The task, issue or thread the call was about, if any.
        subject: Option<String>,
        /// The role of the call.
        role: Role,
    },
    /// An agent asked a person a question (`<TASK_QUESTION question="…">`): its task, spec,
    /// issue or thread waits for the answer (`ralph answer SUBJECT "…"`) while the run goes
    /// on with what does not depend on it. `[[hooks]]` on `needs_person` run on it too.
    QuestionAsked {
        /// The question's id (`q-1`).
        id: String,
        /// What waits for the answer: a task (`t-3`), a spec, an issue or a thread.
        subject: String,
        /// The role of the agent that asked.
        role: Role,
        /// The question.
        question: String,
    },
    /// A person answered an agent's question (`ralph answer`): what asked it goes on, and
    /// its next agent call gets the question and the answer.
    QuestionAnswered {
        /// The question's id.
        id: String,
        /// What asked it.
        subject: String,
    },
    /// Something went wrong that did not stop the run.
    Warning {
        /// What.
        message: String,
    },
    /// An iteration ended.
    IterationFinished {
        /// Its number.
        iteration: u32,
    },
    #[cfg(feature = "specs")]
    /// Build mode wrote a new active plan for a spec (seed 002).
    PlanWritten {
        /// The spec's id.
        spec: String,
        /// The plan's attempt number.
        attempt: u32,
        /// The plan file, relative to the workspace.
        path: PathBuf,
    },
    #[cfg(feature = "specs")]
    /// The verifier invalidated a spec's plan; it was archived and the spec is re-planned.
    PlanInvalidated {
        /// The spec's id.
        spec: String,
        /// The verifier's reason.
        reason: String,
        /// Where the old plan was kept, relative to the workspace.
        archived: PathBuf,
    },
    #[cfg(feature = "specs")]
    /// A spec was verified and committed.
    SpecCommitted {
        /// The spec's id.
        spec: String,
        /// The commit (none when there was nothing to commit).
        commit: Option<String>,
    },
    #[cfg(feature = "specs")]
    /// Build mode ([`Ralph::build_specs`](https://docs.rs/ralph-loop/latest/ralph/struct.Ralph.html#method.build_specs)) ended.
    SpecsFinished {
        /// How.
        outcome: crate::outcome::SpecsOutcome,
    },
    #[cfg(feature = "specs")]
    /// Plan mode ([`Ralph::plan`](https://docs.rs/ralph-loop/latest/ralph/struct.Ralph.html#method.plan)) saved `implementation.json`.
    PlanSaved {
        /// The file, relative to the workspace.
        path: PathBuf,
        /// Specs in it.
        specs: usize,
        /// Tasks in it, all specs together.
        tasks: usize,
        /// The commit of the file (`ralph plan: N specs, M tasks`), in a git repository
        /// with a commit; `None` outside git, or when git ignores the file.
        commit: Option<String>,
    },
    /// The run ended: the last event of every run in every mode (the construct loop, plan
    /// mode, build mode, a thread's loop), a run that failed with an error included.
    /// `[[hooks]]` on `finished` run on it, and those on `needs_person` when
    /// `needs_person` is set.
    ///
    /// ```json
    /// {"event":"finished","outcome":{"outcome":"blocked","items":[…]},"mode":"construct",
    ///  "message":"Blocked: 1 item(s) cannot proceed…","exit_code":3,"needs_person":true}
    /// {"event":"finished","mode":"build","error":"agent could not run: …",
    ///  "message":"build mode stopped: agent could not run: …","exit_code":1,"needs_person":true}
    /// ```
    Finished {
        /// How a construct run ended; `None` in the other modes, and when the run failed
        /// (`error` says why).
        #[serde(skip_serializing_if = "Option::is_none")]
        outcome: Option<Outcome>,
        /// The mode that ran: `construct`, `plan`, `build` or `thread`.
        mode: String,
        #[cfg(feature = "specs")]
        /// How build mode ended (as [`SpecsFinished`](Self::SpecsFinished) said it just
        /// before); `None` in the other modes, and when the run failed.
        #[serde(skip_serializing_if = "Option::is_none")]
        specs_outcome: Option<crate::outcome::SpecsOutcome>,
        /// The thread whose loop ran (a thread's `start`, `run`, `resume`, `manual_assist`
        /// or `send_back`); `None` in the other modes.
        #[serde(skip_serializing_if = "Option::is_none")]
        thread: Option<String>,
        /// The phase that thread was left in (`PendingReview`, `Stuck`, `Paused`, …), when
        /// the call did not fail before it was read.
        #[serde(skip_serializing_if = "Option::is_none")]
        phase: Option<String>,
        /// The error the run failed with, as the call returned it; `None` when it ended
        /// with an outcome.
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// How it ended, as a person reads it: the outcome, what plan mode saved, the
        /// thread's phase, or `<mode> stopped: <error>`.
        message: String,
        /// What the run's scope (`construct`, `build`, `thread/<id>`) spent in all when the
        /// run ended, as the spend ledger has it ([`Ralph::spent`](https://docs.rs/ralph-loop/latest/ralph/struct.Ralph.html#method.spent)):
        /// the figure of the summary, `ralph status` and the board, in dollars; `None`
        /// when the run failed before its ledger was read.
        #[serde(skip_serializing_if = "Option::is_none")]
        spent_usd: Option<f64>,
        /// The same scope's input and output tokens (what `max_tokens` counts).
        #[serde(skip_serializing_if = "Option::is_none")]
        spent_tokens: Option<u64>,
        /// The same scope's input read from the providers' prompt caches, apart from
        /// `spent_tokens` (as the ledger keeps it, and not counted by `max_tokens`).
        #[serde(skip_serializing_if = "Option::is_none")]
        spent_cache_read_tokens: Option<u64>,
        /// The same scope's input written to the providers' prompt caches, apart too.
        #[serde(skip_serializing_if = "Option::is_none")]
        spent_cache_creation_tokens: Option<u64>,
        /// Whether that figure is an estimate: it counts a run cut short (ralph killed
        /// while it ran) by what its agent had reported.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        spent_estimate: bool,
        /// The exit code the `ralph` command uses for this end: 0 done (or one step done),
        /// 1 an error, 2 a limit, 3 a person must look, 4 stopped on request (`ralph stop`),
        /// 130 / 143 / 129 stopped by SIGINT / SIGTERM / SIGHUP (a thread: 2 Stuck,
        /// 3 PreflightFailed, 4 or a signal's code Paused).
        exit_code: i32,
        /// How the run's agents and gates were confined: `bubblewrap`, `unconfined (…)` and
        /// why, `off (unconfined)`, `machine (declared a sandbox)` ("Sandbox" in docs/running.md).
        #[serde(skip_serializing_if = "String::is_empty")]
        sandbox: String,
        /// Whether the run ended in a state only a person can move on from: blocked,
        /// unverified, a broken gate, a spec out of attempts, a thread at a checkpoint or
        /// waiting ([`PhaseKind::needs_person`](https://docs.rs/ralph-loop/latest/ralph/thread/enum.PhaseKind.html#method.needs_person)),
        /// or an error. Not a complete run, a `once` step, the iteration limit or an
        /// interrupt.
        needs_person: bool,
    },
}

impl Event {
    /// The [`Finished`](Self::Finished) of a run of `mode` that ended as `message` says,
    /// every other field unset.
    pub fn finished(mode: &str, message: String, exit_code: i32, needs_person: bool) -> Event {
        Event::Finished {
            outcome: None,
            mode: mode.to_owned(),
            #[cfg(feature = "specs")]
            specs_outcome: None,
            thread: None,
            phase: None,
            error: None,
            message,
            spent_usd: None,
            spent_tokens: None,
            spent_cache_read_tokens: None,
            spent_cache_creation_tokens: None,
            spent_estimate: false,
            exit_code,
            sandbox: String::new(),
            needs_person,
        }
    }

    /// This [`Finished`](Self::Finished) with what the run's scope spent.
    #[must_use]
    /// `tokens` are the input and output ones, `cached` the cache reads and writes apart.
    pub fn with_spent(
        mut self,
        usd: f64,
        tokens: u64,
        cached: (u64, u64),
        estimate: bool,
    ) -> Event {
        if let Event::Finished {
            spent_usd,
            spent_tokens,
            spent_cache_read_tokens,
            spent_cache_creation_tokens,
            spent_estimate,
            ..
        } = &mut self
        {
            *spent_usd = Some(usd);
            *spent_tokens = Some(tokens);
            *spent_cache_read_tokens = Some(cached.0);
            *spent_cache_creation_tokens = Some(cached.1);
            *spent_estimate = estimate;
        }
        self
    }

    /// The [`Finished`](Self::Finished) of a construct run that reached `outcome`.
    pub fn construct_finished(outcome: Outcome) -> Event {
        let mut event = Event::finished(
            "construct",
            outcome.to_string(),
            outcome.exit_code(),
            outcome.needs_person(),
        );
        if let Event::Finished { outcome: slot, .. } = &mut event {
            *slot = Some(outcome);
        }
        event
    }

    /// The [`Finished`](Self::Finished) of a build-mode run that reached `outcome`.
    #[cfg(feature = "specs")]
    pub fn build_finished(outcome: crate::outcome::SpecsOutcome) -> Event {
        let mut event = Event::finished(
            "build",
            outcome.to_string(),
            outcome.exit_code(),
            outcome.needs_person(),
        );
        if let Event::Finished { specs_outcome, .. } = &mut event {
            *specs_outcome = Some(outcome);
        }
        event
    }

    /// The [`Finished`](Self::Finished) of a run of `mode` that failed with `error`:
    /// `message` is `<what> stopped: <error and its causes>`.
    pub fn failed(mode: &str, what: &str, error: &(dyn std::error::Error + 'static)) -> Event {
        let said = crate::output::chain(error);
        let mut event = Event::finished(mode, format!("{what} stopped: {said}"), 1, true);
        if let Event::Finished { error: slot, .. } = &mut event {
            *slot = Some(said);
        }
        event
    }

    /// The [`Finished`](Self::Finished) of a thread's loop: `thread` and `phase` set.
    #[cfg(feature = "threads")]
    #[must_use]
    pub fn of_thread(mut self, id: &str, phase: Option<&str>) -> Event {
        if let Event::Finished {
            thread, phase: p, ..
        } = &mut self
        {
            *thread = Some(id.to_owned());
            *p = phase.map(str::to_owned);
        }
        self
    }

    /// The `event` tag this event has in JSON (`task_blocked`), as `[[hooks]]` name it.
    pub fn tag(&self) -> String {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(map)) => map
                .get("event")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            _ => String::new(),
        }
    }
}

/// Receives [`Event`]s. Called synchronously on the loop's task (the warning of a failed
/// `[[hooks]]` command, on the task that runs the hooks, beside the loop): keep it quick.
///
/// Any `Fn(&Event) + Send + Sync` is an observer:
///
/// ```
/// use ralph::{Event, Observer};
/// let print = |e: &Event| eprintln!("{e:?}");
/// let _: &dyn Observer = &print;
/// ```
///
/// # Implementing
///
/// One method, called for each event in order. [`Event`] is `#[non_exhaustive]`: match the
/// variants you need and let the rest pass.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// use ralph::{Event, Observer};
///
/// /// Counts the tokens every agent run used.
/// #[derive(Default)]
/// struct TokenMeter(AtomicU64);
///
/// impl Observer for TokenMeter {
///     fn on_event(&self, event: &Event) {
///         if let Event::AgentFinished { usage, .. } = event {
///             let used = usage.input_tokens + usage.output_tokens;
///             self.0.fetch_add(used, Ordering::Relaxed);
///         }
///     }
/// }
///
/// let meter = TokenMeter::default();
/// meter.on_event(&Event::Warning { message: "not a run".into() });
/// assert_eq!(meter.0.load(Ordering::Relaxed), 0);
/// ```
pub trait Observer: Send + Sync {
    /// Called for each event, in order.
    fn on_event(&self, event: &Event);
}

impl<F: Fn(&Event) + Send + Sync> Observer for F {
    fn on_event(&self, event: &Event) {
        self(event)
    }
}

impl<T: Observer + ?Sized> Observer for Arc<T> {
    fn on_event(&self, event: &Event) {
        (**self).on_event(event)
    }
}

/// One line a person reads: what happened, with its ids and reason. Live agent events
/// ([`Event::Agent`]) print as nothing (an empty string), except a fallback chain's choice,
/// the context tiers and the agent's status lines ([`AgentEvent::Status`]: an API error it
/// retries, `Reconnecting... waiting for network`); so does an empty prioritization.
impl Event {
    /// The `[RALPH] Context …` line of a context event, in seed 000's words (the stage log
    /// carries it beside the event's JSON).
    pub fn context_line(&self) -> Option<String> {
        let Event::Agent { detail, .. } = self else {
            return None;
        };
        let pct = |ratio: f64| (ratio * 100.0).round();
        match detail {
            AgentEvent::ContextPressure { ratio, tier } => {
                let what = match tier.as_str() {
                    "warn" => "consider wrapping up",
                    "compact" => "compacting",
                    _ => "stopping the agent",
                };
                Some(format!(
                    "[RALPH] Context pressure: {}% - {what}",
                    pct(*ratio)
                ))
            }
            AgentEvent::Compacted { before, after } => Some(format!(
                "[RALPH] Context compacted: {}% -> {}%",
                pct(*before),
                pct(*after)
            )),
            _ => None,
        }
    }
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Every variant is named here, so that a new one must be given a family.
        match self {
            Event::StageEntered { .. }
            | Event::BudgetExhausted { .. }
            | Event::RateLimited { .. }
            | Event::StateRepaired { .. }
            | Event::Warning { .. }
            | Event::GuidanceGiven { .. }
            | Event::QuestionAsked { .. }
            | Event::QuestionAnswered { .. }
            | Event::StopRequested {}
            | Event::IterationFinished { .. }
            | Event::Finished { .. } => self.write_run(f),
            Event::AgentFinished { .. } | Event::Agent { .. } | Event::AnswerInvalid { .. } => {
                self.write_agent(f)
            }
            Event::TaskStarted { .. }
            | Event::GateFinished { .. }
            | Event::TaskRetry { .. }
            | Event::TaskDone { .. }
            | Event::TaskMerged { .. }
            | Event::TaskBlocked { .. }
            | Event::TaskKilled { .. }
            | Event::Verdict { .. }
            | Event::Decomposed { .. } => self.write_task(f),
            Event::IssueInvestigated { .. }
            | Event::IssueKilled { .. }
            | Event::IssueDecomposed { .. }
            | Event::GapsFound { .. }
            | Event::GapAnswered { .. }
            | Event::Prioritized { .. } => self.write_board(f),
            #[cfg(feature = "specs")]
            Event::PlanWritten { .. }
            | Event::PlanInvalidated { .. }
            | Event::SpecCommitted { .. }
            | Event::SpecsFinished { .. }
            | Event::PlanSaved { .. } => self.write_specs(f),
        }
    }
}

/// The lines of [`Event`]'s `Display`, one helper per family of events. Each writes nothing
/// for an event of another family: `fmt` never hands it one.
impl Event {
    /// The run as a whole: stages, iterations, limits, repairs, warnings, its end.
    fn write_run(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::StageEntered {
                iteration, stage, ..
            } => {
                write!(f, "── iteration {iteration} · {stage} ──")
            }
            Event::BudgetExhausted {
                scope,
                spent_usd,
                spent_tokens,
                ..
            } => write!(
                f,
                "budget exhausted over {scope}: spent ${spent_usd:.2} and {spent_tokens} tokens; no agent run starts"
            ),
            Event::RateLimited { wait_secs } => write!(f, "rate limited: waiting {wait_secs}s"),
            Event::StateRepaired { note } => write!(f, "state repaired: {note}"),
            Event::Warning { message } => write!(f, "warning: {message}"),
            Event::StopRequested {} => f.write_str(
                "stop requested: finishing the agent runs and gates in flight, then stopping",
            ),
            Event::GuidanceGiven { id, subject, role } => match subject {
                Some(subject) => write!(f, "guidance {id} given to the {role} agent of {subject}"),
                None => write!(f, "guidance {id} given to the {role} agent"),
            },
            Event::QuestionAsked {
                id,
                subject,
                question,
                ..
            } => write!(
                f,
                "? {subject} asks a person ({id}): {question} — answer with: ralph answer {subject} \"…\""
            ),
            Event::QuestionAnswered { id, subject } => {
                write!(f, "{subject}'s question {id} answered; it goes on")
            }
            Event::IterationFinished { iteration } => write!(f, "iteration {iteration} finished"),
            Event::Finished { message, .. } => f.write_str(message),
            _ => Ok(()),
        }
    }

    /// An agent run: how it ended, what it streamed, an answer refused.
    fn write_agent(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::AgentFinished {
                role,
                subject,
                exit,
                usage,
                duration,
                cost_usd,
                ..
            } => {
                write!(f, "  agent {role}")?;
                if let Some(subject) = subject {
                    write!(f, " {subject}")?;
                }
                write!(f, ": {} in {:.1}s", exit_word(exit), duration.as_secs_f64())?;
                write!(
                    f,
                    ", {} in / {} out tokens",
                    usage.input_tokens, usage.output_tokens
                )?;
                let cached = usage
                    .cache_read_tokens
                    .saturating_add(usage.cache_creation_tokens);
                if cached > 0 {
                    write!(
                        f,
                        " (cache {} read, {} written)",
                        usage.cache_read_tokens, usage.cache_creation_tokens
                    )?;
                }
                match cost_usd {
                    Some(cost) => write!(f, ", ${cost:.4}"),
                    None => Ok(()),
                }
            }
            Event::Agent {
                detail: AgentEvent::AgentChosen { agent, reason },
                ..
            } => write!(f, "agent {agent} takes the run: {reason}"),
            Event::Agent {
                subject,
                detail: AgentEvent::Status { agent, line },
            } => {
                write!(f, "  agent {agent}")?;
                if let Some(subject) = subject {
                    write!(f, " ({subject})")?;
                }
                write!(f, ": {line}")
            }
            Event::Agent { .. } => match self.context_line() {
                Some(line) => f.write_str(&line),
                None => Ok(()),
            },
            Event::AnswerInvalid {
                role,
                subject,
                attempt,
                cause,
            } => {
                let subject = subject
                    .as_deref()
                    .map(|s| format!(" {s}"))
                    .unwrap_or_default();
                write!(f, "  {role}{subject} answer {attempt} invalid: {cause}")
            }
            _ => Ok(()),
        }
    }

    /// A task's way through its attempt: start, gates, retries, verdict, its end.
    fn write_task(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::TaskStarted {
                task,
                name,
                attempt,
            } => {
                write!(f, "▸ {task} {name} (attempt {attempt})")
            }
            // Named after their task: with tasks at once, lines of several interleave.
            Event::GateFinished {
                task,
                gate,
                status,
                required,
                ..
            } => {
                let optional = if *required { "" } else { " (optional)" };
                write!(f, "  {task} gate {gate}{optional}: {status}")
            }
            Event::TaskRetry { task, reason, .. } => write!(f, "  {task} retry: {reason}"),
            Event::TaskDone { task } => write!(f, "✓ {task} done"),
            Event::TaskMerged { task, commit } => {
                write!(
                    f,
                    "  {task} committed as {}",
                    commit.get(..10).unwrap_or(commit)
                )
            }
            Event::TaskBlocked { task, reason } => write!(f, "⨯ {task} blocked: {reason}"),
            Event::TaskKilled { task, reason, log } => {
                write!(f, "✗ {task} killed ({reason})")?;
                match log {
                    Some(log) => write!(f, "; log {}", log.display()),
                    None => Ok(()),
                }
            }
            Event::Verdict {
                task,
                accepted,
                reason,
            } => {
                let (mark, word) = if *accepted {
                    ("✓", "accepted")
                } else {
                    ("✗", "rejected")
                };
                write!(f, "{mark} {task} {word}: {reason}")
            }
            Event::Decomposed { task, into } => write!(f, "{task} → {}", list(into)),
            _ => Ok(()),
        }
    }

    /// Issues, gaps and priorities: the board's own changes.
    fn write_board(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::IssueInvestigated {
                issue,
                tasks,
                reason,
            } => match reason {
                Some(reason) if tasks.is_empty() => write!(f, "{issue}: {reason}"),
                _ => write!(f, "{issue} → {}", list(tasks)),
            },
            Event::IssueKilled { issue, reason, log } => {
                write!(f, "✗ {issue} investigation killed ({reason})")?;
                match log {
                    Some(log) => write!(f, "; log {}", log.display()),
                    None => Ok(()),
                }
            }
            Event::GapsFound { tasks, issues } => {
                write!(f, "gaps: tasks {} · issues {}", list(tasks), list(issues))
            }
            Event::GapAnswered { task, gap, answer } => {
                write!(f, "gap named by {task}'s verifier ({gap}): {answer}")
            }
            Event::Prioritized { order, .. } if order.is_empty() => Ok(()),
            Event::Prioritized { order, .. } => write!(f, "priorities: {}", order.join(", ")),
            Event::IssueDecomposed { issue, into } => write!(f, "{issue} → {}", list(into)),
            _ => Ok(()),
        }
    }

    /// Build mode's plans and specs.
    #[cfg(feature = "specs")]
    fn write_specs(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::PlanWritten {
                spec,
                attempt,
                path,
            } => {
                write!(
                    f,
                    "── {spec} ── plan {} (attempt {attempt})",
                    path.display()
                )
            }
            Event::PlanInvalidated {
                spec,
                reason,
                archived,
            } => write!(
                f,
                "✗ {spec}: plan invalidated ({reason}); kept as {}",
                archived.display()
            ),
            Event::SpecCommitted { spec, commit } => match commit {
                Some(commit) => write!(f, "● {spec} committed {}", &commit[..commit.len().min(10)]),
                None => write!(f, "● {spec} verified (nothing to commit)"),
            },
            Event::SpecsFinished { outcome } => write!(f, "{outcome}"),
            Event::PlanSaved {
                path,
                specs,
                tasks,
                commit,
            } => {
                let (s, t) = (
                    if *specs == 1 { "" } else { "s" },
                    if *tasks == 1 { "" } else { "s" },
                );
                write!(
                    f,
                    "saved {} ({specs} spec{s}, {tasks} task{t})",
                    path.display()
                )?;
                match commit {
                    Some(commit) => write!(f, ", committed {}", &commit[..commit.len().min(10)]),
                    None => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }
}

/// How an agent run ended, in a word or two.
fn exit_word(exit: &AgentExit) -> String {
    match exit {
        AgentExit::Completed => "completed".into(),
        AgentExit::Failed { reason, .. } => format!("failed ({reason})"),
        AgentExit::Stopped => "stopped".into(),
        AgentExit::TimedOut => "timed out".into(),
        AgentExit::Silent { after } => format!(
            "silent for {} (idle timeout)",
            humantime::format_duration(*after)
        ),
        AgentExit::ContextLimit => "context limit".into(),
        AgentExit::RateLimited { .. } => "rate limited".into(),
    }
}

/// `a, b, c`, or `none`.
fn list<T: std::fmt::Display>(items: &[T]) -> String {
    if items.is_empty() {
        return "none".into();
    }
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
