//! A person's changes to the stored board between runs (seed 000's task and issue commands):
//! each is persisted, checks the task's state, and follows the engine's own rules.

use super::*;
use ralph::EditError;

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
        .add_task(Task::new("t-1", "Write hello.txt").with_acceptance("it says hello"))
        .await
        .unwrap();

    ralph.mark_done(&"t-1".into()).await.unwrap();
    assert_eq!(
        ralph.board().await.unwrap().task("t-1").unwrap().status,
        TaskStatus::Done
    );

    ralph.reject(&"t-1".into(), "it says hallo").await.unwrap();
    // A fresh handle reads what was persisted.
    let task = ralph_on(dir.path())
        .board()
        .await
        .unwrap()
        .task("t-1")
        .unwrap()
        .clone();
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
        ralph
            .add_task(Task::new(id, id).with_acceptance("done"))
            .await
            .unwrap();
    }
    ralph.mark_done(&"t-1".into()).await.unwrap();
    ralph.mark_done(&"t-3".into()).await.unwrap();

    let accepted = ralph.accept_done().await.unwrap();

    assert_eq!(accepted, [TaskId::from("t-1"), TaskId::from("t-3")]);
    let board = ralph.board().await.unwrap();
    assert_eq!(board.task("t-2").unwrap().status, TaskStatus::Pending);
    assert_eq!(board.task("t-3").unwrap().status, TaskStatus::Accepted);
}

/// Seed 000's fork/join step 4, `ralph task accept <id>`: one done task, accepted as a
/// person's acceptance; the others stay as they were.
#[tokio::test]
async fn accept_takes_one_done_task_as_a_persons_acceptance() {
    let dir = tempfile::tempdir().unwrap();
    let ralph = ralph_on(dir.path());
    for id in ["t-1", "t-2", "t-3"] {
        ralph
            .add_task(Task::new(id, id).with_acceptance("done"))
            .await
            .unwrap();
    }
    ralph.mark_done(&"t-1".into()).await.unwrap();
    ralph.mark_done(&"t-2".into()).await.unwrap();

    ralph.accept(&"t-2".into()).await.unwrap();

    let board = ralph_on(dir.path()).board().await.unwrap();
    assert_eq!(
        board.task("t-1").unwrap().status,
        TaskStatus::Done,
        "not named"
    );
    assert_eq!(board.task("t-2").unwrap().status, TaskStatus::Accepted);
    let t2 = serde_json::to_value(board.task("t-2").unwrap()).unwrap();
    assert_eq!(t2["accepted_by"], "person", "{t2}");
    let err = ralph.accept(&"t-3".into()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "task t-3 is Pending; only a done task can be accepted"
    );
    let err = ralph.accept(&"t-7".into()).await.unwrap_err();
    assert!(
        matches!(err, Error::Edit(EditError::UnknownTask(_))),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_change_to_a_task_in_the_wrong_state_names_the_task_and_what_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    let ralph = ralph_on(dir.path());
    ralph
        .add_task(Task::new("t-1", "x").with_acceptance("done"))
        .await
        .unwrap();

    let err = ralph.unblock(&"t-1".into()).await.unwrap_err();
    assert!(
        matches!(err, Error::Edit(EditError::TaskState { .. })),
        "{err:?}"
    );
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
    assert!(
        matches!(err, Error::Edit(EditError::UnknownTask(_))),
        "{err:?}"
    );

    let err = ralph.add_task(Task::new("t-1", "again")).await.unwrap_err();
    assert!(
        matches!(err, Error::Edit(EditError::DuplicateTask(_))),
        "{err:?}"
    );
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
    let blocked = second.board().await.unwrap().task("t-1").unwrap().clone();
    assert_eq!(blocked.status, TaskStatus::Blocked);

    second.unblock(&"t-1".into()).await.unwrap();
    let task = second.board().await.unwrap().task("t-1").unwrap().clone();
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
        .add_task(
            Task::new("t-1", "Polish")
                .with_acceptance("polished")
                .with_priority(Priority::Low),
        )
        .await
        .unwrap();
    ralph
        .add_task(
            Task::new("t-2", "Core")
                .with_acceptance("works")
                .with_priority(Priority::High),
        )
        .await
        .unwrap();

    let report = ralph.prioritize().await.unwrap();

    assert_eq!((report.prioritized, report.high, report.low), (2, 1, 1));
    let board = ralph.board().await.unwrap();
    assert_eq!(board.task("t-2").unwrap().rank, Some(0));
    assert_eq!(board.task("t-1").unwrap().rank, Some(1));
}

/// `ralph task prioritize` on a board with a dependency cycle (written by hand) blocks the
/// cycle's tasks with the reason, as `construct` does when it starts, and prioritizes the
/// rest; the report names what it blocked.
#[tokio::test]
async fn prioritize_blocks_a_dependency_cycle_and_ranks_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::open(dir.path().join(".ralph/plan.jsonl")).expect("store");
    store
        .persist(&[
            Change::Task(task("t-1")),
            Change::Task(task("t-51").with_deps(["t-52"])),
            Change::Task(task("t-52").with_deps(["t-51"])),
        ])
        .await
        .unwrap();
    drop(store);
    let ralph = ralph_on(dir.path());

    let report = ralph.prioritize().await.expect("no error for a cycle");

    assert_eq!(report.prioritized, 1);
    let blocked: Vec<(&str, &str)> = report
        .blocked
        .iter()
        .map(|b| (b.id.as_str(), b.reason.as_str()))
        .collect();
    assert_eq!(
        blocked,
        [
            ("t-51", "dependency cycle: t-51 -> t-52 -> t-51"),
            ("t-52", "dependency cycle: t-52 -> t-51 -> t-52"),
        ]
    );
    // Persisted: a fresh handle reads it.
    let board = ralph_on(dir.path()).board().await.unwrap();
    assert_eq!(board.task("t-1").unwrap().rank, Some(0));
    for id in ["t-51", "t-52"] {
        let task = &board.task(id).unwrap();
        assert_eq!(task.status, TaskStatus::Blocked, "{id}");
        assert!(task.blocked_reason.as_deref().unwrap().contains("cycle"));
    }
    // Nothing left to block the second time.
    assert!(ralph.prioritize().await.unwrap().blocked.is_empty());
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

// ---------------------------------------------------------------------------------------
// A person's edits are checked when they are made: each refusal names the field, and
// nothing is changed.
// ---------------------------------------------------------------------------------------

/// A task with acceptance criteria, as a person adds it.
fn task(id: &str) -> Task {
    Task::new(id, format!("Do {id}")).with_acceptance("it is done")
}

/// `ralph.add_task(task)`'s refusal, checked to be an [`EditError::Invalid`], as text; the
/// board is as it was.
async fn refused(ralph: &Ralph, task: Task) -> String {
    let before = ralph.board().await.expect("board");
    let err = ralph.add_task(task).await.expect_err("refused");
    assert!(
        matches!(err, Error::Edit(EditError::Invalid { .. })),
        "{err:?}"
    );
    assert_eq!(
        ralph.board().await.expect("board"),
        before,
        "nothing changed"
    );
    err.to_string()
}

#[tokio::test]
async fn task_add_refuses_an_empty_name_and_a_name_of_two_lines() {
    let dir = tempfile::tempdir().unwrap();
    let ralph = ralph_on(dir.path());
    let named = |name: &str| Task::new("t-1", name).with_acceptance("done");

    assert_eq!(refused(&ralph, named("")).await, "task add: name is empty");
    assert_eq!(
        refused(&ralph, named("  ")).await,
        "task add: name is empty"
    );
    assert_eq!(
        refused(&ralph, named("Write\nhello.txt")).await,
        "task add: name holds a line break; a name is one line"
    );
}

#[tokio::test]
async fn task_add_refuses_a_task_without_acceptance_criteria() {
    let dir = tempfile::tempdir().unwrap();
    let ralph = ralph_on(dir.path());

    assert_eq!(
        refused(&ralph, Task::new("t-1", "Write hello.txt")).await,
        "task add: accept is empty: say what the verifier checks the work against"
    );
}

#[tokio::test]
async fn task_add_refuses_a_dependency_not_on_the_board() {
    let dir = tempfile::tempdir().unwrap();
    let ralph = ralph_on(dir.path());
    ralph.add_task(task("t-1")).await.unwrap();

    assert_eq!(
        refused(&ralph, task("t-2").with_deps(["t-1", "t-99"])).await,
        "task add: deps[1] names t-99, which is not on the board"
    );
}

#[tokio::test]
async fn task_add_refuses_a_self_dependency_and_a_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let ralph = ralph_on(dir.path());

    assert_eq!(
        refused(&ralph, task("t-50").with_deps(["t-50"])).await,
        "task add: deps[0] names the task itself (t-50): a dependency cycle"
    );
    // A record already on the board waits on t-2, which is not there yet: t-2 may not wait
    // on it in turn.
    let store = JsonlStore::open(dir.path().join(".ralph/plan.jsonl")).expect("store");
    drop(ralph);
    store
        .persist(&[Change::Task(task("t-1").with_deps(["t-2"]))])
        .await
        .unwrap();
    drop(store);
    let ralph = ralph_on(dir.path());
    assert_eq!(
        refused(&ralph, task("t-2").with_deps(["t-1"])).await,
        "task add: deps[0] names t-1, which depends on t-2 in turn: a dependency cycle"
    );
}

#[tokio::test]
async fn task_add_refuses_a_dependency_on_a_decomposed_task() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::open(dir.path().join(".ralph/plan.jsonl")).expect("store");
    let mut sub = task("t-3a");
    sub.parent = Some("t-3".into());
    store
        .persist(&[
            Change::Task(task("t-3").with_status(TaskStatus::Decomposed)),
            Change::Task(sub),
        ])
        .await
        .unwrap();
    drop(store);
    let ralph = ralph_on(dir.path());

    assert_eq!(
        refused(&ralph, task("t-4").with_deps(["t-3"])).await,
        "task add: deps[0] names t-3, which was decomposed: name its subtasks (t-3a)"
    );
}

/// Ids name git branches (`ralph-task/<id>`) and folders (`.ralph/worktrees/<id>`).
#[tokio::test]
async fn task_add_refuses_an_id_that_cannot_name_a_branch_or_folder() {
    let dir = tempfile::tempdir().unwrap();
    let ralph = ralph_on(dir.path());

    for (id, why) in [
        ("has space", r#""has space" holds ' '"#),
        ("../../../escape", r#""../../../escape" holds '/'"#),
        (".hidden", r#"".hidden" starts with ".""#),
        ("-rf", r#""-rf" starts with "-""#),
        ("a..b", r#""a..b" holds `..`"#),
        ("t-1.lock", "ends with `.` or `.lock`"),
        ("", "is empty"),
    ] {
        let text = refused(&ralph, task(id)).await;
        assert!(
            text.starts_with("task add: id ") && text.contains(why),
            "{id:?}: {text}"
        );
    }
    let long = "t".repeat(65);
    assert_eq!(
        refused(&ralph, task(&long)).await,
        "task add: id is 65 bytes long; at most 64"
    );
    ralph.add_task(task(&"t".repeat(64))).await.unwrap();
    ralph.add_task(task("T_9.b-c")).await.unwrap();
}

#[tokio::test]
async fn issue_add_refuses_empty_text() {
    let dir = tempfile::tempdir().unwrap();
    let ralph = ralph_on(dir.path());

    for text in ["", "   \n\t"] {
        let err = ralph.add_issue(text).await.unwrap_err();
        assert!(
            matches!(err, Error::Edit(EditError::Invalid { .. })),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "issue add: text is empty: say what is wrong or missing"
        );
    }
    assert!(ralph.board().await.unwrap().issues().next().is_none());
}

// ---------------------------------------------------------------------------------------
// A bad record already on the board is blocked with the reason when a run begins; the run
// goes on with the rest, and `unblock` makes it buildable.
// ---------------------------------------------------------------------------------------

/// Every build writes a file named after its task; every verifier accepts.
fn builds_anything() -> FakeAgent {
    FakeAgent::new()
        .always(Role::Build, done())
        .always(Role::Verify, accept("ok"))
        .always(Role::GapAnalysis, no_gaps())
}

fn warnings(h: &Harness) -> Vec<String> {
    h.events
        .of_kind("warning")
        .iter()
        .map(|w| w["message"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Audit row 55: a self-dependency made `Error::Prioritize` fail every run, after the
/// verifiers and the gap analysis had run and before their verdicts were saved.
#[tokio::test]
async fn a_dependency_cycle_on_the_board_blocks_its_tasks_and_the_run_goes_on_with_the_rest() {
    let h = Harness::new(builds_anything());
    h.store
        .persist(&[
            seeded(),
            Change::Task(task("t-1")),
            Change::Task(task("t-50").with_deps(["t-50"])),
            Change::Task(task("t-51").with_deps(["t-52"])),
            Change::Task(task("t-52").with_deps(["t-51"])),
        ])
        .await
        .unwrap();

    let outcome = h.run(|b| b).await;

    let items = blocked(&outcome);
    let reasons: Vec<(&str, &str)> = items
        .iter()
        .map(|i| (i.id.as_str(), i.reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [
            ("t-50", "dependency cycle: t-50 -> t-50"),
            ("t-51", "dependency cycle: t-51 -> t-52 -> t-51"),
            ("t-52", "dependency cycle: t-52 -> t-51 -> t-52"),
        ]
    );
    assert_eq!(
        h.task("t-1").status,
        TaskStatus::Accepted,
        "the verdict was saved"
    );
    assert_eq!(
        warnings(&h)[..3],
        [
            "t-50 blocked: dependency cycle: t-50 -> t-50",
            "t-51 blocked: dependency cycle: t-51 -> t-52 -> t-51",
            "t-52 blocked: dependency cycle: t-52 -> t-51 -> t-52",
        ]
    );

    // Unblocking breaks each cycle where it is asked to: t-51 no longer waits on t-52,
    // which then waits on t-51 alone.
    let ralph = h.ralph(|b| b);
    let unblocked = ralph.unblock(&"t-50".into()).await.unwrap();
    assert_eq!(
        (unblocked.task.as_str(), unblocked.dropped.as_slice()),
        ("t-50", &[TaskId::new("t-50")][..])
    );
    let unblocked = ralph.unblock(&"t-51".into()).await.unwrap();
    assert_eq!(unblocked.dropped, [TaskId::new("t-52")]);
    let unblocked = ralph.unblock(&"t-52".into()).await.unwrap();
    assert!(unblocked.dropped.is_empty(), "{unblocked:?}");
    assert_eq!(h.task("t-52").deps, [TaskId::new("t-51")]);

    let outcome = ralph.resume().await.unwrap();
    assert!(
        matches!(outcome, Outcome::Complete { accepted: 4, .. }),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn a_dependency_not_on_the_board_blocks_its_task_until_a_person_adds_it() {
    let h = Harness::new(builds_anything());
    h.store
        .persist(&[
            seeded(),
            Change::Task(task("t-1")),
            Change::Task(task("t-6").with_deps(["t-99"])),
            Change::Task(task("t-7").with_deps(["t-6"])),
        ])
        .await
        .unwrap();

    let outcome = h.run(|b| b).await;

    let items = blocked(&outcome);
    assert_eq!(items[0].id, "t-6");
    assert_eq!(
        items[0].reason,
        "depends on t-99, which is not on the board"
    );
    assert_eq!(
        (items[1].id.as_str(), items[1].reason.as_str()),
        ("t-7", "waits on t-6")
    );
    assert_eq!(h.task("t-1").status, TaskStatus::Accepted);
    assert!(
        warnings(&h).contains(&"t-6 blocked: depends on t-99, which is not on the board".into())
    );

    // The fix: the missing task is added; unblocking then keeps the dependency.
    let ralph = h.ralph(|b| b);
    ralph.add_task(task("t-99")).await.unwrap();
    let unblocked = ralph.unblock(&"t-6".into()).await.unwrap();
    assert!(unblocked.dropped.is_empty(), "{unblocked:?}");
    let outcome = ralph.resume().await.unwrap();
    assert!(
        matches!(outcome, Outcome::Complete { accepted: 4, .. }),
        "{outcome:?}"
    );
    let built: Vec<String> = h
        .agent
        .requests()
        .into_iter()
        .filter(|r| r.role == Role::Build)
        .filter_map(|r| r.subject)
        .collect();
    assert_eq!(built, ["t-1", "t-99", "t-6", "t-7"]);
}

/// Audit row 56: an id such as `../../../escape` reached `git worktree add`.
#[tokio::test]
async fn a_task_whose_id_cannot_name_a_branch_is_blocked_before_any_work_tree_and_unblocking_renames_it()
 {
    let dir = super::parallel::repo();
    let store = MemoryStore::new();
    store
        .persist(&[
            seeded(),
            Change::Task(task("../../../escape")),
            Change::Task(task("t-2").with_deps(["../../../escape"])),
        ])
        .await
        .unwrap();
    let agent = Arc::new(builds_anything());
    let ralph = || {
        Ralph::builder()
            .workspace(dir.path())
            .agent(agent.clone())
            .store(store.clone())
            .build_concurrency(2)
            .build()
            .expect("build")
    };

    let outcome = ralph().construct("spec.md").await.unwrap();

    let items = blocked(&outcome);
    assert_eq!(items[0].id, "../../../escape");
    assert!(
        items[0].reason.starts_with(
            r#"its id cannot name a git branch or folder ("../../../escape" holds '/'"#
        ),
        "{}",
        items[0].reason
    );
    assert!(agent.requests().iter().all(|r| r.role != Role::Build));
    assert!(
        !dir.path().join(".ralph/worktrees").exists() || {
            std::fs::read_dir(dir.path().join(".ralph/worktrees"))
                .unwrap()
                .next()
                .is_none()
        }
    );
    assert!(!dir.path().parent().unwrap().join("escape").exists());

    let unblocked = ralph().unblock(&"../../../escape".into()).await.unwrap();
    assert_eq!(unblocked.task, "t-1", "the next free id");
    let board = store.board();
    assert_eq!(
        board.task("../../../escape").unwrap().status,
        TaskStatus::Decomposed
    );
    assert_eq!(
        board.task("t-1").unwrap().parent,
        Some("../../../escape".into())
    );
    assert_eq!(
        board.task("t-2").unwrap().deps,
        [TaskId::new("t-1")],
        "rewired"
    );

    let outcome = ralph().resume().await.unwrap();
    assert!(
        matches!(outcome, Outcome::Complete { accepted: 2, .. }),
        "{outcome:?}"
    );
}

/// A `plan.jsonl` written by hand in seed 000's format (no `"h"` fields) is adopted once;
/// its cycle is blocked and persisted, and the next run does not fail on it either.
#[tokio::test]
async fn a_hand_written_plan_with_a_cycle_is_adopted_and_the_cycle_blocked() {
    let dir = workspace(SPEC);
    write(
        dir.path(),
        ".ralph/plan.jsonl",
        concat!(
            r#"{"t":"run","iteration":0,"spec":"spec.md","seeded":true}"#,
            "\n",
            r#"{"t":"task","id":"t-1","name":"Do t-1","s":"p","accept":"done"}"#,
            "\n",
            r#"{"t":"task","id":"t-50","name":"Do t-50","s":"p","accept":"done","deps":["t-50"]}"#,
            "\n",
        ),
    );
    let run = || async {
        let ralph = build_unlocked(|| {
            Ralph::builder()
                .workspace(dir.path())
                .agent(builds_anything())
                .store(open_unlocked(dir.path()))
        });
        ralph.resume().await.unwrap()
    };

    let outcome = run().await;
    assert_eq!(
        blocked(&outcome)[0].reason,
        "dependency cycle: t-50 -> t-50"
    );
    let outcome = run().await;
    assert_eq!(blocked(&outcome)[0].id, "t-50", "blocked again, no error");

    let ralph = ralph_on(dir.path());
    ralph.unblock(&"t-50".into()).await.unwrap();
    drop(ralph);
    let outcome = run().await;
    assert!(
        matches!(outcome, Outcome::Complete { accepted: 2, .. }),
        "{outcome:?}"
    );
}

// ---------------------------------------------------------------------------------------
// A blocked issue has a way forward too.
// ---------------------------------------------------------------------------------------

/// Audit rows 11, 27 and 65: the spec's issue, blocked by a failed investigation, was a
/// dead end (`task unblock i-1`: "no task i-1"), and every later run exited 3.
#[tokio::test]
async fn a_failed_investigation_blocks_its_issue_and_unblocking_opens_it_with_a_fresh_budget() {
    let agent = FakeAgent::new()
        .on_attempt(
            Role::Investigate,
            "i-1",
            1,
            Script::new().fail("mine exited with code 1"),
        )
        .on_attempt(
            Role::Investigate,
            "i-1",
            2,
            Script::new().fail("mine exited with code 1"),
        )
        .on_attempt(
            Role::Investigate,
            "i-1",
            3,
            Script::new().fail("mine exited with code 1"),
        )
        .on_attempt(
            Role::Investigate,
            "i-1",
            4,
            tasks(&[("Write done.txt", "done.txt greets")]),
        )
        .always(Role::Build, writes_done())
        .always(Role::Verify, accept("greets"))
        .always(Role::GapAnalysis, no_gaps());
    let h = Harness::new(agent);

    let outcome = h.run(|b| b.gate(done_gate())).await;

    let items = blocked(&outcome);
    assert_eq!(items[0].id, "i-1");
    assert!(
        items[0].reason.contains("mine exited with code 1"),
        "{items:?}"
    );
    let ralph = h.ralph(|b| b);
    let err = ralph.unblock(&"i-1".into()).await.unwrap_err();
    assert!(
        matches!(err, Error::Edit(EditError::UnknownTask(_))),
        "{err:?}"
    );
    let err = ralph.unblock_issue(&"i-2".into()).await.unwrap_err();
    assert_eq!(err.to_string(), "no issue i-2 on the board");

    ralph.unblock_issue(&"i-1".into()).await.unwrap();
    let issue = h.store.board().issue("i-1").unwrap().clone();
    assert_eq!(
        (issue.status, issue.round_attempts(), issue.attempts),
        (IssueStatus::Open, 0, 3)
    );
    let err = ralph.unblock_issue(&"i-1".into()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "issue i-1 is Open; only a blocked issue can be unblocked"
    );

    let outcome = ralph.resume().await.unwrap();
    assert!(
        matches!(outcome, Outcome::Complete { accepted: 1, .. }),
        "{outcome:?}"
    );
    h.agent.verify().unwrap();
    assert_eq!(
        attempts(&h.requests(Role::Investigate, "i-1")),
        [1, 2, 3, 4],
        "attempt numbers, and the log names made from them, keep counting"
    );
}

/// An issue whose investigator was killed goes to DECOMPOSE; a decomposer that fails too
/// blocks it, and unblocking sends it to DECOMPOSE again.
#[tokio::test]
async fn an_issue_whose_decomposer_failed_is_unblocked_and_decomposed_again() {
    let parts = Script::new().json(json!({"subtasks": [
        {"name": "Write the greeting", "accept": "greets"},
        {"name": "Write the farewell", "accept": "says bye"}
    ]}));
    let agent = FakeAgent::new()
        .on(
            Role::Investigate,
            "i-1",
            Script::new().print("listing the repository", 20).hang(),
        )
        .on_attempt(
            Role::Decompose,
            "i-1",
            1,
            Script::new().answer("I would split it."),
        )
        .on_attempt(
            Role::Decompose,
            "i-1",
            2,
            Script::new().answer("Still prose."),
        )
        // After the unblock: asked again from attempt 1.
        .on(Role::Decompose, "i-1", parts)
        .always(Role::Build, writes_done())
        .always(Role::Verify, accept("ok"))
        .always(Role::GapAnalysis, no_gaps());
    let h = Harness::new(agent);
    let limits = |b: RalphBuilder| {
        b.gate(done_gate())
            .stage_timeout(Duration::from_millis(400))
    };

    let outcome = h.run(limits).await;

    let items = blocked(&outcome);
    assert_eq!(items[0].id, "i-1");
    assert!(
        items[0].reason.starts_with("could not be decomposed"),
        "{items:?}"
    );
    h.ralph(|b| b).unblock_issue(&"i-1".into()).await.unwrap();
    let outcome = h.run(limits).await;
    assert!(
        matches!(outcome, Outcome::Complete { accepted: 2, .. }),
        "{outcome:?}"
    );
    assert_eq!(
        h.requests(Role::Investigate, "i-1").len(),
        1,
        "not investigated again"
    );
    assert_eq!(h.requests(Role::Decompose, "i-1").len(), 3);
}

/// Re-audit N3: a control character (ESC, a tab) in a person's text would drive or garble
/// the terminal of whoever lists the board; it is refused naming the field and where.
#[tokio::test]
async fn task_add_and_issue_add_refuse_control_characters() {
    let dir = tempfile::tempdir().unwrap();
    let ralph = ralph_on(dir.path());

    assert_eq!(
        refused(
            &ralph,
            Task::new("t-1", "esc\u{1b}[31mred").with_acceptance("done")
        )
        .await,
        "task add: name holds the control character U+001B at byte 3: write plain text"
    );
    assert!(
        refused(
            &ralph,
            Task::new("t-1", "tab\there").with_acceptance("done")
        )
        .await
        .contains("name holds the control character U+0009")
    );
    assert!(
        refused(&ralph, Task::new("t-1", "n").with_acceptance("ok\u{9b}"))
            .await
            .contains("accept holds the control character U+009B")
    );
    // The accept text may span lines.
    ralph
        .add_task(Task::new("t-1", "n").with_acceptance("one\ntwo"))
        .await
        .unwrap();
    let err = ralph.add_issue("bad\u{1b}[31m").await.unwrap_err();
    assert!(
        matches!(err, Error::Edit(EditError::Invalid { .. })),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "issue add: text holds the control character U+001B at byte 3: write plain text"
    );
}

/// Re-audit N6: ids that differ only in case would be one branch and one folder on a
/// case-insensitive file system.
#[tokio::test]
async fn task_add_refuses_an_id_that_differs_from_one_on_the_board_only_in_case() {
    let dir = tempfile::tempdir().unwrap();
    let ralph = ralph_on(dir.path());
    ralph.add_task(task("t-1")).await.unwrap();

    let said = refused(&ralph, task("T-1")).await;

    assert!(
        said.starts_with(r#"task add: id "T-1" differs from t-1 only in case"#),
        "{said}"
    );
}
