//! Every preflight failure with real git: each leaves the thread PreflightFailed with a
//! clear message, and retry / fix spec work from there.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use crate::support::threads::{SPEC, finalized, repo, threads};
use async_trait::async_trait;
use ralph::agent::{Agent, AgentError, AgentRequest, AgentRun, FakeAgent};
use ralph::thread::Threads;
use ralph::thread::{Phase, PhaseKind};
use ralph_loop_core::git::Git;

/// The failures of a thread that must be PreflightFailed.
fn failures(phase: &Phase) -> Vec<String> {
    match phase {
        Phase::PreflightFailed { failures } => failures.clone(),
        other => panic!("expected PreflightFailed, got {other:?}"),
    }
}

#[tokio::test]
async fn a_dirty_tree_fails_and_retry_passes_once_clean() {
    let dir = repo().await;
    std::fs::write(dir.path().join("README.md"), "# changed\n").unwrap();
    let agent = Arc::new(FakeAgent::new());
    let threads = threads(dir.path(), &agent, false, 3);
    let id = finalized(&threads, SPEC);
    let thread = threads.thread(&id).start().await.unwrap();
    let f = failures(&thread.phase);
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].contains("uncommitted changes (1 path(s): README.md)"),
        "{}",
        f[0]
    );
    // Retry after the person commits.
    Git::new(dir.path()).commit_all("wip", &[]).await.unwrap();
    let thread = threads.thread(&id).start().await.unwrap();
    assert_eq!(thread.phase, Phase::Configuring);
}

#[tokio::test]
async fn a_dirty_tree_on_the_threads_own_branch_is_fine_and_keeps_the_baseline() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new());
    let threads = threads(dir.path(), &agent, false, 3);
    // A spec with no promise yet, so the first preflight fails after capturing a baseline.
    let id = finalized(&threads, &SPEC.replace("<promise>SHIPPED</promise>", ""));
    let git = Git::new(dir.path());
    let head = git.head().await.unwrap().unwrap();
    git.create_branch(&format!("ralph/{id}"), &head)
        .await
        .unwrap();
    std::fs::write(dir.path().join("wip.txt"), "work in progress\n").unwrap();

    let failed = threads.thread(&id).start().await.unwrap();
    let f = failures(&failed.phase);
    assert_eq!(f.len(), 1, "only the spec fails, not the dirty tree: {f:?}");
    assert_eq!(failed.baseline_commit(), Some(head.as_str()));
    let baseline = (failed.baseline_branch(), failed.baseline_commit());

    // The person commits on the branch, fixes the spec and retries: same baseline.
    git.commit_all("wip", &[".ralph"]).await.unwrap();
    std::fs::write(dir.path().join("more.txt"), "more\n").unwrap();
    threads.thread(&id).fix_spec().unwrap();
    threads.thread(&id).edit_spec(SPEC).unwrap();
    threads.thread(&id).finalize().unwrap();
    let passed = threads.thread(&id).start().await.unwrap();
    assert_eq!(passed.phase, Phase::Configuring);
    assert_eq!(
        (passed.baseline_branch(), passed.baseline_commit()),
        baseline
    );
    assert_eq!(passed.branch, Some(format!("ralph/{id}")));
}

#[tokio::test]
async fn an_empty_repository_has_no_baseline() {
    let dir = tempfile::tempdir().unwrap();
    Git::new(dir.path()).init().await.unwrap();
    let agent = Arc::new(FakeAgent::new());
    let threads = threads(dir.path(), &agent, false, 3);
    let id = finalized(&threads, SPEC);
    let f = failures(&threads.thread(&id).start().await.unwrap().phase);
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].contains("no baseline to return to") && f[0].contains("has no commit yet"),
        "{}",
        f[0]
    );
}

#[tokio::test]
async fn a_directory_that_is_not_a_repository_fails() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Arc::new(FakeAgent::new());
    let threads = threads(dir.path(), &agent, false, 3);
    let id = finalized(&threads, SPEC);
    let f = failures(&threads.thread(&id).start().await.unwrap().phase);
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(f[0].contains("is not a git repository"), "{}", f[0]);
}

#[tokio::test]
async fn a_spec_without_a_promise_tag_fails_and_fix_spec_goes_back_to_drafting() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new());
    let threads = threads(dir.path(), &agent, false, 3);
    let id = finalized(&threads, &SPEC.replace("<promise>SHIPPED</promise>", ""));
    let f = failures(&threads.thread(&id).start().await.unwrap().phase);
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].starts_with("spec v1 (") && f[0].contains("no promise tag"),
        "{}",
        f[0]
    );
    assert_eq!(
        threads.thread(&id).fix_spec().unwrap().phase,
        Phase::Drafting
    );
    threads.thread(&id).edit_spec(SPEC).unwrap();
    threads.thread(&id).finalize().unwrap();
    assert_eq!(
        threads.thread(&id).start().await.unwrap().phase,
        Phase::Configuring
    );
}

#[tokio::test]
async fn unparseable_or_missing_criteria_fail() {
    for (spec, expected) in [
        (
            "# T\n<promise>OK</promise>\n## Acceptance Criteria\n- works somehow\n",
            "line 4: cannot parse acceptance criterion",
        ),
        (
            "# T\n<promise>OK</promise>\n## Acceptance Criteria\n\nNothing yet.\n",
            "line 3: the Acceptance Criteria section has no `- [ ]` items",
        ),
        (
            "# T\n<promise>OK</promise>\n",
            "no `## Acceptance Criteria` section",
        ),
    ] {
        let dir = repo().await;
        let agent = Arc::new(FakeAgent::new());
        let threads = threads(dir.path(), &agent, false, 3);
        let id = finalized(&threads, spec);
        let f = failures(&threads.thread(&id).start().await.unwrap().phase);
        assert!(f.len() == 1 && f[0].contains(expected), "{f:?}");
    }
}

/// An agent whose program is missing.
#[derive(Debug)]
struct Unavailable;

#[async_trait]
impl Agent for Unavailable {
    fn name(&self) -> &str {
        "claude"
    }
    async fn run(&self, _: AgentRequest) -> Result<AgentRun, AgentError> {
        unreachable!("never run when unavailable")
    }
    async fn check(&self) -> Result<(), AgentError> {
        Err(AgentError::NotFound {
            agent: "claude".into(),
            program: "claude".into(),
            from: "PATH".into(),
            help: "install it",
        })
    }
}

#[tokio::test]
async fn an_unavailable_agent_fails() {
    let dir = repo().await;
    let threads = Threads::new(dir.path(), Unavailable).unwrap();
    let id = finalized(&threads, SPEC);
    let f = failures(&threads.thread(&id).start().await.unwrap().phase);
    assert_eq!(
        f,
        [
            "the agent `claude` is not available: agent claude: claude (from PATH) was not found \
          or is not executable; install it"
        ]
    );
}

#[tokio::test]
async fn the_claude_cli_is_unavailable_when_its_binary_is_missing() {
    let missing = ralph::ClaudeCli::new().bin("/nonexistent/claude");
    let err = missing.check().await.unwrap_err();
    assert!(err.to_string().contains("/nonexistent/claude"), "{err}");
    let present = ralph::ClaudeCli::new().bin("/bin/sh");
    present.check().await.unwrap();
}

#[tokio::test]
async fn another_running_thread_fails() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new());
    let threads = threads(dir.path(), &agent, false, 3);
    let first = finalized(&threads, SPEC);
    threads.thread(&first).start().await.unwrap();
    // Simulate a loop running in another process: its thread.json says Running.
    let path = threads
        .state_dir()
        .join("threads")
        .join(&first)
        .join("thread.json");
    // Simulate a loop running in another (live) process: this test's own pid.
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace(
            r#""type": "Configuring""#,
            r#""type": "Running", "data": {"iteration": 1}"#,
        )
        .replace(
            r#""runner_pid": null"#,
            &format!(r#""runner_pid": {}"#, std::process::id()),
        );
    crate::support::threads::hand_edit(&threads, &path, &text).await;
    assert_eq!(
        threads.get(&first).unwrap().phase.kind(),
        PhaseKind::Running
    );

    let second = threads.create("Second", SPEC).unwrap().id;
    threads.thread(&second).finalize().unwrap();
    let f = failures(&threads.thread(&second).start().await.unwrap().phase);
    assert!(
        f.iter().any(|m| m
            == &format!("thread {first} is Running; pause or finish it before starting another")),
        "{f:?}"
    );
    // The process behind it died: still refused, with what to do.
    let text = std::fs::read_to_string(&path).unwrap().replace(
        &format!(r#""runner_pid": {}"#, std::process::id()),
        r#""runner_pid": null"#,
    );
    crate::support::threads::hand_edit(&threads, &path, &text).await;
    let f = failures(&threads.thread(&second).start().await.unwrap().phase);
    assert!(
        f.iter()
            .any(|m| m.contains("by a process that is gone; `resume` or `abandon` it")),
        "{f:?}"
    );
}

/// Re-audit case 39: a start killed during preflight leaves the thread in Preflight; `start`
/// runs the preflight again from there instead of refusing the transition.
#[tokio::test]
async fn a_preflight_cut_short_runs_again_on_start() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new());
    let threads = threads(dir.path(), &agent, false, 3);
    let id = finalized(&threads, SPEC);
    let path = threads
        .state_dir()
        .join("threads")
        .join(&id)
        .join("thread.json");
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace(r#""type": "Finalized""#, r#""type": "Preflight""#);
    crate::support::threads::hand_edit(&threads, &path, &text).await;
    assert_eq!(threads.get(&id).unwrap().phase.kind(), PhaseKind::Preflight);

    let thread = threads.thread(&id).start().await.unwrap();

    assert_eq!(thread.phase.kind(), PhaseKind::Configuring);
}
