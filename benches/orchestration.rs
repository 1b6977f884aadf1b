//! What the construct loop itself costs, with the agent and the gates taken out of the
//! picture: an in-process [`FakeAgent`] that answers at once and a gate that passes without
//! starting a process.
//!
//! - `per_task`: a board of `n` independent pending tasks, built, verified and accepted by
//!   one `construct` (BUILD → VERIFY → COMPLETE), with the real [`JsonlStore`] (an append and
//!   an `fdatasync` per transition, as users run it) and with [`MemoryStore`] (to separate the
//!   store's share). Reported per task; the target is that the per-task cost at 10,000 tasks
//!   is at most 1.5× that at 100 (the total grows linearly).
//! - `verify_fork_join`: 16 done tasks whose verifier takes `L` = 50 ms each, at most 8 at
//!   once. The target is a wall time of at most 1.1 × 2L (two waves).
//!
//! Workspaces are created under Cargo's target tmp dir (a real disk, so `fdatasync` costs
//! what it costs), not in `/tmp`, which may be a tmpfs. Setup (workspace, spec, board) and
//! teardown are not measured.
//!
//! Run with `cargo bench --bench orchestration`. Results: `benches/RESULTS.md`.

// Benches write their fixtures and workspaces directly, outside any run: the rule
// that state is written through ralph-loop-process's `files` is the library's.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use divan::Bencher;
use divan::counter::ItemsCount;
use ralph::agent::Script;
use ralph::gate::{GateContext, GateError};
use ralph::model::{Change, RunState, Task, TaskStatus};
use ralph::{
    FakeAgent, Gate, GateReport, GateStatus, JsonlStore, MemoryStore, Outcome, Ralph, Role, Store,
};
use serde_json::json;
use tempfile::TempDir;
use tokio::runtime::Runtime;

fn main() {
    divan::main();
    // Only now: see `Fixture`.
    lock_ignoring_poison(&SPENT).clear();
}

/// Workspaces of finished samples, removed when all benchmarks are done.
static SPENT: Mutex<Vec<TempDir>> = Mutex::new(Vec::new());

fn lock_ignoring_poison<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// A verifier's latency in `verify_fork_join`.
const VERIFY_LATENCY: Duration = Duration::from_millis(50);

/// A required gate that passes at once: the engine's share of a gate, without a process.
struct NoopGate;

#[async_trait]
impl Gate for NoopGate {
    fn name(&self) -> &str {
        "noop"
    }

    async fn check(&self, _ctx: GateContext) -> Result<GateReport, GateError> {
        Ok(GateReport::new("noop", true, GateStatus::Passed))
    }
}

#[derive(Clone, Copy, Debug)]
enum StoreKind {
    Jsonl,
    Memory,
}

/// One prepared run: the workspace and the `Ralph` on it.
///
/// The workspace is not removed when the sample ends but when the process does: a run
/// creates a log file per agent call (20,000 at 10,000 tasks), and on some file systems
/// (ext4 without a journal) creating files just after many were deleted scans past every
/// recently freed inode, which would charge the previous sample's cleanup to this one.
/// The price is disk space until the end: about 80 MB per 10,000-task sample, under 1 GB.
struct Fixture {
    ralph: Ralph,
    tasks: usize,
    dir: Option<TempDir>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(dir) = self.dir.take() {
            lock_ignoring_poison(&SPENT).push(dir);
        }
    }
}

fn runtime() -> Runtime {
    // What `#[tokio::main]` gives users.
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A workspace with a spec, a board of `n` tasks in `status`, and a `Ralph` on it.
fn fixture(
    rt: &Runtime,
    kind: StoreKind,
    n: usize,
    status: TaskStatus,
    agent: FakeAgent,
) -> Fixture {
    let dir = tempfile::Builder::new()
        .prefix("ralph-bench-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("a temp workspace");
    std::fs::write(dir.path().join("spec.md"), "# Bench\nDo the tasks.\n").expect("the spec");
    // The spec already seeded and investigated into these tasks: the bench measures their
    // builds and verifications, not an investigation.
    let mut run = RunState::default();
    run.seeded = true;
    let changes: Vec<Change> = std::iter::once(Change::Run(run))
        .chain((1..=n).map(|i| {
            Change::Task(
                Task::new(format!("t-{i}"), format!("Task number {i}"))
                    .with_acceptance("it is done")
                    .with_status(status),
            )
        }))
        .collect();
    let builder = Ralph::builder()
        .workspace(dir.path())
        .agent(agent)
        .gate(NoopGate)
        .verify_concurrency(8);
    let ralph = match kind {
        StoreKind::Jsonl => {
            let store = JsonlStore::open(dir.path().join(".ralph/plan.jsonl")).expect("the store");
            rt.block_on(store.persist(&changes)).expect("the board");
            builder.store(store)
        }
        StoreKind::Memory => {
            let store = MemoryStore::new();
            rt.block_on(store.persist(&changes)).expect("the board");
            builder.store(store)
        }
    }
    .build()
    .expect("a ralph");
    Fixture {
        ralph,
        tasks: n,
        dir: Some(dir),
    }
}

/// Builds answer done, verifiers accept (after `verify_delay`), gap analysis finds nothing.
fn agent(verify_delay: Option<Duration>) -> FakeAgent {
    let verify = match verify_delay {
        Some(delay) => Script::new().delay(delay),
        None => Script::new(),
    };
    let verify = verify.json(json!({"verdict": "accept", "reason": "looks right"}));
    FakeAgent::new()
        .always(Role::Build, Script::new().answer("Done.\n<TASK_DONE>"))
        .always(Role::Verify, verify)
        .always(
            Role::GapAnalysis,
            Script::new().json(json!({"tasks": [], "issues": []})),
        )
}

fn construct(rt: &Runtime, fixture: &Fixture) {
    let outcome = rt
        .block_on(fixture.ralph.construct(Path::new("spec.md")))
        .expect("the run");
    assert!(
        matches!(outcome, Outcome::Complete { iterations: 1, accepted, .. } if accepted == fixture.tasks),
        "{outcome:?}"
    );
}

fn per_task(bencher: Bencher<'_, '_>, kind: StoreKind, n: usize) {
    let rt = runtime();
    bencher
        .counter(ItemsCount::new(n))
        .with_inputs(|| fixture(&rt, kind, n, TaskStatus::Pending, agent(None)))
        .bench_local_refs(|fixture| construct(&rt, fixture));
}

/// BUILD → VERIFY → COMPLETE of `n` independent pending tasks, per task.
#[divan::bench_group(sample_size = 1)]
mod per_task {
    use super::*;

    #[divan::bench(sample_count = 50)]
    fn jsonl_100(bencher: Bencher<'_, '_>) {
        per_task(bencher, StoreKind::Jsonl, 100);
    }

    #[divan::bench(sample_count = 5)]
    fn jsonl_10000(bencher: Bencher<'_, '_>) {
        per_task(bencher, StoreKind::Jsonl, 10_000);
    }

    #[divan::bench(sample_count = 50)]
    fn memory_100(bencher: Bencher<'_, '_>) {
        per_task(bencher, StoreKind::Memory, 100);
    }

    #[divan::bench(sample_count = 5)]
    fn memory_10000(bencher: Bencher<'_, '_>) {
        per_task(bencher, StoreKind::Memory, 10_000);
    }
}

/// VERIFY of 16 done tasks whose verifier takes 50 ms, 8 at once: wall time of the run.
#[divan::bench(args = [StoreKind::Jsonl, StoreKind::Memory], sample_count = 20, sample_size = 1)]
fn verify_fork_join(bencher: Bencher<'_, '_>, kind: StoreKind) {
    let rt = runtime();
    bencher
        .with_inputs(|| fixture(&rt, kind, 16, TaskStatus::Done, agent(Some(VERIFY_LATENCY))))
        .bench_local_refs(|fixture| construct(&rt, fixture));
}
