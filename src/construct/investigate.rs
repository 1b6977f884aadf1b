//! INVESTIGATE: each open issue becomes tasks, or is judged out of scope.

use serde::Serialize;

use super::{Engine, Flow, Priorities, SPEC_ORIGIN};
use crate::agent::Role;
use crate::answer::InvestigateAnswer;
use crate::event::Event;
use crate::model::{Change, Issue, IssueStatus, Task, TaskId};
use crate::runtime::call::{Kill, Structured};
use crate::runtime::deadline;
use crate::runtime::error::Error;
use crate::runtime::spec::SpecDoc;

/// How many planned tasks the investigate prompt lists.
const PLANNED_IN_PROMPT: usize = 100;

impl Engine {
    pub(super) async fn investigate(&mut self) -> Result<Flow, Error> {
        let issues: Vec<Issue> = self.board.open_issues().cloned().collect();
        for issue in issues {
            if self.stopped() {
                return Ok(Flow::Interrupted);
            }
            if let Some(stop) = self.asked_to_stop() {
                return Ok(stop);
            }
            if self.investigate_issue(issue).await? == Flow::Interrupted {
                return Ok(Flow::Interrupted);
            }
        }
        Ok(Flow::Continue)
    }

    /// Asks what `issue` needs, and settles it: resolved by new or planned tasks, out of
    /// scope, killed by a limit (for DECOMPOSE), or left open (blocked once out of retries).
    async fn investigate_issue(&mut self, mut issue: Issue) -> Result<Flow, Error> {
        let call = self.call(
            Role::Investigate,
            issue.id.as_str(),
            issue.attempts.saturating_add(1),
            self.investigate_prompt(&issue)?,
            deadline::after(self.config().stage_timeout),
        );
        let (result, runs) = self
            .caller
            .structured::<InvestigateAnswer>(call, |a| {
                if a.out_of_scope && issue.origin.as_deref() == Some(SPEC_ORIGIN) {
                    // The spec's own issue is the work asked for: out of scope, nothing
                    // would be built and the run would say Complete.
                    return Err(
                        "this issue is the spec itself, which cannot be out of scope: \
                                break the spec down into tasks"
                            .to_owned(),
                    );
                }
                self.check_dep_ids("tasks", &a.tasks)?;
                self.check_planned(&a.already_planned)
            })
            .await?;
        issue.attempts += runs;
        match result {
            Structured::Interrupted => return Ok(Flow::Interrupted),
            Structured::Answer(answer)
                if crate::answer::asked(answer.question.as_ref()).is_some() =>
            {
                let question = answer.question.unwrap_or_default().trim().to_owned();
                self.ask_about_issue(issue, question).await?;
            }
            Structured::Answer(answer) if answer.out_of_scope => {
                issue.status = IssueStatus::OutOfScope;
                issue.reason = answer.reason;
                self.settle_issue(issue, Vec::new(), Vec::new()).await?;
            }
            Structured::Answer(answer) => self.resolve_issue(issue, answer).await?,
            // Killed by a limit: DECOMPOSE makes the issue's tasks from the run's log.
            Structured::Unusable {
                kill: Some(kill), ..
            } => self.record_issue_kill(issue, kill).await?,
            Structured::Unusable { reason, kill: None } => {
                // Counted from the last unblock: a person who fixed the agent gets the
                // whole budget again.
                if issue.round_attempts() > self.config().retries {
                    issue.status = IssueStatus::Blocked;
                }
                issue.reason = Some(reason);
                self.settle_issue(issue, Vec::new(), Vec::new()).await?;
            }
        }
        Ok(Flow::Continue)
    }

    /// Records the question `issue`'s investigator asked a person: the issue waits for the
    /// answer, and the investigation that asked does not count against its retries.
    async fn ask_about_issue(&mut self, mut issue: Issue, question: String) -> Result<(), Error> {
        let asked = crate::runtime::questions::record(
            &self.ctx.workspace,
            issue.id.as_str(),
            Role::Investigate,
            &question,
        )?;
        issue.retry_base = issue.attempts;
        issue.question = Some(question);
        self.settle_issue(issue, Vec::new(), Vec::new()).await?;
        self.emit(asked);
        Ok(())
    }

    /// The investigator's prompt: the spec, the issue, and the first planned tasks (so that
    /// it can name those that already cover the issue).
    fn investigate_prompt(&self, issue: &Issue) -> Result<String, Error> {
        #[derive(Serialize)]
        struct Planned<'a> {
            id: &'a str,
            name: &'a str,
        }
        #[derive(Serialize)]
        struct InvestigatePrompt<'a> {
            spec: &'a SpecDoc,
            issue: &'a Issue,
            tasks: Vec<Planned<'a>>,
        }
        let ctx = InvestigatePrompt {
            spec: &self.spec,
            issue,
            tasks: self
                .board
                .remaining_tasks()
                .take(PLANNED_IN_PROMPT)
                .map(|t| Planned {
                    id: t.id.as_str(),
                    name: &t.name,
                })
                .collect(),
        };
        Ok(self.ctx.prompts.render("investigate", &ctx)?)
    }

    /// Resolves `issue` by the tasks `answer` makes (with the issue's priority unless they
    /// have their own) and those it names as already planned.
    async fn resolve_issue(
        &mut self,
        mut issue: Issue,
        answer: InvestigateAnswer,
    ) -> Result<(), Error> {
        let mut run = self.board.run.clone();
        let mut tasks = self.materialize(&answer.tasks, None, &mut run, issue.id.as_str());
        for task in &mut tasks {
            // Seed 000: tasks inherit the issue's priority.
            task.priority = task.priority.or(issue.priority);
        }
        issue.status = IssueStatus::Resolved;
        issue.tasks = answer
            .already_planned
            .iter()
            .map(|id| TaskId::new(id.as_str()))
            .chain(tasks.iter().map(|t| t.id.clone()))
            .collect();
        let mut changes = vec![Change::Run(run)];
        changes.extend(tasks.iter().cloned().map(Change::Task));
        self.settle_issue(issue, tasks, changes).await
    }

    /// Records that a limit killed the investigation of `issue`, with the run's log.
    async fn record_issue_kill(&mut self, mut issue: Issue, kill: Kill) -> Result<(), Error> {
        let event = Event::IssueKilled {
            issue: issue.id.clone(),
            reason: kill.reason,
            log: kill.log.clone(),
        };
        issue.reason = Some(self.kill_note(kill.limit, Role::Investigate));
        issue.kill_reason = Some(kill.reason);
        issue.kill_log = kill.log;
        self.commit(vec![Change::Issue(issue)]).await?;
        self.emit(event);
        Ok(())
    }

    /// Checks that every id the answer says is already planned names a task still to do.
    fn check_planned(&self, ids: &[String]) -> Result<(), String> {
        for (i, id) in ids.iter().enumerate() {
            match self.board.tasks.get(id.as_str()) {
                Some(task) if task.is_remaining() || task.is_finished() => {}
                Some(_) => {
                    return Err(format!(
                        "already_planned[{i}] names {id}, which was decomposed: name its subtasks"
                    ));
                }
                None => {
                    return Err(format!(
                        "already_planned[{i}] names {id}, which is not a task"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Persists the issue's new state in one batch with `changes` (the tasks made from it):
    /// a crash between the two would leave the tasks with the issue still open, and the
    /// next run would investigate it again and duplicate them.
    async fn settle_issue(
        &mut self,
        issue: Issue,
        tasks: Vec<Task>,
        mut changes: Vec<Change>,
    ) -> Result<(), Error> {
        let tasks_made = !tasks.is_empty();
        let event = Event::IssueInvestigated {
            issue: issue.id.clone(),
            // The tasks that resolve it: new ones, and those already planned that cover it.
            tasks: issue.tasks.clone(),
            reason: issue.reason.clone(),
        };
        changes.push(Change::Issue(issue));
        // New tasks are prioritized with everything else that can be built, in the same
        // batch: BUILD takes them in the prioritizer's order.
        let prioritized = match tasks_made {
            true => Some(self.prioritize(&mut changes, Priorities::Inherit)?),
            false => None,
        };
        self.commit(changes).await?;
        self.emit(event);
        if let Some(prioritized) = prioritized {
            self.emit(prioritized);
        }
        Ok(())
    }
}
