//! `ralph demo` and `ralph construct --script` on the bundled demo: what a person sees, the
//! exit codes, signals, the lock, limits and a repaired state file.

#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::support::tree;
use crate::{command, stderr, stdout};

/// The bundled demo's files in the source tree.
pub(crate) const DEMO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/demo");

/// `ralph demo --in WORKSPACE ARGS`.
fn demo(workspace: &Path, args: &[&str]) -> Command {
    let mut cmd = command(workspace.parent().unwrap(), &["demo", "--in"]);
    cmd.arg(workspace).args(args);
    cmd
}

/// A directory holding the demo's spec and config, not yet run.
fn demo_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for file in ["spec.md", "ralph.toml"] {
        std::fs::copy(Path::new(DEMO).join(file), dir.path().join(file)).unwrap();
    }
    dir
}

/// `ralph construct ARGS --script` with the demo's script, in `workspace`.
pub(crate) fn construct_demo(workspace: &Path, args: &[&str]) -> Command {
    let mut cmd = command(workspace, &["construct"]);
    cmd.args(args)
        .arg("--script")
        .arg(Path::new(DEMO).join("script.toml"));
    cmd
}

#[test]
fn the_demo_completes_with_exit_0_and_a_summary() {
    let parent = tempfile::tempdir().unwrap();
    let out = demo(&parent.path().join("ws"), &[]).output().unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    for part in [
        "iteration 1 · INVESTIGATE",
        "iteration 1 · DECOMPOSE",
        "t-3 → t-3a, t-3b",
        "t-2 rejected",
        "Spec complete: 4 tasks accepted in 3 iterations.",
        // Each of the script's 16 runs spends $0.05, 1200 tokens in and 300 out.
        "cost: $0.8000 (",
        "tokens: 19200 in, 4800 out",
    ] {
        assert!(text.contains(part), "missing {part:?} in\n{text}");
    }
    // The ledger kept every run: `status` shows the same total, by agent and by subject.
    let status = command(&parent.path().join("ws"), &["status"])
        .output()
        .unwrap();
    let status = stdout(&status);
    assert!(
        status.contains("spend construct: $0.80, 19200 in / 4800 out tokens")
            && status.contains("16 runs; no limit")
            && status.contains("by subject: t-2 $0.20, t-1 $0.15"),
        "{status}"
    );
}

#[test]
fn ctrl_c_stops_cleanly_with_130_and_the_same_command_resumes() {
    let parent = tempfile::tempdir().unwrap();
    let ws = parent.path().join("ws");
    let mut child = demo(&ws, &["--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let events = child.stdout.take().unwrap();
    for line in BufReader::new(events).lines() {
        let line = line.unwrap();
        // t-3's agent hangs until stopped: interrupt it there.
        if line.contains("\"task_started\"") && line.contains("\"t-3\"") {
            kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
        }
        if line.contains("\"finished\"") {
            assert!(line.contains("\"interrupted\""), "{line}");
        }
    }
    assert_eq!(child.wait().unwrap().code(), Some(130));

    let plan = std::fs::read_to_string(ws.join(".ralph/plan.jsonl")).unwrap();
    assert!(
        plan.contains("\"id\":\"t-2\",\"name\":\"Add tests/greet_test.sh\",\"s\":\"d\""),
        "t-2's done state was saved"
    );

    let out = demo(&ws, &[]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[test]
fn a_limit_exits_2_with_the_remaining_count() {
    let dir = demo_copy();
    let out = construct_demo(dir.path(), &["spec.md", "--max-iterations", "1"])
        .output()
        .unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(2), "{text}{}", stderr(&out));
    assert!(
        text.contains("Stopped: max iterations (1) reached. Tasks remaining: 4"),
        "{text}"
    );
}

#[test]
fn a_bad_config_exits_1_naming_the_key_and_the_file() {
    let dir = demo_copy();
    std::fs::write(
        dir.path().join("ralph.toml"),
        "max_iterations = 3\nstage_timout = \"1m\"\n",
    )
    .unwrap();
    let out = construct_demo(dir.path(), &["spec.md"]).output().unwrap();
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("stage_timout"), "{text}");
    assert!(text.contains("ralph.toml"), "{text}");
}

#[test]
fn a_second_ralph_on_the_same_workspace_is_refused() {
    let dir = demo_copy();
    let mut first = construct_demo(dir.path(), &["spec.md", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(first.stdout.take().unwrap()).lines();
    // Wait until the first one runs (it holds the lock from its start).
    assert!(lines.next().is_some());
    let second = construct_demo(dir.path(), &["spec.md"]).output().unwrap();
    let text = stderr(&second);
    assert_eq!(second.status.code(), Some(1), "{text}");
    assert!(text.contains("locked by another ralph process"), "{text}");
    for _ in lines {}
    assert_eq!(first.wait().unwrap().code(), Some(0));
}

#[test]
fn once_stops_after_one_iteration_with_exit_0() {
    let dir = demo_copy();
    let out = construct_demo(dir.path(), &["spec.md", "--once"])
        .output()
        .unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(
        text.contains("Stopped after one iteration (once): iteration 1 finished."),
        "{text}"
    );
    assert!(!text.contains("iteration 2 ·"), "{text}");
}

/// `ralph construct --plan-only` (seed 000's `plan` mode): INVESTIGATE makes the task list,
/// nothing is built, and the next step names `ralph status` and the command that builds;
/// that command then runs without investigating again.
#[test]
fn plan_only_stops_before_build_and_says_how_to_go_on() {
    let dir = demo_copy();
    // The dry run says the run would stop there, in words and in JSON.
    let dry = construct_demo(dir.path(), &["spec.md", "--plan-only", "--dry-run"])
        .output()
        .unwrap();
    assert!(
        stdout(&dry).contains("plan only: the run stops before the first BUILD"),
        "{}",
        stdout(&dry)
    );
    let dry = construct_demo(
        dir.path(),
        &["spec.md", "--plan-only", "--dry-run", "--json"],
    )
    .output()
    .unwrap();
    let value: serde_json::Value = serde_json::from_str(stdout(&dry).trim()).unwrap();
    assert_eq!(value["plan_only"], true);
    assert!(
        !dir.path().join(".ralph/plan.jsonl").exists(),
        "a dry run writes nothing"
    );
    let out = construct_demo(dir.path(), &["spec.md", "--plan-only"])
        .output()
        .unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    for part in [
        "Planned: the open issues are investigated into",
        "nothing was built (plan only)",
        "next: `ralph status` lists the tasks to review (change them with `ralph task …`); then `ralph construct --script",
    ] {
        assert!(text.contains(part), "missing {part:?} in\n{text}");
    }
    assert!(!text.contains("BUILD"), "{text}");
    let status = command(dir.path(), &["status"]).output().unwrap();
    assert!(stdout(&status).contains("pending"), "{}", stdout(&status));

    let out = construct_demo(dir.path(), &[]).output().unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(text.contains("Spec complete"), "{text}");
    let requests = std::fs::read_to_string(dir.path().join(".ralph/fake-requests.jsonl")).unwrap();
    assert_eq!(
        requests
            .matches("\"role\":\"investigate\",\"subject\":\"i-1\"")
            .count(),
        1,
        "{requests}"
    );
}

#[test]
fn a_torn_tail_repaired_at_load_is_shown() {
    let dir = demo_copy();
    let once = construct_demo(dir.path(), &["spec.md", "--once"])
        .output()
        .unwrap();
    assert_eq!(once.status.code(), Some(0), "{once:?}");
    // A crash mid-write leaves a line without its newline.
    let state = dir.path().join(".ralph/plan.jsonl");
    let mut text = std::fs::read(&state).unwrap();
    text.extend_from_slice(br#"{"t":"task","id":"t-9","na"#);
    std::fs::write(&state, text).unwrap();
    let out = construct_demo(dir.path(), &[]).output().unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(
        text.contains("state repaired: dropped a torn final line"),
        "{text}"
    );
}

#[test]
fn a_dry_run_of_the_demo_spec_shows_the_next_step_and_writes_nothing() {
    let dir = demo_copy();
    let before = tree(dir.path());
    let out = construct_demo(dir.path(), &["spec.md", "--dry-run"])
        .output()
        .unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    for part in [
        "Dry run of spec.md",
        "stage:     INVESTIGATE (iteration 1)",
        "prompt:    investigate (built-in)",
    ] {
        assert!(text.contains(part), "missing {part:?} in\n{text}");
    }
    assert_eq!(tree(dir.path()), before, "nothing written, not even a lock");
}

/// `ralph task prioritize [--spec FILE]` (seed 000): the counts as JSON; a spec other than
/// the one the board holds is an error naming both.
#[test]
fn task_prioritize_takes_the_spec_on_record_only() {
    let dir = demo_copy();
    let once = construct_demo(dir.path(), &["spec.md", "--once"])
        .output()
        .unwrap();
    assert_eq!(once.status.code(), Some(0), "{once:?}");

    let out = command(dir.path(), &["task", "prioritize", "--spec", "./spec.md"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(report["prioritized"].as_u64().is_some(), "{report}");
    for key in ["high", "medium", "low"] {
        assert!(report[key].is_u64(), "{key} in {report}");
    }

    let other = command(dir.path(), &["task", "prioritize", "--spec", "other.md"])
        .output()
        .unwrap();
    assert_eq!(other.status.code(), Some(1));
    let text = stderr(&other);
    assert!(
        text.contains("spec.md") && text.contains("other.md"),
        "{text}"
    );
}
