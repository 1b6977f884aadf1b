//! Property tests of `plan.jsonl` recovery: whatever a crash or a stray write leaves at the
//! end of the file, no acknowledged record is lost; whatever is done to the file anywhere,
//! loading it never panics, and an error names the file.

// The properties cut and scribble on the file as a crash or a stray writer would.
#![allow(clippy::disallowed_methods)]

use proptest::prelude::*;

use super::JsonlStore;
use crate::model::{Board, Change, Task};
use crate::store::{Store, StoreError};

/// Batches of task changes: one change is a single line, several a batch.
fn batches() -> impl Strategy<Value = Vec<Vec<Change>>> {
    let change = ("t-[0-9]", "[a-z ]{0,12}")
        .prop_map(|(id, name)| Change::Task(Task::new(id.as_str(), name.as_str())));
    proptest::collection::vec(proptest::collection::vec(change, 1..4), 1..6)
}

fn run<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(fut)
}

/// Persists `batches` into a new store at `path`; returns the board they make.
async fn persist_all(path: &std::path::Path, batches: &[Vec<Change>]) -> Board {
    let store = JsonlStore::open(path).expect("open");
    let mut board = Board::new();
    for batch in batches {
        store.persist(batch).await.expect("persist");
        board.apply_all(batch.clone());
    }
    board
}

/// What a fresh store (the next start) loads.
async fn reload(path: &std::path::Path) -> Result<Board, StoreError> {
    JsonlStore::open(path).expect("open").load().await
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_write_cut_short_by_a_crash_loses_no_acknowledged_record(
        acknowledged in batches(),
        last in batches(),
        cut in any::<prop::sample::Index>(),
    ) {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("plan.jsonl");
        let (board, whole, reloaded, after) = run(async {
            let board = persist_all(&path, &acknowledged).await;
            let before = std::fs::metadata(&path).expect("file").len();
            // The next write, cut short anywhere before its end: never acknowledged.
            persist_all(&path, &last[..1]).await;
            let len = std::fs::metadata(&path).expect("file").len();
            let keep = before + cut.index((len - before) as usize) as u64;
            // Cut only before its final newline, the write is whole: taken, like a
            // hand-edited last line without its newline.
            let whole = keep == len - 1;
            std::fs::OpenOptions::new().write(true).open(&path).expect("open")
                .set_len(keep).expect("cut");
            let reloaded = reload(&path).await.expect("a torn tail loads");
            // The repaired store takes the next write.
            let store = JsonlStore::open(&path).expect("open");
            store.load().await.expect("load");
            store.persist(&last[0]).await.expect("persist after the repair");
            let mut after = reloaded.clone();
            after.apply_all(last[0].clone());
            (board, whole, reloaded, after == reload(&path).await.expect("reload"))
        });
        if whole {
            let mut with_last = board.clone();
            with_last.apply_all(last[0].clone());
            prop_assert_eq!(reloaded, with_last);
        } else {
            prop_assert_eq!(reloaded, board);
        }
        prop_assert!(after);
    }

    #[test]
    fn garbage_after_the_last_write_is_dropped_or_refused_never_taken(
        acknowledged in batches(),
        garbage in proptest::collection::vec(any::<u8>(), 1..200),
    ) {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("plan.jsonl");
        let (board, loaded, file_kept) = run(async {
            let board = persist_all(&path, &acknowledged).await;
            let mut bytes = std::fs::read(&path).expect("read");
            bytes.extend_from_slice(&garbage);
            std::fs::write(&path, &bytes).expect("write");
            let loaded = reload(&path).await;
            (board, loaded, std::fs::read(&path).expect("read") == bytes)
        });
        prop_assert!(file_kept, "loading writes nothing");
        match loaded {
            // Dropped as a torn tail: exactly the acknowledged board.
            Ok(loaded) => prop_assert_eq!(loaded, board),
            // A whole bad line: refused, naming the file and the line.
            Err(e) => {
                prop_assert!(garbage.contains(&b'\n'), "a tail without a newline is torn: {e}");
                let text = e.to_string();
                prop_assert!(text.contains("plan.jsonl:"), "{text}");
            }
        }
    }

    #[test]
    fn any_truncation_or_overwrite_loads_or_names_the_file(
        acknowledged in batches(),
        at in any::<prop::sample::Index>(),
        overwrite in proptest::collection::vec(any::<u8>(), 0..16),
    ) {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("plan.jsonl");
        let loaded = run(async {
            persist_all(&path, &acknowledged).await;
            let mut bytes = std::fs::read(&path).expect("read");
            let at = at.index(bytes.len() + 1);
            if overwrite.is_empty() {
                bytes.truncate(at);
            } else {
                for (i, b) in overwrite.iter().enumerate() {
                    if let Some(slot) = bytes.get_mut(at + i) {
                        *slot = *b;
                    }
                }
            }
            std::fs::write(&path, &bytes).expect("write");
            reload(&path).await
        });
        if let Err(e) = loaded {
            prop_assert!(e.to_string().contains("plan.jsonl"), "{e}");
        }
    }
}
