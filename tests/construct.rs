//! The construct loop under failure, end to end: a scripted `FakeAgent`, real `ShellGate`s,
//! tempdir workspaces, `MemoryStore` (or `JsonlStore` where persistence matters) and short
//! real limits. Every assertion is on counts, order, states, prompts and events — never on
//! how long something took.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use common::*;
use ralph::agent::fake::RecordedRequest;
use ralph::agent::{FailureKind, Script};
use ralph::event::Event;
use ralph::gate::GateStatus;
use ralph::model::{Change, IssueStatus, KillReason, Task, TaskStatus};
use ralph::outcome::BlockedItem;
use ralph::store::StoreError;
use ralph::{
    Agent, AgentError, AgentRequest, AgentRun, BuildError, Error, FakeAgent, JsonlStore,
    MemoryStore, Outcome, Ralph, RalphBuilder, Role, ShellGate, Store,
};
use rstest::rstest;
use serde_json::json;

const SPEC: &str = "# Greeter\nWrite done.txt, which greets.\n";

/// A gate that passes once `done.txt` exists and says so when it does not.
fn done_gate() -> ShellGate {
    ShellGate::new(
        "done-file",
        "test -f done.txt || { echo 'done.txt is missing'; exit 1; }",
    )
}

/// A build run that does the work and claims done.
fn writes_done() -> Script {
    Script::new()
        .write("done.txt", "hello\n")
        .answer("Wrote done.txt.\n<TASK_DONE>")
}

/// i-1 becomes one task, `t-1`; every verifier accepts; gap analysis finds nothing.
fn one_task() -> FakeAgent {
    FakeAgent::new()
        .on(
            Role::Investigate,
            "i-1",
            tasks(&[("Write done.txt", "done.txt exists and greets")]),
        )
        .always(Role::Verify, accept("meets the criteria"))
        .always(Role::GapAnalysis, no_gaps())
}

/// A scripted run against a tempdir workspace holding `spec.md`, with a `MemoryStore`.
struct Harness {
    dir: tempfile::TempDir,
    agent: Arc<FakeAgent>,
    store: MemoryStore,
    events: Recorder,
}

impl Harness {
    fn new(agent: FakeAgent) -> Self {
        Harness {
            dir: workspace(SPEC),
            agent: Arc::new(agent),
            store: MemoryStore::new(),
            events: Recorder::default(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn builder(&self) -> RalphBuilder {
        Ralph::builder()
            .workspace(self.path())
            .agent(self.agent.clone())
            .store(self.store.clone())
            .observer(self.events.clone())
            .stage_timeout(Duration::from_secs(20))
    }

    fn ralph(&self, configure: impl FnOnce(RalphBuilder) -> RalphBuilder) -> Ralph {
        configure(self.builder()).build().expect("ralph builds")
    }

    /// Builds with `configure` and runs `construct("spec.md")`.
    async fn run(&self, configure: impl FnOnce(RalphBuilder) -> RalphBuilder) -> Outcome {
        self.try_run(configure).await.expect("construct runs")
    }

    async fn try_run(
        &self,
        configure: impl FnOnce(RalphBuilder) -> RalphBuilder,
    ) -> Result<Outcome, Error> {
        self.ralph(configure).construct("spec.md").await
    }

    /// The requests for `role` about `subject`, in order.
    fn requests(&self, role: Role, subject: &str) -> Vec<RecordedRequest> {
        self.agent
            .requests()
            .into_iter()
            .filter(|r| r.role == role && r.subject.as_deref() == Some(subject))
            .collect()
    }

    fn task(&self, id: &str) -> Task {
        self.store.board().tasks[id].clone()
    }

    /// Every persisted record of task `id`, oldest first.
    fn history(&self, id: &str) -> Vec<Task> {
        self.store
            .persisted()
            .into_iter()
            .filter_map(|c| match c {
                Change::Task(t) if t.id == id => Some(t),
                _ => None,
            })
            .collect()
    }

    /// Ids of the `task_started` events, in order, with their attempt in the round.
    fn started(&self) -> Vec<(String, u32)> {
        self.events
            .events()
            .into_iter()
            .filter_map(|e| match e {
                Event::TaskStarted { task, attempt, .. } => Some((task.to_string(), attempt)),
                _ => None,
            })
            .collect()
    }

    fn gate_statuses(&self) -> Vec<GateStatus> {
        self.events
            .events()
            .into_iter()
            .filter_map(|e| match e {
                Event::GateFinished { status, .. } => Some(status),
                _ => None,
            })
            .collect()
    }
}

fn attempts(requests: &[RecordedRequest]) -> Vec<u32> {
    requests.iter().map(|r| r.attempt).collect()
}

fn blocked(outcome: &Outcome) -> &[BlockedItem] {
    match outcome {
        Outcome::Blocked { items } => items,
        other => panic!("expected Blocked, got {other:?}"),
    }
}

/// Builds a `Ralph` on a workspace whose previous `Ralph` was just dropped.
///
/// Retries briefly on the store's lock: while another test of this binary spawns a gate,
/// the child holds duplicates of every descriptor between its fork and its exec (they are
/// close-on-exec), the lock file's included, for a moment.
fn build_unlocked(builder: impl Fn() -> RalphBuilder) -> Ralph {
    for _ in 0..200 {
        match builder().build() {
            Ok(ralph) => return ralph,
            Err(BuildError::Store(StoreError::Locked { .. })) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("ralph does not build: {e}"),
        }
    }
    panic!("the store stayed locked")
}

fn plan_file(dir: &Path) -> PathBuf {
    dir.join(".ralph/plan.jsonl")
}

/// Opens the workspace's `plan.jsonl` as the next process would (see [`build_unlocked`]).
fn open_unlocked(dir: &Path) -> JsonlStore {
    for _ in 0..200 {
        match JsonlStore::open(plan_file(dir)) {
            Ok(store) => return store,
            Err(StoreError::Locked { .. }) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("the store does not open: {e}"),
        }
    }
    panic!("the store stayed locked")
}

// ---------------------------------------------------------------------------------------
// 1. Retries carry the gate's failure; the retry limit blocks.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_failing_gate_is_retried_with_its_output_and_then_passes() {
    let h = Harness::new(
        one_task()
            // Claims done but did not write the file.
            .on_attempt(
                Role::Build,
                "t-1",
                1,
                Script::new().answer("All done.\n<TASK_DONE>"),
            )
            .on_attempt(Role::Build, "t-1", 2, writes_done()),
    );

    let outcome = h.run(|b| b.gate(done_gate())).await;

    assert_eq!(
        outcome,
        Outcome::Complete {
            iterations: 1,
            accepted: 1
        }
    );
    h.agent.verify().unwrap();
    let builds = h.requests(Role::Build, "t-1");
    assert_eq!(attempts(&builds), [1, 2]);
    assert!(!builds[0].prompt.contains("Previous Attempt Failed"));
    let retry = &builds[1].prompt;
    assert!(retry.contains("## Previous Attempt Failed"), "{retry}");
    assert!(
        retry.contains("Quality gate `done-file` failed (exit 1)"),
        "{retry}"
    );
    assert!(retry.contains("done.txt is missing"), "{retry}");

    assert_eq!(
        h.gate_statuses(),
        [
            GateStatus::Failed {
                code: Some(1),
                signal: None
            },
            GateStatus::Passed
        ]
    );
    let retries = h.events.of_kind("task_retry");
    assert_eq!(retries.len(), 1);
    assert_eq!(retries[0]["attempt"], 1);
    assert!(
        retries[0]["reason"]
            .as_str()
            .unwrap()
            .contains("`done-file`")
    );
    assert_eq!(h.started(), [("t-1".into(), 1), ("t-1".into(), 2)]);

    // The failure was persisted before the retry, and cleared once done.
    let history = h.history("t-1");
    let failed = &history[1];
    assert_eq!((failed.status, failed.attempts), (TaskStatus::Pending, 1));
    assert!(
        failed
            .last_failure
            .as_deref()
            .unwrap()
            .contains("done.txt is missing")
    );
    let task = h.task("t-1");
    assert_eq!(task.status, TaskStatus::Accepted);
    assert_eq!(task.attempts, 2);
    assert_eq!(task.last_failure, None);
}

#[tokio::test]
async fn a_failed_agent_run_is_retried_with_the_reason() {
    let h = Harness::new(
        one_task()
            .on_attempt(
                Role::Build,
                "t-1",
                1,
                Script::new().fail("the tool crashed"),
            )
            .on_attempt(Role::Build, "t-1", 2, writes_done()),
    );
    let outcome = h.run(|b| b.gate(done_gate())).await;
    assert_eq!(outcome.exit_code(), 0, "{outcome}");
    let builds = h.requests(Role::Build, "t-1");
    assert!(
        builds[1]
            .prompt
            .contains("The agent run failed: the tool crashed"),
        "{}",
        builds[1].prompt
    );
    // The failed run never reached the gates.
    assert_eq!(h.gate_statuses(), [GateStatus::Passed]);
}

#[rstest]
#[case::no_retries(0)]
#[case::one_retry(1)]
#[case::two_retries(2)]
#[tokio::test]
async fn gates_failing_on_every_attempt_block_the_task_after_retries_plus_one(
    #[case] retries: u32,
) {
    let h = Harness::new(one_task().always(Role::Build, done()));

    let outcome = h.run(|b| b.gate(done_gate()).retries(retries)).await;

    assert_eq!(outcome.exit_code(), 3);
    let items = blocked(&outcome);
    assert_eq!(items.len(), 1, "{outcome}");
    assert_eq!(items[0].id, "t-1");
    let reason = &items[0].reason;
    assert!(
        reason.starts_with(&format!("gave up after {} attempts", retries + 1)),
        "{reason}"
    );
    assert!(reason.contains("Quality gate `done-file`"), "{reason}");

    let expected: Vec<u32> = (1..=retries + 1).collect();
    assert_eq!(attempts(&h.requests(Role::Build, "t-1")), expected);
    assert_eq!(h.gate_statuses().len(), expected.len());
    let task = h.task("t-1");
    assert_eq!(task.status, TaskStatus::Blocked);
    assert_eq!(task.attempts, retries + 1);
    assert_eq!(task.blocked_reason.as_deref(), Some(reason.as_str()));
    // A blocked task is never verified.
    assert!(h.requests(Role::Verify, "t-1").is_empty());
    assert!(outcome.to_string().contains("t-1: gave up after"));
}

// ---------------------------------------------------------------------------------------
// 2. The gate's output in a retry prompt is bounded.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_flood_of_gate_output_reaches_the_retry_prompt_bounded() {
    let h = Harness::new(
        one_task()
            .on_attempt(Role::Build, "t-1", 1, done())
            .on_attempt(Role::Build, "t-1", 2, writes_done()),
    );
    // ~5 MB on a failure.
    let noisy = ShellGate::new(
        "noisy",
        "test -f done.txt && exit 0; echo FIRST LINE; \
         yes 'warning: the same thing, again and again' | head -c 5000000; \
         echo; echo LAST LINE; exit 1",
    );

    let outcome = h.run(|b| b.gate(noisy)).await;

    assert_eq!(outcome.exit_code(), 0, "{outcome}");
    let retry = &h.requests(Role::Build, "t-1")[1].prompt;
    assert!(
        retry.len() < 16 * 1024,
        "retry prompt is {} bytes",
        retry.len()
    );
    assert!(retry.contains("omitted"), "{retry}");
    assert!(retry.contains("FIRST LINE"));
    assert!(retry.contains("LAST LINE"));
    // The retry event's reason is one short line.
    let retries = h.events.of_kind("task_retry");
    assert!(retries[0]["reason"].as_str().unwrap().len() <= 300);
    // Nothing is lost: the gate's log has all of it.
    let logs = std::fs::read_dir(h.path().join("build/ralph-logs")).unwrap();
    let biggest = logs
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().contains("gate-noisy"))
        .map(|e| e.metadata().unwrap().len())
        .max()
        .unwrap();
    assert!(biggest >= 5_000_000, "the gate log has {biggest} bytes");
}

// ---------------------------------------------------------------------------------------
// 3. TASK_BLOCKED.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_blocked_marker_blocks_the_task_with_its_reason_and_runs_no_gate() {
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                Script::new().json(json!({"tasks": [
                    {"name": "Call the API", "accept": "the API answers"},
                    {"name": "Cache the answers", "accept": "cached", "deps": [0]}
                ]})),
            )
            .on(
                Role::Build,
                "t-1",
                Script::new().answer(
                    "I cannot call the API without credentials.\n<TASK_BLOCKED reason=\"needs \"API key\"\">",
                ),
            ),
    );
    let witness = ShellGate::new("witness", "echo ran >> gate-runs.txt");

    let outcome = h.run(|b| b.gate(witness)).await;

    assert_eq!(
        outcome,
        Outcome::Blocked {
            items: vec![
                BlockedItem::new("t-1", "needs \"API key\""),
                BlockedItem::new("t-2", "waits on t-1"),
            ]
        }
    );
    assert_eq!(outcome.exit_code(), 3);
    assert!(
        outcome.to_string().contains("t-1: needs \"API key\""),
        "{outcome}"
    );
    h.agent.verify().unwrap();
    assert!(!h.path().join("gate-runs.txt").exists(), "a gate ran");
    assert!(h.gate_statuses().is_empty());
    assert!(h.requests(Role::Build, "t-2").is_empty());
    let task = h.task("t-1");
    assert_eq!(task.status, TaskStatus::Blocked);
    assert_eq!(task.blocked_reason.as_deref(), Some("needs \"API key\""));
    assert_eq!(task.attempts, 1);
    let blocked_events = h.events.of_kind("task_blocked");
    assert_eq!(blocked_events.len(), 1);
    assert_eq!(blocked_events[0]["reason"], "needs \"API key\"");
    assert_eq!(h.task("t-2").status, TaskStatus::Pending);
}

// ---------------------------------------------------------------------------------------
// 4. Markers that must not complete a task.
// ---------------------------------------------------------------------------------------

const NOT_AT_END: &str = "did not end with <TASK_DONE> on a line of its own";
const CONFLICT: &str = "contained both <TASK_DONE> and <TASK_BLOCKED";

#[rstest]
#[case::in_prose("Tests pass, so I output <TASK_DONE> now.", NOT_AT_END)]
#[case::followed_by_text("<TASK_DONE>\nLet me double-check one more thing.", NOT_AT_END)]
#[case::in_a_code_fence("The marker:\n```\n<TASK_DONE>\n```", NOT_AT_END)]
#[case::in_an_unclosed_fence("Output:\n```text\n<TASK_DONE>", NOT_AT_END)]
#[case::in_backticks("`<TASK_DONE>`", NOT_AT_END)]
#[case::quoted("> <TASK_DONE>", NOT_AT_END)]
#[case::wrong_case("<task_done>", NOT_AT_END)]
#[case::no_marker("I implemented everything.", NOT_AT_END)]
#[case::empty_answer("", NOT_AT_END)]
#[case::both_markers("<TASK_BLOCKED reason=\"flaky\">\n<TASK_DONE>", CONFLICT)]
#[tokio::test]
async fn a_marker_that_does_not_count_is_a_failed_attempt(#[case] answer: &str, #[case] why: &str) {
    let h = Harness::new(
        one_task()
            // The work is there (the gate would pass): only the marker is wrong.
            .on_attempt(
                Role::Build,
                "t-1",
                1,
                Script::new().write("done.txt", "hello\n").answer(answer),
            )
            .on_attempt(Role::Build, "t-1", 2, done()),
    );
    let witness = ShellGate::new("witness", "echo ran >> gate-runs.txt; test -f done.txt");

    let outcome = h.run(|b| b.gate(witness)).await;

    assert_eq!(
        outcome,
        Outcome::Complete {
            iterations: 1,
            accepted: 1
        }
    );
    let builds = h.requests(Role::Build, "t-1");
    assert_eq!(attempts(&builds), [1, 2]);
    assert!(builds[1].prompt.contains(why), "{}", builds[1].prompt);
    // Gates ran only for the attempt whose answer ended with the marker.
    let runs = std::fs::read_to_string(h.path().join("gate-runs.txt")).unwrap();
    assert_eq!(runs.lines().count(), 1);
    let done: Vec<_> = h.events.of_kind("task_done");
    assert_eq!(done.len(), 1);
    let retries = h.events.of_kind("task_retry");
    assert_eq!(retries.len(), 1);
    assert_eq!(retries[0]["attempt"], 1);
    // The not-done attempt is on record, with why.
    let history = h.history("t-1");
    assert_eq!(history[1].status, TaskStatus::Pending);
    assert!(history[1].last_failure.as_deref().unwrap().contains(why));
}

#[rstest]
#[case::plain("Done.\n<TASK_DONE>")]
#[case::trailing_newlines("Done.\n<TASK_DONE>\n\n")]
#[case::crlf("Done.\r\n<TASK_DONE>\r\n")]
#[case::surrounding_spaces("Done.\n   <TASK_DONE>  ")]
#[case::after_a_closed_fence("```\ncode\n```\n<TASK_DONE>")]
#[tokio::test]
async fn the_marker_as_the_last_whole_line_counts(#[case] answer: &str) {
    let h = Harness::new(one_task().on(
        Role::Build,
        "t-1",
        Script::new().write("done.txt", "hello\n").answer(answer),
    ));
    let outcome = h.run(|b| b.gate(done_gate())).await;
    assert_eq!(
        outcome,
        Outcome::Complete {
            iterations: 1,
            accepted: 1
        }
    );
    assert_eq!(h.task("t-1").attempts, 1);
}

// ---------------------------------------------------------------------------------------
// 5. Max iterations, then resume with a higher limit.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn max_iterations_is_an_outcome_and_a_higher_limit_resumes_to_completion() {
    let dir = workspace(SPEC);
    let first = Arc::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                tasks(&[("Write done.txt", "greets")]),
            )
            .on(Role::Build, "t-1", writes_done())
            .on(
                Role::Verify,
                "t-1",
                reject("it does not greet anyone by name"),
            )
            .on(Role::GapAnalysis, "iteration-1", no_gaps()),
    );
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(first.clone())
        .gate(done_gate())
        .max_iterations(1)
        .build()
        .unwrap();

    let outcome = ralph.construct("spec.md").await.unwrap();

    assert_eq!(
        outcome,
        Outcome::MaxIterations {
            limit: 1,
            remaining: 1
        }
    );
    assert_eq!(
        outcome.to_string(),
        "Stopped: max iterations (1) reached. Tasks remaining: 1"
    );
    assert_eq!(outcome.exit_code(), 2);
    first.verify().unwrap();
    drop(ralph);
    assert!(plan_file(dir.path()).exists());

    // A new process: new Ralph, same plan.jsonl, a higher limit.
    let second = Arc::new(
        FakeAgent::new()
            .on_attempt(
                Role::Build,
                "t-1",
                2,
                Script::new()
                    .write("done.txt", "hello, reader\n")
                    .answer("Greets by name now.\n<TASK_DONE>"),
            )
            .on_attempt(Role::Verify, "t-1", 2, accept("greets by name"))
            .on(Role::GapAnalysis, "iteration-2", no_gaps()),
    );
    let events = Recorder::default();
    let ralph = build_unlocked(|| {
        Ralph::builder()
            .workspace(dir.path())
            .agent(second.clone())
            .gate(done_gate())
            .observer(events.clone())
            .max_iterations(3)
    });

    let outcome = ralph.resume().await.unwrap();

    assert_eq!(
        outcome,
        Outcome::Complete {
            iterations: 2,
            accepted: 1
        }
    );
    second.verify().unwrap();
    let rebuild = &second.requests()[0];
    assert_eq!((rebuild.role, rebuild.attempt), (Role::Build, 2));
    assert!(
        rebuild.prompt.contains("it does not greet anyone by name"),
        "{}",
        rebuild.prompt
    );
    assert_eq!(events.stages()[0], (2, "BUILD".to_owned()));
    let board = ralph.board().await.unwrap();
    assert_eq!(board.tasks["t-1"].status, TaskStatus::Accepted);
    assert_eq!(board.run.iteration, 3);
}

// ---------------------------------------------------------------------------------------
// 6. A verifier rejection: tombstone, fresh retry budget, the reason in the prompt.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_rejected_task_is_rebuilt_with_a_fresh_retry_budget_and_the_reason() {
    const WHY: &str = "done.txt greets nobody in particular";
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                tasks(&[("Write done.txt", "greets")]),
            )
            // Round 1: one failed attempt, then done.
            .on_attempt(Role::Build, "t-1", 1, done())
            .on_attempt(Role::Build, "t-1", 2, writes_done())
            .on_attempt(Role::Verify, "t-1", 1, reject(WHY))
            // Round 2: again one failed attempt, then done; with retries = 1 this only
            // works if the rejection reset the budget.
            .on_attempt(
                Role::Build,
                "t-1",
                3,
                Script::new().answer("Greeting everyone now."),
            )
            .on_attempt(Role::Build, "t-1", 4, done())
            .on_attempt(Role::Verify, "t-1", 2, accept("greets"))
            .always(Role::GapAnalysis, no_gaps()),
    );

    let outcome = h.run(|b| b.gate(done_gate()).retries(1)).await;

    assert_eq!(
        outcome,
        Outcome::Complete {
            iterations: 2,
            accepted: 1
        }
    );
    h.agent.verify().unwrap();
    assert_eq!(
        attempts(&h.requests(Role::Build, "t-1")),
        [1, 2, 3, 4],
        "build attempts are never reset"
    );
    assert_eq!(
        h.started(),
        [
            ("t-1".into(), 1),
            ("t-1".into(), 2),
            ("t-1".into(), 1),
            ("t-1".into(), 2)
        ],
        "the attempt within the round restarts after a rejection"
    );
    let builds = h.requests(Role::Build, "t-1");
    assert!(builds[2].prompt.contains(WHY), "{}", builds[2].prompt);
    assert!(builds[2].prompt.contains("Earlier Rounds of This Task"));
    assert!(builds[3].prompt.contains(NOT_AT_END));

    let verdicts: Vec<bool> = h
        .events
        .of_kind("verdict")
        .iter()
        .map(|v| v["accepted"].as_bool().unwrap())
        .collect();
    assert_eq!(verdicts, [false, true]);

    // The rejection was recorded: pending again, tombstone with the reason, budget reset.
    let rejected = h
        .history("t-1")
        .into_iter()
        .find(|t| t.status == TaskStatus::Pending && !t.tombstones.is_empty())
        .unwrap();
    assert_eq!(rejected.attempts, 2);
    assert_eq!(rejected.retry_base, 2);
    assert_eq!(rejected.verdict, None);
    assert!(rejected.last_failure.as_deref().unwrap().contains(WHY));
    let task = h.task("t-1");
    assert_eq!(task.tombstones.len(), 1);
    assert_eq!(
        task.tombstones[0].reason,
        format!("rejected by the verifier: {WHY}")
    );
    assert_eq!(task.verifications, 2);
    assert_eq!(task.status, TaskStatus::Accepted);
}

// ---------------------------------------------------------------------------------------
// 7. Invalid structured answers.
// ---------------------------------------------------------------------------------------

/// Every structured role once: i-1 → t-1; t-1 is killed at the context limit and split into
/// t-1a and t-1b; both are built, verified and accepted; gap analysis finds nothing.
fn every_role() -> FakeAgent {
    every_role_taking(Duration::ZERO)
}

/// [`every_role`], with every run taking `work` before it answers.
fn every_role_taking(work: Duration) -> FakeAgent {
    let json = |value: serde_json::Value| Script::new().delay(work).json(value);
    FakeAgent::new()
        .on(
            Role::Investigate,
            "i-1",
            json(json!({"tasks": [{"name": "Write the greeter", "accept": "greets"}]})),
        )
        .on(
            Role::Build,
            "t-1",
            Script::new().delay(work).usage(96, 100, None),
        )
        .on(
            Role::Decompose,
            "t-1",
            json(json!({"subtasks": [
                {"name": "Write the greeting", "accept": "greets"},
                {"name": "Write the farewell", "accept": "says bye", "deps": [0]}
            ]})),
        )
        .always(
            Role::Build,
            Script::new()
                .delay(work)
                .answer("Implemented.\n<TASK_DONE>"),
        )
        .on(
            Role::Verify,
            "t-1a",
            json(json!({"verdict": "accept", "reason": "greets"})),
        )
        .on(
            Role::Verify,
            "t-1b",
            json(json!({"verdict": "accept", "reason": "says bye"})),
        )
        .on(
            Role::GapAnalysis,
            "iteration-2",
            json(json!({"tasks": [], "issues": []})),
        )
}

#[rstest]
#[case::investigate_without_tasks(
    Role::Investigate,
    "i-1",
    Script::new().json(json!({"tasks": []})),
    "give at least one task"
)]
#[case::investigate_in_prose(
    Role::Investigate,
    "i-1",
    Script::new().answer("Sure! First, write the greeter."),
    "no structured answer"
)]
#[case::investigate_unknown_field(
    Role::Investigate,
    "i-1",
    Script::new().json(json!({"tasks": [{"name": "a", "accept": "b", "effort": 3}]})),
    "unknown field `effort`"
)]
#[case::verify_bad_verdict(
    Role::Verify,
    "t-1a",
    Script::new().json(json!({"verdict": "maybe", "reason": "unsure"})),
    "unknown variant `maybe`"
)]
#[case::verify_broken_json(
    Role::Verify,
    "t-1a",
    Script::new().answer("{\"verdict\": \"accept\","),
    "not valid JSON"
)]
#[case::gap_analysis_empty_name(
    Role::GapAnalysis,
    "iteration-2",
    Script::new().json(json!({"tasks": [{"name": " ", "accept": "x"}]})),
    "tasks[0].name is empty"
)]
#[case::gap_analysis_unknown_dependency(
    Role::GapAnalysis,
    "iteration-2",
    Script::new().json(json!({"tasks": [{"name": "More", "accept": "x", "deps": ["t-99"]}]})),
    "names t-99, which is not a task"
)]
#[case::decompose_one_subtask(
    Role::Decompose,
    "t-1",
    Script::new().json(json!({"subtasks": [{"name": "All of it", "accept": "x"}]})),
    "give 2 to 5 subtasks, not 1"
)]
#[tokio::test]
async fn an_invalid_structured_answer_is_retried_once_with_the_error(
    #[case] role: Role,
    #[case] subject: &str,
    #[case] invalid: Script,
    #[case] error: &str,
) {
    let h = Harness::new(every_role().on_attempt(role, subject, 1, invalid));

    let outcome = h.run(|b| b).await;

    assert_eq!(
        outcome,
        Outcome::Complete {
            iterations: 2,
            accepted: 2
        }
    );
    h.agent.verify().unwrap();
    let calls = h.requests(role, subject);
    assert_eq!(attempts(&calls), [1, 2]);
    assert!(calls.iter().all(|c| c.structured));
    let retry = &calls[1].prompt;
    assert!(
        retry.starts_with(&calls[0].prompt),
        "the retry keeps the prompt"
    );
    assert!(
        retry.contains("## Your Previous Answer Was Invalid"),
        "{retry}"
    );
    assert!(retry.contains(error), "{retry}");
    let board = h.store.board();
    match role {
        Role::Investigate => assert_eq!(board.issues["i-1"].attempts, 2),
        Role::Verify => assert_eq!(board.tasks["t-1a"].verifications, 2),
        _ => {}
    }
    assert!(h.events.of_kind("warning").is_empty());
}

#[tokio::test]
async fn an_issue_without_a_valid_answer_stays_open_then_blocks_after_the_retries() {
    let h = Harness::new(
        FakeAgent::new().always(Role::Investigate, Script::new().json(json!({"tasks": []}))),
    );

    let outcome = h.run(|b| b.retries(2)).await;

    let items = blocked(&outcome);
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].id, "i-1");
    assert!(
        items[0]
            .reason
            .starts_with("no valid answer after a retry: give at least one task"),
        "{}",
        items[0].reason
    );
    // Two rounds of (answer + one retry): open after the first, blocked after the second.
    assert_eq!(
        attempts(&h.requests(Role::Investigate, "i-1")),
        [1, 2, 3, 4]
    );
    let history: Vec<(IssueStatus, u32)> = h
        .store
        .persisted()
        .into_iter()
        .filter_map(|c| match c {
            Change::Issue(i) if i.id == "i-1" => Some((i.status, i.attempts)),
            _ => None,
        })
        .collect();
    assert_eq!(
        history,
        [
            (IssueStatus::Open, 0),
            (IssueStatus::Open, 2),
            (IssueStatus::Blocked, 4)
        ]
    );
    let investigated = h.events.of_kind("issue_investigated");
    assert_eq!(investigated.len(), 2);
    assert!(investigated.iter().all(|e| e["tasks"] == json!([])));
    assert!(h.store.board().tasks.is_empty());
}

#[tokio::test]
async fn a_verifier_without_a_valid_answer_is_a_rejection_with_no_usable_verdict() {
    let bad = || Script::new().json(json!({"verdict": "maybe", "reason": "unsure"}));
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                tasks(&[("Write done.txt", "greets")]),
            )
            .always(Role::Build, writes_done())
            .on_attempt(Role::Verify, "t-1", 1, bad())
            .on_attempt(Role::Verify, "t-1", 2, bad())
            .on_attempt(Role::Verify, "t-1", 3, accept("greets"))
            .always(Role::GapAnalysis, no_gaps()),
    );

    let outcome = h.run(|b| b.gate(done_gate())).await;

    assert_eq!(
        outcome,
        Outcome::Complete {
            iterations: 2,
            accepted: 1
        }
    );
    h.agent.verify().unwrap();
    let verdicts = h.events.of_kind("verdict");
    assert_eq!(verdicts[0]["accepted"], false);
    let reason = verdicts[0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("no usable verdict: no valid answer after a retry"),
        "{reason}"
    );
    assert!(reason.contains("maybe"), "{reason}");
    assert_eq!(verdicts[1]["accepted"], true);
    let builds = h.requests(Role::Build, "t-1");
    assert_eq!(attempts(&builds), [1, 2]);
    assert!(builds[1].prompt.contains("no usable verdict"));
    let task = h.task("t-1");
    assert_eq!(task.verifications, 3);
    assert_eq!(task.tombstones.len(), 1);
}

#[tokio::test]
async fn gap_analysis_without_a_valid_answer_is_a_warning_and_no_gaps() {
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                tasks(&[("Write done.txt", "greets")]),
            )
            .on(Role::Build, "t-1", writes_done())
            .on(Role::Verify, "t-1", accept("greets"))
            .always(
                Role::GapAnalysis,
                Script::new().json(json!({"issues": ["  "]})),
            ),
    );

    let outcome = h.run(|b| b.gate(done_gate())).await;

    assert_eq!(
        outcome,
        Outcome::Complete {
            iterations: 1,
            accepted: 1
        }
    );
    assert_eq!(
        attempts(&h.requests(Role::GapAnalysis, "iteration-1")),
        [1, 2]
    );
    let warnings = h.events.of_kind("warning");
    assert_eq!(warnings.len(), 1);
    let message = warnings[0]["message"].as_str().unwrap();
    assert!(message.contains("gap analysis"), "{message}");
    assert!(message.contains("issues[0] is empty"), "{message}");
    assert!(h.events.of_kind("gaps_found").is_empty());
    assert_eq!(h.store.board().issues.len(), 1);
}

#[tokio::test]
async fn a_task_without_a_valid_decomposition_is_blocked() {
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                tasks(&[("Write the greeter", "greets")]),
            )
            .on(Role::Build, "t-1", Script::new().usage(99, 100, None))
            .always(
                Role::Decompose,
                Script::new().json(json!({"subtasks": [{"name": "All of it", "accept": "x"}]})),
            ),
    );

    let outcome = h.run(|b| b).await;

    let items = blocked(&outcome);
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].id, "t-1");
    assert!(
        items[0].reason.starts_with("could not be decomposed"),
        "{}",
        items[0].reason
    );
    assert!(items[0].reason.contains("give 2 to 5 subtasks, not 1"));
    assert_eq!(attempts(&h.requests(Role::Decompose, "t-1")), [1, 2]);
    let task = h.task("t-1");
    assert_eq!(task.status, TaskStatus::Blocked);
    assert_eq!(task.kill_reason, Some(KillReason::ContextLimit));
}

// ---------------------------------------------------------------------------------------
// 8. Gate timeout.
// ---------------------------------------------------------------------------------------

/// Whether `pid` is a live (not zombie) `sleep`.
fn sleep_alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or("?");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    state != "Z" && String::from_utf8_lossy(&cmdline).contains("sleep")
}

#[tokio::test]
async fn a_gate_past_its_timeout_fails_the_attempt_and_leaves_no_process() {
    let h = Harness::new(one_task().always(Role::Build, done()));
    let slow = ShellGate::new("slow", "echo $$ >> gate.pids; exec sleep 30")
        .timeout(Duration::from_millis(300))
        .grace(Duration::from_millis(100));

    let outcome = h.run(|b| b.gate(slow).retries(1)).await;

    let items = blocked(&outcome);
    assert_eq!(items[0].id, "t-1");
    assert!(
        items[0]
            .reason
            .starts_with("gave up after 2 attempts: Quality gate `slow` timed out"),
        "{}",
        items[0].reason
    );
    assert_eq!(
        h.gate_statuses(),
        [GateStatus::TimedOut, GateStatus::TimedOut]
    );
    let builds = h.requests(Role::Build, "t-1");
    assert_eq!(attempts(&builds), [1, 2]);
    assert!(
        builds[1].prompt.contains("Quality gate `slow` timed out"),
        "{}",
        builds[1].prompt
    );
    // A timeout is a failed attempt, not a kill.
    assert_eq!(h.task("t-1").kill_reason, None);
    assert!(h.events.of_kind("task_killed").is_empty());

    let pids: Vec<u32> = std::fs::read_to_string(h.path().join("gate.pids"))
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    for pid in pids {
        assert!(!sleep_alive(pid), "the gate's sleep {pid} survived");
    }
}

// ---------------------------------------------------------------------------------------
// 9. Kills: stage timeout, context limit; a compaction that works is no kill.
// ---------------------------------------------------------------------------------------

#[rstest]
#[case::stage_timeout(
    Script::new().print("compiling the world", 20).hang(),
    Some((KillReason::Timeout, "stopped by the timeout (400ms)"))
)]
#[case::context_limit(
    Script::new().print("compiling the world", 20).usage(96, 100, None),
    Some((KillReason::ContextLimit, "stopped at the context limit (95%)"))
)]
#[case::failed_compaction(
    Script::new().print("compiling the world", 20).usage(90, 100, Some(85)),
    Some((KillReason::ContextLimit, "stopped at the context limit (95%)"))
)]
#[case::compaction_succeeds(
    Script::new().usage(90, 100, Some(40)).write("done.txt", "hi\n").answer("Done.\n<TASK_DONE>"),
    None
)]
#[tokio::test]
async fn a_killed_task_is_decomposed_and_a_compacted_one_carries_on(
    #[case] first_run: Script,
    #[case] kill: Option<(KillReason, &str)>,
) {
    let mut agent = one_task()
        .on(Role::Build, "t-1", first_run)
        .always(Role::Build, writes_done());
    if kill.is_some() {
        agent = agent.on(
            Role::Decompose,
            "t-1",
            Script::new().json(json!({"subtasks": [
                {"name": "Write the greeting", "accept": "greets"},
                {"name": "Write the farewell", "accept": "says bye"}
            ]})),
        );
    }
    let h = Harness::new(agent);

    let outcome = h
        .run(|b| {
            b.gate(done_gate())
                .stage_timeout(Duration::from_millis(400))
        })
        .await;

    h.agent.verify().unwrap();
    let Some((reason, tombstone)) = kill else {
        assert_eq!(
            outcome,
            Outcome::Complete {
                iterations: 1,
                accepted: 1
            }
        );
        assert!(h.events.of_kind("task_killed").is_empty());
        let compacted: Vec<_> = h
            .events
            .of_kind("agent")
            .into_iter()
            .filter(|e| e["kind"] == "compacted")
            .collect();
        assert_eq!(compacted.len(), 1);
        assert_eq!(compacted[0]["subject"], "t-1");
        let task = h.task("t-1");
        assert_eq!(
            (task.status, task.kill_reason),
            (TaskStatus::Accepted, None)
        );
        return;
    };

    assert_eq!(
        outcome,
        Outcome::Complete {
            iterations: 2,
            accepted: 2
        }
    );
    let killed = h.events.of_kind("task_killed");
    assert_eq!(killed.len(), 1);
    assert_eq!(killed[0]["reason"], reason.to_string());
    // The kill was persisted (pending + kill_reason + kill_log) before DECOMPOSE ran.
    let history = h.history("t-1");
    let at_kill = history.iter().find(|t| t.kill_reason.is_some()).unwrap();
    assert_eq!(at_kill.status, TaskStatus::Pending);
    assert_eq!(at_kill.kill_reason, Some(reason));
    let log = at_kill.kill_log.clone().unwrap();
    assert!(log.is_relative() && log.starts_with("build/ralph-logs"));
    let text = std::fs::read_to_string(h.path().join(&log)).unwrap();
    assert!(text.contains("compiling the world"));
    assert_eq!(at_kill.tombstones[0].reason, tombstone);

    let decompose = &h.requests(Role::Decompose, "t-1")[0];
    assert!(decompose.prompt.contains("compiling the world"));
    assert!(decompose.prompt.contains(&reason.to_string()));
    let board = h.store.board();
    assert_eq!(board.tasks["t-1"].status, TaskStatus::Decomposed);
    for sub in ["t-1a", "t-1b"] {
        assert_eq!(board.tasks[sub].status, TaskStatus::Accepted);
        assert_eq!(board.tasks[sub].parent.as_ref().unwrap(), "t-1");
    }
    assert_eq!(
        h.events.stages(),
        [
            (1, "INVESTIGATE".to_owned()),
            (1, "BUILD".to_owned()),
            (1, "DECOMPOSE".to_owned()),
            (2, "BUILD".to_owned()),
            (2, "VERIFY".to_owned()),
        ]
    );
}

// ---------------------------------------------------------------------------------------
// 10. Rate limits are waited out and not counted.
// ---------------------------------------------------------------------------------------

#[rstest]
#[case::investigate(Role::Investigate, "i-1")]
#[case::build(Role::Build, "t-1a")]
#[case::decompose(Role::Decompose, "t-1")]
#[case::verify(Role::Verify, "t-1a")]
#[case::gap_analysis(Role::GapAnalysis, "iteration-2")]
#[tokio::test]
async fn a_rate_limit_is_waited_out_and_the_attempt_is_not_counted(
    #[case] role: Role,
    #[case] subject: &str,
) {
    let h = Harness::new(every_role_taking(Duration::from_millis(50)).on_attempt(
        role,
        subject,
        1,
        Script::new().rate_limit(1),
    ));

    // The limit (1s) outlasts the stage timeout: the wait is not the work's time.
    let outcome = h.run(|b| b.stage_timeout(Duration::from_millis(500))).await;

    assert_eq!(
        outcome,
        Outcome::Complete {
            iterations: 2,
            accepted: 2
        }
    );
    h.agent.verify().unwrap();
    let limited = h.events.of_kind("rate_limited");
    assert_eq!(limited.len(), 1);
    assert_eq!(limited[0]["wait_secs"], 1);
    // Run again with the same attempt number; the limited run is not on the record.
    assert_eq!(attempts(&h.requests(role, subject)), [1, 1]);
    assert!(h.events.of_kind("task_retry").is_empty());
    assert!(h.events.of_kind("warning").is_empty());
    assert_eq!(h.events.of_kind("task_killed").len(), 1, "only t-1's");
    assert!(
        h.events
            .of_kind("verdict")
            .iter()
            .all(|v| v["accepted"] == true)
    );
    let board = h.store.board();
    assert_eq!(board.issues["i-1"].attempts, 1);
    for id in ["t-1a", "t-1b"] {
        assert_eq!(board.tasks[id].attempts, 1, "{id}");
        assert_eq!(board.tasks[id].verifications, 1, "{id}");
        assert_eq!(board.tasks[id].status, TaskStatus::Accepted, "{id}");
    }
    let started_1a = h
        .started()
        .into_iter()
        .filter(|(id, _)| id == "t-1a")
        .collect::<Vec<_>>();
    // The wait happens inside the attempt: one start, two agent runs.
    assert_eq!(started_1a, vec![("t-1a".to_owned(), 1)]);
}

// Transient failures (overload, 5xx) are retried after a backoff and not counted; past
// `transient_retries` they count as an ordinary failed attempt.
#[rstest]
#[case::investigate(Role::Investigate, "i-1")]
#[case::build(Role::Build, "t-1a")]
#[case::decompose(Role::Decompose, "t-1")]
#[case::verify(Role::Verify, "t-1a")]
#[case::gap_analysis(Role::GapAnalysis, "iteration-2")]
#[tokio::test]
async fn a_transient_failure_is_retried_after_a_backoff_and_not_counted(
    #[case] role: Role,
    #[case] subject: &str,
) {
    let overloaded = || Script::new().fail_with("overloaded (529)", FailureKind::Transient);
    let h = Harness::new(
        every_role_taking(Duration::from_millis(10))
            .on_attempt(role, subject, 1, overloaded())
            .on_attempt(role, subject, 1, overloaded()),
    );

    let outcome = h
        .run(|b| {
            b.stage_timeout(Duration::from_millis(500))
                .config("transient_backoff", "10ms")
        })
        .await;

    assert_eq!(
        outcome,
        Outcome::Complete {
            iterations: 2,
            accepted: 2
        }
    );
    h.agent.verify().unwrap();
    assert_eq!(attempts(&h.requests(role, subject)), [1, 1, 1]);
    let warnings = h.events.of_kind("warning");
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0]["message"]
            .as_str()
            .unwrap()
            .contains("overloaded (529); retrying in 10ms")
    );
    assert!(
        warnings[1]["message"]
            .as_str()
            .unwrap()
            .contains("retrying in 20ms")
    );
    assert!(h.events.of_kind("task_retry").is_empty());
    let board = h.store.board();
    assert_eq!(board.issues["i-1"].attempts, 1);
    assert_eq!(board.tasks["t-1a"].attempts, 1);
    assert_eq!(board.tasks["t-1a"].verifications, 1);
}

#[tokio::test]
async fn a_transient_failure_past_the_limit_is_a_failed_attempt() {
    let overloaded = || Script::new().fail_with("overloaded (529)", FailureKind::Transient);
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                tasks(&[("Write done.txt", "greets")]),
            )
            .on_attempt(Role::Build, "t-1", 1, overloaded())
            .on_attempt(Role::Build, "t-1", 1, overloaded())
            .on_attempt(Role::Build, "t-1", 2, done())
            .on(Role::Verify, "t-1", accept("fine"))
            .always(Role::GapAnalysis, no_gaps()),
    );

    let outcome = h
        .run(|b| {
            b.config("transient_backoff", "1ms")
                .config("transient_retries", 1)
        })
        .await;

    assert!(
        matches!(outcome, Outcome::Complete { accepted: 1, .. }),
        "{outcome:?}"
    );
    let retry = h.events.of_kind("task_retry");
    assert_eq!(retry.len(), 1);
    assert!(
        retry[0]["reason"]
            .as_str()
            .unwrap()
            .contains("overloaded (529) (still failing after 1 retries)"),
        "{retry:?}"
    );
    h.agent.verify().unwrap();
}

/// Each verifier has the stage timeout from its own start: four verifiers one at a time, each
/// within the limit but not all four together, all finish and accept.
#[tokio::test]
async fn each_verifier_gets_the_stage_timeout_from_its_own_start() {
    let slow_accept = || {
        Script::new()
            .delay(Duration::from_millis(200))
            .json(json!({"verdict": "accept", "reason": "fine"}))
    };
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                tasks(&[("a", "a"), ("b", "b"), ("c", "c"), ("d", "d")]),
            )
            .always(Role::Build, done())
            .always(Role::Verify, slow_accept())
            .always(Role::GapAnalysis, no_gaps()),
    );

    let outcome = h
        .run(|b| {
            b.verify_concurrency(1)
                .stage_timeout(Duration::from_millis(500))
        })
        .await;

    assert_eq!(
        outcome,
        Outcome::Complete {
            iterations: 1,
            accepted: 4
        }
    );
    assert!(
        h.events
            .of_kind("verdict")
            .iter()
            .all(|v| v["accepted"] == true)
    );
}

#[tokio::test]
async fn gap_analysis_gets_its_own_time_after_slow_verifiers() {
    let step = Duration::from_millis(300);
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                tasks(&[("Write done.txt", "greets")]),
            )
            .always(Role::Build, writes_done())
            .on(
                Role::Verify,
                "t-1",
                Script::new()
                    .delay(step)
                    .json(json!({"verdict": "accept", "reason": "ok"})),
            )
            .on(
                Role::GapAnalysis,
                "iteration-1",
                Script::new()
                    .delay(step)
                    .json(json!({"tasks": [{"name": "Say goodbye", "accept": "says bye"}]})),
            )
            .always(Role::Verify, accept("says bye"))
            .always(Role::GapAnalysis, no_gaps()),
    );

    // Each step fits the stage timeout; the verifier and gap analysis together do not.
    let outcome = h
        .run(|b| {
            b.gate(done_gate())
                .stage_timeout(Duration::from_millis(500))
        })
        .await;

    assert_eq!(
        outcome,
        Outcome::Complete {
            iterations: 2,
            accepted: 2
        }
    );
    assert!(h.events.of_kind("warning").is_empty());
    assert_eq!(h.events.of_kind("gaps_found")[0]["tasks"], json!(["t-2"]));
}

// ---------------------------------------------------------------------------------------
// 11. A fatal failure ends the run with an error.
// ---------------------------------------------------------------------------------------

#[rstest]
#[case::build(Role::Build, "t-1")]
#[case::verify(Role::Verify, "t-1")]
#[case::investigate(Role::Investigate, "i-1")]
#[tokio::test]
async fn a_fatal_agent_failure_ends_the_run_with_an_error(
    #[case] role: Role,
    #[case] subject: &str,
) {
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                tasks(&[("Write done.txt", "greets")]),
            )
            .on(Role::Build, "t-1", writes_done())
            .always(Role::Verify, accept("greets"))
            .on_attempt(
                role,
                subject,
                1,
                Script::new().fail_with("credentials rejected", FailureKind::Fatal),
            ),
    );

    let err = h.try_run(|b| b.gate(done_gate())).await.unwrap_err();

    assert!(
        matches!(&err, Error::AgentFatal(reason) if reason == "credentials rejected"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "agent failed and cannot recover: credentials rejected"
    );
    // Nothing ran after it, and it counted for nothing.
    let last = h.agent.requests().pop().unwrap();
    assert_eq!((last.role, last.subject.as_deref()), (role, Some(subject)));
    assert!(h.events.of_kind("finished").is_empty());
    let board = h.store.board();
    assert_eq!(
        board.issues["i-1"].attempts,
        u32::from(role != Role::Investigate)
    );
    if let Some(task) = board.tasks.get("t-1") {
        assert_eq!(task.verifications, 0);
        assert_eq!(task.attempts, u32::from(role == Role::Verify));
    }
}

// ---------------------------------------------------------------------------------------
// 12. Interrupt, then resume in a new Ralph.
// ---------------------------------------------------------------------------------------

async fn wait_for_request(agent: &FakeAgent, role: Role) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while !agent.requests().iter().any(|r| r.role == role) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the agent was called");
}

#[tokio::test]
async fn an_interrupt_saves_the_state_and_a_new_ralph_resumes_the_same_attempt() {
    let dir = workspace(SPEC);
    let first = Arc::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                tasks(&[("Write done.txt", "greets")]),
            )
            .on(
                Role::Build,
                "t-1",
                Script::new().write("partial.txt", "half").hang(),
            ),
    );
    let events = Recorder::default();
    let ralph = Arc::new(
        Ralph::builder()
            .workspace(dir.path())
            .agent(first.clone())
            .gate(done_gate())
            .observer(events.clone())
            .stage_timeout(Duration::from_secs(60))
            .build()
            .unwrap(),
    );
    let running = tokio::spawn({
        let ralph = ralph.clone();
        async move { ralph.construct("spec.md").await }
    });
    wait_for_request(&first, Role::Build).await;

    ralph.stop_token().cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("the stop is prompt")
        .unwrap()
        .unwrap();

    assert_eq!(outcome, Outcome::Interrupted);
    assert_eq!(outcome.exit_code(), 130);
    assert_eq!(
        events.of_kind("finished")[0]["outcome"]["outcome"],
        "interrupted"
    );
    // The interrupted attempt is not on the record, neither as an attempt nor a kill.
    let board = ralph.board().await.unwrap();
    assert_eq!(board.issues["i-1"].status, IssueStatus::Resolved);
    let task = &board.tasks["t-1"];
    assert_eq!((task.status, task.attempts), (TaskStatus::Pending, 0));
    assert_eq!(task.kill_reason, None);
    // A stopped Ralph stays stopped.
    assert_eq!(
        ralph.construct("spec.md").await.unwrap(),
        Outcome::Interrupted
    );
    drop(ralph);

    // What is on disk is what the next process sees.
    let on_disk = open_unlocked(dir.path()).load().await.unwrap();
    assert_eq!(on_disk.tasks["t-1"], *task);
    assert_eq!(on_disk.run.spec.as_deref(), Some("spec.md"));

    let second = Arc::new(
        FakeAgent::new()
            .on_attempt(Role::Build, "t-1", 1, writes_done())
            .on(Role::Verify, "t-1", accept("greets"))
            .on(Role::GapAnalysis, "iteration-1", no_gaps()),
    );
    let ralph = build_unlocked(|| {
        Ralph::builder()
            .workspace(dir.path())
            .agent(second.clone())
            .gate(done_gate())
    });

    let outcome = ralph.construct("spec.md").await.unwrap();

    assert_eq!(
        outcome,
        Outcome::Complete {
            iterations: 1,
            accepted: 1
        }
    );
    second.verify().unwrap();
    // No second investigation; the build re-ran as attempt 1.
    let roles: Vec<(Role, u32)> = second
        .requests()
        .iter()
        .map(|r| (r.role, r.attempt))
        .collect();
    assert_eq!(
        roles,
        [(Role::Build, 1), (Role::Verify, 1), (Role::GapAnalysis, 1)]
    );
}

/// A `MemoryStore` whose `fail_at`-th persist fails with nothing of it saved, as a crash in
/// the middle of that persist would leave it.
struct CrashingStore {
    inner: MemoryStore,
    persists: AtomicUsize,
    fail_at: usize,
}

#[async_trait]
impl Store for CrashingStore {
    async fn load(&self) -> Result<ralph::model::Board, StoreError> {
        self.inner.load().await
    }

    async fn persist(&self, changes: &[Change]) -> Result<(), StoreError> {
        if self.persists.fetch_add(1, Ordering::SeqCst) + 1 == self.fail_at {
            return Err(StoreError::Other("simulated crash".into()));
        }
        self.inner.persist(changes).await
    }
}

/// Every role, answering every request the same way whatever the attempt: i-1 → t-1, which
/// is killed at the context limit and split into t-1a and t-1b; all else succeeds.
fn same_answers_every_time() -> FakeAgent {
    FakeAgent::from_toml(
        r#"
        [[run]]
        role = "investigate"
        repeat = true
        [[run.steps]]
        json = { tasks = [{ name = "Write the greeter", accept = "greets" }] }

        [[run]]
        role = "build"
        subject = "t-1"
        repeat = true
        [[run.steps]]
        usage = { context = 96, window = 100 }

        [[run]]
        role = "build"
        repeat = true
        [[run.steps]]
        answer = "Implemented.\n<TASK_DONE>"

        [[run]]
        role = "decompose"
        repeat = true
        [[run.steps]]
        json = { subtasks = [{ name = "Write the greeting", accept = "greets" }, { name = "Write the farewell", accept = "says bye" }] }

        [[run]]
        role = "verify"
        repeat = true
        [[run.steps]]
        json = { verdict = "accept", reason = "fine" }

        [[run]]
        role = "gap_analysis"
        repeat = true
        [[run.steps]]
        json = { tasks = [], issues = [] }
        "#,
        "same_answers_every_time",
    )
    .expect("the script parses")
}

#[tokio::test]
async fn a_crash_at_any_persist_loses_nothing_and_duplicates_nothing() {
    let mut crash_points = 0;
    for fail_at in 1.. {
        let dir = workspace(SPEC);
        let state = MemoryStore::new();
        let crashing = CrashingStore {
            inner: state.clone(),
            persists: AtomicUsize::new(0),
            fail_at,
        };
        let first = Ralph::builder()
            .workspace(dir.path())
            .agent(same_answers_every_time())
            .store(crashing)
            .build()
            .unwrap();
        match first.construct("spec.md").await {
            Err(Error::Store(_)) => crash_points += 1,
            Ok(outcome) => {
                assert_eq!(outcome.exit_code(), 0, "{outcome}");
                break;
            }
            Err(e) => panic!("crash at persist {fail_at}: {e}"),
        }

        // The next process, on what was saved.
        let second = Ralph::builder()
            .workspace(dir.path())
            .agent(same_answers_every_time())
            .store(state.clone())
            .build()
            .unwrap();
        let outcome = second.construct("spec.md").await.unwrap();

        let board = state.board();
        let context = format!("crash at persist {fail_at}: {outcome}; {board:#?}");
        assert_eq!(
            outcome,
            Outcome::Complete {
                iterations: 2,
                accepted: 2
            },
            "{context}"
        );
        let tasks: Vec<(&str, TaskStatus)> = board
            .tasks
            .values()
            .map(|t| (t.id.as_str(), t.status))
            .collect();
        assert_eq!(
            tasks,
            [
                ("t-1", TaskStatus::Decomposed),
                ("t-1a", TaskStatus::Accepted),
                ("t-1b", TaskStatus::Accepted)
            ],
            "{context}"
        );
        let issues: Vec<(&str, IssueStatus)> = board
            .issues
            .values()
            .map(|i| (i.id.as_str(), i.status))
            .collect();
        assert_eq!(issues, [("i-1", IssueStatus::Resolved)], "{context}");
        assert_eq!(board.run.iteration, 3, "{context}");
    }
    assert!(crash_points >= 8, "only {crash_points} persists");
}

/// Waits (at most a few seconds) until `ready` holds.
async fn wait_until(what: &str, ready: impl Fn() -> bool) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while !ready() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never happened: {what}"));
}

#[tokio::test]
async fn an_interrupt_during_verify_keeps_the_verdicts_in_and_resumes_the_rest() {
    let dir = workspace(SPEC);
    let first = Arc::new(
        FakeAgent::new()
            .on(Role::Verify, "t-1", accept("greets"))
            .on(Role::Verify, "t-2", Script::new().hang()),
    );
    let events = Recorder::default();
    let ralph = Arc::new(
        Ralph::builder()
            .workspace(dir.path())
            .agent(first.clone())
            .observer(events.clone())
            .build()
            .unwrap(),
    );
    for (id, name) in [("t-1", "Greet"), ("t-2", "Wave")] {
        ralph
            .add_task(Task::new(id, name).with_status(TaskStatus::Done))
            .await
            .unwrap();
    }
    let running = tokio::spawn({
        let ralph = ralph.clone();
        async move { ralph.construct("spec.md").await }
    });
    wait_until("t-1's verdict and t-2's verifier", || {
        !events.of_kind("verdict").is_empty()
            && first
                .requests()
                .iter()
                .any(|r| r.subject.as_deref() == Some("t-2"))
    })
    .await;

    ralph.stop_token().cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("the stop is prompt")
        .unwrap()
        .unwrap();

    assert_eq!(outcome, Outcome::Interrupted);
    first.verify().unwrap();
    drop(ralph);
    let saved = open_unlocked(dir.path()).load().await.unwrap();
    assert!(saved.tasks["t-1"].verdict.as_ref().unwrap().accepted);
    assert_eq!(saved.tasks["t-2"].verdict, None);
    assert_eq!(saved.tasks["t-2"].verifications, 0);

    let second = Arc::new(
        FakeAgent::new()
            .on_attempt(Role::Verify, "t-2", 1, accept("waves"))
            .on(Role::GapAnalysis, "iteration-1", no_gaps()),
    );
    let ralph = build_unlocked(|| Ralph::builder().workspace(dir.path()).agent(second.clone()));
    let outcome = ralph.resume().await.unwrap();

    assert_eq!(
        outcome,
        Outcome::Complete {
            iterations: 1,
            accepted: 2
        }
    );
    // t-1's verdict was not asked for again.
    second.verify().unwrap();
    assert_eq!(second.requests().len(), 2);
}

#[tokio::test]
async fn an_interrupt_during_a_gate_stops_it_and_the_attempt_runs_again() {
    let h = Harness::new(one_task().always(Role::Build, done()));
    let slow = ShellGate::new("slow", "echo $$ >> gate.pids; exec sleep 30")
        .grace(Duration::from_millis(100));
    let ralph = Arc::new(h.ralph(|b| b.gate(slow)));
    let running = tokio::spawn({
        let ralph = ralph.clone();
        async move { ralph.construct("spec.md").await }
    });
    let pids = h.path().join("gate.pids");
    wait_until("the gate started", || {
        std::fs::read_to_string(&pids).is_ok_and(|t| t.ends_with('\n'))
    })
    .await;

    ralph.stop_token().cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("the stop is prompt")
        .unwrap()
        .unwrap();

    assert_eq!(outcome, Outcome::Interrupted);
    assert_eq!(h.gate_statuses(), [GateStatus::Stopped]);
    let pid: u32 = std::fs::read_to_string(&pids)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!sleep_alive(pid), "the gate's sleep {pid} survived");
    let task = h.task("t-1");
    assert_eq!((task.status, task.attempts), (TaskStatus::Pending, 0));
    assert_eq!(task.kill_reason, None);
}

#[tokio::test]
async fn the_stage_timeout_during_a_gate_kills_the_task_and_the_gate() {
    let h = Harness::new(
        one_task()
            .on(
                Role::Build,
                "t-1",
                Script::new()
                    .print("built the greeter", 1)
                    .answer("<TASK_DONE>"),
            )
            .on(
                Role::Decompose,
                "t-1",
                Script::new().json(json!({"subtasks": [
                    {"name": "Write the greeting", "accept": "greets"},
                    {"name": "Write the farewell", "accept": "says bye"}
                ]})),
            )
            .always(Role::Build, writes_done()),
    );
    // Passes at once when done.txt exists; otherwise outlasts the stage.
    let slow = ShellGate::new(
        "slow",
        "test -f done.txt && exit 0; echo $$ >> gate.pids; exec sleep 30",
    )
    .grace(Duration::from_millis(100));

    let outcome = h
        .run(|b| b.gate(slow).stage_timeout(Duration::from_millis(400)))
        .await;

    assert_eq!(
        outcome,
        Outcome::Complete {
            iterations: 2,
            accepted: 2
        }
    );
    h.agent.verify().unwrap();
    let killed = h.events.of_kind("task_killed");
    assert_eq!(killed.len(), 1);
    assert_eq!(killed[0]["task"], "t-1");
    assert_eq!(killed[0]["reason"], "timeout");
    assert_eq!(h.gate_statuses()[0], GateStatus::Stopped);
    // The kill log is the agent's transcript, which DECOMPOSE then saw.
    let board = h.store.board();
    let log = board.tasks["t-1"].kill_log.clone().unwrap();
    let text = std::fs::read_to_string(h.path().join(log)).unwrap();
    assert!(text.contains("built the greeter"), "{text}");
    assert!(
        h.requests(Role::Decompose, "t-1")[0]
            .prompt
            .contains("built the greeter")
    );
    let pids = std::fs::read_to_string(h.path().join("gate.pids")).unwrap();
    for pid in pids.lines() {
        let pid: u32 = pid.trim().parse().unwrap();
        assert!(!sleep_alive(pid), "the gate's sleep {pid} survived");
    }
}

// ---------------------------------------------------------------------------------------
// 13. Dependency order.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_dependency_is_built_before_a_higher_priority_dependent() {
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                Script::new().json(json!({"tasks": [
                    {"name": "Write the docs", "accept": "documented", "priority": "low"},
                    {"name": "Ship the feature", "accept": "shipped", "priority": "high", "deps": [0]},
                    {"name": "Write the parser", "accept": "parses", "priority": "medium"}
                ]})),
            )
            .always(Role::Build, done())
            .always(Role::Verify, accept("fine"))
            .always(Role::GapAnalysis, no_gaps()),
    );

    let outcome = h.run(|b| b).await;

    assert_eq!(
        outcome,
        Outcome::Complete {
            iterations: 1,
            accepted: 3
        }
    );
    let order: Vec<String> = h.started().into_iter().map(|(id, _)| id).collect();
    assert_eq!(order, ["t-3", "t-1", "t-2"]);
    assert_eq!(
        h.store.board().tasks["t-2"].deps,
        [ralph::model::TaskId::new("t-1")]
    );
}

#[tokio::test]
async fn a_task_waiting_on_a_blocked_task_waits_while_other_work_goes_on() {
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                Script::new().json(json!({"tasks": [
                    {"name": "Migrate the database", "accept": "migrated"},
                    {"name": "Use the new column", "accept": "used", "priority": "high", "deps": [0]},
                    {"name": "Write the docs", "accept": "documented", "priority": "low"}
                ]})),
            )
            .on(
                Role::Build,
                "t-1",
                Script::new().answer("<TASK_BLOCKED reason=\"no database access\">"),
            )
            .on(Role::Build, "t-3", done())
            .on(Role::Verify, "t-3", accept("documented"))
            .always(Role::GapAnalysis, no_gaps()),
    );

    let outcome = h.run(|b| b).await;

    assert_eq!(
        outcome,
        Outcome::Blocked {
            items: vec![
                BlockedItem::new("t-1", "no database access"),
                BlockedItem::new("t-2", "waits on t-1"),
            ]
        }
    );
    h.agent.verify().unwrap();
    assert!(h.requests(Role::Build, "t-2").is_empty());
    let board = h.store.board();
    assert_eq!(board.tasks["t-2"].status, TaskStatus::Pending);
    assert_eq!(board.tasks["t-3"].status, TaskStatus::Accepted);
}

// ---------------------------------------------------------------------------------------
// 14. Verifiers run concurrently, bounded.
// ---------------------------------------------------------------------------------------

/// Wraps an agent and records the most verifier runs in flight at once.
struct Gauge {
    inner: FakeAgent,
    now: AtomicUsize,
    max: AtomicUsize,
}

#[async_trait]
impl Agent for Gauge {
    async fn run(&self, request: AgentRequest) -> Result<AgentRun, AgentError> {
        let verify = request.role == Role::Verify;
        if verify {
            let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
            self.max.fetch_max(now, Ordering::SeqCst);
        }
        let run = self.inner.run(request).await;
        if verify {
            self.now.fetch_sub(1, Ordering::SeqCst);
        }
        run
    }
}

#[rstest]
#[case::one_at_a_time(1, 1, 100)]
#[case::three_at_once(3, 3, 300)]
#[case::more_slots_than_tasks(8, 6, 300)]
#[tokio::test]
async fn verifiers_run_concurrently_up_to_the_limit(
    #[case] concurrency: usize,
    #[case] expected_max: usize,
    #[case] verifier_millis: u64,
) {
    let dir = workspace(SPEC);
    let gauge = Arc::new(Gauge {
        inner: FakeAgent::new()
            .always(
                Role::Verify,
                Script::new()
                    .delay(Duration::from_millis(verifier_millis))
                    .json(json!({"verdict": "accept", "reason": "fine"})),
            )
            .always(Role::GapAnalysis, no_gaps()),
        now: AtomicUsize::new(0),
        max: AtomicUsize::new(0),
    });
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(gauge.clone())
        .store(MemoryStore::new())
        .verify_concurrency(concurrency)
        .build()
        .unwrap();
    for n in 1..=6 {
        ralph
            .add_task(
                Task::new(format!("t-{n}"), format!("task {n}")).with_status(TaskStatus::Done),
            )
            .await
            .unwrap();
    }

    let outcome = ralph.construct("spec.md").await.unwrap();

    assert_eq!(
        outcome,
        Outcome::Complete {
            iterations: 1,
            accepted: 6
        }
    );
    let verifiers = gauge
        .inner
        .requests()
        .into_iter()
        .filter(|r| r.role == Role::Verify)
        .count();
    assert_eq!(verifiers, 6);
    assert_eq!(gauge.max.load(Ordering::SeqCst), expected_max);
}

// ---------------------------------------------------------------------------------------
// 15. Misuse: no spec, another spec, a missing spec, two runs at once.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn resume_without_a_spec_on_record_is_an_error() {
    let h = Harness::new(FakeAgent::new());
    let err = h.ralph(|b| b).resume().await.unwrap_err();
    assert!(matches!(err, Error::NoSpec), "{err:?}");
    assert!(err.to_string().contains("no spec on record"));
    assert!(h.agent.requests().is_empty());
}

#[tokio::test]
async fn another_spec_on_a_workspace_with_state_is_an_error() {
    let h = Harness::new(one_task().on(Role::Build, "t-1", writes_done()));
    write(h.path(), "other.md", "# Other\n");
    let ralph = h.ralph(|b| b.gate(done_gate()));
    assert_eq!(ralph.construct("spec.md").await.unwrap().exit_code(), 0);

    let err = ralph.construct("other.md").await.unwrap_err();

    match &err {
        Error::SpecMismatch { recorded, given } => {
            assert_eq!((recorded.as_str(), given.as_str()), ("spec.md", "other.md"));
        }
        other => panic!("expected SpecMismatch, got {other:?}"),
    }
    assert!(err.to_string().contains("spec.md") && err.to_string().contains("other.md"));
    // The same spec again resumes the finished state; given as an absolute path it breaks
    // the one rule of every mode (relative to the workspace).
    let again = ralph.construct("spec.md").await.unwrap();
    assert_eq!(again.exit_code(), 0);
    let err = ralph.construct(h.path().join("spec.md")).await.unwrap_err();
    assert!(matches!(err, Error::SpecPath(_)), "{err:?}");
    assert_eq!(h.agent.requests().len(), 4, "nothing ran after completion");
}

#[tokio::test]
async fn a_missing_spec_is_an_error_naming_it() {
    let h = Harness::new(FakeAgent::new());
    let err = h.ralph(|b| b).construct("nope.md").await.unwrap_err();
    assert!(matches!(err, Error::SpecPath(_)), "{err:?}");
    assert!(err.to_string().contains("cannot be read"), "{err}");
    assert!(err.to_string().contains("nope.md"), "{err}");
    assert!(h.store.persisted().is_empty());
}

#[tokio::test]
async fn a_second_construct_while_one_runs_is_refused() {
    let h = Harness::new(one_task().on(Role::Build, "t-1", Script::new().hang()));
    let ralph = Arc::new(h.ralph(|b| b.stage_timeout(Duration::from_secs(60))));
    let running = tokio::spawn({
        let ralph = ralph.clone();
        async move { ralph.construct("spec.md").await }
    });
    wait_for_request(&h.agent, Role::Build).await;

    let err = ralph.construct("spec.md").await.unwrap_err();
    assert!(matches!(err, Error::AlreadyRunning), "{err:?}");
    let err = ralph.resume().await.unwrap_err();
    assert!(matches!(err, Error::AlreadyRunning), "{err:?}");

    ralph.stop_token().cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("the stop is prompt")
        .unwrap()
        .unwrap();
    assert_eq!(outcome, Outcome::Interrupted);
    // The refused calls ran nothing.
    assert_eq!(h.requests(Role::Build, "t-1").len(), 1);
}

// ---------------------------------------------------------------------------------------
// 16. Build errors: a bad ralph.toml, a locked store.
// ---------------------------------------------------------------------------------------

#[rstest]
#[case::wrong_type("max_iterations = \"ten\"\n", "max_iterations")]
#[case::unknown_key("max_iteration = 3\n", "max_iteration")]
#[case::bad_duration("stage_timeout = \"soon\"\n", "stage_timeout")]
#[case::bad_value("verify_concurrency = 0\n", "verify_concurrency")]
#[case::bad_nested_value("[context]\nwarn = 0.99\n", "context")]
#[case::bad_gate("[[gates]]\nname = \"test\"\n", "command")]
#[tokio::test]
async fn a_malformed_config_file_fails_the_build_naming_key_and_file(
    #[case] toml: &str,
    #[case] key: &str,
) {
    let dir = workspace(SPEC);
    write(dir.path(), "ralph.toml", toml);
    let err = Ralph::builder()
        .workspace(dir.path())
        .agent(FakeAgent::new())
        .store(MemoryStore::new())
        .build()
        .unwrap_err();
    assert!(matches!(err, BuildError::Config(_)), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(key), "{message}");
    assert!(message.contains("ralph.toml"), "{message}");
}

#[tokio::test]
async fn two_ralphs_on_one_workspace_are_refused_while_one_runs() {
    let dir = workspace(SPEC);
    let first = Ralph::builder()
        .workspace(dir.path())
        .agent(one_task().on(Role::Build, "t-1", Script::new().hang()))
        .build()
        .unwrap();
    let stop = first.stop_token();
    let running = tokio::spawn(async move { first.construct("spec.md").await });
    let lock = dir.path().join(".ralph/ralph.lock");
    while !std::fs::read_to_string(&lock).is_ok_and(|t| t.contains("pid")) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Building is free: it writes nothing and locks nothing.
    let second = Ralph::builder()
        .workspace(dir.path())
        .agent(FakeAgent::new())
        .build()
        .unwrap();

    let err = second.construct("spec.md").await.unwrap_err();

    assert!(matches!(err, Error::Busy { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("is locked by another ralph process (pid "),
        "{message}"
    );
    assert!(message.contains("ralph.lock"), "{message}");
    stop.cancel();
    assert_eq!(running.await.unwrap().unwrap(), Outcome::Interrupted);
    assert!(second.dry_run("spec.md").await.is_ok());
}

#[tokio::test]
async fn ralph_persists_what_it_needs_to_resume_in_the_seed_format() {
    let dir = workspace(SPEC);
    let agent = Arc::new(one_task().on(Role::Build, "t-1", writes_done()));
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(agent.clone())
        .gate(done_gate())
        .stage_timeout(Duration::from_secs(90))
        .build()
        .unwrap();
    assert_eq!(ralph.construct("spec.md").await.unwrap().exit_code(), 0);
    drop(ralph);
    let text = std::fs::read_to_string(plan_file(dir.path())).unwrap();
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let config = if first["t"] == "batch" {
        serde_json::from_str::<serde_json::Value>(text.lines().nth(1).unwrap()).unwrap()
    } else {
        first
    };
    assert_eq!(config["t"], "config");
    assert_eq!(config["timeout_ms"], 90_000);
    assert_eq!(config["max_iterations"], 10);
    let board = open_unlocked(dir.path()).load().await.unwrap();
    assert_eq!(board.run.spec.as_deref(), Some("spec.md"));
    assert_eq!(board.tasks["t-1"].status, TaskStatus::Accepted);
}
