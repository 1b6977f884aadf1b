//! The Running/Verifying loop of a thread: an iteration loop inside the thread's phases.
//!
//! Each iteration is a fresh agent run (a new process for a real agent) with the spec, the
//! iteration number, the last few attempts, the criteria that failed last time and the
//! reviewer's feedback of a send-back. The model claims done by printing the promise tag as
//! the last non-empty line of its final answer (the rules of
//! [`signal::last_line`](crate::signal::last_line)); then every criterion is checked
//! ([`criteria`](super::criteria)). Everything is saved before the next side effect, so an
//! interrupt loses nothing: the interrupted iteration runs again on resume.

use serde::Serialize;

use super::LoopAgents;
use super::call::{Ran, Refused, Request};
use super::criteria::CriteriaChecked;
use super::phase::{Phase, PhaseKind};
use super::record::{IterationRecord, RECENT_ATTEMPTS, StuckReport};
use super::spec::ThreadSpec;
use super::{ThreadError, ThreadRecord, Threads};
use crate::output::truncate_middle;
use crate::runtime::workspace::{RunLock, stop_asked};

/// How much of a final answer an attempt keeps.
const OUTPUT_KEPT: usize = 4000;

/// What an iteration's run came to, before the thread moves on.
enum IterationEnd {
    /// Recorded as an attempt (a claim checked or not, or a failure).
    Attempt(IterationRecord),
    /// The thread already moved (paused or stuck): nothing to record.
    Moved,
}

impl Threads {
    /// Runs the loop from the Running phase the record is in until it needs a person;
    /// `lock` is the workspace's, whose note each iteration puts back if it went missing.
    pub(super) async fn drive(
        &self,
        record: ThreadRecord,
        lock: Option<&mut RunLock>,
    ) -> Result<ThreadRecord, ThreadError> {
        let id = record.id.clone();
        let result = self.drive_loop(record, lock).await;
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

    async fn drive_loop(
        &self,
        mut record: ThreadRecord,
        mut lock: Option<&mut RunLock>,
    ) -> Result<ThreadRecord, ThreadError> {
        let (spec_text, spec) = self.spec_on_record(&record)?;
        // A fresh chain: each round and each resume starts with its first agent.
        let agents = self.record_agents(&record)?;
        record.current_agent = Some(agents.first.clone());
        record.agent_reason = None;
        record.transient_failures = 0;
        loop {
            let Phase::Running { iteration } = record.phase else {
                return Ok(record);
            };
            // Ctrl+C, or a person's `ralph stop` between two iterations: Paused either way.
            let asked = !self.ctx.stop.is_stopped() && stop_asked(&self.ctx.workspace);
            if asked {
                self.emitter.emit(&crate::event::Event::StopRequested {});
            }
            if self.ctx.stop.is_stopped() || asked {
                self.pause(&mut record, iteration, &spec)?;
                return Ok(record);
            }
            // A note deleted during the last agent run is back before the next one starts.
            if let Some(message) = lock.as_deref_mut().and_then(RunLock::check) {
                self.emitter.emit(&crate::event::Event::Warning { message });
            }
            if iteration > record.iteration_limit {
                let reason = max_reason(&record, spec.criteria.len());
                self.stuck(&mut record, reason).await?;
                return Ok(record);
            }
            let outcome = self
                .iteration(&mut record, iteration, (&spec, &spec_text), &agents)
                .await?;
            if let IterationEnd::Attempt(attempt) = outcome {
                self.conclude(&mut record, attempt, &spec).await?;
            }
        }
    }

    /// One iteration's agent run, and the check of its claim of done.
    async fn iteration(
        &self,
        record: &mut ThreadRecord,
        iteration: u32,
        (spec, spec_text): (&ThreadSpec, &str),
        agents: &LoopAgents,
    ) -> Result<IterationEnd, ThreadError> {
        let prompt = self.ctx.prompts.render(
            "thread",
            &self.build_context(record, iteration, spec, spec_text),
        )?;
        let request = Request::work(iteration, prompt);
        let called = match self.call(&agents.work, record, request).await? {
            Ok(called) => called,
            // Stuck as after a run the budget stopped, with no run to close and no
            // iteration to record: none started.
            Err(Refused(reason)) => {
                self.exhausted(record, &reason).await?;
                return Ok(IterationEnd::Moved);
            }
        };
        let attempt = |summary: String, output: &str| IterationRecord {
            iteration,
            run_id: called.run_id.clone(),
            summary,
            passed: Vec::new(),
            failed: Vec::new(),
            output: truncate_middle(output, OUTPUT_KEPT),
        };
        match &called.ran {
            Ran::Interrupted => {
                self.close(&called, "interrupted")?;
                self.pause(record, iteration, spec)?;
                Ok(IterationEnd::Moved)
            }
            Ran::Fatal(reason) => {
                self.close(&called, &format!("failed: {reason}"))?;
                self.exhausted(record, reason).await?;
                Ok(IterationEnd::Moved)
            }
            Ran::Failed(reason) | Ran::RateLimited(reason) => {
                self.close(&called, reason)?;
                Ok(IterationEnd::Attempt(attempt(reason.clone(), "")))
            }
            Ran::Answer(run)
                if crate::signal::last_line(&run.final_text) == Some(spec.promise.as_str()) =>
            {
                self.close(&called, "completed: claimed done")?;
                let attempt = attempt(String::new(), &run.final_text);
                self.verify_claim(record, attempt, (spec, spec_text), agents)
                    .await
            }
            Ran::Answer(run) if question_of(&run.final_text).is_some() => {
                self.close(&called, "completed: asked a person")?;
                let question = question_of(&run.final_text).unwrap_or_default();
                self.wait_for_answer(record, iteration, spec, &question)
                    .await?;
                Ok(IterationEnd::Moved)
            }
            Ran::Answer(run) => {
                self.close(&called, "completed: no claim")?;
                let summary = no_claim(&run.final_text, &spec.promise);
                Ok(IterationEnd::Attempt(attempt(summary, &run.final_text)))
            }
        }
    }

    /// The iteration of `attempt` claimed done: Verifying, and every criterion checked.
    /// An interrupted check pauses the thread at the iteration, whose claim is checked
    /// again on resume.
    async fn verify_claim(
        &self,
        record: &mut ThreadRecord,
        mut attempt: IterationRecord,
        (spec, spec_text): (&ThreadSpec, &str),
        agents: &LoopAgents,
    ) -> Result<IterationEnd, ThreadError> {
        let iteration = attempt.iteration;
        self.advance(record, Phase::Verifying { iteration })?;
        let checked = self
            .check_criteria(record, iteration, (spec, spec_text), &agents.verifier)
            .await?;
        let CriteriaChecked::Results { passed, failed } = checked else {
            self.advance(record, Phase::Running { iteration })?;
            self.pause(record, iteration, spec)?;
            return Ok(IterationEnd::Moved);
        };
        attempt.summary = format!(
            "claimed done; {} of {} criteria passed",
            passed.len(),
            spec.criteria.len()
        );
        (attempt.passed, attempt.failed) = (passed, failed);
        Ok(IterationEnd::Attempt(attempt))
    }

    /// Records `attempt`, then moves on: Implemented when every criterion passed at a
    /// verification, Stuck at the round's last iteration, else the next iteration.
    async fn conclude(
        &self,
        record: &mut ThreadRecord,
        attempt: IterationRecord,
        spec: &ThreadSpec,
    ) -> Result<(), ThreadError> {
        let iteration = attempt.iteration;
        let verified = record.phase.kind() == PhaseKind::Verifying;
        let all_passed = verified && attempt.failed.is_empty();
        self.remember(record, attempt);
        if all_passed {
            self.advance(record, Phase::Implemented)?;
            if self.quick_for(record) {
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

    /// → Stuck: no agent of the chain can go on; the last one failed for `reason`, and
    /// the chain said why it passed over the ones before it.
    async fn exhausted(&self, record: &mut ThreadRecord, reason: &str) -> Result<(), ThreadError> {
        let name = record.current_agent.as_deref().unwrap_or("the agent");
        let passed_over = record
            .agent_reason
            .as_deref()
            .map(|why| format!("{why}; "))
            .unwrap_or_default();
        let reason = format!("Stopped: all agents exhausted ({passed_over}{name}: {reason})");
        self.stuck(record, reason).await
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
        struct IterationPrompt<'a> {
            spec: SpecCtx<'a>,
            title: &'a str,
            iteration: u32,
            max_iterations: u32,
            promise: &'a str,
            attempts: &'a [IterationRecord],
            failed: &'a [String],
            /// The reviewer's latest feedback, when a send-back started this round or one
            /// before it.
            feedback: Option<&'a str>,
        }
        let ctx = IterationPrompt {
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
            feedback: record.feedback.last().map(|f| f.text.as_str()),
        };
        serde_json::to_value(ctx).unwrap_or(serde_json::Value::Null)
    }

    /// Keeps `attempt` among the last [`RECENT_ATTEMPTS`], and as the closest if it passed
    /// more criteria than any before.
    pub(super) fn remember(&self, record: &mut ThreadRecord, attempt: IterationRecord) {
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

    /// The iteration's agent asked a person `question`: recorded (the `needs_person` hooks
    /// run), then the loop waits up to `question_wait` for the answer. Answered, the same
    /// iteration runs again, its prompt with the question and the answer; otherwise (or on
    /// a stop) the thread is Paused at it, and `ralph answer` then `ralph thread resume` go
    /// on.
    async fn wait_for_answer(
        &self,
        record: &mut ThreadRecord,
        iteration: u32,
        spec: &ThreadSpec,
        question: &str,
    ) -> Result<(), ThreadError> {
        let workspace = &self.ctx.workspace;
        let role = crate::agent::Role::Build;
        let asked = crate::runtime::questions::record(workspace, &record.id, role, question)
            .map_err(|e| ThreadError::Io {
                path: crate::runtime::workspace::state_dir(workspace),
                error: std::io::Error::other(e.to_string()),
            })?;
        self.emitter.emit(&asked);
        match crate::runtime::questions::wait(&self.ctx, &self.emitter, &record.id).await {
            true => Ok(()),
            false => self.pause(record, iteration, spec),
        }
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
                .diff_from(&b.commit_sha, &self.kept_out())
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

/// The question a final answer ends with (`<TASK_QUESTION question="…">`), if it does.
fn question_of(final_text: &str) -> Option<String> {
    match crate::signal::parse(final_text).task {
        crate::signal::TaskSignal::Question { question } => Some(question),
        _ => None,
    }
}

/// Why an answer is no claim of done: its last line was not the bare promise tag. The
/// spec's `<promise>TAG</promise>` line written back is the likely near miss, so it is named.
fn no_claim(final_text: &str, promise: &str) -> String {
    let wrapped = format!("<promise>{promise}</promise>");
    match crate::signal::last_line(final_text) {
        Some(last) if last == wrapped => format!(
            "no claim of done: the last line of the answer was `{wrapped}`; the claim is the \
             bare tag `{promise}` alone on the last line"
        ),
        _ => format!(
            "no claim of done: the last line of the answer was not the bare tag `{promise}` \
             (alone on a line, outside any code fence)"
        ),
    }
}
