//! BUILD with `build_concurrency = 4`: 16 independent tasks whose (fake) agent takes
//! L = 2 s each, in a real git repository, each task in its own work tree and merged by
//! rebase and fast forward. Ideally BUILD takes 4 waves of L; the target is
//! wall ÷ 4L ≤ 1.15 with the work trees' setup and the merges included.
//!
//! Those two costs are also measured alone, on the same kind of repository, with the same
//! git operations ralph runs: setup = `git worktree add` of a task's branch; merge = commit
//! in the work tree, rebase onto the moved head, fast forward, remove the work tree and
//! branch.
//!
//! Wall times of whole runs, so a few samples: `cargo bench --bench parallel_build`.
//! Results: `benches/RESULTS.md`.

// Benches and examples set up their workspaces with git and the programs they measure,
// outside any run: the rule that processes start in ralph-loop-process is the library's.
#![allow(clippy::disallowed_types)]
// A bench reports on stdout.
#![allow(clippy::print_stdout)]
// Benches write their fixtures and workspaces directly, outside any run: the rule
// that state is written through ralph-loop-process's `files` is the library's.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ralph::agent::Script;
use ralph::model::{Change, RunState, Stage, Task};
use ralph::{Event, FakeAgent, MemoryStore, Observer, Ralph, Role, Store};
use ralph_loop_core::git::Git;
use serde_json::json;

const TASKS: usize = 16;
const AT_ONCE: usize = 4;
const LATENCY: Duration = Duration::from_secs(2);
const SAMPLES: usize = 3;
const TARGET: f64 = 1.15;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut walls: Vec<Duration> = (0..SAMPLES).map(|_| rt.block_on(build_wall())).collect();
    walls.sort();
    let wall = walls[SAMPLES / 2];
    let ideal = LATENCY * (TASKS / AT_ONCE) as u32;
    let ratio = wall.as_secs_f64() / ideal.as_secs_f64();
    let (setup, merge) = rt.block_on(git_costs());
    println!("BUILD of {TASKS} tasks, {AT_ONCE} at once, agent latency L = {LATENCY:?}:");
    println!(
        "  wall {wall:.3?} (samples {:?}), 4L = {ideal:?}, wall ÷ 4L = {ratio:.3} (target ≤ {TARGET}: {})",
        walls,
        if ratio <= TARGET { "met" } else { "MISSED" }
    );
    println!("  per task: work tree setup {setup:.1?}, merge {merge:.1?} (medians of {TASKS})");
}

/// Records when BUILD starts and ends.
#[derive(Default)]
struct StageClock(Mutex<Vec<(Stage, Instant)>>);

impl Observer for StageClock {
    fn on_event(&self, event: &Event) {
        if let Event::StageEntered { stage, .. } = event {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((*stage, Instant::now()));
        }
    }
}

/// One run: the BUILD stage's wall time.
async fn build_wall() -> Duration {
    let dir = repo();
    let store = MemoryStore::new();
    // The spec already seeded and investigated into these tasks.
    let mut run = RunState::default();
    run.seeded = true;
    let changes: Vec<Change> = std::iter::once(Change::Run(run))
        .chain((1..=TASKS).map(|i| Change::Task(Task::new(format!("t-{i}"), format!("Task {i}")))))
        .collect();
    store.persist(&changes).await.expect("the board");
    let mut agent = FakeAgent::new();
    for i in 1..=TASKS {
        agent = agent.on(
            Role::Build,
            &format!("t-{i}"),
            Script::new()
                .delay(LATENCY)
                .write(format!("file-{i}.txt"), format!("{i}\n"))
                .answer("Done.\n<TASK_DONE>"),
        );
    }
    let agent = agent
        .always(
            Role::Verify,
            Script::new().json(json!({"verdict": "accept", "reason": "ok"})),
        )
        .always(
            Role::GapAnalysis,
            Script::new().json(json!({"tasks": [], "issues": []})),
        );
    let clock = Arc::new(StageClock::default());
    Ralph::builder()
        .workspace(dir.path())
        .agent(agent)
        .store(store)
        .observer(clock.clone())
        .build_concurrency(AT_ONCE)
        .build()
        .expect("a ralph")
        .construct(Path::new("spec.md"))
        .await
        .expect("the run");
    let stages = clock.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let start = stages.iter().find(|(s, _)| *s == Stage::Build).map(|s| s.1);
    let end = stages
        .iter()
        .find(|(s, _)| *s == Stage::Verify)
        .map(|s| s.1);
    match (start, end) {
        (Some(start), Some(end)) => end - start,
        _ => panic!("no BUILD then VERIFY in {stages:?}"),
    }
}

/// A repository with one commit, `.ralph/` ignored, and the spec, under Cargo's target tmp
/// dir (a real disk).
fn repo() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("ralph-bench-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("a temp workspace");
    std::fs::write(dir.path().join("spec.md"), "# Bench\nSixteen files.\n").expect("the spec");
    std::fs::write(dir.path().join(".gitignore"), ".ralph/\nbuild/\n").expect(".gitignore");
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "-A"],
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
    ] {
        let status = std::process::Command::new("git")
            .args(args)
            .current_dir(dir.path())
            .status()
            .expect("git runs");
        assert!(status.success());
    }
    dir
}

/// The medians of the setup and the merge of one task, done as ralph does them: all
/// work trees added from the same base, then merged one after the other.
async fn git_costs() -> (Duration, Duration) {
    let dir = repo();
    let git = Git::new(dir.path());
    let base = git.head().await.expect("head").expect("a commit");
    let trees: Vec<_> = (1..=TASKS)
        .map(|i| dir.path().join(format!(".ralph/worktrees/t-{i}")))
        .collect();
    std::fs::create_dir_all(dir.path().join(".ralph/worktrees")).expect("the folder");
    let mut setups = Vec::new();
    for (i, tree) in trees.iter().enumerate() {
        let started = Instant::now();
        git.add_worktree(tree, &format!("ralph-task/t-{}", i + 1), &base)
            .await
            .expect("a work tree");
        setups.push(started.elapsed());
        std::fs::write(tree.join(format!("file-{i}.txt")), "x\n").expect("a change");
    }
    let mut merges = Vec::new();
    for (i, tree) in trees.iter().enumerate() {
        let started = Instant::now();
        let branch = format!("ralph-task/t-{}", i + 1);
        let work = Git::new(tree);
        work.commit_all(&format!("t-{}: Task", i + 1), &[])
            .await
            .expect("a commit");
        let head = git.head().await.expect("head").expect("a commit");
        work.rebase(&head).await.expect("a rebase");
        git.fast_forward(&branch).await.expect("a fast forward");
        git.remove_worktree(tree).await.expect("removed");
        git.delete_branch(&branch).await.expect("deleted");
        merges.push(started.elapsed());
    }
    setups.sort();
    merges.sort();
    (setups[TASKS / 2], merges[TASKS / 2])
}
