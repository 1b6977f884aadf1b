//! The Running/Verifying loop of a thread: an iteration loop inside the thread's phases.
//!
//! Each iteration is a fresh agent run (a new process for a real agent) with the spec, the
//! iteration number, the last few attempts and the criteria that failed last time. The
//! model claims done by printing the promise tag as the last non-empty line of its final
//! answer (the rules of [`signal::last_line`](crate::signal::last_line)); then every
//! criterion is checked — commands by a real shell, the rest by a read-only verifier agent.
//! Everything is saved before the next side effect, so an interrupt loses nothing: the
//! interrupted iteration runs again on resume.

use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use serde::Serialize;

use super::phase::Phase;
use super::record::{self, IterationRecord, RECENT_ATTEMPTS, RunRecord, StuckReport};
use super::spec::{Criterion, ThreadSpec};
use super::{KEEP, ThreadError, ThreadRecord, Threads};
use crate::agent::{Agent, AgentRun, FailureKind, Role};
use crate::answer::{self, Answer, VerdictKind, VerifyAnswer};
use crate::context::ContextThresholds;
use crate::gate::ShellGate;
use crate::model::{KillReason, TaskId};
use crate::output::truncate_middle;
use crate::runtime::call::{Call, Caller, Ending, Limits, Policy};
use crate::runtime::deadline;
use crate::runtime::gates::{self, GateEnd};
use crate::time;

/// How much of a final answer an attempt keeps.
const OUTPUT_KEPT: usize = 4000;
/// How much of a failed check's output its failure message keeps.
const CHECK_OUTPUT_KEPT: usize = 1500;

/// How one agent run ended, for the loop: the runtime's [`Ending`] as a thread reads it.
#[allow(clippy::large_enum_variant)] // one per agent run, matched at once
pub(super) enum Ran {
    /// A final answer (whatever it says).
    Answer(AgentRun),
    /// Ended without a usable answer; the iteration failed for this reason.
    Failed(String),
    /// A passing fault (overload, 5xx): the iteration is tried again, not counted.
    Transient(String),
    /// Failed in a way no further iteration of this agent can fix (bad credentials, no
    /// agent): the next agent takes over.
    Fatal(String),
    /// The agent's usage limit was hit; it resets at this time. Not an iteration: the same
    /// run is made again once the limit resets.
    RateLimited(SystemTime),
    /// The person interrupted it.
    Interrupted,
}

impl Ran {
    fn of(ended: Result<Ending, crate::agent::AgentError>, timeout: std::time::Duration) -> Ran {
        let timed_out = || format!("timed out after {}", humantime::format_duration(timeout));
        match ended {
            Err(e) => Ran::Fatal(format!("the agent could not run: {e}")),
            Ok(Ending::Answer(run)) => Ran::Answer(run),
            Ok(Ending::Interrupted) => Ran::Interrupted,
            Ok(Ending::RateLimited(until)) => Ran::RateLimited(until),
            Ok(Ending::Failed {
                reason,
                kind: FailureKind::Fatal,
            }) => Ran::Fatal(reason),
            Ok(Ending::Failed {
                reason,
                kind: FailureKind::Transient,
            }) => Ran::Transient(reason),
            Ok(Ending::Failed { reason, .. }) => Ran::Failed(format!("the agent failed: {reason}")),
            Ok(Ending::Killed {
                reason: KillReason::ContextLimit,
                ..
            }) => Ran::Failed("the agent ran out of context".into()),
            Ok(Ending::Killed { .. }) => Ran::Failed(timed_out()),
        }
    }
}

/// What checking the criteria found.
enum Checked {
    Results {
        passed: Vec<String>,
        failed: Vec<String>,
    },
    Interrupted,
}

impl Threads {
    /// Runs the loop from the Running phase the record is in until it needs a person.
    pub(super) async fn drive(&self, record: ThreadRecord) -> Result<ThreadRecord, ThreadError> {
        let id = record.id.clone();
        let result = self.drive_loop(record).await;
        // The loop is over, whichever way: no process runs this thread any more.
        let mut record = match result {
            Ok(record) => record,
            Err(e) => {
                if let Ok(mut record) = self.get(&id) {
                    record.runner_pid = None;
                    record.rate_limited_until = None;
                    let _ = self.save(&mut record);
                }
                return Err(e);
            }
        };
        record.runner_pid = None;
        record.rate_limited_until = None;
        self.save(&mut record)?;
        Ok(record)
    }

    async fn drive_loop(&self, mut record: ThreadRecord) -> Result<ThreadRecord, ThreadError> {
        let spec_text = self.spec_text(&record)?;
        let spec = ThreadSpec::parse(&spec_text).map_err(|e| ThreadError::Corrupt {
            path: self.spec_path(&record.id, record.spec_version),
            message: e.to_string(),
        })?;
        loop {
            let Phase::Running { iteration } = record.phase else {
                return Ok(record);
            };
            if self.stop.is_cancelled() {
                self.pause(&mut record, iteration, &spec)?;
                return Ok(record);
            }
            if iteration > record.iteration_limit {
                let reason = max_reason(&record, spec.criteria.len());
                self.stuck(&mut record, reason).await?;
                return Ok(record);
            }
            self.iteration(&mut record, iteration, &spec, &spec_text)
                .await?;
        }
    }

    /// One iteration: the agent run, then verification when it claims done.
    async fn iteration(
        &self,
        record: &mut ThreadRecord,
        iteration: u32,
        spec: &ThreadSpec,
        spec_text: &str,
    ) -> Result<(), ThreadError> {
        let prompt = self.prompts.render(
            "thread",
            &self.build_context(record, iteration, spec, spec_text),
        )?;
        let (_, agent) = self.current_agent(record)?;
        let run_id = self.open_run(record, iteration, Role::Build)?;
        let ran = self
            .call(
                &agent,
                record,
                &run_id,
                Role::Build,
                iteration,
                prompt,
                None,
            )
            .await;
        // A rate limit is not a failure of the agent: it leaves the count of transient
        // failures in a row as it was.
        if !matches!(ran, Ran::Transient(_) | Ran::RateLimited(_)) {
            record.transient_failures = 0;
        }
        let (summary, passed, failed, output) = match ran {
            Ran::Interrupted => {
                self.close_run(&run_id, "interrupted")?;
                return self.pause(record, iteration, spec);
            }
            Ran::RateLimited(until) => {
                // The same iteration again once the limit resets; the phase is unchanged.
                if !self.wait_out_rate_limit(record, &run_id, until).await? {
                    return self.pause(record, iteration, spec);
                }
                return Ok(());
            }
            Ran::Fatal(reason) => {
                self.close_run(&run_id, &format!("failed: {reason}"))?;
                return self.fall_back(record, reason).await;
            }
            Ran::Transient(reason) => {
                self.close_run(&run_id, &format!("failed (transient): {reason}"))?;
                record.transient_failures += 1;
                if record.transient_failures <= record.config.transient_retries {
                    // The same iteration again, with the same agent, after a backoff that
                    // doubles with each failure in a row.
                    self.save(record)?;
                    let wait = time::backoff(
                        self.options.transient_backoff,
                        record.transient_failures - 1,
                    );
                    if !time::sleep(wait, &self.stop).await {
                        return self.pause(record, iteration, spec);
                    }
                    return Ok(());
                }
                let why = format!(
                    "{reason} ({} transient failures in a row)",
                    record.transient_failures
                );
                return self.fall_back(record, why).await;
            }
            Ran::Failed(reason) => {
                self.close_run(&run_id, &reason)?;
                (reason, Vec::new(), Vec::new(), String::new())
            }
            Ran::Answer(run)
                if crate::signal::last_line(&run.final_text) == Some(spec.promise.as_str()) =>
            {
                self.close_run(&run_id, "completed: claimed done")?;
                self.advance(record, Phase::Verifying { iteration })?;
                match self
                    .check_criteria(record, iteration, spec, spec_text)
                    .await?
                {
                    Checked::Interrupted => {
                        // Verification did not finish: the claim is checked again on resume.
                        self.advance(record, Phase::Running { iteration })?;
                        return self.pause(record, iteration, spec);
                    }
                    Checked::Results { passed, failed } => {
                        let summary = format!(
                            "claimed done; {} of {} criteria passed",
                            passed.len(),
                            spec.criteria.len()
                        );
                        (summary, passed, failed, run.final_text)
                    }
                }
            }
            Ran::Answer(run) => {
                self.close_run(&run_id, "completed: no claim")?;
                let summary = format!(
                    "no claim of done: the last line of the answer was not `{}`",
                    spec.promise
                );
                (summary, Vec::new(), Vec::new(), run.final_text)
            }
        };
        let verified = record.phase.kind() == super::phase::PhaseKind::Verifying;
        let all_passed = verified && failed.is_empty();
        self.remember(
            record,
            IterationRecord {
                iteration,
                run_id,
                summary,
                passed,
                failed,
                output: truncate_middle(&output, OUTPUT_KEPT),
            },
        );
        if all_passed {
            self.advance(record, Phase::Implemented)?;
            if self.options.quick {
                self.advance(
                    record,
                    Phase::PendingReview {
                        recommend_approve: true,
                    },
                )?;
            }
            return Ok(());
        }
        if iteration >= record.iteration_limit {
            let reason = max_reason(record, spec.criteria.len());
            return self.stuck(record, reason).await;
        }
        self.advance(
            record,
            Phase::Running {
                iteration: iteration + 1,
            },
        )
    }

    /// The agent the loop runs with now, and its name.
    pub(super) fn current_agent(&self, record: &ThreadRecord) -> Result<super::Named, ThreadError> {
        let chain = self.record_chain(record)?;
        let index = record
            .current_agent
            .as_ref()
            .and_then(|name| chain.iter().position(|(n, _)| n == name))
            .unwrap_or(0);
        Ok(chain[index].clone())
    }

    /// Gives up the current agent for `why`: the next one takes the same iteration over,
    /// or, when none is left, the thread is Stuck with every agent's reason.
    async fn fall_back(&self, record: &mut ThreadRecord, why: String) -> Result<(), ThreadError> {
        let chain = self.record_chain(record)?;
        let (name, _) = self.current_agent(record)?;
        record.exhausted.push(format!("{name}: {why}"));
        record.transient_failures = 0;
        let next = chain
            .iter()
            .position(|(n, _)| *n == name)
            .and_then(|i| chain.get(i + 1));
        if let Some((next, _)) = next {
            record.current_agent = Some(next.clone());
            return self.save(record);
        }
        let reason = format!(
            "Stopped: all agents exhausted ({})",
            record.exhausted.join("; ")
        );
        self.stuck(record, reason).await
    }

    /// Closes `run_id` as rate limited and waits until `until` (at most a day), with the
    /// reset time in the record ([`ThreadRecord::rate_limited_until`]) meanwhile so that
    /// status shows the wait. Returns false when the stop token ended the wait.
    async fn wait_out_rate_limit(
        &self,
        record: &mut ThreadRecord,
        run_id: &str,
        until: SystemTime,
    ) -> Result<bool, ThreadError> {
        let wait = time::wait_until(until);
        let resets = jiff::Timestamp::try_from(SystemTime::now() + wait)
            .map_or_else(|_| "unknown".to_owned(), |t| t.to_string());
        self.close_run(
            run_id,
            &format!(
                "rate limited: resets at {resets}, waiting {}s",
                time::whole_secs(wait)
            ),
        )?;
        record.rate_limited_until = Some(resets);
        self.save(record)?;
        let waited = time::sleep(wait, &self.stop).await;
        record.rate_limited_until = None;
        self.save(record)?;
        Ok(waited)
    }

    fn build_context(
        &self,
        record: &ThreadRecord,
        iteration: u32,
        spec: &ThreadSpec,
        spec_text: &str,
    ) -> serde_json::Value {
        #[derive(Serialize)]
        struct SpecCtx<'a> {
            name: &'a str,
            text: &'a str,
        }
        #[derive(Serialize)]
        struct Ctx<'a> {
            spec: SpecCtx<'a>,
            title: &'a str,
            iteration: u32,
            max_iterations: u32,
            promise: &'a str,
            attempts: &'a [IterationRecord],
            failed: &'a [String],
        }
        let ctx = Ctx {
            spec: SpecCtx {
                name: &record.title,
                text: spec_text,
            },
            title: &record.title,
            iteration,
            max_iterations: record.iteration_limit,
            promise: &spec.promise,
            attempts: &record.attempts,
            failed: record.attempts.last().map_or(&[], |a| a.failed.as_slice()),
        };
        serde_json::to_value(ctx).unwrap_or(serde_json::Value::Null)
    }

    /// Keeps `attempt` among the last [`RECENT_ATTEMPTS`], and as the closest if it passed
    /// more criteria than any before.
    fn remember(&self, record: &mut ThreadRecord, attempt: IterationRecord) {
        let closer = record.closest.as_ref().is_none_or(|c| {
            attempt.passed.len() > c.passed.len() || c.passed.is_empty() && c.output.is_empty()
        });
        if closer {
            record.closest = Some(attempt.clone());
        }
        record.attempts.push(attempt);
        let excess = record.attempts.len().saturating_sub(RECENT_ATTEMPTS);
        record.attempts.drain(..excess);
    }

    /// Running → Paused at `iteration`, saved.
    fn pause(
        &self,
        record: &mut ThreadRecord,
        iteration: u32,
        spec: &ThreadSpec,
    ) -> Result<(), ThreadError> {
        let criteria_passing = record.attempts.last().map_or(0, |a| a.passed.len());
        self.advance(
            record,
            Phase::Paused {
                iteration,
                criteria_passing,
                criteria_total: spec.criteria.len(),
            },
        )
    }

    /// → Stuck, with the report seed 001 asks for.
    async fn stuck(&self, record: &mut ThreadRecord, reason: String) -> Result<(), ThreadError> {
        let diff = match &record.baseline {
            Some(b) => self
                .git()
                .diff_from(&b.commit_sha, KEEP)
                .await
                .unwrap_or_else(|e| format!("(no diff: {e})")),
            None => String::new(),
        };
        let basis = record.closest.as_ref().or(record.attempts.last());
        let iterations = match record.phase {
            Phase::Running { iteration } | Phase::Verifying { iteration } => {
                iteration.min(record.iteration_limit)
            }
            _ => record.iteration_limit,
        };
        record.stuck = Some(StuckReport {
            reason: reason.clone(),
            spec_version: record.spec_version,
            iterations,
            passed: basis.map(|a| a.passed.clone()).unwrap_or_default(),
            failed: basis.map(|a| a.failed.clone()).unwrap_or_default(),
            closest: record.closest.clone(),
            diff,
        });
        self.advance(record, Phase::Stuck { reason })
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

    /// One agent run through the runtime's call path, under the agent timeout and the stop
    /// token, with rate limits and transient failures handed back: the thread decides
    /// (wait, back off, or fall back to its next agent).
    #[allow(clippy::too_many_arguments)] // one private call site per role
    pub(super) async fn call(
        &self,
        agent: &Arc<dyn Agent>,
        record: &ThreadRecord,
        run_id: &str,
        role: Role,
        iteration: u32,
        prompt: String,
        schema: Option<serde_json::Value>,
    ) -> Ran {
        let log = self.run_dir(run_id).join("output.log");
        let timeout = record.config.agent_timeout;
        let limits = Limits {
            agent_timeout: timeout,
            grace: self.options.grace,
            context: ContextThresholds::default(),
            transient_retries: 0,
            transient_backoff: self.options.transient_backoff,
        };
        let caller = Caller::new(
            Arc::clone(agent),
            &self.workspace,
            limits,
            Policy::HandBack,
            self.stop.clone(),
            self.emitter.clone(),
        );
        let mut call = Call {
            role,
            subject: Some(record.id.clone()),
            attempt: iteration,
            prompt,
            deadline: deadline::after(timeout),
            log: log.clone(),
        };
        let ended = caller.call_with(&mut call, schema).await;
        if let Ok(Ending::Answer(run)) = &ended {
            keep_answer(&log, run);
        }
        Ran::of(ended, timeout)
    }

    /// Checks every criterion: commands in a real shell, the rest by a read-only verifier.
    async fn check_criteria(
        &self,
        record: &mut ThreadRecord,
        iteration: u32,
        spec: &ThreadSpec,
        spec_text: &str,
    ) -> Result<Checked, ThreadError> {
        let mut passed = Vec::new();
        let mut failed = Vec::new();
        for (i, criterion) in spec.criteria.iter().enumerate() {
            let verdict = match &criterion.command {
                Some(command) => self.check_command(record, iteration, i, command).await,
                None => {
                    self.check_by_verifier(record, iteration, criterion, spec_text)
                        .await?
                }
            };
            match verdict {
                None => return Ok(Checked::Interrupted),
                Some(Ok(())) => passed.push(criterion.text.clone()),
                Some(Err(why)) => failed.push(format!("{}: {why}", criterion.text)),
            }
        }
        Ok(Checked::Results { passed, failed })
    }

    /// `None` when interrupted; `Err(why)` when the command failed. Run through the
    /// runtime's gate path: a `ShellGate` per criterion.
    async fn check_command(
        &self,
        record: &ThreadRecord,
        iteration: u32,
        index: usize,
        command: &str,
    ) -> Option<Result<(), String>> {
        let timeout = record.config.check_timeout;
        let gate = ShellGate::new(format!("criterion-{}", index + 1), command)
            .timeout(timeout)
            .grace(self.options.grace);
        let task = TaskId::new(record.id.as_str());
        let run = gates::GateRun {
            workspace: &self.workspace,
            stop: &self.stop,
            grace: self.options.grace,
            // The gate's own timeout comes first; the deadline is only the backstop.
            deadline: deadline::after(deadline::backstop(timeout)),
            emitter: &self.emitter,
            task: &task,
            task_name: &record.title,
            attempt: iteration,
        };
        Some(match gates::check_one(&gate, run, None).await {
            Ok(GateEnd::Interrupted) => return None,
            Ok(GateEnd::TimedOut) => Err(format!(
                "timed out after {}",
                humantime::format_duration(timeout)
            )),
            Ok(GateEnd::Report(report)) if report.status.passed() => Ok(()),
            Ok(GateEnd::Report(report)) => {
                let output = report.output.to_string();
                let output = output.trim();
                Err(if output.is_empty() {
                    report.status.to_string()
                } else {
                    format!(
                        "{}: {}",
                        report.status,
                        truncate_middle(output, CHECK_OUTPUT_KEPT)
                    )
                })
            }
            Err(e) => Err(format!("`{command}` could not run: {e}")),
        })
    }

    async fn check_by_verifier(
        &self,
        record: &mut ThreadRecord,
        iteration: u32,
        criterion: &Criterion,
        spec_text: &str,
    ) -> Result<Option<Result<(), String>>, ThreadError> {
        #[derive(Serialize)]
        struct Ctx<'a> {
            spec: serde_json::Value,
            title: &'a str,
            criterion: &'a str,
        }
        let prompt = self.prompts.render(
            "thread_verify",
            &Ctx {
                spec: serde_json::json!({"name": record.title, "text": spec_text}),
                title: &record.title,
                criterion: &criterion.text,
            },
        )?;
        let (_, agent) = self.current_agent(record)?;
        let (run_id, ran) = loop {
            let run_id = self.open_run(record, iteration, Role::Verify)?;
            let ran = self
                .call(
                    &agent,
                    record,
                    &run_id,
                    Role::Verify,
                    iteration,
                    prompt.clone(),
                    Some(VerifyAnswer::schema()),
                )
                .await;
            match ran {
                Ran::RateLimited(until) => {
                    if !self.wait_out_rate_limit(record, &run_id, until).await? {
                        return Ok(None);
                    }
                }
                ran => break (run_id, ran),
            }
        };
        let verdict = match ran {
            Ran::Interrupted => {
                self.close_run(&run_id, "interrupted")?;
                return Ok(None);
            }
            // Waited out above; kept total without a panic.
            Ran::RateLimited(_) => Err("the verifier was rate limited".to_owned()),
            Ran::Failed(reason) | Ran::Transient(reason) | Ran::Fatal(reason) => {
                Err(format!("the verifier failed: {reason}"))
            }
            Ran::Answer(run) => match answer::parse::<VerifyAnswer>(&run) {
                Ok(a) if a.verdict == VerdictKind::Accept => Ok(()),
                Ok(a) => Err(format!("the verifier rejected it: {}", a.reason)),
                Err(e) => Err(format!("the verifier gave no usable verdict: {e}")),
            },
        };
        self.close_run(
            &run_id,
            match &verdict {
                Ok(()) => "completed: accept",
                Err(_) => "completed: reject",
            },
        )?;
        Ok(Some(verdict))
    }
}

/// Agents that keep no transcript leave `output.log` missing: keep at least the answer.
fn keep_answer(log: &Path, run: &AgentRun) {
    if !log.exists() {
        // The run record and the attempt hold the outcome; the log is for people.
        let _ = std::fs::write(log, &run.final_text);
    }
}

/// Seed 003's pitfall 4: say why the loop stopped and what is left.
fn max_reason(record: &ThreadRecord, total: usize) -> String {
    let passed = record
        .closest
        .as_ref()
        .or(record.attempts.last())
        .map_or(0, |a| a.passed.len());
    format!(
        "Stopped: max iterations ({}) reached without every criterion passing; criteria remaining: {} of {total}",
        record.config.max_iterations,
        total.saturating_sub(passed)
    )
}
