//! A thread's iterations ride out rate limits and transient failures: a rate limit is
//! waited out (cancellable, visible in the record, never an iteration), a transient
//! failure backs off before the same iteration is tried again.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::support::threads::{SPEC, finalized, no_claim, repo, writes};
use async_trait::async_trait;
use ralph::Ralph;
use ralph::agent::{
    Agent, AgentError, AgentExit, AgentRequest, AgentRun, FailureKind, FakeAgent, Role, Script,
};
use ralph::thread::{Phase, PhaseKind};
use ralph::thread::{RunConfig, ThreadRecord, Threads};
use serde_json::json;

/// `inner`, but rate limited for `reset` (when given) on its first run; records the
/// iteration and start time of every run.
struct Recorded {
    reset: Option<Duration>,
    inner: FakeAgent,
    runs: Mutex<Vec<(u32, Instant)>>,
}

impl Recorded {
    fn new(reset: Option<Duration>, inner: FakeAgent) -> Arc<Self> {
        Arc::new(Recorded {
            reset,
            inner,
            runs: Mutex::new(Vec::new()),
        })
    }

    fn iterations(&self) -> Vec<u32> {
        self.runs.lock().unwrap().iter().map(|r| r.0).collect()
    }

    /// The time between the starts of consecutive runs.
    fn gaps(&self) -> Vec<Duration> {
        let runs = self.runs.lock().unwrap();
        runs.windows(2).map(|w| w[1].1 - w[0].1).collect()
    }
}

#[async_trait]
impl Agent for Recorded {
    async fn run(&self, request: AgentRequest) -> Result<AgentRun, AgentError> {
        let first = {
            let mut runs = self.runs.lock().unwrap();
            runs.push((request.attempt, Instant::now()));
            runs.len() == 1
        };
        if let (true, Some(reset)) = (first, self.reset) {
            let until = SystemTime::now() + reset;
            return Ok(AgentRun::new(AgentExit::RateLimited { until }));
        }
        self.inner.run(request).await
    }
}

fn transient(reason: &str) -> Script {
    Script::new().fail_with(reason, FailureKind::Transient)
}

/// Threads over `dir` running `agent`, quick, at most 3 iterations, `retries` transient
/// failures ridden out with a first backoff of `backoff` (the workspace's
/// `transient_backoff`, as every mode has it).
fn quick(
    dir: &std::path::Path,
    agent: impl Agent + 'static,
    (retries, backoff): (u32, Duration),
) -> Threads {
    Ralph::builder()
        .workspace(dir)
        .agent(agent)
        .config(
            "transient_backoff",
            humantime::format_duration(backoff).to_string(),
        )
        .build()
        .unwrap()
        .threads()
        .quick(true)
        .run_config(
            RunConfig::default()
                .max_iterations(3)
                .transient_retries(retries),
        )
}

fn options(retries: u32, backoff: Duration) -> (u32, Duration) {
    (retries, backoff)
}

fn run_json(threads: &Threads, run_id: &str) -> String {
    std::fs::read_to_string(threads.run_dir(run_id).join("run.json")).unwrap()
}

/// Polls the stored record of `id` until `ready` holds for it.
async fn wait_for(threads: &Threads, id: &str, ready: impl Fn(&ThreadRecord) -> bool) {
    loop {
        if threads.get(id).is_ok_and(|r| ready(&r)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_rate_limit_is_waited_out_and_the_same_iteration_runs_again() {
    let dir = repo().await;
    let agent = Recorded::new(
        Some(Duration::from_millis(200)),
        FakeAgent::new().then(no_claim()).then(writes("hello\n")),
    );
    let threads = quick(dir.path(), Arc::clone(&agent), options(2, Duration::ZERO));
    let id = finalized(&threads, SPEC);
    let thread = threads.thread(&id).start().await.unwrap();
    assert!(agent.gaps()[0] >= Duration::from_millis(100), "it waited");

    assert_eq!(thread.phase.kind(), PhaseKind::PendingReview);
    // Iteration 1 rate limited, iteration 1 again, then iteration 2: the wait moved nothing.
    assert_eq!(agent.iterations(), [1, 1, 2]);
    let iterations: Vec<u32> = thread.attempts.iter().map(|a| a.iteration).collect();
    assert_eq!(iterations, [1, 2], "the rate-limited run is not an attempt");
    let first = run_json(&threads, &format!("{id}-r1"));
    assert!(first.contains("rate limited: resets at"), "{first}");
    assert_eq!(thread.rate_limited_until, None);
    assert_eq!(thread.transient_failures, 0);
}

#[tokio::test]
async fn ctrl_c_during_a_rate_limit_wait_pauses_at_the_same_iteration_and_resume_continues() {
    let dir = repo().await;
    let agent = Arc::new(
        FakeAgent::new()
            .then(no_claim())
            .then(Script::new().rate_limit(3600)),
    );
    let threads = quick(dir.path(), Arc::clone(&agent), options(2, Duration::ZERO));
    let id = finalized(&threads, SPEC);
    let stop = threads.stop_token();
    let interrupter = async {
        // The wait shows in the stored record while it lasts.
        wait_for(&threads, &id, |r| r.rate_limited_until.is_some()).await;
        stop.stop();
    };
    // A hang guard (the wait is an hour), not a timing assertion.
    let (thread, ()) = tokio::time::timeout(Duration::from_secs(120), async {
        let handle = threads.thread(&id);
        tokio::join!(handle.start(), interrupter)
    })
    .await
    .expect("the stop token ends the rate-limit wait");
    let thread = thread.unwrap();
    assert_eq!(
        thread.phase,
        Phase::Paused {
            iteration: 2,
            criteria_passing: 0,
            criteria_total: 2
        }
    );
    assert_eq!(thread.rate_limited_until, None);
    assert_eq!(threads.get(&id).unwrap(), thread, "saved before returning");
    assert!(run_json(&threads, &format!("{id}-r2")).contains("rate limited"));

    // A new process resumes the same iteration.
    let agent = Arc::new(FakeAgent::new().then(writes("hello\n")));
    let threads = quick(dir.path(), Arc::clone(&agent), options(2, Duration::ZERO));
    let thread = threads.thread(&id).resume().await.unwrap();
    assert_eq!(thread.phase.kind(), PhaseKind::PendingReview);
    let tries: Vec<u32> = agent.requests().iter().map(|r| r.attempt).collect();
    assert_eq!(tries, [2]);
}

#[tokio::test]
async fn transient_failures_back_off_then_the_same_iteration_runs_again() {
    let dir = repo().await;
    let agent = Recorded::new(
        None,
        FakeAgent::new()
            .then(transient("overloaded (529)"))
            .then(transient("overloaded (529)"))
            .then(writes("hello\n")),
    );
    let threads = quick(
        dir.path(),
        Arc::clone(&agent),
        options(2, Duration::from_millis(100)),
    );
    let id = finalized(&threads, SPEC);
    let thread = threads.thread(&id).start().await.unwrap();
    assert_eq!(thread.phase.kind(), PhaseKind::PendingReview);
    assert_eq!(agent.iterations(), [1, 1, 1]);
    // 100 ms, then doubled to 200 ms.
    let gaps = agent.gaps();
    assert!(gaps[0] >= Duration::from_millis(100), "{gaps:?}");
    assert!(gaps[1] >= Duration::from_millis(200), "{gaps:?}");
    assert!(run_json(&threads, &format!("{id}-r1")).contains("failed (transient)"));
}

#[tokio::test]
async fn ctrl_c_during_a_backoff_pauses_at_the_same_iteration() {
    let dir = repo().await;
    let agent = Arc::new(
        FakeAgent::new()
            .then(transient("overloaded (529)"))
            .then(writes("hello\n")),
    );
    let threads = quick(
        dir.path(),
        Arc::clone(&agent),
        options(2, Duration::from_secs(60)),
    );
    let id = finalized(&threads, SPEC);
    let stop = threads.stop_token();
    let interrupter = async {
        wait_for(&threads, &id, |r| r.transient_failures == 1).await;
        // Without a backoff the next try would start at once.
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop.stop();
    };
    let (thread, ()) = tokio::time::timeout(Duration::from_secs(120), async {
        let handle = threads.thread(&id);
        tokio::join!(handle.start(), interrupter)
    })
    .await
    .expect("the stop token ends the backoff");
    let thread = thread.unwrap();
    assert_eq!(thread.phase.kind(), PhaseKind::Paused);
    assert!(matches!(thread.phase, Phase::Paused { iteration: 1, .. }));
    assert_eq!(agent.requests().len(), 1);
}

#[tokio::test]
async fn a_rate_limit_does_not_count_as_a_transient_failure() {
    let dir = repo().await;
    // One retry allowed: were the rate limit a failure, the second failure in a row would
    // end the iteration as failed.
    let agent = Arc::new(
        FakeAgent::new()
            .then(transient("overloaded (529)"))
            .then(Script::new().rate_limit(0))
            .then(writes("hello\n")),
    );
    let threads = quick(
        dir.path(),
        Arc::clone(&agent),
        options(1, Duration::from_millis(1)),
    );
    let id = finalized(&threads, SPEC);
    let thread = threads.thread(&id).start().await.unwrap();
    assert_eq!(thread.phase.kind(), PhaseKind::PendingReview);
    let tries: Vec<u32> = agent.requests().iter().map(|r| r.attempt).collect();
    assert_eq!(tries, [1, 1, 1]);
    assert_eq!(thread.attempts.len(), 1, "{:?}", thread.attempts);
}

/// Transient failures past the retries end the iteration as failed (as a task's attempt
/// in the other modes); the next iteration runs.
#[tokio::test]
async fn transient_failures_past_the_retries_fail_the_iteration_and_the_loop_goes_on() {
    let dir = repo().await;
    let agent = Arc::new(
        FakeAgent::new()
            .then(transient("overloaded (529)"))
            .then(transient("overloaded (529)"))
            .then(writes("hello\n")),
    );
    let threads = quick(
        dir.path(),
        Arc::clone(&agent),
        options(1, Duration::from_millis(1)),
    );
    let id = finalized(&threads, SPEC);
    let thread = threads.thread(&id).start().await.unwrap();
    assert_eq!(thread.phase.kind(), PhaseKind::PendingReview);
    let tries: Vec<u32> = agent.requests().iter().map(|r| r.attempt).collect();
    assert_eq!(tries, [1, 1, 2]);
    assert!(
        thread.attempts[0]
            .summary
            .contains("overloaded (529) (still failing after 1 retries)"),
        "{:?}",
        thread.attempts
    );
}

#[tokio::test]
async fn a_rate_limited_verifier_is_asked_again_once_the_limit_resets() {
    let dir = repo().await;
    let spec = format!("{SPEC}- [ ] the greeting is friendly\n");
    let agent = Arc::new(
        FakeAgent::new()
            .then(writes("hello\n"))
            .then(Script::new().rate_limit(0))
            .then(Script::new().json(json!({"verdict": "accept", "reason": "friendly"}))),
    );
    let threads = quick(dir.path(), Arc::clone(&agent), options(2, Duration::ZERO));
    let id = finalized(&threads, &spec);
    let thread = threads.thread(&id).start().await.unwrap();
    assert_eq!(thread.phase.kind(), PhaseKind::PendingReview);
    let calls: Vec<(Role, u32)> = agent
        .requests()
        .iter()
        .map(|r| (r.role, r.attempt))
        .collect();
    assert_eq!(
        calls,
        [(Role::Build, 1), (Role::Verify, 1), (Role::Verify, 1)]
    );
    assert_eq!(thread.attempts.len(), 1);
    assert!(
        thread.attempts[0].failed.is_empty(),
        "{:?}",
        thread.attempts
    );
    assert!(run_json(&threads, &format!("{id}-r2")).contains("rate limited"));
}
