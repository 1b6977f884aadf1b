//! Complete is earned: a run ends Complete only when the spec was seeded as an issue, every
//! task was accepted (by a verifier or a person, recorded as such) and a gap analysis gave a
//! valid answer that found nothing missing. A gap analysis that fails is asked once more, and
//! then the run is UNVERIFIED (exit 3), never "no gaps".

use super::*;
use ralph::model::Stage;

/// A build that writes `file` and claims done.
fn writes(file: &str) -> Script {
    Script::new()
        .write(file, "hello\n")
        .answer(format!("Wrote {file}.\n<TASK_DONE>"))
}

#[tokio::test]
async fn a_task_added_before_the_first_run_does_not_stand_in_for_the_spec() {
    let h = Harness::new(
        FakeAgent::new()
            // The spec's issue: the person's task covers part of it, a new task the rest.
            .on(
                Role::Investigate,
                "i-1",
                Script::new().json(json!({
                    "already_planned": ["t-1"],
                    "tasks": [{"name": "Write done.txt", "accept": "done.txt greets"}]
                })),
            )
            .on(Role::Build, "t-1", writes("a.txt"))
            .on(Role::Build, "t-2", writes_done())
            .always(Role::Verify, accept("ok"))
            .always(Role::GapAnalysis, no_gaps()),
    );
    let ralph = h.ralph(|b| b);
    ralph
        .add_task(Task::new("t-1", "Write a.txt first").with_acceptance("a.txt exists"))
        .await
        .unwrap();

    let outcome = ralph.construct("spec.md").await.unwrap();

    assert!(
        matches!(outcome, Outcome::Complete { accepted: 2, .. }),
        "{outcome:?}"
    );
    let investigated = h.requests(Role::Investigate, "i-1");
    assert_eq!(investigated.len(), 1, "the spec was investigated");
    assert!(
        investigated[0]
            .prompt
            .contains("Implement the spec `spec.md`")
    );
    assert!(investigated[0].prompt.contains("t-1: Write a.txt first"));
    assert!(h.path().join("done.txt").exists(), "the spec's own work");
    assert!(h.path().join("a.txt").exists());
    let board = h.store.board();
    assert_eq!(board.issue("i-1").unwrap().origin.as_deref(), Some("spec"));
    assert_eq!(
        board.issue("i-1").unwrap().tasks,
        [TaskId::new("t-1"), "t-2".into()]
    );
}

#[tokio::test]
async fn an_issue_added_before_the_first_run_is_investigated_beside_the_spec() {
    let h = Harness::new(
        FakeAgent::new()
            .on(Role::Investigate, "i-1", tasks(&[("Write a.txt", "a.txt")]))
            .on(
                Role::Investigate,
                "i-2",
                tasks(&[("Write done.txt", "greets")]),
            )
            .on(Role::Build, "t-1", writes("a.txt"))
            .on(Role::Build, "t-2", writes_done())
            .always(Role::Verify, accept("ok"))
            .always(Role::GapAnalysis, no_gaps()),
    );
    let ralph = h.ralph(|b| b);
    assert_eq!(ralph.add_issue("Also write a.txt").await.unwrap(), "i-1");

    let outcome = ralph.construct("spec.md").await.unwrap();

    assert!(
        matches!(outcome, Outcome::Complete { accepted: 2, .. }),
        "{outcome:?}"
    );
    let board = h.store.board();
    assert_eq!(board.issue("i-2").unwrap().origin.as_deref(), Some("spec"));
    assert!(h.path().join("done.txt").exists());
}

/// i-1 becomes `t-1`, which is built and accepted; the gap analysis runs `gap`.
fn gap_analysis_by(gap: Script) -> FakeAgent {
    FakeAgent::new()
        .on(
            Role::Investigate,
            "i-1",
            tasks(&[("Write done.txt", "done.txt exists and greets")]),
        )
        .on(Role::Build, "t-1", writes_done())
        .always(Role::Verify, accept("meets the criteria"))
        .always(Role::GapAnalysis, gap)
}

/// The lying gap analysis of the audit: it answers prose.
fn answers_prose() -> FakeAgent {
    gap_analysis_by(Script::new().answer("Everything looks complete to me!"))
}

#[tokio::test]
async fn a_gap_analysis_that_answers_prose_leaves_the_run_unverified() {
    let h = Harness::new(answers_prose());

    let outcome = h.run(|b| b.gate(done_gate())).await;

    let Outcome::Unverified { reason } = &outcome else {
        panic!("expected Unverified, got {outcome:?}");
    };
    assert!(reason.contains("no structured answer"), "{reason}");
    assert_eq!(outcome.exit_code(), 3);
    assert!(
        outcome
            .to_string()
            .contains("nothing says the spec is done")
    );
    // The structured retry, then one more whole attempt with its own retry.
    assert_eq!(
        attempts(&h.requests(Role::GapAnalysis, "iteration-1")),
        [1, 2, 3, 4]
    );
    assert!(
        h.events
            .of_kind("warning")
            .iter()
            .any(|w| w["message"].as_str().unwrap().contains("asking once more")),
        "{:?}",
        h.events.of_kind("warning")
    );
    // Persisted: the board says UNVERIFIED, the task stays accepted.
    let board = h.store.board();
    assert_eq!(board.stage(), Stage::Unverified);
    assert_eq!(h.task("t-1").status, TaskStatus::Accepted);
    // As persisted (the run state's `spec_check`, which only the loop reads).
    let run = serde_json::to_value(&board.run).unwrap();
    let failed = run["spec_check"]["failed"].as_str().unwrap();
    assert!(failed.contains("no structured answer"), "{run}");

    // The next run asks again; an answer makes it complete, with the evidence.
    let agent = Arc::new(FakeAgent::new().always(Role::GapAnalysis, no_gaps()));
    let outcome = Ralph::builder()
        .workspace(h.path())
        .agent(agent.clone())
        .store(h.store.clone())
        .gate(done_gate())
        .build()
        .unwrap()
        .construct("spec.md")
        .await
        .unwrap();
    let Outcome::Complete { gap_analysis, .. } = &outcome else {
        panic!("expected Complete, got {outcome:?}");
    };
    assert_eq!(*gap_analysis, 2);
    assert_eq!(agent.requests().len(), 1, "only the gap analysis ran");
}

#[tokio::test]
async fn a_gap_analysis_that_hangs_leaves_the_run_unverified() {
    let h = Harness::new(gap_analysis_by(Script::new().hang()));

    let outcome = h
        .run(|b| {
            b.gate(done_gate())
                .stage_timeout(Duration::from_millis(700))
        })
        .await;

    let Outcome::Unverified { reason } = &outcome else {
        panic!("expected Unverified, got {outcome:?}");
    };
    assert!(reason.contains("stopped (timeout)"), "{reason}");
    // Killed twice: a kill is not retried within one structured call.
    assert_eq!(
        attempts(&h.requests(Role::GapAnalysis, "iteration-1")),
        [1, 2]
    );
    assert_eq!(h.store.board().stage(), Stage::Unverified);
}

#[tokio::test]
async fn complete_says_what_it_rested_on() {
    let h = Harness::new(one_task().on(Role::Build, "t-1", writes_done()));

    let outcome = h.run(|b| b.gate(done_gate())).await;

    let Outcome::Complete {
        gates,
        verifier,
        people,
        gap_analysis,
        ..
    } = &outcome
    else {
        panic!("expected Complete, got {outcome:?}");
    };
    assert_eq!(gates, &["done-file"]);
    assert_eq!(verifier, &[TaskId::new("t-1")]);
    assert!(people.is_empty());
    assert_eq!(*gap_analysis, 1);
    assert_eq!(
        outcome.to_string(),
        "Spec complete: 1 task accepted in 1 iteration. Evidence: gates done-file passed; \
         accepted by a verifier: t-1; the gap analysis of iteration 1 found nothing missing."
    );
    let json = serde_json::to_value(&outcome).unwrap();
    assert_eq!(json["gates"], json!(["done-file"]));
    assert_eq!(json["verifier"], json!(["t-1"]));
    let task = h.task("t-1");
    assert_eq!(
        serde_json::to_value(&task).unwrap()["accepted_by"],
        "verifier"
    );
    assert_eq!(task.gates, ["done-file"]);
    // One gate-log naming in every mode: `gate-<gate>-<task>-a<attempt>`.
    let logs: Vec<String> = std::fs::read_dir(h.path().join("build/ralph-logs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        logs.iter()
            .any(|l| l.ends_with("-build-gate-done-file-t-1-a1.log")),
        "{logs:?}"
    );
}

#[tokio::test]
async fn with_no_required_gate_complete_says_so() {
    let h = Harness::new(one_task().on(Role::Build, "t-1", writes_done()));

    let dry = h.ralph(|b| b).dry_run("spec.md").await.unwrap().to_string();
    assert!(dry.contains("agent:     fake"), "{dry}");
    assert!(dry.contains("gates:     no required gate"), "{dry}");
    let outcome = h
        .run(|b| b.gate(ShellGate::new("lint", "true").with_required(false)))
        .await;

    let Outcome::Complete { gates, .. } = &outcome else {
        panic!("expected Complete, got {outcome:?}");
    };
    assert!(gates.is_empty());
    assert!(
        outcome.to_string().contains("Evidence: no required gates;"),
        "{outcome}"
    );
    // Said at the start too: never in silence.
    assert!(h.events.of_kind("warning").iter().any(|w| {
        w["message"]
            .as_str()
            .unwrap()
            .starts_with("no required gate")
    }),);
}

#[tokio::test]
async fn the_dry_run_lists_the_gates_and_the_agent() {
    let h = Harness::new(one_task());
    let ralph = h.ralph(|b| {
        b.gate(done_gate())
            .gate(ShellGate::new("lint", "true").with_required(false))
    });

    let dry = ralph.dry_run("spec.md").await.unwrap();

    assert_eq!(dry.gates, ["done-file", "lint (optional)"]);
    assert_eq!(dry.agent, "fake");
    let shown = dry.to_string();
    assert!(
        shown.contains("gates:     done-file, lint (optional)"),
        "{shown}"
    );
}

#[tokio::test]
async fn a_persons_acceptance_is_recorded_as_such_and_the_spec_is_still_checked() {
    let h = Harness::new(one_task().on(Role::Build, "t-1", writes_done()));
    // One iteration: the task is built and verified; its verdict is then undone by hand.
    let outcome = h.run(|b| b.gate(done_gate()).once(true)).await;
    assert!(
        matches!(outcome, Outcome::Complete { .. } | Outcome::Once { .. }),
        "{outcome:?}"
    );
    let ralph = h.ralph(|b| b);
    ralph
        .add_task(
            Task::new("t-9", "Polish")
                .with_acceptance("polished")
                .with_status(TaskStatus::Done),
        )
        .await
        .unwrap();
    assert_eq!(ralph.accept_done().await.unwrap(), [TaskId::new("t-9")]);
    let t9 = serde_json::to_value(h.task("t-9")).unwrap();
    assert_eq!(t9["accepted_by"], "person", "as persisted: {t9}");
    // A person's acceptance is evidence for the task, not for the spec: VERIFY runs the
    // gap analysis again before the run can be complete.
    assert_eq!(h.store.board().stage(), Stage::Verify);

    let outcome = h.run(|b| b.gate(done_gate())).await;

    let Outcome::Complete {
        people, verifier, ..
    } = &outcome
    else {
        panic!("expected Complete, got {outcome:?}");
    };
    assert_eq!(people, &[TaskId::new("t-9")]);
    assert_eq!(verifier, &[TaskId::new("t-1")]);
    assert!(
        outcome.to_string().contains("accepted by a person: t-9"),
        "{outcome}"
    );
}

#[tokio::test]
async fn every_gap_a_verifier_names_is_answered_by_the_gap_analysis() {
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                tasks(&[("Write done.txt", "greets")]),
            )
            .on(Role::Build, "t-1", writes_done())
            .on(
                Role::Verify,
                "t-1",
                Script::new().json(json!({
                    "verdict": "accept", "reason": "greets",
                    "gaps": ["no farewell", "the greeting is not documented"]
                })),
            )
            // First an answer that leaves the second gap out: retried with the error.
            .on_attempt(
                Role::GapAnalysis,
                "iteration-1",
                1,
                Script::new().json(json!({
                    "tasks": [{"name": "Say bye", "accept": "bye.txt"}],
                    "verifier_gaps": [{"gap": 1, "task": 0}]
                })),
            )
            .on_attempt(
                Role::GapAnalysis,
                "iteration-1",
                2,
                Script::new().json(json!({
                    "tasks": [{"name": "Say bye", "accept": "bye.txt"}],
                    "verifier_gaps": [
                        {"gap": 1, "task": 0},
                        {"gap": 2, "no_work": "the spec asks for no docs"}
                    ]
                })),
            )
            .on(Role::Build, "t-2", writes("bye.txt"))
            .on(Role::Verify, "t-2", accept("says bye"))
            .on(Role::GapAnalysis, "iteration-2", no_gaps()),
    );

    let outcome = h.run(|b| b.gate(done_gate())).await;

    assert!(
        matches!(outcome, Outcome::Complete { accepted: 2, .. }),
        "{outcome:?}"
    );
    let asked = h.requests(Role::GapAnalysis, "iteration-1");
    assert!(
        asked[0].prompt.contains("1. no farewell"),
        "{}",
        asked[0].prompt
    );
    assert!(
        asked[0]
            .prompt
            .contains("2. the greeting is not documented")
    );
    assert!(asked[1].prompt.contains("gap 2 has no reply"));
    let answered: Vec<(String, String)> = h
        .events
        .of_kind("gap_answered")
        .iter()
        .map(|e| {
            (
                e["gap"].as_str().unwrap().to_owned(),
                e["answer"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        answered,
        [
            ("no farewell".to_owned(), "task t-2".to_owned()),
            (
                "the greeting is not documented".to_owned(),
                "no new work: the spec asks for no docs".to_owned()
            )
        ]
    );
}

/// Audit row 53: an investigation that called the spec's own issue out of scope ended
/// "Spec complete: 0 tasks accepted", though a gate was required and never ran. The
/// answer is invalid, asked again, and the issue blocks: never Complete.
#[tokio::test]
async fn the_specs_own_issue_can_never_be_out_of_scope() {
    let out_of_scope = Script::new().json(json!({"out_of_scope": true, "reason": "meh"}));
    let h = Harness::new(
        FakeAgent::new()
            .always(Role::Investigate, out_of_scope)
            .always(Role::GapAnalysis, no_gaps()),
    );

    let outcome = h.run(|b| b.gate(done_gate()).retries(1)).await;

    assert!(matches!(outcome, Outcome::Blocked { .. }), "{outcome:?}");
    let asked = h.requests(Role::Investigate, "i-1");
    assert!(asked.len() >= 2, "asked again: {}", asked.len());
    assert!(
        asked[1].prompt.contains("cannot be out of scope"),
        "{}",
        asked[1].prompt
    );
    assert_ne!(
        h.store.board().issue("i-1").unwrap().status,
        IssueStatus::OutOfScope
    );
}

/// Audit row 54: a verifier's `task_id` naming another task was ignored, though the
/// schema says it is checked. The answer is refused and asked again.
#[tokio::test]
async fn a_verdict_naming_another_task_is_asked_again() {
    let elsewhere = Script::new().json(json!({
        "task_id": "t-9", "verdict": "accept", "reason": "t-9 is fine"
    }));
    let h = Harness::new(one_task().on(Role::Build, "t-1", writes_done()).on_attempt(
        Role::Verify,
        "t-1",
        1,
        elsewhere,
    ));

    let outcome = h.run(|b| b.gate(done_gate())).await;

    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    let asked = h.requests(Role::Verify, "t-1");
    assert_eq!(asked.len(), 2, "asked again");
    assert!(asked[1].prompt.contains("\"t-9\""), "{}", asked[1].prompt);
}

/// Complete rests on the required gates having passed on the final tree: with every task
/// accepted by a person, no gate ever ran, so they run once before the verdict; a failure
/// there becomes an issue, not Complete.
#[tokio::test]
async fn with_every_task_accepted_by_a_person_the_gates_run_once_on_the_final_tree() {
    let counted = ShellGate::new(
        "done-file",
        "echo run >> gate-runs; test -f done.txt || { echo 'done.txt is missing'; exit 1; }",
    );
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                Script::new().json(json!({"already_planned": ["t-1"]})),
            )
            .on(
                Role::Investigate,
                "i-2",
                tasks(&[("Write done.txt", "done.txt exists")]),
            )
            .on(Role::Build, "t-2", writes_done())
            .always(Role::Verify, accept("ok"))
            .always(Role::GapAnalysis, no_gaps()),
    );
    let ralph = h.ralph(|b| b.gate(counted.clone()));
    ralph
        .add_task(
            Task::new("t-1", "Write done.txt")
                .with_acceptance("done.txt exists")
                .with_status(TaskStatus::Done),
        )
        .await
        .unwrap();
    ralph.accept_done().await.unwrap();

    let outcome = h.run(|b| b.gate(counted)).await;

    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    let board = h.store.board();
    let opened = &board.issue("i-2").unwrap();
    assert_eq!(opened.origin.as_deref(), Some("gates"));
    assert!(
        opened.text.contains("done.txt is missing"),
        "{}",
        opened.text
    );
    // The final tree failed once; t-2's attempt passed (and is the last tree gated).
    let runs = std::fs::read_to_string(h.path().join("gate-runs")).unwrap_or_default();
    assert_eq!(runs.lines().count(), 2, "{runs}");
}

/// Audit row 69: a spec edited after a complete run was ignored (`construct` answered
/// Complete at once). Its change becomes an issue holding the diff, shown by the dry run,
/// and is built.
#[tokio::test]
async fn a_spec_edited_after_complete_has_its_change_built() {
    let h = Harness::new(
        one_task()
            .on(Role::Build, "t-1", writes_done())
            .on(
                Role::Investigate,
                "i-2",
                tasks(&[("Write bye.txt", "bye.txt exists")]),
            )
            .on(Role::Build, "t-2", writes("bye.txt")),
    );
    let first = h.run(|b| b.gate(done_gate())).await;
    assert!(matches!(first, Outcome::Complete { .. }), "{first:?}");
    let spec = std::fs::read_to_string(h.path().join("spec.md")).unwrap();
    std::fs::write(
        h.path().join("spec.md"),
        format!("{spec}Also write bye.txt.\n"),
    )
    .unwrap();

    let dry = h
        .ralph(|b| b.gate(done_gate()))
        .dry_run("spec.md")
        .await
        .unwrap();
    assert!(
        dry.to_string()
            .contains("changed since the board took it in; a run seeds its change as issue i-2"),
        "{dry}"
    );
    let again = h.run(|b| b.gate(done_gate())).await;

    assert!(
        matches!(again, Outcome::Complete { accepted: 2, .. }),
        "{again:?}"
    );
    let board = h.store.board();
    assert!(
        board
            .issue("i-2")
            .unwrap()
            .text
            .contains("+ Also write bye.txt."),
        "{}",
        board.issue("i-2").unwrap().text
    );
    assert!(h.path().join("bye.txt").exists(), "the change was built");
    let said = h.events.warnings();
    assert!(
        said.iter().any(|w| w["message"]
            .as_str()
            .unwrap_or("")
            .contains("spec.md changed since")),
        "{said:?}"
    );
}
