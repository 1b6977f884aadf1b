//! `<TASK_BLOCKED>`, and markers that must not complete a task.

use super::*;

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

const CONFLICT: &str = "contained more than one of <TASK_DONE>, <TASK_BLOCKED";
/// A marker on its own line but in fenced code: the retry says the fence was why.
const IN_A_FENCE: &str = "on a line of its own but inside a code fence";

#[rstest]
#[case::in_prose("Tests pass, so I output <TASK_DONE> now.", NOT_AT_END)]
#[case::followed_by_text("<TASK_DONE>\nLet me double-check one more thing.", NOT_AT_END)]
#[case::in_a_code_fence("The marker:\n```\n<TASK_DONE>\n```", IN_A_FENCE)]
#[case::in_an_unclosed_fence("Output:\n```text\n<TASK_DONE>", IN_A_FENCE)]
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

    assert_eq!(complete(&outcome), (1, 1));
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
    assert_eq!(complete(&outcome), (1, 1));
    assert_eq!(h.task("t-1").attempts, 1);
}
