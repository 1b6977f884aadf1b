//! Verifier rejections (tombstone, fresh retry budget, the reason in the prompt) and verifiers run concurrently, bounded.

use super::*;

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

    assert_eq!(complete(&outcome), (2, 1));
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
            ("t-1".into(), 3),
            ("t-1".into(), 4)
        ],
        "a rebuild's attempt goes on from the last, as its log's name does"
    );
    let logs: Vec<String> = h
        .events
        .of_kind("agent_finished")
        .iter()
        .filter_map(|e| e["log"].as_str().map(str::to_owned))
        .filter(|log| log.contains("-build-t-1-"))
        .collect();
    assert!(
        logs.iter()
            .enumerate()
            .all(|(i, log)| log.ends_with(&format!("-a{}.log", i + 1))),
        "{logs:?}"
    );
    assert_eq!(logs.len(), 4, "{logs:?}");
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
// Seed 000: "Rejected: add tombstone, task remains for retry or decomposition". Rejected
// `decompose_after_rejections` times (default 2), a task goes to DECOMPOSE.
// ---------------------------------------------------------------------------------------

/// Two subtasks for the decomposer to answer with.
fn two_subtasks() -> Script {
    Script::new().json(json!({"subtasks": [
        {"name": "Write the greeting", "accept": "done.txt greets"},
        {"name": "Name the guest", "accept": "done.txt names the guest", "deps": [0]}
    ]}))
}

/// i-1 becomes t-1; every build prints a line to its log and writes done.txt.
fn rejected_agent() -> FakeAgent {
    FakeAgent::new()
        .on(
            Role::Investigate,
            "i-1",
            tasks(&[("Greet the guest", "done.txt greets the guest by name")]),
        )
        .always(
            Role::Build,
            Script::new()
                .print("BUILD LOG: wrote a greeting", 1)
                .write("done.txt", "hello\n")
                .answer("Done.\n<TASK_DONE>"),
        )
        .always(Role::Verify, accept("greets by name"))
        .always(Role::GapAnalysis, no_gaps())
}

#[tokio::test]
async fn a_task_rejected_twice_is_decomposed_into_subtasks_that_are_built_and_accepted() {
    let h = Harness::new(
        rejected_agent()
            .on_attempt(
                Role::Verify,
                "t-1",
                1,
                reject("it greets nobody in particular"),
            )
            .on_attempt(
                Role::Verify,
                "t-1",
                2,
                reject("the guest's name is still missing"),
            )
            .on(Role::Decompose, "t-1", two_subtasks()),
    );

    // Two iterations: built, rejected; built again, rejected again.
    let outcome = h.run(|b| b.gate(done_gate()).max_iterations(2)).await;

    assert!(
        matches!(outcome, Outcome::MaxIterations { .. }),
        "{outcome:?}"
    );
    let task = h.task("t-1");
    assert_eq!(
        (task.rejections, task.kill_reason, task.status),
        (2, Some(KillReason::Rejected), TaskStatus::Pending)
    );
    assert!(
        task.kill_log.is_some() && task.kill_log == task.build_log,
        "{task:?}"
    );
    let said = h.events.of_kind("warning");
    assert!(
        said.iter().any(|w| w["message"]
            == "t-1 was rejected 2 times: DECOMPOSE splits it instead of building it again"),
        "{said:?}"
    );
    let dry = h.ralph(|b| b).dry_run("spec.md").await.unwrap();
    assert_eq!(dry.stage, ralph::model::Stage::Decompose);
    assert_eq!(dry.next, Some(("t-1".into(), "Greet the guest".into())));
    assert_eq!(dry.template.as_deref(), Some("decompose"));

    let outcome = h.run(|b| b.gate(done_gate())).await;

    assert!(
        matches!(outcome, Outcome::Complete { accepted: 2, .. }),
        "{outcome:?}"
    );
    h.agent.verify().unwrap();
    assert_eq!(
        h.requests(Role::Build, "t-1").len(),
        2,
        "not built a third time"
    );
    let prompt = &h.requests(Role::Decompose, "t-1")[0].prompt;
    for part in [
        "verifiers rejected it\n2 times",
        "- rejected by the verifier: it greets nobody in particular",
        "- rejected by the verifier: the guest's name is still missing",
        "## Its Last Build's Log",
        "BUILD LOG: wrote a greeting",
        "what the verifiers found missing",
    ] {
        assert!(prompt.contains(part), "missing {part:?} in\n{prompt}");
    }
    assert!(!prompt.contains("was stopped"), "{prompt}");
    let board = h.store.board();
    assert_eq!(board.task("t-1").unwrap().status, TaskStatus::Decomposed);
    for sub in ["t-1a", "t-1b"] {
        assert_eq!(
            board.task(sub).unwrap().status,
            TaskStatus::Accepted,
            "{sub}"
        );
    }
}

/// A verifier that gives no usable answer judged nothing: its "rejection" sends the task
/// back to be built, and does not count; with `decompose_after_rejections = 1` the first
/// real rejection decomposes it.
#[tokio::test]
async fn only_a_verifiers_judgement_counts_as_a_rejection() {
    let h = Harness::new(
        rejected_agent()
            .on_attempt(
                Role::Verify,
                "t-1",
                1,
                Script::new().answer("Looks fine to me."),
            )
            .on_attempt(
                Role::Verify,
                "t-1",
                2,
                Script::new().answer("Really, it is fine."),
            )
            .on_attempt(
                Role::Verify,
                "t-1",
                3,
                reject("it greets nobody in particular"),
            )
            .on(Role::Decompose, "t-1", two_subtasks()),
    );

    let outcome = h
        .run(|b| b.gate(done_gate()).decompose_after_rejections(1))
        .await;

    assert!(
        matches!(outcome, Outcome::Complete { accepted: 2, .. }),
        "{outcome:?}"
    );
    h.agent.verify().unwrap();
    let task = h.task("t-1");
    assert_eq!((task.rejections, task.tombstones.len()), (1, 2), "{task:?}");
    assert_eq!(h.requests(Role::Build, "t-1").len(), 2);
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
            .on(
                Role::Investigate,
                "i-1",
                planned(&["t-1", "t-2", "t-3", "t-4", "t-5", "t-6"]),
            )
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
                Task::new(format!("t-{n}"), format!("task {n}"))
                    .with_acceptance("done")
                    .with_status(TaskStatus::Done),
            )
            .await
            .unwrap();
    }

    let outcome = ralph.construct("spec.md").await.unwrap();

    assert_eq!(complete(&outcome), (1, 6));
    let verifiers = gauge
        .inner
        .requests()
        .into_iter()
        .filter(|r| r.role == Role::Verify)
        .count();
    assert_eq!(verifiers, 6);
    assert_eq!(gauge.max.load(Ordering::SeqCst), expected_max);
}

/// Audit row 000-R81: VERIFY compares the work with the spec on record, wherever in the
/// workspace the person keeps it (seed 000 reads `ralph/specs/<spec>`), read afresh by each
/// run: an edit between runs reaches the next gap analysis.
#[tokio::test]
async fn verify_reads_the_spec_on_record_afresh_each_run() {
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                tasks(&[("Write done.txt", "greets")]),
            )
            .always(Role::Build, writes_done())
            .always(Role::Verify, accept("greets"))
            .on(
                Role::GapAnalysis,
                "iteration-1",
                Script::new().json(json!({
                    "tasks": [{"name": "Write bye.txt", "accept": "says bye"}],
                    "issues": []
                })),
            )
            .on(Role::GapAnalysis, "iteration-2", no_gaps())
            // The edit is seeded as work too (a changed spec): the gap's task covers it.
            .on(
                Role::Investigate,
                "i-2",
                Script::new().json(json!({"already_planned": ["t-2"]})),
            ),
    );
    write(h.path(), "docs/specs/greeter.md", "# Greeter\nSay hello.\n");
    let run = |h: &Harness| h.ralph(|b| b.gate(done_gate()).once(true));

    run(&h).construct("docs/specs/greeter.md").await.unwrap();
    std::fs::write(
        h.path().join("docs/specs/greeter.md"),
        "# Greeter\nSay hello.\nSay bye too.\n",
    )
    .unwrap();
    // The spec on record: no path needed to go on.
    run(&h).resume().await.unwrap();

    let first = &h.requests(Role::GapAnalysis, "iteration-1")[0].prompt;
    let second = &h.requests(Role::GapAnalysis, "iteration-2")[0].prompt;
    assert!(
        first.contains("Say hello.") && !first.contains("Say bye too."),
        "{first}"
    );
    assert!(second.contains("Say hello.\nSay bye too."), "{second}");
    assert!(second.contains("docs/specs/greeter.md"), "{second}");
}
