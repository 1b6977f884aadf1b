//! The one way every mode runs an agent: one [`Call`] under the step's deadline, the
//! agent's stop token and the grace, ending in the last run's [`AgentRun`], whose
//! [`AgentExit`] says how the call ended (see [`Caller::call`]).
//!
//! Rate limits and transient failures (overload, 5xx) are ridden out in place: a rate limit
//! is waited out until it resets, a transient failure backs off and runs again; neither is an
//! attempt, and the time waited moves the deadline. [`Caller::ride_out`] tells a [`Waits`]
//! hook about each wait before it starts, so that threads can persist it (the reset time,
//! the failures in a row) or refuse it (a one-off question is not worth a wait of hours).
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tracing::Instrument;

use super::deadline::until_deadline;
use super::error::Error;
use super::guidance::{ForCall, Journal};
use super::logs::{Emitter, unused};
use super::questions::{Question, Questions};
use super::read_only::{Guard, Snapshot};
use super::spend::{self, Budget};
use crate::agent::is_connection_error;
use crate::agent::{
    Agent, AgentChoice, AgentError, AgentEvent, AgentEvents, AgentExit, AgentRequest, AgentRun,
    FailureKind, Role, Usage,
};
use crate::answer::{self, Answer};
use crate::config::ContextThresholds;
use crate::event::Event;
use crate::model::KillReason;
use crate::process::StopToken;
use crate::time;

/// What a caller is told around each wait of [`Caller::ride_out`]: a thread persists it
/// before it starts (so `status` shows the wait, and a process killed while waiting leaves
/// a record that says so) and opens a new run record after it.
pub(crate) trait Waits {
    /// What stops the call instead of waiting.
    type Halt;
    /// Before waiting `wait` after `run`: rate limited ([`AgentExit::RateLimited`]) or
    /// failed for a passing reason (a backoff). An error ends the call with it, without
    /// waiting.
    fn before(&mut self, call: &mut Call, run: &AgentRun, wait: Duration)
    -> Result<(), Self::Halt>;
    /// After the wait, before the call runs again (not after a wait the stop token ended).
    fn after(&mut self, call: &mut Call) -> Result<(), Self::Halt>;
}

/// The construct loop, plan mode and build mode keep nothing of a wait but its event.
struct Unrecorded;

impl Waits for Unrecorded {
    type Halt = Infallible;

    fn before(&mut self, _: &mut Call, _: &AgentRun, _: Duration) -> Result<(), Infallible> {
        Ok(())
    }

    fn after(&mut self, _: &mut Call) -> Result<(), Infallible> {
        Ok(())
    }
}

/// How [`Caller::ride_out`] ended: the call's last run (or the agent that could not run),
/// or the error a [`Waits`] hook stopped it with.
pub(crate) type Ridden<E> = Result<Result<AgentRun, AgentError>, E>;

/// The limits of the agent runs of a caller.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CallLimits {
    /// Wall-clock limit of one agent run (the step's deadline may cut it shorter).
    pub(crate) agent_timeout: Duration,
    /// SIGTERM → SIGKILL.
    pub(crate) grace: Duration,
    /// Context-pressure tiers.
    pub(crate) context: ContextThresholds,
    /// Transient failures ridden out per call.
    pub(crate) transient_retries: u32,
    /// The first wait before such a retry.
    pub(crate) transient_backoff: Duration,
    /// Connection errors only for this long: the agent is stopped as unreachable.
    pub(crate) unreachable_after: Duration,
}

/// One agent call.
#[derive(Clone, Debug)]
pub(crate) struct Call {
    pub(crate) role: Role,
    pub(crate) subject: Option<String>,
    pub(crate) attempt: u32,
    pub(crate) prompt: String,
    /// The step's deadline; waits move it.
    pub(crate) deadline: Instant,
    /// Where the agent writes its transcript; a run made again (after a wait) writes beside
    /// it ([`unused`]).
    pub(crate) log: PathBuf,
    /// The event that announces the call (a task's attempt), sent once, as its first run
    /// starts: after the budget let it, so a run refused at the limit is never announced,
    /// even when another agent's spend reached the limit while this call was prepared.
    pub(crate) announce: Option<Event>,
}

/// The result of a structured call (one retry on an invalid answer already made).
#[derive(Debug)]
pub(crate) enum Structured<T> {
    Answer(T),
    /// The call ended without a usable answer, for this reason.
    Unusable {
        reason: String,
        /// Set when a limit killed the agent (the timeout, the context): in the construct
        /// loop its task or issue goes to DECOMPOSE.
        kill: Option<Kill>,
    },
    Interrupted,
}

/// Why a limit killed an agent, and the killed run's log.
#[derive(Debug)]
pub(crate) struct Kill {
    pub(crate) reason: KillReason,
    /// The clock or the tier that fired, which the kill's note names.
    pub(crate) limit: Limit,
    pub(crate) log: Option<PathBuf>,
}

impl Kill {
    /// The limit that stopped `call`'s `run`, with its log as `caller` names it; `None`
    /// when no limit did.
    pub(crate) fn of(run: &AgentRun, call: &Call, caller: &Caller) -> Option<Kill> {
        let limit = Limit::of(&run.exit, call.deadline)?;
        Some(Kill {
            reason: limit.reason(),
            limit,
            log: run.log_path.as_deref().map(|p| caller.relative(p)),
        })
    }
}

/// Which limit stopped an agent (or a gate): [`KillReason`] as the board records it, with
/// the clock that fired, so that a kill's message names the setting to change.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Limit {
    /// The agent's idle timeout: it printed nothing for this long.
    Idle(Duration),
    /// `agent_timeout`, the wall clock of one agent run.
    Agent,
    /// The step's deadline, `stage_timeout`.
    Stage,
    /// The context kill tier (or a compaction that did not free enough).
    Context,
}

impl Limit {
    /// The limit that ended a run with `exit` under the step's `deadline`; `None` when no
    /// limit did. A wall-clock stop past the deadline is the step's (the agent's timeout
    /// is the smaller of `agent_timeout` and the time left), one before it `agent_timeout`.
    pub(crate) fn of(exit: &AgentExit, deadline: Instant) -> Option<Limit> {
        Some(match exit {
            AgentExit::Silent { after } => Limit::Idle(*after),
            AgentExit::TimedOut if Instant::now() >= deadline => Limit::Stage,
            AgentExit::TimedOut => Limit::Agent,
            AgentExit::ContextLimit => Limit::Context,
            _ => return None,
        })
    }

    /// The kill reason the board records for it.
    pub(crate) fn reason(self) -> KillReason {
        match self {
            Limit::Context => KillReason::ContextLimit,
            Limit::Idle(_) | Limit::Agent | Limit::Stage => KillReason::Timeout,
        }
    }
}

impl<T> Structured<T> {
    fn unusable(reason: String) -> Self {
        Structured::Unusable { reason, kill: None }
    }
}

/// Runs agent calls. Cheap to clone into concurrent verifier jobs.
#[derive(Clone)]
pub(crate) struct Caller {
    agent: Arc<dyn Agent>,
    /// The workspace: where ralph's state is, and where the agent works unless
    /// `work_tree` says otherwise.
    workspace: PathBuf,
    /// Where the agent works, when not in the workspace itself: a task's git work tree.
    work_tree: Option<PathBuf>,
    limits: CallLimits,
    stop: StopToken,
    pub(crate) emitter: Emitter,
    /// The last choice a [`Fallback`](crate::agent::Fallback) chain made in this caller's
    /// calls: which agent took the run, and why; `None` when it made no choice (one agent,
    /// or the first of the chain took every run). A thread keeps it in its record.
    pub(crate) chosen: Arc<Mutex<Option<AgentChoice>>>,
    /// The run-wide limits and the ledger every run's spend goes to; `None` for a caller
    /// no pipeline gave one (a library user's own).
    budget: Option<Budget>,
    /// ralph's own paths in the workspace (relative to it), which a read-only run's check
    /// leaves out: ralph may write them while such a run goes on.
    kept_out: Arc<Vec<String>>,
    /// How its runs are confined.
    sandbox: Arc<super::sandbox::RunSandbox>,
    /// The check of read-only runs ([`read_only`](super::read_only)), set up at the first
    /// one; `None` outside a git repository.
    guard: Arc<tokio::sync::OnceCell<Option<Guard>>>,
    /// Read-only runs found to have changed the work tree, counted over this caller and
    /// its clones: verifiers run at once, and a change found after one of them cannot be
    /// told apart from another's, so every run in flight then fails too.
    breaches: Arc<std::sync::atomic::AtomicU64>,
}

impl Caller {
    pub(crate) fn new(
        agent: Arc<dyn Agent>,
        workspace: impl Into<PathBuf>,
        limits: CallLimits,
        stop: StopToken,
        emitter: Emitter,
        sandbox: Arc<super::sandbox::RunSandbox>,
    ) -> Self {
        Caller {
            sandbox,
            agent,
            workspace: workspace.into(),
            work_tree: None,
            limits,
            stop,
            emitter,
            chosen: Arc::default(),
            budget: None,
            kept_out: Arc::default(),
            guard: Arc::default(),
            breaches: Arc::default(),
        }
    }

    /// This caller with ralph's own paths `kept_out` (relative to the workspace: its state,
    /// its logs, a progress file) left out of the read-only runs' check.
    #[must_use]
    pub(crate) fn keeping_out(mut self, kept_out: Vec<String>) -> Caller {
        self.kept_out = Arc::new(kept_out);
        self.guard = Arc::default();
        self
    }

    /// This caller with every run's spend recorded in `budget`'s ledger, and no run started
    /// once its limits are reached (the call then ends as
    /// [`FailureKind::BudgetExhausted`], which [`fatal`](Self::fatal) turns into
    /// [`Error::BudgetExhausted`]).
    #[must_use]
    pub(crate) fn spending(mut self, budget: Budget) -> Caller {
        if let Err(e) = budget.ledger().settle() {
            self.emitter.emit(&Event::Warning {
                message: format!("the spend restored in the ledger was not written: {e}"),
            });
        }
        self.say_ledger_notice(budget.ledger());
        self.budget = Some(budget);
        self
    }

    /// Says the ledger's warning, if it has one (an edit it found and restored).
    fn say_ledger_notice(&self, ledger: &spend::Ledger) {
        if let Some(message) = ledger.take_notice() {
            self.emitter.emit(&Event::Warning { message });
        }
    }

    /// The limits and the ledger this caller's runs count against, if any.
    pub(crate) fn budget(&self) -> Option<&Budget> {
        self.budget.as_ref()
    }

    /// Whether the run-wide budget is spent: the next agent run would not start (it ends
    /// in [`FailureKind::BudgetExhausted`]), so build mode announces no attempt of a task
    /// (the construct loop's call carries its announcement: [`Call::announce`]).
    #[cfg_attr(not(feature = "specs"), allow(dead_code))]
    pub(crate) fn spent_out(&self) -> bool {
        self.budget.as_ref().is_some_and(Budget::exhausted)
    }

    /// The error of `call`'s run that failed in a way that ends the run (`kind`
    /// [`ends_the_run`](FailureKind::ends_the_run)): no retry can fix it, or the agent cannot reach its API. Names the
    /// agent, what the run was for, and why.
    pub(crate) fn fatal(&self, call: &Call, reason: String, kind: FailureKind) -> Error {
        let agent = self.agent.name().to_owned();
        let (role, subject) = (call.role, call.subject.clone());
        if let (FailureKind::BudgetExhausted, Some(budget)) = (kind, &self.budget) {
            return budget.exhausted_error();
        }
        if kind == FailureKind::Unreachable {
            Error::AgentUnreachable {
                agent,
                role,
                subject,
                reason,
            }
        } else {
            Error::AgentFatal {
                agent,
                role,
                subject,
                reason,
            }
        }
    }

    /// This caller with its agents working in `work_tree` (a task's git work tree) instead
    /// of the workspace; ralph's state and logs stay in the workspace.
    pub(crate) fn in_work_tree(&self, work_tree: PathBuf) -> Caller {
        Caller {
            work_tree: Some(work_tree),
            guard: Arc::default(),
            ..self.clone()
        }
    }

    /// Runs one call to its last run: the agent timeout is the smaller of `agent_timeout`
    /// and the time left to the deadline; at the deadline the agent is asked to stop, and
    /// dropped if it does not within the grace. Rate limits and transient failures are ridden
    /// out (see [`ride_out`](Self::ride_out)). The run's exit says how the call ended:
    ///
    /// - [`AgentExit::Completed`]: a final answer (whatever it says);
    /// - [`AgentExit::Failed`]: never [`FailureKind::Transient`] (those were retried, and
    ///   one that kept failing ends as `Attempt`); the answer of a read-only run that changed
    ///   the work tree is such a failure;
    /// - [`AgentExit::TimedOut`], [`AgentExit::ContextLimit`]: a limit stopped it (the step's
    ///   deadline included), [`AgentExit::kill_reason`];
    /// - [`AgentExit::RateLimited`]: only from a [`Waits`] hook that stops riding out;
    /// - [`AgentExit::Stopped`]: the run was stopped (the stop token: Ctrl+C, SIGTERM,
    ///   SIGHUP). An agent that stopped while nobody asked is a failed attempt.
    ///
    /// # Errors
    ///
    /// [`AgentError`] when the agent could not run at all.
    pub(crate) async fn call(&self, call: &mut Call) -> Result<AgentRun, AgentError> {
        self.call_with(call, None).await
    }

    /// As [`call`](Self::call), asking for an answer matching `schema` (read it with
    /// [`answer::parse`]; [`structured`](Self::structured) also retries an invalid one).
    ///
    /// # Errors
    ///
    /// As [`call`](Self::call).
    pub(crate) async fn call_with(
        &self,
        call: &mut Call,
        schema: Option<serde_json::Value>,
    ) -> Result<AgentRun, AgentError> {
        match self.ride_out(call, schema, &mut Unrecorded).await {
            Ok(ended) => ended,
            Err(never) => match never {},
        }
    }

    /// As [`call_with`](Self::call_with), telling `waits` about each wait: a rate limit is
    /// waited out until it resets; a transient failure backs off (`transient_backoff`,
    /// doubling) and runs again, at most `transient_retries` times, after which the call
    /// ends as a failed `Attempt`. A transient failure for a connection error (the CLI gave
    /// up on an API it cannot reach) backs off the same way, however many times, until the
    /// runs that failed so in a row have lasted `unreachable_after`: then the call ends as
    /// [`FailureKind::Unreachable`], naming the agent and its last error. None of these is
    /// an attempt, and the time waited moves the call's deadline. The stop token ends a wait
    /// with [`AgentExit::Stopped`].
    ///
    /// # Errors
    ///
    /// The error `waits` stopped the call with; inside, [`AgentError`] when the agent could
    /// not run at all.
    pub(crate) async fn ride_out<W: Waits>(
        &self,
        call: &mut Call,
        schema: Option<serde_json::Value>,
        waits: &mut W,
    ) -> Ridden<W::Halt> {
        let mut failures = 0u32;
        // When the first of the runs that failed in a row for a connection error started.
        let mut unreached_since: Option<Instant> = None;
        loop {
            let started = Instant::now();
            let run = match self.run_once(call, schema.clone()).await {
                Ok(run) => run,
                Err(e) => return Ok(Err(e)),
            };
            let unreached = matches!(&run.exit, AgentExit::Failed {
                reason,
                kind: FailureKind::Transient,
            } if is_connection_error(reason));
            if !unreached {
                unreached_since = None;
            }
            let wait = match &run.exit {
                AgentExit::RateLimited { until } => self.rate_limit_wait(*until),
                AgentExit::Failed { reason, .. } if unreached => {
                    let since = *unreached_since.get_or_insert(started);
                    match self.unreached_wait(call, reason, since, failures) {
                        Some(wait) => wait,
                        None => {
                            let reason = self.unreachable(reason);
                            return Ok(Ok(ended(run, reason, FailureKind::Unreachable)));
                        }
                    }
                }
                AgentExit::Failed {
                    reason,
                    kind: FailureKind::Transient,
                } if failures < self.limits.transient_retries => {
                    let wait = time::backoff(self.limits.transient_backoff, failures);
                    self.emitter.emit(&Event::Warning {
                        message: format!(
                            "{} {}: {reason}; retrying in {}",
                            call.role,
                            call.subject.as_deref().unwrap_or("-"),
                            humantime::format_duration(wait)
                        ),
                    });
                    wait
                }
                AgentExit::Failed {
                    reason,
                    kind: FailureKind::Transient,
                } => {
                    let reason = format!("{reason} (still failing after {failures} retries)");
                    return Ok(Ok(ended(run, reason, FailureKind::Attempt)));
                }
                _ => return Ok(Ok(run)),
            };
            if !matches!(run.exit, AgentExit::RateLimited { .. }) {
                failures += 1;
            }
            waits.before(call, &run, wait)?;
            let started = Instant::now();
            if !self.pause(wait).await {
                return Ok(Ok(run.with_exit(AgentExit::Stopped)));
            }
            call.deadline += started.elapsed();
            waits.after(call)?;
        }
    }

    /// The backoff after a run that failed for a connection error, the runs failing so in
    /// a row since `since` (said as a warning); `None` once they have lasted
    /// `unreachable_after`: the agent is unreachable.
    fn unreached_wait(
        &self,
        call: &Call,
        reason: &str,
        since: Instant,
        failures: u32,
    ) -> Option<Duration> {
        let after = self.limits.unreachable_after;
        let left = after
            .checked_sub(since.elapsed())
            .filter(|l| !l.is_zero())?;
        // Not past the unreachable time by more than a second.
        let left = Duration::from_secs(left.as_secs() + 1);
        let wait = time::backoff(self.limits.transient_backoff, failures).min(left);
        self.emitter.emit(&Event::Warning {
            message: format!(
                "{} {}: {reason}; no API exchange for {} of {}; retrying in {}",
                call.role,
                call.subject.as_deref().unwrap_or("-"),
                humantime::format_duration(Duration::from_secs(since.elapsed().as_secs())),
                humantime::format_duration(after),
                humantime::format_duration(wait)
            ),
        });
        Some(wait)
    }

    /// Why the agent is unreachable, after `last` and the others before it.
    fn unreachable(&self, last: &str) -> String {
        format!(
            "{} is unreachable: no successful API exchange for {}, only connection errors; the last: {last}",
            self.agent.name(),
            humantime::format_duration(self.limits.unreachable_after)
        )
    }

    /// One agent run under the deadline.
    async fn run_once(
        &self,
        call: &mut Call,
        schema: Option<serde_json::Value>,
    ) -> Result<AgentRun, AgentError> {
        if let Some(budget) = self.budget.as_ref().filter(|b| b.exhausted()) {
            // Checked before every run: past the limit, nothing more is spent.
            self.emitter.emit(&budget.exhausted_event());
            return Ok(AgentRun::new(AgentExit::Failed {
                reason: budget.exhausted_error().to_string(),
                kind: FailureKind::BudgetExhausted,
            }));
        }
        if let Some(announce) = call.announce.take() {
            self.emitter.emit(&announce);
        }
        let log = unused(&call.log);
        let token = self.stop.child();
        let run_id = spend::run_id();
        let answered = self.answered(call);
        let request = self.request(call, schema, &log, &token, &run_id, answered.as_ref());
        let span = tracing::info_span!(
            target: "ralph",
            "agent",
            role = %call.role,
            subject = call.subject.as_deref().unwrap_or(""),
            attempt = call.attempt,
        );
        let before = self.snapshot(call.role).await;
        let outcome = until_deadline(
            call.deadline,
            &token,
            self.limits.grace,
            self.agent.run(request),
        )
        .instrument(span)
        .await;
        let breach = self.breach(call, before).await;
        let run = match outcome {
            Some(result) => result?,
            None => AgentRun::new(AgentExit::Stopped).with_log_path(&log),
        };
        let (run, priced) = self.priced(run);
        self.say_finished(call, &run);
        self.record_spend(call, &run, run_id, priced);
        let run = self.judged(self.classify(run, call.deadline), breach);
        if let (Some(question), AgentExit::Completed) = (&answered, &run.exit) {
            self.close_question(question);
        }
        self.note_asking_session(call, &run);
        Ok(run)
    }

    /// Notes the CLI session of a run that ended asking a person a question, so that the
    /// answer's call resumes it. A note that cannot be written is a warning: the answer
    /// then goes to a fresh session, with the question and the answer in its prompt.
    fn note_asking_session(&self, call: &Call, run: &AgentRun) {
        let (Some(subject), Some(session)) = (&call.subject, &run.session_id) else {
            return;
        };
        if !call.role.may_ask() || !matches!(run.claim(), crate::agent::Claim::Question(_)) {
            return;
        }
        let questions = Questions::in_state(&super::workspace::state_dir(&self.workspace));
        if let Err(e) = questions.session(subject, session) {
            self.emitter.emit(&Event::Warning {
                message: format!("could not note the session that asked about {subject}: {e}"),
            });
        }
    }

    /// The question `call`'s subject asked and a person answered (`ralph answer`), which
    /// its next call of a role that may ask gets in its prompt. One that cannot be read
    /// is a warning, not the call's end.
    fn answered(&self, call: &Call) -> Option<Question> {
        let subject = call.subject.as_deref().filter(|_| call.role.may_ask())?;
        let questions = Questions::in_state(&super::workspace::state_dir(&self.workspace));
        questions.for_call(subject).unwrap_or_else(|e| {
            self.emitter.emit(&Event::Warning {
                message: format!("could not read the answers of `ralph answer`: {e}"),
            });
            None
        })
    }

    /// Closes `question`: its answer reached an agent that gave a final answer.
    fn close_question(&self, question: &Question) {
        let questions = Questions::in_state(&super::workspace::state_dir(&self.workspace));
        if let Err(e) = questions.given(&question.asked.id) {
            self.emitter.emit(&Event::Warning {
                message: format!(
                    "the answer to {} was given but not marked so; the next call gets it again: {e}",
                    question.asked.id
                ),
            });
        }
    }

    /// The request of one run of `call`, logging to `log`, stopped by `token`, its spend
    /// reported as run `run_id`.
    fn request(
        &self,
        call: &Call,
        schema: Option<serde_json::Value>,
        log: &Path,
        token: &StopToken,
        run_id: &str,
        answered: Option<&Question>,
    ) -> AgentRequest {
        let remaining = call.deadline.saturating_duration_since(Instant::now());
        let works_in = self.work_tree.as_ref().unwrap_or(&self.workspace);
        // What changes least comes first; a person's words last, the guidance the very last.
        let (text, stable_prefix) = crate::prompt::split_stable(&call.prompt);
        let prompt = format!(
            "{text}{}{}",
            answered.map(Question::section).unwrap_or_default(),
            self.guidance(call).section()
        );
        let mut request = AgentRequest::new(call.role, prompt, works_in)
            .attempt(call.attempt)
            .log_path(log)
            .timeout(self.limits.agent_timeout.min(remaining))
            .context(self.limits.context)
            .unreachable_after(self.limits.unreachable_after)
            .stop(token.clone());
        request.events = self.forward_events(call.subject.clone(), self.provisional(call, run_id));
        request.subject = call.subject.clone();
        request.stable_prefix = stable_prefix;
        request.resume = answered.and_then(|q| q.session.clone());
        request.schema = schema;
        request.budget_usd = self.budget.as_ref().and_then(Budget::dollars_left);
        request.sandbox = self.sandbox.agent(works_in, call.role.may_write());
        request
    }

    /// A person's guidance for `call` (`ralph tell`), the prompt's last section; the
    /// pieces given for the first time are announced. Guidance that cannot be read is a
    /// warning, not the call's end.
    fn guidance(&self, call: &Call) -> ForCall {
        let journal = Journal::in_state(&crate::runtime::workspace::state_dir(&self.workspace));
        match journal.for_call(call.subject.as_deref()) {
            Ok(given) => {
                for id in &given.first {
                    self.emitter.emit(&Event::GuidanceGiven {
                        id: id.clone(),
                        subject: call.subject.clone(),
                        role: call.role,
                    });
                }
                given
            }
            Err(e) => {
                self.emitter.emit(&Event::Warning {
                    message: format!("could not read the guidance of `ralph tell`: {e}"),
                });
                ForCall::default()
            }
        }
    }

    /// Says that `call`'s run ended, as the agent reported it.
    fn say_finished(&self, call: &Call, run: &AgentRun) {
        self.emitter.emit(&Event::AgentFinished {
            role: call.role,
            subject: call.subject.clone(),
            exit: run.exit.clone(),
            usage: run.usage,
            duration: run.duration,
            cost_usd: run.cost_usd,
            turns: run.turns,
            session_id: run.session_id.clone(),
            log: run.log_path.as_deref().map(|p| self.relative(p)),
        });
    }

    /// `run` as ralph judges it: the answer of a read-only run that changed the work tree
    /// (`breach`) is not used, and a run's own cap that was what was left of the run-wide
    /// budget means that budget is spent.
    fn judged(&self, run: AgentRun, breach: Option<String>) -> AgentRun {
        match (&run.exit, breach) {
            (AgentExit::Completed, Some(reason)) => ended(run, reason, FailureKind::Attempt),
            (
                AgentExit::Failed {
                    reason,
                    kind: FailureKind::RunBudget,
                },
                _,
            ) if self.budget.as_ref().is_some_and(Budget::exhausted) => {
                let reason = reason.clone();
                ended(run, reason, FailureKind::BudgetExhausted)
            }
            _ => run,
        }
    }

    /// The work tree before a run of `role`, when it is read-only and in a git repository,
    /// with the count of breaches so far.
    async fn snapshot(&self, role: Role) -> Option<(&Guard, Snapshot, u64)> {
        if role.may_write() {
            return None;
        }
        let works_in = self.work_tree.as_ref().unwrap_or(&self.workspace);
        let guard = self
            .guard
            .get_or_init(|| Guard::new(works_in, &self.kept_out))
            .await
            .as_ref()?;
        let breaches = self.breaches.load(std::sync::atomic::Ordering::SeqCst);
        match guard.snapshot().await {
            Ok(snapshot) => Some((guard, snapshot, breaches)),
            Err(e) => {
                self.emitter.emit(&Event::Warning {
                    message: format!(
                        "the work tree was not checked around a read-only run: {}",
                        crate::output::chain(&e)
                    ),
                });
                None
            }
        }
    }

    /// What the read-only run of `call` did to the work tree since `before`, as its failure
    /// (said as a warning too); `None` when it changed nothing, and no read-only run beside
    /// it did.
    async fn breach(&self, call: &Call, before: Option<(&Guard, Snapshot, u64)>) -> Option<String> {
        use std::sync::atomic::Ordering::SeqCst;
        let (guard, before, breaches) = before?;
        let run = format!(
            "the read-only {}{}",
            call.role,
            call.subject
                .as_deref()
                .map(|s| format!(" of {s}"))
                .unwrap_or_default()
        );
        let reason = match guard.check(&before, &run).await {
            Ok(Some(breach)) => {
                self.breaches.fetch_add(1, SeqCst);
                breach.reason(&run)
            }
            Ok(None) if self.breaches.load(SeqCst) == breaches => return None,
            Ok(None) => format!(
                "a read-only run beside {run} changed the work tree while it ran; which one \
                 did cannot be told, so its answer is not used either"
            ),
            Err(e) => format!(
                "{run}: the work tree could not be checked after it: {}",
                crate::output::chain(&e)
            ),
        };
        self.emitter.emit(&Event::Warning {
            message: reason.clone(),
        });
        Some(reason)
    }

    /// Appends the run's spend to the ledger, whatever its end. A ledger that cannot be
    /// written is a warning: the run's work counts more than its accounting.
    /// The final line closes the provisional lines of run `run_id`.
    /// `run` with its cost by the user's `[prices]`, where its agent reported none and
    /// the prices name its model; and whether it was priced so.
    fn priced(&self, mut run: AgentRun) -> (AgentRun, bool) {
        if run.cost_usd.is_some() {
            return (run, false);
        }
        let budget = self.budget.as_ref();
        run.cost_usd = budget.and_then(|b| b.price(run.model.as_deref(), &run.usage));
        let priced = run.cost_usd.is_some();
        (run, priced)
    }

    fn record_spend(&self, call: &Call, run: &AgentRun, run_id: String, priced: bool) {
        let Some(budget) = &self.budget else {
            return;
        };
        let agent = run.agent.as_deref().unwrap_or_else(|| self.agent.name());
        let line = spend::Line {
            run: Some(run_id),
            role: Some(call.role.as_str().to_owned()),
            subject: call.subject.clone(),
            agent: Some(agent.to_owned()),
            priced,
            ..spend::Line::default()
        };
        let recorded = budget
            .ledger()
            .record(spent_line(line, &run.usage, run.cost_usd));
        if let Err(e) = recorded {
            self.emitter.emit(&Event::Warning {
                message: format!("the run's spend was not recorded: {e}"),
            });
        }
        self.say_ledger_notice(budget.ledger());
    }

    /// Where the spend reports of `call`'s run `run_id` go while it runs, and the line they
    /// fill in; `None` without a budget.
    fn provisional(&self, call: &Call, run_id: &str) -> Option<(spend::Ledger, spend::Line)> {
        let ledger = self.budget.as_ref()?.ledger().clone();
        let line = spend::Line {
            run: Some(run_id.to_owned()),
            role: Some(call.role.as_str().to_owned()),
            subject: call.subject.clone(),
            agent: Some(self.agent.name().to_owned()),
            ..spend::Line::default()
        };
        Some((ledger, line))
    }

    /// `run` as the call ends with it: stopped only when the run is (the stop token), timed
    /// out when the deadline stopped it, and failed when it stopped on its own.
    fn classify(&self, run: AgentRun, deadline: Instant) -> AgentRun {
        if self.stop.is_stopped() {
            return run.with_exit(AgentExit::Stopped);
        }
        match run.exit {
            AgentExit::Stopped if Instant::now() >= deadline => run.with_exit(AgentExit::TimedOut),
            // Stopped while neither the user nor the deadline asked: the agent gave up on its
            // own; count it as a failed attempt.
            AgentExit::Stopped => ended(
                run,
                "the agent stopped without an answer".into(),
                FailureKind::Attempt,
            ),
            _ => run,
        }
    }

    /// The agent's events, sent on as [`Event::Agent`]s; a fallback chain's choice is also
    /// recorded for `ralph status` ([`choices`](super::choices)).
    fn forward_events(
        &self,
        subject: Option<String>,
        provisional: Option<(spend::Ledger, spend::Line)>,
    ) -> AgentEvents {
        let emitter = self.emitter.clone();
        let workspace = self.workspace.clone();
        let chosen = Arc::clone(&self.chosen);
        AgentEvents::new(move |detail| {
            // Synced before the event goes on: a kill of ralph from here on loses none of it.
            if let (AgentEvent::Spend { usage, cost_usd }, Some((ledger, line))) =
                (&detail, &provisional)
            {
                let written = ledger.provisional(spent_line(line.clone(), usage, *cost_usd));
                if let Err(e) = written {
                    emitter.emit(&Event::Warning {
                        message: format!("the run's spend so far was not recorded: {e}"),
                    });
                }
                if let Some(message) = ledger.take_notice() {
                    emitter.emit(&Event::Warning { message });
                }
            }
            // A warning is the person's, not a live detail of the run.
            if let AgentEvent::Warning { message } = detail {
                emitter.emit(&Event::Warning { message });
                return;
            }
            if let AgentEvent::AgentChosen { agent, reason } = &detail {
                let choice = AgentChoice::new(agent, subject.clone(), reason);
                *chosen.lock().unwrap_or_else(PoisonError::into_inner) = Some(choice.clone());
                if let Err(e) = super::choices::record(&workspace, choice) {
                    emitter.emit(&Event::Warning {
                        message: format!("the agent choice was not recorded: {e}"),
                    });
                }
            }
            emitter.emit(&Event::Agent {
                subject: subject.clone(),
                detail,
            })
        })
    }

    /// Runs a structured call: the answer is parsed against `T`'s schema and `extra` checks;
    /// an invalid answer is retried once (attempt + 1) with the error shown. Returns the
    /// result and the number of agent runs made.
    ///
    /// # Errors
    ///
    /// [`Error::Agent`] when the agent could not run, [`Error::AgentFatal`] when it failed
    /// in a way no retry can fix.
    pub(crate) async fn structured<T: Answer>(
        &self,
        mut call: Call,
        extra: impl Fn(&T) -> Result<(), String>,
    ) -> Result<(Structured<T>, u32), Error> {
        let mut runs = 0;
        let mut last_error = String::new();
        while runs < 2 {
            runs += 1;
            let run = self.call_with(&mut call, Some(T::schema())).await?;
            if let Some(ended) = self.unanswered(&call, &run)? {
                return Ok((ended, runs));
            }
            let parsed = match refused_question(call.role, &run) {
                Some(refused) => Err(refused),
                None => answer::parse::<T>(&run).and_then(|a| extra(&a).map(|()| a)),
            };
            match parsed {
                Ok(answer) => return Ok((Structured::Answer(answer), runs)),
                Err(e) => {
                    // Said where an observer sees it, not only in the retry's prompt.
                    self.emitter.emit(&Event::AnswerInvalid {
                        role: call.role,
                        subject: call.subject.clone(),
                        attempt: call.attempt,
                        cause: e.clone(),
                    });
                    last_error = e;
                }
            }
            call.attempt += 1;
            call.prompt = format!(
                "{}\n## Your Previous Answer Was Invalid\n\n{last_error}\n\nAnswer again with only a JSON object matching the schema.\n",
                call.prompt
            );
        }
        Ok((
            Structured::unusable(format!("no valid answer after a retry: {last_error}")),
            runs,
        ))
    }

    /// What a structured call ends with when `run` gave no answer to read; `None` when it
    /// did.
    fn unanswered<T>(&self, call: &Call, run: &AgentRun) -> Result<Option<Structured<T>>, Error> {
        let reason = match &run.exit {
            AgentExit::Completed => return Ok(None),
            AgentExit::Stopped => return Ok(Some(Structured::Interrupted)),
            AgentExit::Failed { reason, kind } if kind.ends_the_run() => {
                return Err(self.fatal(call, reason.clone(), *kind));
            }
            AgentExit::Failed { reason, .. } => format!("the agent failed: {reason}"),
            AgentExit::RateLimited { .. } => "the agent is rate limited".into(),
            exit => {
                let kill = Kill::of(run, call, self);
                let why = exit
                    .kill_reason()
                    .map_or_else(|| "stopped".into(), |r| r.to_string());
                let reason = format!("the agent was stopped ({why})");
                return Ok(Some(Structured::Unusable { reason, kill }));
            }
        };
        Ok(Some(Structured::unusable(reason)))
    }

    /// How long to wait for a rate limit to reset (at most a day), reported as an event.
    pub(crate) fn rate_limit_wait(&self, until: SystemTime) -> Duration {
        let wait = time::wait_until(until);
        self.emitter.emit(&Event::RateLimited {
            wait_secs: time::whole_secs(wait),
        });
        wait
    }

    /// Sleeps `wait` unless the run is stopped first (then returns false).
    pub(crate) async fn pause(&self, wait: Duration) -> bool {
        time::sleep(wait, &self.stop).await
    }

    /// `path` relative to the workspace when inside it (as `kill_log` records it).
    pub(crate) fn relative(&self, path: &std::path::Path) -> PathBuf {
        super::workspace::relative(&self.workspace, path)
    }
}

/// Why `run`'s answer is invalid when its `role` gives a verdict and asked a person a
/// question instead (a question marker, or a `question` field): only the roles that make
/// the work may ask ([`Role::may_ask`]).
fn refused_question(role: Role, run: &AgentRun) -> Option<String> {
    if role.may_ask() {
        return None;
    }
    let marker = matches!(
        crate::signal::parse(&run.final_text).task,
        crate::signal::TaskSignal::Question { .. }
    );
    let field = run
        .structured
        .as_ref()
        .is_some_and(|value| value.get("question").is_some());
    (marker || field).then(|| {
        format!(
            "a {role} answer is a verdict and may not ask a person a question: decide from the \
             code and the spec, and answer with the JSON object the schema describes"
        )
    })
}

/// `run` ended by ralph's runtime rather than the agent: failed for `reason`, of `kind`.
fn ended(run: AgentRun, reason: String, kind: FailureKind) -> AgentRun {
    run.with_exit(AgentExit::Failed { reason, kind })
}

/// `line` with the tokens of `usage` and `cost_usd`.
fn spent_line(line: spend::Line, usage: &Usage, cost_usd: Option<f64>) -> spend::Line {
    spend::Line {
        input_tokens: usage.input_tokens,
        output_tokens: usage.output_tokens,
        cache_read_tokens: usage.cache_read_tokens,
        cache_creation_tokens: usage.cache_creation_tokens,
        cost_usd,
        ..line
    }
}
