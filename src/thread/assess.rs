//! Assessing (seed 001): an AI review of a thread's spec before a person finalizes it.
//!
//! The agent runs read-only ([`Role::Assess`]) and answers an [`AssessAnswer`] judging
//! clarity, testability, completeness, the promise tag and the criteria. ralph adds what its
//! own parse of the spec finds, so a spec preflight would refuse is never called ready. The
//! feedback is kept in the thread ([`ThreadRecord::assessment`]): with issues the thread
//! goes back to Drafting; without, it stays Assessing with the recommendation "ready to
//! finalize" — finalizing stays the person's call.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::phase::{Phase, PhaseKind};
use super::spec::ThreadSpec;
use super::{ThreadError, ThreadRecord, Threads, transition};
use crate::agent::Role;
use crate::answer::Answer;

/// The reviewer's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub(crate) struct AssessAnswer {
    /// The spec can be finalized as it is (then `issues` is empty).
    pub ready: bool,
    /// What to fix.
    #[serde(default)]
    pub issues: Vec<AssessIssue>,
}

/// One problem the review found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct AssessIssue {
    /// The acceptance criterion it is about (its text), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub criterion: Option<String>,
    /// The section it is about (its heading), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section: Option<String>,
    /// What is wrong.
    pub problem: String,
    /// How to fix it.
    pub suggestion: String,
}

impl AssessIssue {
    /// What the issue is about: `criterion "…"`, `section "…"` or `the spec`.
    pub fn subject(&self) -> String {
        match (&self.criterion, &self.section) {
            (Some(c), _) => format!("criterion {c:?}"),
            (None, Some(s)) => format!("section {s:?}"),
            (None, None) => "the spec".to_owned(),
        }
    }
}

impl Answer for AssessAnswer {
    fn check(&self) -> Result<(), String> {
        if self.ready && !self.issues.is_empty() {
            return Err("`ready` is true but `issues` is not empty: either fix one".into());
        }
        if !self.ready && self.issues.is_empty() {
            return Err("`ready` is false: name at least one issue".into());
        }
        for (i, issue) in self.issues.iter().enumerate() {
            if issue.criterion.is_none() && issue.section.is_none() {
                return Err(format!("issues[{i}] needs a `criterion` or a `section`"));
            }
            if issue.problem.trim().is_empty() || issue.suggestion.trim().is_empty() {
                return Err(format!(
                    "issues[{i}] needs a non-empty `problem` and `suggestion`"
                ));
            }
        }
        Ok(())
    }
}

/// A review kept in the thread.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Assessment {
    /// The spec revision reviewed.
    pub spec_version: u32,
    /// The spec can be finalized as it is.
    pub ready: bool,
    /// What to fix (empty when ready).
    pub issues: Vec<AssessIssue>,
    /// The run that gave it (`runs/<run-id>/`).
    pub run_id: String,
    /// RFC 3339 time of the review.
    pub at: String,
}

impl Assessment {
    /// The advice for the person: `ready to finalize`, or how many issues to address.
    pub fn recommendation(&self) -> String {
        if self.ready {
            "ready to finalize".to_owned()
        } else {
            format!("revise the spec: {} issue(s) found", self.issues.len())
        }
    }
}

impl Threads {
    /// See [`Thread::assess`].
    pub(crate) async fn assess(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        let mut record = self.get(id)?;
        match record.phase.kind() {
            PhaseKind::Assessing => {}
            PhaseKind::Drafting => self.advance(&mut record, Phase::Assessing)?,
            _ => return Err(transition(&record, PhaseKind::Assessing)),
        }
        let spec_text = self.spec_text(&record)?;
        let problems: Vec<String> = ThreadSpec::parse(&spec_text)
            .err()
            .map(|e| e.to_string())
            .into_iter()
            .collect();
        let prompt = self.ctx.prompts.render(
            "thread_assess",
            &serde_json::json!({
                "spec": {"name": record.title, "text": spec_text},
                "title": record.title,
                "spec_version": record.spec_version,
                "problems": problems,
            }),
        )?;
        let (answer, run_id) = self
            .ask::<AssessAnswer>(&mut record, Role::Assess, prompt, |reason| {
                self.assess_failed(id, reason)
            })
            .await?;
        self.assessed(record, answer, problems, run_id)
    }

    fn assess_failed(&self, id: &str, reason: String) -> ThreadError {
        ThreadError::Assessment {
            id: id.to_owned(),
            reason,
        }
    }

    /// Keeps the feedback (with ralph's own findings) and moves back to Drafting on issues.
    fn assessed(
        &self,
        mut record: ThreadRecord,
        answer: AssessAnswer,
        problems: Vec<String>,
        run_id: String,
    ) -> Result<ThreadRecord, ThreadError> {
        let mut issues = answer.issues;
        for problem in problems {
            issues.push(AssessIssue {
                criterion: None,
                section: Some("Acceptance Criteria / promise tag".into()),
                problem,
                suggestion: "fix this before finalizing: preflight refuses such a spec".into(),
            });
        }
        record.assessment = Some(Assessment {
            spec_version: record.spec_version,
            ready: issues.is_empty(),
            issues,
            run_id,
            at: jiff::Timestamp::now().to_string(),
        });
        if record.assessment.as_ref().is_some_and(|a| !a.ready) {
            self.advance(&mut record, Phase::Drafting)?;
        } else {
            self.save(&mut record)?;
        }
        Ok(record)
    }
}
