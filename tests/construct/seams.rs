//! How the engine talks to its four seams, with mockall mocks (`ralph::mock`): what is
//! persisted before which agent or gate runs, what the prioritizer is given, and how a seam
//! that cannot work aborts the run.

use std::sync::Arc;

use crate::support::*;
use mockall::Sequence;
use ralph::agent::Script;
use ralph::gate::{GateError, GateReport, GateStatus};
use ralph::mock::{MockAgent, MockGate, MockPrioritizer, MockStore};
use ralph::model::{Board, Change, Issue, Task, TaskId, TaskStatus};
use ralph::prioritize::PrioritizeError;
use ralph::store::StoreError;
use ralph::{
    AgentRequest, AgentRun, CriticalPath, Error, FakeAgent, MemoryStore, Outcome, Prioritizer,
    Ralph, Role,
};
use serde_json::json;

/// A board whose spec was investigated into one pending task.
fn one_pending_task() -> Board {
    let mut board = Board::new();
    board.apply(Change::Task(
        Task::new("t-1", "Write done.txt").with_acceptance("done.txt exists"),
    ));
    board.apply(seeded());
    board
}

fn is(request: &AgentRequest, role: Role, subject: &str, attempt: u32) -> bool {
    request.role == role
        && request.subject.as_deref() == Some(subject)
        && request.attempt == attempt
}

fn task_change<'a>(changes: &'a [Change], id: &str) -> Option<&'a Task> {
    changes.iter().find_map(|c| match c {
        Change::Task(t) if t.id == id => Some(t),
        _ => None,
    })
}

fn a_gate(name: &str) -> MockGate {
    let mut gate = MockGate::new();
    gate.expect_name().return_const(name.to_owned());
    gate.expect_required().return_const(true);
    gate
}

fn an_agent() -> MockAgent {
    let mut agent = MockAgent::new();
    agent.expect_name().return_const("mock".to_owned());
    agent
}

fn passed(name: &str) -> GateReport {
    GateReport::new(name, true, GateStatus::Passed)
}

#[tokio::test]
async fn every_transition_is_persisted_before_the_next_agent_or_gate_runs() {
    let dir = workspace("# Greeter\nWrite done.txt.\n");
    let mut seq = Sequence::new();
    let mut store = MockStore::new();
    let mut agent = an_agent();
    let mut gate = a_gate("check");
    let mut prioritizer = MockPrioritizer::new();

    store
        .expect_load()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|| Ok(one_pending_task()));
    // The run's config line and bookkeeping, before any agent runs.
    store
        .expect_persist()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|changes: &[Change]| {
            changes.iter().any(|c| matches!(c, Change::Config(_)))
                && changes.iter().any(|c| {
                    matches!(c, Change::Run(run)
                        if run.spec.as_deref() == Some("spec.md") && run.seeded && run.iteration == 1)
                })
        })
        .returning(|_| Ok(()));
    agent
        .expect_run()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|r: &AgentRequest| is(r, Role::Build, "t-1", 1) && r.schema.is_none())
        .returning(|_| Ok(AgentRun::completed("Wrote it.\n<TASK_DONE>")));
    gate.expect_check()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| Ok(passed("check")));
    // Done is recorded after the gate and before the verifier.
    store
        .expect_persist()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|changes: &[Change]| {
            // The task, and in the same batch the run state remembering the attempt.
            changes.len() == 2
                && changes
                    .iter()
                    .any(|c| matches!(c, Change::Run(run) if run.attempts.len() == 1))
                && task_change(changes, "t-1")
                    .is_some_and(|t| t.status == TaskStatus::Done && t.attempts == 1)
        })
        .returning(|_| Ok(()));
    agent
        .expect_run()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|r: &AgentRequest| is(r, Role::Verify, "t-1", 1) && r.schema.is_some())
        .returning(|_| {
            Ok(AgentRun::completed("")
                .with_structured(json!({"verdict": "accept", "reason": "it greets"})))
        });
    // The verdict is recorded as it arrives, before gap analysis runs.
    store
        .expect_persist()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|changes: &[Change]| {
            task_change(changes, "t-1").is_some_and(|t| {
                t.status == TaskStatus::Done
                    && t.verdict.as_ref().is_some_and(|v| v.accepted)
                    && t.verifications == 1
            })
        })
        .returning(|_| Ok(()));
    agent
        .expect_run()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|r: &AgentRequest| is(r, Role::GapAnalysis, "iteration-1", 1))
        .returning(|_| {
            Ok(AgentRun::completed("").with_structured(json!({"tasks": [], "issues": []})))
        });
    prioritizer
        .expect_prioritize()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|tasks: &[Task]| tasks.is_empty())
        .returning(|tasks| CriticalPath::new().prioritize(tasks));
    // Verdicts applied and the next iteration begun, in one batch.
    store
        .expect_persist()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|changes: &[Change]| {
            task_change(changes, "t-1").is_some_and(|t| t.status == TaskStatus::Accepted)
                && matches!(changes.last(), Some(Change::Run(run)) if run.iteration == 2)
        })
        .returning(|_| Ok(()));

    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(agent)
        .gate(gate)
        .store(store)
        .prioritizer(prioritizer)
        .build()
        .unwrap();
    let outcome = ralph.construct("spec.md").await.unwrap();

    assert_eq!(complete(&outcome), (1, 1));
    // The mocks check on drop that every expectation was met, in order.
}

#[tokio::test]
async fn a_fresh_spec_is_persisted_as_an_issue_before_the_investigator_runs() {
    let dir = workspace("# Greeter\nWrite done.txt.\n");
    let mut seq = Sequence::new();
    let mut store = MockStore::new();
    let mut agent = an_agent();

    store
        .expect_load()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|| {
            // A task a person planned and accepted before the first run: the spec's own
            // issue is covered by it (it may never be out of scope).
            let mut board = Board::new();
            board.apply(Change::Task(
                Task::new("t-1", "Write done.txt").with_status(TaskStatus::Accepted),
            ));
            Ok(board)
        });
    store
        .expect_persist()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|changes: &[Change]| {
            changes.iter().any(
                |c| matches!(c, Change::Issue(i) if i.id == "i-1" && i.text.contains("spec.md")),
            )
        })
        .returning(|_| Ok(()));
    agent
        .expect_run()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|r: &AgentRequest| is(r, Role::Investigate, "i-1", 1))
        .returning(|_| {
            Ok(AgentRun::completed("").with_structured(json!({"already_planned": ["t-1"]})))
        });
    store
        .expect_persist()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|changes: &[Change]| {
            changes
                .iter()
                .any(|c| matches!(c, Change::Issue(i) if i.id == "i-1" && i.attempts == 1))
        })
        .returning(|_| Ok(()));
    // Complete is earned even so: a gap analysis compares the spec with the code.
    agent
        .expect_run()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|r: &AgentRequest| is(r, Role::GapAnalysis, "iteration-1", 1))
        .returning(|_| {
            Ok(AgentRun::completed("").with_structured(json!({"tasks": [], "issues": []})))
        });
    store
        .expect_persist()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|changes: &[Change]| {
            matches!(changes.last(), Some(Change::Run(run))
                if answered(run))
        })
        .returning(|_| Ok(()));

    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(agent)
        .store(store)
        .build()
        .unwrap();
    let outcome = ralph.construct("spec.md").await.unwrap();

    assert_eq!(complete(&outcome), (1, 1));
}

#[tokio::test]
async fn the_prioritizer_is_called_whenever_tasks_are_added_with_only_the_buildable_tasks() {
    let dir = workspace("# Greeter\nWrite done.txt.\n");
    let mut board = Board::new();
    let mut blocked = Task::new("t-3", "Migrate").with_status(TaskStatus::Blocked);
    blocked.blocked_reason = Some("no database".into());
    board.apply_all(
        [
            Task::new("t-1", "Greet").with_status(TaskStatus::Done),
            Task::new("t-2", "Wave").with_status(TaskStatus::Done),
            blocked,
            Task::new("t-4", "Use the column").with_deps(["t-3"]),
            Task::new("t-5", "Old work").with_status(TaskStatus::Accepted),
        ]
        .into_iter()
        .map(Change::Task),
    );
    board.apply(seeded());
    board.apply(Change::Issue(Issue::new("i-1", "Users want a farewell")));
    let store = MemoryStore::with_board(board);
    let agent = FakeAgent::new()
        .on(Role::Investigate, "i-1", tasks(&[("Say bye", "says bye")]))
        .always(Role::Build, done())
        .on(Role::Verify, "t-1", accept("greets"))
        .on_attempt(Role::Verify, "t-2", 1, reject("does not wave"))
        .on(Role::Verify, "t-6", accept("says bye"))
        .on(
            Role::GapAnalysis,
            "iteration-1",
            Script::new().json(json!({"tasks": [{"name": "Say hi", "accept": "says hi"}]})),
        )
        .always(Role::Verify, accept("fine"))
        .on(Role::GapAnalysis, "iteration-2", no_gaps());
    let ids = |tasks: &[Task]| -> Vec<String> { tasks.iter().map(|t| t.id.to_string()).collect() };
    let mut seq = Sequence::new();
    let mut prioritizer = MockPrioritizer::new();
    // INVESTIGATE added t-6.
    prioritizer
        .expect_prioritize()
        .times(1)
        .in_sequence(&mut seq)
        .withf(move |tasks: &[Task]| ids(tasks) == ["t-4", "t-6"])
        .returning(|tasks| CriticalPath::new().prioritize(tasks));
    // VERIFY of iteration 1: t-2 rejected, t-7 from the gap analysis.
    prioritizer
        .expect_prioritize()
        .times(1)
        .in_sequence(&mut seq)
        .withf(move |tasks: &[Task]| ids(tasks) == ["t-2", "t-4", "t-7"])
        .returning(|tasks| CriticalPath::new().prioritize(tasks));
    prioritizer
        .expect_prioritize()
        .times(1)
        .in_sequence(&mut seq)
        .withf(move |tasks: &[Task]| ids(tasks) == ["t-4"])
        .returning(|tasks| CriticalPath::new().prioritize(tasks));
    let events = Recorder::default();

    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(agent)
        .store(store.clone())
        .prioritizer(prioritizer)
        .observer(events.clone())
        .build()
        .unwrap();
    let outcome = ralph.construct("spec.md").await.unwrap();

    let Outcome::Blocked { items } = outcome else {
        panic!("expected Blocked, got {outcome:?}");
    };
    let blocked: Vec<&str> = items.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(blocked, ["t-3", "t-4"]);
    assert_eq!(
        events.stages(),
        [
            (1, "INVESTIGATE".to_owned()),
            (1, "BUILD".to_owned()),
            (1, "VERIFY".to_owned()),
            (2, "BUILD".to_owned()),
            (2, "VERIFY".to_owned()),
        ]
    );
    let board = store.board();
    for id in ["t-1", "t-2", "t-6", "t-7"] {
        assert_eq!(board.task(id).unwrap().status, TaskStatus::Accepted, "{id}");
    }
    // What the prioritizer said was persisted: ranks on the tasks it ordered.
    assert!(board.task("t-4").unwrap().rank.is_some());
    assert!(board.task("t-4").unwrap().computed_priority.is_some());
}

#[tokio::test]
async fn a_gate_that_cannot_run_aborts_the_run() {
    let dir = workspace("# Greeter\n");
    let store = MemoryStore::with_board(one_pending_task());
    let mut agent = an_agent();
    agent
        .expect_run()
        .times(1)
        .withf(|r: &AgentRequest| is(r, Role::Build, "t-1", 1))
        .returning(|_| Ok(AgentRun::completed("<TASK_DONE>")));
    let mut gate = a_gate("lint");
    gate.expect_check().times(1).returning(|_| {
        Err(GateError::Spawn {
            gate: "lint".into(),
            source: std::io::Error::other("no such program"),
        })
    });
    // A later gate never runs.
    let mut later = a_gate("test");
    later.expect_check().never();

    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(agent)
        .gate(gate)
        .gate(later)
        .store(store.clone())
        .build()
        .unwrap();
    let err = ralph.construct("spec.md").await.unwrap_err();

    assert!(
        matches!(err, Error::Gate(GateError::Spawn { ref gate, .. }) if gate == "lint"),
        "{err:?}"
    );
    assert!(err.to_string().contains("lint"), "{err}");
    // The attempt that could not be checked is not on the record: it runs again on resume.
    let task = store.board().task("t-1").unwrap().clone();
    assert_eq!((task.status, task.attempts), (TaskStatus::Pending, 0));
}

#[tokio::test]
async fn a_store_that_cannot_persist_aborts_the_run_and_no_agent_runs_after() {
    let dir = workspace("# Greeter\n");
    let mut seq = Sequence::new();
    let mut store = MockStore::new();
    let mut agent = an_agent();
    let mut gate = a_gate("check");
    store
        .expect_load()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|| Ok(one_pending_task()));
    store
        .expect_persist()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| Ok(()));
    agent
        .expect_run()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|r: &AgentRequest| is(r, Role::Build, "t-1", 1))
        .returning(|_| Ok(AgentRun::completed("<TASK_DONE>")));
    gate.expect_check()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| Ok(passed("check")));
    store
        .expect_persist()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|changes: &[Change]| {
            task_change(changes, "t-1").is_some_and(|t| t.status == TaskStatus::Done)
        })
        .returning(|_| {
            Err(StoreError::backend(
                "mock",
                std::io::Error::other("disk full"),
            ))
        });
    // Nothing after: no verifier, no further persist (the mocks panic on any other call).

    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(agent)
        .gate(gate)
        .store(store)
        .build()
        .unwrap();
    let err = ralph.construct("spec.md").await.unwrap_err();

    assert!(
        matches!(err, Error::Store(StoreError::Backend { ref store, ref source })
            if store == "mock" && source.to_string() == "disk full"),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_store_that_fails_the_first_persist_runs_no_agent_at_all() {
    let dir = workspace("# Greeter\n");
    let mut store = MockStore::new();
    store.expect_load().times(1).returning(|| Ok(Board::new()));
    store.expect_persist().times(1).returning(|_| {
        Err(StoreError::backend(
            "mock",
            std::io::Error::other("read-only file system"),
        ))
    });
    let mut agent = an_agent();
    agent.expect_run().never();

    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(agent)
        .store(store)
        .build()
        .unwrap();
    let err = ralph.construct("spec.md").await.unwrap_err();

    let Error::Store(StoreError::Backend { store, source }) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (store.as_str(), source.to_string()),
        ("mock", "read-only file system".into())
    );
}

#[tokio::test]
async fn a_store_that_cannot_load_fails_before_anything_runs() {
    let dir = workspace("# Greeter\n");
    let mut store = MockStore::new();
    store.expect_load().times(1).returning(|| {
        Err(StoreError::Malformed {
            path: "plan.jsonl".into(),
            line: 3,
            message: "expected value".into(),
        })
    });
    store.expect_persist().never();
    let mut agent = an_agent();
    agent.expect_run().never();

    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(agent)
        .store(store)
        .build()
        .unwrap();
    let err = ralph.construct("spec.md").await.unwrap_err();

    assert_eq!(err.to_string(), "plan.jsonl:3: expected value");
}

#[tokio::test]
async fn a_prioritizer_error_aborts_verify_after_the_verdicts_are_saved() {
    let dir = workspace("# Greeter\n");
    let store = MemoryStore::with_board({
        let mut board = Board::new();
        board.apply(Change::Task(
            Task::new("t-1", "Greet").with_status(TaskStatus::Done),
        ));
        board.apply(seeded());
        board
    });
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Verify, "t-1", reject("does not greet"))
            .on(Role::GapAnalysis, "iteration-1", no_gaps()),
    );
    let mut prioritizer = MockPrioritizer::new();
    prioritizer.expect_prioritize().times(1).returning(|_| {
        Err(PrioritizeError::Cycle {
            tasks: vec![TaskId::new("t-1"), TaskId::new("t-1")],
        })
    });

    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(agent.clone())
        .store(store.clone())
        .prioritizer(prioritizer)
        .build()
        .unwrap();
    let err = ralph.construct("spec.md").await.unwrap_err();

    assert!(matches!(err, Error::Prioritize(_)), "{err:?}");
    assert_eq!(err.to_string(), "dependency cycle: t-1 -> t-1");
    agent.verify().unwrap();
    // The verdict was saved as it arrived; it was not applied, and the iteration did not end.
    let board = store.board();
    let task = &board.task("t-1").unwrap();
    assert_eq!(task.status, TaskStatus::Done);
    assert_eq!(task.verdict.as_ref().map(|v| v.accepted), Some(false));
    assert_eq!(board.run.iteration, 1);
}

/// A user's prioritizer: the newest task first, built from its own result.
struct NewestFirst;

impl Prioritizer for NewestFirst {
    fn prioritize(
        &self,
        tasks: &[Task],
    ) -> Result<Vec<(TaskId, ralph::model::Priority)>, ralph::prioritize::PrioritizeError> {
        Ok(tasks
            .iter()
            .rev()
            .map(|t| (t.id.clone(), ralph::model::Priority::Medium))
            .collect())
    }
}

#[tokio::test]
async fn a_custom_prioritizer_orders_the_first_build() {
    let dir = workspace("# Greeter\nThree independent tasks.\n");
    let agent = FakeAgent::new()
        .on(
            Role::Investigate,
            "i-1",
            tasks(&[("One", "1"), ("Two", "2"), ("Three", "3")]),
        )
        .always(Role::Build, done())
        .always(Role::Verify, accept("fine"))
        .always(Role::GapAnalysis, no_gaps());
    let events = Recorder::default();
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(agent)
        .store(MemoryStore::new())
        .prioritizer(NewestFirst)
        .observer(events.clone())
        .build()
        .unwrap();

    let outcome = ralph.construct("spec.md").await.unwrap();

    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    let built: Vec<String> = events
        .of_kind("task_started")
        .into_iter()
        .map(|e| e["task"].as_str().unwrap().to_owned())
        .collect();
    // Without the prioritizer the tasks would be built in creation order.
    assert_eq!(built, ["t-3", "t-2", "t-1"]);
}

/// What a gate was asked to check: the task, its name, the attempt.
type Checked = (Option<String>, Option<String>, u32);

/// A gate of a user's own: it fails a task's first attempt and remembers what it checked.
#[derive(Default)]
struct Remembers(std::sync::Mutex<Vec<Checked>>);

#[async_trait::async_trait]
impl ralph::Gate for Remembers {
    fn name(&self) -> &str {
        "remembers"
    }

    async fn check(&self, ctx: ralph::gate::GateContext) -> Result<GateReport, GateError> {
        let seen = (
            ctx.task.as_ref().map(ToString::to_string),
            ctx.task_name.clone(),
            ctx.attempt,
        );
        self.0.lock().expect("not poisoned").push(seen);
        let status = if ctx.attempt == 1 {
            GateStatus::Failed {
                code: Some(1),
                signal: None,
            }
        } else {
            GateStatus::Passed
        };
        Ok(GateReport::new("remembers", true, status))
    }
}

#[tokio::test]
async fn a_gate_knows_the_task_and_the_attempt_it_checks() {
    let dir = workspace("# Greeter\n");
    let gate = Arc::new(Remembers::default());
    let agent = FakeAgent::new()
        .on(
            Role::Investigate,
            "i-1",
            tasks(&[("Write it", "it exists")]),
        )
        .always(Role::Build, done())
        .always(Role::Verify, accept("fine"))
        .always(Role::GapAnalysis, no_gaps());
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(agent)
        .store(MemoryStore::new())
        .gate(gate.clone())
        .build()
        .unwrap();
    let outcome = ralph.construct("spec.md").await.unwrap();
    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    let seen = gate.0.lock().unwrap().clone();
    let task = (Some("t-1".to_owned()), Some("Write it".to_owned()));
    assert_eq!(
        seen,
        [(task.0.clone(), task.1.clone(), 1), (task.0, task.1, 2)]
    );
}

/// Whether the run state says the last gap analysis answered, as persisted (`spec_check`,
/// which only the loop reads).
fn answered(run: &ralph::model::RunState) -> bool {
    let run = serde_json::to_value(run).expect("a run state is JSON");
    run["spec_check"].is_object() && run["spec_check"].get("failed").is_none()
}
