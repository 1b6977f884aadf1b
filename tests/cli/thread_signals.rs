//! `ralph thread` as a person runs it, one process per command: Ctrl+C and `ralph stop`
//! pause and `resume` continues; `abandon` deletes nothing; a spec `start` would refuse
//! is warned of when written.

#![cfg(unix)]

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::support::threads::repo;
use crate::{THREAD_SCRIPT, THREAD_SPEC, command, stderr, stdout};

/// `ralph thread --script SCRIPT ARGS` in `ws`.
fn thread(ws: &Path, script: &Path, args: &[&str]) -> std::process::Command {
    let mut cmd = command(ws, &["thread", "--script"]);
    cmd.arg(script).args(args);
    cmd
}

fn ok(out: Output) -> String {
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    stdout(&out)
}

/// A thread made from the bundled spec and finalized.
fn finalized(ws: &Path) {
    let script = Path::new(THREAD_SCRIPT);
    ok(thread(
        ws,
        script,
        &["new", "--title", "Greeter", "--spec", THREAD_SPEC],
    )
    .output()
    .unwrap());
    ok(thread(ws, script, &["finalize"]).output().unwrap());
}

/// Waits (at most 15 s) until the thread's first agent run has its log: the loop runs.
async fn first_run_started(ws: &Path) {
    let log = ws.join(".ralph/runs/1-greeter-r1/output.log");
    for _ in 0..300 {
        if log.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn ctrl_c_pauses_with_130_and_resume_continues() {
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
    finalized(ws);
    let child = thread(ws, &hang, &["--quick", "start"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    first_run_started(ws).await;
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    // Paused by SIGINT: the exit code says so (130), as in every mode.
    assert_eq!(out.status.code(), Some(130), "{out:?}");
    let paused = stdout(&out);
    assert!(
        paused.contains("phase: Paused")
            && paused.contains("paused at iteration 1")
            && paused.contains("current model: fake"),
        "{paused}"
    );
    let resumed = ok(thread(ws, &fix, &["--quick", "resume"]).output().unwrap());
    assert!(resumed.contains("phase: PendingReview"), "{resumed}");
}

/// `ralph stop` from another terminal lets the iteration in flight end and be recorded,
/// then pauses the thread (exit 4); `resume` continues, and a `ralph tell --thread` given
/// meanwhile is the last section of the next iteration's prompt.
#[tokio::test]
async fn ralph_stop_pauses_a_running_thread_after_its_iteration_with_4() {
    let dir = repo().await;
    let ws = dir.path();
    let scripts = tempfile::tempdir().unwrap();
    let slow = scripts.path().join("slow.toml");
    std::fs::write(
        &slow,
        "[[run]]\nrole = \"build\"\nrepeat = true\n[[run.steps]]\ndelay = \"1500ms\"\n[[run.steps]]\nanswer = \"Not yet.\"\n",
    )
    .unwrap();
    let fix = scripts.path().join("fix.toml");
    std::fs::write(
        &fix,
        "[[run]]\nrole = \"build\"\n[[run.steps]]\nwrite = { path = \"greet.sh\", content = \"echo \\\"Hello, ${1:-World}!\\\"\\n\" }\n[[run.steps]]\nprompt = \".ralph/seen-prompt.txt\"\n[[run.steps]]\nanswer = \"GREETER_DONE\"\n",
    )
    .unwrap();
    finalized(ws);
    let child = thread(ws, &slow, &["--quick", "start"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    first_run_started(ws).await;
    let told = command(ws, &["tell", "--thread", "1-greeter", "Greet in English."])
        .output()
        .unwrap();
    assert!(told.status.success(), "{}{}", stdout(&told), stderr(&told));
    let asked = command(ws, &["stop"]).output().unwrap();
    assert!(
        asked.status.success(),
        "{}{}",
        stdout(&asked),
        stderr(&asked)
    );
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let paused = stdout(&out);
    assert!(
        paused.contains("phase: Paused") && paused.contains("paused at iteration 2"),
        "the first iteration ended and was recorded: {paused}"
    );
    let resumed = ok(thread(ws, &fix, &["--quick", "resume"]).output().unwrap());
    assert!(resumed.contains("phase: PendingReview"), "{resumed}");
    let prompt = std::fs::read_to_string(ws.join(".ralph/seen-prompt.txt")).unwrap();
    let last = &prompt[prompt
        .rfind("## Guidance from a person")
        .expect("a section")..];
    assert!(last.trim_end().ends_with("Greet in English."), "{last}");
}

#[tokio::test]
async fn abandon_keeps_the_branch_and_says_so() {
    let dir = repo().await;
    let ws = dir.path();
    let script = Path::new(THREAD_SCRIPT);
    finalized(ws);
    ok(thread(ws, script, &["start"]).output().unwrap());
    let abandoned = ok(thread(ws, script, &["abandon"]).output().unwrap());
    assert!(
        abandoned.contains("phase: Abandoned")
            && abandoned.contains("nothing was deleted: the changes stay on ralph/1-greeter"),
        "{abandoned}"
    );
    assert!(ws.join("greet.sh").exists());
}

/// A thread made with `--quick` stays quick: a later plain `start` runs on to review, as
/// `thread --quick start` does (before, it stopped at Configuring).
#[tokio::test]
async fn a_thread_made_in_quick_mode_stays_quick() {
    let dir = repo().await;
    let ws = dir.path();
    let script = Path::new(THREAD_SCRIPT);
    ok(thread(
        ws,
        script,
        &[
            "--quick",
            "new",
            "--title",
            "Greeter",
            "--spec",
            THREAD_SPEC,
        ],
    )
    .output()
    .unwrap());
    ok(thread(ws, script, &["finalize"]).output().unwrap());
    let started = ok(thread(ws, script, &["start"]).output().unwrap());
    assert!(started.contains("phase: PendingReview"), "{started}");
}

/// A spec `start` would refuse is said when it is written, in start's words, with the file;
/// the thread is still made (a draft may be finished later). A sound spec says nothing.
#[tokio::test]
async fn a_spec_start_would_refuse_is_warned_of_when_written() {
    let ws = repo().await;
    let script = Path::new(THREAD_SCRIPT);
    std::fs::write(
        ws.path().join("draft.md"),
        "# Greeter\n\nNo promise, no criteria.\n",
    )
    .unwrap();
    let out = thread(
        ws.path(),
        script,
        &["new", "--title", "Draft", "--spec", "draft.md"],
    )
    .output()
    .unwrap();
    ok(out.clone());
    let said = stderr(&out);
    assert!(
        said.contains("warning: spec v1 (") && said.contains("the spec has no promise tag"),
        "{said}"
    );
    assert!(
        said.contains("`start` refuses the spec until this is fixed"),
        "{said}"
    );

    let sound = repo().await;
    let out = thread(
        sound.path(),
        script,
        &["new", "--title", "G", "--spec", THREAD_SPEC],
    )
    .output()
    .unwrap();
    ok(out.clone());
    assert!(!stderr(&out).contains("warning: spec"), "{}", stderr(&out));
}
