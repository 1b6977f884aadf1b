//! A person's changes to the stored board between runs (seed 000's task and issue commands):
//! each is persisted, checks the task's state, and follows the engine's own rules.

use super::*;

fn ralph_on(dir: &std::path::Path) -> Ralph {
    let store = JsonlStore::open(dir.join(".ralph/plan.jsonl")).expect("open the store");
    Ralph::builder()
        .workspace(dir)
        .agent(FakeAgent::new())
        .store(store)
        .build()
        .expect("build")
}

#[tokio::test]
async fn a_task_goes_done_then_rejected_and_the_reason_reaches_its_next_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let ralph = ralph_on(dir.path());
    ralph
        .add_task(Task::new("t-1", "Write hello.txt"))
        .await
        .unwrap();

    ralph.mark_done(&"t-1".into()).await.unwrap();
    assert_eq!(
        ralph.board().await.unwrap().tasks["t-1"].status,
        TaskStatus::Done
    );

    ralph.reject(&"t-1".into(), "it says hallo").await.unwrap();
    // A fresh handle reads what was persisted.
    let task = ralph_on(dir.path()).board().await.unwrap().tasks["t-1"].clone();
    assert_eq!(task.status, TaskStatus::Pending);
    assert_eq!(
        task.tombstones[0].reason,
        "rejected by a person: it says hallo"
    );
    assert!(task.last_failure.unwrap().contains("it says hallo"));
}

#[tokio::test]
async fn accept_takes_every_done_task_and_only_those() {
    let dir = tempfile::tempdir().unwrap();
    let ralph = ralph_on(dir.path());
    for id in ["t-1", "t-2", "t-3"] {
        ralph.add_task(Task::new(id, id)).await.unwrap();
    }
    ralph.mark_done(&"t-1".into()).await.unwrap();
    ralph.mark_done(&"t-3".into()).await.unwrap();

    let accepted = ralph.accept_done().await.unwrap();

    assert_eq!(accepted, [TaskId::from("t-1"), TaskId::from("t-3")]);
    let board = ralph.board().await.unwrap();
    assert_eq!(board.tasks["t-2"].status, TaskStatus::Pending);
    assert_eq!(board.tasks["t-3"].status, TaskStatus::Accepted);
}

#[tokio::test]
async fn a_change_to_a_task_in_the_wrong_state_names_the_task_and_what_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    let ralph = ralph_on(dir.path());
    ralph.add_task(Task::new("t-1", "x")).await.unwrap();

    let err = ralph.unblock(&"t-1".into()).await.unwrap_err();
    assert!(matches!(err, Error::TaskState { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "task t-1 is Pending; only a blocked task can be unblocked"
    );

    let err = ralph.reject(&"t-1".into(), "no").await.unwrap_err();
    assert!(
        err.to_string().contains("only a done task can be rejected"),
        "{err}"
    );

    let err = ralph.mark_done(&"t-7".into()).await.unwrap_err();
    assert!(matches!(err, Error::UnknownTask(_)), "{err:?}");

    let err = ralph.add_task(Task::new("t-1", "again")).await.unwrap_err();
    assert!(matches!(err, Error::DuplicateTask(_)), "{err:?}");
}

/// The gate that blocked every task is fixed; unblocking gives each a fresh retry budget
/// and the next run builds them, where before it said Blocked again.
#[tokio::test]
async fn unblocking_after_a_fixed_gate_lets_the_next_run_build_the_task() {
    let dir = workspace(SPEC);
    let first = Ralph::builder()
        .workspace(dir.path())
        .agent(one_task().always(Role::Build, Script::new().answer("Done.\n<TASK_DONE>")))
        .gate(ShellGate::new("fixed", "test -e fixed"))
        .retries(1)
        .build()
        .unwrap();
    let outcome = first.construct("spec.md").await.unwrap();
    assert!(matches!(outcome, Outcome::Blocked { .. }), "{outcome:?}");
    drop(first);

    std::fs::write(dir.path().join("fixed"), "").unwrap();
    let second = Ralph::builder()
        .workspace(dir.path())
        .agent(
            FakeAgent::new()
                .always(Role::Build, Script::new().answer("Done.\n<TASK_DONE>"))
                .always(
                    Role::Verify,
                    Script::new().json(json!({"verdict": "accept", "reason": "ok"})),
                )
                .always(
                    Role::GapAnalysis,
                    Script::new().json(json!({"tasks": [], "issues": []})),
                ),
        )
        .gate(ShellGate::new("fixed", "test -e fixed"))
        .retries(1)
        .build()
        .unwrap();
    let blocked = second.board().await.unwrap().tasks["t-1"].clone();
    assert_eq!(blocked.status, TaskStatus::Blocked);

    second.unblock(&"t-1".into()).await.unwrap();
    let task = second.board().await.unwrap().tasks["t-1"].clone();
    assert_eq!(
        (task.status, task.round_attempts(), task.blocked_reason),
        (TaskStatus::Pending, 0, None)
    );

    let outcome = second.resume().await.unwrap();
    assert!(
        matches!(outcome, Outcome::Complete { accepted: 1, .. }),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn prioritize_ranks_the_pending_tasks_and_reports_the_counts() {
    let dir = tempfile::tempdir().unwrap();
    let ralph = ralph_on(dir.path());
    ralph
        .add_task(Task::new("t-1", "Polish").with_priority(Priority::Low))
        .await
        .unwrap();
    ralph
        .add_task(Task::new("t-2", "Core").with_priority(Priority::High))
        .await
        .unwrap();

    let report = ralph.prioritize().await.unwrap();

    assert_eq!((report.prioritized, report.high, report.low), (2, 1, 1));
    let board = ralph.board().await.unwrap();
    assert_eq!(board.tasks["t-2"].rank, Some(0));
    assert_eq!(board.tasks["t-1"].rank, Some(1));
}

/// The tokens every agent run used are saved with the board, so `ralph status` can say what
/// the work has cost so far, across runs.
#[tokio::test]
async fn the_tokens_spent_are_kept_on_the_board() {
    let dir = workspace(SPEC);
    let store = dir.path().join(".ralph/plan.jsonl");
    let agent = one_task().on(
        Role::Build,
        "t-1",
        Script::new()
            .usage(1_000, 200_000, None)
            .write("done.txt", "hello\n")
            .answer("Done.\n<TASK_DONE>"),
    );
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(agent)
        .gate(done_gate())
        .store(JsonlStore::open(&store).expect("store"))
        .build()
        .expect("build");
    let outcome = ralph.construct("spec.md").await.expect("construct");
    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    drop(ralph);

    let board = ralph_on(dir.path()).board().await.expect("board");
    assert!(board.run.tokens_in >= 1_000, "{:?}", board.run);
}
