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
