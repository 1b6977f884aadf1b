//! `build_concurrency`: ready tasks built at once, each in its own git work tree, merged
//! into the checked-out branch in the order they started (rebased: a linear history, one
//! commit per task); a merge conflict sends the task back to be built again on the merged
//! work.

use std::process::Command;

use super::*;
use ralph::model::{Change, Task};

/// A git repository with one commit, `.ralph/` ignored, and the spec.
pub(super) fn repo() -> tempfile::TempDir {
    let dir = workspace(SPEC);
    std::fs::write(dir.path().join(".gitignore"), ".ralph/\nbuild/\n").expect(".gitignore");
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "-A"],
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
    ] {
        assert!(git(dir.path(), args).status.success());
    }
    dir
}

fn git(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs")
}

fn git_out(dir: &Path, args: &[&str]) -> String {
    String::from_utf8_lossy(&git(dir, args).stdout).into_owned()
}

/// Six independent tasks; t-1 and t-2 both create `a.txt`, t-3 and t-4 both create
/// `b.txt`, t-5 and t-6 have files of their own.
async fn six_tasks(store: &MemoryStore) {
    let changes: Vec<Change> = (1..=6)
        .map(|i| {
            Change::Task(
                Task::new(format!("t-{i}"), format!("Task {i}")).with_acceptance("its file exists"),
            )
        })
        .chain([seeded()])
        .collect();
    store.persist(&changes).await.expect("the board");
}

fn writes(path: &str, content: &str, delay_ms: u64) -> Script {
    Script::new()
        .delay(Duration::from_millis(delay_ms))
        .write(path, content)
        .answer("Done.\n<TASK_DONE>")
}

#[tokio::test]
async fn six_tasks_at_three_at_once_with_two_conflicting_pairs_are_all_accepted_in_a_linear_history()
 {
    let dir = repo();
    let base = git_out(dir.path(), &["rev-parse", "HEAD"]);
    let store = MemoryStore::new();
    six_tasks(&store).await;
    // t-1, t-2 and t-3 start at once; t-4 starts when t-1 has merged, while t-3 is still
    // being built. Attempts merge in the order they started, so whichever agent is faster,
    // t-2 meets t-1's `a.txt` and t-4 meets t-3's `b.txt`: each conflicts once and is built
    // again on top of the other. t-4 passes before t-3 and waits its turn.
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Build, "t-1", writes("a.txt", "from t-1\n", 0))
            .on(Role::Build, "t-2", writes("a.txt", "from t-2\n", 400))
            .on(
                Role::Build,
                "t-2",
                writes("a.txt", "from t-1, then t-2\n", 0),
            )
            .on(Role::Build, "t-3", writes("b.txt", "from t-3\n", 1500))
            .on(Role::Build, "t-4", writes("b.txt", "from t-4\n", 0))
            .on(
                Role::Build,
                "t-4",
                writes("b.txt", "from t-3, then t-4\n", 0),
            )
            .on(Role::Build, "t-5", writes("c.txt", "from t-5\n", 0))
            .on(Role::Build, "t-6", writes("d.txt", "from t-6\n", 0))
            .always(Role::Verify, accept("exists"))
            .always(Role::GapAnalysis, no_gaps()),
    );
    let events = Recorder::default();

    let outcome = Ralph::builder()
        .workspace(dir.path())
        .agent(agent.clone())
        .store(store)
        .observer(events.clone())
        .build_concurrency(3)
        .build()
        .unwrap()
        .construct("spec.md")
        .await
        .unwrap();

    assert_eq!(complete(&outcome), (1, 6));
    let conflicts: Vec<TaskId> = events
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::TaskRetry { task, reason, .. } if reason.starts_with("Merge conflict") => {
                Some(task)
            }
            _ => None,
        })
        .collect();
    assert_eq!(conflicts, [TaskId::new("t-2"), TaskId::new("t-4")]);
    // Each task's merge is an event naming its commit, which is in the history.
    let merged: Vec<(TaskId, String)> = events
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::TaskMerged { task, commit } => Some((task, commit)),
            _ => None,
        })
        .collect();
    assert_eq!(merged.len(), 6, "{merged:?}");
    let history = git_out(dir.path(), &["log", "--format=%H %s"]);
    for (task, commit) in &merged {
        assert!(
            history.contains(&format!("{commit} {task}: ")),
            "{task} {commit} in\n{history}"
        );
    }
    // The documented history: one commit per task on top of the base, no merge commits, in
    // the order the merged attempts started. Each task's last attempt is the one merged (a
    // retried task starts again at the back); when the slots free up depends on the
    // machine, so the order is checked against the starts, not written out.
    let subjects = git_out(
        dir.path(),
        &[
            "log",
            "--reverse",
            "--format=%s",
            &format!("{}..HEAD", base.trim()),
        ],
    );
    let subjects: Vec<&str> = subjects.lines().collect();
    let mut last_start = std::collections::HashMap::new();
    for (at, event) in events.events().into_iter().enumerate() {
        if let Event::TaskStarted { task, name, .. } = event {
            last_start.insert(format!("{task}: {name}"), at);
        }
    }
    let mut by_start = subjects.clone();
    by_start.sort_by_key(|subject| last_start[*subject]);
    assert_eq!(subjects.len(), 6, "{subjects:?}");
    assert_eq!(subjects, by_start);
    // t-1 merged first; t-3 (started before t-4) before t-4, which waited for it.
    assert_eq!(subjects[0], "t-1: Task 1");
    let at = |s: &str| subjects.iter().position(|x| *x == s);
    assert!(at("t-3: Task 3") < at("t-4: Task 4"), "{subjects:?}");
    assert_eq!(git_out(dir.path(), &["rev-list", "--merges", "HEAD"]), "");
    let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).unwrap();
    assert_eq!(read("a.txt"), "from t-1, then t-2\n");
    assert_eq!(read("b.txt"), "from t-3, then t-4\n");
    assert_eq!(read("c.txt"), "from t-5\n");
    // No work tree or branch of ralph's is left.
    assert_eq!(
        git_out(dir.path(), &["worktree", "list"]).lines().count(),
        1
    );
    assert_eq!(
        git_out(dir.path(), &["branch", "--list", "ralph-task/*"]),
        ""
    );
    assert_eq!(git_out(dir.path(), &["status", "--porcelain"]), "");
}

/// The construct loop on one task with `build_concurrency = n`: its outcome and events.
async fn one_task_at(dir: &Path, n: usize) -> (Outcome, Recorder) {
    let events = Recorder::default();
    let outcome = Ralph::builder()
        .workspace(dir)
        .agent(one_task().on(Role::Build, "t-1", writes_done()))
        .gate(done_gate())
        .store(MemoryStore::new())
        .observer(events.clone())
        .build_concurrency(n)
        .build()
        .expect("the builder")
        .construct("spec.md")
        .await
        .expect("the run");
    (outcome, events)
}

#[tokio::test]
async fn without_git_build_concurrency_builds_one_task_at_a_time_and_says_why() {
    let dir = workspace(SPEC);

    let (outcome, events) = one_task_at(dir.path(), 4).await;

    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    assert!(
        events.events().iter().any(|e| matches!(e,
            Event::Warning { message } if message.contains("build_concurrency = 4 needs a git repository")
        )),
        "{:?}",
        events.events()
    );
}

/// A work tree as a killed run leaves it, for task `task`.
fn leftover_work_tree(dir: &Path, task: &str) -> std::path::PathBuf {
    let tree = dir.join(".ralph/worktrees").join(task);
    std::fs::create_dir_all(dir.join(".ralph/worktrees")).expect("the folder");
    let branch = format!("ralph-task/{task}");
    let added = git(
        dir,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            &branch,
            &tree.to_string_lossy(),
            "HEAD",
        ],
    );
    assert!(added.status.success(), "{added:?}");
    tree
}

#[tokio::test]
async fn a_board_edit_under_the_lock_also_removes_a_killed_runs_work_trees() {
    let dir = repo();
    let tree = leftover_work_tree(dir.path(), "t-4");
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(FakeAgent::new())
        .store(MemoryStore::new())
        .build()
        .unwrap();

    ralph
        .add_task(Task::new("t-1", "Anything").with_acceptance("it is done"))
        .await
        .unwrap();

    assert!(!tree.exists());
    assert_eq!(
        git_out(dir.path(), &["branch", "--list", "ralph-task/*"]),
        ""
    );
    assert!(ralph.tasks_in_flight().is_empty());
}

#[tokio::test]
async fn the_work_trees_a_killed_run_left_are_removed_at_the_next_start() {
    let dir = repo();
    let tree = leftover_work_tree(dir.path(), "t-9");
    let events = Recorder::default();

    Ralph::builder()
        .workspace(dir.path())
        .agent(one_task().on(Role::Build, "t-1", writes_done()))
        .gate(done_gate())
        .store(MemoryStore::new())
        .observer(events.clone())
        .build()
        .unwrap()
        .construct("spec.md")
        .await
        .unwrap();

    assert!(!tree.exists());
    assert_eq!(
        git_out(dir.path(), &["branch", "--list", "ralph-task/*"]),
        ""
    );
    assert!(
        events.events().iter().any(|e| matches!(e,
            Event::Warning { message } if message.contains("removed the work trees") && message.contains("t-9")
        )),
        "{:?}",
        events.events()
    );
}

#[tokio::test]
async fn a_stop_with_three_tasks_in_flight_ends_them_all_and_leaves_no_work_tree() {
    let dir = repo();
    let store = MemoryStore::new();
    six_tasks(&store).await;
    let agent = Arc::new(FakeAgent::new().always(
        Role::Build,
        Script::new().write("partial.txt", "half").hang(),
    ));
    let ralph = Arc::new(
        Ralph::builder()
            .workspace(dir.path())
            .agent(agent.clone())
            .store(store)
            .build_concurrency(3)
            .stage_timeout(Duration::from_secs(60))
            .build()
            .unwrap(),
    );
    let running = tokio::spawn({
        let ralph = ralph.clone();
        async move { ralph.construct("spec.md").await }
    });
    for _ in 0..500 {
        if agent.requests().len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if running.is_finished() {
        panic!("the run ended early: {:?}", running.await);
    }
    assert_eq!(agent.requests().len(), 3, "three tasks in flight");
    assert_eq!(ralph.tasks_in_flight().len(), 3);

    ralph.stop_token().stop();
    let outcome = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("the stop is prompt")
        .unwrap()
        .unwrap();

    assert_eq!(outcome, Outcome::Interrupted);
    assert!(ralph.tasks_in_flight().is_empty());
    assert_eq!(
        git_out(dir.path(), &["worktree", "list"]).lines().count(),
        1
    );
    assert_eq!(
        git_out(dir.path(), &["branch", "--list", "ralph-task/*"]),
        ""
    );
    assert!(
        !dir.path().join("partial.txt").exists(),
        "nothing was merged"
    );
    let board = ralph.board().await.unwrap();
    assert!(
        board.tasks().all(|t| t.attempts == 0),
        "no attempt was counted"
    );
}

#[tokio::test]
async fn gates_run_in_the_tasks_own_work_tree() {
    let dir = repo();
    let store = MemoryStore::new();
    let changes: Vec<Change> = (1..=2)
        .map(|i| {
            Change::Task(Task::new(format!("t-{i}"), format!("Task {i}")).with_acceptance("ok"))
        })
        .chain([seeded()])
        .collect();
    store.persist(&changes).await.expect("the board");
    // t-1 writes built.txt and is merged while t-2 still runs; t-2 writes nothing, so its
    // gate fails in its own work tree (made before the merge), though the workspace has
    // the file by then. Its next attempt starts from the merged work and passes.
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Build, "t-1", writes("built.txt", "built\n", 0))
            .on(
                Role::Build,
                "t-2",
                Script::new()
                    .delay(Duration::from_millis(500))
                    .answer("Done.\n<TASK_DONE>"),
            )
            .on(
                Role::Build,
                "t-2",
                Script::new().answer("Done.\n<TASK_DONE>"),
            )
            .always(Role::Verify, accept("ok"))
            .always(Role::GapAnalysis, no_gaps()),
    );
    let events = Recorder::default();

    let outcome = Ralph::builder()
        .workspace(dir.path())
        .agent(agent)
        .store(store)
        .gate(ShellGate::new(
            "built",
            "test -f built.txt || { echo 'no built.txt here'; exit 1; }",
        ))
        .observer(events.clone())
        .build_concurrency(2)
        .build()
        .unwrap()
        .construct("spec.md")
        .await
        .unwrap();

    assert!(
        matches!(outcome, Outcome::Complete { accepted: 2, .. }),
        "{outcome:?}"
    );
    let retried: Vec<(TaskId, String)> = events
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::TaskRetry { task, reason, .. } => Some((task, reason)),
            _ => None,
        })
        .collect();
    assert_eq!(retried.len(), 1, "{retried:?}");
    assert_eq!(retried[0].0, TaskId::new("t-2"));
    assert!(retried[0].1.contains("no built.txt here"), "{retried:?}");
}

/// An agent that deletes `victim` before its first run (as an unconfined agent could do to
/// the workspace's lock note from its work tree), then runs `inner`.
struct DeletesOnce {
    victim: std::path::PathBuf,
    done: std::sync::atomic::AtomicBool,
    inner: FakeAgent,
}

#[ralph::async_trait]
impl ralph::Agent for DeletesOnce {
    fn name(&self) -> &str {
        "deletes-once"
    }

    async fn run(
        &self,
        request: ralph::AgentRequest,
    ) -> Result<ralph::AgentRun, ralph::AgentError> {
        if !self.done.swap(true, std::sync::atomic::Ordering::SeqCst) {
            std::fs::remove_file(&self.victim).expect("the lock note to delete");
        }
        self.inner.run(request).await
    }
}

/// Built in work trees, a task's retry starts with the lock's note put back when an
/// attempt deleted it: the retry hangs, so only the check before it can have.
#[tokio::test]
async fn a_lock_note_deleted_in_a_work_tree_is_back_before_the_retry() {
    let dir = repo();
    let store = MemoryStore::new();
    let task = Change::Task(Task::new("t-1", "Task 1").with_acceptance("ok"));
    store.persist(&[task, seeded()]).await.expect("the board");
    let agent = DeletesOnce {
        victim: dir.path().join(".ralph/ralph.lock"),
        done: std::sync::atomic::AtomicBool::new(false),
        inner: FakeAgent::new()
            .on(Role::Build, "t-1", Script::new().answer("Not yet."))
            .on(Role::Build, "t-1", Script::new().hang()),
    };
    let events = Recorder::default();
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(agent)
        .store(store)
        .observer(events.clone())
        .build_concurrency(2)
        .build()
        .unwrap();
    let stop = ralph.stop_token();
    let noticed = || events.warned("deleted or replaced");
    let look = crate::support::lock_note_back(dir.path(), noticed, &stop);
    let (outcome, back) = tokio::join!(ralph.construct("spec.md"), look);
    assert!(back, "the note is back before the retry");
    assert_eq!(outcome.unwrap(), Outcome::Interrupted);
}
