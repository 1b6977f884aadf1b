//! The `thread` example as a person runs it: one process per command, Ctrl+C pauses.

#![allow(clippy::unwrap_used)]
#![cfg(unix)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use crate::support::threads::repo;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const SPEC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/thread/spec.md");

fn thread(workspace: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(crate::support::thread_example());
    cmd.arg("--workspace").arg(workspace).args(args);
    cmd
}

fn ok(out: Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test]
async fn the_bundled_script_goes_from_spec_to_commit() {
    let dir = repo().await;
    let ws = dir.path();
    ok(thread(ws, &["new", "--title", "Greeter", "--spec", SPEC])
        .output()
        .unwrap());
    // The optional AI review: nothing to fix, so the person may finalize.
    let assessed = ok(thread(ws, &["assess"]).output().unwrap());
    assert!(
        assessed.contains("assessment of spec v1: ready to finalize")
            && assessed.contains("phase: Assessing"),
        "{assessed}"
    );
    let status = ok(thread(ws, &["status"]).output().unwrap());
    assert!(status.contains("ready to finalize"), "{status}");
    ok(thread(ws, &["finalize"]).output().unwrap());
    let started = ok(thread(ws, &["start"]).output().unwrap());
    assert!(
        started.contains("iteration 1: claimed done; 1 of 2 criteria passed"),
        "{started}"
    );
    assert!(started.contains("phase: Implemented"), "{started}");
    let review = ok(thread(ws, &["review"]).output().unwrap());
    assert!(review.contains("recommend approve"), "{review}");
    ok(thread(ws, &["approve"]).output().unwrap());
    let done = ok(thread(ws, &["commit"]).output().unwrap());
    assert!(
        done.contains("phase: Done") && done.contains("ralph/1-greeter"),
        "{done}"
    );
    let status = ok(thread(ws, &["status"]).output().unwrap());
    assert!(status.contains("phase: Done"), "{status}");
}

#[tokio::test]
async fn a_dry_run_says_what_start_would_do_and_writes_nothing() {
    let dir = repo().await;
    let ws = dir.path();
    ok(thread(ws, &["new", "--title", "Greeter", "--spec", SPEC])
        .output()
        .unwrap());
    ok(thread(ws, &["finalize"]).output().unwrap());
    let before = crate::support::tree(ws);
    let out = ok(thread(ws, &["--dry-run", "start"]).output().unwrap());
    for part in [
        "Dry run of thread 1-greeter",
        "phase:     Finalized",
        "next:      preflight",
        "promise:   GREETER_DONE",
        "criterion: greets by name",
    ] {
        assert!(out.contains(part), "missing {part:?} in\n{out}");
    }
    assert_eq!(crate::support::tree(ws), before, "nothing written");
}

#[tokio::test]
async fn ctrl_c_pauses_and_resume_continues() {
    let dir = repo().await;
    let ws = dir.path();
    let scripts = tempfile::tempdir().unwrap();
    let hang = scripts.path().join("hang.toml");
    std::fs::write(
        &hang,
        "[[run]]\nrole = \"build\"\nattempt = 1\n[[run.steps]]\nhang = {}\n",
    )
    .unwrap();
    let fix = scripts.path().join("fix.toml");
    std::fs::write(
        &fix,
        "[[run]]\nrole = \"build\"\nattempt = 1\n[[run.steps]]\nwrite = { path = \"greet.sh\", content = \"echo \\\"Hello, ${1:-World}!\\\"\\n\" }\n[[run.steps]]\nanswer = \"GREETER_DONE\"\n",
    )
    .unwrap();
    ok(thread(ws, &["new", "--title", "Greeter", "--spec", SPEC])
        .output()
        .unwrap());
    ok(thread(ws, &["finalize"]).output().unwrap());
    let child = thread(ws, &["--quick", "--script"])
        .arg(&hang)
        .arg("start")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let log = ws.join(".ralph/runs/1-greeter-r1/output.log");
    for _ in 0..300 {
        if log.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    // Paused by SIGINT: the exit code says so (130), as in every mode.
    assert_eq!(out.status.code(), Some(130), "{out:?}");
    let paused = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        paused.contains("phase: Paused")
            && paused.contains("paused at iteration 1")
            && paused.contains("current model: fake"),
        "{paused}"
    );
    let resumed = ok(thread(ws, &["--quick", "--script"])
        .arg(&fix)
        .arg("resume")
        .output()
        .unwrap());
    assert!(resumed.contains("phase: PendingReview"), "{resumed}");
}

#[tokio::test]
async fn abandon_keeps_the_branch_and_says_so() {
    let dir = repo().await;
    let ws = dir.path();
    ok(thread(ws, &["new", "--title", "Greeter", "--spec", SPEC])
        .output()
        .unwrap());
    ok(thread(ws, &["finalize"]).output().unwrap());
    ok(thread(ws, &["start"]).output().unwrap());
    let abandoned = ok(thread(ws, &["abandon"]).output().unwrap());
    assert!(
        abandoned.contains("phase: Abandoned")
            && abandoned.contains("nothing was deleted: the changes stay on ralph/1-greeter"),
        "{abandoned}"
    );
    assert!(ws.join("greet.sh").exists());
}
