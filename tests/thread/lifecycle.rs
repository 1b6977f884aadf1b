//! Threads end to end with real git, real shells for the criteria and the FakeAgent.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use crate::support::threads::{SPEC, finalized, no_claim, repo, threads, writes};
use ralph::agent::{FakeAgent, Role, Script};
use ralph::thread::{Phase, PhaseKind};
use ralph::thread::{RunConfig, ThreadError};
use ralph_loop_core::git::Git;
use serde_json::json;

#[tokio::test]
async fn quick_mode_stops_at_every_checkpoint_and_recommends_approval() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new().then(writes("hello\n")));
    let threads = threads(dir.path(), &agent, true, 3);
    let id = threads.create("Greeter", SPEC).unwrap().id;
    // Checkpoint 1: nothing moves a Drafting thread to Finalized but `finalize`.
    assert_eq!(threads.get(&id).unwrap().phase, Phase::Drafting);
    let refused = threads.thread(&id).start().await.unwrap_err();
    assert!(
        refused.to_string().contains("from Drafting to Preflight"),
        "{refused}"
    );
    threads.thread(&id).finalize().unwrap();

    let thread = threads.thread(&id).start().await.unwrap();
    // Checkpoint 3: quick mode reaches review and stops, recommending approval.
    assert_eq!(
        thread.phase,
        Phase::PendingReview {
            recommend_approve: true
        }
    );
    assert_eq!(agent.requests().len(), 1);
    // Checkpoint 4: approval prepares the commit and stops before it.
    let approved = threads.thread(&id).approve().await.unwrap();
    assert_eq!(approved.phase.kind(), PhaseKind::ReadyToCommit);
    let git = Git::new(dir.path());
    let branch = format!("ralph/{id}");
    assert_eq!(
        git.current_branch().await.unwrap().as_deref(),
        Some(branch.as_str())
    );
    assert_eq!(
        git.changes(&[".ralph"]).await.unwrap(),
        ["?? hello.txt"],
        "nothing committed before the person commits"
    );
    let done = threads
        .thread(&id)
        .commit(Some("Add hello.txt"))
        .await
        .unwrap();
    let Phase::Done { commit: Some(sha) } = done.phase else {
        panic!("{:?}", done.phase)
    };
    assert_eq!(git.head().await.unwrap().as_deref(), Some(sha.as_str()));
    assert!(git.changes(&[".ralph"]).await.unwrap().is_empty());
    // `.ralph` is ralph's, never committed, and ignores itself: nothing is left to see.
    assert!(git.changes(&[]).await.unwrap().is_empty());
    assert!(dir.path().join(".ralph/.gitignore").exists());
}

#[tokio::test]
async fn methodical_mode_walks_every_forward_row() {
    let dir = repo().await;
    let agent = Arc::new(
        FakeAgent::new()
            .on_role(
                Role::Assess,
                Script::new().json(json!({"ready": false, "issues": [
                    {"section": "Acceptance Criteria", "problem": "vague", "suggestion": "say which file"}
                ]})),
            )
            .on_role(
                Role::Assess,
                Script::new().json(json!({"ready": true, "issues": []})),
            )
            .then(writes("hello\n"))
            .then(
                Script::new()
                    .write("docs/hello.md", "# hello.txt\n")
                    .answer("Documented.\nSHIPPED"),
            ),
    );
    let threads = threads(dir.path(), &agent, false, 3);
    let id = threads.create("Greeter", SPEC).unwrap().id;
    // Drafting → Assessing → Drafting: the AI review found issues.
    let reviewed = threads.thread(&id).assess().await.unwrap();
    assert_eq!(reviewed.phase, Phase::Drafting);
    assert!(!reviewed.assessment.unwrap().ready);
    let revised = threads.thread(&id).edit_spec(SPEC).unwrap();
    assert_eq!(revised.spec_version, 2);
    // Drafting → Assessing, ready: it stays there until the person finalizes.
    assert_eq!(
        threads.thread(&id).assess().await.unwrap().phase,
        Phase::Assessing
    );
    assert_eq!(
        threads.thread(&id).finalize().unwrap().phase,
        Phase::Finalized
    );
    assert_eq!(threads.thread(&id).reopen().unwrap().phase, Phase::Drafting);
    threads.thread(&id).finalize().unwrap();

    // Methodical: preflight stops at Configuring for the person's settings.
    let configuring = threads.thread(&id).start().await.unwrap();
    assert_eq!(configuring.phase, Phase::Configuring);
    assert_eq!(agent.requests().len(), 2, "only the two reviews so far");
    threads
        .thread(&id)
        .configure(RunConfig::default().max_iterations(2))
        .unwrap();
    let implemented = threads.thread(&id).run().await.unwrap();
    assert_eq!(
        implemented.phase,
        Phase::Implemented,
        "no auto review in methodical mode"
    );
    // Implemented → Polishing → Implemented: the polish run claimed done, the criteria hold.
    assert_eq!(
        threads.thread(&id).polish().await.unwrap().phase,
        Phase::Implemented
    );
    let review = threads.thread(&id).submit_for_review().unwrap();
    assert_eq!(
        review.phase,
        Phase::PendingReview {
            recommend_approve: true
        }
    );
    assert_eq!(
        threads.thread(&id).approve().await.unwrap().phase,
        Phase::Approved
    );
    let ready = threads.thread(&id).prepare_commit(None).unwrap();
    let Phase::ReadyToCommit { message } = &ready.phase else {
        panic!()
    };
    assert!(message.starts_with("Greeter"));
    let done = threads.thread(&id).commit(None).await.unwrap();
    assert_eq!(done.phase.kind(), PhaseKind::Done);
    // Terminal: nothing leaves Done.
    let err = threads.thread(&id).abandon().await.unwrap_err();
    assert!(err.to_string().contains("from Done to Abandoned"), "{err}");
}

#[tokio::test]
async fn failed_criteria_go_back_to_running_with_the_failures_in_the_next_prompt() {
    let dir = repo().await;
    let agent = Arc::new(
        FakeAgent::new()
            .then(writes("goodbye\n"))
            .then(writes("hello\n")),
    );
    let threads = threads(dir.path(), &agent, true, 3);
    let id = finalized(&threads, SPEC);
    let thread = threads.thread(&id).start().await.unwrap();
    assert_eq!(thread.phase.kind(), PhaseKind::PendingReview);
    let requests = agent.requests();
    // A fresh agent run per iteration (seed 003, pitfall 1), numbered by iteration.
    assert_eq!(requests.len(), 2);
    assert_eq!((requests[0].attempt, requests[1].attempt), (1, 2));
    assert!(
        requests[1]
            .prompt
            .contains("Criteria That Failed Last Time")
    );
    assert!(requests[1].prompt.contains("it says hello"));
    assert!(
        requests[1]
            .prompt
            .contains("iteration 1: claimed done; 1 of 2 criteria passed")
    );
    // Run records for each agent run.
    for n in 1..=2 {
        let run_id = format!("{id}-r{n}");
        let run = threads.run_record(&run_id).unwrap();
        assert_eq!(
            (run.thread.as_str(), run.iteration, run.role.as_str()),
            (id.as_str(), n, "build"),
            "{run:?}"
        );
        assert!(run.ended_at.is_some() && run.outcome.is_some(), "{run:?}");
        assert!(threads.run_dir(&run_id).join("output.log").exists());
    }
    assert_eq!(thread.current_run_id, Some(format!("{id}-r2")));
    // Only a run's own id names one.
    for not_an_id in ["../threads", "", "x/../..", "nope"] {
        let err = threads.run_record(not_an_id).unwrap_err().to_string();
        assert!(err.contains("run.json"), "{not_an_id}: {err}");
    }
    // A run record that is not what ralph wrote is an error naming it, not a default.
    let damaged = threads.run_dir(&format!("{id}-r1")).join("run.json");
    std::fs::write(&damaged, "{\"id\": 3").unwrap();
    let err = threads.run_record(&format!("{id}-r1")).unwrap_err();
    assert!(
        matches!(&err, ThreadError::NotWritten { path, .. } if *path == damaged),
        "{err}"
    );
    // As an earlier ralph left it (no seal), the damage is reported as such.
    crate::support::threads::as_an_earlier_ralph_wrote(&damaged, "{\"id\": 3");
    let err = threads.run_record(&format!("{id}-r1")).unwrap_err();
    assert!(
        matches!(&err, ThreadError::Corrupt { path, .. } if *path == damaged),
        "{err}"
    );
}

#[tokio::test]
async fn max_iterations_ends_stuck_with_a_clear_message_and_the_report() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new().then(writes("goodbye\n")).then(no_claim()));
    let threads = threads(dir.path(), &agent, true, 2);
    let id = finalized(&threads, SPEC);
    let thread = threads.thread(&id).start().await.unwrap();
    let Phase::Stuck { reason } = &thread.phase else {
        panic!("{:?}", thread.phase)
    };
    assert!(
        reason.starts_with("Stopped: max iterations (2) reached")
            && reason.ends_with("criteria remaining: 1 of 2"),
        "{reason}"
    );
    let report = threads.thread(&id).diagnose().unwrap();
    assert_eq!(&report.reason, reason);
    assert_eq!(report.spec_version, 1);
    assert_eq!(report.iterations, 2);
    assert_eq!(report.passed, ["hello.txt exists: `test -f hello.txt`"]);
    assert_eq!(report.failed.len(), 1);
    assert!(
        report.failed[0].starts_with("it says hello"),
        "{:?}",
        report.failed
    );
    let closest = report.closest.unwrap();
    assert_eq!(
        closest.iteration, 1,
        "the attempt with most criteria passing"
    );
    assert!(closest.output.contains("SHIPPED"));
    assert!(report.diff.contains("+goodbye"), "{}", report.diff);
    // Diagnose leaves it Stuck.
    assert_eq!(threads.get(&id).unwrap().phase.kind(), PhaseKind::Stuck);
}

#[tokio::test]
async fn stuck_then_verifying_stuck_when_the_last_iteration_claims_done_and_fails() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new().then(writes("goodbye\n")));
    let threads = threads(dir.path(), &agent, true, 1);
    let id = finalized(&threads, SPEC);
    let thread = threads.thread(&id).start().await.unwrap();
    let Phase::Stuck { reason } = &thread.phase else {
        panic!("{:?}", thread.phase)
    };
    assert!(
        reason.starts_with("Stopped: max iterations (1) reached"),
        "{reason}"
    );
    assert_eq!(
        thread.attempts[0].summary,
        "claimed done; 1 of 2 criteria passed"
    );
}

#[tokio::test]
async fn the_promise_tag_counts_only_as_the_last_line_of_the_final_answer() {
    let dir = repo().await;
    let agent = Arc::new(
        FakeAgent::new()
            .then(
                Script::new()
                    .write("hello.txt", "hello\n")
                    // The tag in the transcript (tool output, an earlier turn) is not the answer.
                    .print("SHIPPED", 1)
                    .answer("I will print SHIPPED when done."),
            )
            .then(Script::new().answer("SHIPPED\nBut first, one more thing."))
            .then(Script::new().answer("```\nSHIPPED\n```")),
    );
    let threads = threads(dir.path(), &agent, true, 3);
    let id = finalized(&threads, SPEC);
    let thread = threads.thread(&id).start().await.unwrap();
    assert!(
        matches!(thread.phase, Phase::Stuck { .. }),
        "{:?}",
        thread.phase
    );
    assert!(
        thread
            .attempts
            .iter()
            .all(|a| a.summary.starts_with("no claim")),
        "{:?}",
        thread.attempts
    );
}

#[tokio::test]
async fn stuck_choices_reconfigure_and_manual_assist() {
    let dir = repo().await;
    let agent = Arc::new(
        FakeAgent::new()
            .then(no_claim())
            .then(no_claim())
            .then(writes("hello\n")),
    );
    let threads = threads(dir.path(), &agent, false, 1);
    let id = finalized(&threads, SPEC);
    threads.thread(&id).start().await.unwrap();
    assert_eq!(
        threads.thread(&id).run().await.unwrap().phase.kind(),
        PhaseKind::Stuck
    );
    // Reconfigure keeps the changes, then the loop runs a new round.
    assert_eq!(
        threads.thread(&id).reconfigure().unwrap().phase,
        Phase::Configuring
    );
    assert_eq!(
        threads.thread(&id).run().await.unwrap().phase.kind(),
        PhaseKind::Stuck
    );
    // Manual assist: the person edits files, the loop continues.
    let thread = threads.thread(&id).manual_assist().await.unwrap();
    assert_eq!(thread.phase, Phase::Implemented);
    let attempts: Vec<u32> = agent.requests().iter().map(|r| r.attempt).collect();
    assert_eq!(attempts, [1, 2, 3], "iterations continue across rounds");
}

#[tokio::test]
async fn revise_from_stuck_resets_to_the_baseline() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new().then(writes("goodbye\n")));
    let threads = threads(dir.path(), &agent, true, 1);
    let id = finalized(&threads, SPEC);
    threads.thread(&id).start().await.unwrap();
    let git = Git::new(dir.path());
    let branch = format!("ralph/{id}");
    assert!(git.branch_exists(&branch).await.unwrap());

    assert_eq!(threads.get(&id).unwrap().phase.kind(), PhaseKind::Stuck);

    let new_spec = SPEC.replace("Write hello.txt", "Write hello.txt, lower case");
    let drafting = threads.thread(&id).revise(Some(&new_spec)).await.unwrap();
    assert_eq!(drafting.phase, Phase::Drafting);
    assert_eq!(drafting.spec_version, 2);
    assert!(!dir.path().join("hello.txt").exists(), "reset to baseline");
    assert_eq!(git.current_branch().await.unwrap().as_deref(), Some("main"));
    assert!(
        !git.branch_exists(&branch).await.unwrap(),
        "managed branch deleted"
    );
    // Revisions are immutable files.
    assert_eq!(
        std::fs::read_to_string(threads.spec_path(&id, 1)).unwrap(),
        SPEC
    );
    assert_eq!(
        std::fs::read_to_string(threads.spec_path(&id, 2)).unwrap(),
        new_spec
    );
    // And the state survived the reset.
    assert!(
        threads
            .state_dir()
            .join("threads")
            .join(&id)
            .join("thread.json")
            .exists()
    );
}

#[tokio::test]
async fn review_can_send_back_to_running_or_to_drafting_with_a_reset() {
    let dir = repo().await;
    let agent = Arc::new(
        FakeAgent::new()
            .then(writes("hello\n"))
            .then(writes("hello again\n")),
    );
    let threads = threads(dir.path(), &agent, true, 2);
    let id = finalized(&threads, SPEC);
    threads.thread(&id).start().await.unwrap();
    let again = threads
        .thread(&id)
        .send_back("Say hello again, twice.")
        .await
        .unwrap();
    assert_eq!(again.phase.kind(), PhaseKind::PendingReview);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(),
        "hello again\n"
    );
    // The reviewer's words are in the next round's prompt, and kept in the thread.
    let prompts: Vec<String> = agent.requests().iter().map(|r| r.prompt.clone()).collect();
    assert!(!prompts[0].contains("Say hello again"), "{}", prompts[0]);
    assert!(
        prompts[1].contains("## The Reviewer's Feedback")
            && prompts[1].contains("Say hello again, twice."),
        "{}",
        prompts[1]
    );
    assert_eq!(again.feedback[0].text, "Say hello again, twice.");
    assert_eq!(
        (
            again.feedback[0].by.as_str(),
            again.feedback[0].spec_version
        ),
        ("reviewer", again.spec_version)
    );
    let drafting = threads.thread(&id).revise(None).await.unwrap();
    assert_eq!(drafting.phase, Phase::Drafting);
    assert!(!dir.path().join("hello.txt").exists());
}

#[tokio::test]
async fn criteria_without_a_command_are_judged_by_a_read_only_verifier() {
    let dir = repo().await;
    let spec = format!("{SPEC}- [ ] the greeting is friendly\n");
    let agent = Arc::new(
        FakeAgent::new()
            .on_attempt(Role::Build, "1-greeter", 1, writes("hello\n"))
            .on_attempt(
                Role::Verify,
                "1-greeter",
                1,
                Script::new().json(json!({"verdict": "reject", "reason": "too curt"})),
            )
            .on_attempt(Role::Build, "1-greeter", 2, writes("hello, friend\n"))
            .on_attempt(
                Role::Verify,
                "1-greeter",
                2,
                Script::new().json(json!({"verdict": "accept", "reason": "friendly"})),
            ),
    );
    let threads = threads(dir.path(), &agent, true, 3);
    let id = finalized(&threads, &spec);
    let thread = threads.thread(&id).start().await.unwrap();
    assert_eq!(thread.phase.kind(), PhaseKind::PendingReview);
    let verify: Vec<_> = agent
        .requests()
        .into_iter()
        .filter(|r| r.role == Role::Verify)
        .collect();
    assert_eq!(verify.len(), 2);
    assert!(verify[0].prompt.contains("read-only verifier"));
    assert_eq!(verify[0].schema, ralph::answer_schema(Role::Verify));
    assert!(thread.attempts[0].failed[0].contains("too curt"));
    agent.verify().unwrap();
}

#[tokio::test]
async fn recent_attempts_are_bounded() {
    let dir = repo().await;
    let mut agent = FakeAgent::new();
    for _ in 0..7 {
        agent = agent.then(no_claim());
    }
    let agent = Arc::new(agent);
    let threads = threads(dir.path(), &agent, true, 7);
    let id = finalized(&threads, SPEC);
    let thread = threads.thread(&id).start().await.unwrap();
    assert_eq!(thread.attempts.len(), 5);
    assert_eq!(thread.attempts[0].iteration, 3);
    let last = agent.requests().pop().unwrap();
    assert_eq!(last.prompt.matches("- iteration ").count(), 5);
}

#[tokio::test]
async fn a_hanging_iteration_times_out_and_counts_as_failed() {
    let dir = repo().await;
    let agent = Arc::new(
        FakeAgent::new()
            .then(Script::new().hang())
            .then(writes("hello\n")),
    );
    let threads = threads(dir.path(), &agent, true, 3);
    let id = finalized(&threads, SPEC);
    threads
        .thread(&id)
        .configure(RunConfig::default())
        .unwrap_err(); // not Configuring yet: refused with the phase named
    let threads = threads
        .quick(true)
        .run_config(RunConfig::default().agent_timeout(Duration::from_millis(300)));
    let started = std::time::Instant::now();
    let thread = threads.thread(&id).start().await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(thread.phase.kind(), PhaseKind::PendingReview);
    assert!(
        thread.attempts[0].summary.contains("timed out"),
        "{:?}",
        thread.attempts
    );
}

#[tokio::test]
async fn interrupt_pauses_and_resume_continues_from_the_same_iteration() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new().then(no_claim()).then(Script::new().hang()));
    let threads = threads(dir.path(), &agent, true, 3);
    let id = finalized(&threads, SPEC);
    let stop = threads.stop_token();
    let log = threads.run_dir(&format!("{id}-r2")).join("output.log");
    let interrupter = async {
        while !log.exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        stop.stop();
    };
    let handle = threads.thread(&id);
    let (thread, ()) = tokio::join!(handle.start(), interrupter);
    let thread = thread.unwrap();
    assert_eq!(
        thread.phase,
        Phase::Paused {
            iteration: 2,
            criteria_passing: 0,
            criteria_total: 2
        }
    );
    // Saved before returning.
    assert_eq!(threads.get(&id).unwrap().phase, thread.phase);
    let run = threads.run_record(&format!("{id}-r2")).unwrap();
    assert_eq!(run.outcome.as_deref(), Some("interrupted"), "{run:?}");

    // A new process: fresh token, fresh agent.
    let agent = Arc::new(FakeAgent::new().then(writes("hello\n")));
    let threads = crate::support::threads::threads(dir.path(), &agent, true, 3);
    assert_eq!(
        threads.thread(&id).reconfigure().unwrap().phase,
        Phase::Configuring
    );
    assert_eq!(
        threads.thread(&id).abandon().await.unwrap().phase,
        Phase::Abandoned
    );
}

#[tokio::test]
async fn resume_runs_the_interrupted_iteration_again() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new().then(Script::new().hang()));
    let threads = threads(dir.path(), &agent, true, 3);
    let id = finalized(&threads, SPEC);
    let stop = threads.stop_token();
    let log = threads.run_dir(&format!("{id}-r1")).join("output.log");
    let interrupter = async {
        while !log.exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        stop.stop();
    };
    let handle = threads.thread(&id);
    let (paused, ()) = tokio::join!(handle.start(), interrupter);
    assert_eq!(paused.unwrap().phase.kind(), PhaseKind::Paused);

    let agent = Arc::new(FakeAgent::new().then(writes("hello\n")));
    let threads = crate::support::threads::threads(dir.path(), &agent, true, 3);
    let thread = threads.thread(&id).resume().await.unwrap();
    assert_eq!(thread.phase.kind(), PhaseKind::PendingReview);
    assert_eq!(agent.requests()[0].attempt, 1, "the same iteration");
}

#[tokio::test]
async fn refused_calls_name_both_phases_and_change_nothing() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new());
    let threads = threads(dir.path(), &agent, false, 3);
    let id = threads.create("Greeter", SPEC).unwrap().id;
    let cases = [
        threads.thread(&id).approve().await.unwrap_err(),
        threads.thread(&id).commit(None).await.unwrap_err(),
        threads.thread(&id).resume().await.unwrap_err(),
        threads.thread(&id).run().await.unwrap_err(),
        threads.thread(&id).manual_assist().await.unwrap_err(),
        threads.thread(&id).polish().await.unwrap_err(),
        threads.thread(&id).fix_spec().unwrap_err(),
    ];
    for err in cases {
        let message = err.to_string();
        assert!(message.contains("from Drafting to"), "{message}");
    }
    assert_eq!(threads.get(&id).unwrap().phase, Phase::Drafting);
    assert_eq!(threads.active().as_deref(), Some(id.as_str()));
}

#[tokio::test]
async fn interrupt_during_verification_pauses_and_the_claim_is_checked_again() {
    let dir = repo().await;
    let spec = format!("{SPEC}- [ ] slow check: `sleep 30`\n");
    let agent = Arc::new(FakeAgent::new().then(writes("hello\n")));
    let threads = threads(dir.path(), &agent, true, 3);
    let id = finalized(&threads, &spec);
    let stop = threads.stop_token();
    let state = threads
        .state_dir()
        .join("threads")
        .join(&id)
        .join("thread.json");
    let interrupter = async {
        loop {
            let text = std::fs::read_to_string(&state).unwrap_or_default();
            if text.contains(r#""type": "Verifying""#) {
                // Let the first two checks pass and the sleep start.
                tokio::time::sleep(Duration::from_millis(300)).await;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        stop.stop();
    };
    let started = std::time::Instant::now();
    let handle = threads.thread(&id);
    let (thread, ()) = tokio::join!(handle.start(), interrupter);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the check was stopped"
    );
    assert_eq!(
        thread.unwrap().phase,
        Phase::Paused {
            iteration: 1,
            criteria_passing: 0,
            criteria_total: 3
        }
    );
}

#[tokio::test]
async fn a_thread_left_running_by_a_dead_process_is_resumed_at_its_iteration() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new().then(no_claim()));
    let threads = threads(dir.path(), &agent, true, 3);
    let id = finalized(&threads, SPEC);
    let path = threads
        .state_dir()
        .join("threads")
        .join(&id)
        .join("thread.json");
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    for phase in ["Running", "Verifying"] {
        // What a SIGKILLed `start` leaves: the phase it was in, and its pid.
        let mut record: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        record["phase"] = json!({"type": phase, "data": {"iteration": 2}});
        record["runner_pid"] = json!(dead);
        record["iteration_limit"] = json!(3);
        crate::support::threads::hand_edit(&threads, &path, &record.to_string()).await;
        assert!(threads.get(&id).unwrap().is_orphaned());

        let agent = Arc::new(FakeAgent::new().then(writes("hello\n")));
        let threads = crate::support::threads::threads(dir.path(), &agent, true, 3);
        let thread = threads.thread(&id).resume().await.unwrap();
        assert_eq!(thread.phase.kind(), PhaseKind::PendingReview, "{phase}");
        assert_eq!(
            agent.requests()[0].attempt,
            2,
            "{phase}: the same iteration"
        );
        assert_eq!(thread.runner_pid, None);
    }
}

/// Seed 001's Polishing runs an agent: `polish` gives it the `thread_polish` prompt (here a
/// person's override from `[prompts]`), in the thread's work tree, and checks every
/// criterion after its claim, as a round of the loop does: all pass → Implemented. A
/// polish that broke a criterion keeps the thread Polishing with the failure; the person's
/// `polish-done` then sends it to review without "recommend approve".
#[tokio::test]
async fn polish_runs_an_agent_under_the_loops_checks() {
    let dir = repo().await;
    let ws = dir.path();
    std::fs::write(
        ws.join("ralph.toml"),
        "[prompts]\nthread_polish = \"polish.md\"\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("polish.md"),
        "Polish {{ title }}: add docs. Keep: {% for c in criteria %}{{ c }}; {% endfor %}\
         {% if failed %}Broken: {{ failed | join(\", \") }}{% endif %} End with {{ promise }}.\n",
    )
    .unwrap();
    ralph_loop_core::git::Git::new(ws)
        .commit_all("prompts", &[])
        .await
        .unwrap();
    let agent = Arc::new(
        FakeAgent::new()
            .then(writes("hello\n"))
            .then(
                Script::new()
                    .write("docs/hello.md", "# hello.txt says hello\n")
                    .answer("Documented.\nSHIPPED"),
            )
            .then(
                Script::new()
                    .write("hello.txt", "bye\n")
                    .answer("Tidied the wording.\nSHIPPED"),
            )
            .then(no_claim()),
    );
    let threads = threads(ws, &agent, false, 3);
    let id = finalized(&threads, SPEC);
    threads.thread(&id).start().await.unwrap();
    assert_eq!(
        threads.thread(&id).run().await.unwrap().phase,
        Phase::Implemented
    );

    let polished = threads.thread(&id).polish().await.unwrap();
    assert_eq!(polished.phase, Phase::Implemented);
    let last = polished.attempts.last().unwrap();
    assert_eq!(last.summary, "polished; 2 of 2 criteria passed");
    assert_eq!(last.iteration, 2, "numbered after the loop's iteration");
    assert!(ws.join("docs/hello.md").exists());
    let requests = agent.requests();
    let prompt = &requests[1].prompt;
    assert_eq!(requests[1].role, Role::Build);
    assert!(
        prompt
            .starts_with("Polish Greeter: add docs. Keep: hello.txt exists: `test -f hello.txt`;"),
        "{prompt}"
    );
    assert!(prompt.contains("End with SHIPPED."), "{prompt}");

    // A polish that breaks a criterion stays Polishing, with the failure to fix.
    let broken = threads.thread(&id).polish().await.unwrap();
    assert_eq!(broken.phase, Phase::Polishing);
    let last = broken.attempts.last().unwrap();
    assert_eq!(last.failed.len(), 1, "{last:?}");
    assert!(last.failed[0].starts_with("it says hello"), "{last:?}");
    // Polishing again shows the agent what broke; no claim keeps it Polishing.
    let again = threads.thread(&id).polish().await.unwrap();
    assert_eq!(again.phase, Phase::Polishing);
    assert!(
        agent.requests()[3].prompt.contains("Broken: it says hello"),
        "{}",
        agent.requests()[3].prompt
    );
    assert!(
        again
            .attempts
            .last()
            .unwrap()
            .summary
            .contains("no claim of done")
    );
    // The person's own fix, then review: no badge, as the last check failed.
    std::fs::write(ws.join("hello.txt"), "hello\n").unwrap();
    assert_eq!(
        threads.thread(&id).polish_done().unwrap().phase,
        Phase::Implemented
    );
    assert_eq!(
        threads.thread(&id).submit_for_review().unwrap().phase,
        Phase::PendingReview {
            recommend_approve: false
        }
    );
}

/// Re-audit N1: the claim is the bare tag; the `<promise>` line written back is no claim,
/// and the iteration's summary says what the claim is.
#[tokio::test]
async fn the_promise_line_written_back_is_no_claim_and_the_summary_names_the_bare_tag() {
    let dir = repo().await;
    let wrapped = Script::new()
        .write("hello.txt", "hello\n")
        .answer("Wrote hello.txt.\n<promise>SHIPPED</promise>");
    let agent = Arc::new(FakeAgent::new().then(wrapped).then(no_claim()));
    let threads = threads(dir.path(), &agent, true, 2);
    let id = finalized(&threads, SPEC);

    let thread = threads.thread(&id).start().await.unwrap();

    assert_eq!(thread.phase.kind(), PhaseKind::Stuck);
    let summaries: Vec<&str> = thread.attempts.iter().map(|a| a.summary.as_str()).collect();
    assert_eq!(
        summaries,
        [
            "no claim of done: the last line of the answer was `<promise>SHIPPED</promise>`; \
             the claim is the bare tag `SHIPPED` alone on the last line",
            "no claim of done: the last line of the answer was not the bare tag `SHIPPED` \
             (alone on a line, outside any code fence)",
        ]
    );
}

/// Issue 38: a thread's iterations share their prompt's stable part (the instructions, the
/// spec); the iteration, the criteria that failed and a person's guidance come after it.
#[tokio::test]
async fn the_iterations_of_a_thread_share_their_stable_part() {
    let dir = repo().await;
    let agent = Arc::new(
        FakeAgent::new()
            .then(writes("goodbye\n"))
            .then(no_claim())
            .then(writes("hello\n")),
    );
    let threads = threads(dir.path(), &agent, true, 3);
    let id = finalized(&threads, SPEC);
    ralph::steer::tell(dir.path(), "Keep it short.", Some(&id), Some("ana")).unwrap();
    threads.thread(&id).start().await.unwrap();

    let iterations: Vec<_> = agent
        .requests()
        .into_iter()
        .filter(|r| r.role == ralph::Role::Build)
        .collect();
    assert_eq!(iterations.len(), 3);
    let stable = &iterations[0].prompt[..iterations[0].stable_prefix];
    assert!(stable.contains("Write hello.txt saying hello."), "{stable}");
    assert!(!stable.contains("Iteration"), "{stable}");
    for request in &iterations {
        assert_eq!(&request.prompt[..request.stable_prefix], stable);
        let own = &request.prompt[request.stable_prefix..];
        let iteration = own.find("# Iteration").expect("the iteration");
        let guidance = own.find("## Guidance from a person").expect("the guidance");
        assert!(iteration < guidance, "{own}");
    }
    let second = &iterations[1].prompt[iterations[1].stable_prefix..];
    assert!(
        second.contains("## Criteria That Failed Last Time"),
        "{second}"
    );
}

/// Issue 37: a thread hands out the same steering handle as a `Ralph`, narrowed to its id:
/// its question waits (Paused under CI), the handle's answer and guidance reach the next
/// iteration, and another thread's handle sees no question of its own.
#[tokio::test]
async fn a_thread_s_steering_handle_answers_its_question() {
    let dir = repo().await;
    let agent = Arc::new(
        FakeAgent::new()
            .then(ralph::agent::Script::new().ask("A trailing newline?"))
            .then(writes("hello\n")),
    );
    let threads = threads(dir.path(), &agent, true, 3);
    let id = finalized(&threads, SPEC);
    let thread = threads.thread(&id);
    let steering = thread.steering().from("ana");
    assert_eq!(steering.subject(), Some(id.as_str()));
    steering.tell("Keep it short.").unwrap();

    let record = thread.start().await.unwrap();
    assert_eq!(record.phase.to_string(), "Paused", "{record:?}");
    let waiting = steering.questions();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert_eq!(waiting[0].1, "A trailing newline?");
    assert!(steering.about("other").questions().is_empty());
    steering.answer("Yes, one.").unwrap();
    thread.resume().await.unwrap();

    let iterations: Vec<_> = agent
        .requests()
        .into_iter()
        .filter(|r| r.role == ralph::Role::Build)
        .collect();
    assert_eq!(iterations.len(), 2);
    let answered = &iterations[1].prompt;
    for part in ["A trailing newline?", "Yes, one.", "Keep it short."] {
        assert!(answered.contains(part), "{part:?}:\n{answered}");
    }
}

/// The workspace lock's note deleted during an iteration (here by the agent itself, as an
/// unconfined one could) is back before the next iteration's agent run starts: the second
/// iteration hangs, so only the check between iterations can have put it back.
#[tokio::test]
async fn a_lock_note_deleted_during_an_iteration_is_back_before_the_next() {
    let dir = repo().await;
    let agent = Arc::new(
        FakeAgent::new()
            .then(
                Script::new()
                    .remove(".ralph/ralph.lock")
                    .answer("Not done yet."),
            )
            .then(Script::new().hang()),
    );
    let threads = threads(dir.path(), &agent, true, 3);
    let id = finalized(&threads, SPEC);
    let stop = threads.stop_token();
    let log = threads.run_dir(&format!("{id}-r2")).join("output.log");
    let look = crate::support::lock_note_back(dir.path(), || log.exists(), &stop);
    let handle = threads.thread(&id);
    let (thread, back) = tokio::join!(handle.start(), look);
    assert!(back, "the note is back before iteration 2");
    assert!(matches!(
        thread.unwrap().phase,
        Phase::Paused { iteration: 2, .. }
    ));
}
