//! `ralph plan` and `ralph build` on the bundled plan demo (`fixtures/demo-plan/`, a
//! FakeAgent script): plan, then build from the resulting implementation.json, with real git
//! and real shell gates.

#![cfg(unix)]

use std::path::Path;
use std::process::Command;

use crate::{command, stderr, stdout};

const DEMO_PLAN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/demo-plan");

/// A git repository holding the plan demo's specs and config, committed.
fn plan_demo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::create_dir(ws.join("specs")).unwrap();
    for (from, to) in [
        ("ralph.toml", "ralph.toml"),
        ("gitignore", ".gitignore"),
        ("specs/greeter.md", "specs/greeter.md"),
        ("specs/farewell.md", "specs/farewell.md"),
    ] {
        std::fs::copy(Path::new(DEMO_PLAN).join(from), ws.join(to)).unwrap();
    }
    git(ws, &["init", "-q", "-b", "main"]);
    git(ws, &["add", "-A"]);
    git(ws, &["commit", "-q", "-m", "Specs of the plan demo"]);
    dir
}

fn git(ws: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(ws)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `ralph MODE --script <the plan demo's script>`: the exit code and all it printed.
fn run(mode: &str, ws: &Path) -> (Option<i32>, String) {
    let script = Path::new(DEMO_PLAN).join("script.toml");
    let out = command(ws, &[mode, "--script", script.to_str().unwrap()])
        .output()
        .unwrap();
    (out.status.code(), stdout(&out) + &stderr(&out))
}

#[test]
fn plan_then_build_the_plan_demo() {
    let dir = plan_demo();
    let ws = dir.path();

    // Build first: there is nothing to build from yet.
    let (code, text) = run("build", ws);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("run plan mode first"), "{text}");

    let (code, text) = run("plan", ws);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("planned 2 specs, 3 tasks into implementation.json"),
        "{text}"
    );
    assert!(ws.join("implementation.json").exists());
    // The plan is committed, alone: nothing of ralph's is left in `git status`.
    assert_eq!(git(ws, &["status", "--porcelain"]), "");

    let (code, text) = run("build", ws);
    assert_eq!(code, Some(0), "{text}");
    for part in [
        "Syntax error",
        "plan invalidated (the spec requires POSIX sh, the plan chose bash)",
        "All specs complete: 2 specs committed, 4 tasks completed in this run.",
        "next: `git log --oneline`",
    ] {
        assert!(text.contains(part), "missing {part:?} in\n{text}");
    }
    // Said once: the end event is not printed beside the summary.
    assert_eq!(text.matches("All specs complete").count(), 1, "{text}");
    assert_eq!(
        git(ws, &["log", "--format=%s"]),
        "Farewell\nGreeter\nralph plan: 2 specs, 3 tasks\nSpecs of the plan demo\n"
    );
    // Each spec's commit holds its completion and its PROGRESS.md entry: nothing of
    // ralph's is left in `git status`, logs included.
    assert_eq!(git(ws, &["status", "--porcelain"]), "");
    assert!(ws.join("specs/plans/farewell.attempt-1.md").exists());
    let progress = std::fs::read_to_string(ws.join("PROGRESS.md")).unwrap();
    assert!(progress.contains("greeter: Greeter") && progress.contains("farewell: Farewell"));
}

/// `ralph plan` and `ralph build` while another process holds the workspace's lock: the
/// lock is named once, as the error (each mode also said it as a warning before).
#[test]
fn a_locked_workspace_is_said_once() {
    let dir = plan_demo();
    let ws = dir.path();
    std::fs::create_dir_all(ws.join(".ralph")).unwrap();
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(ws.join(".ralph/ralph.lock"))
        .unwrap();
    lock.lock().unwrap();
    for mode in ["plan", "build"] {
        let (code, text) = run(mode, ws);
        assert_eq!(code, Some(1), "{mode}: {text}");
        assert_eq!(
            text.matches("is locked by another ralph process").count(),
            1,
            "{mode}: {text}"
        );
    }
}

/// Audit case 42: plan mode without a specs folder says there are no specs in it, not a raw
/// i/o error.
#[test]
fn plan_without_a_specs_folder_says_where_it_looked() {
    let dir = plan_demo();
    let ws = dir.path();
    std::fs::remove_dir_all(ws.join("specs")).unwrap();
    let script = Path::new(DEMO_PLAN).join("script.toml");
    let script = script.to_str().unwrap();
    for args in [&["plan", "--dry-run"][..], &["plan"]] {
        let out = command(ws, args)
            .args(["--script", script])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = stderr(&out);
        assert!(
            err.contains("plan mode: no markdown specs in") && err.contains("specs"),
            "{err}"
        );
        assert!(!err.contains("os error"), "{err}");
    }
}

/// `ralph build --force SPEC` builds a done spec again, tasks included (seed 002's "skip if
/// done, unless forced"); a plain `ralph build` leaves it alone, and an unknown spec is
/// named with the ones there are.
#[test]
fn build_force_rebuilds_a_done_spec_and_its_tasks() {
    let dir = plan_demo();
    let ws = dir.path();
    for mode in ["plan", "build"] {
        let (code, text) = run(mode, ws);
        assert_eq!(code, Some(0), "{mode}: {text}");
    }
    let script = Path::new(DEMO_PLAN).join("script.toml");
    let force = |spec: &str| {
        let out = command(
            ws,
            &[
                "build",
                "--force",
                spec,
                "--script",
                script.to_str().unwrap(),
            ],
        )
        .output()
        .unwrap();
        (out.status.code(), stdout(&out) + &stderr(&out))
    };

    let (code, text) = force("nope");
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("no spec \"nope\" to rebuild (its specs: greeter, farewell)"),
        "{text}"
    );

    let (code, text) = force("greeter");
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("1 spec committed, 2 tasks completed in this run"),
        "{text}"
    );
    // Both tasks ran again from their first session: the demo's syntax error and its fix.
    assert!(text.contains("Syntax error"), "{text}");
    assert_eq!(
        git(ws, &["log", "--format=%s", "-2"]),
        "Greeter\nFarewell\n"
    );
    assert_eq!(git(ws, &["status", "--porcelain"]), "");
}

/// Case 16: a link in the specs folder that leads outside it is not planned, and never
/// dropped without a word: named in the dry run and as a warning beside other specs, and in
/// the error when it is the only one.
#[test]
fn a_link_out_of_the_specs_folder_is_named_where_it_is_skipped() {
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("host.md");
    std::fs::write(&target, "# Host\n").unwrap();
    let dir = plan_demo();
    let ws = dir.path();
    std::os::unix::fs::symlink(&target, ws.join("specs/host.md")).unwrap();
    let script = Path::new(DEMO_PLAN).join("script.toml");
    let script = script.to_str().unwrap();
    let plan = |args: &[&str]| {
        command(ws, args)
            .args(["--script", script])
            .output()
            .unwrap()
    };
    let skipped = "specs/host.md: resolves to";

    let dry = plan(&["plan", "--dry-run"]);
    assert_eq!(dry.status.code(), Some(0), "{}", stderr(&dry));
    assert!(
        stdout(&dry).contains(&format!("skipped:   {skipped}")),
        "{}",
        stdout(&dry)
    );
    let planned = plan(&["plan"]);
    assert_eq!(planned.status.code(), Some(0), "{}", stderr(&planned));
    assert!(
        (stdout(&planned) + &stderr(&planned))
            .contains(&format!("warning: plan mode skips {skipped}")),
        "{}\n{}",
        stdout(&planned),
        stderr(&planned)
    );

    let alone = plan_demo();
    let ws = alone.path();
    for spec in ["specs/greeter.md", "specs/farewell.md"] {
        std::fs::remove_file(ws.join(spec)).unwrap();
    }
    std::os::unix::fs::symlink(&target, ws.join("specs/host.md")).unwrap();
    let out = command(ws, &["plan", "--dry-run", "--script", script])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("no markdown specs in") && err.contains(&format!("skipped: {skipped}")),
        "{err}"
    );
}

/// The first `ralph build`: spec a's task writes half its work and blocks; spec b is built.
const BLOCKING: &str = r##"
[[run]]
role = "planner"
repeat = true
steps = [{ answer = "# Plan\n1. Do it.\n\nPLAN_COMPLETE" }]

[[run]]
role = "build"
subject = "a-1"
steps = [
  { write = { path = "a.txt", content = "half of a\n" } },
  { answer = "stuck\n<TASK_BLOCKED reason=\"which greeting should a.txt hold?\">" },
]

[[run]]
role = "build"
subject = "b-1"
steps = [{ write = { path = "b.txt", content = "b\n" } }, { answer = "ok\n<TASK_DONE>" }]

[[run]]
role = "verify"
repeat = true
steps = [{ json = { verdict = "accept", reason = "it is there" } }]
"##;

/// After the person answered: a's task finishes its work.
const FINISHING: &str = r##"
[[run]]
role = "build"
subject = "a-1"
steps = [
  { write = { path = "a.txt", content = "half of a\nhello\n" } },
  { answer = "ok\n<TASK_DONE>" },
]

[[run]]
role = "verify"
repeat = true
steps = [{ json = { verdict = "accept", reason = "it is there" } }]
"##;

/// Issue "history, board, spend and spec agree", item 8: in build mode a blocked spec's
/// work is set aside before the next spec, `status` shows it blocked with its reason and
/// where its work went, and the run's `next:` (unblock with `--restore`, then build) works
/// as printed: each spec's commit holds its own files only.
#[test]
fn a_blocked_spec_in_build_mode_is_kept_apart_and_its_next_step_builds_it() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::create_dir(ws.join("specs")).unwrap();
    std::fs::write(ws.join("specs/a.md"), "# A\nWrite a.txt.\n").unwrap();
    std::fs::write(ws.join("specs/b.md"), "# B\nWrite b.txt.\n").unwrap();
    std::fs::write(ws.join(".gitignore"), ".ralph/\nbuild/\nscript.toml\n").unwrap();
    let plan = serde_json::json!({"specs": [
        {"id": "a", "file": "specs/a.md", "name": "A", "priority": 1,
         "tasks": [{"id": "a-1", "description": "Write a.txt"}]},
        {"id": "b", "file": "specs/b.md", "name": "B", "priority": 2,
         "tasks": [{"id": "b-1", "description": "Write b.txt"}]},
    ]});
    std::fs::write(ws.join("implementation.json"), plan.to_string()).unwrap();
    git(ws, &["init", "-q", "-b", "main"]);
    git(ws, &["add", "-A"]);
    git(ws, &["commit", "-q", "-m", "specs"]);
    std::fs::write(ws.join("script.toml"), BLOCKING).unwrap();

    let out = command(ws, &["build", "--script", "script.toml"])
        .output()
        .unwrap();
    let text = stdout(&out) + &stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert_eq!(
        git(ws, &["show", "--name-only", "--format=%s", "HEAD"]).trim(),
        "B\n\nPROGRESS.md\nb.txt\nimplementation.json\nspecs/plans/b.json\nspecs/plans/b.md",
        "{text}"
    );
    assert!(!ws.join("a.txt").exists(), "set aside: {text}");

    let status = stdout(&command(ws, &["status"]).output().unwrap());
    for part in [
        "blocked",
        "which greeting should a.txt hold?",
        "ralph: a/a-1's unfinished work (set aside while a is blocked)",
        "ralph task unblock a/a-1 --restore && ralph build",
    ] {
        assert!(status.contains(part), "missing {part:?} in\n{status}");
    }

    // The person answers (here: the agent's next session knows), then runs the next step.
    std::fs::write(ws.join("script.toml"), FINISHING).unwrap();
    let next = crate::dead_ends::next_command(&out);
    assert!(
        next.starts_with("ralph task unblock a/a-1 --restore && "),
        "{next}"
    );
    let again = crate::dead_ends::run_printed(ws, &next);
    let text = stdout(&again) + &stderr(&again);
    assert_eq!(again.status.code(), Some(0), "{next}\n{text}");
    let in_a = git(ws, &["show", "--name-only", "--format=%s", "HEAD"]);
    assert!(in_a.starts_with("A\n") && in_a.contains("a.txt"), "{in_a}");
    assert!(!in_a.contains("b.txt"), "{in_a}");
    assert_eq!(git(ws, &["show", "HEAD:a.txt"]), "half of a\nhello\n");
    assert_eq!(git(ws, &["stash", "list"]), "");
    assert_eq!(git(ws, &["status", "--porcelain"]), "");
}
