//! `plan.jsonl`'s chain: a line ralph did not write is refused at load, naming the file and
//! the line, and `Store::repair` rolls it back (keeping a copy) or adopts it. Audit row 28:
//! an agent appended a forged "accepted" record, and the next run trusted it.

use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ralph::model::{Board, Change, Task, TaskId, TaskStatus};
use ralph::store::{Repair, StoreError};
use ralph::{JsonlStore, Store};

fn plan(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join(".ralph").join("plan.jsonl")
}

fn marker(path: &Path) -> PathBuf {
    path.with_file_name("plan.jsonl.chain")
}

fn task(id: &str, name: &str) -> Change {
    Change::Task(Task::new(id, name))
}

/// A fresh store at `path`, as the next start of ralph opens it.
fn open(path: &Path) -> JsonlStore {
    JsonlStore::open(path).expect("opening writes nothing")
}

/// Persists each of `steps` in turn (one change: one line; several: a batch) and returns
/// the board they make.
async fn persisted(path: &Path, steps: &[&[Change]]) -> Board {
    let store = open(path);
    for changes in steps {
        store.persist(changes).await.expect("persisted");
    }
    store.load().await.expect("loads")
}

#[allow(clippy::disallowed_methods)] // a person's hand-written line, as a test writes it
fn append(path: &Path, text: &str) {
    let mut file = fs::OpenOptions::new()
        .append(true)
        .open(path)
        .expect("plan.jsonl opens");
    file.write_all(text.as_bytes()).expect("appended");
}

/// Rewrites `from` to `to` (of the same length) in place: same inode, same length, as `dd
/// conv=notrunc` or an editor that writes through the file would.
fn rewrite_in_place(path: &Path, from: &str, to: &str) {
    assert_eq!(from.len(), to.len());
    let text = fs::read_to_string(path).expect("plan.jsonl");
    let at = text.find(from).expect("the text to rewrite");
    let mut file = fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("plan.jsonl opens for writing");
    file.seek(SeekFrom::Start(at as u64)).expect("seek");
    file.write_all(to.as_bytes()).expect("rewritten");
}

/// The load's refusal: the file and the line, and the message a person reads.
async fn refusal(path: &Path) -> (usize, String) {
    match open(path).load().await {
        Err(StoreError::NotWritten {
            path: file, line, ..
        }) if file == path => {
            let text = open(path).load().await.expect_err("refused").to_string();
            (line, text)
        }
        other => panic!("not refused as not written by ralph: {other:?}"),
    }
}

fn assert_says_what_to_do(message: &str, path: &Path, line: usize) {
    let at = format!("{}:{line}: not written by ralph", path.display());
    assert!(message.starts_with(&at), "{message}");
    assert!(
        message.contains("`ralph repair`") && message.contains("`ralph repair --adopt`"),
        "{message}"
    );
}

const FORGED: &str = "{\"t\":\"task\",\"id\":\"t-2\",\"name\":\"b\",\"s\":\"a\"}\n";

#[tokio::test]
async fn an_appended_forged_record_is_refused_and_rolled_back_into_a_copy() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    let before = persisted(&path, &[&[task("t-1", "a"), task("t-2", "b")]]).await;
    let honest = fs::read(&path).unwrap();
    append(&path, FORGED);

    let (line, message) = refusal(&path).await;
    assert_eq!(line, 4, "the batch header and two records come first");
    assert_says_what_to_do(&message, &path, 4);
    assert!(message.contains("carries no \"h\""), "{message}");
    // A store that cannot trust the file writes nothing to it.
    assert!(open(&path).persist(&[task("t-3", "c")]).await.is_err());

    let repair = open(&path).repair(false).await.unwrap();
    let Some(Repair::RolledBack {
        from_line,
        lines,
        copy,
        ..
    }) = &repair
    else {
        panic!("rolled back: {repair:?}")
    };
    assert_eq!((*from_line, *lines), (4, 1));
    assert_eq!(fs::read_to_string(copy).unwrap(), FORGED, "kept, not lost");
    let name = copy.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("plan.jsonl.removed-2"), "{name}");
    assert_eq!(copy.parent(), path.parent());
    let report = repair.as_ref().unwrap().to_string();
    assert!(
        report.contains("removed 1 line from line 4") && report.contains(&name),
        "{report}"
    );

    assert_eq!(fs::read(&path).unwrap(), honest);
    assert_eq!(open(&path).load().await.unwrap(), before);
    assert_eq!(open(&path).repair(false).await.unwrap(), None);
}

#[tokio::test]
async fn a_record_appended_without_its_newline_is_refused_not_dropped_as_torn() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    persisted(&path, &[&[task("t-1", "a")]]).await;
    append(&path, FORGED.trim_end());
    assert_eq!(refusal(&path).await.0, 2);
}

#[tokio::test]
async fn a_record_rewritten_in_place_is_refused_and_rolled_back_to_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    let first = persisted(&path, &[&[task("t-1", "a")]]).await;
    persisted(&path, &[&[task("t-2", "b")], &[task("t-3", "c")]]).await;
    let signed = fs::read_to_string(&path).unwrap();
    // t-2's own line, edited: the later lines' links stay as they were.
    rewrite_in_place(
        &path,
        r#""id":"t-2","name":"b","s":"p""#,
        r#""id":"t-2","name":"b","s":"a""#,
    );
    let edited = fs::read_to_string(&path).unwrap();
    assert_eq!(
        signed.lines().nth(2),
        edited.lines().nth(2),
        "line 3 as it was"
    );

    let (line, message) = refusal(&path).await;
    assert_eq!(line, 2);
    assert_says_what_to_do(&message, &path, 2);
    assert!(message.contains("does not match"), "{message}");

    let Some(Repair::RolledBack {
        from_line,
        lines,
        copy,
        ..
    }) = open(&path).repair(false).await.unwrap()
    else {
        panic!("rolled back")
    };
    assert_eq!((from_line, lines), (2, 2));
    let removed: String = edited.lines().skip(1).map(|l| format!("{l}\n")).collect();
    assert_eq!(fs::read_to_string(copy).unwrap(), removed);
    assert_eq!(open(&path).load().await.unwrap(), first);
}

#[tokio::test]
async fn a_line_deleted_from_the_middle_breaks_the_chain_at_the_next_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    persisted(
        &path,
        &[
            &[task("t-1", "a")],
            &[task("t-2", "b")],
            &[task("t-3", "c")],
        ],
    )
    .await;
    let text = fs::read_to_string(&path).unwrap();
    let kept: Vec<_> = text.lines().enumerate().filter(|(i, _)| *i != 1).collect();
    let without: String = kept.iter().map(|(_, l)| format!("{l}\n")).collect();
    fs::write(&path, without).unwrap();
    assert_eq!(refusal(&path).await.0, 2, "t-3's line now follows t-1's");
}

#[tokio::test]
async fn a_forged_record_inside_a_batch_rolls_back_the_whole_batch() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    let before = persisted(&path, &[&[task("t-1", "a")]]).await;
    persisted(
        &path,
        &[&[task("t-2", "b"), task("t-3", "c"), task("t-4", "d")]],
    )
    .await;
    rewrite_in_place(
        &path,
        r#""id":"t-3","name":"c","s":"p""#,
        r#""id":"t-3","name":"c","s":"a""#,
    );
    assert_eq!(refusal(&path).await.0, 4);

    let Some(Repair::RolledBack {
        from_line, lines, ..
    }) = open(&path).repair(false).await.unwrap()
    else {
        panic!("rolled back")
    };
    assert_eq!((from_line, lines), (2, 4), "from the batch's header on");
    let store = open(&path);
    assert_eq!(store.load().await.unwrap(), before);
    assert_eq!(store.recovered(), None, "no half batch left behind");
}

/// A same-length rewrite keeps the inode and the length; the modification time is what
/// tells. Caught at the next write, before anything is written over it.
#[tokio::test]
async fn a_same_length_rewrite_in_place_during_a_run_is_refused_at_the_next_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    let store = open(&path);
    store.persist(&[task("t-1", "a")]).await.unwrap();
    store.persist(&[task("t-2", "b")]).await.unwrap();
    // A file system whose clock ticks coarsely could stamp the rewrite with the time of
    // ralph's own last write: let it tick.
    std::thread::sleep(Duration::from_millis(30));
    rewrite_in_place(
        &path,
        r#""id":"t-2","name":"b","s":"p""#,
        r#""id":"t-2","name":"b","s":"a""#,
    );
    let edited = fs::read(&path).unwrap();

    let err = store.persist(&[task("t-3", "c")]).await.unwrap_err();
    assert!(matches!(err, StoreError::Changed { .. }), "{err:?}");
    assert!(err.to_string().contains("was modified"), "{err}");
    assert_eq!(fs::read(&path).unwrap(), edited, "nothing written over it");
    // The store's own writes did not count as changes: it wrote twice before this.
}

#[tokio::test]
async fn adopt_signs_a_hand_appended_seed_line_and_the_next_load_has_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    persisted(&path, &[&[task("t-1", "a")]]).await;
    append(
        &path,
        "{\"t\":\"task\",\"id\":\"t-9\",\"name\":\"x\",\"s\":\"p\"}\n",
    );
    append(
        &path,
        "\n{\"t\": \"issue\", \"id\": \"i-1\", \"text\": \"flaky\", \"s\": \"open\"}\n",
    );
    assert_eq!(refusal(&path).await.0, 2);

    let repair = open(&path).repair(true).await.unwrap();
    assert_eq!(
        repair,
        Some(Repair::Adopted {
            path: path.clone(),
            from_line: 2,
            lines: 2,
        }),
        "the blank line carries nothing"
    );
    assert!(repair.unwrap().to_string().contains("adopted 2 lines"));

    let store = open(&path);
    let board = store.load().await.unwrap();
    assert_eq!(store.recovered(), None);
    assert_eq!(
        board.task(TaskId::new("t-9")).unwrap().status,
        TaskStatus::Pending
    );
    assert_eq!(board.issues().len(), 1);
    store.persist(&[task("t-10", "y")]).await.unwrap();
    assert_eq!(open(&path).load().await.unwrap().tasks().len(), 3);
}

#[tokio::test]
async fn adopting_a_line_that_is_no_plan_record_names_it_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    persisted(&path, &[&[task("t-1", "a")]]).await;
    append(&path, "{\"t\":\"task\",\"id\":\"t-9\"}\n");
    let before = fs::read(&path).unwrap();
    let err = open(&path).repair(true).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Malformed { line: 2, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("cannot adopt"), "{err}");
    assert_eq!(fs::read(&path).unwrap(), before);
}

const LEGACY: &str = "{\"t\":\"task\",\"id\":\"t-1\",\"name\":\"a\",\"s\":\"p\"}\n\
                      {\"t\": \"task\", \"id\": \"t-2\", \"name\": \"b\", \"s\": \"done\"}\n";

#[tokio::test]
async fn an_earlier_ralphs_unsigned_file_is_adopted_once_then_signed_with_a_marker() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, LEGACY).unwrap();

    let store = open(&path);
    let board = store.load().await.unwrap();
    assert_eq!(board.tasks().len(), 2);
    let note = store.recovered().expect("the adoption is reported");
    assert!(
        note.contains("adopted") && note.contains("plan.jsonl"),
        "{note}"
    );
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        LEGACY,
        "loading writes nothing"
    );
    assert!(!marker(&path).exists());
    assert_eq!(
        store.repair(false).await.unwrap(),
        None,
        "nothing to repair"
    );

    store.persist(&[task("t-3", "c")]).await.unwrap();
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.lines().all(|l| l.contains(r#","h":""#)), "{text}");
    assert!(marker(&path).exists());
    let store = open(&path);
    let reloaded = store.load().await.unwrap();
    assert_eq!(store.recovered(), None, "adopted once");
    assert_eq!(reloaded.tasks().len(), 3);
    assert_eq!(
        reloaded.task(TaskId::new("t-2")).unwrap().status,
        TaskStatus::Done
    );
}

#[tokio::test]
async fn with_the_marker_an_unsigned_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    persisted(&path, &[&[task("t-1", "a")]]).await;
    assert!(marker(&path).exists());
    // Every link taken off, or the file replaced by a hand-written one.
    fs::write(&path, LEGACY).unwrap();
    let (line, message) = refusal(&path).await;
    assert_eq!(line, 1);
    assert!(message.contains("plan.jsonl.chain"), "{message}");

    // The person says the lines are theirs.
    open(&path).repair(true).await.unwrap().expect("adopted");
    assert_eq!(open(&path).load().await.unwrap().tasks().len(), 2);
}

#[tokio::test]
async fn a_mix_of_signed_and_unsigned_lines_is_refused_even_without_the_marker() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    persisted(&path, &[&[task("t-1", "a")]]).await;
    fs::remove_file(marker(&path)).unwrap();
    let signed = fs::read_to_string(&path).unwrap();
    fs::write(&path, format!("{}{signed}", LEGACY)).unwrap();
    let (line, message) = refusal(&path).await;
    assert_eq!(line, 1);
    assert!(message.contains("line 3 does"), "{message}");
}

#[tokio::test]
async fn a_file_that_verifies_or_is_missing_has_nothing_to_repair() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    assert_eq!(open(&path).repair(false).await.unwrap(), None);
    assert!(!path.exists(), "and writes nothing");
    persisted(
        &path,
        &[&[task("t-1", "a")], &[task("t-2", "b"), task("t-3", "c")]],
    )
    .await;
    let before = fs::read(&path).unwrap();
    assert_eq!(open(&path).repair(true).await.unwrap(), None);
    assert_eq!(fs::read(&path).unwrap(), before);
}

/// A compaction starts the chain afresh: the rewritten file verifies from its first line.
#[tokio::test]
async fn a_compacted_file_verifies_and_a_forgery_after_it_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    let store = open(&path);
    for round in 0..120 {
        let changes: Vec<_> = (0..10)
            .map(|n| task(&format!("t-{n}"), &format!("round {round}")))
            .collect();
        store.persist(&changes).await.unwrap();
    }
    drop(store);
    let lines = fs::read_to_string(&path).unwrap().lines().count();
    assert!(lines < 1320, "compacted: {lines} lines");
    assert_eq!(open(&path).load().await.unwrap().tasks().len(), 10);
    append(&path, FORGED);
    assert_eq!(refusal(&path).await.0, lines + 1);
}
