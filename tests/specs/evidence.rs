//! Complete is earned in build mode too: a spec verification that gives no verdict is asked
//! once more, then the spec is UNVERIFIED (exit 3), never accepted or rejected on nothing;
//! an agent that switches branch or resets fails its session and the branch is put back;
//! the user's uncommitted edits are refused, never committed; and a complete run says what
//! it rested on, or "no required gates".

#![cfg(unix)]
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use crate::support::Recorder;
use crate::support::specs::*;
use ralph::agent::Script;
use ralph::specs::Status;
use ralph::{
    Agent, AgentError, AgentRequest, AgentRun, Error, FakeAgent, Role, ShellGate, SpecsOutcome,
    async_trait,
};

const SPEC_A: &str = "# Greeter\n\nWrite greet.sh.\n";

/// Plans spec `a`, builds its one task (greet.sh), and verifies with `verify`.
fn one_spec(verify: Script) -> Arc<FakeAgent> {
    Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "a", planner("# Plan: a"))
            .on(
                Role::Build,
                "a-1",
                Script::new()
                    .write("greet.sh", "echo hi\n")
                    .answer("ok\n<TASK_DONE>"),
            )
            .always(Role::Verify, verify),
    )
}

fn planned_repo() -> tempfile::TempDir {
    let ws = workspace(&[("specs/a.md", SPEC_A)]);
    implementation(ws.path(), &[("a", 1, &["Write greet.sh"])]);
    // ralph's bookkeeping file is committed, as after `ralph plan` and a commit.
    git(ws.path(), &["add", "-A"]);
    git(
        ws.path(),
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "-m",
            "plan",
        ],
    );
    ws
}

#[tokio::test]
async fn a_spec_verification_that_answers_prose_leaves_the_spec_unverified() {
    let ws = planned_repo();
    let dir = ws.path();
    let agent = one_spec(Script::new().answer("Looks great, ship it!"));
    let events = Recorder::default();

    let outcome = ralph(dir, agent.clone(), events.clone(), vec![])
        .build_specs()
        .await
        .unwrap();

    let SpecsOutcome::Unverified { spec, reason } = &outcome else {
        panic!("expected Unverified, got {outcome:?}");
    };
    assert_eq!(spec, "a");
    assert!(reason.contains("no structured answer"), "{reason}");
    assert_eq!(outcome.exit_code(), 3);
    assert!(outcome.to_string().contains("nothing says it is done"));
    // The structured retry, then one more whole attempt with its own retry.
    let verifications: Vec<u32> = agent
        .requests()
        .iter()
        .filter(|r| r.role == Role::Verify)
        .map(|r| r.attempt)
        .collect();
    assert_eq!(verifications, [1, 2, 3, 4]);
    // Persisted, and neither accepted nor turned into rework: nothing committed.
    let entry = &load(dir).specs[0];
    assert!(
        entry
            .unverified
            .as_deref()
            .unwrap()
            .contains("no structured answer")
    );
    assert!(!entry.verified);
    assert_eq!(entry.tasks.len(), 1, "no rework task");
    assert_eq!(commits(dir), ["plan", "Initial commit"]);

    // The next run asks again; a verdict completes the spec.
    let outcome = ralph(dir, one_spec(accept()), Recorder::default(), vec![])
        .build_specs()
        .await
        .unwrap();
    assert!(
        matches!(outcome, SpecsOutcome::Complete { specs: 1, .. }),
        "{outcome:?}"
    );
    assert_eq!(load(dir).specs[0].unverified, None);
    assert_eq!(commits(dir)[0], "Spec a");
}

#[tokio::test]
async fn a_spec_verification_that_hangs_leaves_the_spec_unverified() {
    let ws = planned_repo();
    let dir = ws.path();
    std::fs::write(
        dir.join("ralph.toml"),
        "transient_backoff = \"10ms\"\nstage_timeout = \"700ms\"\n",
    )
    .unwrap();
    git(
        dir,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qam",
            "t",
        ],
    );

    let outcome = ralph(
        dir,
        one_spec(Script::new().hang()),
        Recorder::default(),
        vec![],
    )
    .build_specs()
    .await
    .unwrap();

    let SpecsOutcome::Unverified { reason, .. } = &outcome else {
        panic!("expected Unverified, got {outcome:?}");
    };
    assert!(reason.contains("stopped (timeout)"), "{reason}");
}

#[tokio::test]
async fn with_no_required_gate_complete_says_so() {
    let ws = planned_repo();
    let dir = ws.path();
    let lint = || vec![ShellGate::new("lint", "true").with_required(false)];
    let dry = ralph(dir, one_spec(accept()), Recorder::default(), lint())
        .dry_run_build()
        .unwrap()
        .to_string();
    assert!(dry.contains("agent:     fake"), "{dry}");
    assert!(
        dry.contains("gates:     no required gate: a task is done on the agent's word and the verifier's (lint (optional))"),
        "{dry}"
    );

    let outcome = ralph(dir, one_spec(accept()), Recorder::default(), lint())
        .build_specs()
        .await
        .unwrap();

    let SpecsOutcome::Complete { gates, .. } = &outcome else {
        panic!("expected Complete, got {outcome:?}");
    };
    assert!(gates.is_empty());
    assert!(
        outcome.to_string().contains("Evidence: no required gates;"),
        "{outcome}"
    );

    let gated = planned_repo();
    let outcome = ralph(
        gated.path(),
        one_spec(accept()),
        Recorder::default(),
        vec![ShellGate::new("sh", "sh -n greet.sh")],
    )
    .build_specs()
    .await
    .unwrap();
    assert!(
        outcome.to_string().contains("Evidence: gates sh passed;"),
        "{outcome}"
    );
    // One gate-log naming in every mode: `gate-<gate>-<task>-a<attempt>`.
    let runs = gated.path().join("build/ralph-logs/runs/a");
    let run = std::fs::read_dir(&runs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert!(run.join("gate-sh-a-1-a1.log").exists(), "{run:?}");
}

#[tokio::test]
async fn the_users_uncommitted_edits_are_refused_and_their_untracked_files_stay_out() {
    let ws = planned_repo();
    let dir = ws.path();
    std::fs::write(dir.join("specs/a.md"), format!("{SPEC_A}Edited.\n")).unwrap();
    let agent = one_spec(accept());

    let err = ralph(dir, agent.clone(), Recorder::default(), vec![])
        .build_specs()
        .await
        .unwrap_err();

    assert!(matches!(err, Error::Uncommitted { .. }), "{err:?}");
    assert!(err.to_string().contains("specs/a.md"), "{err}");
    assert!(agent.requests().is_empty());

    git(dir, &["checkout", "--", "specs/a.md"]);
    std::fs::write(dir.join("notes.txt"), "mine\n").unwrap();
    let outcome = ralph(dir, agent, Recorder::default(), vec![])
        .build_specs()
        .await
        .unwrap();
    assert!(
        matches!(outcome, SpecsOutcome::Complete { .. }),
        "{outcome:?}"
    );
    let files = git(dir, &["show", "--name-only", "--format=", "HEAD"]);
    assert!(files.contains("greet.sh"), "{files}");
    assert!(!files.contains("notes.txt"), "{files}");
    assert_eq!(
        git(dir, &["status", "--porcelain", "notes.txt"]),
        "?? notes.txt\n"
    );
}

/// The FakeAgent, with a shell script run before build session `session` of task `task`
/// (as a real agent's tool would run it).
struct Shell {
    inner: Arc<FakeAgent>,
    task: &'static str,
    session: u32,
    script: &'static str,
}

#[async_trait]
impl Agent for Shell {
    async fn run(&self, request: AgentRequest) -> Result<AgentRun, AgentError> {
        if request.role == Role::Build
            && request.subject.as_deref() == Some(self.task)
            && request.attempt == self.session
        {
            let out = std::process::Command::new("sh")
                .args(["-c", self.script])
                .current_dir(&request.workspace)
                .env("GIT_AUTHOR_NAME", "agent")
                .env("GIT_AUTHOR_EMAIL", "agent@x")
                .env("GIT_COMMITTER_NAME", "agent")
                .env("GIT_COMMITTER_EMAIL", "agent@x")
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
        }
        self.inner.run(request).await
    }
}

#[tokio::test]
async fn an_agent_that_switches_branch_fails_its_session_and_the_branch_is_put_back() {
    let ws = planned_repo();
    let dir = ws.path();
    let inner = Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "a", planner("# Plan: a"))
            .always(
                Role::Build,
                Script::new()
                    .write("greet.sh", "echo hi\n")
                    .answer("ok\n<TASK_DONE>"),
            )
            .always(Role::Verify, accept()),
    );
    let agent = Shell {
        inner: inner.clone(),
        task: "a-1",
        session: 1,
        script: "git checkout -q -b agent && echo x > x.txt && git add -A && git commit -qm agent",
    };
    let events = Recorder::default();

    let outcome = ralph::Ralph::builder()
        .workspace(dir)
        .agent(agent)
        .observer(events.clone())
        .build()
        .unwrap()
        .build_specs()
        .await
        .unwrap();

    assert!(
        matches!(outcome, SpecsOutcome::Complete { .. }),
        "{outcome:?}"
    );
    assert_eq!(git(dir, &["branch", "--show-current"]).trim(), "main");
    assert_eq!(commits(dir)[0], "Spec a");
    assert!(
        !dir.join("x.txt").exists(),
        "the agent's branch stays its own"
    );
    let retry = events.of_kind("task_retry");
    assert!(
        retry[0]["reason"]
            .as_str()
            .unwrap()
            .contains("switched to branch agent"),
        "{retry:?}"
    );
    let sessions: Vec<u32> = inner
        .requests()
        .iter()
        .filter(|r| r.role == Role::Build)
        .map(|r| r.attempt)
        .collect();
    assert_eq!(sessions, [1, 2]);
}

/// The lying agent of build mode: while building a-1 it marks a-2 completed in
/// implementation.json. ralph catches it at its next write, puts back its own version (the
/// forgery kept beside it) and stops; the honest re-run builds a-2, and its file exists.
#[rstest::rstest]
#[case::rewritten_in_place(false)]
#[case::appended(true)]
#[tokio::test]
async fn an_agent_that_forges_an_acceptance_in_implementation_json_is_rolled_back(
    #[case] appended: bool,
) {
    let ws = workspace(&[("specs/a.md", SPEC_A)]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["Write greet.sh", "Write bye.sh"])]);
    let text = std::fs::read_to_string(dir.join("implementation.json")).unwrap();
    let forged = match appended {
        // A second document after the first: a reader that stops at the first misses it.
        true => format!("{text}{{\"a-2\": \"completed\"}}\n"),
        false => text.replace("\"status\": \"pending\"", "\"status\": \"completed\""),
    };
    let liar = Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "a", planner("# Plan: a"))
            .on(
                Role::Build,
                "a-1",
                Script::new()
                    .write("greet.sh", "echo hi\n")
                    .write("implementation.json", forged)
                    .answer("ok\n<TASK_DONE>"),
            )
            .always(Role::Verify, accept()),
    );

    let err = ralph(dir, liar, Recorder::default(), vec![])
        .build_specs()
        .await
        .unwrap_err();

    let message = err.to_string();
    assert!(message.contains("implementation.json"), "{message}");
    assert!(
        message.contains("ralph put back its own version"),
        "{message}"
    );
    let entry = &load(dir).specs[0];
    assert_eq!(
        entry.tasks[1].status,
        Status::Pending,
        "the forgery is gone"
    );
    let kept: Vec<_> = std::fs::read_dir(dir.join(".ralph"))
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("implementation.json.changed-")
        })
        .collect();
    assert_eq!(kept.len(), 1, "the changed file is kept");

    let honest = Arc::new(
        FakeAgent::new()
            .on(
                Role::Build,
                "a-2",
                Script::new()
                    .write("bye.sh", "echo bye\n")
                    .answer("ok\n<TASK_DONE>"),
            )
            .always(Role::Verify, accept()),
    );
    let outcome = ralph(dir, honest.clone(), Recorder::default(), vec![])
        .build_specs()
        .await
        .unwrap();

    assert!(
        matches!(outcome, SpecsOutcome::Complete { .. }),
        "{outcome:?}"
    );
    assert!(dir.join("bye.sh").exists());
    // ralph's copy stays in its own folder: the spec's commit holds the work only.
    let files = git(dir, &["show", "--name-only", "--format=", "HEAD"]);
    assert!(!files.contains("changed-"), "{files}");
    assert!(
        honest
            .requests()
            .iter()
            .any(|r| r.role == Role::Build && r.subject.as_deref() == Some("a-2"))
    );
}
