//! One agent call of a thread, through the runtime's call path, and its run records.
//!
//! Each agent run is a record of its own (`runs/<run-id>/run.json`, transcript beside it).
//! A rate limit or a transient failure is ridden out by the runtime
//! ([`Caller::ride_out`]); around each wait [`RunNotes`] closes the run saying why, keeps
//! the wait in the thread's record (the reset time, the failures in a row) so that status
//! shows it, and opens the next run after it.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::record::{self, RunConfig, RunRecord};
use super::{ThreadError, ThreadRecord, Threads};
use crate::agent::{Agent, AgentError, AgentExit, AgentRun, Role};
use crate::model::KillReason;
use crate::runtime::call::{Call, CallLimits, Caller, Waits};
use crate::runtime::deadline;
use crate::runtime::spend::Budget;
use crate::time;

/// How one agent call ended, for a thread: the call's last run as a thread reads it.
#[allow(clippy::large_enum_variant)] // one per agent call, matched at once
pub(super) enum Ran {
    /// A final answer (whatever it says).
    Answer(AgentRun),
    /// Ended without a usable answer (a failed run, a timeout, the context, transient
    /// failures past the retries): the iteration failed for this reason.
    Failed(String),
    /// No agent of the chain can go on (bad credentials, no program, every one passed
    /// over): no further iteration can help.
    Fatal(String),
    /// Rate limited, and the call does not wait (a one-off question); the reason says
    /// until when. The run record is closed.
    RateLimited(String),
    /// The person interrupted it.
    Interrupted,
}

impl Ran {
    fn of(ended: Result<AgentRun, AgentError>, timeout: std::time::Duration) -> Ran {
        let run = match ended {
            Err(e) => return Ran::Fatal(format!("the agent could not run: {e}")),
            Ok(run) => run,
        };
        match &run.exit {
            AgentExit::Completed => Ran::Answer(run),
            AgentExit::Stopped => Ran::Interrupted,
            // An agent that cannot reach its API is no failure of the thread's work.
            AgentExit::Failed { reason, kind } if kind.ends_the_run() => Ran::Fatal(reason.clone()),
            AgentExit::Failed { reason, .. } => Ran::Failed(format!("the agent failed: {reason}")),
            // Waited out by the runtime; kept total without a panic.
            AgentExit::RateLimited { .. } => Ran::Failed("the agent is rate limited".into()),
            exit if exit.kill_reason() == Some(KillReason::ContextLimit) => {
                Ran::Failed("the agent ran out of context".into())
            }
            _ => Ran::Failed(format!(
                "timed out after {}",
                humantime::format_duration(timeout)
            )),
        }
    }
}

/// What a thread asks of an agent in one call.
pub(super) struct Request {
    pub(super) role: Role,
    /// The loop's iteration, as the run record keeps it (0 outside the loop).
    pub(super) iteration: u32,
    /// The request's attempt number.
    pub(super) attempt: u32,
    pub(super) prompt: String,
    /// The schema of a structured answer.
    pub(super) schema: Option<serde_json::Value>,
    /// Whether a rate limit is waited out (the loop) or ends the call (a one-off question
    /// is not worth holding a person for hours).
    pub(super) patient: bool,
}

impl Request {
    /// A run of the loop's own kind (an iteration, or the polish after it): a build, its
    /// attempt numbered as its iteration, rate limits waited out.
    pub(super) fn work(iteration: u32, prompt: String) -> Self {
        Request {
            role: Role::Build,
            iteration,
            attempt: iteration,
            prompt,
            schema: None,
            patient: true,
        }
    }
}

/// A call refused before any run started: the run-wide budget is spent. No run record was
/// opened, so nothing may name one; the reason says what was spent against which limit.
pub(super) struct Refused(pub(super) String);

/// A finished call: how it ended and its last run record.
pub(super) struct Called {
    pub(super) run_id: String,
    pub(super) ran: Ran,
    /// False when the run record is already closed (a wait closed it, and the stop token
    /// ended the wait; or the call did not wait for a rate limit).
    open: bool,
}

/// Why [`RunNotes`] stopped a call instead of letting it wait.
enum Stop {
    /// Saving the record failed.
    Failed(ThreadError),
    /// An impatient call was rate limited; the reason says until when.
    RateLimited(String),
}

/// The [`Waits`] hook of a thread's call: before a wait the run is closed saying why and
/// the wait is saved in the thread's record; after it the next run is opened.
struct RunNotes<'a> {
    threads: &'a Threads,
    /// Checked before the next run is opened: a run the budget refuses gets no record.
    budget: Budget,
    record: &'a mut ThreadRecord,
    run_id: String,
    iteration: u32,
    role: Role,
    open: bool,
    patient: bool,
}

impl RunNotes<'_> {
    fn close(&mut self, outcome: &str) -> Result<(), Stop> {
        self.open = false;
        self.threads
            .close_run(&self.run_id, outcome)
            .map_err(Stop::Failed)
    }
}

impl Waits for RunNotes<'_> {
    type Halt = Stop;

    fn before(&mut self, _: &mut Call, run: &AgentRun, wait: Duration) -> Result<(), Stop> {
        let outcome = match &run.exit {
            AgentExit::RateLimited { until } if !self.patient => {
                let reason = format!("the agent is rate limited until {}", stamp(*until));
                self.close(&format!("failed: {reason}"))?;
                return Err(Stop::RateLimited(reason));
            }
            AgentExit::RateLimited { .. } => {
                let resets = stamp(SystemTime::now() + wait);
                self.record.rate_limited_until = Some(resets.clone());
                format!(
                    "rate limited: resets at {resets}, waiting {}s",
                    time::whole_secs(wait)
                )
            }
            exit => {
                // The runtime backs off after a transient failure only.
                self.record.transient_failures += 1;
                let reason = match exit {
                    AgentExit::Failed { reason, .. } => reason.as_str(),
                    _ => "no answer",
                };
                format!("failed (transient): {reason}")
            }
        };
        self.close(&outcome)?;
        self.threads.save(self.record).map_err(Stop::Failed)
    }

    fn after(&mut self, call: &mut Call) -> Result<(), Stop> {
        self.record.rate_limited_until = None;
        if self.budget.exhausted() {
            // The runtime refuses the next run (and says so): the call's last run stays
            // the one just closed.
            return Ok(());
        }
        self.run_id = self
            .threads
            .open_run(self.record, self.iteration, self.role)
            .map_err(Stop::Failed)?;
        self.open = true;
        call.log = self.threads.run_dir(&self.run_id).join("output.log");
        Ok(())
    }
}

impl Threads {
    /// The limits of the calls of a thread with `config`: the workspace's (`grace`,
    /// `[context]`, `transient_backoff`, `unreachable_after`), with the thread's agent timeout and retries.
    fn limits(&self, config: &RunConfig) -> CallLimits {
        CallLimits {
            agent_timeout: config.agent_timeout,
            transient_retries: config.transient_retries,
            ..self.ctx.limits()
        }
    }

    /// One call of `agent` (a run, and the runs that ride out its rate limits and transient
    /// failures), under the thread's agent timeout and the stop token. Which agent of a
    /// fallback chain took it, and why, goes to the record. [`Refused`] when the run-wide
    /// budget is already spent: no run starts and no run record is opened (the
    /// [`BudgetExhausted`](crate::Event::BudgetExhausted) event says so).
    pub(super) async fn call(
        &self,
        agent: &Arc<dyn Agent>,
        record: &mut ThreadRecord,
        request: Request,
    ) -> Result<Result<Called, Refused>, ThreadError> {
        let budget = self.budget(&record.id)?;
        if budget.exhausted() {
            // Checked before the record is opened, not only by the runtime before the
            // run: a record of a run that never started would be the thread's "last run".
            self.emitter.emit(&budget.exhausted_event());
            return Ok(Err(Refused(budget.exhausted_error().to_string())));
        }
        let run_id = self.open_run(record, request.iteration, request.role)?;
        // `log_files_kept` holds for threads' transcripts too; their records stay.
        crate::runtime::logs::prune_matching(
            &self.root.join("runs"),
            self.ctx.config.log_files_kept,
            |path| path.file_name().is_some_and(|name| name == "output.log"),
        );
        let timeout = record.config.agent_timeout;
        let caller = Caller::new(
            Arc::clone(agent),
            &self.ctx.workspace,
            self.limits(&record.config),
            self.ctx.stop.clone(),
            self.emitter.clone(),
            self.ctx.sandbox.clone(),
        )
        .keeping_out(self.ctx.own_paths())
        .spending(budget.clone());
        let mut call = Call {
            announce: None,
            role: request.role,
            subject: Some(record.id.clone()),
            attempt: request.attempt,
            prompt: request.prompt,
            deadline: deadline::after(timeout),
            log: self.run_dir(&run_id).join("output.log"),
        };
        // Counted by the waits of this call (`RunNotes::before`), from none.
        record.transient_failures = 0;
        let mut notes = RunNotes {
            threads: self,
            budget,
            record,
            run_id,
            iteration: request.iteration,
            role: request.role,
            open: true,
            patient: request.patient,
        };
        let ridden = caller.ride_out(&mut call, request.schema, &mut notes).await;
        let (run_id, open) = (notes.run_id, notes.open);
        record.transient_failures = 0;
        record.rate_limited_until = None;
        let chosen = caller
            .chosen
            .lock()
            .map_or_else(|e| e.into_inner().clone(), |c| c.clone());
        if let Some(choice) = chosen {
            record.current_agent = Some(choice.agent);
            record.agent_reason = Some(choice.reason);
        }
        let ran = match ridden {
            Ok(ended) => {
                if let Ok(run) = &ended
                    && run.exit == AgentExit::Completed
                {
                    keep_answer(&call.log, run);
                }
                Ran::of(ended, timeout)
            }
            Err(Stop::RateLimited(reason)) => Ran::RateLimited(reason),
            Err(Stop::Failed(e)) => return Err(e),
        };
        Ok(Ok(Called { run_id, ran, open }))
    }

    /// Closes `called`'s last run with `outcome`, unless a wait already closed it.
    pub(super) fn close(&self, called: &Called, outcome: &str) -> Result<(), ThreadError> {
        match called.open {
            true => self.close_run(&called.run_id, outcome),
            false => Ok(()),
        }
    }

    /// Numbers, records and saves a new run; returns its id.
    pub(super) fn open_run(
        &self,
        record: &mut ThreadRecord,
        iteration: u32,
        role: Role,
    ) -> Result<String, ThreadError> {
        record.runs += 1;
        let id = format!("{}-r{}", record.id, record.runs);
        let run = RunRecord {
            id: id.clone(),
            thread: record.id.clone(),
            iteration,
            role: role.as_str().to_owned(),
            started_at: jiff::Timestamp::now().to_string(),
            ended_at: None,
            outcome: None,
        };
        record::write_json(&self.run_dir(&id).join("run.json"), &run)?;
        record.current_run_id = Some(id.clone());
        self.save(record)?;
        Ok(id)
    }

    pub(super) fn close_run(&self, run_id: &str, outcome: &str) -> Result<(), ThreadError> {
        let path = self.run_dir(run_id).join("run.json");
        let mut run = record::load_run(&path)?;
        run.ended_at = Some(jiff::Timestamp::now().to_string());
        run.outcome = Some(outcome.to_owned());
        record::write_json(&path, &run)
    }
}

/// Agents that keep no transcript leave `output.log` missing: keep at least the answer.
// A log for people, not state: losing it in a crash loses nothing a run reads.
#[allow(clippy::disallowed_methods)]
fn keep_answer(log: &Path, run: &AgentRun) {
    if !log.exists() {
        // The run record and the attempt hold the outcome; the log is for people.
        let _ = std::fs::write(log, &run.final_text);
    }
}

/// `time` as RFC 3339, or "an unknown time".
fn stamp(time: SystemTime) -> String {
    jiff::Timestamp::try_from(time).map_or_else(|_| "an unknown time".to_owned(), |t| t.to_string())
}

impl Threads {
    /// The run-wide limits over thread `id`'s spend (its scope `thread/<id>`).
    pub(super) fn budget(&self, id: &str) -> Result<crate::runtime::spend::Budget, ThreadError> {
        self.ctx.budget(&spend_scope(id)).map_err(ledger_error)
    }
}

/// A thread's scope in the spend ledger.
pub(super) fn spend_scope(id: &str) -> String {
    format!("thread/{id}")
}

/// A ledger that cannot be read or written, as a thread's error names it.
pub(super) fn ledger_error(e: crate::runtime::error::Error) -> ThreadError {
    match e {
        crate::runtime::error::Error::Io { path, source } => ThreadError::Io {
            path,
            error: source,
        },
        other => ThreadError::Io {
            path: ".ralph/spend.jsonl".into(),
            error: std::io::Error::other(other.to_string()),
        },
    }
}
