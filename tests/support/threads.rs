//! Shared by the `thread_*` tests: a real git repository in a temp dir, a spec, threads.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;

use ralph::agent::{FakeAgent, Script};
use ralph::thread::{RunConfig, Threads};
use ralph_loop_core::git::Git;

/// A spec whose two criteria are shell commands about `hello.txt`.
pub const SPEC: &str = "# Greeter\n\nWrite hello.txt saying hello.\n\n<promise>SHIPPED</promise>\n\n## Acceptance Criteria\n\n- [ ] hello.txt exists: `test -f hello.txt`\n- [ ] it says hello: `grep -q hello hello.txt`\n";

/// A git repository with one commit (`README.md`), on `main`.
pub async fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let git = Git::new(dir.path());
    git.init().await.unwrap();
    std::fs::write(dir.path().join("README.md"), "# demo\n").unwrap();
    git.commit_all("init", &[]).await.unwrap();
    dir
}

/// Threads over `dir` with `agent`, methodical or quick, `max` iterations per round.
pub fn threads(dir: &Path, agent: &Arc<FakeAgent>, quick: bool, max: u32) -> Threads {
    Threads::new(dir, Arc::clone(agent))
        .unwrap()
        .quick(quick)
        .run_config(RunConfig::default().max_iterations(max))
}

/// An iteration that writes `hello.txt` with `content` and claims done.
pub fn writes(content: &str) -> Script {
    Script::new()
        .write("hello.txt", content)
        .answer("Wrote hello.txt.\nSHIPPED")
}

/// An iteration that claims nothing.
pub fn no_claim() -> Script {
    Script::new().answer("I looked around; more to do.")
}

/// Creates and finalizes a thread with `spec`; returns its id.
pub fn finalized(threads: &Threads, spec: &str) -> String {
    let id = threads.create("Greeter", spec).unwrap().id;
    threads.thread(&id).finalize().unwrap();
    id
}

/// Writes `text` as a thread's record by hand, as a person would, and adopts the edit as
/// theirs (what `ralph repair --adopt` does): ralph refuses a record it did not write.
pub async fn hand_edit(threads: &Threads, path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    threads.repair(true).await.unwrap();
}

/// Writes `text` as a thread's record as an earlier ralph left it: no seal, and no sealed
/// version beside it (`<file>.last`), so it is taken as it is.
pub fn as_an_earlier_ralph_wrote(path: &Path, text: &str) {
    let text = match text.split_once(",\n  \"seal\": \"") {
        Some((record, _)) => format!("{record}\n}}\n"),
        None => text.to_owned(),
    };
    std::fs::write(path, text).unwrap();
    let mut last = path.as_os_str().to_owned();
    last.push(".last");
    let _ = std::fs::remove_file(last);
}
