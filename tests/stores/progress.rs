//! `ProgressStore` on real files: hand-written fixtures round-trip with their prose kept, ids
//! stick, a person's edits are honored, the sidecar keeps what markdown cannot, malformed
//! input is an error naming file and line.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use ralph::model::{
    Change, IterationEntry, RecentAttempt, RunState, Task, TaskId, TaskStatus, Tombstone,
};
use ralph::store::StoreError;
use ralph::{ProgressStore, Store};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/progress");

/// A temp dir holding `PROGRESS.md` with `text`.
fn progress_file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("PROGRESS.md");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(Path::new(FIXTURES).join(name)).unwrap()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

/// `(id, name, status)` of every task, in board order.
async fn tasks(store: &ProgressStore) -> Vec<(String, String, TaskStatus)> {
    store
        .load()
        .await
        .unwrap()
        .tasks()
        .map(|t| (t.id.to_string(), t.name.clone(), t.status))
        .collect()
}

/// Lines outside ralph's own sections that are not task lines, CR stripped.
fn prose(text: &str) -> Vec<String> {
    let mut owned = false;
    let mut out = Vec::new();
    for line in text.lines().map(|l| l.trim_end_matches('\r')) {
        if line.starts_with("## ") || line.starts_with("# ") {
            owned = line == "## Recent Attempts" || line == "## Iteration Log";
        }
        let task = line
            .trim_start()
            .get(..5)
            .is_some_and(|p| ["- [ ]", "- [x]", "- [X]", "* [ ]", "* [x]"].contains(&p))
            && !line.contains("inside a code fence");
        if !owned && !task && !line.trim().is_empty() {
            out.push(line.to_owned());
        }
    }
    out
}

#[tokio::test]
async fn hand_written_fixtures_round_trip_with_their_prose() {
    for name in ["handwritten.md", "ralph_written.md", "crlf_and_done.md"] {
        let original = fixture(name);
        let (_dir, path) = progress_file(&original);
        let store = ProgressStore::open(&path).unwrap();
        let before = tasks(&store).await;
        let declared = store.load().await.unwrap().declared_complete;

        store.persist(&[]).await.unwrap();
        let written = read(&path);
        assert_eq!(
            tasks(&store).await,
            before,
            "{name}: tasks changed\n{written}"
        );
        assert_eq!(
            store.load().await.unwrap().declared_complete,
            declared,
            "{name}"
        );
        assert_eq!(
            prose(&written),
            prose(&original),
            "{name}: prose changed\n{written}"
        );
        for (id, task, _) in &before {
            assert!(
                written.contains(&format!("{task} <!-- id:{id} -->")),
                "{name}: {id} has no trailer\n{written}"
            );
        }
        // A second write changes nothing: the format is a fixed point.
        store.persist(&[]).await.unwrap();
        assert_eq!(read(&path), written, "{name}: not idempotent");
    }
}

#[tokio::test]
async fn handwritten_fixture_reads_as_a_person_means_it() {
    let (_dir, path) = progress_file(&fixture("handwritten.md"));
    let store = ProgressStore::open(&path).unwrap();
    let board = store.load().await.unwrap();
    let got = tasks(&store).await;
    assert_eq!(
        got,
        vec![
            (
                "t-1".into(),
                "Create the cargo project".into(),
                TaskStatus::Accepted
            ),
            (
                "t-2".into(),
                "Add clap for argument parsing".into(),
                TaskStatus::Pending
            ),
            (
                "t-3".into(),
                "Shell completions".into(),
                TaskStatus::Pending
            ),
            ("t-4".into(), "Bash completions".into(), TaskStatus::Pending),
            (
                "t-5".into(),
                "Print hello with the given name".into(),
                TaskStatus::Pending
            ),
        ],
        "the fenced line and the link are not tasks"
    );
    assert!(
        !board.declared_complete,
        "RALPH_DONE in a fence or a sentence"
    );
    assert_eq!(board.run.next_task, 5, "positional ids advance the counter");
}

#[tokio::test]
async fn ids_stick_to_lines_when_a_person_moves_and_adds_them() {
    let (_dir, path) = progress_file("# Progress: x\n\n## Phase 1\n\n- [ ] A\n- [ ] B\n- [ ] C\n");
    let store = ProgressStore::open(&path).unwrap();
    store.persist(&[]).await.unwrap();
    // The person moves C to the top, deletes A and adds D (no trailer) in between.
    let text = read(&path)
        .replace("- [ ] A <!-- id:t-1 -->\n", "")
        .replace("- [ ] C <!-- id:t-3 -->\n", "")
        .replace("- [ ] B", "- [ ] C <!-- id:t-3 -->\n- [ ] D\n- [ ] B");
    std::fs::write(&path, text).unwrap();

    let got = tasks(&store).await;
    assert_eq!(
        got,
        vec![
            ("t-3".into(), "C".into(), TaskStatus::Pending),
            ("t-4".into(), "D".into(), TaskStatus::Pending),
            ("t-2".into(), "B".into(), TaskStatus::Pending),
        ],
        "A is gone, D gets a fresh id, not A's"
    );
    store.persist(&[]).await.unwrap();
    assert!(read(&path).contains("- [ ] D <!-- id:t-4 -->"));
    assert!(!read(&path).contains("id:t-1"));
}

#[tokio::test]
async fn deleting_a_task_releases_its_dependents_and_a_bare_file_gets_a_status() {
    let (_dir, path) = progress_file(
        "- [ ] A
- [ ] B
",
    );
    let store = ProgressStore::open(&path).unwrap();
    let b = store
        .load()
        .await
        .unwrap()
        .task("t-2")
        .unwrap()
        .clone()
        .with_deps(["t-1"]);
    store.persist(&[Change::Task(b)]).await.unwrap();
    let text = read(&path);
    assert!(
        text.starts_with("## Status\n\nIn progress\n\n## Tasks\n\n- [ ] A"),
        "{text}"
    );
    assert_eq!(
        store.load().await.unwrap().task("t-2").unwrap().deps,
        vec![TaskId::new("t-1")]
    );
    std::fs::write(&path, text.replace("- [ ] A <!-- id:t-1 -->\n", "")).unwrap();
    assert!(
        store
            .load()
            .await
            .unwrap()
            .task("t-2")
            .unwrap()
            .deps
            .is_empty()
    );
}

#[tokio::test]
async fn sidecar_keeps_what_markdown_cannot_and_ticks_by_hand_win() {
    let (dir, path) = progress_file("# Progress: x\n\n## Tasks\n\n- [ ] A\n- [ ] B\n- [ ] C\n");
    let store = ProgressStore::open(&path).unwrap();
    let board = store.load().await.unwrap();
    let mut a = board.task("t-1").unwrap().clone();
    a.status = TaskStatus::Done;
    a.attempts = 2;
    a.tombstones.push(Tombstone {
        reason: "rejected by the verifier: too short".into(),
        at: "2026-01-01T00:00:00Z".into(),
    });
    let mut b = board.task("t-2").unwrap().clone();
    b.status = TaskStatus::Accepted;
    store
        .persist(&[Change::Task(a.clone()), Change::Task(b)])
        .await
        .unwrap();

    let text = read(&path);
    assert!(
        text.contains("- [ ] A <!-- id:t-1 -->"),
        "done but not accepted: unticked\n{text}"
    );
    assert!(text.contains("- [x] B <!-- id:t-2 -->"), "{text}");
    assert!(dir.path().join(".ralph/progress-state.json").exists());
    assert_eq!(
        store.load().await.unwrap().task("t-1").unwrap(),
        &a,
        "the sidecar's record"
    );

    // A person ticks C, unticks B and rewords A.
    let edited = text
        .replace("- [ ] C", "- [x] C")
        .replace("- [x] B", "- [ ] B")
        .replace("- [ ] A ", "- [ ] A, reworded ");
    std::fs::write(&path, edited).unwrap();
    let board = store.load().await.unwrap();
    assert_eq!(
        board.task("t-3").unwrap().status,
        TaskStatus::Accepted,
        "ticked by hand"
    );
    assert_eq!(
        board.task("t-2").unwrap().status,
        TaskStatus::Pending,
        "unticked by hand"
    );
    assert_eq!(board.task("t-1").unwrap().name, "A, reworded");
    assert_eq!(
        board.task("t-1").unwrap().status,
        TaskStatus::Done,
        "the sidecar knows better"
    );
    assert_eq!(board.task("t-1").unwrap().attempts, 2);
}

#[tokio::test]
async fn engine_tasks_go_under_their_parent_or_after_the_last_task() {
    let text = "# Progress: x\n\n## Phase 1\n\n- [ ] A\n\nProse after A.\n\n## Phase 2\n\n- [ ] B\n\nTrailing prose.\n";
    let (_dir, path) = progress_file(text);
    let store = ProgressStore::open(&path).unwrap();
    let mut sub = Task::new("t-1a", "A, first half");
    sub.parent = Some(TaskId::new("t-1"));
    let mut a = store.load().await.unwrap().task("t-1").unwrap().clone();
    a.status = TaskStatus::Decomposed;
    store
        .persist(&[
            Change::Task(a),
            Change::Task(sub),
            Change::Task(Task::new("t-9", "From gap analysis")),
        ])
        .await
        .unwrap();
    let text = read(&path);
    assert!(
        text.contains(
            "- [x] A <!-- id:t-1 -->\n  - [ ] A, first half <!-- id:t-1a -->\n\nProse after A."
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "- [ ] B <!-- id:t-2 -->\n- [ ] From gap analysis <!-- id:t-9 -->\n\nTrailing prose."
        ),
        "{text}"
    );
    let board = store.load().await.unwrap();
    assert_eq!(
        board.task("t-1").unwrap().status,
        TaskStatus::Decomposed,
        "the sidecar knows better than [x]"
    );
}

#[tokio::test]
async fn a_missing_file_is_created_on_the_first_write_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("PROGRESS.md");
    let store = ProgressStore::open(&path).unwrap();
    assert!(store.load().await.unwrap().tasks().next().is_none());
    assert!(!path.exists(), "loading writes nothing");
    let mut run = RunState::default();
    run.spec = Some("specs/greeter.md".into());
    store
        .persist(&[
            Change::Run(run),
            Change::Task(Task::new("t-1", "Say hello")),
        ])
        .await
        .unwrap();
    let text = read(&path);
    assert!(
        text.starts_with("# Progress: greeter\n\n## Status\n\nIn progress\n"),
        "{text}"
    );
    assert!(
        text.contains("## Tasks\n\n- [ ] Say hello <!-- id:t-1 -->\n"),
        "{text}"
    );
    assert!(text.contains("## Recent Attempts") && text.contains("## Iteration Log"));
}

#[tokio::test]
async fn recent_attempts_and_iteration_log_are_bounded_in_the_file() {
    let (_dir, path) = progress_file("# Progress: x\n\n## Tasks\n\n- [ ] A\n");
    let store = ProgressStore::open(&path).unwrap();
    let mut run = store.load().await.unwrap().run;
    for i in 1..=8 {
        let attempt = RecentAttempt::new(
            i,
            TaskId::new("t-1"),
            format!("try {i}"),
            "gates failed: test",
            "now",
        );
        run.remember_attempt(attempt, 5);
    }
    for i in 1..=250 {
        run.log_iteration(IterationEntry::new(
            i,
            "now",
            std::time::Duration::from_secs(61),
            1,
            "a | b",
        ));
    }
    store.persist(&[Change::Run(run)]).await.unwrap();
    let text = read(&path);
    let attempts: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("- Iteration "))
        .collect();
    assert_eq!(attempts.len(), 5, "{text}");
    assert!(
        attempts[0].contains("tried: try 4"),
        "oldest kept is the 4th"
    );
    assert!(!text.contains("try 3 "));
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| Iteration"))
        .collect();
    assert_eq!(rows.len(), ralph::model::ITERATION_LOG_LIMIT);
    assert!(
        rows[0].starts_with("| 51 | now | 1m 1s | 1 | a \\| b |"),
        "{}",
        rows[0]
    );
}

#[tokio::test]
async fn malformed_input_names_the_file_and_line() {
    let cases: [(&[u8], usize, &str); 5] = [
        (b"# P\n\n- [ ] ok\n\xff\xfe\n", 4, "not UTF-8"),
        (b"# P\n\n- [~] odd\n", 3, "[~]"),
        (
            b"# P\n- [ ] a <!-- id:t-1 -->\n- [ ] b <!-- id:t-1 -->\n",
            3,
            "t-1 is used twice (also on line 2)",
        ),
        (b"# P\n\n- [ ]\n", 3, "without a task"),
        (b"# P\n\n- [ ] a <!-- id: -->\n", 3, "trailer"),
    ];
    for (bytes, line, message) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("PROGRESS.md");
        std::fs::write(&path, bytes).unwrap();
        let store = ProgressStore::open(&path).unwrap();
        let err = store.load().await.unwrap_err();
        let StoreError::Malformed {
            path: at,
            line: got,
            ..
        } = &err
        else {
            panic!("not malformed: {err}");
        };
        assert_eq!((at, *got), (&path, line), "{err}");
        assert!(err.to_string().contains(message), "{err}");
        assert!(
            store.persist(&[]).await.is_err(),
            "a write must not clobber it"
        );
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
    }
    // A broken sidecar is named too.
    let (_dir, path) = progress_file("# P\n");
    let store = ProgressStore::open(&path).unwrap();
    std::fs::create_dir_all(store.sidecar_path().parent().unwrap()).unwrap();
    std::fs::write(store.sidecar_path(), "{\n  \"tasks\": 3\n}\n").unwrap();
    let err = store.load().await.unwrap_err().to_string();
    assert!(err.contains("progress-state.json:2"), "{err}");
}

#[tokio::test]
async fn writes_are_atomic_and_opening_writes_nothing() {
    let (dir, path) = progress_file("# Progress: x\n\n## Tasks\n\n- [ ] A\n");
    let store = ProgressStore::open(&path).unwrap();
    assert_eq!(walk(dir.path()), ["PROGRESS.md"], "a dry run may open it");
    store.persist(&[]).await.unwrap();
    let mut names: Vec<String> = walk(dir.path());
    names.sort();
    assert_eq!(
        names,
        vec![
            ".ralph/.gitignore",
            ".ralph/progress-state.json",
            "PROGRESS.md"
        ],
        "no temp file left behind"
    );
    drop(store);
    ProgressStore::open(&path).unwrap();
}

fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            let name = entry.file_name().to_string_lossy().into_owned();
            out.extend(walk(&p).into_iter().map(|n| format!("{name}/{n}")));
        } else {
            out.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    out
}

/// A crash between the markdown's write and the sidecar's leaves the new markdown with the
/// old sidecar: what the markdown shows wins, so no acceptance is lost.
#[tokio::test]
async fn a_crash_between_the_two_writes_loses_no_acceptance() {
    let (_dir, path) = progress_file("# Progress: x\n\n## Tasks\n\n- [ ] A\n- [ ] B\n");
    let store = ProgressStore::open(&path).unwrap();
    store.persist(&[]).await.unwrap();
    let old_sidecar = std::fs::read(store.sidecar_path()).unwrap();
    let mut a = store.load().await.unwrap().task("t-1").unwrap().clone();
    a.status = TaskStatus::Accepted;
    store.persist(&[Change::Task(a)]).await.unwrap();
    std::fs::write(store.sidecar_path(), old_sidecar).unwrap();

    let board = store.load().await.unwrap();
    assert_eq!(board.task("t-1").unwrap().status, TaskStatus::Accepted);
    assert_eq!(board.task("t-2").unwrap().status, TaskStatus::Pending);
}

/// The `#` and `##` headings of a markdown text, in order.
fn headings(text: &str) -> Vec<&str> {
    text.lines().filter(|l| l.starts_with('#')).collect()
}

/// Audit row 003-R35: a file ralph writes from nothing has seed 003's layout, one Tasks
/// section holding the boxes above Recent Attempts and the Iteration Log, titled with the
/// spec's title, and keeps it as tasks, attempts and log rows come.
#[tokio::test]
async fn a_file_ralph_writes_has_one_tasks_section_above_its_own_and_the_specs_title() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("PROGRESS.md");
    let store = ProgressStore::open(&path).unwrap();
    let mut run = RunState::default();
    run.spec = Some("spec.md".into());
    run.spec_title = Some("Greeter".into());
    store.persist(&[Change::Run(run.clone())]).await.unwrap();
    store
        .persist(&[Change::Task(Task::new("t-1", "Say hello"))])
        .await
        .unwrap();
    run.attempts.push(RecentAttempt::new(
        1,
        TaskId::new("t-1"),
        "wrote it",
        "done",
        "2026-01-18T10:00:00Z",
    ));
    store
        .persist(&[
            Change::Run(run),
            Change::Task(Task::new("t-2", "Say goodbye")),
        ])
        .await
        .unwrap();
    let text = read(&path);
    let expected = [
        "# Progress: Greeter",
        "## Status",
        "## Tasks",
        "## Recent Attempts",
        "## Iteration Log",
    ];
    assert_eq!(headings(&text), expected, "{text}");
    assert!(
        text.contains(
            "## Tasks\n\n- [ ] Say hello <!-- id:t-1 -->\n- [ ] Say goodbye <!-- id:t-2 -->\n\n## Recent Attempts"
        ),
        "{text}"
    );
    store.persist(&[]).await.unwrap();
    assert_eq!(
        read(&path),
        text,
        "a write with nothing new changes nothing"
    );
    assert_eq!(tasks(&store).await.len(), 2);
}

/// A file an earlier ralph wrote (an empty Tasks section, the boxes in a second one at the
/// end, the file stem as title) still loads as it did, and takes seed 003's layout and the
/// spec's title at the next write.
#[tokio::test]
async fn a_file_in_the_old_layout_loads_and_takes_the_seeds_layout() {
    let old = "# Progress: spec\n\n## Status\n\nIn progress\n\n## Tasks\n\n## Recent Attempts\n\n\
        _None yet._\n\n## Iteration Log\n\n| Iteration | Started | Duration | Tasks Completed | Notes |\n\
        |---|---|---|---|---|\n\n## Tasks\n\n- [x] Say hello <!-- id:t-1 -->\n\
        - [ ] Say goodbye <!-- id:t-2 -->\n";
    let (_dir, path) = progress_file(old);
    let store = ProgressStore::open(&path).unwrap();
    let before = tasks(&store).await;
    assert_eq!(
        before,
        [
            ("t-1".into(), "Say hello".into(), TaskStatus::Accepted),
            ("t-2".into(), "Say goodbye".into(), TaskStatus::Pending),
        ]
    );
    let mut run = RunState::default();
    run.spec = Some("spec.md".into());
    run.spec_title = Some("Greeter".into());
    store.persist(&[Change::Run(run)]).await.unwrap();
    let text = read(&path);
    let expected = [
        "# Progress: Greeter",
        "## Status",
        "## Tasks",
        "## Recent Attempts",
        "## Iteration Log",
    ];
    assert_eq!(headings(&text), expected, "{text}");
    assert!(
        text.contains(
            "## Tasks\n\n- [x] Say hello <!-- id:t-1 -->\n- [ ] Say goodbye <!-- id:t-2 -->\n\n## Recent"
        ),
        "{text}"
    );
    assert_eq!(tasks(&store).await, before);
}
