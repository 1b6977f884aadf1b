//! Build mode keeps specs apart (issue "history, board, spend and spec agree", item 8): a
//! spec that blocks has its uncommitted work set aside in a stash entry named after it and
//! its task before another spec starts, so each spec's commit holds only its own files; an
//! unblock with `restore` gives the work back, and the spec is built and committed with it.

#![cfg(unix)]
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use crate::support::specs::*;
use ralph::agent::Script;
use ralph::specs::Status;
use ralph::{FakeAgent, Role, SpecsOutcome};

const SPEC_A: &str = "# Alpha\n\nWrite a.txt.\n";
const SPEC_B: &str = "# Beta\n\nWrite b.txt.\n";

/// The files a commit changed.
fn files_of(dir: &std::path::Path, commit: &str) -> Vec<String> {
    let mut files: Vec<String> = git(dir, &["show", "--name-only", "--format=", commit])
        .lines()
        .map(str::to_owned)
        .collect();
    files.sort();
    files
}

#[tokio::test]
async fn a_blocked_specs_work_is_set_aside_and_given_back_when_unblocked() {
    let ws = workspace(&[("specs/a.md", SPEC_A), ("specs/b.md", SPEC_B)]);
    let dir = ws.path();
    implementation(
        dir,
        &[("a", 1, &["Write a.txt"]), ("b", 2, &["Write b.txt"])],
    );
    let blocking = Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "a", planner("# Plan: a"))
            .on(Role::Planner, "b", planner("# Plan: b"))
            .on(
                Role::Build,
                "a-1",
                Script::new()
                    .write("a.txt", "half of a\n")
                    .answer("stuck\n<TASK_BLOCKED reason=\"needs a decision on a.txt\">"),
            )
            .on(
                Role::Build,
                "b-1",
                Script::new()
                    .write("b.txt", "b\n")
                    .answer("ok\n<TASK_DONE>"),
            )
            .on(Role::Verify, "b", accept()),
    );
    let events = crate::support::Recorder::default();
    let ralph = ralph(dir, blocking, events.clone(), vec![]);
    let outcome = ralph.build_specs().await.unwrap();
    // The end event carries the scope's spend in every mode (library-user F1).
    let finished = events.of_kind("finished");
    assert_eq!(finished[0]["spent_tokens"], 0, "{finished:?}");
    assert!(
        matches!(&outcome, SpecsOutcome::Blocked { spec, .. } if spec == "a"),
        "{outcome:?}"
    );
    // Spec b's commit holds b's work only: a's half is not in it.
    assert_eq!(commits(dir)[0], "Spec b");
    let in_b = files_of(dir, "HEAD");
    assert!(in_b.contains(&"b.txt".to_owned()), "{in_b:?}");
    assert!(!in_b.iter().any(|f| f == "a.txt"), "{in_b:?}");
    // a's work is in a stash entry named after a and its task, not in the tree.
    assert!(!dir.join("a.txt").exists());
    let stashes = git(dir, &["stash", "list", "--format=%s"]);
    assert!(
        stashes.contains("ralph: a/a-1's unfinished work (set aside while a is blocked)"),
        "{stashes}"
    );

    let given_back = ralph.unblock_spec_task("a", "a-1", true).await.unwrap();
    assert!(
        given_back
            .unwrap()
            .starts_with("ralph: a/a-1's unfinished work")
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("a.txt")).unwrap(),
        "half of a\n"
    );
    assert_eq!(git(dir, &["stash", "list"]), "", "the entry is popped");
    let task = &load(dir).specs[0].tasks[0];
    assert_eq!((task.status, task.attempts), (Status::Pending, 0));

    // The next build takes the given-back work up as a's and commits it with a.
    let finishing = Arc::new(
        FakeAgent::new()
            .on(
                Role::Build,
                "a-1",
                Script::new()
                    .write("a.txt", "half of a\nthe rest of a\n")
                    .answer("ok\n<TASK_DONE>"),
            )
            .on(Role::Verify, "a", accept()),
    );
    let ralph = crate::support::specs::ralph(
        dir,
        finishing.clone(),
        crate::support::Recorder::default(),
        vec![],
    );
    let outcome = ralph.build_specs().await.unwrap();
    assert!(
        matches!(outcome, SpecsOutcome::Complete { .. }),
        "{outcome:?}"
    );
    let prompt = &prompts(&finishing, Role::Build)[0].1;
    assert!(
        prompt.contains("needs a decision on a.txt"),
        "the failure is carried: {prompt}"
    );
    assert_eq!(commits(dir)[..2], ["Spec a", "Spec b"]);
    let in_a = files_of(dir, "HEAD");
    assert!(in_a.contains(&"a.txt".to_owned()), "{in_a:?}");
    assert!(!in_a.iter().any(|f| f == "b.txt"), "{in_a:?}");
    assert_eq!(git(dir, &["status", "--porcelain"]), "");
}

#[tokio::test]
async fn unblocking_a_task_that_is_not_blocked_changes_nothing() {
    let ws = workspace(&[("specs/a.md", SPEC_A)]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["Write a.txt"])]);
    let ralph = ralph(
        dir,
        Arc::new(FakeAgent::new()),
        crate::support::Recorder::default(),
        vec![],
    );
    let before = std::fs::read_to_string(dir.join("implementation.json")).unwrap();
    let err = ralph
        .unblock_spec_task("a", "a-1", false)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not blocked"), "{err}");
    let err = ralph
        .unblock_spec_task("a", "a-9", false)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("a-1"),
        "names the tasks it has: {err}"
    );
    let err = ralph
        .unblock_spec_task("zz", "a-1", false)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("zz"), "{err}");
    assert_eq!(
        std::fs::read_to_string(dir.join("implementation.json")).unwrap(),
        before
    );
}
