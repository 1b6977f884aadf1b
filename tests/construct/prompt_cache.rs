//! Prompts the providers' caches can reuse: every prompt of a role in one run starts with the
//! same bytes (the role's instructions and the spec), and what differs from call to call (the
//! task, a retry's failure, then a person's guidance) comes after that stable part.

use std::collections::BTreeMap;

use super::parallel::repo;
use super::*;
use ralph::model::{Change, Task};

/// What a request's prompt must hold after its stable part, in this order, and never in it.
fn assert_call_part_last(request: &AgentRequest, own: &[&str]) {
    let (stable, rest) = request.prompt.split_at(request.stable_prefix);
    let mut from = 0;
    for part in own {
        assert!(
            !stable.contains(part),
            "{:?} {:?}: {part:?} is in the stable part:\n{stable}",
            request.role,
            request.subject
        );
        let at = rest[from..]
            .find(part)
            .unwrap_or_else(|| panic!("{part:?} not after {from} in:\n{rest}"));
        from += at + part.len();
    }
}

#[tokio::test]
async fn the_prompts_of_a_role_share_their_stable_part_and_end_with_the_call_s_own() {
    let dir = repo();
    let store = MemoryStore::new();
    let changes: Vec<Change> = (1..=3)
        .map(|i| {
            Change::Task(Task::new(format!("t-{i}"), format!("Task {i}")).with_acceptance("ok"))
        })
        .chain([seeded()])
        .collect();
    store.persist(&changes).await.expect("the board");
    ralph::steer::tell(dir.path(), "Keep every file one line.", None, Some("ana")).unwrap();
    // t-2 fails its first attempt (no marker) and is retried with the failure.
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Build, "t-1", done())
            .on_attempt(Role::Build, "t-2", 1, Script::new().answer("Not yet."))
            .on_attempt(Role::Build, "t-2", 2, done())
            .on(Role::Build, "t-3", done())
            .always(Role::Verify, accept("ok"))
            .always(Role::GapAnalysis, no_gaps()),
    );

    let outcome = Ralph::builder()
        .workspace(dir.path())
        .agent(agent.clone())
        .store(store)
        .build_concurrency(2)
        .build()
        .unwrap()
        .construct("spec.md")
        .await
        .unwrap();

    assert!(
        matches!(outcome, Outcome::Complete { accepted: 3, .. }),
        "{outcome:?}"
    );
    let mut by_role: BTreeMap<String, Vec<AgentRequest>> = BTreeMap::new();
    for request in agent.requests() {
        by_role
            .entry(request.role.to_string())
            .or_default()
            .push(request);
    }
    let builds = &by_role["build"];
    assert_eq!(builds.len(), 4, "three tasks and a retry");
    for (role, requests) in &by_role {
        let first = &requests[0];
        assert!(first.stable_prefix > 0, "{role}: no stable part");
        let stable = &first.prompt[..first.stable_prefix];
        assert!(
            stable.contains("Write done.txt"),
            "{role}: the spec: {stable}"
        );
        for request in requests {
            assert_eq!(
                &request.prompt[..request.stable_prefix],
                stable,
                "{role} {:?}: the stable part differs",
                request.subject
            );
            assert!(
                !stable.contains(".ralph/worktrees") && !stable.contains("ralph-task/"),
                "{role}: a work tree in the stable part"
            );
        }
    }
    for request in builds.iter().chain(&by_role["verify"]) {
        let id = request.subject.as_deref().unwrap();
        let mut own = vec![id];
        if request.role == Role::Build && request.attempt == 2 {
            own.push("## Previous Attempt Failed");
        }
        own.push("## Guidance from a person");
        own.push("Keep every file one line.");
        assert_call_part_last(request, &own);
    }
}
