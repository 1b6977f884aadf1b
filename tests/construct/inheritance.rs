//! Priorities flow down: tasks made from an issue take its priority (INVESTIGATE does not
//! prioritize), and subtasks take their parent's (DECOMPOSE does not either). Audit rows
//! 000-R15 and 000-R34.

use super::*;
use ralph::model::{Issue, RunState};

#[tokio::test]
async fn tasks_made_from_an_issue_inherit_its_priority_unless_they_name_one() {
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                Script::new().json(json!({"tasks": [
                    {"name": "Plain", "accept": "a"},
                    {"name": "Own", "accept": "b", "priority": "low"}
                ]})),
            )
            .always(Role::Build, writes_done())
            .always(Role::Verify, accept("fine"))
            .always(Role::GapAnalysis, no_gaps()),
    );
    let mut run = RunState::default();
    run.seeded = true;
    run.spec = Some("spec.md".into());
    run.next_issue = 1;
    h.store
        .persist(&[
            Change::Run(run),
            Change::Issue(Issue::new("i-1", "Write done.txt").with_priority(Priority::High)),
        ])
        .await
        .unwrap();

    let outcome = h.run(|b| b.gate(done_gate())).await;

    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    assert_eq!(h.task("t-1").priority, Some(Priority::High), "inherited");
    assert_eq!(h.task("t-2").priority, Some(Priority::Low), "its own");
}

#[tokio::test]
async fn subtasks_inherit_their_killed_parents_priority() {
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                Script::new().json(json!({"tasks": [
                    {"name": "Write done.txt", "accept": "greets", "priority": "high"}
                ]})),
            )
            .on(Role::Build, "t-1", Script::new().hang())
            .on(
                Role::Decompose,
                "t-1",
                Script::new().json(json!({"subtasks": [
                    {"name": "First half", "accept": "a"},
                    {"name": "Second half", "accept": "b"}
                ]})),
            )
            .always(Role::Build, writes_done())
            .always(Role::Verify, accept("fine"))
            .always(Role::GapAnalysis, no_gaps()),
    );

    let outcome = h
        .run(|b| {
            b.gate(done_gate())
                .stage_timeout(Duration::from_millis(400))
        })
        .await;

    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    assert_eq!(h.task("t-1").status, TaskStatus::Decomposed);
    for sub in ["t-1a", "t-1b"] {
        assert_eq!(h.task(sub).priority, Some(Priority::High), "{sub}");
    }
}
