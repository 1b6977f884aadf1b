//! Priorities flow down: tasks made from an issue take its priority, and subtasks take
//! their parent's, explicit or computed (seed 000: INVESTIGATE and DECOMPOSE do not
//! prioritize). The prioritizer still places their tasks in BUILD's order, seeing every
//! priority already given as fixed (docs/seed-differences.md, audit rows 000-R15 and
//! 000-R34).

use super::*;
use ralph::model::{Issue, RunState, TaskId};
use ralph::prioritize::{PrioritizeError, Prioritizer};

/// A prioritizer with its own mind: every task without its own priority is high when its
/// name says "Write", low otherwise, in the order given.
struct ByName;

impl Prioritizer for ByName {
    fn prioritize(&self, tasks: &[Task]) -> Result<Vec<(TaskId, Priority)>, PrioritizeError> {
        Ok(tasks
            .iter()
            .map(|t| {
                let guess = match t.name.contains("Write") {
                    true => Priority::High,
                    false => Priority::Low,
                };
                (t.id.clone(), t.priority.unwrap_or(guess))
            })
            .collect())
    }
}

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

/// The audit's gap: a parent's priority the prioritizer computed was overwritten in its
/// subtasks by what the prioritizer thought of them.
#[tokio::test]
async fn subtasks_inherit_their_parents_computed_priority() {
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                Script::new()
                    .json(json!({"tasks": [{"name": "Write done.txt", "accept": "greets"}]})),
            )
            .on(Role::Build, "t-1", Script::new().hang())
            .on(
                Role::Decompose,
                "t-1",
                Script::new().json(json!({"subtasks": [
                    {"name": "First half", "accept": "a"},
                    {"name": "Second half", "accept": "b", "priority": "medium"}
                ]})),
            )
            .always(Role::Build, Script::new().answer("Done.\n<TASK_DONE>"))
            .always(Role::Verify, accept("fine")),
    );

    // One iteration: INVESTIGATE (the spec's tasks get the prioritizer's priority, as
    // seed 000's PLAN gives them), BUILD kills t-1, DECOMPOSE splits it.
    let _ = h
        .run(|b| {
            b.prioritizer(ByName)
                .stage_timeout(Duration::from_millis(400))
                .max_iterations(1)
        })
        .await;

    let parent = h.task("t-1");
    assert_eq!(parent.status, TaskStatus::Decomposed);
    assert_eq!(
        (parent.priority, parent.computed_priority),
        (None, Some(Priority::High))
    );
    let first = h.task("t-1a");
    assert_eq!(
        (first.priority, first.computed_priority),
        (None, Some(Priority::High)),
        "inherited, not the prioritizer's low"
    );
    assert_eq!(h.task("t-1b").priority, Some(Priority::Medium), "its own");
    // Placed in BUILD's order all the same.
    assert!(first.rank.is_some());
}

/// INVESTIGATE of an issue changes no priority the board already has: the prioritizer is
/// shown them as fixed, and only places the new tasks.
#[tokio::test]
async fn investigating_an_issue_changes_no_priority_the_board_has() {
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-2",
                Script::new().json(json!({"tasks": [{"name": "Write more", "accept": "a"}]})),
            )
            .always(Role::Build, writes_done())
            .always(Role::Verify, accept("fine"))
            .always(Role::GapAnalysis, no_gaps()),
    );
    let mut run = RunState::default();
    run.seeded = true;
    run.spec = Some("spec.md".into());
    run.next_issue = 2;
    let mut earlier = Task::new("t-1", "Write done.txt").with_acceptance("greets");
    earlier.computed_priority = Some(Priority::Low);
    earlier.rank = Some(0);
    h.store
        .persist(&[
            Change::Run(run),
            Change::Task(earlier),
            Change::Issue(Issue::new("i-2", "More greetings")),
        ])
        .await
        .unwrap();

    let _ = h.run(|b| b.prioritizer(ByName).gate(done_gate())).await;

    let prioritized = h.events.of_kind("prioritized");
    assert_eq!(
        prioritized[0]["order"],
        json!(["t-1:low", "t-2:high"]),
        "after INVESTIGATE: t-1 keeps its low, t-2 (from an issue without a priority) gets one"
    );
}

/// What a prioritizer that overrides `prioritize_on` saw: the spec's text and the spec on
/// record of the board.
#[derive(Default)]
struct Seeing(std::sync::Mutex<Vec<(String, Option<String>)>>);

impl Prioritizer for Seeing {
    fn prioritize(&self, tasks: &[Task]) -> Result<Vec<(TaskId, Priority)>, PrioritizeError> {
        Ok(tasks
            .iter()
            .map(|t| (t.id.clone(), Priority::Medium))
            .collect())
    }

    fn prioritize_on(
        &self,
        tasks: &[Task],
        board: &ralph::model::Board,
        spec: &str,
    ) -> Result<Vec<(TaskId, Priority)>, PrioritizeError> {
        let seen = (spec.to_owned(), board.run.spec.clone());
        let mut kept = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.push(seen);
        self.prioritize(tasks)
    }
}

// library-user F6: the prioritizer saw only the tasks; it now sees the spec and the board.
#[tokio::test]
async fn a_prioritizer_sees_the_spec_and_the_board() {
    let h = Harness::new(one_task().on(Role::Build, "t-1", writes_done()));
    let seeing = std::sync::Arc::new(Seeing::default());
    let outcome = h
        .run(|b| b.gate(done_gate()).prioritizer(seeing.clone()))
        .await;
    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    let seen = seeing.0.lock().unwrap();
    assert!(!seen.is_empty(), "called");
    let (spec, on_record) = &seen[0];
    assert!(spec.contains(SPEC.lines().next().unwrap()), "{spec}");
    assert_eq!(on_record.as_deref(), Some("spec.md"));
}
