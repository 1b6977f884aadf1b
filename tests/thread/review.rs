//! Review (seed 001): "Approve Review … This is what will be committed", and "Any code
//! changes require re-review": `approve` records the approved tree, and `commit` commits
//! only that tree; `send_back` carries the reviewer's words.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use crate::support::threads::{SPEC, finalized, repo, threads, writes};
use ralph::agent::FakeAgent;
use ralph::thread::{Phase, PhaseKind, ThreadError};
use ralph_loop_core::git::Git;

#[tokio::test]
async fn an_edit_after_approval_is_not_committed_unreviewed() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new().then(writes("hello\n")));
    let threads = threads(dir.path(), &agent, true, 2);
    let id = finalized(&threads, SPEC);
    threads.thread(&id).start().await.unwrap();
    let approved = threads.thread(&id).approve().await.unwrap();
    assert_eq!(approved.phase.kind(), PhaseKind::ReadyToCommit);
    assert!(approved.approved_tree.is_some());
    let git = Git::new(dir.path());
    let head = git.head().await.unwrap();

    // After the approval: an edit, and a new file.
    std::fs::write(dir.path().join("hello.txt"), "hello, unreviewed\n").unwrap();
    std::fs::write(dir.path().join("extra.txt"), "more\n").unwrap();
    let err = threads.thread(&id).commit(None).await.unwrap_err();

    let ThreadError::ChangedSinceApproval { paths, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(paths, &["extra.txt", "hello.txt"]);
    assert!(err.to_string().contains("back in PendingReview"), "{err}");
    assert_eq!(git.head().await.unwrap(), head, "nothing was committed");
    let back = threads.get(&id).unwrap();
    assert_eq!(
        back.phase,
        Phase::PendingReview {
            recommend_approve: false
        }
    );

    // Reviewed and approved again, the same tree is committed.
    threads.thread(&id).approve().await.unwrap();
    let done = threads.thread(&id).commit(None).await.unwrap();
    assert_eq!(done.phase.kind(), PhaseKind::Done);
    let committed = std::process::Command::new("git")
        .args(["show", "HEAD:hello.txt"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&committed.stdout),
        "hello, unreviewed\n"
    );
}

/// ralph's own state changes all the time (the record of the approval itself): it is no
/// change to the work under review.
#[tokio::test]
async fn ralphs_own_state_is_not_a_change_since_approval() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new().then(writes("hello\n")));
    let threads = threads(dir.path(), &agent, true, 2);
    let id = finalized(&threads, SPEC);
    threads.thread(&id).start().await.unwrap();
    threads.thread(&id).approve().await.unwrap();
    std::fs::write(threads.state_dir().join("notes.txt"), "ralph's\n").unwrap();
    let done = threads.thread(&id).commit(None).await.unwrap();
    assert_eq!(done.phase.kind(), PhaseKind::Done);
}

#[tokio::test]
async fn send_back_needs_the_reviewers_words() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new().then(writes("hello\n")));
    let threads = threads(dir.path(), &agent, true, 2);
    let id = finalized(&threads, SPEC);
    threads.thread(&id).start().await.unwrap();
    let err = threads.thread(&id).send_back("  \n").await.unwrap_err();
    assert!(matches!(err, ThreadError::NoFeedback { .. }), "{err:?}");
    assert_eq!(
        threads.get(&id).unwrap().phase.kind(),
        PhaseKind::PendingReview
    );
    assert_eq!(agent.requests().len(), 1, "no agent ran");
}
