//! Seed 001's Running → Stuck "all models exhausted": a thread's models are one
//! `agent::Fallback` chain, whose next agent takes a run the one before cannot make (down,
//! rate limited, failing transiently); the thread is Stuck only when none is left. The
//! record keeps which agent runs and why. Configuring sets the models and the verifier.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use crate::support::threads::{SPEC, finalized, repo, writes};
use ralph::Ralph;
use ralph::agent::{FailureKind, FakeAgent, Role, Script};
use ralph::thread::{Phase, PhaseKind};
use ralph::thread::{RunConfig, ThreadError, Threads};

fn fatal(reason: &str) -> Script {
    Script::new().fail_with(reason, FailureKind::Fatal)
}

/// Threads whose default agent is never used: the loop runs `first`, then `second`, one
/// fallback chain; transient failures back off 1 ms.
fn chain(
    dir: &std::path::Path,
    first: &Arc<FakeAgent>,
    second: &Arc<FakeAgent>,
    quick: bool,
) -> Threads {
    Ralph::builder()
        .workspace(dir)
        .agent(FakeAgent::new())
        .config("transient_backoff", "1ms")
        .build()
        .unwrap()
        .threads()
        .agent("first", Arc::clone(first))
        .agent("second", Arc::clone(second))
        .quick(quick)
        .run_config(
            RunConfig::default()
                .max_iterations(3)
                .agents(["first", "second"]),
        )
}

#[tokio::test]
async fn a_fatal_failure_hands_the_same_iteration_to_the_next_agent() {
    let dir = repo().await;
    let first = Arc::new(FakeAgent::new().then(fatal("invalid API key")));
    let second = Arc::new(FakeAgent::new().then(writes("hello\n")));
    let threads = chain(dir.path(), &first, &second, true);
    let id = finalized(&threads, SPEC);
    let thread = threads.thread(&id).start().await.unwrap();
    assert_eq!(
        thread.phase,
        Phase::PendingReview {
            recommend_approve: true
        }
    );
    assert_eq!(first.requests().len(), 1);
    let taken_over: Vec<u32> = second.requests().iter().map(|r| r.attempt).collect();
    assert_eq!(taken_over, [1], "iteration 1 again, not counted as tried");
    // The record says which agent runs, and why: for `status` and `show`.
    assert_eq!(thread.current_agent.as_deref(), Some("second"));
    let why = thread.agent_reason.as_deref().unwrap();
    assert!(
        why.contains("first is unavailable") && why.contains("invalid API key"),
        "{why}"
    );
}

#[tokio::test]
async fn stuck_only_when_all_agents_are_exhausted_and_the_report_says_so() {
    let dir = repo().await;
    let first = Arc::new(FakeAgent::new().then(fatal("invalid API key")));
    let second = Arc::new(FakeAgent::new().then(fatal("model not found")));
    let threads = chain(dir.path(), &first, &second, true);
    let id = finalized(&threads, SPEC);
    let thread = threads.thread(&id).start().await.unwrap();
    let Phase::Stuck { reason } = &thread.phase else {
        panic!("{:?}", thread.phase)
    };
    assert!(
        reason.starts_with("Stopped: all agents exhausted (first is unavailable (")
            && reason.contains("invalid API key")
            && reason.contains("; second: model not found)"),
        "{reason}"
    );
    assert_eq!(&threads.thread(&id).diagnose().unwrap().reason, reason);

    // A new round (manual assist, reconfigure) starts with the first agent again.
    let first_again = Arc::new(FakeAgent::new().then(writes("hello\n")));
    let threads = chain(dir.path(), &first_again, &second, false);
    let thread = threads.thread(&id).manual_assist().await.unwrap();
    // Made in quick mode, the thread stays quick: on to review, past Implemented.
    assert!(
        matches!(thread.phase, Phase::PendingReview { .. }),
        "{:?}",
        thread.phase
    );
    assert_eq!(first_again.requests().len(), 1);
    assert_eq!(thread.current_agent.as_deref(), Some("first"));
    assert_eq!(thread.agent_reason, None);
}

/// `agent::Fallback`'s rule, in threads too: a transient failure (an API error that
/// outlasted the CLI's own retries) passes that run to the next agent at once.
#[tokio::test]
async fn a_transient_failure_passes_the_run_to_the_next_agent() {
    let dir = repo().await;
    let first = Arc::new(FakeAgent::new().always(
        Role::Build,
        Script::new().fail_with("overloaded (529)", FailureKind::Transient),
    ));
    let second = Arc::new(FakeAgent::new().then(writes("hello\n")));
    let threads = chain(dir.path(), &first, &second, true);
    let id = finalized(&threads, SPEC);
    let thread = threads.thread(&id).start().await.unwrap();
    assert_eq!(thread.phase.kind(), PhaseKind::PendingReview);
    assert_eq!(first.requests().len(), 1);
    assert_eq!(second.requests()[0].attempt, 1);
    let why = thread.agent_reason.as_deref().unwrap();
    assert!(why.contains("first failed (overloaded (529))"), "{why}");
}

/// A rate-limited model rests until its reset while the next takes the run; once the
/// reset passed it takes the next iteration again, and the record says why.
#[tokio::test]
async fn a_rate_limited_model_rests_and_takes_the_run_again_once_its_limit_resets() {
    let dir = repo().await;
    let first = Arc::new(
        FakeAgent::new()
            .then(Script::new().rate_limit(0))
            .then(writes("hello\n")),
    );
    let second = Arc::new(FakeAgent::new().then(Script::new().answer("Looked around.")));
    let threads = chain(dir.path(), &first, &second, true);
    let id = finalized(&threads, SPEC);
    let thread = threads.thread(&id).start().await.unwrap();
    assert_eq!(thread.phase.kind(), PhaseKind::PendingReview);
    let by: Vec<(&str, u32)> = first
        .requests()
        .iter()
        .map(|r| ("first", r.attempt))
        .chain(second.requests().iter().map(|r| ("second", r.attempt)))
        .collect();
    assert_eq!(by, [("first", 1), ("first", 2), ("second", 1)]);
    assert_eq!(thread.current_agent.as_deref(), Some("first"));
    let why = thread.agent_reason.as_deref().unwrap();
    assert!(why.contains("its rate limit reset at"), "{why}");
}

/// Configuring sets the verifier apart from the models: the criteria without a command
/// are judged by it, read-only, and the models only build.
#[tokio::test]
async fn a_configured_verifier_judges_the_criteria_the_models_build() {
    let dir = repo().await;
    let spec = format!("{SPEC}- [ ] the greeting is friendly\n");
    let builder = Arc::new(FakeAgent::new().then(writes("hello\n")));
    let judge =
        Arc::new(FakeAgent::new().then(
            Script::new().json(serde_json::json!({"verdict": "accept", "reason": "friendly"})),
        ));
    let threads = Threads::new(dir.path(), FakeAgent::new())
        .unwrap()
        .agent("builder", Arc::clone(&builder))
        .agent("judge", Arc::clone(&judge));
    let id = finalized(&threads, &spec);
    assert_eq!(
        threads.thread(&id).start().await.unwrap().phase,
        Phase::Configuring
    );
    let refused = threads
        .thread(&id)
        .configure(RunConfig::default().verifier("nobody"))
        .unwrap_err();
    assert!(
        refused.to_string().contains(r#"no agent named "nobody""#),
        "{refused}"
    );
    let settings = RunConfig::default()
        .max_iterations(2)
        .agents(["builder"])
        .verifier("judge");
    threads.thread(&id).configure(settings.clone()).unwrap();
    let thread = threads.thread(&id).run().await.unwrap();
    assert_eq!(thread.phase, Phase::Implemented);
    assert_eq!(thread.config, settings, "kept in the thread");
    let roles = |agent: &FakeAgent| agent.requests().iter().map(|r| r.role).collect::<Vec<_>>();
    assert_eq!(roles(&builder), [Role::Build]);
    assert_eq!(roles(&judge), [Role::Verify]);
}

#[tokio::test]
async fn a_single_default_agent_failing_fatally_is_stuck_as_exhausted() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new().then(fatal("not logged in")));
    let threads = crate::support::threads::threads(dir.path(), &agent, true, 3);
    let id = finalized(&threads, SPEC);
    let thread = threads.thread(&id).start().await.unwrap();
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
        .run_config(RunConfig::default().agents(["first", "nope"]));
    let id = finalized(&threads, SPEC);
    let thread = threads.thread(&id).start().await.unwrap();
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
        threads.thread(&other).start().await.unwrap().phase,
        Phase::Configuring
    );
    let err = threads
        .thread(&other)
        .configure(RunConfig::default().agents(["nope"]))
        .unwrap_err();
    assert!(matches!(err, ThreadError::Config { .. }), "{err:?}");
    assert!(
        err.to_string().contains(r#"no agent named "nope""#),
        "{err}"
    );
}
