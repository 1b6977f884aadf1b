//! Every git refusal has a way forward (issue 35, item 7). A failing `pre-commit` hook
//! (newcomer row 7) or broken commit signing (newcomer row 23) ended the run with git's
//! message cut short, no `next:` line, and the task's work left staged. Now the run ends
//! saying what refused and why, the index as it was, the work in the tree as the task's,
//! the attempt uncounted, and a `next:` that resumes once the person fixed the cause.

#![cfg(unix)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Output;

use crate::dead_ends::{next_command, run_printed};
use crate::integrity::{git, repository};
use crate::{command, stderr, stdout};

fn hook(ws: &Path, script: &str) {
    let path = ws.join(".git/hooks/pre-commit");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn construct(ws: &Path) -> Output {
    command(ws, &["construct", "spec.md", "--agent", "mine"])
        .output()
        .unwrap()
}

/// The run ended without committing, saying so, with the index as it was, the work in the
/// tree, the turn noted and the attempt not counted.
fn assert_refused_and_left_as_it_was(ws: &Path, out: &Output, before: &str) {
    let (text, err) = (stdout(out), stderr(out));
    assert_eq!(out.status.code(), Some(1), "{text}\n{err}");
    assert_eq!(git(ws, &["rev-parse", "HEAD"]), before, "nothing committed");
    assert_eq!(
        git(ws, &["diff", "--cached", "--name-only"]),
        "",
        "nothing left staged"
    );
    assert!(ws.join("work.txt").exists(), "the work is in the tree");
    assert!(ws.join(".ralph/turn.json").exists(), "the turn is noted");
    assert!(
        err.contains("the attempt was not counted"),
        "the refusal says where the work is: {err}"
    );
    let tasks = stdout(&command(ws, &["query", "tasks"]).output().unwrap());
    let t1: serde_json::Value = serde_json::from_str(tasks.lines().next().unwrap()).unwrap();
    assert_eq!(t1["id"], "t-1", "{tasks}");
    assert_eq!(t1["attempts"].as_u64().unwrap_or(0), 0, "{t1}");
}

/// The printed `next:`, run as printed, completes the spec with the task committed.
fn assert_next_commits_the_task(ws: &Path, refused: &Output) {
    let next = next_command(refused);
    let again = run_printed(ws, &next);
    assert_eq!(
        again.status.code(),
        Some(0),
        "{next}\n{}\n{}",
        stdout(&again),
        stderr(&again)
    );
    let log = git(ws, &["log", "--format=%s"]);
    assert!(log.starts_with("t-1: Write work.txt"), "{log}");
    assert_eq!(git(ws, &["show", "HEAD:work.txt"]), "done\n");
}

/// Newcomer row 7: a failing pre-commit hook.
#[test]
fn a_failing_pre_commit_hook_says_why_unstages_and_its_next_step_works() {
    let dir = repository();
    let ws = dir.path();
    hook(
        ws,
        "#!/bin/sh\necho 'lint: work.txt needs a licence header' >&2\nexit 1\n",
    );
    let before = git(ws, &["rev-parse", "HEAD"]);

    let out = construct(ws);
    assert_refused_and_left_as_it_was(ws, &out, &before);
    let err = stderr(&out);
    assert!(
        err.contains("lint: work.txt needs a licence header"),
        "the hook's reason: {err}"
    );
    assert!(err.contains(".git/hooks/pre-commit"), "{err}");
    let text = stdout(&out);
    assert!(
        text.contains("next: fix what the pre-commit hook (.git/hooks/pre-commit) said"),
        "{text}"
    );

    std::fs::remove_file(ws.join(".git/hooks/pre-commit")).unwrap();
    assert_next_commits_the_task(ws, &out);
}

/// Newcomer row 7: a formatter hook that rewrites a file, then fails.
#[test]
fn a_hook_that_rewrites_a_file_then_fails_is_named_as_such() {
    let dir = repository();
    let ws = dir.path();
    hook(
        ws,
        "#!/bin/sh\necho 'done (formatted)' > work.txt\necho 'files were modified by this hook' >&2\nexit 1\n",
    );
    let before = git(ws, &["rev-parse", "HEAD"]);

    let out = construct(ws);
    assert_refused_and_left_as_it_was(ws, &out, &before);
    let err = stderr(&out);
    assert!(
        err.contains(
            "the pre-commit hook (.git/hooks/pre-commit) changed work.txt and then refused"
        ),
        "{err}"
    );
    assert!(err.contains("files were modified by this hook"), "{err}");
    assert_eq!(
        std::fs::read_to_string(ws.join("work.txt")).unwrap(),
        "done (formatted)\n",
        "the hook's rewrite is kept"
    );
}

/// Newcomer row 23: `commit.gpgsign = true` with a key gpg does not have (or no gpg).
#[test]
fn broken_commit_signing_says_so_and_its_next_step_turns_it_off_and_commits() {
    let dir = repository();
    let ws = dir.path();
    git(ws, &["config", "commit.gpgsign", "true"]);
    git(ws, &["config", "user.signingkey", "DEADBEEF"]);
    let gnupg = tempfile::tempdir().unwrap();
    let before = git(ws, &["rev-parse", "HEAD"]);

    let out = command(ws, &["construct", "spec.md", "--agent", "mine"])
        .env("GNUPGHOME", gnupg.path())
        .output()
        .unwrap();
    assert_refused_and_left_as_it_was(ws, &out, &before);
    let err = stderr(&out);
    assert!(err.contains("could not sign"), "{err}");
    assert!(err.contains("commit.gpgsign"), "{err}");
    assert!(err.contains("gpg"), "git's reason: {err}");
    let next = next_command(&out);
    assert!(
        next.starts_with("git config commit.gpgsign false && ralph construct"),
        "{next}"
    );

    assert_next_commits_the_task(ws, &out);
}

/// Newcomer row 7 with tasks built at once (`build_concurrency = 2`): the commit in the
/// task's work tree is refused the same way, and the printed `next:` goes on once the hook
/// is fixed.
#[test]
fn a_pre_commit_hook_refusing_a_work_tree_commit_says_why_and_its_next_step_works() {
    let dir = repository();
    let ws = dir.path();
    let config = std::fs::read_to_string(ws.join("ralph.toml")).unwrap();
    std::fs::write(
        ws.join("ralph.toml"),
        format!("build_concurrency = 2\n{config}"),
    )
    .unwrap();
    git(ws, &["commit", "-qam", "two at once"]);
    hook(
        ws,
        "#!/bin/sh\necho 'lint: needs a licence header' >&2\nexit 1\n",
    );
    let before = git(ws, &["rev-parse", "HEAD"]);

    let out = construct(ws);
    let (text, err) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(1), "{text}\n{err}");
    assert_eq!(git(ws, &["rev-parse", "HEAD"]), before, "nothing committed");
    assert!(err.contains("lint: needs a licence header"), "{err}");
    assert!(err.contains(".git/hooks/pre-commit"), "{err}");
    assert!(
        text.contains("next: fix what the pre-commit hook"),
        "{text}"
    );

    std::fs::remove_file(ws.join(".git/hooks/pre-commit")).unwrap();
    assert_next_commits_the_task(ws, &out);
}
