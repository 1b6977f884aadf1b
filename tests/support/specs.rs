//! Helpers for the plan-mode and build-mode tests: a git workspace with markdown specs, an
//! `implementation.json`, and scripts for the planner and the spec verifier.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use ralph::agent::Script;
use ralph::specs::implementation::ImplementationStore;
use ralph::specs::{Implementation, SpecEntry, TaskEntry};
use ralph::{FakeAgent, Observer, Ralph, ShellGate};
use serde_json::json;

/// A git repository with the given specs (`(path, text)`) and a `ralph.toml` with short
/// backoffs, committed once.
pub fn workspace(specs: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q", "-b", "main"]);
    write(
        dir.path(),
        "ralph.toml",
        "transient_backoff = \"10ms\"\nretries = 2\n[planning]\nmax_attempts = 3\n",
    );
    for (path, text) in specs {
        write(dir.path(), path, text);
    }
    write(dir.path(), ".gitignore", ".ralph/\nbuild/\n");
    git(dir.path(), &["add", "-A"]);
    git(
        dir.path(),
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "commit",
            "-q",
            "-m",
            "Initial commit",
        ],
    );
    dir
}

pub use super::write;

pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Commit subjects, newest first.
pub fn commits(dir: &Path) -> Vec<String> {
    git(dir, &["log", "--format=%s"])
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Writes `implementation.json` with specs `(id, priority, tasks)`, each spec's file
/// `specs/<id>.md`.
pub fn implementation(dir: &Path, specs: &[(&str, i64, &[&str])]) {
    let mut plan = Implementation::default();
    for (id, priority, tasks) in specs {
        let mut spec = SpecEntry::new(*id, format!("specs/{id}.md"));
        spec.name = format!("Spec {id}");
        spec.priority = *priority;
        spec.context = format!("Context of {id}.");
        spec.acceptance_criteria = vec![format!("{id} works")];
        for (i, task) in tasks.iter().enumerate() {
            spec.tasks.push(
                TaskEntry::new(format!("{id}-{}", i + 1), *task)
                    .with_criteria([format!("{task} is done")]),
            );
        }
        plan.specs.push(spec);
    }
    store(dir).save(&mut plan, "test").unwrap();
}

pub fn store(dir: &Path) -> ImplementationStore {
    ImplementationStore::new(dir.join("implementation.json"))
}

pub fn load(dir: &Path) -> Implementation {
    store(dir).load().unwrap().unwrap()
}

/// A planner's final answer: the plan, then the magic phrase.
pub fn planner(plan: &str) -> Script {
    Script::new().answer(format!("{plan}\n\nPLAN_COMPLETE"))
}

pub fn done() -> Script {
    Script::new().answer("Implemented.\n<TASK_DONE>")
}

pub fn accept() -> Script {
    Script::new().json(json!({"verdict": "accept", "reason": "meets the spec"}))
}

pub fn reject(reason: &str) -> Script {
    Script::new().json(json!({"verdict": "reject", "reason": reason}))
}

/// A Ralph on `dir` with the agent, observer and gates given.
pub fn ralph(
    dir: &Path,
    agent: Arc<FakeAgent>,
    observer: impl Observer + 'static,
    gates: Vec<ShellGate>,
) -> Ralph {
    let mut builder = Ralph::builder()
        .workspace(dir)
        .agent(agent)
        .observer(observer);
    for gate in gates {
        builder = builder.gate(gate);
    }
    builder.build().unwrap()
}

/// The prompts of the requests of `role`, in order.
pub fn prompts(agent: &FakeAgent, role: ralph::Role) -> Vec<(String, String)> {
    agent
        .requests()
        .into_iter()
        .filter(|r| r.role == role)
        .map(|r| (r.subject.unwrap_or_default(), r.prompt))
        .collect()
}
