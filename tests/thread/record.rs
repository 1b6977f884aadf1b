//! `thread.json`: the stored form, migration from version 0, corrupt and newer files,
//! atomic writes.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use crate::support::threads::{SPEC, as_an_earlier_ralph_wrote, finalized, repo, threads, writes};
use ralph::agent::FakeAgent;
use ralph::thread::Phase;
use ralph::thread::ThreadError;
use ralph::thread::record::{self, SCHEMA_VERSION};

fn thread_json(threads: &ralph::thread::Threads, id: &str) -> std::path::PathBuf {
    threads
        .state_dir()
        .join("threads")
        .join(id)
        .join("thread.json")
}

#[tokio::test]
async fn thread_json_has_a_version_and_a_tagged_phase_and_no_temp_files() {
    let dir = repo().await;
    let agent = Arc::new(FakeAgent::new().then(writes("hello\n")));
    let threads = threads(dir.path(), &agent, false, 3);
    let id = finalized(&threads, SPEC);
    threads.thread(&id).start().await.unwrap();
    threads.thread(&id).run().await.unwrap();
    let path = thread_json(&threads, &id);
    let value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(value["schema_version"], SCHEMA_VERSION);
    assert_eq!(value["phase"], serde_json::json!({"type": "Implemented"}));
    assert_eq!(value["current_run_id"], format!("{id}-r1"));
    assert_eq!(value["baseline"]["branch"], "main");
    let names: Vec<String> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
    let run = record::load_run(&threads.run_dir(&format!("{id}-r1")).join("run.json")).unwrap();
    assert_eq!((run.iteration, run.role.as_str()), (1, "build"));
    assert_eq!(run.outcome.as_deref(), Some("completed: claimed done"));
    assert_eq!(
        std::fs::read_to_string(threads.state_dir().join("active_thread")).unwrap(),
        format!("{id}\n")
    );
}

#[tokio::test]
async fn a_version_0_file_is_migrated_on_load() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Arc::new(FakeAgent::new());
    let threads = threads(dir.path(), &agent, false, 3);
    let path = thread_json(&threads, "1-greeter");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/thread/thread-v0.json"
        ),
        &path,
    )
    .unwrap();
    let thread = threads.get("1-greeter").unwrap();
    assert_eq!(thread.schema_version, SCHEMA_VERSION);
    assert_eq!(
        thread.phase,
        Phase::Paused {
            iteration: 3,
            criteria_passing: 0,
            criteria_total: 0
        }
    );
    assert_eq!(thread.spec_version, 2);
    assert_eq!(thread.baseline_branch(), Some("main"));
    // Migrated threads keep working: a paused one can be abandoned, and is saved as v1.
    threads.thread("1-greeter").abandon().await.unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(r#""schema_version": 1"#) && text.contains(r#""type": "Abandoned""#));
}

#[tokio::test]
async fn a_malformed_file_names_the_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Arc::new(FakeAgent::new());
    let threads = threads(dir.path(), &agent, false, 3);
    let id = threads.create("Greeter", SPEC).unwrap().id;
    let path = thread_json(&threads, &id);
    as_an_earlier_ralph_wrote(&path, "{\n  \"schema_version\": 1,\n  \"id\": oops\n}\n");
    let err = threads.get(&id).unwrap_err();
    assert!(matches!(err, ThreadError::Corrupt { .. }));
    let message = err.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("line 3 column"), "{message}");
}

#[tokio::test]
async fn a_newer_schema_version_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Arc::new(FakeAgent::new());
    let threads = threads(dir.path(), &agent, false, 3);
    let id = threads.create("Greeter", SPEC).unwrap().id;
    let path = thread_json(&threads, &id);
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace(r#""schema_version": 1"#, r#""schema_version": 7"#);
    as_an_earlier_ralph_wrote(&path, &text);
    let message = threads.get(&id).unwrap_err().to_string();
    assert!(
        message.contains("schema_version 7") && message.contains("upgrade ralph"),
        "{message}"
    );
}

#[tokio::test]
async fn spec_revisions_are_never_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Arc::new(FakeAgent::new());
    let threads = threads(dir.path(), &agent, false, 3);
    let id = threads.create("Greeter", SPEC).unwrap().id;
    // A stale record pointing at an older revision cannot overwrite the next one.
    std::fs::write(threads.spec_path(&id, 2), "someone else's v2").unwrap();
    let err = threads.thread(&id).edit_spec("new").unwrap_err();
    assert!(err.to_string().contains("v2.md"), "{err}");
    assert_eq!(threads.get(&id).unwrap().spec_version, 1);
}

/// Every `runs/<run-id>/run.json` there is, by run id: its bytes and its inode (an atomic
/// rewrite, even of the same bytes, makes a new file).
#[cfg(unix)]
fn run_records(
    threads: &ralph::thread::Threads,
    id: &str,
) -> std::collections::BTreeMap<String, (Vec<u8>, u64)> {
    use std::os::unix::fs::MetadataExt;
    let runs = threads.run_dir(&format!("{id}-r1"));
    std::fs::read_dir(runs.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|entry| {
            let path = entry.path().join("run.json");
            let inode = std::fs::metadata(&path).unwrap().ino();
            let name = entry.file_name().to_string_lossy().into_owned();
            (name, (std::fs::read(&path).unwrap(), inode))
        })
        .collect()
}

/// Audit row 001-R65: seed 001 keeps run records append-only. Each agent run adds its own
/// record, written when the run opens and once more when it closes; a closed record is
/// never written again, whatever runs after it (docs/seed-differences.md).
#[cfg(unix)]
#[tokio::test]
async fn a_closed_run_record_is_never_written_again() {
    let dir = repo().await;
    let agent = Arc::new(
        FakeAgent::new()
            .then(writes("goodbye\n"))
            .then(writes("hello\n"))
            .then(writes("hello\n")),
    );
    let threads = threads(dir.path(), &agent, true, 3);
    let id = finalized(&threads, SPEC);
    threads.thread(&id).start().await.unwrap();
    let before = run_records(&threads, &id);
    assert_eq!(before.len(), 2, "{:?}", before.keys());
    for run in before.keys() {
        assert!(
            threads.run_record(run).unwrap().ended_at.is_some(),
            "{run} closed"
        );
    }

    threads
        .thread(&id)
        .send_back("say it louder")
        .await
        .unwrap();

    let after = run_records(&threads, &id);
    assert!(after.len() > before.len(), "{:?}", after.keys());
    for (run, record) in &before {
        assert_eq!(after.get(run), Some(record), "{run} was written again");
    }
}
