//! Crash and resume: `ralph demo` is killed with SIGKILL at several points of the bundled
//! demo, then run again on the same workspace until it finishes. No task may be lost, and no
//! task may be run again after it was accepted.

#![cfg(unix)]
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;

use crate::demo::construct_demo;
use crate::support::messages_api::alive_with_env;
use serde_json::Value;

/// How one run ended.
struct Run {
    code: Option<i32>,
    events: Vec<Value>,
}

/// Runs `ralph demo --in WORKSPACE --json`; kills it with SIGKILL right after the first
/// event for which `kill_at` is true, if any.
fn run(workspace: &Path, kill_at: Option<&dyn Fn(&Value) -> bool>) -> Run {
    let mut child = crate::command(workspace.parent().unwrap(), &["demo", "--json", "--in"])
        .arg(workspace)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn ralph demo");
    let stdout = child.stdout.take().expect("stdout");
    let mut events = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("utf-8 line");
        let event: Value = serde_json::from_str(&line).expect("an NDJSON event");
        let kill = kill_at.is_some_and(|f| f(&event));
        events.push(event);
        if kill {
            child.kill().expect("SIGKILL");
            break;
        }
    }
    let status = child.wait().expect("wait");
    Run {
        code: status.code(),
        events,
    }
}

/// The demo's final board: every task accepted but the decomposed one.
fn assert_complete(workspace: &Path) {
    let text = std::fs::read_to_string(workspace.join(".ralph/plan.jsonl")).expect("plan.jsonl");
    let mut status: HashMap<String, String> = HashMap::new();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).expect("a plan line");
        if v["t"] == "task" {
            status.insert(
                v["id"].as_str().unwrap().into(),
                v["s"].as_str().unwrap().into(),
            );
        }
    }
    let mut got: Vec<_> = status.into_iter().collect();
    got.sort();
    let expected: Vec<(String, String)> = [
        ("t-1", "a"),
        ("t-2", "a"),
        ("t-3", "x"),
        ("t-3a", "a"),
        ("t-3b", "a"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(got, expected, "the board after resuming");
}

/// After the verify run that accepted a task, no agent run is about that task again.
fn assert_nothing_after_acceptance(workspace: &Path, runs: &[Run]) {
    let accepted: Vec<String> = runs
        .iter()
        .flat_map(|r| &r.events)
        .filter(|e| e["event"] == "verdict" && e["accepted"] == true)
        .map(|e| e["task"].as_str().unwrap().to_owned())
        .collect();
    let log =
        std::fs::read_to_string(workspace.join(".ralph/fake-requests.jsonl")).expect("requests");
    let requests: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for task in accepted {
        let about: Vec<&Value> = requests
            .iter()
            .filter(|r| r["subject"] == task.as_str())
            .collect();
        let last = about.last().expect("requests about an accepted task");
        assert_eq!(
            last["role"], "verify",
            "{task}: the last run about it must be its accepting verifier: {about:?}"
        );
    }
}

fn crash_then_resume(kill_at: &dyn Fn(&Value) -> bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let workspace = &dir.path().join("ws");
    let first = run(workspace, Some(kill_at));
    assert_eq!(first.code, None, "the first run is killed by SIGKILL");
    let mut runs = vec![first];
    for _ in 0..3 {
        let again = run(workspace, None);
        let code = again.code;
        runs.push(again);
        if code == Some(0) {
            break;
        }
    }
    assert_eq!(
        runs.last().unwrap().code,
        Some(0),
        "resumed runs finish the spec"
    );
    assert_complete(workspace);
    assert_nothing_after_acceptance(workspace, &runs);
}

fn is(event: &'static str) -> impl Fn(&Value) -> bool {
    move |e: &Value| e["event"] == event
}

#[test]
fn killed_while_investigating() {
    crash_then_resume(&is("stage_entered"));
}

#[test]
fn killed_in_the_middle_of_a_retry() {
    crash_then_resume(&|e| e["event"] == "task_started" && e["task"] == "t-1" && e["attempt"] == 2);
}

#[test]
fn killed_after_a_task_was_done() {
    crash_then_resume(&|e| e["event"] == "task_done" && e["task"] == "t-2");
}

#[test]
fn killed_while_the_hanging_task_runs() {
    crash_then_resume(&|e| e["event"] == "task_started" && e["task"] == "t-3");
}

#[test]
fn killed_right_after_decomposition() {
    crash_then_resume(&is("decomposed"));
}

#[test]
fn killed_between_verdicts() {
    crash_then_resume(&is("verdict"));
}

#[test]
fn killed_after_the_first_acceptance_round() {
    crash_then_resume(&|e| e["event"] == "iteration_finished" && e["iteration"] == 2);
}

/// Live processes carrying `mark`, but `me`.
fn others(mark: &str, me: u32) -> Vec<i32> {
    let me = i32::try_from(me).unwrap();
    alive_with_env("TEST_RUN_MARK", mark)
        .into_iter()
        .filter(|pid| *pid != me)
        .collect()
}

/// Polls `done` every 50 ms for up to 30 s.
fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn processes_left_by_a_killed_run_are_killed_at_the_next_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let workspace = dir.path();
    std::fs::copy(
        Path::new(crate::demo::DEMO).join("spec.md"),
        workspace.join("spec.md"),
    )
    .unwrap();
    // A gate that starts a daemon in a session of its own, then takes its time.
    std::fs::write(
        workspace.join("ralph.toml"),
        "stage_timeout = \"2m\"\nagent_timeout = \"30s\"\n\n\
         [sandbox]\nenv = [\"TEST_RUN_MARK\"]\n\n[[gates]]\nname = \"slow\"\n\
         command = \"setsid sleep 300 >/dev/null 2>&1 & sleep 120\"\ntimeout = \"2m\"\n",
    )
    .unwrap();
    let start = |mark: &str| {
        construct_demo(workspace, &["spec.md", "--json"])
            .env("TEST_RUN_MARK", mark)
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn ralph construct")
    };
    let first_mark = format!("first-{}", std::process::id());

    let mut first = start(&first_mark);
    let first_pid = first.id();
    let leftovers = || others(&first_mark, first_pid);
    // The gate's shell, its `sleep 120` and the daemon.
    wait_until("the slow gate runs", || leftovers().len() >= 3);
    first.kill().expect("SIGKILL");
    first.wait().unwrap();
    assert!(
        !leftovers().is_empty(),
        "SIGKILL leaves the gate's processes behind"
    );

    let second_mark = format!("second-{}", std::process::id());
    let mut second = start(&second_mark);
    wait_until("the next start kills the leftovers", || {
        leftovers().is_empty()
    });
    let second_pid = second.id();
    let own = || others(&second_mark, second_pid);
    wait_until("the second run's gate runs", || own().len() >= 3);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(second_pid).unwrap()),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    assert_eq!(second.wait().unwrap().code(), Some(130));
    assert!(
        own().is_empty(),
        "an interrupted run leaves nothing: {:?}",
        own()
    );
}
