//! Max iterations, then a resume with a higher limit.

use super::*;

// ---------------------------------------------------------------------------------------
// 5. Max iterations, then resume with a higher limit.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn max_iterations_is_an_outcome_and_a_higher_limit_resumes_to_completion() {
    let dir = workspace(SPEC);
    let first = Arc::new(
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
                reject("it does not greet anyone by name"),
            )
            .on(Role::GapAnalysis, "iteration-1", no_gaps()),
    );
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(first.clone())
        .gate(done_gate())
        .max_iterations(1)
        .build()
        .unwrap();

    let outcome = ralph.construct("spec.md").await.unwrap();

    assert_eq!(
        outcome,
        Outcome::MaxIterations {
            limit: 1,
            remaining: 1
        }
    );
    assert_eq!(
        outcome.to_string(),
        "Stopped: max iterations (1) reached. Tasks remaining: 1"
    );
    assert_eq!(outcome.exit_code(), 2);
    first.verify().unwrap();
    drop(ralph);
    assert!(plan_file(dir.path()).exists());

    // A new process: new Ralph, same plan.jsonl, a higher limit.
    let second = Arc::new(
        FakeAgent::new()
            .on_attempt(
                Role::Build,
                "t-1",
                2,
                Script::new()
                    .write("done.txt", "hello, reader\n")
                    .answer("Greets by name now.\n<TASK_DONE>"),
            )
            .on_attempt(Role::Verify, "t-1", 2, accept("greets by name"))
            .on(Role::GapAnalysis, "iteration-2", no_gaps()),
    );
    let events = Recorder::default();
    let ralph = build_unlocked(|| {
        Ralph::builder()
            .workspace(dir.path())
            .agent(second.clone())
            .gate(done_gate())
            .observer(events.clone())
            .max_iterations(3)
    });

    let outcome = ralph.resume().await.unwrap();

    assert_eq!(complete(&outcome), (2, 1));
    second.verify().unwrap();
    let rebuild = &second.requests()[0];
    assert_eq!((rebuild.role, rebuild.attempt), (Role::Build, 2));
    assert!(
        rebuild.prompt.contains("it does not greet anyone by name"),
        "{}",
        rebuild.prompt
    );
    assert_eq!(events.stages()[0], (2, "BUILD".to_owned()));
    let board = ralph.board().await.unwrap();
    assert_eq!(board.task("t-1").unwrap().status, TaskStatus::Accepted);
    assert_eq!(board.run.iteration, 3);
}
