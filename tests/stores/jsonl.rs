//! `JsonlStore` against real files: format, recovery, locking, compaction, append costs.

use std::fs;
use std::path::{Path, PathBuf};

use ralph::model::{
    Board, Change, Issue, IssueId, IssueStatus, KillReason, RunState, Task, TaskId, TaskStatus,
};
use ralph::store::StoreError;
use ralph::{JsonlStore, Store};

fn plan(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join(".ralph").join("plan.jsonl")
}

fn task(id: &str, name: &str) -> Change {
    Change::Task(Task::new(id, name))
}

/// A change as ralph serializes it, before the line is signed.
fn line_of(change: &Change) -> String {
    serde_json::to_string(change).expect("serializable") + "\n"
}

/// `text` with each line's chain field (`,"h":"…"` before the closing brace) taken off:
/// what ralph serialized, to compare with [`line_of`].
pub(crate) fn without_links(text: &str) -> String {
    text.lines()
        .map(|line| match line.rfind(r#","h":""#) {
            Some(at) if line.len() == at + 40 && line.ends_with(r#""}"#) => {
                format!("{}}}\n", &line[..at])
            }
            _ => format!("{line}\n"),
        })
        .collect()
}

/// Persists each of `steps` in turn into a new store at `path`; returns the file's text.
async fn written(path: &Path, steps: &[&[Change]]) -> String {
    let store = open_unlocked(path);
    for changes in steps {
        store.persist(changes).await.expect("persisted");
    }
    fs::read_to_string(path).expect("written")
}

/// Opens the store at `path` (which writes nothing).
fn open_unlocked(path: &Path) -> JsonlStore {
    JsonlStore::open(path).expect("opening writes and locks nothing")
}

/// Opens, loads and closes, as the next start of ralph would.
async fn reopen(path: &Path) -> Board {
    open_unlocked(path).load().await.expect("loads")
}

async fn load_err(path: &Path) -> StoreError {
    JsonlStore::open(path)
        .expect("unlocked")
        .load()
        .await
        .expect_err("should not load")
}

fn write_plan(path: &Path, text: impl AsRef<[u8]>) {
    fs::create_dir_all(path.parent().expect("in a dir")).expect("dir created");
    fs::write(path, text).expect("written");
}

#[tokio::test]
async fn opening_and_loading_write_nothing_and_the_first_persist_creates_dirs_and_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    let store = open_unlocked(&path);
    assert_eq!(store.path(), path);
    assert_eq!(store.load().await.unwrap(), Board::new());
    assert!(!path.parent().unwrap().exists(), "a dry run may load");
    assert_eq!(store.recovered(), None);
    store.persist(&[task("t-1", "a")]).await.unwrap();
    let text = fs::read_to_string(&path).unwrap();
    assert_eq!(without_links(&text), line_of(&task("t-1", "a")));
    assert_ne!(text, line_of(&task("t-1", "a")), "the line is signed");
}

#[tokio::test]
async fn a_state_file_replaced_or_truncated_under_the_store_is_not_written_over() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    let store = open_unlocked(&path);
    store.persist(&[task("t-1", "a")]).await.unwrap();
    let kept = fs::read(&path).unwrap();
    // Replaced (an editor's save, another program's rename).
    let other = path.with_extension("new");
    fs::write(&other, &kept).unwrap();
    fs::rename(&other, &path).unwrap();
    let err = store.persist(&[task("t-2", "b")]).await.unwrap_err();
    assert!(matches!(err, StoreError::Changed { .. }), "{err:?}");
    assert!(err.to_string().contains("was replaced"), "{err}");
    assert_eq!(fs::read(&path).unwrap(), kept, "nothing written over it");
    // Truncated, in a store that read the file before.
    let store = open_unlocked(&path);
    store.load().await.unwrap();
    fs::write(&path, "").unwrap();
    let err = store.persist(&[task("t-2", "b")]).await.unwrap_err();
    assert!(err.to_string().contains("was truncated"), "{err}");
}

#[tokio::test]
async fn round_trips_tasks_issues_run_and_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    let mut killed = Task::new("t-2", "parse the spec")
        .with_acceptance("parses seed 000")
        .with_deps(["t-1"])
        .with_status(TaskStatus::Pending);
    killed.kill_reason = Some(KillReason::ContextLimit);
    killed.kill_log = Some("build/ralph-logs/ralph-20260119-build.log".into());
    killed.attempts = 3;
    let mut issue = Issue::new("i-1", "flaky test").with_origin("verify");
    issue.status = IssueStatus::Resolved;
    let mut run = RunState::default();
    run.iteration = 4;
    run.spec = Some("specs/construct.md".into());
    run.next_task = 2;
    let config = serde_json::json!({"timeout_ms": 300000, "context_kill": 0.95});
    let changes = vec![
        Change::Config(config.as_object().unwrap().clone()),
        Change::Run(run),
        Change::Issue(issue),
        task("t-1", "scaffold"),
        Change::Task(killed),
    ];

    let store = open_unlocked(&path);
    store.persist(&changes).await.unwrap();
    let mut expected = Board::new();
    expected.apply_all(changes);
    assert_eq!(store.load().await.unwrap(), expected);
    drop(store);
    assert_eq!(reopen(&path).await, expected);
}

#[tokio::test]
async fn later_lines_supersede_earlier_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    write_plan(
        &path,
        "{\"t\":\"task\",\"id\":\"t-1\",\"name\":\"old\",\"s\":\"p\"}\n\
         {\"t\":\"task\",\"id\":\"t-2\",\"name\":\"other\",\"s\":\"p\"}\n\
         \n\
         {\"t\":\"task\",\"id\":\"t-1\",\"name\":\"new\",\"s\":\"d\"}\n",
    );
    let board = reopen(&path).await;
    let names: Vec<_> = board.tasks().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        ["new", "other"],
        "creation order kept, content replaced"
    );
    assert_eq!(
        board.task(TaskId::new("t-1")).unwrap().status,
        TaskStatus::Done
    );
}

#[tokio::test]
async fn hand_written_seed_lines_parse() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    write_plan(
        &path,
        r#"{"t": "config", "timeout_ms": 300000, "max_iterations": 10, "context_warn": 0.7, "context_compact": 0.85, "context_kill": 0.95}
{"t": "issue", "id": "i-1", "text": "flaky test discovered", "s": "open"}
{"t": "task", "id": "t-1", "name": "scaffold", "s": "pending"}
{"t": "task", "id": "t-abc", "name": "...", "s": "p", "kill_reason": "timeout", "kill_log": "build/ralph-logs/ralph-20260119-build.log"}
"#,
    );
    let board = reopen(&path).await;
    assert_eq!(board.config.as_ref().unwrap()["max_iterations"], 10);
    assert_eq!(
        board.issue(IssueId::new("i-1")).unwrap().status,
        IssueStatus::Open
    );
    assert!(board.task(TaskId::new("t-1")).unwrap().is_buildable());
    let killed = &board.task(TaskId::new("t-abc")).unwrap();
    assert!(killed.is_killed());
    assert_eq!(
        killed.kill_log.as_deref(),
        Some(Path::new("build/ralph-logs/ralph-20260119-build.log"))
    );
}

#[tokio::test]
async fn malformed_line_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    let good = line_of(&task("t-1", "a"));
    write_plan(
        &path,
        format!("{good}\n{{\"t\":\"task\",\"id\":\"t-2\"}}\n{good}"),
    );
    let err = load_err(&path).await;
    let StoreError::Malformed {
        path: file,
        line,
        message,
    } = &err
    else {
        panic!("not malformed: {err:?}")
    };
    assert_eq!((file, *line), (&path, 3), "blank lines still count");
    assert!(
        message.contains("missing field"),
        "serde's reason kept: {message}"
    );
    assert!(
        err.to_string()
            .starts_with(&format!("{}:3: ", path.display()))
    );
}

#[tokio::test]
async fn malformed_last_line_with_newline_is_an_error_not_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    write_plan(
        &path,
        format!("{}{{\"t\":\"ta\n", line_of(&task("t-1", "a"))),
    );
    assert!(matches!(
        load_err(&path).await,
        StoreError::Malformed { line: 2, .. }
    ));
    // A store that cannot read the file refuses to write to it.
    let store = open_unlocked(&path);
    assert!(store.persist(&[task("t-2", "b")]).await.is_err());
}

#[tokio::test]
async fn non_utf8_line_is_malformed_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    let mut bytes = line_of(&task("t-1", "a")).into_bytes();
    bytes.extend_from_slice(b"{\"t\":\"task\",\"id\":\"t-\xff\",\"name\":\"x\",\"s\":\"p\"}\n");
    write_plan(&path, bytes);
    let err = load_err(&path).await;
    let StoreError::Malformed { line, message, .. } = err else {
        panic!("not malformed: {err:?}")
    };
    assert_eq!(line, 2);
    assert!(message.contains("UTF-8"), "{message}");
}

#[tokio::test]
async fn huge_line_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    let notes = "gate output ".repeat(400_000);
    let big = Change::Task(Task::new("t-1", "noisy").with_notes(notes.clone()));
    let store = open_unlocked(&path);
    store.persist(&[big, task("t-2", "after")]).await.unwrap();
    drop(store);
    let board = reopen(&path).await;
    assert_eq!(board.task(TaskId::new("t-1")).unwrap().notes, notes);
    assert_eq!(board.tasks().len(), 2);
}

#[tokio::test]
async fn torn_tail_is_dropped_and_cut_before_the_next_append() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    // Lines ralph signed: hand-written ones would be an earlier ralph's file, adopted with
    // a note of its own and rewritten whole by the next persist.
    let good = written(&path, &[&[task("t-1", "a")], &[task("t-2", "b")]]).await;
    write_plan(&path, format!("{good}{{\"t\":\"task\",\"id\":\"t-3\",\"na"));

    let store = open_unlocked(&path);
    assert_eq!(store.load().await.unwrap().tasks().len(), 2);
    let note = store.recovered().expect("recovery reported");
    assert!(note.contains("torn") && note.contains("line 3"), "{note}");

    let next = task("t-4", "d");
    store.persist(std::slice::from_ref(&next)).await.unwrap();
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.starts_with(&good), "{text}");
    assert_eq!(without_links(&text[good.len()..]), line_of(&next));
    drop(store);

    let store = open_unlocked(&path);
    assert_eq!(store.load().await.unwrap().tasks().len(), 3);
    assert_eq!(store.recovered(), None);
}

/// A crash can stop a write after any byte; every such file must load as the last whole
/// persist, or (for a line complete but for its newline) the one being written.
#[tokio::test]
async fn every_crash_point_of_an_append_loads() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    // Written by the store, so signed: see `torn_tail_is_dropped_and_cut_before_the_next_append`.
    let before = written(&path, &[&[task("t-1", "a")], &[task("t-2", "b")]]).await;
    let full = written(&path, &[&[task("t-2", "changed")], &[task("t-3", "c")]]).await;
    let appended = full[before.len()..].to_owned();
    for cut in before.len()..full.len() {
        write_plan(&path, &full[..cut]);
        let store = open_unlocked(&path);
        let board = store.load().await.unwrap();
        let whole_lines = full[..cut].matches('\n').count();
        let torn = !full[..cut].ends_with('\n');
        let parsed = if cut == full.len() - 1 || cut == before.len() + appended.find('\n').unwrap()
        {
            1 // complete JSON missing only its newline
        } else {
            0
        };
        assert_eq!(
            store.recovered().is_some(),
            torn && parsed == 0,
            "cut at {cut}"
        );
        let expected = match whole_lines + parsed {
            2 => ["a", "b"].as_slice(),
            3 => ["a", "changed"].as_slice(),
            _ => ["a", "changed", "c"].as_slice(),
        };
        let names: Vec<_> = board.tasks().map(|t| t.name.as_str()).collect();
        assert_eq!(names, expected, "cut at {cut}");
        // Writing on is always possible and leaves a clean file.
        store.persist(&[task("t-9", "z")]).await.unwrap();
        drop(store);
        assert_eq!(
            reopen(&path).await.tasks().len(),
            expected.len() + 1,
            "cut at {cut}"
        );
    }
}

#[tokio::test]
async fn one_change_appends_exactly_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    let store = open_unlocked(&path);
    store
        .persist(&[task("t-1", "a"), task("t-2", "b")])
        .await
        .unwrap();
    let before = fs::read(&path).unwrap();

    let change = task("t-1", "a, again");
    store.persist(std::slice::from_ref(&change)).await.unwrap();
    let after = fs::read(&path).unwrap();
    assert_eq!(&after[..before.len()], before, "earlier bytes unchanged");
    let line = String::from_utf8(after[before.len()..].to_vec()).unwrap();
    assert_eq!(without_links(&line), line_of(&change));
    assert_eq!(line.lines().count(), 1);
}

#[tokio::test]
async fn compaction_bounds_the_file_and_preserves_the_board() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    let store = open_unlocked(&path);
    let mut expected = Board::new();
    // One persist per round keeps the test to 500 fsyncs; the compaction check runs on
    // every persist either way.
    for round in 0..500 {
        let changes: Vec<_> = (0..10)
            .map(|n| {
                let mut t = Task::new(format!("t-{n}"), format!("task {n}"));
                t.attempts = round;
                Change::Task(t)
            })
            .collect();
        store.persist(&changes).await.unwrap();
        expected.apply_all(changes);
    }
    let lines = fs::read_to_string(&path).unwrap().lines().count();
    // 11 live records (10 tasks + run) plus at most 1000 superseded lines.
    assert!(lines <= 1011, "{lines} lines after 5000 updates");
    assert_eq!(store.load().await.unwrap(), expected);
    let mut names: Vec<_> = fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [".gitignore", "plan.jsonl", "plan.jsonl.chain"],
        "only plan.jsonl and its marker remain (and the state folder's own .gitignore)"
    );
    drop(store);

    let store = open_unlocked(&path);
    assert_eq!(
        store.load().await.unwrap(),
        expected,
        "reopened after compaction"
    );
    let before = fs::read(&path).unwrap();
    let change = task("t-10", "new");
    store.persist(std::slice::from_ref(&change)).await.unwrap();
    let after = fs::read(&path).unwrap();
    assert_eq!(&after[..before.len()], before, "appends after reopen");
    let line = String::from_utf8(after[before.len()..].to_vec()).unwrap();
    assert_eq!(without_links(&line), line_of(&change));
}

#[tokio::test]
async fn concurrent_persists_all_land() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    let store = std::sync::Arc::new(open_unlocked(&path));
    let writers = (0..32).map(|n| {
        let store = store.clone();
        tokio::spawn(async move { store.persist(&[task(&format!("t-{n}"), "x")]).await })
    });
    for writer in writers.collect::<Vec<_>>() {
        writer.await.unwrap().unwrap();
    }
    drop(store);
    assert_eq!(reopen(&path).await.tasks().len(), 32);
}

/// Names the plan that [`hold_lock_in_child`] should lock, in the child process only.
#[tokio::test]
async fn a_change_that_cannot_be_written_changes_nothing() {
    use std::os::unix::ffi::OsStrExt;

    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    let store = open_unlocked(&path);
    store.persist(&[task("t-1", "a")]).await.unwrap();
    let mut bad = Task::new("t-2", "b");
    bad.kill_log = Some(std::ffi::OsStr::from_bytes(b"log-\xff").into());

    let err = store.persist(&[task("t-1", "a2"), Change::Task(bad)]).await;
    assert!(
        matches!(&err, Err(StoreError::Encode { path: p, .. }) if *p == path),
        "{err:?}"
    );
    assert_eq!(
        without_links(&fs::read_to_string(&path).unwrap()),
        line_of(&task("t-1", "a"))
    );
    assert_eq!(
        store
            .load()
            .await
            .unwrap()
            .task(TaskId::new("t-1"))
            .unwrap()
            .name,
        "a"
    );
}

/// A multi-change persist is all-or-nothing: wherever a crash cuts its write, the next
/// load shows either none of it or all of it (a decomposed task never loses its subtasks).
#[tokio::test]
async fn a_batch_cut_anywhere_loads_as_none_or_all() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    let store = open_unlocked(&path);
    store.persist(&[task("t-1", "a")]).await.unwrap();
    let before = fs::read_to_string(&path).unwrap();
    store
        .persist(&[
            task("t-1", "decomposed"),
            task("t-1a", "x"),
            task("t-1b", "y"),
        ])
        .await
        .unwrap();
    drop(store);
    let full = fs::read_to_string(&path).unwrap();
    assert!(
        full[before.len()..].starts_with(r#"{"t":"batch","n":3,"h":""#),
        "{full}"
    );
    for cut in before.len()..=full.len() {
        write_plan(&path, &full[..cut]);
        let store = open_unlocked(&path);
        let board = store.load().await.unwrap();
        let names: Vec<_> = board.tasks().map(|t| t.name.as_str()).collect();
        // The last cut leaves every record whole, only the final newline missing.
        if cut >= full.len() - 1 {
            assert_eq!(names, ["decomposed", "x", "y"], "cut at {cut}");
            assert_eq!(store.recovered(), None);
        } else {
            assert_eq!(names, ["a"], "cut at {cut}");
            assert_eq!(
                store.recovered().is_some(),
                cut > before.len(),
                "cut at {cut}"
            );
        }
        store.persist(&[task("t-9", "z")]).await.unwrap();
        drop(store);
        assert_eq!(
            reopen(&path).await.tasks().len(),
            names.len() + 1,
            "cut at {cut}"
        );
    }
}

#[tokio::test]
async fn a_batch_header_without_records_or_nested_is_malformed() {
    let dir = tempfile::tempdir().unwrap();
    let path = plan(&dir);
    let t = line_of(&task("t-1", "a"));
    for (text, bad_line) in [
        (format!("{{\"t\":\"batch\",\"n\":0}}\n{t}"), 1),
        (
            format!("{{\"t\":\"batch\",\"n\":2}}\n{{\"t\":\"batch\",\"n\":1}}\n{t}{t}"),
            2,
        ),
    ] {
        write_plan(&path, &text);
        let err = open_unlocked(&path).load().await.unwrap_err();
        assert!(
            matches!(err, StoreError::Malformed { line, .. } if line == bad_line),
            "{err}"
        );
    }
}
