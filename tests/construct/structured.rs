//! Invalid structured answers.

use super::*;

// ---------------------------------------------------------------------------------------
// 7. Invalid structured answers.
// ---------------------------------------------------------------------------------------

/// Every structured role once: i-1 → t-1; t-1 is killed at the context limit and split into
/// t-1a and t-1b; both are built, verified and accepted; gap analysis finds nothing.
fn every_role() -> FakeAgent {
    every_role_taking(Duration::ZERO)
}

#[rstest]
#[case::investigate_without_tasks(
    Role::Investigate,
    "i-1",
    Script::new().json(json!({"tasks": []})),
    "give at least one task"
)]
#[case::investigate_in_prose(
    Role::Investigate,
    "i-1",
    Script::new().answer("Sure! First, write the greeter."),
    "no structured answer: it starts with \"Sure! First, write the greeter.\""
)]
#[case::investigate_unknown_field(
    Role::Investigate,
    "i-1",
    Script::new().json(json!({"tasks": [{"name": "a", "accept": "b", "effort": 3}]})),
    "unknown field `effort`"
)]
#[case::verify_bad_verdict(
    Role::Verify,
    "t-1a",
    Script::new().json(json!({"verdict": "maybe", "reason": "unsure"})),
    "unknown variant `maybe`"
)]
#[case::verify_broken_json(
    Role::Verify,
    "t-1a",
    Script::new().answer("{\"verdict\": \"accept\","),
    "not valid JSON"
)]
#[case::gap_analysis_empty_name(
    Role::GapAnalysis,
    "iteration-2",
    Script::new().json(json!({"tasks": [{"name": " ", "accept": "x"}]})),
    "tasks[0].name is empty"
)]
#[case::gap_analysis_unknown_dependency(
    Role::GapAnalysis,
    "iteration-2",
    Script::new().json(json!({"tasks": [{"name": "More", "accept": "x", "deps": ["t-99"]}]})),
    "names t-99, which is not a task"
)]
#[case::decompose_one_subtask(
    Role::Decompose,
    "t-1",
    Script::new().json(json!({"subtasks": [{"name": "All of it", "accept": "x"}]})),
    "give 2 to 5 subtasks, not 1"
)]
#[case::decompose_names_the_task_it_replaces(
    Role::Decompose,
    "t-1",
    Script::new().json(json!({"subtasks": [
        {"name": "Write the greeting", "accept": "greets"},
        {"name": "Write the farewell", "accept": "says bye", "deps": ["t-1"]}
    ]})),
    "subtasks[1].deps names t-1, the task these subtasks replace"
)]
#[case::decompose_unknown_dependency(
    Role::Decompose,
    "t-1",
    Script::new().json(json!({"subtasks": [
        {"name": "Write the greeting", "accept": "greets"},
        {"name": "Write the farewell", "accept": "says bye", "deps": ["t-99"]}
    ]})),
    "subtasks[1].deps names t-99, which is not a task"
)]
#[tokio::test]
async fn an_invalid_structured_answer_is_retried_once_with_the_error(
    #[case] role: Role,
    #[case] subject: &str,
    #[case] invalid: Script,
    #[case] error: &str,
) {
    let h = Harness::new(every_role().on_attempt(role, subject, 1, invalid));

    let outcome = h.run(|b| b).await;

    assert_eq!(complete(&outcome), (2, 2));
    h.agent.verify().unwrap();
    let calls = h.requests(role, subject);
    assert_eq!(attempts(&calls), [1, 2]);
    assert!(calls.iter().all(|c| c.schema.is_some()));
    let retry = &calls[1].prompt;
    assert!(
        retry.starts_with(&calls[0].prompt),
        "the retry keeps the prompt"
    );
    assert!(
        retry.contains("## Your Previous Answer Was Invalid"),
        "{retry}"
    );
    assert!(retry.contains(error), "{retry}");
    // The cause is an event an observer sees, not only a line of the retry's prompt.
    let invalid = h.events.of_kind("answer_invalid");
    assert_eq!(invalid.len(), 1, "{invalid:?}");
    assert_eq!(invalid[0]["role"], role.as_str());
    assert_eq!(invalid[0]["subject"], subject);
    assert_eq!(invalid[0]["attempt"], 1);
    assert!(
        invalid[0]["cause"].as_str().unwrap().contains(error),
        "{invalid:?}"
    );
    let board = h.store.board();
    match role {
        Role::Investigate => assert_eq!(board.issue("i-1").unwrap().attempts, 2),
        Role::Verify => assert_eq!(board.task("t-1a").unwrap().verifications, 2),
        _ => {}
    }
    assert!(h.events.warnings().is_empty());
}

#[tokio::test]
async fn an_issue_without_a_valid_answer_stays_open_then_blocks_after_the_retries() {
    let h = Harness::new(
        FakeAgent::new().always(Role::Investigate, Script::new().json(json!({"tasks": []}))),
    );

    let outcome = h.run(|b| b.retries(2)).await;

    let items = blocked(&outcome);
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].id, "i-1");
    assert!(
        items[0]
            .reason
            .starts_with("no valid answer after a retry: give at least one task"),
        "{}",
        items[0].reason
    );
    // Two rounds of (answer + one retry): open after the first, blocked after the second.
    assert_eq!(
        attempts(&h.requests(Role::Investigate, "i-1")),
        [1, 2, 3, 4]
    );
    let history: Vec<(IssueStatus, u32)> = h
        .store
        .persisted()
        .into_iter()
        .filter_map(|c| match c {
            Change::Issue(i) if i.id == "i-1" => Some((i.status, i.attempts)),
            _ => None,
        })
        .collect();
    assert_eq!(
        history,
        [
            (IssueStatus::Open, 0),
            (IssueStatus::Open, 2),
            (IssueStatus::Blocked, 4)
        ]
    );
    let investigated = h.events.of_kind("issue_investigated");
    assert_eq!(investigated.len(), 2);
    assert!(investigated.iter().all(|e| e["tasks"] == json!([])));
    assert!(h.store.board().tasks().next().is_none());
}

#[tokio::test]
async fn a_verifier_without_a_valid_answer_is_a_rejection_with_no_usable_verdict() {
    let bad = || Script::new().json(json!({"verdict": "maybe", "reason": "unsure"}));
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                tasks(&[("Write done.txt", "greets")]),
            )
            .always(Role::Build, writes_done())
            .on_attempt(Role::Verify, "t-1", 1, bad())
            .on_attempt(Role::Verify, "t-1", 2, bad())
            .on_attempt(Role::Verify, "t-1", 3, accept("greets"))
            .always(Role::GapAnalysis, no_gaps()),
    );

    let outcome = h.run(|b| b.gate(done_gate())).await;

    assert_eq!(complete(&outcome), (2, 1));
    h.agent.verify().unwrap();
    let verdicts = h.events.of_kind("verdict");
    assert_eq!(verdicts[0]["accepted"], false);
    let reason = verdicts[0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("no usable verdict: no valid answer after a retry"),
        "{reason}"
    );
    assert!(reason.contains("maybe"), "{reason}");
    assert_eq!(verdicts[1]["accepted"], true);
    let builds = h.requests(Role::Build, "t-1");
    assert_eq!(attempts(&builds), [1, 2]);
    assert!(builds[1].prompt.contains("no usable verdict"));
    let task = h.task("t-1");
    assert_eq!(task.verifications, 3);
    assert_eq!(task.tombstones.len(), 1);
}

#[tokio::test]
async fn gap_analysis_without_a_valid_answer_is_never_no_gaps() {
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                tasks(&[("Write done.txt", "greets")]),
            )
            .on(Role::Build, "t-1", writes_done())
            .on(Role::Verify, "t-1", accept("greets"))
            .always(
                Role::GapAnalysis,
                Script::new().json(json!({"issues": ["  "]})),
            ),
    );

    let outcome = h.run(|b| b.gate(done_gate())).await;

    let Outcome::Unverified { reason } = &outcome else {
        panic!("expected Unverified, got {outcome:?}");
    };
    assert!(reason.contains("issues[0] is empty"), "{reason}");
    assert_eq!(
        attempts(&h.requests(Role::GapAnalysis, "iteration-1")),
        [1, 2, 3, 4]
    );
    let warnings = h.events.warnings();
    assert_eq!(warnings.len(), 1);
    let message = warnings[0]["message"].as_str().unwrap();
    assert!(message.contains("gap analysis"), "{message}");
    assert!(message.contains("issues[0] is empty"), "{message}");
    assert!(h.events.of_kind("gaps_found").is_empty());
    assert_eq!(h.store.board().issues().len(), 1);
}

#[tokio::test]
async fn a_task_without_a_valid_decomposition_is_blocked() {
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                tasks(&[("Write the greeter", "greets")]),
            )
            .on(Role::Build, "t-1", Script::new().usage(99, 100, None))
            .always(
                Role::Decompose,
                Script::new().json(json!({"subtasks": [{"name": "All of it", "accept": "x"}]})),
            ),
    );

    let outcome = h.run(|b| b).await;

    let items = blocked(&outcome);
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].id, "t-1");
    assert!(
        items[0].reason.starts_with("could not be decomposed"),
        "{}",
        items[0].reason
    );
    assert!(items[0].reason.contains("give 2 to 5 subtasks, not 1"));
    assert_eq!(attempts(&h.requests(Role::Decompose, "t-1")), [1, 2]);
    let task = h.task("t-1");
    assert_eq!(task.status, TaskStatus::Blocked);
    assert_eq!(task.kill_reason, Some(KillReason::ContextLimit));
}
