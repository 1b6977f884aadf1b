//! The size of the BUILD prompt as the board grows: a board of `n` accepted tasks and one
//! pending task, built by one `construct` with a [`FakeAgent`] that records its prompts.
//! The prompt's tokens are paid on every agent run, so it must not grow with the board: the
//! target is that its size at 1,000 accepted tasks is at most 1.5× its size at 10.
//!
//! A count, not a time: run with `cargo bench --bench prompt_size`. Results:
//! `benches/RESULTS.md`.

// A bench reports on stdout.
#![allow(clippy::print_stdout)]
// Benches write their fixtures and workspaces directly, outside any run: the rule
// that state is written through ralph-loop-process's `files` is the library's.
#![allow(clippy::disallowed_methods)]

use std::path::Path;

use ralph::agent::Script;
use ralph::model::{Change, RunState, Task, TaskStatus};
use ralph::{FakeAgent, MemoryStore, Ralph, Role, Store};
use serde_json::json;

/// The target: bytes at 1,000 ÷ bytes at 10.
const TARGET: f64 = 1.5;

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    println!("| accepted tasks | BUILD prompt bytes |");
    println!("|---:|---:|");
    let mut sizes = Vec::new();
    for n in [10, 100, 1_000] {
        let bytes = rt.block_on(build_prompt_bytes(n));
        println!("| {n} | {bytes} |");
        sizes.push(bytes);
    }
    let ratio = sizes[2] as f64 / sizes[0] as f64;
    let verdict = if ratio <= TARGET { "met" } else { "MISSED" };
    println!("\nbytes at 1,000 ÷ bytes at 10 = {ratio:.3} (target ≤ {TARGET}: {verdict})");
}

/// The bytes of the BUILD prompt of the one pending task on a board that also holds `n`
/// accepted ones, with names as long as real ones.
async fn build_prompt_bytes(n: usize) -> usize {
    let dir = tempfile::tempdir().expect("a temp workspace");
    std::fs::write(
        dir.path().join("spec.md"),
        "# Bench\nA spec of many small tasks.\n",
    )
    .expect("the spec");
    let mut changes: Vec<Change> = (1..=n)
        .map(|i| {
            Change::Task(
                Task::new(
                    format!("t-{i}"),
                    format!("Add the handler for endpoint number {i} with its tests"),
                )
                .with_acceptance("it is done")
                .with_status(TaskStatus::Accepted),
            )
        })
        .collect();
    changes.push(Change::Task(
        Task::new(format!("t-{}", n + 1), "The last task").with_acceptance("it is done"),
    ));
    // The spec already seeded and investigated into these tasks.
    let mut run = RunState::default();
    run.seeded = true;
    changes.insert(0, Change::Run(run));
    let store = MemoryStore::new();
    store.persist(&changes).await.expect("the board");
    let agent = std::sync::Arc::new(
        FakeAgent::new()
            .always(Role::Build, Script::new().answer("Done.\n<TASK_DONE>"))
            .always(
                Role::Verify,
                Script::new().json(json!({"verdict": "accept", "reason": "ok"})),
            )
            .always(
                Role::GapAnalysis,
                Script::new().json(json!({"tasks": [], "issues": []})),
            ),
    );
    Ralph::builder()
        .workspace(dir.path())
        .agent(agent.clone())
        .store(store)
        .build()
        .expect("a ralph")
        .construct(Path::new("spec.md"))
        .await
        .expect("the run");
    agent
        .requests()
        .iter()
        .find(|r| r.role == Role::Build)
        .map_or(0, |r| r.prompt.len())
}
