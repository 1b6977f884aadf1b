//! Verifying: every acceptance criterion of a claimed iteration is checked — a criterion
//! ending in a command by a real shell (the runtime's gate path), the others by a read-only
//! verifier agent.

use std::sync::Arc;

use serde::Serialize;

use super::call::{Ran, Refused, Request};
use super::spec::{Criterion, ThreadSpec};
use super::{ThreadError, ThreadRecord, Threads};
use crate::agent::{Agent, Role};
use crate::answer::{self, Answer, VerdictKind, VerifyAnswer};
use crate::gate::ShellGate;
use crate::model::TaskId;
use crate::output::truncate_middle;
use crate::runtime::deadline;
use crate::runtime::gates;

/// How much of a failed check's output its failure message keeps.
const CHECK_OUTPUT_KEPT: usize = 1500;

/// What checking the criteria found.
pub(super) enum CriteriaChecked {
    Results {
        passed: Vec<String>,
        failed: Vec<String>,
    },
    Interrupted,
}

/// One criterion's verdict: `None` when interrupted, `Err(why)` when it failed.
type CriterionVerdict = Option<Result<(), String>>;

impl Threads {
    /// Checks every criterion, in order: commands in a real shell, the rest by `verifier`.
    pub(super) async fn check_criteria(
        &self,
        record: &mut ThreadRecord,
        iteration: u32,
        (spec, spec_text): (&ThreadSpec, &str),
        verifier: &Arc<dyn Agent>,
    ) -> Result<CriteriaChecked, ThreadError> {
        let mut passed = Vec::new();
        let mut failed = Vec::new();
        for (i, criterion) in spec.criteria.iter().enumerate() {
            let verdict = match &criterion.command {
                Some(command) => self.check_command(record, iteration, i, command).await,
                None => {
                    self.check_by_verifier(record, iteration, criterion, spec_text, verifier)
                        .await?
                }
            };
            match verdict {
                None => return Ok(CriteriaChecked::Interrupted),
                Some(Ok(())) => passed.push(criterion.text.clone()),
                Some(Err(why)) => failed.push(format!("{}: {why}", criterion.text)),
            }
        }
        Ok(CriteriaChecked::Results { passed, failed })
    }

    /// Runs the command of criterion `index` through the runtime's gate path: a
    /// `ShellGate` under the thread's check timeout and the workspace's grace.
    async fn check_command(
        &self,
        record: &ThreadRecord,
        iteration: u32,
        index: usize,
        command: &str,
    ) -> CriterionVerdict {
        let timeout = record.config.check_timeout;
        let gate = ShellGate::new(format!("criterion-{}", index + 1), command)
            .timeout(timeout)
            .grace(self.ctx.config.grace);
        let task = TaskId::new(record.id.as_str());
        // The gate's own timeout comes first; the deadline is only the backstop.
        let deadline = deadline::after(deadline::backstop(timeout));
        let run = self
            .ctx
            .gate_run(&self.emitter, deadline, (&task, &record.title, iteration));
        Some(match gates::check_one(&gate, run, None).await {
            Ok(None) if self.ctx.stop.is_stopped() => return None,
            Ok(None) => Err(format!(
                "timed out after {}",
                humantime::format_duration(timeout)
            )),
            Ok(Some(report)) if report.status.passed() => Ok(()),
            Ok(Some(report)) => {
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

    /// Asks `verifier`, read-only, whether `criterion` holds. A rate limit is waited out.
    async fn check_by_verifier(
        &self,
        record: &mut ThreadRecord,
        iteration: u32,
        criterion: &Criterion,
        spec_text: &str,
        verifier: &Arc<dyn Agent>,
    ) -> Result<CriterionVerdict, ThreadError> {
        #[derive(Serialize)]
        struct CriteriaPrompt<'a> {
            spec: serde_json::Value,
            title: &'a str,
            criterion: &'a str,
        }
        let prompt = self.ctx.prompts.render(
            "thread_verify",
            &CriteriaPrompt {
                spec: serde_json::json!({"name": record.title, "text": spec_text}),
                title: &record.title,
                criterion: &criterion.text,
            },
        )?;
        let request = Request {
            role: Role::Verify,
            iteration,
            attempt: iteration,
            prompt,
            schema: Some(VerifyAnswer::schema()),
            patient: true,
        };
        let called = match self.call(verifier, record, request).await? {
            Ok(called) => called,
            // No verifier ran: the criterion is not met, and no run is named.
            Err(Refused(reason)) => return Ok(Some(Err(format!("the verifier failed: {reason}")))),
        };
        let verdict = match &called.ran {
            Ran::Interrupted => {
                self.close(&called, "interrupted")?;
                return Ok(None);
            }
            Ran::Failed(reason) | Ran::Fatal(reason) | Ran::RateLimited(reason) => {
                Err(format!("the verifier failed: {reason}"))
            }
            Ran::Answer(run) => match answer::parse::<VerifyAnswer>(run) {
                Ok(a) if a.verdict == VerdictKind::Accept => Ok(()),
                Ok(a) => Err(format!("the verifier rejected it: {}", a.reason)),
                Err(e) => Err(format!("the verifier gave no usable verdict: {e}")),
            },
        };
        let outcome = match &verdict {
            Ok(()) => "completed: accept",
            Err(_) => "completed: reject",
        };
        self.close(&called, outcome)?;
        Ok(Some(verdict))
    }
}
