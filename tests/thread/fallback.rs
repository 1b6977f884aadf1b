//! Seed 001's Running → Stuck "all models exhausted": the loop falls back on the next
//! configured agent after a fatal or repeatedly transient failure, and is Stuck only when
//! every one is exhausted.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use crate::support::threads::{SPEC, finalized, repo, writes};
use ralph::agent::{FailureKind, FakeAgent, Role, Script};
use ralph::thread::{Phase, PhaseKind};
use ralph::thread::{RunConfig, ThreadError, ThreadOptions, Threads};

fn fatal(reason: &str) -> Script {
    Script::new().fail_with(reason, FailureKind::Fatal)
}

/// Threads whose default agent is never used: the loop runs `first`, then `second`.
fn chain(
    dir: &std::path::Path,
    first: &Arc<FakeAgent>,
    second: &Arc<FakeAgent>,
    quick: bool,
) -> Threads {
    Threads::new(dir, FakeAgent::new())
        .unwrap()
        .agent("first", Arc::clone(first))
        .agent("second", Arc::clone(second))
        .options(
            ThreadOptions::default()
                .quick(quick)
                .transient_backoff(std::time::Duration::from_millis(1))
                .config(
                    RunConfig::default()
                        .max_iterations(3)
                        .agents(["first", "second"]),
                ),
        )
}

#[tokio::test]
async fn a_fatal_failure_hands_the_same_iteration_to_the_next_agent() {
    let dir = repo().await;
    let first = Arc::new(FakeAgent::new().then(fatal("invalid API key")));
    let second = Arc::new(FakeAgent::new().then(writes("hello\n")));
    let threads = chain(dir.path(), &first, &second, true);
    let id = finalized(&threads, SPEC);
    let thread = threads.start(&id).await.unwrap();
    assert_eq!(
        thread.phase,
        Phase::PendingReview {
            recommend_approve: true
        }
    );
    assert_eq!(first.requests().len(), 1);
    let taken_over: Vec<u32> = second.requests().iter().map(|r| r.attempt).collect();
    assert_eq!(taken_over, [1], "iteration 1 again, not counted as tried");
    assert_eq!(thread.current_agent.as_deref(), Some("second"));
    assert_eq!(thread.exhausted.len(), 1);
    assert!(
        thread.exhausted[0].starts_with("first: ")
            && thread.exhausted[0].contains("invalid API key"),
        "{:?}",
        thread.exhausted
    );
}

#[tokio::test]
async fn stuck_only_when_all_agents_are_exhausted_and_the_report_says_so() {
    let dir = repo().await;
    let first = Arc::new(FakeAgent::new().then(fatal("invalid API key")));
    let second = Arc::new(FakeAgent::new().then(fatal("model not found")));
    let threads = chain(dir.path(), &first, &second, true);
    let id = finalized(&threads, SPEC);
    let thread = threads.start(&id).await.unwrap();
    let Phase::Stuck { reason } = &thread.phase else {
        panic!("{:?}", thread.phase)
    };
    assert!(
        reason.starts_with("Stopped: all agents exhausted (first: ")
            && reason.contains("invalid API key; second: ")
            && reason.contains("model not found"),
        "{reason}"
    );
    assert_eq!(&threads.diagnose(&id).unwrap().reason, reason);

    // A new round (manual assist, reconfigure) starts with the first agent again.
    let first_again = Arc::new(FakeAgent::new().then(writes("hello\n")));
    let threads = chain(dir.path(), &first_again, &second, false);
    let thread = threads.manual_assist(&id).await.unwrap();
    assert_eq!(thread.phase, Phase::Implemented);
    assert_eq!(first_again.requests().len(), 1);
    assert!(thread.exhausted.is_empty());
}

#[tokio::test]
async fn repeated_transient_failures_move_on_after_the_retries() {
    let dir = repo().await;
    let first = Arc::new(FakeAgent::new().always(
        Role::Build,
        Script::new().fail_with("overloaded (529)", FailureKind::Transient),
    ));
    let second = Arc::new(FakeAgent::new().then(writes("hello\n")));
    let threads = chain(dir.path(), &first, &second, true);
    let id = finalized(&threads, SPEC);
    let thread = threads.start(&id).await.unwrap();
    assert_eq!(thread.phase.kind(), PhaseKind::PendingReview);
    // Tried once and retried twice (transient_retries = 2), all as iteration 1.
    let tries: Vec<u32> = first.requests().iter().map(|r| r.attempt).collect();
    assert_eq!(tries, [1, 1, 1]);
    assert_eq!(second.requests()[0].attempt, 1);
    assert!(
        thread.exhausted[0].contains("overloaded (529) (3 transient failures in a row)"),
        "{:?}",
        thread.exhausted
    );
}

#[tokio::test]
async fn a_single_default_agent_failing_fatally_is_stuck_as_exhausted() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new().then(fatal("not logged in")));
    let threads = crate::support::threads::threads(dir.path(), &agent, true, 3);
    let id = finalized(&threads, SPEC);
    let thread = threads.start(&id).await.unwrap();
    let Phase::Stuck { reason } = &thread.phase else {
        panic!("{:?}", thread.phase)
    };
    assert!(
        reason.starts_with("Stopped: all agents exhausted (fake: ")
            && reason.contains("not logged in"),
        "{reason}"
    );
}

#[tokio::test]
async fn an_unknown_agent_name_fails_preflight_and_is_refused_by_configure() {
    let dir = repo().await;
    let threads = Threads::new(dir.path(), FakeAgent::new())
        .unwrap()
        .agent("first", FakeAgent::new())
        .options(ThreadOptions::default().config(RunConfig::default().agents(["first", "nope"])));
    let id = finalized(&threads, SPEC);
    let thread = threads.start(&id).await.unwrap();
    let Phase::PreflightFailed { failures } = &thread.phase else {
        panic!("{:?}", thread.phase)
    };
    assert_eq!(
        failures,
        &[r#"the loop's agents: no agent named "nope" (registered: first)"#]
    );

    // Methodically, the settings are checked when the person sets them.
    let threads = Threads::new(dir.path(), FakeAgent::new())
        .unwrap()
        .agent("first", FakeAgent::new());
    let other = finalized(&threads, SPEC);
    std::fs::remove_dir_all(threads.state_dir().join("threads").join(&id)).unwrap();
    assert_eq!(
        threads.start(&other).await.unwrap().phase,
        Phase::Configuring
    );
    let err = threads
        .configure(&other, RunConfig::default().agents(["nope"]))
        .unwrap_err();
    assert!(matches!(err, ThreadError::Config { .. }), "{err:?}");
    assert!(
        err.to_string().contains(r#"no agent named "nope""#),
        "{err}"
    );
}
