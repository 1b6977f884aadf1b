//! An interrupt, then a resume in a new Ralph.

use super::*;

// ---------------------------------------------------------------------------------------
// 12. Interrupt, then resume in a new Ralph.
// ---------------------------------------------------------------------------------------

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

    ralph.stop_token().stop();
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
    assert_eq!(board.issue("i-1").unwrap().status, IssueStatus::Resolved);
    let task = &board.task("t-1").unwrap();
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
    assert_eq!(on_disk.task("t-1").unwrap(), *task);
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

    assert_eq!(complete(&outcome), (1, 1));
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
            return Err(StoreError::backend("crashing store", "simulated crash"));
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
        assert_eq!(complete(&outcome), (2, 2));
        let tasks: Vec<(&str, TaskStatus)> =
            board.tasks().map(|t| (t.id.as_str(), t.status)).collect();
        assert_eq!(
            tasks,
            [
                ("t-1", TaskStatus::Decomposed),
                ("t-1a", TaskStatus::Accepted),
                ("t-1b", TaskStatus::Accepted)
            ],
            "{context}"
        );
        let issues: Vec<(&str, IssueStatus)> =
            board.issues().map(|i| (i.id.as_str(), i.status)).collect();
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
            .on(Role::Investigate, "i-1", planned(&["t-1", "t-2"]))
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
            .add_task(
                Task::new(id, name)
                    .with_acceptance("done")
                    .with_status(TaskStatus::Done),
            )
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

    ralph.stop_token().stop();
    let outcome = tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("the stop is prompt")
        .unwrap()
        .unwrap();

    assert_eq!(outcome, Outcome::Interrupted);
    first.verify().unwrap();
    drop(ralph);
    let saved = open_unlocked(dir.path()).load().await.unwrap();
    assert!(
        saved
            .task("t-1")
            .unwrap()
            .verdict
            .as_ref()
            .unwrap()
            .accepted
    );
    assert_eq!(saved.task("t-2").unwrap().verdict, None);
    assert_eq!(saved.task("t-2").unwrap().verifications, 0);

    let second = Arc::new(
        FakeAgent::new()
            .on_attempt(Role::Verify, "t-2", 1, accept("waves"))
            .on(Role::GapAnalysis, "iteration-1", no_gaps()),
    );
    let ralph = build_unlocked(|| Ralph::builder().workspace(dir.path()).agent(second.clone()));
    let outcome = ralph.resume().await.unwrap();

    assert_eq!(complete(&outcome), (1, 2));
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

    ralph.stop_token().stop();
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

    assert_eq!(complete(&outcome), (2, 2));
    h.agent.verify().unwrap();
    let killed = h.events.of_kind("task_killed");
    assert_eq!(killed.len(), 1);
    assert_eq!(killed[0]["task"], "t-1");
    assert_eq!(killed[0]["reason"], "timeout");
    assert_eq!(h.gate_statuses()[0], GateStatus::Stopped);
    // The kill log is the agent's transcript, which DECOMPOSE then saw.
    let board = h.store.board();
    let log = board.task("t-1").unwrap().kill_log.clone().unwrap();
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
