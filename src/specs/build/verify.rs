//! The verdict on a whole spec and what follows it: a commit named after the spec, a rework
//! task carrying the feedback, or a plan invalidated and planned again.

use std::path::Path;

use serde::Serialize;

use super::{SpecBuild, SpecEnd};
use crate::agent::Role;
use crate::answer::{VerdictKind, VerifyAnswer};
use crate::event::Event;
use crate::model::TaskId;
use crate::output::{bounded_failure, first_line};
use crate::runtime::call::{Call, Structured};
use crate::runtime::deadline;
use crate::runtime::error::Error;
use crate::runtime::logs::folder_log;
use crate::runtime::workspace::STATE_DIR;
use crate::signal;
use crate::specs::implementation::{SpecEntry, Status, TaskEntry};
use crate::time::now_rfc3339;

/// How many `git status` lines the verifier sees.
const CHANGES_SHOWN: usize = 200;

/// The verifier's judgement of a spec.
pub(super) enum Judgement {
    Accept,
    Reject(String),
    Invalidate { reason: String, full: String },
    Interrupted,
}

impl SpecBuild {
    /// The verifier's judgement of the whole spec. `PLAN_INVALIDATION: <reason>` counts as a
    /// whole line of a rejection's `reason` (parsed by [`signal::parse`]).
    pub(super) async fn verify_spec(
        &mut self,
        dir: &Path,
        id: &str,
        plan: &str,
    ) -> Result<Judgement, Error> {
        #[derive(Serialize)]
        struct Ctx<'a> {
            spec: &'a SpecEntry,
            spec_text: String,
            plan: &'a str,
            changes: Vec<String>,
        }
        let kept_out = self.kept_out();
        let mut changes = self
            .git
            .changes(&kept_out.each_ref().map(String::as_str))
            .await?;
        changes.truncate(CHANGES_SHOWN);
        let entry = self.spec(id)?;
        let ctx = Ctx {
            spec: entry,
            spec_text: self.spec_text(entry)?,
            plan,
            changes,
        };
        let attempt = entry.verifications.saturating_add(1);
        let call = Call {
            role: Role::Verify,
            subject: Some(id.to_owned()),
            attempt,
            prompt: self.ctx.prompts.render("spec_verify", &ctx)?,
            deadline: deadline::after(self.ctx.config.stage_timeout),
            log: folder_log(dir, Role::Verify, attempt),
        };
        let (result, runs) = self
            .caller
            .structured::<VerifyAnswer>(call, |_| Ok(()))
            .await?;
        if !matches!(result, Structured::Interrupted) {
            self.step = Some(format!("verified {id}"));
        }
        // Saved by the caller, with what the verdict leads to.
        let entry = self.spec_mut(id)?;
        entry.verifications = entry.verifications.saturating_add(runs);
        let answer = match result {
            Structured::Interrupted => return Ok(Judgement::Interrupted),
            Structured::Unusable { reason, .. } => {
                return Ok(Judgement::Reject(format!("no usable verdict: {reason}")));
            }
            Structured::Answer(answer) => answer,
        };
        let accepted = answer.verdict == VerdictKind::Accept;
        self.emit(Event::Verdict {
            task: TaskId::new(id),
            accepted,
            reason: answer.reason.clone(),
        });
        if accepted {
            return Ok(Judgement::Accept);
        }
        let mut full = answer.reason.clone();
        for gap in &answer.gaps {
            full.push_str(&format!("\n- {gap}"));
        }
        Ok(match signal::parse(&answer.reason).plan_invalidation {
            Some(reason) => Judgement::Invalidate { reason, full },
            None => Judgement::Reject(full),
        })
    }

    /// After a rejection: a task carrying the verifier's feedback, and a counted attempt.
    pub(super) fn rework(
        &mut self,
        id: &str,
        feedback: &str,
        invalidation: Option<&str>,
    ) -> Result<(), Error> {
        let entry = self.spec_mut(id)?;
        let (description, failure) = match invalidation {
            Some(reason) => (
                format!("Rework per the new plan: {reason}"),
                format!("The verifier invalidated the previous plan: {feedback}"),
            ),
            None => (
                format!("Address the verifier's findings: {}", first_line(feedback)),
                format!("The verifier rejected the spec: {feedback}"),
            ),
        };
        let mut task = TaskEntry::new(entry.next_task_id(), description)
            .with_criteria(entry.acceptance_criteria.clone());
        task.last_failure = Some(bounded_failure(&failure));
        entry.tasks.push(task);
        entry.plan_invalidation = invalidation.map(|r| r.trim().to_owned());
        self.count_attempt(id, feedback)
    }

    /// Commit named after the spec, spec completed, PROGRESS.md; in that order. The spec is
    /// already marked `verified`, so a crash in between never runs the verifier again:
    /// `resumed` (a restart) commits what is uncommitted, or records HEAD when it already is
    /// the spec's commit.
    pub(super) async fn complete_spec(
        &mut self,
        id: &str,
        resumed: bool,
    ) -> Result<SpecEnd, Error> {
        let name = self.spec(id)?.display_name().to_owned();
        let commit = self.commit_spec(&name, resumed).await?;
        let entry = self.spec_mut(id)?;
        entry.status = Status::Completed;
        entry.verified = false;
        entry.commit = commit.clone();
        entry.completed_at = Some(now_rfc3339());
        self.save()?;
        // Reconciled, not appended blindly: the entry of a spec completed by a run that
        // stopped before writing it comes first, and nothing is written twice.
        self.reconcile_history()?;
        self.specs_done += 1;
        self.emit(Event::SpecCommitted {
            spec: id.to_owned(),
            commit,
        });
        Ok(SpecEnd::Completed)
    }

    /// The spec's commit. After a restart, nothing left to commit and HEAD named after the
    /// spec mean the earlier run committed and stopped before recording it.
    async fn commit_spec(&self, name: &str, resumed: bool) -> Result<Option<String>, Error> {
        let kept_out = self.kept_out();
        let exclude = kept_out.each_ref().map(String::as_str);
        if resumed
            && self.git.changes(&exclude).await?.is_empty()
            && self.git.head_subject().await?.as_deref() == Some(name.trim())
        {
            return Ok(self.git.head().await?);
        }
        Ok(self.git.commit_all(name, &exclude).await?)
    }

    /// What git must never count or commit: ralph's state and its logs.
    fn kept_out(&self) -> [String; 2] {
        [
            STATE_DIR.to_owned(),
            self.ctx.config.log_dir.to_string_lossy().into_owned(),
        ]
    }
}
