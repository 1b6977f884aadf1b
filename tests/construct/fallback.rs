//! A fallback chain in the construct loop (issue: more agents): the first agent is rate
//! limited, the next one takes the task, and once the reset time passes the first is used
//! again. Each choice is an event with its reason.

use super::*;
use ralph::agent::{AgentEvent, AgentExit, Fallback};

#[tokio::test]
async fn a_rate_limited_agent_hands_the_task_to_the_next_and_is_used_again_after_its_reset() {
    let dir = workspace(SPEC);
    let first = Arc::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                tasks(&[
                    ("Write a.txt", "a.txt exists"),
                    ("Write b.txt", "b.txt exists"),
                ]),
            )
            // Rate limited on t-1 for a second.
            .on_attempt(Role::Build, "t-1", 1, Script::new().rate_limit(1))
            .on(
                Role::Build,
                "t-2",
                Script::new()
                    .write("b.txt", "b\n")
                    .answer("Wrote b.txt.\n<TASK_DONE>"),
            )
            .always(Role::Verify, accept("exists"))
            .always(Role::GapAnalysis, no_gaps()),
    );
    // The second agent takes t-1, slowly enough for the first one's limit to reset.
    let second = Arc::new(
        FakeAgent::new().on(
            Role::Build,
            "t-1",
            Script::new()
                .delay(Duration::from_millis(1500))
                .write("a.txt", "a\n")
                .answer("Wrote a.txt.\n<TASK_DONE>"),
        ),
    );
    let chain = Fallback::new()
        .agent("claude", first.clone())
        .agent("codex", second.clone());
    let events = Recorder::default();

    let outcome = Ralph::builder()
        .workspace(dir.path())
        .agent(chain)
        .store(MemoryStore::new())
        .observer(events.clone())
        .stage_timeout(Duration::from_secs(30))
        .build()
        .expect("ralph builds")
        .construct("spec.md")
        .await
        .expect("the run");

    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    let second_did: Vec<(Role, Option<String>)> = second
        .requests()
        .into_iter()
        .map(|r| (r.role, r.subject))
        .collect();
    assert_eq!(second_did, [(Role::Build, Some("t-1".to_owned()))]);
    let first_built: Vec<Option<String>> = first
        .requests()
        .into_iter()
        .filter(|r| r.role == Role::Build)
        .map(|r| r.subject)
        .collect();
    assert_eq!(
        first_built,
        [Some("t-1".to_owned()), Some("t-2".to_owned())],
        "the first agent was rate limited on t-1 and, its limit reset, built t-2"
    );
    let chosen: Vec<(String, String)> = events
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Agent {
                detail: AgentEvent::AgentChosen { agent, reason },
                ..
            } => Some((agent, reason)),
            _ => None,
        })
        .collect();
    assert_eq!(chosen.len(), 2, "{chosen:?}");
    assert_eq!(chosen[0].0, "codex");
    assert!(
        chosen[0].1.starts_with("claude is rate limited until "),
        "{chosen:?}"
    );
    assert_eq!(chosen[1].0, "claude");
    assert!(
        chosen[1].1.starts_with("its rate limit reset at "),
        "{chosen:?}"
    );
    assert!(dir.path().join("a.txt").exists() && dir.path().join("b.txt").exists());
    let recorded = ralph::Ralph::builder()
        .workspace(dir.path())
        .agent(FakeAgent::new())
        .store(MemoryStore::new())
        .build()
        .expect("ralph builds")
        .agent_choices()
        .expect("the record reads");
    let recorded: Vec<(&str, Option<&str>)> = recorded
        .iter()
        .map(|c| (c.agent.as_str(), c.subject.as_deref()))
        .collect();
    assert_eq!(
        recorded,
        [("codex", Some("t-1")), ("claude", Some("t-2"))],
        "the choices are kept for `ralph status`"
    );
}

#[tokio::test]
async fn a_transient_failure_passes_the_run_on_once_and_the_first_agent_is_tried_again_next() {
    let dir = workspace(SPEC);
    let first = FakeAgent::new()
        .then(Script::new().fail_with(
            "API server error (HTTP 500)",
            ralph::agent::FailureKind::Transient,
        ))
        .then(Script::new().answer("First again.\n<TASK_DONE>"));
    let second = FakeAgent::new().then(Script::new().answer("Second.\n<TASK_DONE>"));
    let chain = Fallback::new()
        .agent("claude", first)
        .agent("codex", second);
    let events = Recorder::default();
    let sink = events.clone();
    let request = || {
        let sink = sink.clone();
        AgentRequest::new(Role::Build, "p", dir.path()).on_event(
            move |detail: ralph::agent::AgentEvent| {
                ralph::Observer::on_event(
                    &sink,
                    &Event::Agent {
                        subject: None,
                        detail,
                    },
                )
            },
        )
    };

    let one = chain.run(request()).await.expect("a run");
    let two = chain.run(request()).await.expect("a run");

    assert_eq!(one.final_text, "Second.\n<TASK_DONE>");
    assert_eq!(two.final_text, "First again.\n<TASK_DONE>");
    let reasons: Vec<String> = events
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Agent {
                detail: AgentEvent::AgentChosen { agent, reason },
                ..
            } => Some(format!("{agent}: {reason}")),
            _ => None,
        })
        .collect();
    assert_eq!(
        reasons,
        [
            "codex: claude failed (API server error (HTTP 500))",
            "claude: it is first in the chain"
        ]
    );
}

#[tokio::test]
async fn an_agent_that_cannot_start_is_passed_over_and_a_chain_all_limited_waits_for_the_first_reset()
 {
    let dir = workspace(SPEC);
    let missing = ralph::agent::CommandAgent::new("missing", ["/no/such/agent-cli"]);
    let limited = FakeAgent::new().always(Role::Build, Script::new().rate_limit(3600));
    let chain = Fallback::new()
        .agent("missing", missing)
        .agent("limited", limited);

    let run = chain
        .run(AgentRequest::new(Role::Build, "p", dir.path()))
        .await
        .expect("a run");
    assert!(
        matches!(run.exit, ralph::AgentExit::RateLimited { .. }),
        "{run:?}"
    );
    assert!(
        chain.check().await.is_ok(),
        "one agent of the chain is there"
    );
}

#[tokio::test]
async fn an_unreachable_agent_hands_the_task_to_the_next_rests_and_the_attempt_is_not_counted() {
    let dir = workspace(SPEC);
    let first = Arc::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                tasks(&[("Write a.txt", "a.txt exists")]),
            )
            .on_attempt(
                Role::Build,
                "t-1",
                1,
                Script::new().fail_with(
                    "claude is unreachable: no successful API exchange for 1m, only connection errors; the last: connection refused",
                    ralph::agent::FailureKind::Unreachable,
                ),
            ),
    );
    let second = Arc::new(
        FakeAgent::new()
            .on(
                Role::Build,
                "t-1",
                Script::new()
                    .write("a.txt", "a\n")
                    .answer("Wrote a.txt.\n<TASK_DONE>"),
            )
            .always(Role::Verify, accept("exists"))
            .always(Role::GapAnalysis, no_gaps()),
    );
    let chain = Fallback::new()
        .agent("claude", first.clone())
        .agent("codex", second.clone());
    let events = Recorder::default();
    let store = MemoryStore::new();

    let outcome = Ralph::builder()
        .workspace(dir.path())
        .agent(chain)
        .store(store.clone())
        .observer(events.clone())
        .build()
        .expect("ralph builds")
        .construct("spec.md")
        .await
        .expect("the run");

    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    let chosen: Vec<(String, String)> = events
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Agent {
                detail: AgentEvent::AgentChosen { agent, reason },
                ..
            } => Some((agent, reason)),
            _ => None,
        })
        .collect();
    assert_eq!(chosen[0].0, "codex", "{chosen:?}");
    assert!(
        chosen[0].1.starts_with("claude is unreachable (")
            && chosen[0].1.contains("the last: connection refused"),
        "{chosen:?}"
    );
    assert!(events.of_kind("task_retry").is_empty());
    assert!(events.of_kind("decomposed").is_empty());
    assert_eq!(
        store.board().task("t-1").unwrap().attempts,
        1,
        "one attempt, codex's"
    );
    // Unreachable, claude rests: the verifier and the gap analysis went to codex without
    // spending the unreachable time on claude again.
    assert_eq!(first.requests().len(), 2, "investigate and the one build");
    assert_eq!(
        second.requests().len(),
        3,
        "the build, the verifier, the gap analysis"
    );
}

/// Every agent of a chain unreachable: the next run starts none of them while they rest,
/// and ends as unreachable (not "no agent can run"), naming each.
#[tokio::test]
async fn a_chain_whose_agents_all_rest_unreachable_ends_the_run_as_unreachable() {
    let unreachable = |name: &str| {
        Arc::new(FakeAgent::new().then(Script::new().fail_with(
            format!("{name} is unreachable: the last: connection refused"),
            ralph::agent::FailureKind::Unreachable,
        )))
    };
    let (a, b) = (unreachable("a"), unreachable("b"));
    let chain = Fallback::new().agent("a", a.clone()).agent("b", b.clone());
    let request = || AgentRequest::new(Role::Build, "x", ".");

    let first = chain.run(request()).await.unwrap();
    let second = chain.run(request()).await.unwrap();

    for run in [&first, &second] {
        assert!(
            matches!(
                &run.exit,
                AgentExit::Failed {
                    kind: ralph::agent::FailureKind::Unreachable,
                    ..
                }
            ),
            "{run:?}"
        );
    }
    let AgentExit::Failed { reason, .. } = &second.exit else {
        unreachable!()
    };
    assert!(
        reason.contains("a is unreachable (") && reason.contains("b is unreachable ("),
        "{reason}"
    );
    assert_eq!((a.requests().len(), b.requests().len()), (1, 1), "rested");
}
