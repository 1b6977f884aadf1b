//! VERIFY: one verifier per done task, concurrently (fork/join, bounded); verdicts
//! are recorded as they arrive (those that arrive together, in one batch); then gap analysis; then, in one persisted batch, the
//! verdicts are applied, new tasks and issues added, pending work re-prioritized, and the
//! iteration ends.

use serde::Serialize;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{Engine, Flow, Priorities};
use crate::agent::Role;
use crate::answer::{GapAnswer, VerdictKind, VerifyAnswer};
use crate::event::Event;
use crate::model::{
    AcceptedBy, Change, Issue, IssueId, KillReason, RunState, SpecCheck, Task, TaskId, TaskStatus,
    Verdict,
};
use crate::runtime::call::{Call, Caller, Kill, Structured};
use crate::runtime::deadline;
use crate::runtime::error::Error;
use crate::runtime::spec::SpecDoc;

/// What a verifier job returns: the task, and how its check ended with the runs used, or
/// nothing if the run was interrupted.
type JobResult = (TaskId, Result<Option<(VerifierEnd, u32)>, Error>);

/// How one verifier ended.
enum VerifierEnd {
    /// A verdict (a rejection naming why when the answer was unusable).
    Verdict(Verdict),
    /// A limit killed the verifier: the task goes to DECOMPOSE, as a killed build does.
    Killed(Kill),
}

impl Engine {
    pub(super) async fn verify(&mut self) -> Result<Flow, Error> {
        if self.verify_done_tasks().await? == Flow::Interrupted {
            return Ok(Flow::Interrupted);
        }
        if let Some(stop) = self.asked_to_stop() {
            // The verdicts in flight are recorded; the gap analysis waits for the next run.
            return Ok(stop);
        }
        // Gap analysis is a step of its own, with its own time: slow verifiers (or rate limits)
        // must not leave it none, which would skip it and could end the run without it.
        let gap_deadline = deadline::after(self.config().stage_timeout);
        let Some(check) = self.gap_analysis(gap_deadline).await? else {
            return Ok(Flow::Interrupted);
        };
        self.apply_verification(check).await?;
        Ok(Flow::Continue)
    }

    /// Runs the verifiers, at most `verify_concurrency` at once, persisting each verdict.
    /// Each verifier gets `stage_timeout` from its own start, so a board with many done
    /// tasks is verified in full however long the fork/join takes.
    async fn verify_done_tasks(&mut self) -> Result<Flow, Error> {
        let mut todo = self
            .board
            .tasks
            .values()
            .filter(|t| t.status == TaskStatus::Done && t.verdict.is_none())
            .cloned()
            .collect::<Vec<_>>()
            .into_iter();
        let mut jobs = JoinSet::new();
        for task in todo.by_ref().take(self.config().verify_concurrency) {
            self.spawn_verifier(&mut jobs, task)?;
        }
        let mut interrupted = false;
        while let Some(first) = jobs.join_next().await {
            // Verifiers that finished together are handled together: their slots are refilled
            // before their verdicts are persisted, so the next verifiers run during the write,
            // and the verdicts cost one durable write, not one each.
            let mut verdicts = Vec::new();
            for joined in std::iter::once(first).chain(std::iter::from_fn(|| jobs.try_join_next()))
            {
                let (id, result) = super::joined(joined);
                match result? {
                    Some((verdict, runs)) => verdicts.push((id, verdict, runs)),
                    None => interrupted = true,
                }
            }
            if !interrupted && !self.lock.stop_asked() {
                let mut refilled = false;
                for task in todo.by_ref().take(verdicts.len()) {
                    self.spawn_verifier(&mut jobs, task)?;
                    refilled = true;
                }
                if refilled {
                    // The store writes on this thread (see `store::file_io`): the new
                    // verifiers get to start their agents first.
                    tokio::task::yield_now().await;
                }
            }
            self.record_verdicts(verdicts).await?;
        }
        Ok(if interrupted {
            Flow::Interrupted
        } else {
            Flow::Continue
        })
    }

    fn spawn_verifier(&self, jobs: &mut JoinSet<JobResult>, task: Task) -> Result<(), Error> {
        #[derive(Serialize)]
        struct VerifyPrompt<'a> {
            spec: &'a SpecDoc,
            task: &'a Task,
        }
        let prompt = self.ctx.prompts.render(
            "verify",
            &VerifyPrompt {
                spec: &self.spec,
                task: &task,
            },
        )?;
        let call = self.call(
            Role::Verify,
            task.id.as_str(),
            task.verifications.saturating_add(1),
            prompt,
            deadline::after(self.config().stage_timeout),
        );
        let caller = self.caller.clone();
        jobs.spawn(async move { (task.id.clone(), verify_one(caller, call).await) });
        Ok(())
    }

    /// Records verdicts (and kills) on their tasks, in one persisted batch, then reports them.
    async fn record_verdicts(
        &mut self,
        verdicts: Vec<(TaskId, VerifierEnd, u32)>,
    ) -> Result<(), Error> {
        let changes = verdicts
            .iter()
            .map(|(id, checked, runs)| {
                let mut task = self.task(id)?;
                task.verifications += runs;
                match checked {
                    VerifierEnd::Verdict(verdict) => task.verdict = Some(verdict.clone()),
                    VerifierEnd::Killed(kill) => {
                        let note = self.kill_note(kill.limit, Role::Verify);
                        task.record_kill(kill.reason, kill.log.clone(), &note);
                    }
                }
                Ok(Change::Task(task))
            })
            .collect::<Result<_, Error>>()?;
        self.commit(changes).await?;
        for (id, checked, _) in verdicts {
            self.emit(match checked {
                VerifierEnd::Verdict(verdict) => Event::Verdict {
                    task: id,
                    accepted: verdict.accepted,
                    reason: verdict.reason,
                },
                VerifierEnd::Killed(kill) => Event::TaskKilled {
                    task: id,
                    reason: kill.reason,
                    log: kill.log,
                },
            });
        }
        Ok(())
    }

    /// Asks what the spec still needs, and for an answer to each gap the verifiers named.
    /// An answer that is unusable after its structured retry (prose, a failed or killed
    /// agent) is asked for once more; if that fails too the check has [`GapCheck::Failed`]:
    /// never "no gaps". `None` if interrupted.
    async fn gap_analysis(&mut self, deadline: Instant) -> Result<Option<GapCheck>, Error> {
        let named = self.verifier_gaps();
        let prompt = self.gap_prompt(&named)?;
        let subject = format!("iteration-{}", self.board.run.iteration);
        let (mut attempt, mut deadline, mut failure) = (1, deadline, String::new());
        for round in 1..=2 {
            let call = self.call(
                Role::GapAnalysis,
                &subject,
                attempt,
                prompt.clone(),
                deadline,
            );
            let (result, runs) = self
                .caller
                .structured::<GapAnswer>(call, |a| {
                    self.check_dep_ids("tasks", &a.tasks)?;
                    a.check_replies(named.len())
                })
                .await?;
            attempt += runs;
            match result {
                Structured::Answer(answer) => return Ok(Some(GapCheck::Answer(answer, named))),
                Structured::Interrupted => return Ok(None),
                Structured::Unusable { reason, .. } => failure = reason,
            }
            if round == 1 {
                self.emit(Event::Warning {
                    message: format!(
                        "the gap analysis gave no usable answer ({failure}); asking once more"
                    ),
                });
                deadline = deadline::after(self.config().stage_timeout);
            }
        }
        Ok(Some(GapCheck::Failed(failure)))
    }

    /// The gap analysis's prompt: the spec, the tasks finished and remaining (the first 200
    /// of each), and the verifier gaps `named` to answer.
    fn gap_prompt(&self, named: &[(TaskId, String)]) -> Result<String, Error> {
        #[derive(Serialize)]
        struct GapPrompt<'a> {
            spec: &'a SpecDoc,
            done: Vec<String>,
            remaining: Vec<String>,
            gaps: Vec<&'a str>,
        }
        let summary = |t: &Task| format!("{}: {}", t.id, t.name);
        let tasks = self.board.tasks.values();
        let ctx = GapPrompt {
            spec: &self.spec,
            done: tasks
                .clone()
                .filter(|t| t.is_finished())
                .map(summary)
                .take(200)
                .collect(),
            remaining: tasks
                .filter(|t| t.is_remaining() && !t.is_finished())
                .map(summary)
                .take(200)
                .collect(),
            gaps: named.iter().map(|(_, gap)| gap.as_str()).collect(),
        };
        Ok(self.ctx.prompts.render("gap_analysis", &ctx)?)
    }

    /// The gaps this round's verifiers named, with the task each came from, in the order the
    /// gap analysis numbers them. Accepted tasks keep their verdicts: only the done tasks'
    /// count, so the prompt does not grow with the board's history.
    fn verifier_gaps(&self) -> Vec<(TaskId, String)> {
        self.board
            .tasks
            .values()
            .filter(|t| t.status == TaskStatus::Done)
            .filter_map(|t| Some((t, t.verdict.as_ref()?)))
            .flat_map(|(t, v)| v.gaps.iter().map(|g| (t.id.clone(), g.clone())))
            .take(200)
            .collect()
    }

    /// The final batch: verdicts, gap tasks and issues, priorities, how the spec check
    /// ended, next iteration.
    async fn apply_verification(&mut self, check: GapCheck) -> Result<(), Error> {
        // A verifier that moved the user's branch is caught before any acceptance rests on it.
        self.guard_home(crate::model::Stage::Verify).await?;
        let mut tasks = self.judge_done_tasks().await?;
        let accepted = tasks
            .iter()
            .filter(|t| t.status == TaskStatus::Accepted)
            .count();
        let rejected = tasks.len() - accepted;
        let to_split = rejected_too_often(&tasks);
        let iteration = self.board.run.iteration;
        let GapOutcome {
            gaps,
            named,
            spec_check,
        } = self.settle_gap_check(check);
        let note = verification_note(accepted, rejected, &gaps, spec_check.as_ref());
        let mut run = self.next_iteration(accepted, &note);
        run.spec_check = spec_check;
        let new_tasks = self.materialize(&gaps.tasks, None, &mut run, "verify");
        let new_issues = self.new_issues(&gaps.issues, &mut run);
        let task_ids: Vec<TaskId> = new_tasks.iter().map(|t| t.id.clone()).collect();
        let issue_ids: Vec<IssueId> = new_issues.iter().map(|i| i.id.clone()).collect();
        let replies = replies(&gaps, &named, &task_ids, &issue_ids);
        tasks.extend(new_tasks);
        let mut changes: Vec<Change> = tasks.into_iter().map(Change::Task).collect();
        changes.extend(new_issues.into_iter().map(Change::Issue));
        changes.push(Change::Run(run));
        let prioritized = self.prioritize(&mut changes, Priorities::Assign)?;
        self.commit(changes).await?;

        for event in to_split.into_iter().chain(replies) {
            self.emit(event);
        }
        if !task_ids.is_empty() || !issue_ids.is_empty() {
            self.emit(Event::GapsFound {
                tasks: task_ids,
                issues: issue_ids,
            });
        }
        self.emit(prioritized);
        self.emit(Event::IterationFinished { iteration });
        Ok(())
    }

    /// The done tasks that have a verdict, in board order, each with its verdict applied
    /// (see [`apply_verdict`]).
    async fn judge_done_tasks(&self) -> Result<Vec<Task>, Error> {
        let judged: Vec<Task> = self
            .board
            .tasks
            .values()
            .filter(|t| t.status == TaskStatus::Done && t.verdict.is_some())
            .cloned()
            .collect();
        let mut tasks = Vec::with_capacity(judged.len());
        for task in judged {
            let Some(mut verdict) = task.verdict.clone() else {
                continue;
            };
            let mut judged = is_judgement(&verdict);
            if verdict.accepted
                && let Some(reason) = self.off_the_branch(&task).await?
            {
                // Not a judgement of the work: it is built again, not counted against it.
                judged = false;
                verdict = Verdict {
                    accepted: false,
                    reason,
                    gaps: verdict.gaps,
                };
            }
            let limit = judged.then_some(self.config().decompose_after_rejections);
            tasks.push(apply_verdict(task, &verdict, limit));
        }
        Ok(tasks)
    }

    /// What the gap analysis leaves for the final batch. A failed one adds nothing and is
    /// remembered in `check_failed`.
    fn settle_gap_check(&mut self, check: GapCheck) -> GapOutcome {
        let iteration = self.board.run.iteration;
        match check {
            GapCheck::Answer(gaps, named) => {
                // Complete rests on a check that found nothing: one that found work is
                // followed by another once that work is done.
                let found_nothing = gaps.tasks.is_empty() && gaps.issues.is_empty();
                let spec_check = found_nothing.then(|| SpecCheck::answered(iteration));
                GapOutcome {
                    gaps,
                    named,
                    spec_check,
                }
            }
            GapCheck::Failed(reason) => {
                self.check_failed = true;
                GapOutcome {
                    gaps: GapAnswer::default(),
                    named: Vec::new(),
                    spec_check: Some(SpecCheck::failed(iteration, reason)),
                }
            }
        }
    }

    /// Why `task` cannot be accepted although its verifier accepts it, if it cannot: its
    /// commit is no longer on the user's branch (reset or rewritten since it was built).
    async fn off_the_branch(&self, task: &Task) -> Result<Option<String>, Error> {
        let (Some(home), Some(commit)) = (&self.home, &task.commit) else {
            return Ok(None);
        };
        if home.holds(commit).await? {
            return Ok(None);
        }
        Ok(Some(format!(
            "its work, commit {}, is not on {} (it was reset or rewritten since the task was \
             built), so it is built again",
            commit.get(..12).unwrap_or(commit),
            home.name()
        )))
    }

    fn new_issues(&self, texts: &[String], run: &mut RunState) -> Vec<Issue> {
        texts
            .iter()
            .map(|text| {
                let id = run.next_issue_id(|id| self.board.issues.contains_key(id));
                Issue::new(id, text.trim()).with_origin("verify")
            })
            .collect()
    }
}

/// How the gap analysis ended.
enum GapCheck {
    /// A valid answer, and the verifier gaps it answers (numbered from 1, in order).
    Answer(GapAnswer, Vec<(TaskId, String)>),
    /// No valid answer, even when asked once more: why.
    Failed(String),
}

/// What the final batch takes from the gap analysis.
struct GapOutcome {
    /// The tasks and issues to add (none when the analysis failed).
    gaps: GapAnswer,
    /// The verifier gaps `gaps` answers, numbered from 1.
    named: Vec<(TaskId, String)>,
    /// How the spec check ended: `None` when it found work, so another check follows it.
    spec_check: Option<SpecCheck>,
}

/// A warning for each task rejected often enough to go to DECOMPOSE.
fn rejected_too_often(tasks: &[Task]) -> Vec<Event> {
    tasks
        .iter()
        .filter(|t| t.is_killed())
        .map(|t| Event::Warning {
            message: format!(
                "{} was rejected {} times: DECOMPOSE splits it instead of building it again",
                t.id, t.rejections
            ),
        })
        .collect()
}

/// The iteration's note: the verdicts, and what the gap analysis added or why it gave
/// nothing.
fn verification_note(
    accepted: usize,
    rejected: usize,
    gaps: &GapAnswer,
    spec_check: Option<&SpecCheck>,
) -> String {
    match spec_check {
        Some(SpecCheck {
            failed: Some(reason),
            ..
        }) => format!(
            "{accepted} accepted, {rejected} rejected, the gap analysis gave no answer: {reason}"
        ),
        _ => format!(
            "{accepted} accepted, {rejected} rejected, {} new task(s), {} new issue(s)",
            gaps.tasks.len(),
            gaps.issues.len()
        ),
    }
}

/// One event per verifier gap, saying how the gap analysis answered it.
fn replies(
    gaps: &GapAnswer,
    named: &[(TaskId, String)],
    tasks: &[TaskId],
    issues: &[IssueId],
) -> Vec<Event> {
    gaps.verifier_gaps
        .iter()
        .filter_map(|reply| {
            let (task, gap) = named.get(reply.gap.checked_sub(1)?)?;
            let answer = match (reply.task, reply.issue, &reply.no_work) {
                (Some(i), _, _) => format!("task {}", tasks.get(i)?),
                (_, Some(i), _) => format!("issue {}", issues.get(i)?),
                (_, _, why) => format!("no new work: {}", why.as_deref().unwrap_or("").trim()),
            };
            Some(Event::GapAnswered {
                task: task.clone(),
                gap: gap.clone(),
                answer,
            })
        })
        .collect()
}

/// The start of the reason of a rejection recorded for a verifier that gave no usable
/// answer (it failed, or answered invalidly after its retry).
const NO_VERDICT: &str = "no usable verdict: ";

/// Whether `verdict` is a verifier's judgement of the work (not a verifier that gave no
/// usable answer).
fn is_judgement(verdict: &Verdict) -> bool {
    verdict.accepted || !verdict.reason.starts_with(NO_VERDICT)
}

/// Accepted → out of the plan, by a verifier; rejected → pending again, with a tombstone and
/// a fresh retry budget, the verifier's reason carried into the next prompt. A rejection
/// that judged the work counts against the task: at `limit` (`decompose_after_rejections`;
/// `None` when the rejection judged nothing) the task goes to DECOMPOSE instead of being
/// built again (seed 000: "task remains for retry or decomposition"), with its last build's
/// log for the decomposer.
fn apply_verdict(mut task: Task, verdict: &Verdict, limit: Option<u32>) -> Task {
    if verdict.accepted {
        task.status = TaskStatus::Accepted;
        task.accepted_by = Some(AcceptedBy::Verifier);
        return task;
    }
    task.reject("the verifier", &verdict.reason);
    let Some(limit) = limit else {
        return task;
    };
    task.rejections = task.rejections.saturating_add(1);
    if task.rejections >= limit {
        task.kill_reason = Some(KillReason::Rejected);
        task.kill_log = task.build_log.clone();
    }
    task
}

/// One verifier: a verdict from a valid answer; a rejection naming why when there is none;
/// a kill when a limit stopped it.
async fn verify_one(caller: Caller, call: Call) -> Result<Option<(VerifierEnd, u32)>, Error> {
    let asked = call.subject.clone().unwrap_or_default();
    let (result, runs) = caller
        .structured::<VerifyAnswer>(call, |a| a.check_task(&asked))
        .await?;
    let checked = match result {
        Structured::Interrupted => return Ok(None),
        Structured::Answer(answer) => VerifierEnd::Verdict(Verdict {
            accepted: answer.verdict == VerdictKind::Accept,
            reason: answer.reason,
            gaps: answer.gaps,
        }),
        Structured::Unusable {
            kill: Some(kill), ..
        } => VerifierEnd::Killed(kill),
        Structured::Unusable { reason, kill: None } => VerifierEnd::Verdict(Verdict {
            accepted: false,
            reason: format!("{NO_VERDICT}{reason}"),
            gaps: Vec::new(),
        }),
    };
    Ok(Some((checked, runs)))
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests write their fixtures directly
mod tests {
    use std::sync::{Arc, Mutex};

    use async_trait::async_trait;
    use serde_json::json;

    use crate::agent::Script;
    use crate::model::{Board, Change, RunState, Task, TaskStatus};
    use crate::store::{Store, StoreError};
    use crate::{FakeAgent, MemoryStore, Outcome, Ralph, Role};

    /// A memory store that remembers the size of every persisted batch.
    #[derive(Clone, Default)]
    struct Batches {
        store: MemoryStore,
        sizes: Arc<Mutex<Vec<usize>>>,
    }

    #[async_trait]
    impl Store for Batches {
        async fn load(&self) -> Result<Board, StoreError> {
            self.store.load().await
        }

        async fn persist(&self, changes: &[Change]) -> Result<(), StoreError> {
            self.sizes.lock().unwrap().push(changes.len());
            self.store.persist(changes).await
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn verdicts_that_arrive_together_are_persisted_together() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("spec.md"), "# S\n").unwrap();
        let store = Batches::default();
        // A board whose spec was seeded and built: three tasks wait for VERIFY.
        let mut run = RunState::default();
        run.seeded = true;
        let done = (1..=3)
            .map(|i| Change::Task(Task::new(format!("t-{i}"), "x").with_status(TaskStatus::Done)));
        let board: Vec<Change> = std::iter::once(Change::Run(run)).chain(done).collect();
        store.store.persist(&board).await.unwrap();
        let agent = FakeAgent::new()
            .always(
                Role::Verify,
                Script::new().json(json!({"verdict": "accept", "reason": "ok"})),
            )
            .always(
                Role::GapAnalysis,
                Script::new().json(json!({"tasks": [], "issues": []})),
            );
        let ralph = Ralph::builder()
            .workspace(dir.path())
            .agent(agent)
            .store(store.clone())
            .verify_concurrency(3)
            .build()
            .unwrap();

        let outcome = ralph.construct("spec.md").await.unwrap();

        assert!(
            matches!(
                outcome,
                Outcome::Complete {
                    iterations: 1,
                    accepted: 3,
                    ..
                }
            ),
            "{:?}",
            outcome
        );
        // The run's start (config, run), the three verdicts at once, the final batch
        // (three tasks accepted, the next iteration).
        let sizes = store.sizes.lock().unwrap().clone();
        assert_eq!(sizes, vec![2, 3, 4], "{sizes:?}");
        let board = store.store.board();
        assert!(board.tasks.values().all(|t| t.verifications == 1));
    }
}
