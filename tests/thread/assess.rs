//! Assessing (seed 001): the AI review of a spec, its feedback kept in the thread, back to
//! Drafting on issues, "ready to finalize" otherwise, and never a finalize of its own.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use crate::support::threads::{SPEC, repo, threads};
use ralph::agent::{FakeAgent, Role, Script};
use ralph::thread::ThreadError;
use ralph::thread::{Phase, PhaseKind};
use serde_json::json;

fn issues() -> serde_json::Value {
    json!({"ready": false, "issues": [
        {"criterion": "it says hello: `grep -q hello hello.txt`", "problem": "which greeting?",
         "suggestion": "name the exact text"},
        {"section": "Greeter", "problem": "no error case", "suggestion": "say what happens without a name"}
    ]})
}

fn ready() -> serde_json::Value {
    json!({"ready": true, "issues": []})
}

#[tokio::test]
async fn issues_send_the_thread_back_to_drafting_with_the_feedback_kept() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new().on_role(Role::Assess, Script::new().json(issues())));
    let threads = threads(dir.path(), &agent, false, 3);
    let id = threads.create("Greeter", SPEC).unwrap().id;

    let thread = threads.thread(&id).assess().await.unwrap();
    assert_eq!(thread.phase, Phase::Drafting, "AI found issues");
    let assessment = thread.assessment.clone().unwrap();
    assert!(!assessment.ready);
    assert_eq!(assessment.spec_version, 1);
    assert_eq!(assessment.issues.len(), 2);
    assert_eq!(assessment.issues[1].subject(), r#"section "Greeter""#);
    assert_eq!(
        assessment.recommendation(),
        "revise the spec: 2 issue(s) found"
    );
    // Saved, and kept through Drafting.
    assert_eq!(threads.get(&id).unwrap(), thread);

    // A read-only structured review of this spec, recorded as a run.
    let requests = agent.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].role, Role::Assess);
    assert_eq!(requests[0].schema, ralph::answer_schema(Role::Assess));
    assert!(!Role::Assess.may_write());
    for part in [
        "Write hello.txt saying hello.",
        "Clarity",
        "Testability",
        "Completeness",
        "promise tag",
    ] {
        assert!(requests[0].prompt.contains(part), "{part}");
    }
    let run = threads.run_record(&assessment.run_id).unwrap();
    assert_eq!(run.role, "assess", "{run:?}");
}

#[tokio::test]
async fn no_issues_stays_assessing_recommending_finalize_which_stays_the_persons_call() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new().on_role(Role::Assess, Script::new().json(ready())));
    // Even quick mode does not finalize for the person.
    let threads = threads(dir.path(), &agent, true, 3);
    let id = threads.create("Greeter", SPEC).unwrap().id;

    let thread = threads.thread(&id).assess().await.unwrap();
    assert_eq!(thread.phase, Phase::Assessing);
    let assessment = thread.assessment.unwrap();
    assert!(assessment.ready && assessment.issues.is_empty());
    assert_eq!(assessment.recommendation(), "ready to finalize");
    let refused = threads.thread(&id).start().await.unwrap_err();
    assert!(
        refused.to_string().contains("from Assessing to Preflight"),
        "{refused}"
    );
    // Assessing → Finalized: the person approves after reviewing the feedback.
    assert_eq!(
        threads.thread(&id).finalize().unwrap().phase,
        Phase::Finalized
    );
    // Assessing is only entered from Drafting (or re-run there).
    let refused = threads.thread(&id).assess().await.unwrap_err();
    assert!(
        refused.to_string().contains("from Finalized to Assessing"),
        "{refused}"
    );
}

#[tokio::test]
async fn an_invalid_answer_is_retried_once_with_the_error_shown() {
    let dir = repo().await;
    let agent = Arc::new(
        FakeAgent::new()
            .on_role(
                Role::Assess,
                Script::new().json(json!({"ready": false, "issues": []})),
            )
            .on_role(Role::Assess, Script::new().json(ready())),
    );
    let threads = threads(dir.path(), &agent, false, 3);
    let id = threads.create("Greeter", SPEC).unwrap().id;
    let thread = threads.thread(&id).assess().await.unwrap();
    assert_eq!(thread.phase, Phase::Assessing);
    let requests = agent.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests[1]
            .prompt
            .contains("## Your Previous Answer Was Invalid")
            && requests[1]
                .prompt
                .contains("`ready` is false: name at least one issue"),
        "{}",
        requests[1].prompt
    );
}

#[tokio::test]
async fn an_unusable_or_failed_assessment_is_an_error_and_the_thread_stays_assessing() {
    let dir = repo().await;
    let agent = Arc::new(
        FakeAgent::new()
            .on_role(Role::Assess, Script::new().answer("Looks fine to me!"))
            .on_role(
                Role::Assess,
                Script::new().json(json!({"ready": true, "verdict": "ok"})),
            )
            .on_role(Role::Assess, Script::new().fail("the model is overloaded")),
    );
    let threads = threads(dir.path(), &agent, false, 3);
    let id = threads.create("Greeter", SPEC).unwrap().id;

    let err = threads.thread(&id).assess().await.unwrap_err();
    assert!(matches!(err, ThreadError::Assessment { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("unusable twice")
            && message.contains("verdict")
            && message.contains("stays Assessing"),
        "{message}"
    );
    let thread = threads.get(&id).unwrap();
    assert_eq!(thread.phase, Phase::Assessing);
    assert_eq!(thread.assessment, None);

    // Run again from Assessing: the agent fails this time.
    let err = threads.thread(&id).assess().await.unwrap_err();
    assert!(err.to_string().contains("the model is overloaded"), "{err}");
    assert_eq!(threads.get(&id).unwrap().phase.kind(), PhaseKind::Assessing);
}

#[tokio::test]
async fn a_spec_preflight_would_refuse_is_never_called_ready() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new().on_role(Role::Assess, Script::new().json(ready())));
    let threads = threads(dir.path(), &agent, false, 3);
    let spec = "# Greeter\n\n## Acceptance Criteria\n\n- [ ] says hello\n";
    let id = threads.create("Greeter", spec).unwrap().id;
    let thread = threads.thread(&id).assess().await.unwrap();
    assert_eq!(thread.phase, Phase::Drafting);
    let assessment = thread.assessment.unwrap();
    assert!(!assessment.ready);
    assert!(
        assessment.issues[0].problem.contains("no promise tag"),
        "{:?}",
        assessment.issues
    );
    assert!(
        agent.requests()[0]
            .prompt
            .contains("Problems ralph Found Itself")
    );
}
