//! `ralph_loop_core::git` against real git in temporary repositories.

use std::fs;
use std::path::Path;

use ralph_loop_core::git::{Git, GitError};

/// A repository with one commit on `main`, isolated from the machine's git configuration.
async fn repo(dir: &Path) -> Git {
    let git = isolated(dir);
    git.init().await.expect("git init");
    fs::write(dir.join("README.md"), "hello\n").expect("write");
    git.commit_all("Initial commit", &[]).await.expect("commit");
    git
}

fn isolated(dir: &Path) -> Git {
    Git::new(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
}

#[tokio::test]
async fn commits_without_a_configured_identity_and_reports_nothing_to_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let git = repo(dir.path()).await;
    let first = git.head().await.expect("head").expect("a commit");
    assert_eq!(first.len(), 40);
    assert_eq!(git.commit_all("Nothing", &[]).await.expect("commit"), None);

    fs::write(dir.path().join("new.txt"), "new\n").expect("write");
    let second = git.commit_all("Spec: Greeter", &[]).await.expect("commit");
    assert!(second.is_some_and(|s| s != first));
    assert!(git.changes(&[]).await.expect("status").is_empty());
}

#[tokio::test]
async fn changes_list_untracked_files_and_leave_out_excluded_paths() {
    let dir = tempfile::tempdir().expect("tempdir");
    let git = repo(dir.path()).await;
    fs::create_dir_all(dir.path().join(".ralph/threads")).expect("mkdir");
    fs::write(dir.path().join(".ralph/threads/x.json"), "{}").expect("write");
    assert!(git.changes(&[".ralph"]).await.expect("status").is_empty());

    fs::write(dir.path().join("README.md"), "changed\n").expect("write");
    let changes = git.changes(&[".ralph"]).await.expect("status");
    assert_eq!(changes, vec![" M README.md".to_owned()]);
    assert_eq!(git.changes(&[]).await.expect("status").len(), 2);
}

#[tokio::test]
async fn branch_diff_and_reset_to_the_baseline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let git = repo(dir.path()).await;
    let baseline = git.baseline().await.expect("baseline");
    assert_eq!(baseline.branch.as_deref(), Some("main"));

    git.create_branch("ralph/t-1", &baseline.commit_sha)
        .await
        .expect("branch");
    assert!(git.branch_exists("ralph/t-1").await.expect("exists"));
    assert!(!git.branch_exists("ralph/t-2").await.expect("exists"));
    assert_eq!(
        git.current_branch().await.expect("branch").as_deref(),
        Some("ralph/t-1")
    );

    fs::write(dir.path().join("README.md"), "changed\n").expect("write");
    fs::write(dir.path().join("added.txt"), "added\n").expect("write");
    fs::create_dir_all(dir.path().join(".ralph")).expect("mkdir");
    fs::write(dir.path().join(".ralph/state"), "keep").expect("write");
    git.commit_all("work", &[".ralph"]).await.expect("commit");
    fs::write(dir.path().join("uncommitted.txt"), "u\n").expect("write");

    let diff = git
        .diff_from(&baseline.commit_sha, &[])
        .await
        .expect("diff");
    assert!(diff.contains("+changed"), "{diff}");
    assert!(diff.contains("+added"), "{diff}");
    assert!(
        diff.contains("+u"),
        "untracked files are in the diff: {diff}"
    );
    // The diff used a private index: the user's staging area is untouched.
    assert!(
        git.changes(&[])
            .await
            .expect("status")
            .contains(&"?? uncommitted.txt".to_owned())
    );

    fs::write(dir.path().join("loose.txt"), "x\n").expect("write");
    git.reset_to(&baseline, &[".ralph"]).await.expect("reset");
    assert_eq!(
        git.current_branch().await.expect("branch").as_deref(),
        Some("main")
    );
    assert_eq!(
        fs::read_to_string(dir.path().join("README.md")).expect("read"),
        "hello\n"
    );
    assert!(!dir.path().join("added.txt").exists());
    assert!(!dir.path().join("loose.txt").exists());
    assert!(
        dir.path().join(".ralph/state").exists(),
        "kept paths survive"
    );
    git.delete_branch("ralph/t-1").await.expect("delete");
    assert!(!git.branch_exists("ralph/t-1").await.expect("exists"));
}

#[tokio::test]
async fn errors_name_the_directory_and_the_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let git = isolated(dir.path());
    assert!(!git.is_repo().await);
    let err = git.baseline().await.expect_err("not a repo");
    assert!(matches!(err, GitError::NotARepo(_)), "{err}");

    git.init().await.expect("init");
    let err = git.baseline().await.expect_err("no commit");
    assert!(err.to_string().contains("no commit yet"), "{err}");

    let git = repo(dir.path()).await;
    let err = git
        .switch("no-such-branch")
        .await
        .expect_err("unknown branch");
    let text = err.to_string();
    assert!(text.contains("git switch -q no-such-branch"), "{text}");
    assert!(text.contains(&dir.path().display().to_string()), "{text}");
}

#[tokio::test]
async fn commit_all_excludes_paths_that_are_also_gitignored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let git = repo(dir.path()).await;
    fs::write(dir.path().join(".gitignore"), ".ralph/\n").expect("write");
    fs::create_dir_all(dir.path().join(".ralph")).expect("mkdir");
    fs::write(dir.path().join(".ralph/state"), "x").expect("write");
    fs::create_dir_all(dir.path().join("logs")).expect("mkdir");
    fs::write(dir.path().join("logs/run.log"), "x").expect("write");
    fs::write(dir.path().join("code.txt"), "x").expect("write");
    let sha = git
        .commit_all("Spec", &[".ralph", "logs"])
        .await
        .expect("commit with an ignored exclusion");
    assert!(sha.is_some());
    let left = git.changes(&[]).await.expect("status");
    assert_eq!(left, ["?? logs/run.log"]);
}

/// ralph's commits never start git's automatic housekeeping: `git gc --auto` (and `git
/// maintenance run --auto`) detach into the background, where they would outlive the run.
#[tokio::test]
async fn a_commit_by_ralph_starts_no_automatic_gc() {
    let dir = tempfile::tempdir().expect("tempdir");
    let git = repo(dir.path()).await;
    let config = |key: &str, value: &str| {
        let status = std::process::Command::new("git")
            .args(["config", key, value])
            .current_dir(dir.path())
            .status()
            .expect("git config");
        assert!(status.success());
    };
    // Housekeeping as eager as it gets, run in the foreground so that its effect (loose
    // objects packed) is visible when the commit returns.
    config("gc.auto", "1");
    config("gc.autoDetach", "false");
    config("maintenance.autoDetach", "false");
    // Enough loose objects for git's estimate (it samples one of 256 object directories).
    let paths: Vec<String> = (0..3000).map(|i| format!("f/{i}.txt")).collect();
    fs::create_dir_all(dir.path().join("f")).expect("mkdir");
    for (i, path) in paths.iter().enumerate() {
        fs::write(dir.path().join(path), format!("{i}\n")).expect("write");
    }
    git.commit_all("Many files", &[]).await.expect("commit");

    let counts = std::process::Command::new("git")
        .args(["count-objects", "-v"])
        .current_dir(dir.path())
        .output()
        .expect("git count-objects");
    let counts = String::from_utf8_lossy(&counts.stdout);
    assert!(counts.lines().any(|l| l == "packs: 0"), "{counts}");
}

#[tokio::test]
async fn position_names_the_branch_and_the_commit_in_one_look() {
    let dir = tempfile::tempdir().expect("tempdir");
    let git = isolated(dir.path());
    assert!(matches!(git.position().await, Err(GitError::NotARepo(_))));
    assert!(matches!(git.head().await, Err(GitError::NotARepo(_))));
    assert!(matches!(
        git.commit_all("Outside", &[]).await,
        Err(GitError::NotARepo(_))
    ));

    git.init().await.expect("init");
    assert_eq!(
        git.position().await.expect("unborn"),
        (Some("main".to_owned()), None)
    );

    let git = repo(dir.path()).await;
    let head = git.head().await.expect("head");
    assert_eq!(
        git.position().await.expect("on main"),
        (Some("main".to_owned()), head.clone())
    );
    git.detach(head.as_deref().expect("a commit"))
        .await
        .expect("detach");
    assert_eq!(git.position().await.expect("detached"), (None, head));
}

/// Newcomer row 7: a commit a pre-commit hook refuses leaves the index exactly as it was
/// before ralph's `git add`: its new file untracked again, the person's staged version of a
/// path it shares with them staged again, and their own staged file still staged.
#[tokio::test]
async fn a_refused_commit_paths_puts_the_index_back_as_it_was() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path();
    let git = repo(ws).await;
    let shell = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(ws)
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    fs::write(ws.join("README.md"), "hello, staged\n").expect("write");
    fs::write(ws.join("theirs.txt"), "theirs\n").expect("write");
    shell(&["add", "README.md", "theirs.txt"]);
    fs::write(ws.join("README.md"), "hello, worked on\n").expect("write");
    fs::write(ws.join("work.txt"), "work\n").expect("write");
    let hook = ws.join(".git/hooks/pre-commit");
    fs::create_dir_all(hook.parent().expect("hooks")).expect("mkdir");
    fs::write(&hook, "#!/bin/sh\necho 'lint: no' >&2\nexit 1\n").expect("write");
    fs::set_permissions(&hook, fs::Permissions::from_mode(0o755)).expect("chmod");
    let before = shell(&["ls-files", "-s"]);

    let paths = ["README.md".to_owned(), "work.txt".to_owned()];
    let refused = git.commit_paths("t-1: work", &paths).await.unwrap_err();

    let GitError::CommitRefused {
        hook: Some(named),
        signing: false,
        stderr,
        ..
    } = &refused
    else {
        panic!("{refused:?}");
    };
    assert!(named.ends_with(".git/hooks/pre-commit"), "{named:?}");
    assert_eq!(stderr, "lint: no");
    assert_eq!(shell(&["ls-files", "-s"]), before, "the index as it was");
    assert_eq!(shell(&["show", ":README.md"]), "hello, staged\n");
    assert_eq!(
        fs::read_to_string(ws.join("README.md")).expect("read"),
        "hello, worked on\n"
    );
    assert!(ws.join("work.txt").exists());
}

/// `commit_paths` commits its paths and nothing else: what the person staged stays staged,
/// and paths with no change make no commit even while other files are staged.
#[tokio::test]
async fn commit_paths_takes_only_its_paths_and_leaves_the_persons_staging_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let git = repo(dir.path()).await;
    fs::write(dir.path().join("board.md"), "- [ ] a\n").expect("write");
    git.commit_all("The board", &[]).await.expect("commit");
    fs::write(dir.path().join("README.md"), "hello, staged\n").expect("write");
    std::process::Command::new("git")
        .args(["add", "README.md"])
        .current_dir(dir.path())
        .status()
        .expect("git add");
    let nothing = git
        .commit_paths("ralph: nothing", &["board.md".to_owned()])
        .await
        .expect("commit");
    assert_eq!(nothing, None, "no change in its paths: no commit");

    fs::write(dir.path().join("board.md"), "- [x] a\n").expect("write");
    let commit = git
        .commit_paths("ralph: the board", &["board.md".to_owned()])
        .await
        .expect("commit")
        .expect("a commit");
    let shown = std::process::Command::new("git")
        .args(["show", "--name-only", "--format=", &commit])
        .current_dir(dir.path())
        .output()
        .expect("git show");
    assert_eq!(String::from_utf8_lossy(&shown.stdout), "board.md\n");
    let staged = std::process::Command::new("git")
        .args(["diff", "--cached", "--name-only"])
        .current_dir(dir.path())
        .output()
        .expect("git diff");
    assert_eq!(String::from_utf8_lossy(&staged.stdout), "README.md\n");
}
