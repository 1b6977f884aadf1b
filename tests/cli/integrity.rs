//! Nothing of a person's reaches ralph's commits. A resume never commits what a person
//! changed between runs (newcomer-and-bad-input rows 30, 31 and 83): after a stop in order
//! the run refuses, naming the files, with a `next:` that works as printed; after a SIGKILL
//! the cut-short attempt's work is set aside and the attempt runs again from the branch. A
//! repository where git cannot run is refused (row 37).

#![cfg(unix)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::{command, stderr, stdout};

/// One task that writes `work.txt`, accepted. Its BUILD writes half its work, then hangs,
/// while `.git/test-hang` exists (the agent can read `.git`, and a file there is in no
/// one's `git status`).
const AGENT: &str = r#"cat > /dev/null
case "$1" in
  investigate) echo '{"tasks":[{"name":"Write work.txt","accept":"work.txt says done"}]}' ;;
  build)
    if [ -e .git/test-hang ]; then echo half > work.txt; exec sleep 300; fi
    echo done > work.txt; printf 'Wrote work.txt.\n<TASK_DONE>\n' ;;
  verify) echo '{"task_id":"'"$2"'","verdict":"accept","reason":"it says done"}' ;;
  gap_analysis) echo '{"tasks":[],"issues":[]}' ;;
  *) echo "unexpected role $1" >&2; exit 1 ;;
esac
"#;

/// A repository with a spec, the agent and its config committed, and a tracked README.
pub(super) fn repository() -> tempfile::TempDir {
    repository_with(AGENT)
}

/// [`repository`] with `agent` as the agent's script (`agent.sh`, run as `mine`).
pub(super) fn repository_with(agent: &str) -> tempfile::TempDir {
    let dir = crate::project();
    let ws = dir.path();
    std::fs::write(ws.join("agent.sh"), agent).unwrap();
    std::fs::write(
        ws.join("ralph.toml"),
        "[agent.mine]\ncommand = [\"sh\", \"agent.sh\", \"{role}\", \"{subject}\"]\n",
    )
    .unwrap();
    std::fs::write(ws.join("README.md"), "the person's readme\n").unwrap();
    std::fs::write(ws.join(".gitignore"), "/target\n").unwrap();
    git(ws, &["add", "-A"]);
    git(ws, &["commit", "-qm", "start"]);
    dir
}

pub(super) fn git(ws: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(ws)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
    stdout(&out)
}

/// `ralph construct spec.md --agent mine`, started while its BUILD will hang; returns once
/// the agent wrote its half of the work.
fn start_hanging(ws: &Path) -> Child {
    std::fs::write(ws.join(".git/test-hang"), "").unwrap();
    let child = command(ws, &["construct", "spec.md", "--agent", "mine"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ws.join("work.txt").exists() {
        assert!(Instant::now() < deadline, "the agent never wrote work.txt");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::remove_file(ws.join(".git/test-hang")).unwrap();
    child
}

/// What a person does between the runs: a secret, a new notes file, an edit of theirs.
fn a_person_edits(ws: &Path) {
    std::fs::write(ws.join(".env"), "AWS_SECRET_ACCESS_KEY=hunter2\n").unwrap();
    std::fs::write(ws.join("notes.md"), "my notes\n").unwrap();
    std::fs::write(ws.join("README.md"), "the person's readme, edited\n").unwrap();
}

/// Every file any commit on the branch holds or changed.
fn committed(ws: &Path) -> String {
    git(ws, &["log", "--name-only", "--format=%s", "HEAD"])
}

/// The run finished the spec; its task's commit holds the task's work, and nothing of the
/// person's is in the branch's history.
fn assert_only_the_work_committed(ws: &Path) {
    let log = committed(ws);
    assert!(log.contains("t-1: Write work.txt"), "{log}");
    let t1 = git(ws, &["show", "--name-only", "--format=", "HEAD"]);
    let t1: Vec<&str> = t1.lines().collect();
    assert_eq!(t1, ["work.txt"], "the task's commit: {log}");
    assert_eq!(git(ws, &["show", "HEAD:work.txt"]), "done\n");
    for theirs in [".env", "notes.md"] {
        assert!(!log.contains(theirs), "{theirs} was committed: {log}");
    }
    assert_eq!(
        git(ws, &["show", "HEAD:README.md"]),
        "the person's readme\n"
    );
}

#[test]
fn a_resume_after_sigterm_refuses_a_persons_changes_and_its_next_step_works() {
    let dir = repository();
    let ws = dir.path();
    let mut first = start_hanging(ws);
    kill(Pid::from_raw(first.id() as i32), Signal::SIGTERM).unwrap();
    first.wait().unwrap();
    a_person_edits(ws);
    let before = git(ws, &["rev-parse", "HEAD"]);

    let refused = command(ws, &["construct", "spec.md", "--agent", "mine"])
        .output()
        .unwrap();
    let (out, err) = (stdout(&refused), stderr(&refused));
    assert_eq!(refused.status.code(), Some(1), "{out}\n{err}");
    for path in [".env", "notes.md", "README.md"] {
        assert!(err.contains(path), "the refusal names {path}: {err}");
    }
    assert!(
        !err.contains("work.txt"),
        "the task's own work is not the person's: {err}"
    );
    assert_eq!(git(ws, &["rev-parse", "HEAD"]), before, "nothing committed");

    let next = crate::dead_ends::next_command(&refused);
    let again = crate::dead_ends::run_printed(ws, &next);
    assert_eq!(again.status.code(), Some(0), "{next}\n{}", stderr(&again));
    assert_only_the_work_committed(ws);
    let stash = git(ws, &["stash", "show", "--include-untracked", "--name-only"]);
    assert!(
        stash.contains("notes.md") && stash.contains(".env"),
        "{stash}"
    );
}

#[test]
fn a_resume_after_sigkill_sets_the_cut_short_attempt_aside_and_runs_it_again() {
    let dir = repository();
    let ws = dir.path();
    let mut first = start_hanging(ws);
    first.kill().unwrap();
    first.wait().unwrap();
    a_person_edits(ws);

    let again = command(ws, &["construct", "spec.md", "--agent", "mine"])
        .output()
        .unwrap();
    let (out, err) = (stdout(&again), stderr(&again));
    assert_eq!(again.status.code(), Some(0), "{out}\n{err}");
    assert!(
        format!("{out}{err}").contains("cut short by a kill or a crash"),
        "the set-aside is said: {out}\n{err}"
    );
    assert_only_the_work_committed(ws);
    let entries = git(ws, &["stash", "list"]);
    assert!(entries.contains("t-1's attempt cut short"), "{entries}");
    let stash = git(ws, &["stash", "show", "--include-untracked", "--name-only"]);
    for path in ["work.txt", ".env", "notes.md", "README.md"] {
        assert!(stash.contains(path), "{path} is set aside: {stash}");
    }
}

/// Row 37: with no `git` on `PATH` inside a repository, a run said Complete and committed
/// nothing. It is refused before anything runs, naming the cause.
#[test]
fn a_repository_without_a_runnable_git_is_refused() {
    let dir = repository();
    let ws = dir.path();
    let bin = tempfile::tempdir().unwrap();
    for tool in ["sh", "cat", "sleep"] {
        let found = ["/usr/bin", "/bin"]
            .iter()
            .map(|d| Path::new(d).join(tool))
            .find(|p| p.exists())
            .unwrap();
        std::os::unix::fs::symlink(found, bin.path().join(tool)).unwrap();
    }
    let out = command(ws, &["construct", "spec.md", "--agent", "mine"])
        .env("PATH", bin.path())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{}\n{err}", stdout(&out));
    assert!(err.contains("`git` cannot run"), "{err}");
    assert!(err.contains(".git"), "{err}");
    assert!(!ws.join("work.txt").exists(), "no agent ran");
}

/// Two tasks; t-2's first session writes half its work, then waits until `.git/rewound`
/// exists (a person's signal: the agent may read `.git`, never write it).
const WAITING_AGENT: &str = r#"cat > /dev/null
case "$1" in
  investigate) echo '{"tasks":[{"name":"Write one.txt","accept":"it is there"},{"name":"Write two.txt","accept":"it is there"}]}' ;;
  build)
    case "$2" in
      t-1) echo one > one.txt ;;
      *) if [ ! -e .git/rewound ]; then
           echo half > two.txt
           while [ ! -e .git/rewound ]; do sleep 0.05; done
         fi
         echo two > two.txt ;;
    esac
    printf 'Wrote it.\n<TASK_DONE>\n' ;;
  verify) echo '{"task_id":"'"$2"'","verdict":"accept","reason":"it is there"}' ;;
  gap_analysis) echo '{"tasks":[],"issues":[]}' ;;
  *) echo "unexpected role $1" >&2; exit 1 ;;
esac
"#;

// newcomer-and-bad-input row 5 (hostile case 5), done by a person: the branch rewound under a
// running ralph, dropping t-1's commit. The attempt running then fails with the reason,
// ralph puts the branch back, and t-1 is never accepted without its commit on the branch.
#[test]
fn a_branch_a_person_rewinds_during_a_run_is_put_back() {
    let dir = repository_with(WAITING_AGENT);
    let ws = dir.path();
    let run = command(ws, &["construct", "spec.md", "--agent", "mine"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ws.join("two.txt").exists() {
        assert!(Instant::now() < deadline, "t-2 never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let t1 = git(ws, &["rev-parse", "HEAD"]);
    assert!(git(ws, &["log", "-1", "--format=%s"]).starts_with("t-1"));
    git(ws, &["reset", "-q", "--hard", "HEAD~1"]);
    std::fs::write(ws.join(".git/rewound"), "").unwrap();
    let out = run.wait_with_output().unwrap();
    let text = format!("{}\n{}", stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("a reset, or a rewrite of what ralph committed"),
        "{text}"
    );
    let subjects = git(ws, &["log", "--format=%s"]);
    assert!(
        subjects.starts_with("t-2: Write two.txt\nt-1: Write one.txt\n"),
        "{subjects}"
    );
    assert!(
        git(ws, &["merge-base", "--is-ancestor", t1.trim(), "HEAD"]).is_empty(),
        "t-1's own commit is back on the branch"
    );
    assert_eq!(git(ws, &["show", "HEAD:one.txt"]), "one\n");
    assert_eq!(git(ws, &["show", "HEAD:two.txt"]), "two\n");
}
