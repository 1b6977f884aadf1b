//! Retries carry the gate's failure, bounded; the retry limit blocks.

use super::*;

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

    assert_eq!(complete(&outcome), (1, 1));
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

/// A gate that fails the same way for one task after another is broken, not the tasks: the
/// run stops (exit 3) before it burns through every task's retries.
/// Tasks that each claim done and are accepted, checked by one required gate running
/// `command`; the workspace is kept alive by the returned dir.
fn gated(names: &[&str], command: &str, retries: u32) -> (tempfile::TempDir, Ralph) {
    let list: Vec<(&str, &str)> = names.iter().map(|n| (*n, "it is done")).collect();
    let agent = FakeAgent::new()
        .on(Role::Investigate, "i-1", tasks(&list))
        .always(Role::Build, Script::new().answer("Done.\n<TASK_DONE>"))
        .always(Role::Verify, accept("ok"))
        .always(Role::GapAnalysis, no_gaps());
    let dir = workspace(SPEC);
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(agent)
        .gate(ShellGate::new("test", command))
        .store(MemoryStore::new())
        .retries(retries)
        .build()
        .expect("build");
    (dir, ralph)
}

#[tokio::test]
async fn a_gate_failing_the_same_way_for_two_tasks_stops_the_run() {
    let (_dir, ralph) = gated(
        &["First", "Second", "Third"],
        "echo 'sh: cargoo: not found'; exit 127",
        1,
    );

    let outcome = ralph.construct("spec.md").await.unwrap();

    let Outcome::GateBroken { gate, tasks, .. } = &outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(gate, "test");
    assert_eq!(tasks, &[TaskId::from("t-1"), TaskId::from("t-2")]);
    assert_eq!(outcome.exit_code(), 3);
    assert!(
        outcome.to_string().contains("cargoo: not found"),
        "{outcome}"
    );
    let board = ralph.board().await.unwrap();
    assert_eq!(
        board.task("t-3").unwrap().attempts,
        0,
        "the third task was never tried"
    );
    assert_eq!(board.task("t-2").unwrap().status, TaskStatus::Pending);
}

/// Different failures (each task's own) are the tasks' business: no early stop.
#[tokio::test]
async fn gate_failures_that_differ_do_not_stop_the_run() {
    let (_dir, ralph) = gated(
        &["First", "Second"],
        "echo \"failed at $(date +%N)\"; exit 1",
        0,
    );

    let outcome = ralph.construct("spec.md").await.unwrap();

    assert!(matches!(outcome, Outcome::Blocked { .. }), "{outcome:?}");
}
