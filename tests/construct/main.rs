//! The construct loop under failure, end to end: a scripted `FakeAgent`, real `ShellGate`s,
//! tempdir workspaces, `MemoryStore` (or `JsonlStore` where persistence matters) and short
//! real limits. Every assertion is on counts, order, states, prompts and events — never on
//! how long something took.

// Tests set up and look at their workspaces with git and the CLIs they start themselves,
// outside any run: the rule that processes start in ralph-loop-process is the library's.
#![allow(clippy::disallowed_types)]
// Tests write their fixtures and workspaces directly, outside any run: the rule
// that state is written through ralph-loop-process's `files` is the library's.
#![allow(clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

mod agent_failures;
mod board_edits;
mod bounded_prompt;
mod commits;
mod custom_tool;
mod deps;
mod evidence;
mod example_flow;
mod fallback;
mod forged_state;
mod inheritance;
mod interrupts;
mod kills;
mod limits;
mod markers;
mod misuse;
mod once_dry_run_progress;
mod parallel;
mod prompt_cache;
mod referee;
mod retries;
mod seams;
mod spend;
mod steering;
mod structured;
mod verify;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::*;
use async_trait::async_trait;
use ralph::BlockedItem;
use ralph::Event;
use ralph::agent::{FailureKind, Script};
use ralph::gate::GateStatus;
use ralph::model::{Change, IssueStatus, KillReason, Priority, Task, TaskId, TaskStatus};
use ralph::store::StoreError;
use ralph::{
    Agent, AgentError, AgentRequest, AgentRun, BuildError, Error, FakeAgent, JsonlStore,
    MemoryStore, Outcome, Ralph, RalphBuilder, Role, ShellGate, Store,
};
use rstest::rstest;
use serde_json::json;

const SPEC: &str = "# Greeter\nWrite done.txt, which greets.\n";

/// A gate that passes once `done.txt` exists and says so when it does not.
fn done_gate() -> ShellGate {
    ShellGate::new(
        "done-file",
        "test -f done.txt || { echo 'done.txt is missing'; exit 1; }",
    )
}

/// A build run that does the work and claims done.
fn writes_done() -> Script {
    Script::new()
        .write("done.txt", "hello\n")
        .answer("Wrote done.txt.\n<TASK_DONE>")
}

/// i-1 becomes one task, `t-1`; every verifier accepts; gap analysis finds nothing.
fn one_task() -> FakeAgent {
    FakeAgent::new()
        .on(
            Role::Investigate,
            "i-1",
            tasks(&[("Write done.txt", "done.txt exists and greets")]),
        )
        .always(Role::Verify, accept("meets the criteria"))
        .always(Role::GapAnalysis, no_gaps())
}

/// A scripted run against a tempdir workspace holding `spec.md`, with a `MemoryStore`.
struct Harness {
    dir: tempfile::TempDir,
    agent: Arc<FakeAgent>,
    store: MemoryStore,
    events: Recorder,
}

impl Harness {
    fn new(agent: FakeAgent) -> Self {
        Harness {
            dir: workspace(SPEC),
            agent: Arc::new(agent),
            store: MemoryStore::new(),
            events: Recorder::default(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn builder(&self) -> RalphBuilder {
        Ralph::builder()
            .workspace(self.path())
            .agent(self.agent.clone())
            .store(self.store.clone())
            .observer(self.events.clone())
            .stage_timeout(Duration::from_secs(20))
    }

    fn ralph(&self, configure: impl FnOnce(RalphBuilder) -> RalphBuilder) -> Ralph {
        configure(self.builder()).build().expect("ralph builds")
    }

    /// Builds with `configure` and runs `construct("spec.md")`.
    async fn run(&self, configure: impl FnOnce(RalphBuilder) -> RalphBuilder) -> Outcome {
        self.try_run(configure).await.expect("construct runs")
    }

    async fn try_run(
        &self,
        configure: impl FnOnce(RalphBuilder) -> RalphBuilder,
    ) -> Result<Outcome, Error> {
        self.ralph(configure).construct("spec.md").await
    }

    /// The requests for `role` about `subject`, in order.
    fn requests(&self, role: Role, subject: &str) -> Vec<AgentRequest> {
        self.agent
            .requests()
            .into_iter()
            .filter(|r| r.role == role && r.subject.as_deref() == Some(subject))
            .collect()
    }

    fn task(&self, id: &str) -> Task {
        self.store
            .board()
            .task(id)
            .expect("the task is on the board")
            .clone()
    }

    /// Every persisted record of task `id`, oldest first.
    fn history(&self, id: &str) -> Vec<Task> {
        self.store
            .persisted()
            .into_iter()
            .filter_map(|c| match c {
                Change::Task(t) if t.id == id => Some(t),
                _ => None,
            })
            .collect()
    }

    /// Ids of the `task_started` events, in order, with their attempt in the round.
    fn started(&self) -> Vec<(String, u32)> {
        self.events
            .events()
            .into_iter()
            .filter_map(|e| match e {
                Event::TaskStarted { task, attempt, .. } => Some((task.to_string(), attempt)),
                _ => None,
            })
            .collect()
    }

    fn gate_statuses(&self) -> Vec<GateStatus> {
        self.events
            .events()
            .into_iter()
            .filter_map(|e| match e {
                Event::GateFinished { status, .. } => Some(status),
                _ => None,
            })
            .collect()
    }
}

fn attempts(requests: &[AgentRequest]) -> Vec<u32> {
    requests.iter().map(|r| r.attempt).collect()
}

fn blocked(outcome: &Outcome) -> &[BlockedItem] {
    match outcome {
        Outcome::Blocked { items } => items,
        other => panic!("expected Blocked, got {other:?}"),
    }
}

/// Builds a `Ralph` on a workspace whose previous `Ralph` was just dropped.
///
/// Retries briefly on the store's lock: while another test of this binary spawns a gate,
/// the child holds duplicates of every descriptor between its fork and its exec (they are
/// close-on-exec), the lock file's included, for a moment.
fn build_unlocked(builder: impl Fn() -> RalphBuilder) -> Ralph {
    for _ in 0..200 {
        match builder().build() {
            Ok(ralph) => return ralph,
            Err(BuildError::Store(StoreError::Locked { .. })) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("ralph does not build: {e}"),
        }
    }
    panic!("the store stayed locked")
}

fn plan_file(dir: &Path) -> PathBuf {
    dir.join(".ralph/plan.jsonl")
}

/// Opens the workspace's `plan.jsonl` as the next process would (see [`build_unlocked`]).
fn open_unlocked(dir: &Path) -> JsonlStore {
    for _ in 0..200 {
        match JsonlStore::open(plan_file(dir)) {
            Ok(store) => return store,
            Err(StoreError::Locked { .. }) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("the store does not open: {e}"),
        }
    }
    panic!("the store stayed locked")
}

async fn wait_for_request(agent: &FakeAgent, role: Role) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while !agent.requests().iter().any(|r| r.role == role) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the agent was called");
}

/// Whether `pid` is a live (not zombie) `sleep`.
fn sleep_alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or("?");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    state != "Z" && String::from_utf8_lossy(&cmdline).contains("sleep")
}

const NOT_AT_END: &str = "did not end with <TASK_DONE> on a line of its own";

/// [`every_role`], with every run taking `work` before it answers.
fn every_role_taking(work: Duration) -> FakeAgent {
    let json = |value: serde_json::Value| Script::new().delay(work).json(value);
    FakeAgent::new()
        .on(
            Role::Investigate,
            "i-1",
            json(json!({"tasks": [{"name": "Write the greeter", "accept": "greets"}]})),
        )
        .on(
            Role::Build,
            "t-1",
            Script::new().delay(work).usage(96, 100, None),
        )
        .on(
            Role::Decompose,
            "t-1",
            json(json!({"subtasks": [
                {"name": "Write the greeting", "accept": "greets"},
                {"name": "Write the farewell", "accept": "says bye", "deps": [0]}
            ]})),
        )
        .always(
            Role::Build,
            Script::new()
                .delay(work)
                .answer("Implemented.\n<TASK_DONE>"),
        )
        .on(
            Role::Verify,
            "t-1a",
            json(json!({"verdict": "accept", "reason": "greets"})),
        )
        .on(
            Role::Verify,
            "t-1b",
            json(json!({"verdict": "accept", "reason": "says bye"})),
        )
        .on(
            Role::GapAnalysis,
            "iteration-2",
            json(json!({"tasks": [], "issues": []})),
        )
}
