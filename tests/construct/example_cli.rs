//! The `construct` example as users run it: exit codes and messages.

#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::support::example;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The bundled demo's files.
fn demo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/demo")
}

fn construct(workspace: &std::path::Path) -> Command {
    let mut cmd = Command::new(example());
    cmd.arg("--workspace").arg(workspace);
    cmd
}

/// The demo's script never runs in a repository of the user's: only in a new or empty
/// directory, or one an earlier run made.
#[test]
fn the_demo_is_refused_in_a_directory_that_holds_a_project() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README.md"), "mine\n").unwrap();
    let before = crate::support::tree(dir.path());

    let out = construct(dir.path()).output().unwrap();

    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("holds files of its own"), "{stderr}");
    assert_eq!(
        crate::support::tree(dir.path()),
        before,
        "nothing was written"
    );
}

#[test]
fn the_demo_completes_with_exit_0_and_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    let out = construct(dir.path()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    for part in [
        "iteration 1 · INVESTIGATE",
        "iteration 1 · DECOMPOSE",
        "t-3 → t-3a, t-3b",
        "t-2 rejected",
        "Spec complete: 4 tasks accepted in 3 iterations.",
    ] {
        assert!(stdout.contains(part), "missing {part:?} in\n{stdout}");
    }
}

#[test]
fn ctrl_c_stops_cleanly_with_130_and_the_same_command_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = construct(dir.path())
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    for line in BufReader::new(stdout).lines() {
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

    let plan = std::fs::read_to_string(dir.path().join(".ralph/plan.jsonl")).unwrap();
    assert!(
        plan.contains("\"id\":\"t-2\",\"name\":\"Add tests/greet_test.sh\",\"s\":\"d\""),
        "t-2's done state was saved"
    );

    let out = construct(dir.path()).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn a_limit_exits_2_with_the_remaining_count() {
    let dir = tempfile::tempdir().unwrap();
    let out = construct(dir.path())
        .args(["--max-iterations", "1"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    assert!(
        stdout.contains("Stopped: max iterations (1) reached. Tasks remaining: 4"),
        "{stdout}"
    );
}

#[test]
fn a_bad_config_exits_1_naming_the_key_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ralph.toml"),
        "max_iterations = 3\nstage_timout = \"1m\"\n",
    )
    .unwrap();
    let out = construct(dir.path()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("stage_timout"), "{stderr}");
    assert!(stderr.contains("ralph.toml"), "{stderr}");
}

#[test]
fn a_second_ralph_on_the_same_workspace_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = construct(dir.path())
        .arg("--json")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(first.stdout.take().unwrap()).lines();
    // Wait until the first one runs (it holds the lock from its start).
    assert!(lines.next().is_some());
    let second = construct(dir.path()).output().unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("locked by another ralph process"),
        "{stderr}"
    );
    for _ in lines {}
    assert_eq!(first.wait().unwrap().code(), Some(0));
}

#[test]
fn dry_run_shows_the_next_step_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for file in ["spec.md", "ralph.toml"] {
        std::fs::copy(demo().join(file), dir.path().join(file)).unwrap();
    }
    let before = crate::support::tree(dir.path());
    let out = construct(dir.path()).arg("--dry-run").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    for part in [
        "Dry run of spec.md",
        "stage:     INVESTIGATE (iteration 1)",
        "prompt:    investigate (built-in)",
        "once no",
    ] {
        assert!(stdout.contains(part), "missing {part:?} in\n{stdout}");
    }
    assert!(
        !dir.path().join(".ralph/fake-requests.jsonl").exists(),
        "no agent ran"
    );
    assert!(!dir.path().join("build").exists(), "no stage log written");
    assert_eq!(
        crate::support::tree(dir.path()),
        before,
        "nothing written, not even a lock"
    );
}

#[test]
fn plan_and_build_dry_runs_show_the_next_step_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let plan = construct(dir.path()).arg("plan").output().unwrap();
    assert_eq!(plan.status.code(), Some(0), "{plan:?}");
    let before = crate::support::tree(dir.path());
    for (mode, parts) in [
        (
            "plan",
            &[
                "Dry run of plan mode",
                "specs/farewell.md, specs/greeter.md",
                "merged into",
            ][..],
        ),
        (
            "build",
            &[
                "Dry run of build mode",
                "spec:      greeter",
                "next:      plan",
                "prompt:    planner (built-in)",
            ][..],
        ),
    ] {
        let out = construct(dir.path())
            .args([mode, "--dry-run"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{mode}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for part in parts {
            assert!(
                stdout.contains(part),
                "{mode}: missing {part:?} in\n{stdout}"
            );
        }
        assert_eq!(
            crate::support::tree(dir.path()),
            before,
            "{mode}: nothing written"
        );
    }
}

#[test]
fn once_stops_after_one_iteration_with_exit_0() {
    let dir = tempfile::tempdir().unwrap();
    let out = construct(dir.path()).arg("--once").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("Stopped after one iteration (once): iteration 1 finished."),
        "{stdout}"
    );
    assert!(!stdout.contains("iteration 2 ·"), "{stdout}");
}

#[test]
fn a_torn_tail_repaired_at_load_is_shown() {
    let dir = tempfile::tempdir().unwrap();
    let once = construct(dir.path()).arg("--once").output().unwrap();
    assert_eq!(once.status.code(), Some(0), "{once:?}");
    // A crash mid-write leaves a line without its newline.
    let state = dir.path().join(".ralph/plan.jsonl");
    let mut text = std::fs::read(&state).unwrap();
    text.extend_from_slice(br#"{"t":"task","id":"t-9","na"#);
    std::fs::write(&state, text).unwrap();
    let out = construct(dir.path()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("state repaired: dropped a torn final line"),
        "{stdout}"
    );
}
