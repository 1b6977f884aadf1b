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
use crate::signal;
use crate::specs::implementation::{SpecEntry, Status, TaskEntry};
use crate::specs::logs::folder_log;
use crate::time::now_rfc3339;

/// How many `git status` lines the verifier sees.
const CHANGES_SHOWN: usize = 200;

/// The verifier's judgement of a spec.
pub(super) enum Judgement {
    Accept,
    Reject(String),
    Invalidate {
        reason: String,
        full: String,
    },
    /// No verdict, also when asked once more: why (the spec is unverified).
    Unverified(String),
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
        let prompt = self.spec_verify_prompt(id, plan).await?;
        // An unusable answer (prose, a failed or killed verifier) is asked for once more,
        // beyond the structured retry; then the spec is unverified, never accepted or
        // rejected on no verdict.
        let mut failure = String::new();
        for round in 1..=2 {
            let attempt = self.spec(id)?.verifications.saturating_add(1);
            let call = Call {
                announce: None,
                role: Role::Verify,
                subject: Some(id.to_owned()),
                attempt,
                prompt: prompt.clone(),
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
            match result {
                Structured::Interrupted => return Ok(Judgement::Interrupted),
                Structured::Unusable { reason, .. } => failure = reason,
                Structured::Answer(answer) => {
                    entry.unverified = None;
                    return Ok(self.judge(id, answer));
                }
            }
            if round == 1 {
                self.emit(Event::Warning {
                    message: format!(
                        "the verifier of {id} gave no usable verdict ({failure}); asking once more"
                    ),
                });
            }
        }
        self.spec_mut(id)?.unverified = Some(first_line(&failure));
        Ok(Judgement::Unverified(failure))
    }

    /// The spec verifier's prompt: the spec, its `plan`, and the files changed in the work
    /// tree (ralph's own left out, the first [`CHANGES_SHOWN`]).
    async fn spec_verify_prompt(&self, id: &str, plan: &str) -> Result<String, Error> {
        #[derive(Serialize)]
        struct SpecVerifyPrompt<'a> {
            spec: &'a SpecEntry,
            spec_text: String,
            plan: &'a str,
            changes: Vec<String>,
        }
        let kept_out = super::kept_out(&self.ctx);
        let exclude: Vec<&str> = kept_out.iter().map(String::as_str).collect();
        let mut changes = self.git.changes(&exclude).await?;
        changes.truncate(CHANGES_SHOWN);
        let entry = self.spec(id)?;
        let ctx = SpecVerifyPrompt {
            spec: entry,
            spec_text: self.spec_text(entry)?,
            plan,
            changes,
        };
        Ok(self.ctx.prompts.render("spec_verify", &ctx)?)
    }

    /// What the verifier's answer means for spec `id`.
    fn judge(&self, id: &str, answer: VerifyAnswer) -> Judgement {
        let accepted = answer.verdict == VerdictKind::Accept;
        self.emit(Event::Verdict {
            task: TaskId::new(id),
            accepted,
            reason: answer.reason.clone(),
        });
        if accepted {
            return Judgement::Accept;
        }
        let mut full = answer.reason.clone();
        for gap in &answer.gaps {
            full.push_str(&format!("\n- {gap}"));
        }
        match signal::parse(&answer.reason).plan_invalidation {
            Some(reason) => Judgement::Invalidate { reason, full },
            None => Judgement::Reject(full),
        }
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

    /// Completes an accepted spec in one commit: the spec marked completed in
    /// `implementation.json` and its `PROGRESS.md` entry are written first, so that the
    /// spec's commit holds them with its work and the work tree is left clean (a commit
    /// cannot name itself: the entry says its commit is the one that adds it, and the
    /// `spec_committed` event gives the hash). A note in `.ralph/` says the commit is due
    /// until it is made: a run stopped in between makes it when it starts again
    /// ([`SpecBuild::commit_due`]).
    pub(super) async fn complete_spec(
        &mut self,
        id: &str,
        resumed: bool,
    ) -> Result<SpecEnd, Error> {
        let name = self.spec(id)?.display_name().to_owned();
        self.due.write(id)?;
        let entry = self.spec_mut(id)?;
        entry.status = Status::Completed;
        entry.verified = false;
        entry.commit = None;
        entry.completed_at = Some(now_rfc3339());
        self.save()?;
        // Reconciled, not appended blindly: the entry of a spec completed by a run that
        // stopped before writing it comes first, and nothing is written twice.
        self.reconcile_history()?;
        let commit = self.commit_spec(&name, resumed).await?;
        self.due.clear()?;
        self.specs_done += 1;
        self.emit(Event::SpecCommitted {
            spec: id.to_owned(),
            commit,
        });
        Ok(SpecEnd::Completed)
    }

    /// Makes the commit of a spec completed by a run that stopped before making it.
    pub(super) async fn commit_due(&mut self) -> Result<(), Error> {
        let Some(id) = self.due.read()? else {
            return Ok(());
        };
        if let Some(entry) = self
            .plan
            .spec(&id)
            .filter(|e| e.status == Status::Completed)
        {
            let name = entry.display_name().to_owned();
            self.reconcile_history()?;
            if let Some(home) = &self.home {
                // Its turn, noted by the run that completed it (a new note otherwise).
                home.begin_turn(&id).await?;
            }
            let before = self.git.head().await?;
            let commit = self.commit_spec(&name, true).await?;
            if commit != before {
                self.specs_done += 1;
            }
            self.emit(Event::SpecCommitted {
                spec: id.clone(),
                commit,
            });
        }
        self.due.clear()
    }

    /// The spec's commit: what the specs' turn changed since the last spec's (the user's
    /// untracked files and ralph's own stay out). After a restart, nothing left to commit
    /// and HEAD named after the spec mean the earlier run committed and stopped before
    /// clearing its note.
    async fn commit_spec(&mut self, name: &str, resumed: bool) -> Result<Option<String>, Error> {
        let kept_out = super::kept_out(&self.ctx);
        let exclude: Vec<&str> = kept_out.iter().map(String::as_str).collect();
        let commit = match &mut self.home {
            Some(home) => home.commit_turn(name).await?,
            // A repository without a commit yet: the spec's is its first.
            None => self.git.commit_all(name, &exclude).await?,
        };
        if commit.is_none()
            && resumed
            && self.git.head_subject().await?.as_deref() == Some(name.trim())
        {
            return Ok(self.git.head().await?);
        }
        Ok(commit)
    }
}
