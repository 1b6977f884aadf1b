//! Drafting as a conversation (audit rows 001-R9, 001-R63): the person talks with a
//! read-only agent about the spec, every turn is kept in the thread's conversation log, and
//! a reply that revises the spec writes its next revision.

#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::sync::Arc;

use crate::support::threads::{SPEC, finalized, repo, threads};
use ralph::agent::{FakeAgent, Role, Script};
use ralph::thread::{Phase, ThreadError};
use serde_json::json;

const REVISED: &str = "# Greeter\n\nWrite hello.txt saying exactly `hello, world`.\n\n<promise>SHIPPED</promise>\n\n## Acceptance Criteria\n\n- [ ] it says hello, world: `grep -qx 'hello, world' hello.txt`\n";

#[tokio::test]
async fn a_conversation_revises_the_spec_and_keeps_every_turn() {
    let dir = repo().await;
    let agent = Arc::new(
        FakeAgent::new()
            .on_role(
                Role::Draft,
                Script::new().json(json!({"reply": "Which greeting exactly?"})),
            )
            .on_role(
                Role::Draft,
                Script::new()
                    .json(json!({"reply": "Pinned the text and its check.", "spec": REVISED})),
            ),
    );
    let threads = threads(dir.path(), &agent, false, 3);
    let id = threads.create("Greeter", SPEC).unwrap().id;

    let first = threads
        .thread(&id)
        .discuss("Is this spec clear?")
        .await
        .unwrap();
    assert_eq!(first.by, "agent");
    assert_eq!(first.text, "Which greeting exactly?");
    assert!(!first.revised);
    assert_eq!(first.spec_version, 1);

    let second = threads
        .thread(&id)
        .discuss("It should say `hello, world`.")
        .await
        .unwrap();
    assert!(second.revised, "{second:?}");
    assert_eq!(second.spec_version, 2);
    let thread = threads.get(&id).unwrap();
    assert_eq!(
        thread.phase,
        Phase::Drafting,
        "finalizing stays the person's call"
    );
    assert_eq!(thread.spec_version, 2);
    assert_eq!(threads.spec_text(&thread).unwrap(), REVISED);
    assert_eq!(
        std::fs::read_to_string(threads.spec_path(&id, 1)).unwrap(),
        SPEC,
        "revisions are never rewritten"
    );

    let turns = threads.thread(&id).conversation().unwrap();
    let said: Vec<(&str, &str)> = turns
        .iter()
        .map(|t| (t.by.as_str(), t.text.as_str()))
        .collect();
    assert_eq!(
        said,
        [
            ("person", "Is this spec clear?"),
            ("agent", "Which greeting exactly?"),
            ("person", "It should say `hello, world`."),
            ("agent", "Pinned the text and its check."),
        ]
    );
    assert!(turns[3].run_id.is_some());
    let log = threads.thread(&id).conversation_path();
    assert!(log.ends_with(format!("threads/{id}/spec/conversation.jsonl")));

    // A read-only structured run that sees the spec, the conversation and the message.
    let requests = agent.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests
            .iter()
            .all(|r| r.role == Role::Draft && r.schema == ralph::answer_schema(Role::Draft))
    );
    assert!(!Role::Draft.may_write());
    let prompt = &requests[1].prompt;
    for part in [
        "Write hello.txt saying hello.",
        "**person:** Is this spec clear?",
        "**agent:** Which greeting exactly?",
        "## The Person Says\n\nIt should say `hello, world`.",
    ] {
        assert!(prompt.contains(part), "missing {part:?} in\n{prompt}");
    }
}

#[tokio::test]
async fn discussing_needs_drafting_and_a_failed_reply_keeps_the_message() {
    let dir = repo().await;
    let agent = Arc::new(
        FakeAgent::new()
            .on_role(Role::Draft, Script::new().answer("Sure, looks good!"))
            .on_role(Role::Draft, Script::new().json(json!({"reply": "  "}))),
    );
    let threads = threads(dir.path(), &agent, false, 3);
    let id = threads.create("Greeter", SPEC).unwrap().id;

    let err = threads
        .thread(&id)
        .discuss("Anything missing?")
        .await
        .unwrap_err();
    assert!(matches!(err, ThreadError::Discussion { .. }), "{err:?}");
    assert!(
        err.to_string().contains("unusable twice")
            && err.to_string().contains("your message is kept"),
        "{err}"
    );
    let turns = threads.thread(&id).conversation().unwrap();
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].text, "Anything missing?");
    assert_eq!(threads.get(&id).unwrap().spec_version, 1);

    let other = finalized(&threads, SPEC);
    let refused = threads
        .thread(&other)
        .discuss("one more thing")
        .await
        .unwrap_err();
    assert!(
        matches!(refused, ThreadError::WrongPhase { .. }),
        "{refused:?}"
    );
    assert!(threads.thread(&other).conversation().unwrap().is_empty());
}

#[tokio::test]
async fn a_torn_last_turn_is_left_out_and_a_bad_one_is_named_by_file_and_line() {
    let dir = repo().await;
    let agent = Arc::new(
        FakeAgent::new().on_role(Role::Draft, Script::new().json(json!({"reply": "Noted."}))),
    );
    let threads = threads(dir.path(), &agent, false, 3);
    let id = threads.create("Greeter", SPEC).unwrap().id;
    threads.thread(&id).discuss("Hello").await.unwrap();
    let log = threads.thread(&id).conversation_path();

    // A crash mid-append leaves a line without its newline.
    #[allow(clippy::disallowed_methods)] // the test tears the journal as a crash would
    let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    file.write_all(br#"{"at":"2026-01-01T00:00:00Z","by":"per"#)
        .unwrap();
    assert_eq!(threads.thread(&id).conversation().unwrap().len(), 2);

    file.write_all(b"\n").unwrap();
    let err = threads.thread(&id).conversation().unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("conversation.jsonl") && message.contains("line 3"),
        "{message}"
    );
}
