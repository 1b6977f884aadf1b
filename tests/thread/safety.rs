//! Git and process safety of threads: the workspace lock (`.ralph/ralph.lock`) between
//! two handles, a detached-HEAD baseline on revise, and what abandon keeps.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use crate::support::threads::{SPEC, finalized, repo, threads, writes};
use ralph::agent::{FakeAgent, Script};
use ralph::thread::{Phase, PhaseKind};
use ralph::thread::{ThreadError, Threads};
use ralph_loop_core::git::Git;
use rstest::rstest;

/// Waits until run `run_id` of `threads` has started (its log exists).
async fn started(threads: &Threads, run_id: &str) {
    let log = threads.run_dir(run_id).join("output.log");
    while !log.exists() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_second_handle_cannot_run_start_or_abandon_while_a_loop_runs() {
    let dir = repo().await;
    let first_agent = Arc::new(FakeAgent::new().then(Script::new().hang()));
    let first = threads(dir.path(), &first_agent, false, 3);
    // Two threads ready to run, configured before either runs.
    let a = finalized(&first, SPEC);
    let b = first.create("Second", SPEC).unwrap().id;
    first.thread(&b).finalize().unwrap();
    assert_eq!(
        first.thread(&a).start().await.unwrap().phase,
        Phase::Configuring
    );
    assert_eq!(
        first.thread(&b).start().await.unwrap().phase,
        Phase::Configuring
    );
    let c = first.create("Third", SPEC).unwrap().id;
    first.thread(&c).finalize().unwrap();

    // Another handle on the same workspace: what another process would hold.
    let second_agent = Arc::new(FakeAgent::new().then(writes("hello\n")));
    let second = threads(dir.path(), &second_agent, false, 3);
    let stop = first.stop_token();
    let contender = async {
        started(&first, &format!("{a}-r1")).await;
        // Configuring → Running of another thread: refused, naming who runs.
        let busy = second.thread(&b).run().await.unwrap_err();
        // Finalized → Preflight: the conflict is a preflight failure.
        let failed = second.thread(&c).start().await.unwrap();
        // Abandoning the running thread would be undone by its loop's next save.
        let abandon = second.thread(&a).abandon().await.unwrap_err();
        stop.stop();
        (busy, failed, abandon)
    };
    let handle = first.thread(&a);
    let (paused, (busy, failed, abandon)) = tokio::join!(handle.run(), contender);
    let pid = std::process::id();
    let holder = format!("thread {a} is Running in process {pid}");
    assert!(matches!(busy, ThreadError::Busy { .. }), "{busy:?}");
    assert!(
        busy.to_string().contains(&holder) && busy.to_string().contains("ralph.lock"),
        "{busy}"
    );
    assert_eq!(second.get(&b).unwrap().phase, Phase::Configuring);
    let Phase::PreflightFailed { failures } = &failed.phase else {
        panic!("{:?}", failed.phase)
    };
    assert!(
        failures[0].contains(&holder) && failures[0].contains("ralph.lock"),
        "{failures:?}"
    );
    assert!(abandon.to_string().contains(&holder), "{abandon}");
    assert!(second_agent.requests().is_empty(), "B never ran");

    // Paused, the lock is free again: C retries preflight and passes, B runs.
    assert_eq!(paused.unwrap().phase.kind(), PhaseKind::Paused);
    assert_eq!(
        second.thread(&c).start().await.unwrap().phase.kind(),
        PhaseKind::Configuring
    );
    assert_eq!(
        second.thread(&b).run().await.unwrap().phase.kind(),
        PhaseKind::Implemented
    );
    assert_eq!(
        second.thread(&a).abandon().await.unwrap().phase,
        Phase::Abandoned
    );
}

#[tokio::test]
async fn revise_with_a_detached_baseline_deletes_the_branch_and_stays_detached() {
    let dir = repo().await;
    let git = Git::new(dir.path());
    let base = git.head().await.unwrap().unwrap();
    git.detach(&base).await.unwrap();
    assert_eq!(git.current_branch().await.unwrap(), None);
    let agent = Arc::new(FakeAgent::new().then(writes("goodbye\n")));
    let threads = threads(dir.path(), &agent, true, 1);
    let id = finalized(&threads, SPEC);
    let stuck = threads.thread(&id).start().await.unwrap();
    assert_eq!(stuck.phase.kind(), PhaseKind::Stuck);
    assert_eq!(
        (stuck.baseline_branch(), stuck.baseline_commit()),
        (None, Some(base.as_str()))
    );
    let branch = format!("ralph/{id}");
    assert_eq!(
        git.current_branch().await.unwrap().as_deref(),
        Some(branch.as_str())
    );

    let revised = threads.thread(&id).revise(None).await.unwrap();
    assert_eq!(revised.phase, Phase::Drafting);
    assert!(!git.branch_exists(&branch).await.unwrap(), "branch deleted");
    assert_eq!(git.current_branch().await.unwrap(), None, "detached");
    assert_eq!(git.head().await.unwrap(), Some(base));
    assert!(!dir.path().join("hello.txt").exists());
}

#[tokio::test]
async fn abandon_deletes_nothing_and_stays_on_the_branch_with_uncommitted_changes() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new().then(writes("goodbye\n")));
    let threads = threads(dir.path(), &agent, true, 1);
    let id = finalized(&threads, SPEC);
    assert_eq!(
        threads.thread(&id).start().await.unwrap().phase.kind(),
        PhaseKind::Stuck
    );
    let abandoned = threads.thread(&id).abandon().await.unwrap();
    assert_eq!(abandoned.phase, Phase::Abandoned);
    let git = Git::new(dir.path());
    let branch = format!("ralph/{id}");
    assert_eq!(
        git.current_branch().await.unwrap().as_deref(),
        Some(branch.as_str()),
        "switching would carry the changes along"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(),
        "goodbye\n"
    );
    assert!(threads.spec_path(&id, 1).exists());
    assert!(
        threads
            .run_dir(&format!("{id}-r1"))
            .join("run.json")
            .exists()
    );
    // Terminal: nothing leaves Abandoned.
    let err = threads.thread(&id).abandon().await.unwrap_err();
    assert!(
        err.to_string().contains("from Abandoned to Abandoned"),
        "{err}"
    );
}

#[tokio::test]
async fn abandon_with_a_clean_tree_returns_to_the_baseline_branch_and_keeps_the_threads() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new().then(writes("goodbye\n")));
    let threads = threads(dir.path(), &agent, true, 1);
    let id = finalized(&threads, SPEC);
    threads.thread(&id).start().await.unwrap();
    // The person keeps the attempt as a commit on the thread's branch, then gives up.
    let git = Git::new(dir.path());
    let kept = git
        .commit_all("keep the attempt", &[".ralph"])
        .await
        .unwrap()
        .unwrap();
    threads.thread(&id).abandon().await.unwrap();
    assert_eq!(git.current_branch().await.unwrap().as_deref(), Some("main"));
    assert!(!dir.path().join("hello.txt").exists());
    let branch = format!("ralph/{id}");
    assert!(git.branch_exists(&branch).await.unwrap(), "branch kept");
    git.switch(&branch).await.unwrap();
    assert_eq!(git.head().await.unwrap(), Some(kept));
}

/// Every non-terminal phase, as `thread.json` stores it.
#[rstest]
#[case::drafting(r#"{"type": "Drafting"}"#)]
#[case::assessing(r#"{"type": "Assessing"}"#)]
#[case::finalized(r#"{"type": "Finalized"}"#)]
#[case::preflight(r#"{"type": "Preflight"}"#)]
#[case::preflight_failed(r#"{"type": "PreflightFailed", "data": {"failures": ["x"]}}"#)]
#[case::configuring(r#"{"type": "Configuring"}"#)]
#[case::running(r#"{"type": "Running", "data": {"iteration": 2}}"#)]
#[case::paused(
    r#"{"type": "Paused", "data": {"iteration": 2, "criteria_passing": 1, "criteria_total": 2}}"#
)]
#[case::verifying(r#"{"type": "Verifying", "data": {"iteration": 2}}"#)]
#[case::stuck(r#"{"type": "Stuck", "data": {"reason": "x"}}"#)]
#[case::implemented(r#"{"type": "Implemented"}"#)]
#[case::polishing(r#"{"type": "Polishing"}"#)]
#[case::pending_review(r#"{"type": "PendingReview", "data": {"recommend_approve": true}}"#)]
#[case::approved(r#"{"type": "Approved"}"#)]
#[case::ready_to_commit(r#"{"type": "ReadyToCommit", "data": {"message": "m"}}"#)]
#[tokio::test]
async fn every_non_terminal_phase_can_be_abandoned_through_the_api(#[case] phase: &str) {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new());
    let threads = threads(dir.path(), &agent, false, 3);
    let id = threads.create("Greeter", SPEC).unwrap().id;
    let path = threads
        .state_dir()
        .join("threads")
        .join(&id)
        .join("thread.json");
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace(
            r#""phase": {"type": "Drafting"}"#,
            &format!(r#""phase": {phase}"#),
        )
        .replace(
            "\"phase\": {\n    \"type\": \"Drafting\"\n  }",
            &format!(r#""phase": {phase}"#),
        );
    crate::support::threads::hand_edit(&threads, &path, &text).await;
    assert_ne!(
        threads.get(&id).unwrap().phase.kind() == PhaseKind::Drafting,
        phase != r#"{"type": "Drafting"}"#,
        "the phase was written"
    );
    assert_eq!(
        threads.thread(&id).abandon().await.unwrap().phase,
        Phase::Abandoned
    );
    assert_eq!(threads.get(&id).unwrap().phase, Phase::Abandoned);
}
