//! `build_concurrency` and SIGKILL: `ralph construct` building three tasks at once, each in
//! its own git work tree, is killed; the next run removes the work trees the killed one left
//! and completes, and no work tree of ralph's is left.

#![cfg(unix)]
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

/// Four tasks, each built slowly enough to be killed mid-way; every verifier accepts.
const SCRIPT: &str = r#"
[[run]]
role = "investigate"
subject = "i-1"
steps = [{ json = { tasks = [
  { name = "Write a", accept = "a exists" },
  { name = "Write b", accept = "b exists" },
  { name = "Write c", accept = "c exists" },
  { name = "Write d", accept = "d exists" },
] } }]

[[run]]
role = "build"
subject = "t-1"
repeat = true
steps = [{ delay = "1500ms" }, { write = { path = "a.txt", content = "a\n" } }, { answer = "Done.\n<TASK_DONE>" }]
[[run]]
role = "build"
subject = "t-2"
repeat = true
steps = [{ delay = "1500ms" }, { write = { path = "b.txt", content = "b\n" } }, { answer = "Done.\n<TASK_DONE>" }]
[[run]]
role = "build"
subject = "t-3"
repeat = true
steps = [{ delay = "1500ms" }, { write = { path = "c.txt", content = "c\n" } }, { answer = "Done.\n<TASK_DONE>" }]
[[run]]
role = "build"
subject = "t-4"
repeat = true
steps = [{ delay = "1500ms" }, { write = { path = "d.txt", content = "d\n" } }, { answer = "Done.\n<TASK_DONE>" }]

[[run]]
role = "verify"
repeat = true
steps = [{ json = { verdict = "accept", reason = "it is there" } }]

[[run]]
role = "gap_analysis"
repeat = true
steps = [{ json = { tasks = [], issues = [] } }]
"#;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_run_killed_with_tasks_in_work_trees_is_resumed_and_leaves_no_work_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("spec.md"), "# Four\nWrite a, b, c and d.\n").unwrap();
    std::fs::write(
        dir.join(".gitignore"),
        ".ralph/\nbuild/\nscript.toml\nralph.toml\n",
    )
    .unwrap();
    std::fs::write(dir.join("script.toml"), SCRIPT).unwrap();
    std::fs::write(dir.join("ralph.toml"), "build_concurrency = 3\n").unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["add", "-A"]);
    git(
        dir,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "-m",
            "base",
        ],
    );

    let mut child = crate::command(
        dir,
        &["construct", "spec.md", "--script", "script.toml", "--json"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut started = 0;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let event: Value = serde_json::from_str(&line.unwrap()).unwrap();
        if event["event"] == "task_started" {
            started += 1;
            if started == 3 {
                break;
            }
        }
    }
    assert_eq!(started, 3, "three tasks were started at once");
    // Their work trees exist by the time the agents run; wait for them, then kill.
    let trees = dir.join(".ralph/worktrees");
    for _ in 0..100 {
        if std::fs::read_dir(&trees).map_or(0, Iterator::count) == 3 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        std::fs::read_dir(&trees).unwrap().count(),
        3,
        "the killed run left its work trees"
    );

    let status = crate::command(dir, &["status"]).output().unwrap();
    let status = String::from_utf8_lossy(&status.stdout);
    assert_eq!(
        status.matches("in flight (its own work tree)").count(),
        3,
        "{status}"
    );

    let resumed = crate::command(dir, &["construct", "--script", "script.toml"])
        .output()
        .unwrap();

    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&resumed.stdout),
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert_eq!(resumed.status.code(), Some(0), "{said}");
    assert!(said.contains("removed the work trees"), "{said}");
    assert_eq!(git(dir, &["worktree", "list"]).lines().count(), 1);
    assert_eq!(git(dir, &["branch", "--list", "ralph-task/*"]), "");
    assert!(std::fs::read_dir(&trees).map_or(0, Iterator::count) == 0);
    let subjects = git(dir, &["log", "--format=%s"]);
    for task in [
        "t-1: Write a",
        "t-2: Write b",
        "t-3: Write c",
        "t-4: Write d",
    ] {
        assert_eq!(
            subjects.lines().filter(|s| *s == task).count(),
            1,
            "{subjects}"
        );
    }
}
