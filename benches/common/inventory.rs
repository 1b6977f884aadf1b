//! The workspace both prompt-cache benches run on: the spec of an inventory service, a
//! section per endpoint, committed as the first commit of a fresh git repository, and a
//! board seeded with a task per endpoint (so no planning call).

use std::path::Path;

use ralph::model::{Change, RunState, Task};
use ralph::{MemoryStore, Store};

/// A spec with `sections` endpoint sections, about 420 bytes each.
pub(crate) fn spec(sections: usize) -> String {
    let mut spec = String::from("# Inventory service\n\nAn HTTP service for a warehouse.\n");
    for i in 1..=sections {
        spec.push_str(&format!(
            "\n## Endpoint {i}\n\n`GET /items/{i}` returns the item's record as JSON: its id, \
             name, quantity and shelf. A missing item is a 404 with a JSON error body; a \
             malformed id is a 400. The handler reads through the repository layer, never the \
             database directly, logs one line per request at info level, and is covered by a \
             unit test of the handler and an integration test against the in-memory store. \
             Its response carries an ETag.\n"
        ));
    }
    spec
}

/// Makes `ws` a git repository whose first commit holds what it has now.
pub(crate) fn commit_all(ws: &Path) {
    git(ws, &["init", "-q", "-b", "main"]);
    git(ws, &["add", "-A"]);
    git(
        ws,
        &[
            "-c",
            "user.name=b",
            "-c",
            "user.email=b@b",
            "commit",
            "-q",
            "-m",
            "base",
        ],
    );
}

/// A board seeded with `tasks` tasks, `t-1` … `t-<tasks>`, one per endpoint.
pub(crate) async fn board(tasks: usize) -> MemoryStore {
    let mut changes: Vec<Change> = (1..=tasks)
        .map(|i| {
            Change::Task(
                Task::new(format!("t-{i}"), format!("Add GET /items/{i}"))
                    .with_acceptance(format!("GET /items/{i} answers as the spec says")),
            )
        })
        .collect();
    let mut state = RunState::default();
    state.seeded = true;
    changes.insert(0, Change::Run(state));
    let store = MemoryStore::new();
    store.persist(&changes).await.expect("the board");
    store
}

fn git(dir: &Path, args: &[&str]) {
    let status = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .status()
        .expect("git runs");
    assert!(status.success(), "git {args:?}");
}
