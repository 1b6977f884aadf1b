//! A newcomer's session on a Cargo project with a command agent (issue "A good guest"):
//! `init` (then the person commits what it wrote), `construct`, `plan` and `build`, and a
//! thread to `commit`. After each step `git status --porcelain` shows nothing of ralph's:
//! its state and its logs ignore themselves, and what it writes for people (the plan,
//! `PROGRESS.md`) goes into its own commits.

use std::path::Path;

use super::{THREAD_SPEC, command, stderr, stdout};

/// One agent for every role, as a shell script: builds write a note per subject (and, in a
/// thread, `greet.sh`), verifiers accept, the gap analysis finds nothing.
const AGENT: &str = r#"prompt=$(cat)
case "$1" in
  investigate) echo '{"tasks":[{"name":"Write the note","accept":"notes/t-1.txt exists"}]}' ;;
  breakdown) echo '{"specs":[{"id":"hello","name":"Hello","file":"specs/hello.md","priority":1,"context":"sh","tasks":[{"description":"Write the note","acceptanceCriteria":["the note exists"]}],"acceptanceCriteria":["the note exists"]}]}' ;;
  planner) printf '# Plan: hello\n\n1. Write the note.\n\nPLAN_COMPLETE\n' ;;
  build)
    mkdir -p notes
    echo done > "notes/$2.txt"
    printf '#!/bin/sh\necho "Hello, ${1:-World}!"\n' > greet.sh
    case "$prompt" in
      *GREETER_DONE*) printf 'Wrote greet.sh.\nGREETER_DONE\n' ;;
      *) printf 'Wrote the note.\n<TASK_DONE>\n' ;;
    esac ;;
  verify) echo '{"verdict":"accept","reason":"the note is there"}' ;;
  gap_analysis) echo '{"tasks":[],"issues":[]}' ;;
  *) echo "unexpected role $1" >&2; exit 1 ;;
esac
"#;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `ralph ARGS` in `dir` with cargo on the PATH (the gates `init` wrote run it), which
/// must exit 0.
fn ralph_ok(dir: &Path, args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let cargo_dir = Path::new(&cargo).parent().unwrap_or(Path::new("/usr/bin"));
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", cargo_dir.display());
    let out = command(dir, args).env("PATH", path).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "ralph {args:?}:\n{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    stdout(&out)
}

/// What `git status` shows, which must be nothing after `step`.
fn assert_clean(dir: &Path, step: &str) {
    let status = git(dir, &["status", "--porcelain", "--untracked-files=all"]);
    assert_eq!(status, "", "after {step}, git status shows:\n{status}");
}

#[test]
fn a_newcomers_session_leaves_nothing_of_ralphs_in_git_status() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    git(ws, &["init", "-q"]);
    git(ws, &["config", "user.name", "Newcomer"]);
    git(ws, &["config", "user.email", "newcomer@example.com"]);
    std::fs::write(
        ws.join("Cargo.toml"),
        "[package]\nname = \"newcomer\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    )
    .unwrap();
    std::fs::create_dir(ws.join("src")).unwrap();
    std::fs::write(
        ws.join("src/lib.rs"),
        "pub fn hello() -> &'static str {\n    \"hello\"\n}\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("Cargo.lock"),
        "version = 4\n\n[[package]]\nname = \"newcomer\"\nversion = \"0.1.0\"\n",
    )
    .unwrap();
    std::fs::write(ws.join(".gitignore"), "/target\n").unwrap();
    std::fs::write(ws.join("spec.md"), "# Notes\nWrite a note.\n").unwrap();
    std::fs::create_dir(ws.join("specs")).unwrap();
    std::fs::write(ws.join("specs/hello.md"), "# Hello\nWrite a note.\n").unwrap();
    std::fs::write(ws.join("agent.sh"), AGENT).unwrap();
    git(ws, &["add", "-A"]);
    git(ws, &["commit", "-q", "-m", "A Cargo project"]);

    // `init`, then the person makes the agent theirs and commits what init wrote.
    ralph_ok(ws, &["init"]);
    let config = std::fs::read_to_string(ws.join("ralph.toml")).unwrap();
    assert!(config.contains("cargo-test"), "{config}");
    let config = config.replace("agents = [\"claude\"]", "agents = [\"mine\"]")
        + "\n[agent.mine]\ncommand = [\"sh\", \"agent.sh\", \"{role}\", \"{subject}\"]\n";
    std::fs::write(ws.join("ralph.toml"), config).unwrap();
    git(ws, &["add", "-A"]);
    git(ws, &["commit", "-q", "-m", "ralph init"]);
    assert_clean(ws, "init");

    let done = ralph_ok(ws, &["construct", "spec.md"]);
    assert!(done.contains("Spec complete"), "{done}");
    assert_clean(ws, "construct");

    ralph_ok(ws, &["plan"]);
    assert_clean(ws, "plan");
    let built = ralph_ok(ws, &["build"]);
    assert!(built.contains("All specs complete"), "{built}");
    assert_clean(ws, "build");

    ralph_ok(
        ws,
        &["thread", "new", "--title", "Greeter", "--spec", THREAD_SPEC],
    );
    assert_clean(ws, "thread new");
    ralph_ok(ws, &["thread", "finalize"]);
    assert_clean(ws, "thread finalize");
    let started = ralph_ok(ws, &["thread", "start"]);
    assert!(started.contains("phase: Implemented"), "{started}");
    for step in ["review", "approve", "message", "commit"] {
        ralph_ok(ws, &["thread", step]);
    }
    assert_clean(ws, "thread commit");

    // `status` and `query` tell every mode's story, from a subdirectory too.
    let status = ralph_ok(&ws.join("src"), &["status"]);
    for part in [
        "stage COMPLETE",
        "build mode (implementation.json): 1 of 1 spec complete",
        "hello      completed    tasks 1/1 Hello",
        "thread 1-greeter  Done  Greeter",
        "next: nothing: every run here is complete",
    ] {
        assert!(status.contains(part), "missing {part:?} in\n{status}");
    }
    let specs = ralph_ok(ws, &["query", "specs"]);
    let spec: serde_json::Value = serde_json::from_str(specs.trim()).unwrap();
    assert_eq!(spec["status"], "completed", "{specs}");
    assert_eq!(
        (spec["tasks_done"].as_u64(), spec["tasks"].as_u64()),
        (Some(1), Some(1))
    );
    let threads = ralph_ok(ws, &["query", "threads"]);
    let thread: serde_json::Value = serde_json::from_str(threads.trim()).unwrap();
    assert_eq!(thread["phase"], "Done", "{threads}");
    // The logs are there, out of sight.
    assert!(ws.join("build/ralph-logs/.gitignore").exists());
    assert!(ws.join(".ralph/.gitignore").exists());
}

/// A board kept for people in the work tree (`[store] kind = "progress"`): each task's
/// commit holds it as it was then, and the run ends by committing it as it stands, alone.
#[test]
fn a_progress_board_is_committed_at_the_end_of_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    git(ws, &["init", "-q"]);
    git(ws, &["config", "user.name", "Newcomer"]);
    git(ws, &["config", "user.email", "newcomer@example.com"]);
    std::fs::write(ws.join("agent.sh"), AGENT).unwrap();
    std::fs::write(
        ws.join("ralph.toml"),
        "agents = [\"mine\"]\n[store]\nkind = \"progress\"\n\
         [agent.mine]\ncommand = [\"sh\", \"agent.sh\", \"{role}\", \"{subject}\"]\n",
    )
    .unwrap();
    std::fs::write(ws.join("spec.md"), "# Notes\nWrite a note.\n").unwrap();
    git(ws, &["add", "-A"]);
    git(ws, &["commit", "-q", "-m", "init"]);

    let done = ralph_ok(ws, &["construct", "spec.md"]);
    assert!(done.contains("Spec complete"), "{done}");
    assert_clean(ws, "construct with a progress board");
    let subjects = git(ws, &["log", "--format=%s"]);
    assert!(
        subjects.starts_with("ralph: PROGRESS.md after iteration"),
        "{subjects}"
    );
    assert_eq!(
        git(ws, &["show", "--name-only", "--format=", "HEAD"]),
        "PROGRESS.md\n"
    );
}
