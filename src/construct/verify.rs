//! VERIFY: one verifier per done task, concurrently (fork/join, bounded); verdicts
//! are recorded as they arrive (those that arrive together, in one batch); then gap analysis; then, in one persisted batch, the
//! verdicts are applied, new tasks and issues added, pending work re-prioritized, and the
//! iteration ends.

use std::collections::HashMap;

use serde::Serialize;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{Engine, Flow};
use crate::agent::Role;
use crate::answer::{GapAnswer, VerdictKind, VerifyAnswer};
use crate::event::Event;
use crate::model::{Change, Issue, IssueId, RunState, Task, TaskId, TaskStatus, Verdict};
use crate::runtime::call::{Call, Caller, Kill, Structured};
use crate::runtime::deadline;
use crate::runtime::error::Error;
use crate::runtime::spec::SpecDoc;

/// What a verifier job returns: the task, and how its check ended with the runs used, or
/// nothing if the run was interrupted.
type JobResult = (TaskId, Result<Option<(Checked, u32)>, Error>);

/// How one verifier ended.
enum Checked {
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
        // Gap analysis is a step of its own, with its own time: slow verifiers (or rate limits)
        // must not leave it none, which would skip it and could end the run without it.
        let gap_deadline = deadline::after(self.config().stage_timeout);
        let Some(gaps) = self.gap_analysis(gap_deadline).await? else {
            return Ok(Flow::Interrupted);
        };
        self.apply_verification(gaps).await?;
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
                let (id, result) = joined.map_err(|e| {
                    Error::Agent(crate::agent::AgentError::Other(format!(
                        "a verifier job failed: {e}"
                    )))
                })?;
                match result? {
                    Some((verdict, runs)) => verdicts.push((id, verdict, runs)),
                    None => interrupted = true,
                }
            }
            if !interrupted {
                for task in todo.by_ref().take(verdicts.len()) {
                    self.spawn_verifier(&mut jobs, task)?;
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
        struct Ctx<'a> {
            spec: &'a SpecDoc,
            task: &'a Task,
        }
        let prompt = self.ctx.prompts.render(
            "verify",
            &Ctx {
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
        verdicts: Vec<(TaskId, Checked, u32)>,
    ) -> Result<(), Error> {
        let changes = verdicts
            .iter()
            .map(|(id, checked, runs)| {
                let mut task = self.task(id)?;
                task.verifications += runs;
                match checked {
                    Checked::Verdict(verdict) => task.verdict = Some(verdict.clone()),
                    Checked::Killed(kill) => {
                        let note = format!("verification {}", self.kill_note(kill.reason));
                        task.record_kill(kill.reason, kill.log.clone(), &note);
                    }
                }
                Ok(Change::Task(task))
            })
            .collect::<Result<_, Error>>()?;
        self.commit(changes).await?;
        for (id, checked, _) in verdicts {
            self.emit(match checked {
                Checked::Verdict(verdict) => Event::Verdict {
                    task: id,
                    accepted: verdict.accepted,
                    reason: verdict.reason,
                },
                Checked::Killed(kill) => Event::TaskKilled {
                    task: id,
                    reason: kill.reason,
                    log: kill.log,
                },
            });
        }
        Ok(())
    }

    /// Asks what the spec still needs. `None` if interrupted; an unusable answer, a kill
    /// included, is a warning and counts as "no gaps found": gap analysis belongs to no task
    /// or issue, so there is nothing to decompose (docs/seed-differences.md, seed 000).
    async fn gap_analysis(&mut self, deadline: Instant) -> Result<Option<GapAnswer>, Error> {
        #[derive(Serialize)]
        struct Ctx<'a> {
            spec: &'a SpecDoc,
            done: Vec<String>,
            remaining: Vec<String>,
            gaps: Vec<&'a str>,
        }
        let summary = |t: &Task| format!("{}: {}", t.id, t.name);
        let tasks = self.board.tasks.values();
        let ctx = Ctx {
            spec: &self.spec,
            done: tasks
                .clone()
                .filter(|t| t.is_finished())
                .map(summary)
                .take(200)
                .collect(),
            remaining: tasks
                .clone()
                .filter(|t| t.is_remaining() && !t.is_finished())
                .map(summary)
                .take(200)
                .collect(),
            // This round's verdicts only: accepted tasks keep theirs, and the prompt must not
            // grow with the board's history.
            gaps: tasks
                .filter(|t| t.status == TaskStatus::Done)
                .filter_map(|t| t.verdict.as_ref())
                .flat_map(|v| v.gaps.iter().map(String::as_str))
                .take(200)
                .collect(),
        };
        let call = self.call(
            Role::GapAnalysis,
            &format!("iteration-{}", self.board.run.iteration),
            1,
            self.ctx.prompts.render("gap_analysis", &ctx)?,
            deadline,
        );
        let (result, _) = self
            .caller
            .structured::<GapAnswer>(call, |a| self.check_dep_ids(&a.tasks))
            .await?;
        Ok(match result {
            Structured::Answer(answer) => Some(answer),
            Structured::Interrupted => None,
            Structured::Unusable { reason, .. } => {
                self.emit(Event::Warning {
                    message: format!(
                        "gap analysis gave no usable answer ({reason}); no gaps recorded"
                    ),
                });
                Some(GapAnswer::default())
            }
        })
    }

    /// The final batch: verdicts, gap tasks and issues, priorities, next iteration.
    async fn apply_verification(&mut self, gaps: GapAnswer) -> Result<(), Error> {
        let mut changed: HashMap<TaskId, Task> = HashMap::new();
        let mut order: Vec<TaskId> = Vec::new();
        for task in self
            .board
            .tasks
            .values()
            .filter(|t| t.status == TaskStatus::Done)
        {
            if let Some(verdict) = &task.verdict {
                order.push(task.id.clone());
                changed.insert(task.id.clone(), apply_verdict(task.clone(), verdict));
            }
        }
        let accepted = order
            .iter()
            .filter(|id| changed[*id].status == TaskStatus::Accepted)
            .count();
        let note = format!(
            "{accepted} accepted, {} rejected, {} new task(s), {} new issue(s)",
            order.len() - accepted,
            gaps.tasks.len(),
            gaps.issues.len()
        );
        let mut run = self.next_iteration(accepted, &note);
        let new_tasks = self.materialize(&gaps.tasks, None, &mut run, "verify");
        let new_issues = self.new_issues(&gaps.issues, &mut run);
        let task_ids: Vec<TaskId> = new_tasks.iter().map(|t| t.id.clone()).collect();
        for task in new_tasks {
            order.push(task.id.clone());
            changed.insert(task.id.clone(), task);
        }
        let mut changes: Vec<Change> = order
            .iter()
            .filter_map(|id| changed.remove(id))
            .map(Change::Task)
            .collect();
        let issue_ids: Vec<IssueId> = new_issues.iter().map(|i| i.id.clone()).collect();
        changes.extend(new_issues.into_iter().map(Change::Issue));
        changes.push(Change::Run(run));
        let prioritized = self.prioritize(&mut changes)?;
        let iteration = self.board.run.iteration;
        self.commit(changes).await?;

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

/// Accepted → out of the plan; rejected → pending again, with a tombstone and a fresh
/// retry budget, the verifier's reason carried into the next prompt.
fn apply_verdict(mut task: Task, verdict: &Verdict) -> Task {
    if verdict.accepted {
        task.status = TaskStatus::Accepted;
        return task;
    }
    task.reject("the verifier", &verdict.reason);
    task
}

/// One verifier: a verdict from a valid answer; a rejection naming why when there is none;
/// a kill when a limit stopped it.
async fn verify_one(caller: Caller, call: Call) -> Result<Option<(Checked, u32)>, Error> {
    let (result, runs) = caller.structured::<VerifyAnswer>(call, |_| Ok(())).await?;
    let checked = match result {
        Structured::Interrupted => return Ok(None),
        Structured::Answer(answer) => Checked::Verdict(Verdict {
            accepted: answer.verdict == VerdictKind::Accept,
            reason: answer.reason,
            gaps: answer.gaps,
        }),
        Structured::Unusable {
            kill: Some(kill), ..
        } => Checked::Killed(kill),
        Structured::Unusable { reason, kill: None } => Checked::Verdict(Verdict {
            accepted: false,
            reason: format!("no usable verdict: {reason}"),
            gaps: Vec::new(),
        }),
    };
    Ok(Some((checked, runs)))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use async_trait::async_trait;
    use serde_json::json;

    use crate::agent::Script;
    use crate::model::{Board, Change, Task, TaskStatus};
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
        let done = (1..=3)
            .map(|i| Change::Task(Task::new(format!("t-{i}"), "x").with_status(TaskStatus::Done)));
        store
            .store
            .persist(&done.collect::<Vec<_>>())
            .await
            .unwrap();
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

        assert_eq!(
            outcome,
            Outcome::Complete {
                iterations: 1,
                accepted: 3
            }
        );
        // The run's start (config, run), the three verdicts at once, the final batch
        // (three tasks accepted, the next iteration).
        let sizes = store.sizes.lock().unwrap().clone();
        assert_eq!(sizes, vec![2, 3, 4], "{sizes:?}");
        let board = store.store.board();
        assert!(board.tasks.values().all(|t| t.verifications == 1));
    }
}
