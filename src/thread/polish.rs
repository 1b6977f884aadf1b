//! Seed 001's Polishing: after the work is Implemented, one agent run adds docs and tests
//! and cleans up (the `thread_polish` prompt, overridable in `[prompts]`), under the same
//! checks as a round of the loop: the agent claims done with the spec's promise tag, then
//! every criterion is checked (commands and the verifier). Polish happens before review, so
//! what it changed is what the person reviews.
//!
//! ```text
//! Implemented ─polish─▶ Polishing ─agent─▶ claim ─every criterion passes─▶ Implemented
//!                           ▲                 └─ no claim / a criterion fails ─▶ Polishing
//!                           └──────────── polish again, or fix by hand and polish-done
//! ```
//!
//! A polish that left a criterion failing keeps the thread Polishing with the failures in
//! its attempts, so that nothing broken goes to review with a "recommend approve" badge.

use serde::Serialize;

use super::call::{Ran, Refused, Request};
use super::criteria::CriteriaChecked;
use super::phase::{Phase, PhaseKind};
use super::record::IterationRecord;
use super::spec::ThreadSpec;
use super::{ThreadError, ThreadRecord, Threads, transition};
use crate::output::truncate_middle;

/// How much of the polish run's final answer its attempt keeps.
const OUTPUT_KEPT: usize = 4000;

impl Threads {
    /// See [`Thread::polish`].
    pub(crate) async fn polish(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        let mut lock = None;
        let result = async {
            lock = Some(self.lock_runs().await?);
            let mut record = self.get(id)?;
            match record.phase.kind() {
                PhaseKind::Polishing => {}
                PhaseKind::Implemented => self.advance(&mut record, Phase::Polishing)?,
                _ => return Err(transition(&record, PhaseKind::Polishing)),
            }
            self.polish_round(record).await
        }
        .await;
        self.ended(id, result).await
    }

    /// The polish run and its check, from Polishing.
    async fn polish_round(&self, mut record: ThreadRecord) -> Result<ThreadRecord, ThreadError> {
        let (spec_text, spec) = self.spec_on_record(&record)?;
        let agents = self.record_agents(&record)?;
        // Numbered after the loop's iterations: its logs and runs stand beside theirs.
        let iteration = record.attempts.last().map_or(1, |a| a.iteration + 1);
        let prompt = self
            .ctx
            .prompts
            .render("thread_polish", &polish_context(&record, &spec, &spec_text))?;
        let request = Request::work(iteration, prompt);
        let called = match self.call(&agents.work, &mut record, request).await? {
            Ok(called) => called,
            // No polish run started: the thread stays Polishing with no attempt that would
            // name a run (the budget event says why).
            Err(Refused(_)) => {
                self.save(&mut record)?;
                return Ok(record);
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
        let (mut attempt, claimed) = match &called.ran {
            Ran::Interrupted => {
                self.close(&called, "interrupted")?;
                return Ok(record);
            }
            Ran::Failed(reason) | Ran::Fatal(reason) | Ran::RateLimited(reason) => {
                self.close(&called, &format!("failed: {reason}"))?;
                (attempt(format!("polish failed: {reason}"), ""), false)
            }
            Ran::Answer(run)
                if crate::signal::last_line(&run.final_text) == Some(spec.promise.as_str()) =>
            {
                self.close(&called, "completed: claimed done")?;
                (attempt(String::new(), &run.final_text), true)
            }
            Ran::Answer(run) => {
                self.close(&called, "completed: no claim")?;
                let summary = format!(
                    "polish made no claim of done: the last line of the answer was not `{}`",
                    spec.promise
                );
                (attempt(summary, &run.final_text), false)
            }
        };
        if claimed {
            let checked = self
                .check_criteria(
                    &mut record,
                    iteration,
                    (&spec, &spec_text),
                    &agents.verifier,
                )
                .await?;
            let CriteriaChecked::Results { passed, failed } = checked else {
                return Ok(record);
            };
            attempt.summary = format!(
                "polished; {} of {} criteria passed",
                passed.len(),
                spec.criteria.len()
            );
            (attempt.passed, attempt.failed) = (passed, failed);
            let all_passed = attempt.failed.is_empty();
            self.remember(&mut record, attempt);
            if all_passed {
                self.advance(&mut record, Phase::Implemented)?;
                return Ok(record);
            }
        } else {
            self.remember(&mut record, attempt);
        }
        self.save(&mut record)?;
        Ok(record)
    }
}

/// The `thread_polish` template's variables.
fn polish_context(record: &ThreadRecord, spec: &ThreadSpec, spec_text: &str) -> serde_json::Value {
    #[derive(Serialize)]
    struct PolishPrompt<'a> {
        spec: serde_json::Value,
        title: &'a str,
        promise: &'a str,
        criteria: Vec<&'a str>,
        /// What the last polish left failing, when it did.
        failed: &'a [String],
    }
    let ctx = PolishPrompt {
        spec: serde_json::json!({"name": record.title, "text": spec_text}),
        title: &record.title,
        promise: &spec.promise,
        criteria: spec.criteria.iter().map(|c| c.text.as_str()).collect(),
        failed: record.attempts.last().map_or(&[], |a| a.failed.as_slice()),
    };
    serde_json::to_value(ctx).unwrap_or(serde_json::Value::Null)
}
