//! Dependency order.

use super::*;

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

    assert_eq!(complete(&outcome), (1, 3));
    let order: Vec<String> = h.started().into_iter().map(|(id, _)| id).collect();
    assert_eq!(order, ["t-3", "t-1", "t-2"]);
    assert_eq!(
        h.store.board().task("t-2").unwrap().deps,
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
    assert_eq!(board.task("t-2").unwrap().status, TaskStatus::Pending);
    assert_eq!(board.task("t-3").unwrap().status, TaskStatus::Accepted);
}

/// A task record for the board, with an acceptance.
fn record(id: &str) -> Task {
    Task::new(id, format!("Do {id}")).with_acceptance("it is done")
}

/// A subtask of `parent`, as DECOMPOSE leaves it.
fn subtask(id: &str, parent: &str) -> Task {
    let mut task = record(id);
    task.parent = Some(parent.into());
    task
}

fn ids(list: &[&str]) -> Vec<TaskId> {
    list.iter().map(|id| TaskId::new(*id)).collect()
}

/// t-3 was decomposed into t-3a and t-3b (t-3b decomposed in turn into t-3ba); on the
/// board, as a hand-written plan line adopted leaves it, t-4 still depends on t-3 and t-5 on
/// t-8, decomposed with no subtask left. A decomposed task never finishes: t-4 is rewired to
/// the subtasks that do its work (warned), and built after them; t-5 can wait on nothing, so
/// it is blocked with the way on, and unblocking it drops the dependency.
#[tokio::test]
async fn a_dependency_on_a_decomposed_task_on_the_board_is_rewired_to_its_subtasks() {
    let h = Harness::new(
        FakeAgent::new()
            .always(Role::Build, done())
            .always(Role::Verify, accept("ok"))
            .always(Role::GapAnalysis, no_gaps()),
    );
    h.store
        .persist(&[
            seeded(),
            Change::Task(record("t-3").with_status(TaskStatus::Decomposed)),
            Change::Task(subtask("t-3a", "t-3")),
            Change::Task(subtask("t-3b", "t-3").with_status(TaskStatus::Decomposed)),
            Change::Task(subtask("t-3ba", "t-3b")),
            Change::Task(record("t-4").with_deps(["t-3"])),
            Change::Task(record("t-8").with_status(TaskStatus::Decomposed)),
            Change::Task(record("t-5").with_deps(["t-8"])),
        ])
        .await
        .unwrap();

    let outcome = h.run(|b| b).await;

    let reason = "depends on t-8, which was decomposed and has no subtask on the board; \
                  unblocking it drops the dependency";
    assert_eq!(
        outcome,
        Outcome::Blocked {
            items: vec![BlockedItem::new("t-5", reason)]
        }
    );
    assert_eq!(h.task("t-4").deps, ids(&["t-3a", "t-3ba"]));
    assert_eq!(h.task("t-4").status, TaskStatus::Accepted);
    let order: Vec<String> = h.started().into_iter().map(|(id, _)| id).collect();
    assert_eq!(order.last().map(String::as_str), Some("t-4"), "{order:?}");
    let warnings: Vec<String> = h
        .events
        .warnings()
        .iter()
        .map(|w| w["message"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w == "t-4 depended on t-3, which was decomposed: it waits on t-3a, t-3ba now"),
        "{warnings:?}"
    );
    assert!(
        warnings
            .iter()
            .any(|w| *w == format!("t-5 blocked: {reason}")),
        "{warnings:?}"
    );

    let ralph = h.ralph(|b| b);
    let unblocked = ralph.unblock(&"t-5".into()).await.unwrap();
    assert_eq!(unblocked.dropped, ids(&["t-8"]));
    let outcome = ralph.resume().await.unwrap();
    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
}

/// An agent's answer naming a decomposed task (the investigator read an old plan) gets a
/// task that waits on the subtasks instead, as a dependent on the board was rewired when
/// DECOMPOSE split it.
#[tokio::test]
async fn an_agents_dependency_on_a_decomposed_task_waits_on_its_subtasks() {
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-5",
                Script::new().json(json!({"tasks": [
                    {"name": "Document the parser", "accept": "documented", "deps": ["t-3"]}
                ]})),
            )
            .always(Role::Build, done())
            .always(Role::Verify, accept("ok"))
            .always(Role::GapAnalysis, no_gaps()),
    );
    h.store
        .persist(&[
            seeded(),
            Change::Task(record("t-3").with_status(TaskStatus::Decomposed)),
            Change::Task(subtask("t-3a", "t-3")),
            Change::Task(subtask("t-3b", "t-3")),
            Change::Issue(ralph::model::Issue::new("i-5", "Document the parser")),
        ])
        .await
        .unwrap();

    let outcome = h.run(|b| b).await;

    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    let board = h.store.board();
    let made = board
        .tasks()
        .find(|t| t.origin.as_deref() == Some("i-5"))
        .expect("the investigator's task");
    assert_eq!(made.deps, ids(&["t-3a", "t-3b"]));
    let order: Vec<String> = h.started().into_iter().map(|(id, _)| id).collect();
    assert_eq!(order.last(), Some(&made.id.to_string()), "{order:?}");
}

/// An agent's answer naming a decomposed task with no subtask on the board (t-8: nothing
/// would ever do its work) is refused as a dependency on a missing task is: the answer is
/// asked for again with the error, and the task of the valid answer waits on nothing.
#[tokio::test]
async fn an_agents_dependency_on_a_decomposed_task_without_subtasks_is_retried_with_the_error() {
    let h = Harness::new(
        FakeAgent::new()
            .on_attempt(
                Role::Investigate,
                "i-5",
                1,
                Script::new().json(json!({"tasks": [
                    {"name": "Document the parser", "accept": "documented", "deps": ["t-8"]}
                ]})),
            )
            .on_attempt(
                Role::Investigate,
                "i-5",
                2,
                Script::new().json(json!({"tasks": [
                    {"name": "Document the parser", "accept": "documented"}
                ]})),
            )
            .always(Role::Build, done())
            .always(Role::Verify, accept("ok"))
            .always(Role::GapAnalysis, no_gaps()),
    );
    h.store
        .persist(&[
            seeded(),
            Change::Task(record("t-8").with_status(TaskStatus::Decomposed)),
            Change::Issue(ralph::model::Issue::new("i-5", "Document the parser")),
        ])
        .await
        .unwrap();

    let outcome = h.run(|b| b).await;

    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    let calls = h.requests(Role::Investigate, "i-5");
    assert_eq!(attempts(&calls), [1, 2]);
    let error = "tasks[0].deps names t-8, which was decomposed and has no subtask on the \
                 board, so it never finishes: name a task on the board";
    assert!(calls[1].prompt.contains(error), "{}", calls[1].prompt);
    let invalid = h.events.of_kind("answer_invalid");
    assert_eq!(invalid.len(), 1, "{invalid:?}");
    assert!(
        invalid[0]["cause"].as_str().unwrap().contains(error),
        "{invalid:?}"
    );
    let board = h.store.board();
    let made = board
        .tasks()
        .find(|t| t.origin.as_deref() == Some("i-5"))
        .expect("the investigator's task");
    assert!(made.deps.is_empty(), "{:?}", made.deps);
    assert_eq!(made.status, TaskStatus::Accepted);
}
