//! Misuse (no spec, another spec, a missing spec, two runs at once) and build errors.

use super::*;

// ---------------------------------------------------------------------------------------
// 15. Misuse: no spec, another spec, a missing spec, two runs at once.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn resume_without_a_spec_on_record_is_an_error() {
    let h = Harness::new(FakeAgent::new());
    let err = h.ralph(|b| b).resume().await.unwrap_err();
    assert!(matches!(err, Error::NoSpec), "{err:?}");
    assert!(err.to_string().contains("no spec on record"));
    assert!(h.agent.requests().is_empty());
}

#[tokio::test]
async fn another_spec_on_a_workspace_with_state_is_an_error() {
    let h = Harness::new(one_task().on(Role::Build, "t-1", writes_done()));
    write(h.path(), "other.md", "# Other\n");
    let ralph = h.ralph(|b| b.gate(done_gate()));
    assert_eq!(ralph.construct("spec.md").await.unwrap().exit_code(), 0);

    let err = ralph.construct("other.md").await.unwrap_err();

    match &err {
        Error::SpecMismatch { recorded, given } => {
            assert_eq!((recorded.as_str(), given.as_str()), ("spec.md", "other.md"));
        }
        other => panic!("expected SpecMismatch, got {other:?}"),
    }
    assert!(err.to_string().contains("spec.md") && err.to_string().contains("other.md"));
    // The same spec again resumes the finished state; given as an absolute path it breaks
    // the one rule of every mode (relative to the workspace).
    let again = ralph.construct("spec.md").await.unwrap();
    assert_eq!(again.exit_code(), 0);
    let err = ralph.construct(h.path().join("spec.md")).await.unwrap_err();
    assert!(matches!(err, Error::SpecPath { .. }), "{err:?}");
    assert_eq!(h.agent.requests().len(), 4, "nothing ran after completion");
}

#[tokio::test]
async fn a_missing_spec_is_an_error_naming_it() {
    let h = Harness::new(FakeAgent::new());
    let err = h.ralph(|b| b).construct("nope.md").await.unwrap_err();
    assert!(matches!(err, Error::SpecPath { .. }), "{err:?}");
    assert!(err.to_string().contains("cannot be read"), "{err}");
    assert!(err.to_string().contains("nope.md"), "{err}");
    assert!(h.store.persisted().is_empty());
}

/// Re-audit case 15: a spec refused for its path or text leaves no trace, not even the
/// workspace's lock; `check_spec` refuses it the same way without a run.
#[tokio::test]
async fn a_refused_spec_writes_nothing_and_check_spec_refuses_it_alike() {
    let h = Harness::new(FakeAgent::new());
    write(h.path(), "empty.md", " \n");
    let ralph = h.ralph(|b| b);
    for spec in ["nope.md", "empty.md", "../spec.md"] {
        let err = ralph.construct(spec).await.unwrap_err();
        let checked = ralph.check_spec(spec).unwrap_err();
        assert_eq!(err.to_string(), checked.to_string(), "{spec}");
        assert!(
            !h.path().join(".ralph").exists(),
            "{spec}: .ralph/ was made"
        );
    }
    assert_eq!(ralph.check_spec("spec.md").unwrap(), Path::new("spec.md"));
}

#[tokio::test]
async fn a_second_construct_while_one_runs_is_refused() {
    let h = Harness::new(one_task().on(Role::Build, "t-1", Script::new().hang()));
    let ralph = Arc::new(h.ralph(|b| b.stage_timeout(Duration::from_secs(60))));
    let running = tokio::spawn({
        let ralph = ralph.clone();
        async move { ralph.construct("spec.md").await }
    });
    wait_for_request(&h.agent, Role::Build).await;

    let err = ralph.construct("spec.md").await.unwrap_err();
    assert!(matches!(err, Error::AlreadyRunning), "{err:?}");
    let err = ralph.resume().await.unwrap_err();
    assert!(matches!(err, Error::AlreadyRunning), "{err:?}");

    ralph.stop_token().stop();
    let outcome = tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("the stop is prompt")
        .unwrap()
        .unwrap();
    assert_eq!(outcome, Outcome::Interrupted);
    // The refused calls ran nothing.
    assert_eq!(h.requests(Role::Build, "t-1").len(), 1);
}

// ---------------------------------------------------------------------------------------
// 16. Build errors: a bad ralph.toml, a locked store.
// ---------------------------------------------------------------------------------------

#[rstest]
#[case::wrong_type("max_iterations = \"ten\"\n", "max_iterations")]
#[case::unknown_key("max_iteration = 3\n", "max_iteration")]
#[case::bad_duration("stage_timeout = \"soon\"\n", "stage_timeout")]
#[case::bad_value("verify_concurrency = 0\n", "verify_concurrency")]
#[case::bad_nested_value("[context]\nwarn = 0.99\n", "context")]
#[case::bad_gate("[[gates]]\nname = \"test\"\n", "command")]
#[tokio::test]
async fn a_malformed_config_file_fails_the_build_naming_key_and_file(
    #[case] toml: &str,
    #[case] key: &str,
) {
    let dir = workspace(SPEC);
    write(dir.path(), "ralph.toml", toml);
    let err = Ralph::builder()
        .workspace(dir.path())
        .agent(FakeAgent::new())
        .store(MemoryStore::new())
        .build()
        .unwrap_err();
    assert!(matches!(err, BuildError::Config(_)), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(key), "{message}");
    assert!(message.contains("ralph.toml"), "{message}");
}

#[rstest]
#[case::state_folder(".ralph")]
#[case::log_folder("build/ralph-logs")]
#[case::store_file("board.jsonl")]
#[case::implementation_json("implementation.json")]
#[case::progress_file("PROGRESS.md")]
#[tokio::test]
async fn a_file_of_ralphs_that_is_a_link_out_of_the_workspace_fails_the_build(#[case] own: &str) {
    let dir = workspace(SPEC);
    let outside = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "ralph.toml",
        "[store]\nkind = \"jsonl\"\npath = \"board.jsonl\"\n",
    );
    let link = dir.path().join(own);
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(outside.path().join("x"), &link).unwrap();
    let err = Ralph::builder()
        .workspace(dir.path())
        .agent(FakeAgent::new())
        .build()
        .unwrap_err();
    assert!(matches!(err, BuildError::Workspace { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(own), "{message}");
    assert!(message.contains("link out of the workspace"), "{message}");
}

#[tokio::test]
async fn two_ralphs_on_one_workspace_are_refused_while_one_runs() {
    let dir = workspace(SPEC);
    let first = Ralph::builder()
        .workspace(dir.path())
        .agent(one_task().on(Role::Build, "t-1", Script::new().hang()))
        .build()
        .unwrap();
    let stop = first.stop_token();
    let running = tokio::spawn(async move { first.construct("spec.md").await });
    let lock = dir.path().join(".ralph/ralph.lock");
    while !std::fs::read_to_string(&lock).is_ok_and(|t| t.contains("pid")) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Building is free: it writes nothing and locks nothing.
    let second = Ralph::builder()
        .workspace(dir.path())
        .agent(FakeAgent::new())
        .build()
        .unwrap();

    let err = second.construct("spec.md").await.unwrap_err();

    assert!(matches!(err, Error::Busy { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("is locked by another ralph process (pid "),
        "{message}"
    );
    assert!(message.contains("ralph.lock"), "{message}");
    stop.stop();
    assert_eq!(running.await.unwrap().unwrap(), Outcome::Interrupted);
    assert!(second.dry_run("spec.md").await.is_ok());
}

/// Audit rows 13 and 83: a deleted lock file let a second ralph in, whose sweep killed
/// the first run's agent. The workspace is held through its folder: the second is refused
/// all the same, and the first puts its note back.
#[tokio::test]
async fn a_deleted_lock_file_lets_no_second_ralph_in() {
    let dir = workspace(SPEC);
    let events = Recorder::default();
    let first = Ralph::builder()
        .workspace(dir.path())
        .agent(
            one_task()
                .on(
                    Role::Build,
                    "t-1",
                    Script::new().delay(Duration::from_secs(2)),
                )
                .on(Role::Build, "t-1", Script::new().hang()),
        )
        .observer(events.clone())
        .build()
        .unwrap();
    let stop = first.stop_token();
    let running = tokio::spawn(async move { first.construct("spec.md").await });
    let lock = dir.path().join(".ralph/ralph.lock");
    while !std::fs::read_to_string(&lock).is_ok_and(|t| t.contains("pid")) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    std::fs::remove_file(&lock).unwrap();

    let second = Ralph::builder()
        .workspace(dir.path())
        .agent(FakeAgent::new())
        .build()
        .unwrap();
    let err = second.construct("spec.md").await.unwrap_err();
    assert!(matches!(err, Error::Busy { .. }), "{err:?}");

    // The first run notices before its next stage or attempt, whichever comes first, and
    // puts the note back.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !lock.exists() {
        assert!(std::time::Instant::now() < deadline, "the note is put back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.stop();
    assert_eq!(running.await.unwrap().unwrap(), Outcome::Interrupted);
    let said = events.warnings();
    assert!(
        said.iter().any(|w| w["message"]
            .as_str()
            .unwrap_or("")
            .contains("deleted or replaced")),
        "{said:?}"
    );
}

#[tokio::test]
async fn ralph_persists_what_it_needs_to_resume_in_the_seed_format() {
    let dir = workspace(SPEC);
    let agent = Arc::new(one_task().on(Role::Build, "t-1", writes_done()));
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(agent.clone())
        .gate(done_gate())
        .stage_timeout(Duration::from_secs(90))
        .build()
        .unwrap();
    assert_eq!(ralph.construct("spec.md").await.unwrap().exit_code(), 0);
    drop(ralph);
    let text = std::fs::read_to_string(plan_file(dir.path())).unwrap();
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let config = if first["t"] == "batch" {
        serde_json::from_str::<serde_json::Value>(text.lines().nth(1).unwrap()).unwrap()
    } else {
        first
    };
    assert_eq!(config["t"], "config");
    assert_eq!(config["timeout_ms"], 90_000);
    assert_eq!(config["max_iterations"], 10);
    let board = open_unlocked(dir.path()).load().await.unwrap();
    assert_eq!(board.run.spec.as_deref(), Some("spec.md"));
    assert_eq!(board.task("t-1").unwrap().status, TaskStatus::Accepted);
}

/// The note deleted during an attempt (here by the agent itself, as an unconfined one
/// could) is back before the next attempt starts, not only at the next stage: the task's
/// second attempt hangs, so only the check between attempts can put it back.
#[tokio::test]
async fn a_lock_note_deleted_during_an_attempt_is_back_before_the_next() {
    let dir = workspace(SPEC);
    let events = Recorder::default();
    let first = Ralph::builder()
        .workspace(dir.path())
        .agent(
            one_task()
                .on(
                    Role::Build,
                    "t-1",
                    Script::new().remove(".ralph/ralph.lock"),
                )
                .on(Role::Build, "t-1", Script::new().hang()),
        )
        .observer(events.clone())
        .build()
        .unwrap();
    let stop = first.stop_token();
    let running = tokio::spawn(async move { first.construct("spec.md").await });
    let noticed = || events.warned("deleted or replaced");
    let back = crate::support::lock_note_back(dir.path(), noticed, &stop).await;
    assert!(back, "the note is back");
    assert_eq!(running.await.unwrap().unwrap(), Outcome::Interrupted);
}
