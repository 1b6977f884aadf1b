//! One commit story in a git workspace: each task that passes its gates is one commit on the
//! branch the user had checked out, at any `build_concurrency`; the user's own edits are
//! never swept in; an agent that switches branch, resets or rewrites ralph's commits fails
//! its attempt and the branch is put back; a merge the user's files block keeps the work
//! and says how to go on.

#![allow(clippy::unwrap_used)]

use std::process::Command;

use super::*;

/// A git repository with one commit, `.ralph/` and the logs ignored, and the spec.
fn repo() -> tempfile::TempDir {
    let dir = workspace(SPEC);
    std::fs::write(dir.path().join(".gitignore"), ".ralph/\nbuild/\n").unwrap();
    git_ok(dir.path(), &["init", "-q", "-b", "main"]);
    git_ok(dir.path(), &["add", "-A"]);
    commit(dir.path(), "base");
    dir
}

fn commit(dir: &Path, message: &str) {
    git_ok(
        dir,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "-m",
            message,
        ],
    );
}

fn git_ok(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The subjects of the branch's commits, newest first.
fn log(dir: &Path) -> Vec<String> {
    git_ok(dir, &["log", "--format=%s"])
        .lines()
        .map(str::to_owned)
        .collect()
}

fn status(dir: &Path) -> String {
    git_ok(dir, &["status", "--porcelain"])
}

/// A FakeAgent whose build runs of some attempts first run a shell script in the directory
/// the agent works in (the workspace, or the task's work tree), as a real agent's tool
/// would.
struct Shell {
    inner: FakeAgent,
    /// `(task, attempt, script)`.
    scripts: Vec<(&'static str, u32, String)>,
}

#[async_trait]
impl Agent for Shell {
    async fn run(&self, request: AgentRequest) -> Result<AgentRun, AgentError> {
        let script = self.scripts.iter().find(|(task, attempt, _)| {
            request.role == Role::Build
                && request.subject.as_deref() == Some(*task)
                && request.attempt == *attempt
        });
        if let Some((_, _, script)) = script {
            let out = Command::new("sh")
                .args(["-c", script])
                .current_dir(&request.workspace)
                .env("GIT_AUTHOR_NAME", "agent")
                .env("GIT_AUTHOR_EMAIL", "agent@x")
                .env("GIT_COMMITTER_NAME", "agent")
                .env("GIT_COMMITTER_EMAIL", "agent@x")
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{script}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        self.inner.run(request).await
    }
}

/// i-1 becomes t-1 (writes one.txt) and t-2 (writes two.txt); verifiers accept.
fn two_tasks() -> FakeAgent {
    FakeAgent::new()
        .on(
            Role::Investigate,
            "i-1",
            tasks(&[("Write one.txt", "one.txt"), ("Write two.txt", "two.txt")]),
        )
        .always(Role::Verify, accept("fine"))
        .always(Role::GapAnalysis, no_gaps())
}

fn writes(file: &str) -> Script {
    Script::new()
        .write(file, format!("{file}\n"))
        .answer(format!("Wrote {file}.\n<TASK_DONE>"))
}

fn ralph_at(dir: &Path, agent: impl Agent + 'static, at_once: usize) -> (Ralph, Recorder) {
    let events = Recorder::default();
    let ralph = Ralph::builder()
        .workspace(dir)
        .agent(agent)
        .store(MemoryStore::new())
        .observer(events.clone())
        .build_concurrency(at_once)
        .stage_timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    (ralph, events)
}

#[rstest]
#[case::one_at_a_time(1)]
#[case::two_at_once(2)]
#[tokio::test]
async fn each_task_that_passes_is_one_commit_on_the_users_branch(#[case] at_once: usize) {
    let dir = repo();
    // The user's own untracked file: never committed by ralph.
    write(dir.path(), "notes.txt", "mine\n");
    let agent = two_tasks().on(Role::Build, "t-1", writes("one.txt")).on(
        Role::Build,
        "t-2",
        writes("two.txt"),
    );
    let (ralph, _) = ralph_at(dir.path(), agent, at_once);

    let outcome = ralph.construct("spec.md").await.unwrap();

    assert!(
        matches!(outcome, Outcome::Complete { accepted: 2, .. }),
        "{outcome:?}"
    );
    let mut subjects = log(dir.path());
    subjects[..2].sort();
    assert_eq!(
        subjects,
        ["t-1: Write one.txt", "t-2: Write two.txt", "base"]
    );
    for task in ["t-1", "t-2"] {
        let commit = ralph
            .board()
            .await
            .unwrap()
            .task(task)
            .unwrap()
            .commit
            .clone();
        let commit = commit.unwrap_or_else(|| panic!("{task} has its commit"));
        let files = git_ok(dir.path(), &["show", "--name-only", "--format=", &commit]);
        assert_eq!(files.lines().count(), 1, "{task}: {files}");
    }
    assert_eq!(
        git_ok(dir.path(), &["branch", "--show-current"]).trim(),
        "main"
    );
    assert_eq!(status(dir.path()), "?? notes.txt\n");
}

#[tokio::test]
async fn uncommitted_changes_to_tracked_files_are_refused_before_anything_runs() {
    let dir = repo();
    std::fs::write(dir.path().join("spec.md"), format!("{SPEC}More.\n")).unwrap();
    let agent = Arc::new(two_tasks());
    let (ralph, _) = ralph_at(dir.path(), agent.clone(), 1);

    let err = ralph.construct("spec.md").await.unwrap_err();

    assert!(matches!(err, Error::Uncommitted { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("(spec.md)"), "{message}");
    assert!(message.contains("branch main"), "{message}");
    assert!(message.contains("`git stash`"), "{message}");
    assert!(agent.requests().is_empty(), "no agent ran");
    assert_eq!(
        status(dir.path()),
        " M spec.md\n",
        "the edit is left as it was"
    );

    // The way forward, as the message says: commit, then the same command.
    git_ok(dir.path(), &["add", "spec.md"]);
    commit(dir.path(), "my edit");
    let agent = two_tasks().on(Role::Build, "t-1", writes("one.txt")).on(
        Role::Build,
        "t-2",
        writes("two.txt"),
    );
    let (ralph, _) = ralph_at(dir.path(), agent, 1);
    let outcome = ralph.construct("spec.md").await.unwrap();
    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
}

#[tokio::test]
async fn tasks_built_at_once_leave_the_users_uncommitted_changes_alone() {
    let dir = repo();
    std::fs::write(dir.path().join("spec.md"), format!("{SPEC}More.\n")).unwrap();
    let agent = two_tasks().on(Role::Build, "t-1", writes("one.txt")).on(
        Role::Build,
        "t-2",
        writes("two.txt"),
    );
    let (ralph, _) = ralph_at(dir.path(), agent, 2);

    let outcome = ralph.construct("spec.md").await.unwrap();

    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    assert_eq!(log(dir.path()).len(), 3);
    assert_eq!(status(dir.path()), " M spec.md\n");
}

#[rstest]
#[case::one_at_a_time(1)]
#[case::two_at_once(2)]
#[tokio::test]
async fn an_agent_that_switches_branch_fails_its_attempt_and_the_branch_is_put_back(
    #[case] at_once: usize,
) {
    let dir = repo();
    let agent = Arc::new(Shell {
        inner: two_tasks()
            .on_attempt(Role::Build, "t-1", 1, writes("one.txt"))
            .on_attempt(Role::Build, "t-1", 2, writes("one.txt"))
            .on(Role::Build, "t-2", writes("two.txt")),
        scripts: vec![(
            "t-1",
            1,
            "git checkout -q -b agent-t-1 && echo one > one.txt && git add -A && git commit -qm 'agent t-1'"
                .into(),
        )],
    });
    let (ralph, events) = ralph_at(dir.path(), agent.clone(), at_once);

    let outcome = ralph.construct("spec.md").await.unwrap();

    assert!(
        matches!(outcome, Outcome::Complete { accepted: 2, .. }),
        "{outcome:?}"
    );
    // The user is on their branch, which holds both tasks' work.
    assert_eq!(
        git_ok(dir.path(), &["branch", "--show-current"]).trim(),
        "main"
    );
    assert!(dir.path().join("one.txt").exists());
    assert!(dir.path().join("two.txt").exists());
    assert!(log(dir.path()).iter().any(|s| s == "t-1: Write one.txt"));
    // The first attempt failed with what the agent did as its reason; the retry carried it.
    let retries = events.of_kind("task_retry");
    assert_eq!(retries[0]["task"], "t-1");
    assert!(
        retries[0]["reason"]
            .as_str()
            .unwrap()
            .contains("switched to branch agent-t-1"),
        "{retries:?}"
    );
    let second = agent
        .inner
        .requests()
        .into_iter()
        .find(|r| r.role == Role::Build && r.subject.as_deref() == Some("t-1") && r.attempt == 2)
        .expect("a second attempt");
    assert!(second.prompt.contains("switched to branch agent-t-1"));
}

#[tokio::test]
async fn an_agent_that_resets_ralphs_commit_fails_and_the_branch_is_put_back() {
    let dir = repo();
    let agent = Arc::new(Shell {
        inner: two_tasks()
            .on(Role::Build, "t-1", writes("one.txt"))
            .on_attempt(Role::Build, "t-2", 1, writes("two.txt"))
            .on_attempt(Role::Build, "t-2", 2, writes("two.txt")),
        // t-1 was committed before t-2 runs: t-2's agent throws that commit away.
        scripts: vec![("t-2", 1, "git reset -q --hard HEAD~1".into())],
    });
    let (ralph, events) = ralph_at(dir.path(), agent, 1);

    let outcome = ralph.construct("spec.md").await.unwrap();

    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    let subjects = log(dir.path());
    assert_eq!(
        subjects,
        ["t-2: Write two.txt", "t-1: Write one.txt", "base"],
        "t-1's commit was put back"
    );
    assert!(
        events.of_kind("task_retry")[0]["reason"]
            .as_str()
            .unwrap()
            .contains("a reset, or a rewrite of what ralph committed")
    );
}

#[tokio::test]
async fn a_merge_blocked_by_an_untracked_file_keeps_the_work_and_unblocking_merges_it() {
    let dir = repo();
    // As `cargo test` leaves it: a file untracked in the user's tree that the task also makes.
    write(dir.path(), "Cargo.lock", "the user's\n");
    let agent = Arc::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                tasks(&[("Lock the dependencies", "Cargo.lock")]),
            )
            .on(Role::Build, "t-1", writes("Cargo.lock"))
            .always(Role::Verify, accept("fine"))
            .always(Role::GapAnalysis, no_gaps()),
    );
    let store = MemoryStore::new();
    let builder = || {
        Ralph::builder()
            .workspace(dir.path())
            .agent(agent.clone())
            .store(store.clone())
            .build_concurrency(2)
    };

    let outcome = builder()
        .build()
        .unwrap()
        .construct("spec.md")
        .await
        .unwrap();

    // Not an error, and not thrown away: the task is blocked, naming the file and the
    // branch that keeps its work.
    let Outcome::Blocked { items } = &outcome else {
        panic!("expected Blocked, got {outcome:?}");
    };
    assert_eq!(items[0].id, "t-1");
    let reason = &items[0].reason;
    assert!(reason.contains("Cargo.lock"), "{reason}");
    assert!(reason.contains("kept on branch ralph-task/t-1"), "{reason}");
    assert!(reason.contains("ralph task unblock t-1"), "{reason}");
    assert!(
        !git_ok(dir.path(), &["branch", "--list", "ralph-task/t-1"]).is_empty(),
        "the branch keeps the work"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("Cargo.lock")).unwrap(),
        "the user's\n"
    );

    // The way forward it names: clear the way, unblock, run again. The kept work is merged,
    // not built again.
    std::fs::remove_file(dir.path().join("Cargo.lock")).unwrap();
    let ralph = builder().build().unwrap();
    ralph.unblock(&TaskId::new("t-1")).await.unwrap();
    let builds_before = agent
        .requests()
        .iter()
        .filter(|r| r.role == Role::Build)
        .count();
    let outcome = ralph.construct("spec.md").await.unwrap();

    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    let builds_after = agent
        .requests()
        .iter()
        .filter(|r| r.role == Role::Build)
        .count();
    assert_eq!(builds_after, builds_before, "merged, not built again");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("Cargo.lock")).unwrap(),
        "Cargo.lock\n"
    );
    assert_eq!(log(dir.path())[0], "t-1: Lock the dependencies");
    assert!(git_ok(dir.path(), &["branch", "--list", "ralph-task/*"]).is_empty());
}

#[tokio::test]
async fn a_blocked_tasks_unfinished_work_is_set_aside_in_a_stash_entry() {
    let dir = repo();
    let agent = two_tasks()
        .on(
            Role::Build,
            "t-1",
            Script::new()
                .write("half.txt", "half\n")
                .answer("<TASK_BLOCKED reason=\"needs a key\">"),
        )
        .on(Role::Build, "t-2", writes("two.txt"));
    let (ralph, events) = ralph_at(dir.path(), agent, 1);

    let outcome = ralph.construct("spec.md").await.unwrap();

    assert!(matches!(outcome, Outcome::Blocked { .. }), "{outcome:?}");
    // t-2's commit holds t-2's work only; t-1's half is in the stash, not in the tree.
    assert_eq!(log(dir.path())[0], "t-2: Write two.txt");
    let files = git_ok(dir.path(), &["show", "--name-only", "--format=", "HEAD"]);
    assert_eq!(files.trim(), "two.txt");
    assert!(!dir.path().join("half.txt").exists());
    let stashes = git_ok(dir.path(), &["stash", "list"]);
    assert!(
        stashes.contains("ralph: t-1's unfinished work (blocked)"),
        "{stashes}"
    );
    assert!(
        events
            .of_kind("warning")
            .iter()
            .any(|w| w["message"].as_str().unwrap().contains("git stash list")),
    );
    assert_eq!(status(dir.path()), "");
}

#[tokio::test]
async fn a_turn_cut_short_is_taken_up_by_the_next_run_and_committed_whole() {
    let dir = repo();
    let first = Arc::new(two_tasks().on(
        Role::Build,
        "t-1",
        Script::new().write("one.txt", "half\n").hang(),
    ));
    let store = MemoryStore::new();
    let ralph = Arc::new(
        Ralph::builder()
            .workspace(dir.path())
            .agent(first.clone())
            .store(store.clone())
            .build()
            .unwrap(),
    );
    let running = tokio::spawn({
        let ralph = ralph.clone();
        async move { ralph.construct("spec.md").await }
    });
    wait_for_request(&first, Role::Build).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    ralph.stop_token().stop();
    let outcome = running.await.unwrap().unwrap();
    assert_eq!(outcome, Outcome::Interrupted);
    drop(ralph);
    // The half-done work is in the tree, uncommitted: ralph's own, so no refusal next time.
    assert_eq!(status(dir.path()), "?? one.txt\n");

    let second = two_tasks()
        .on(
            Role::Build,
            "t-1",
            Script::new()
                .append("one.txt", "whole\n")
                .answer("Done.\n<TASK_DONE>"),
        )
        .on(Role::Build, "t-2", writes("two.txt"));
    let outcome = Ralph::builder()
        .workspace(dir.path())
        .agent(second)
        .store(store)
        .build()
        .unwrap()
        .construct("spec.md")
        .await
        .unwrap();

    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    assert_eq!(
        git_ok(dir.path(), &["show", "HEAD~1:one.txt"]),
        "half\nwhole\n"
    );
    assert_eq!(status(dir.path()), "");
}

#[tokio::test]
async fn a_task_whose_commit_left_the_branch_is_built_again_not_accepted() {
    let dir = repo();
    // A commit on another branch, never on main.
    git_ok(dir.path(), &["checkout", "-q", "-b", "elsewhere"]);
    write(dir.path(), "one.txt", "elsewhere\n");
    git_ok(dir.path(), &["add", "-A"]);
    commit(dir.path(), "elsewhere");
    let stray = git_ok(dir.path(), &["rev-parse", "HEAD"]).trim().to_owned();
    git_ok(dir.path(), &["checkout", "-q", "main"]);
    let store = MemoryStore::new();
    let mut done = Task::new("t-1", "Write one.txt").with_status(TaskStatus::Done);
    done.commit = Some(stray);
    store
        .persist(&[Change::Task(done), seeded()])
        .await
        .unwrap();
    let agent = Arc::new(
        FakeAgent::new()
            .always(Role::Verify, accept("looks fine"))
            .on(Role::Build, "t-1", writes("one.txt"))
            .always(Role::GapAnalysis, no_gaps()),
    );

    let outcome = Ralph::builder()
        .workspace(dir.path())
        .agent(agent.clone())
        .store(store.clone())
        .build()
        .unwrap()
        .construct("spec.md")
        .await
        .unwrap();

    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    let task = store.board().task("t-1").unwrap().clone();
    assert!(
        task.tombstones[0].reason.contains("is not on branch main"),
        "{:?}",
        task.tombstones
    );
    assert_eq!(log(dir.path())[0], "t-1: Write one.txt");
    assert!(
        agent
            .requests()
            .iter()
            .any(|r| r.role == Role::Build && r.subject.as_deref() == Some("t-1"))
    );
}

/// Re-audit N2: ralph committed t-1, then its record could not be written (an agent had
/// forged a line of plan.jsonl); the person committed something of their own and repaired
/// the file. When the next run finds nothing left to commit for t-1, t-1's commit is the
/// one ralph made for it, not the newest commit on the branch.
#[tokio::test]
async fn a_task_committed_before_its_record_was_cut_short_keeps_its_own_commit() {
    let dir = repo();
    let forged = "{\"t\":\"task\",\"id\":\"t-2\",\"name\":\"Write two.txt\",\"s\":\"a\"}\n";
    let first = two_tasks().on(
        Role::Build,
        "t-1",
        writes("one.txt").append(".ralph/plan.jsonl", forged),
    );
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(first)
        .stage_timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    ralph
        .construct("spec.md")
        .await
        .expect_err("the forgery stops the run");
    drop(ralph);
    assert_eq!(log(dir.path())[0], "t-1: Write one.txt");
    let ours = git_ok(dir.path(), &["rev-parse", "HEAD"]).trim().to_owned();
    std::fs::write(dir.path().join("notes.txt"), "mine\n").unwrap();
    git_ok(dir.path(), &["add", "notes.txt"]);
    commit(dir.path(), "fix");

    let second = two_tasks().on(Role::Build, "t-1", writes("one.txt")).on(
        Role::Build,
        "t-2",
        writes("two.txt"),
    );
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(second)
        .stage_timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    ralph.repair(false).await.expect("repaired");
    let outcome = ralph.construct("spec.md").await.unwrap();

    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    let board = ralph.board().await.unwrap();
    assert_eq!(
        board.task("t-1").unwrap().commit.as_deref(),
        Some(ours.as_str())
    );
    assert_eq!(log(dir.path())[..2], ["t-2: Write two.txt", "fix"]);
}

/// Audit row 15: a file already untracked in the tree (not ignored) made the gate pass for
/// a task whose commit does not hold it. While the gates run it is set aside, the failure
/// names it, and it is back afterwards.
#[tokio::test]
async fn the_gates_do_not_see_untracked_files_the_commit_leaves_out() {
    let dir = repo();
    write(dir.path(), "data.txt", "the person's, untracked\n");
    let agent = writes_one_txt();
    let events = Recorder::default();
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(agent)
        .store(MemoryStore::new())
        .observer(events.clone())
        .gate(ShellGate::new("data", "test -e data.txt"))
        .retries(0)
        .build()
        .unwrap();

    let outcome = ralph.construct("spec.md").await.unwrap();

    assert!(!matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    let board = ralph.board().await.unwrap();
    let failure = board
        .task("t-1")
        .unwrap()
        .last_failure
        .clone()
        .unwrap_or_default();
    assert!(
        failure.contains("data.txt"),
        "the failure names it: {failure}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("data.txt")).unwrap(),
        "the person's, untracked\n",
        "put back after the gates"
    );
    assert!(!dir.path().join(".ralph/aside").exists());
}

/// library-user F2: a report a gate wrote landed in the task's commit. What the gates
/// write is never the task's work: the commit holds the agent's file only.
#[tokio::test]
async fn a_report_a_gate_writes_is_not_committed_with_the_task() {
    let dir = repo();
    let agent = writes_one_txt();
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(agent)
        .store(MemoryStore::new())
        .gate(ShellGate::new(
            "coverage",
            "mkdir -p cov && echo 91% > cov/report.txt",
        ))
        .build()
        .unwrap();

    let outcome = ralph.construct("spec.md").await.unwrap();

    assert!(
        matches!(outcome, Outcome::Complete { accepted: 1, .. }),
        "{outcome:?}"
    );
    let commit = ralph
        .board()
        .await
        .unwrap()
        .task("t-1")
        .unwrap()
        .commit
        .clone()
        .unwrap();
    let files = git_ok(dir.path(), &["show", "--name-only", "--format=", &commit]);
    assert_eq!(files, "one.txt\n");
    assert_eq!(
        status(dir.path()),
        "?? cov/\n",
        "the report is left in the tree"
    );
}

/// The files a run is judged with stay where they are while the gates run, committed or
/// not: a gate's own script that nobody committed yet is no task's work.
#[tokio::test]
async fn an_uncommitted_gate_script_stays_for_the_gates() {
    let dir = repo();
    write(dir.path(), "check.sh", "test -f one.txt\n");
    write(
        dir.path(),
        "ralph.toml",
        "[[gates]]\nname = \"check\"\ncommand = \"sh check.sh\"\n",
    );
    let agent = writes_one_txt();
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(agent)
        .store(MemoryStore::new())
        .build()
        .unwrap();

    let outcome = ralph.construct("spec.md").await.unwrap();

    assert!(
        matches!(outcome, Outcome::Complete { accepted: 1, .. }),
        "{outcome:?}"
    );
    let commit = ralph
        .board()
        .await
        .unwrap()
        .task("t-1")
        .unwrap()
        .commit
        .clone()
        .unwrap();
    let files = git_ok(dir.path(), &["show", "--name-only", "--format=", &commit]);
    assert_eq!(
        files, "one.txt\n",
        "the script stays the person's, uncommitted"
    );
}

/// i-1 becomes t-1, whose every attempt writes one.txt; verifiers accept.
fn writes_one_txt() -> FakeAgent {
    FakeAgent::new()
        .on(
            Role::Investigate,
            "i-1",
            tasks(&[("Write one.txt", "one.txt")]),
        )
        .always(Role::Build, writes("one.txt"))
        .always(Role::Verify, accept("fine"))
        .always(Role::GapAnalysis, no_gaps())
}
