//! `implementation.json` (seed 004): seed's own example, hand-written files, unknown fields,
//! atomic writes, malformed files named with line and column.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use ralph::specs::implementation::ImplementationStore;
use ralph::specs::{Implementation, SpecEntry, Status, TaskEntry};
use ralph::store::StoreError;
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/implementation")
        .join(name)
}

fn copy_fixture(dir: &Path, name: &str) -> ImplementationStore {
    let path = dir.join("implementation.json");
    std::fs::copy(fixture(name), &path).unwrap();
    ImplementationStore::new(path)
}

#[test]
fn reads_seed_004s_example() {
    let plan = ImplementationStore::new(fixture("seed-004.json"))
        .load()
        .unwrap()
        .unwrap();
    assert_eq!(plan.version, 1);
    assert_eq!(plan.updated_by.as_deref(), Some("plan-mode"));
    let spec = &plan.specs[0];
    assert_eq!(spec.id, "user-avatar-upload");
    assert_eq!(spec.name, "User Avatar Upload");
    assert_eq!(spec.priority, 1);
    assert_eq!(spec.status, Status::InProgress);
    assert!(spec.context.contains("S3 client"));
    assert_eq!(spec.tasks[0].status, Status::Completed);
    assert_eq!(
        spec.tasks[1].acceptance_criteria,
        ["Users can upload JPG/PNG up to 5MB"]
    );
    assert_eq!(spec.acceptance_criteria.len(), 1);
    assert_eq!(spec.next_task(), Some(1));
}

#[test]
fn a_missing_file_is_none() {
    let dir = tempfile::tempdir().unwrap();
    let store = ImplementationStore::new(dir.path().join("implementation.json"));
    assert!(store.load().unwrap().is_none());
}

#[test]
fn hand_written_files_get_defaults_and_keep_unknown_fields() {
    let dir = tempfile::tempdir().unwrap();
    let store = copy_fixture(dir.path(), "hand-written.json");
    let mut plan = store.load().unwrap().unwrap();
    assert_eq!(plan.version, 1);
    let spec = &plan.specs[0];
    assert_eq!(spec.status, Status::Pending);
    assert_eq!(spec.display_name(), "greeter");
    assert_eq!(spec.tasks[1].status, Status::Blocked);

    plan.specs[0].tasks[0].status = Status::Completed;
    store.save(&mut plan, "build-mode").unwrap();

    let raw: Value = serde_json::from_str(&std::fs::read_to_string(store.path()).unwrap()).unwrap();
    assert_eq!(raw["owner"], "platform-team");
    assert_eq!(raw["specs"][0]["jira"], "GR-12");
    assert_eq!(raw["specs"][0]["tasks"][0]["estimate"], "1h");
    assert_eq!(raw["specs"][0]["tasks"][0]["status"], "completed");
    assert_eq!(raw["updatedBy"], "build-mode");
    assert!(raw["updatedAt"].as_str().unwrap().starts_with("20"));
    // ralph's empty bookkeeping stays out of a hand-written file.
    assert!(raw["specs"][0].get("attempts").is_none());
    assert!(raw["specs"][0]["tasks"][0].get("lastFailure").is_none());

    // And it reads back the same.
    assert_eq!(store.load().unwrap().unwrap(), plan);
}

#[test]
fn a_round_trip_is_lossless() {
    let dir = tempfile::tempdir().unwrap();
    let store = ImplementationStore::new(dir.path().join("nested/implementation.json"));
    let mut plan = Implementation::default();
    let mut spec = SpecEntry::new("a", "specs/a.md");
    spec.tasks
        .push(TaskEntry::new("a-1", "do it").with_criteria(["it is done"]));
    spec.attempts = 2;
    spec.commit = Some("abc".into());
    plan.specs.push(spec);
    store.save(&mut plan, "test").unwrap();
    assert_eq!(store.load().unwrap().unwrap(), plan);
    // No temp file is left beside it.
    let names: Vec<_> = std::fs::read_dir(dir.path().join("nested"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names, ["implementation.json"]);
}

#[test]
fn a_malformed_file_is_named_with_line_and_column() {
    let store = ImplementationStore::new(fixture("malformed.json"));
    let err = store.load().unwrap_err();
    let StoreError::MalformedAt {
        path,
        line,
        column,
        message,
    } = &err
    else {
        panic!("{err:?}");
    };
    assert!(path.ends_with("malformed.json"));
    assert_eq!(*line, 8);
    assert!(*column > 1);
    assert!(message.contains("done"), "{message}");
    let text = err.to_string();
    assert!(text.contains("malformed.json:8:"), "{text}");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("implementation.json");
    std::fs::write(&path, "{\"specs\": [\n  {\"id\": \"a\",}\n]}").unwrap();
    let text = ImplementationStore::new(&path)
        .load()
        .unwrap_err()
        .to_string();
    assert!(text.contains("implementation.json:2:14: "), "{text}");
}

/// Writes `text` as an implementation.json and returns the error its load gives.
fn load_error(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("implementation.json");
    std::fs::write(&path, text).unwrap();
    ImplementationStore::new(&path)
        .load()
        .unwrap_err()
        .to_string()
}

/// serde gives no position for a repeated id: the second occurrence's `id` value is found in
/// the text (past a nested `"id"` and a decoy string) and reported as `path:line:column`.
#[test]
fn a_duplicate_spec_id_is_reported_at_its_second_occurrence() {
    let err = load_error(
        "{\"specs\": [\n  {\"id\": \"a\", \"file\": \"specs/a.md\", \"note\": \"\\\"id\\\": \\\"a\\\"\"},\n  {\"owner\": {\"id\": \"a\"},\n   \"id\": \"a\", \"file\": \"specs/b.md\"}\n]}",
    );
    assert!(err.contains("implementation.json:4:10: "), "{err}");
    assert!(
        err.contains("specs[1].id") && err.contains("\"a\""),
        "{err}"
    );
}

#[test]
fn a_duplicate_task_id_is_reported_at_its_second_occurrence() {
    let err = load_error(concat!(
        "{\"specs\": [\n",
        "  {\"id\": \"a\", \"file\": \"specs/a.md\", \"tasks\": [\n",
        "    {\"id\": \"a-1\", \"description\": \"x\"}]},\n",
        "  {\"id\": \"b\", \"file\": \"specs/b.md\", \"tasks\": [\n",
        "    {\"id\": \"b-1\", \"description\": \"y\"},\n",
        "    {\"description\": \"z\", \"id\": \"a-1\"}]}\n",
        "]}"
    ));
    assert!(err.contains("implementation.json:6:32: "), "{err}");
    assert!(err.contains("specs[1].tasks[1].id"), "{err}");
}

#[test]
fn an_empty_task_id_is_reported_where_it_is() {
    let err = load_error(
        "{\"specs\": [{\"id\": \"a\", \"file\": \"a.md\",\n \"tasks\": [{\"id\": \" \", \"description\": \"x\"}]}]}",
    );
    assert!(err.contains("implementation.json:2:19: "), "{err}");
    assert!(err.contains("specs[0].tasks[0].id is empty"), "{err}");
}

#[test]
fn duplicate_ids_are_refused() {
    let err = ImplementationStore::new(fixture("duplicate-task.json"))
        .load()
        .unwrap_err()
        .to_string();
    assert!(err.contains("duplicate-task.json:"), "{err}");
    assert!(
        !err.contains("duplicate-task.json:0"),
        "a real position: {err}"
    );
    assert!(
        err.contains("specs[1].tasks[0].id") && err.contains("a-1"),
        "{err}"
    );
}
