//! ralph trusts only the thread records it wrote: `thread.json` and each `run.json` are
//! sealed; one changed by anyone else (an agent in the loop, say) is refused, naming the
//! file, until `Threads::repair` puts back the last version ralph wrote (or, with `adopt`,
//! keeps the change as the person's own). A record an earlier ralph wrote, unsealed, is
//! adopted once, with a notice.

use std::sync::Arc;

use crate::support::Recorder;
use crate::support::threads::{SPEC, as_an_earlier_ralph_wrote, finalized, repo, threads, writes};
use ralph::Event;
use ralph::agent::{FakeAgent, Script};
use ralph::store::Repair;
use ralph::thread::{PhaseKind, ThreadError};

#[tokio::test]
async fn a_record_edited_in_place_is_refused_until_repair_puts_it_back() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new());
    let threads = threads(dir.path(), &agent, false, 3);
    let id = finalized(&threads, SPEC);
    let path = threads
        .state_dir()
        .join("threads")
        .join(&id)
        .join("thread.json");
    let sealed = std::fs::read_to_string(&path).unwrap();
    // Same length: only the seal tells.
    std::fs::write(&path, sealed.replace("Finalized", "Abandoned")).unwrap();

    let err = threads.get(&id).unwrap_err();

    assert!(
        matches!(&err, ThreadError::NotWritten { path: p, .. } if *p == path),
        "{err:?}"
    );
    assert!(err.to_string().contains("ralph repair"), "{err}");
    let repairs = threads.repair(false).await.unwrap();
    let [Repair::Restored { copy, .. }] = &repairs[..] else {
        panic!("{repairs:?}")
    };
    assert!(std::fs::read_to_string(copy).unwrap().contains("Abandoned"));
    assert_eq!(threads.get(&id).unwrap().phase.kind(), PhaseKind::Finalized);
    assert!(threads.repair(false).await.unwrap().is_empty());
}

#[tokio::test]
async fn adopt_keeps_a_persons_edit_as_theirs() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new());
    let threads = threads(dir.path(), &agent, false, 3);
    let id = threads.create("Greeter", SPEC).unwrap().id;
    let path = threads
        .state_dir()
        .join("threads")
        .join(&id)
        .join("thread.json");
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("\"title\": \"Greeter\"", "\"title\": \"Hello\"");
    std::fs::write(&path, text).unwrap();

    let repairs = threads.repair(true).await.unwrap();

    assert!(
        matches!(&repairs[..], [Repair::Resealed { .. }]),
        "{repairs:?}"
    );
    assert_eq!(threads.get(&id).unwrap().title, "Hello");
}

#[tokio::test]
async fn a_record_an_earlier_ralph_wrote_is_adopted_once_with_a_notice() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new());
    let events = Recorder::default();
    let threads = threads(dir.path(), &agent, false, 3).observer(events.clone());
    let id = threads.create("Greeter", SPEC).unwrap().id;
    let path = threads
        .state_dir()
        .join("threads")
        .join(&id)
        .join("thread.json");
    as_an_earlier_ralph_wrote(&path, &std::fs::read_to_string(&path).unwrap());

    assert_eq!(threads.get(&id).unwrap().title, "Greeter");
    assert!(events.events().iter().any(|e| matches!(e,
        Event::StateRepaired { note } if note.contains("written by an earlier ralph"))));
    // Its next save seals it: then an unsealed copy is refused.
    threads.thread(&id).finalize().unwrap();
    assert!(std::fs::read_to_string(&path).unwrap().contains("\"seal\""));
    std::fs::write(&path, "{\"id\": \"1-greeter\"}\n").unwrap();
    assert!(matches!(
        threads.get(&id).unwrap_err(),
        ThreadError::NotWritten { .. }
    ));
}

/// The lying agent: during its iteration it overwrites the thread's record with one that
/// says the work is done. The loop stops at its next save; the next call refuses the file;
/// after a repair the thread goes on from what ralph recorded, and the work gets done.
#[tokio::test]
async fn an_agent_that_forges_the_threads_record_stops_the_loop_and_is_rolled_back() {
    let dir = repo().await;
    let forged = r#"{"schema_version": 1, "id": "1-greeter", "title": "Greeter", "phase": {"type": "Done", "data": {"commit": null}}, "spec_version": 1}"#;
    let agent = Arc::new(
        FakeAgent::new()
            .then(
                Script::new()
                    .write(".ralph/threads/1-greeter/thread.json", forged)
                    .answer("All done.\nSHIPPED"),
            )
            .then(writes("hello\n")),
    );
    let threads = threads(dir.path(), &agent, true, 3);
    let id = finalized(&threads, SPEC);

    let err = threads.thread(&id).start().await.unwrap_err();

    assert!(
        matches!(
            err,
            ThreadError::Changed { .. } | ThreadError::NotWritten { .. }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("thread.json"), "{err}");
    assert!(matches!(
        threads.get(&id).unwrap_err(),
        ThreadError::NotWritten { .. }
    ));
    threads.repair(false).await.unwrap();
    let record = threads.get(&id).unwrap();
    assert_ne!(record.phase.kind(), PhaseKind::Done, "the forgery is gone");

    let record = threads.thread(&id).resume().await.unwrap();

    assert_eq!(record.phase.kind(), PhaseKind::PendingReview);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(),
        "hello\n"
    );
}
