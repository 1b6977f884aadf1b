//! Build mode and plan mode leave a run log, as the construct loop does: one
//! `<log_dir>/ralph-<timestamp>-build-specs.log` per `build_specs` call and one
//! `ralph-<timestamp>-plan-mode.log` per `plan` call, one event per line
//! (`<RFC 3339 time> <JSON event>`), ending with how the run ended.

#![cfg(unix)]
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::support::Recorder;
use crate::support::specs::*;
use ralph::agent::Script;
use ralph::{FakeAgent, Role};
use serde_json::{Value, json};

/// The run logs in the default log dir whose name ends with `suffix`, sorted.
fn run_logs(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir.join("build/ralph-logs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("ralph-20") && name.ends_with(suffix)
        })
        .collect();
    found.sort();
    found
}

/// Each line: an RFC 3339 time, a space, one JSON event.
fn events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| {
            let (time, event) = line.split_once(' ').unwrap();
            assert!(time.starts_with("20") && time.ends_with('Z'), "{line}");
            serde_json::from_str(event).unwrap()
        })
        .collect()
}

fn kinds(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn build_mode_writes_one_event_log_per_call() {
    let ws = workspace(&[("specs/a.md", "# A\n")]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["One"])]);
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "a", planner("# Plan: a"))
            .on(Role::Build, "a-1", done())
            .on(Role::Verify, "a", accept()),
    );
    let recorder = Recorder::default();
    let ralph = ralph(dir, agent, recorder.clone(), vec![]);
    ralph.build_specs().await.unwrap();

    let logs = run_logs(dir, "-build-specs.log");
    assert_eq!(logs.len(), 1, "{logs:?}");
    let logged = events(&logs[0]);
    let kinds = kinds(&logged);
    for kind in [
        "plan_written",
        "task_started",
        "agent_finished",
        "task_done",
        "verdict",
        "spec_committed",
    ] {
        assert!(kinds.contains(&kind), "no {kind} in {kinds:?}");
    }
    let outcome = json!({"outcome": "complete", "specs": 1, "tasks": 1, "gates": []});
    assert_eq!(
        logged[logged.len() - 2],
        json!({"event": "specs_finished", "outcome": outcome})
    );
    // How the run was confined depends on the machine (bubblewrap, or unconfined and why).
    let mut finished = logged.last().unwrap().clone();
    let sandbox = finished.as_object_mut().unwrap().remove("sandbox");
    assert!(sandbox.is_some_and(|s| s.as_str().is_some_and(|s| !s.is_empty())));
    assert_eq!(
        &finished,
        &json!({"event": "finished", "mode": "build", "specs_outcome": outcome,
                "message": "All specs complete: 1 spec committed, 1 task completed in this run. Evidence: no required gates; each spec accepted by its verifier.",
                "spent_usd": 0.0, "spent_tokens": 0, "spent_cache_read_tokens": 0,
                "spent_cache_creation_tokens": 0, "exit_code": 0, "needs_person": false})
    );
    // The log holds what the observers saw, in the same order.
    let seen: Vec<Value> = recorder
        .events()
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect();
    assert_eq!(logged, seen);

    // A second call, a second log, which says there was nothing left to do. (Apart by more
    // than the stamp's millisecond, so the names sort in call order.)
    drop(ralph);
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let again =
        crate::support::specs::ralph(dir, Arc::new(FakeAgent::new()), Recorder::default(), vec![]);
    again.build_specs().await.unwrap();
    let logs = run_logs(dir, "-build-specs.log");
    assert_eq!(logs.len(), 2, "{logs:?}");
    assert_eq!(
        without_sandbox(events(&logs[1])),
        [
            json!({"event": "warning", "message": "no required gate: each task is done on the agent's word and the verifier's (add [[gates]] to ralph.toml)"}),
            json!({"event": "specs_finished", "outcome": {"outcome": "complete", "specs": 0, "tasks": 0, "gates": []}}),
            json!({"event": "finished", "mode": "build", "specs_outcome": {"outcome": "complete", "specs": 0, "tasks": 0, "gates": []},
                   "message": "All specs complete: 0 specs committed, 0 tasks completed in this run. Evidence: no required gates; each spec accepted by its verifier.",
                   "spent_usd": 0.0, "spent_tokens": 0, "spent_cache_read_tokens": 0,
                "spent_cache_creation_tokens": 0, "exit_code": 0, "needs_person": false})
        ]
    );
}

/// `events` without what depends on the machine: the `finished` event's `sandbox`, and the
/// warning of a run that found no sandbox.
fn without_sandbox(mut events: Vec<Value>) -> Vec<Value> {
    events.retain(|e| {
        !e["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("running unconfined"))
    });
    for event in &mut events {
        if let Some(object) = event.as_object_mut() {
            object.remove("sandbox");
        }
    }
    events
}

#[tokio::test]
async fn a_build_mode_error_ends_its_log() {
    let ws = workspace(&[("specs/a.md", "# A\n")]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["One"])]);
    // No script for the planner: the fake agent fails the run with an error.
    let ralph = ralph(dir, Arc::new(FakeAgent::new()), Recorder::default(), vec![]);
    let err = ralph.build_specs().await.unwrap_err();
    // The error and its cause, once each (its own message names no cause).
    let cause = std::error::Error::source(&err).expect("the agent's error");
    let err = format!("{err}: {cause}");
    let logged = events(&run_logs(dir, "-build-specs.log")[0]);
    let last = logged.last().unwrap();
    assert_eq!(last["event"], "finished");
    assert_eq!(last["error"].as_str().unwrap(), err);
    assert_eq!(
        last["message"].as_str().unwrap(),
        format!("build mode stopped: {err}")
    );
}

#[tokio::test]
async fn plan_mode_writes_one_event_log_per_call() {
    let ws = workspace(&[("specs/greeter.md", "# Greeter\n")]);
    let dir = ws.path();
    let answer = Script::new().json(json!({"specs": [
        {"id": "greeter", "name": "Greeter", "file": "specs/greeter.md", "priority": 1,
         "tasks": [{"description": "Write greet.sh"}, {"description": "Test it"}]}
    ]}));
    let agent = Arc::new(FakeAgent::new().on(Role::Breakdown, "plan-mode", answer));
    let ralph = ralph(dir, agent, Recorder::default(), vec![]);
    ralph.plan(Vec::<&str>::new()).await.unwrap();
    let logs = run_logs(dir, "-plan-mode.log");
    assert_eq!(logs.len(), 1, "{logs:?}");
    let logged = events(&logs[0]);
    assert_eq!(kinds(&logged), ["agent_finished", "plan_saved", "finished"]);
    let head = git(dir, &["rev-parse", "HEAD"]).trim().to_owned();
    assert_eq!(
        logged[1],
        json!({"event": "plan_saved", "path": "implementation.json", "specs": 1, "tasks": 2, "commit": head})
    );

    // An unusable answer: the log ends with the error plan mode returned.
    drop(ralph);
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let agent = Arc::new(FakeAgent::new().always(Role::Breakdown, Script::new().answer("no JSON")));
    let ralph = crate::support::specs::ralph(dir, agent, Recorder::default(), vec![]);
    let err = ralph
        .plan(Vec::<&str>::new())
        .await
        .unwrap_err()
        .to_string();
    let logs = run_logs(dir, "-plan-mode.log");
    assert_eq!(logs.len(), 2);
    let logged = events(&logs[1]);
    assert_eq!(logged.last().unwrap()["event"], "finished");
    assert_eq!(
        logged.last().unwrap()["message"].as_str().unwrap(),
        format!("plan mode stopped: {err}")
    );
}
