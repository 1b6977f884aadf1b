//! Rate limits are waited out and not counted; a fatal failure, or an agent that cannot reach
//! its API, ends the run with an error.

use super::*;

// ---------------------------------------------------------------------------------------
// 10. Rate limits are waited out and not counted.
// ---------------------------------------------------------------------------------------

#[rstest]
#[case::investigate(Role::Investigate, "i-1")]
#[case::build(Role::Build, "t-1a")]
#[case::decompose(Role::Decompose, "t-1")]
#[case::verify(Role::Verify, "t-1a")]
#[case::gap_analysis(Role::GapAnalysis, "iteration-2")]
#[tokio::test]
async fn a_rate_limit_is_waited_out_and_the_attempt_is_not_counted(
    #[case] role: Role,
    #[case] subject: &str,
) {
    let h = Harness::new(every_role_taking(Duration::from_millis(50)).on_attempt(
        role,
        subject,
        1,
        Script::new().rate_limit(1),
    ));

    // The limit (1s) outlasts the stage timeout: the wait is not the work's time.
    let outcome = h.run(|b| b.stage_timeout(Duration::from_millis(500))).await;

    assert_eq!(complete(&outcome), (2, 2));
    h.agent.verify().unwrap();
    let limited = h.events.of_kind("rate_limited");
    assert_eq!(limited.len(), 1);
    assert_eq!(limited[0]["wait_secs"], 1);
    // Run again with the same attempt number; the limited run is not on the record.
    assert_eq!(attempts(&h.requests(role, subject)), [1, 1]);
    assert!(h.events.of_kind("task_retry").is_empty());
    assert!(h.events.warnings().is_empty());
    assert_eq!(h.events.of_kind("task_killed").len(), 1, "only t-1's");
    assert!(
        h.events
            .of_kind("verdict")
            .iter()
            .all(|v| v["accepted"] == true)
    );
    let board = h.store.board();
    assert_eq!(board.issue("i-1").unwrap().attempts, 1);
    for id in ["t-1a", "t-1b"] {
        assert_eq!(board.task(id).unwrap().attempts, 1, "{id}");
        assert_eq!(board.task(id).unwrap().verifications, 1, "{id}");
        assert_eq!(board.task(id).unwrap().status, TaskStatus::Accepted, "{id}");
    }
    let started_1a = h
        .started()
        .into_iter()
        .filter(|(id, _)| id == "t-1a")
        .collect::<Vec<_>>();
    // The wait happens inside the attempt: one start, two agent runs.
    assert_eq!(started_1a, vec![("t-1a".to_owned(), 1)]);
}

// Transient failures (overload, 5xx) are retried after a backoff and not counted; past
// `transient_retries` they count as an ordinary failed attempt.
#[rstest]
#[case::investigate(Role::Investigate, "i-1")]
#[case::build(Role::Build, "t-1a")]
#[case::decompose(Role::Decompose, "t-1")]
#[case::verify(Role::Verify, "t-1a")]
#[case::gap_analysis(Role::GapAnalysis, "iteration-2")]
#[tokio::test]
async fn a_transient_failure_is_retried_after_a_backoff_and_not_counted(
    #[case] role: Role,
    #[case] subject: &str,
) {
    let overloaded = || Script::new().fail_with("overloaded (529)", FailureKind::Transient);
    let h = Harness::new(
        every_role_taking(Duration::from_millis(10))
            .on_attempt(role, subject, 1, overloaded())
            .on_attempt(role, subject, 1, overloaded()),
    );

    let outcome = h
        .run(|b| {
            b.stage_timeout(Duration::from_millis(500))
                .config("transient_backoff", "10ms")
        })
        .await;

    assert_eq!(complete(&outcome), (2, 2));
    h.agent.verify().unwrap();
    assert_eq!(attempts(&h.requests(role, subject)), [1, 1, 1]);
    let warnings = h.events.warnings();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0]["message"]
            .as_str()
            .unwrap()
            .contains("overloaded (529); retrying in 10ms")
    );
    assert!(
        warnings[1]["message"]
            .as_str()
            .unwrap()
            .contains("retrying in 20ms")
    );
    assert!(h.events.of_kind("task_retry").is_empty());
    let board = h.store.board();
    assert_eq!(board.issue("i-1").unwrap().attempts, 1);
    assert_eq!(board.task("t-1a").unwrap().attempts, 1);
    assert_eq!(board.task("t-1a").unwrap().verifications, 1);
}

#[tokio::test]
async fn a_transient_failure_past_the_limit_is_a_failed_attempt() {
    let overloaded = || Script::new().fail_with("overloaded (529)", FailureKind::Transient);
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                tasks(&[("Write done.txt", "greets")]),
            )
            .on_attempt(Role::Build, "t-1", 1, overloaded())
            .on_attempt(Role::Build, "t-1", 1, overloaded())
            .on_attempt(Role::Build, "t-1", 2, done())
            .on(Role::Verify, "t-1", accept("fine"))
            .always(Role::GapAnalysis, no_gaps()),
    );

    let outcome = h
        .run(|b| {
            b.config("transient_backoff", "1ms")
                .config("transient_retries", 1)
        })
        .await;

    assert!(
        matches!(outcome, Outcome::Complete { accepted: 1, .. }),
        "{outcome:?}"
    );
    let retry = h.events.of_kind("task_retry");
    assert_eq!(retry.len(), 1);
    assert!(
        retry[0]["reason"]
            .as_str()
            .unwrap()
            .contains("overloaded (529) (still failing after 1 retries)"),
        "{retry:?}"
    );
    h.agent.verify().unwrap();
}

/// Each verifier has the stage timeout from its own start: four verifiers one at a time, each
/// within the limit but not all four together, all finish and accept.
#[tokio::test]
async fn each_verifier_gets_the_stage_timeout_from_its_own_start() {
    let slow_accept = || {
        Script::new()
            .delay(Duration::from_millis(200))
            .json(json!({"verdict": "accept", "reason": "fine"}))
    };
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                tasks(&[("a", "a"), ("b", "b"), ("c", "c"), ("d", "d")]),
            )
            .always(Role::Build, done())
            .always(Role::Verify, slow_accept())
            .always(Role::GapAnalysis, no_gaps()),
    );

    let outcome = h
        .run(|b| {
            b.verify_concurrency(1)
                .stage_timeout(Duration::from_millis(500))
        })
        .await;

    assert_eq!(complete(&outcome), (1, 4));
    assert!(
        h.events
            .of_kind("verdict")
            .iter()
            .all(|v| v["accepted"] == true)
    );
}

#[tokio::test]
async fn gap_analysis_gets_its_own_time_after_slow_verifiers() {
    let step = Duration::from_millis(300);
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                tasks(&[("Write done.txt", "greets")]),
            )
            .always(Role::Build, writes_done())
            .on(
                Role::Verify,
                "t-1",
                Script::new()
                    .delay(step)
                    .json(json!({"verdict": "accept", "reason": "ok"})),
            )
            .on(
                Role::GapAnalysis,
                "iteration-1",
                Script::new()
                    .delay(step)
                    .json(json!({"tasks": [{"name": "Say goodbye", "accept": "says bye"}]})),
            )
            .always(Role::Verify, accept("says bye"))
            .always(Role::GapAnalysis, no_gaps()),
    );

    // Each step fits the stage timeout; the verifier and gap analysis together do not.
    let outcome = h
        .run(|b| {
            b.gate(done_gate())
                .stage_timeout(Duration::from_millis(500))
        })
        .await;

    assert_eq!(complete(&outcome), (2, 2));
    assert!(h.events.warnings().is_empty());
    assert_eq!(h.events.of_kind("gaps_found")[0]["tasks"], json!(["t-2"]));
}

// ---------------------------------------------------------------------------------------
// 11. A fatal failure ends the run with an error.
// ---------------------------------------------------------------------------------------

#[rstest]
#[case::build(Role::Build, "t-1")]
#[case::verify(Role::Verify, "t-1")]
#[case::investigate(Role::Investigate, "i-1")]
#[tokio::test]
async fn a_fatal_agent_failure_ends_the_run_with_an_error(
    #[case] role: Role,
    #[case] subject: &str,
) {
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                tasks(&[("Write done.txt", "greets")]),
            )
            .on(Role::Build, "t-1", writes_done())
            .always(Role::Verify, accept("greets"))
            .on_attempt(
                role,
                subject,
                1,
                Script::new().fail_with("credentials rejected", FailureKind::Fatal),
            ),
    );

    let err = h.try_run(|b| b.gate(done_gate())).await.unwrap_err();

    assert!(
        matches!(&err, Error::AgentFatal { agent, role: r, subject: Some(s), reason }
            if agent == "fake" && *r == role && s == subject && reason == "credentials rejected"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "agent fake failed on {role} {subject} and no retry can fix it: credentials rejected"
        )
    );
    // Nothing ran after it, and it counted for nothing.
    let last = h.agent.requests().pop().unwrap();
    assert_eq!((last.role, last.subject.as_deref()), (role, Some(subject)));
    // The run's end is told all the same: a `finished` event with the error.
    let finished = h.events.of_kind("finished");
    assert_eq!(finished.len(), 1, "{finished:?}");
    assert_eq!(finished[0]["mode"], "construct");
    assert_eq!(finished[0]["error"], err.to_string());
    assert_eq!(finished[0]["exit_code"], 1);
    assert!(finished[0].get("outcome").is_none());
    let board = h.store.board();
    assert_eq!(
        board.issue("i-1").unwrap().attempts,
        u32::from(role != Role::Investigate)
    );
    if let Some(task) = board.task("t-1") {
        assert_eq!(task.verifications, 0);
        assert_eq!(task.attempts, u32::from(role == Role::Verify));
    }
}

// ---------------------------------------------------------------------------------------
// An agent that cannot reach its API ends the run; it is not the task's fault.
// ---------------------------------------------------------------------------------------

#[rstest]
#[case::build(Role::Build, "t-1")]
#[case::verify(Role::Verify, "t-1")]
#[case::investigate(Role::Investigate, "i-1")]
#[tokio::test]
async fn an_unreachable_agent_ends_the_run_naming_it_and_nothing_is_counted_or_decomposed(
    #[case] role: Role,
    #[case] subject: &str,
) {
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                tasks(&[("Write done.txt", "greets")]),
            )
            .on(Role::Build, "t-1", writes_done())
            .always(Role::Verify, accept("greets"))
            .on_attempt(
                role,
                subject,
                1,
                Script::new().fail_with(
                    "fake is unreachable: the last: connection refused",
                    FailureKind::Unreachable,
                ),
            ),
    );

    let err = h
        .try_run(|b| b.gate(done_gate()).config("unreachable_after", "7s"))
        .await
        .unwrap_err();

    assert!(
        matches!(&err, Error::AgentUnreachable { agent, role: r, subject: Some(s), reason }
            if agent == "fake" && *r == role && s == subject && reason.contains("connection refused")),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "agent fake stopped on {role} {subject}: it cannot reach its API (fake is unreachable: the last: connection refused)"
        )
    );
    // The setting reached the agent; nothing ran after it, and it counted for nothing.
    let requests = h.agent.requests();
    assert!(
        requests
            .iter()
            .all(|r| r.unreachable_after == Some(Duration::from_secs(7)))
    );
    let last = requests.last().unwrap();
    assert_eq!((last.role, last.subject.as_deref()), (role, Some(subject)));
    // The run ends with its error, as every run's end does: one `finished` naming it.
    let finished = h.events.of_kind("finished");
    assert_eq!(finished.len(), 1, "{finished:?}");
    assert!(
        finished[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("cannot reach its API")),
        "{finished:?}"
    );
    assert!(h.events.of_kind("task_killed").is_empty());
    assert!(h.events.of_kind("decomposed").is_empty());
    assert!(h.events.of_kind("task_retry").is_empty());
    let board = h.store.board();
    assert_eq!(
        board.issue("i-1").unwrap().attempts,
        u32::from(role != Role::Investigate)
    );
    if let Some(task) = board.task("t-1") {
        assert_eq!(task.verifications, 0);
        assert_eq!(task.attempts, u32::from(role == Role::Verify));
        assert_eq!(task.kill_reason, None);
    }
}

// A CLI that gives up on an API it cannot reach fails transiently, each run: those runs are
// ridden out past `transient_retries`, until they have failed so for `unreachable_after`;
// then the agent is unreachable, and the run ends without counting anything.
#[tokio::test]
async fn runs_failing_for_a_connection_error_for_the_unreachable_time_end_the_run_as_unreachable() {
    let refused = "API Error: Connection refused (ECONNREFUSED)";
    let h = Harness::new(FakeAgent::new().always(
        Role::Investigate,
        Script::new().fail_with(refused, FailureKind::Transient),
    ));

    let err = h
        .try_run(|b| {
            b.config("transient_backoff", "5ms")
                .config("transient_retries", 1)
                .config("unreachable_after", "200ms")
        })
        .await
        .unwrap_err();

    let Error::AgentUnreachable {
        agent,
        role,
        subject,
        reason,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(
        (agent.as_str(), *role, subject.as_deref()),
        ("fake", Role::Investigate, Some("i-1"))
    );
    assert_eq!(
        reason,
        &format!(
            "fake is unreachable: no successful API exchange for 200ms, only connection errors; the last: {refused}"
        )
    );
    let runs = h.requests(Role::Investigate, "i-1");
    assert!(runs.len() > 2, "past transient_retries: {}", runs.len());
    assert!(
        attempts(&runs).iter().all(|a| *a == 1),
        "none is an attempt"
    );
    assert!(
        h.events.warnings().iter().all(|w| w["message"]
            .as_str()
            .unwrap()
            .contains(" of 200ms; retrying in ")),
        "{:?}",
        h.events.warnings()
    );
    assert_eq!(h.store.board().issue("i-1").unwrap().attempts, 0);
}

// Other transient failures keep their limit: the connection clock is for connection errors.
#[tokio::test]
async fn an_overload_is_not_a_connection_error() {
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                tasks(&[("Write done.txt", "greets")]),
            )
            .on_attempt(
                Role::Build,
                "t-1",
                1,
                Script::new().fail_with("overloaded (529)", FailureKind::Transient),
            )
            .on_attempt(
                Role::Build,
                "t-1",
                1,
                Script::new().fail_with("overloaded (529)", FailureKind::Transient),
            )
            .on_attempt(Role::Build, "t-1", 2, done())
            .on(Role::Verify, "t-1", accept("fine"))
            .always(Role::GapAnalysis, no_gaps()),
    );

    let outcome = h
        .run(|b| {
            b.config("transient_backoff", "1ms")
                .config("transient_retries", 1)
                .config("unreachable_after", "1ms")
        })
        .await;

    assert!(
        matches!(outcome, Outcome::Complete { accepted: 1, .. }),
        "{outcome:?}"
    );
    assert_eq!(h.events.of_kind("task_retry").len(), 1);
}
