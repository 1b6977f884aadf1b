//! The changes a person makes to the stored board between runs (seed 000's task and issue
//! commands): add an issue or a task, mark a task done, accept the done tasks, reject one,
//! unblock one, prioritize again; and the repair of a state file that holds lines ralph did
//! not write.
//!
//! Each takes the workspace's lock first, so it is refused with [`Error::Busy`] while a run
//! (of any mode) or another change holds it, and is persisted through the [`Store`] before it
//! returns.
//!
//! [`Store`]: crate::Store

use crate::event::Event;
use crate::model::rules;
use crate::model::{
    AcceptedBy, Board, Change, Issue, IssueId, IssueStatus, Priority, Task, TaskId, TaskStatus,
    Unblocked,
};
use crate::outcome::BlockedItem;
use crate::prioritize::PriorityReport;
use crate::ralph::Ralph;
use crate::runtime::error::{EditError, Error};
use crate::runtime::workspace::RunLock;
use crate::store::Repair;

impl Ralph {
    /// Adds an issue for INVESTIGATE, with the next free id (`i-<n>`). Returns its id.
    ///
    /// # Errors
    ///
    /// [`EditError::Invalid`] when `text` is empty or only whitespace, or holds a control
    /// character other than a line break (ESC, a tab); [`Error::Busy`] while
    /// another ralph holds the workspace; [`Error::Store`] when the board cannot be loaded
    /// or saved.
    pub async fn add_issue(&self, text: impl Into<String>) -> Result<IssueId, Error> {
        self.add_issue_with_priority(text, None).await
    }

    /// As [`add_issue`](Self::add_issue), with an explicit priority that the tasks made from
    /// the issue inherit (`ralph issue add --priority high`).
    ///
    /// # Errors
    ///
    /// As [`add_issue`](Self::add_issue).
    pub async fn add_issue_with_priority(
        &self,
        text: impl Into<String>,
        priority: Option<Priority>,
    ) -> Result<IssueId, Error> {
        let text = text.into();
        let problem = match text.trim().is_empty() {
            true => Some("is empty: say what is wrong or missing".to_owned()),
            false => rules::control_problem(&text, true),
        };
        if let Some(reason) = problem {
            return Err(Error::Edit(EditError::Invalid {
                edit: "issue add",
                field: "text".into(),
                reason,
            }));
        }
        self.edit(|board| {
            let id = board.next_issue_id();
            let mut issue = Issue::new(id.clone(), text).with_origin("user");
            issue.priority = priority;
            Ok((
                id,
                vec![Change::Issue(issue), Change::Run(board.run.clone())],
            ))
        })
        .await
    }

    /// Adds a task as given, once it is checked. Returns its id.
    ///
    /// The checks, each refused with [`EditError::Invalid`] naming the field:
    ///
    /// - `id`: ASCII letters, digits, `-`, `_` and `.`, at most 64 bytes, not starting with
    ///   `.` or `-`, with no `..`, not ending with `.` or `.lock`: an id names a git branch
    ///   (`ralph-task/<id>`) and a folder (`.ralph/worktrees/<id>`), so it also differs from
    ///   every id on the board in more than ASCII case (`T-1` beside `t-1` would be one
    ///   branch on a case-insensitive file system);
    /// - `name`: one line, not empty, no control character (ESC, a tab);
    /// - `accept` ([`Task::acceptance`]): not empty, since it is what a verifier checks the
    ///   work against (there is no default); it and `notes` hold no control character but
    ///   line breaks;
    /// - `deps[i]`: a task on the board, not decomposed (name its subtasks), and no cycle
    ///   (the task itself, or a task that depends on it in turn).
    ///
    /// ```
    /// use ralph::{EditError, Error, FakeAgent, MemoryStore, Ralph, model::Task};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let dir = tempfile::tempdir()?;
    /// let ralph = Ralph::builder()
    ///     .workspace(dir.path())
    ///     .agent(FakeAgent::new())
    ///     .store(MemoryStore::new())
    ///     .build()?;
    /// let task = Task::new("t-1", "Write hello.txt").with_acceptance("hello.txt says hello");
    /// let err = ralph.add_task(task.clone().with_deps(["t-99"])).await.unwrap_err();
    /// assert_eq!(err.to_string(), "task add: deps[0] names t-99, which is not on the board");
    /// assert!(matches!(err, Error::Edit(EditError::Invalid { .. })));
    /// assert_eq!(ralph.add_task(task).await?, "t-1");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`EditError::Invalid`] as above; [`EditError::DuplicateTask`] when a task with its id
    /// exists (replacing it could undo an acceptance); otherwise as
    /// [`add_issue`](Self::add_issue).
    pub async fn add_task(&self, task: Task) -> Result<TaskId, Error> {
        self.edit(|board| {
            if board.tasks.contains_key(&task.id) {
                return Err(Error::Edit(EditError::DuplicateTask(task.id)));
            }
            if let Some((field, reason)) = rules::new_task_problem(board, &task) {
                return Err(Error::Edit(EditError::Invalid {
                    edit: "task add",
                    field,
                    reason,
                }));
            }
            Ok((task.id.clone(), vec![Change::Task(task)]))
        })
        .await
    }

    /// Marks a pending task done, as if its gates had passed: VERIFY checks it next.
    ///
    /// # Errors
    ///
    /// [`EditError::UnknownTask`], [`EditError::TaskState`] when it is not pending; otherwise as
    /// [`add_issue`](Self::add_issue).
    pub async fn mark_done(&self, id: &TaskId) -> Result<(), Error> {
        self.change_task(
            id,
            TaskStatus::Pending,
            "only a pending task can be marked done",
            |t| {
                t.status = TaskStatus::Done;
            },
        )
        .await
    }

    /// Accepts every done task in a verifier's place, recorded as a person's acceptance
    /// (a complete outcome lists them in `people`). Returns their ids. A gap analysis must
    /// still answer before the spec is complete, so the next run runs one.
    ///
    /// # Errors
    ///
    /// As [`add_issue`](Self::add_issue).
    pub async fn accept_done(&self) -> Result<Vec<TaskId>, Error> {
        self.edit(|board| {
            let done: Vec<Task> = board
                .tasks
                .values()
                .filter(|t| t.status == TaskStatus::Done)
                .cloned()
                .collect();
            let ids = done.iter().map(|t| t.id.clone()).collect();
            Ok((ids, accepted_by_person(board, done)))
        })
        .await
    }

    /// Accepts one done task in a verifier's place (seed 000's `ralph task accept <id>`),
    /// recorded as a person's acceptance as [`accept_done`](Self::accept_done) records it.
    ///
    /// # Errors
    ///
    /// [`EditError::UnknownTask`], [`EditError::TaskState`] when it is not done; otherwise as
    /// [`add_issue`](Self::add_issue).
    pub async fn accept(&self, id: &TaskId) -> Result<(), Error> {
        self.edit(|board| {
            let task = task_in(
                board,
                id,
                TaskStatus::Done,
                "only a done task can be accepted",
            )?;
            Ok(((), accepted_by_person(board, vec![task])))
        })
        .await
    }

    /// Rejects a done task: pending again with a tombstone and a fresh retry budget, and
    /// `reason` in its next prompt.
    ///
    /// # Errors
    ///
    /// [`EditError::UnknownTask`], [`EditError::TaskState`] when it is not done; otherwise as
    /// [`add_issue`](Self::add_issue).
    pub async fn reject(&self, id: &TaskId, reason: &str) -> Result<(), Error> {
        self.change_task(
            id,
            TaskStatus::Done,
            "only a done task can be rejected",
            |t| {
                t.reject("a person", reason);
            },
        )
        .await
    }

    /// Puts a blocked task back to pending with a fresh retry budget, after whatever blocked
    /// it (a broken gate, a missing credential) was fixed. A task blocked because it can
    /// never be built as it stands is made buildable: its dependencies that can never be
    /// met (tasks not on the board, tasks that depend on it in turn) are dropped, and an id
    /// that cannot name a git branch or folder is replaced by a new one (see
    /// [`Unblocked`]). A task killed before it was blocked (its decomposer failed) goes to
    /// DECOMPOSE again.
    ///
    /// # Errors
    ///
    /// [`EditError::UnknownTask`], [`EditError::TaskState`] when it is not blocked; otherwise as
    /// [`add_issue`](Self::add_issue).
    pub async fn unblock(&self, id: &TaskId) -> Result<Unblocked, Error> {
        self.edit(|board| {
            let task = task_in(
                board,
                id,
                TaskStatus::Blocked,
                "only a blocked task can be unblocked",
            )?;
            Ok(unblocked(board, task))
        })
        .await
    }

    /// Opens a blocked issue again with a fresh retry budget, after whatever blocked it
    /// was fixed (an agent that was down or answered prose, for its investigation or its
    /// decomposition). Its attempts keep counting: the next attempt's number and log name
    /// follow the last. `ralph issue unblock ID` is this.
    ///
    /// # Errors
    ///
    /// [`EditError::UnknownIssue`], [`EditError::IssueState`] when it is not blocked; otherwise as
    /// [`add_issue`](Self::add_issue).
    pub async fn unblock_issue(&self, id: &IssueId) -> Result<(), Error> {
        self.edit(|board| {
            let mut issue = board
                .issues
                .get(id)
                .cloned()
                .ok_or_else(|| Error::Edit(EditError::UnknownIssue(id.clone())))?;
            if issue.status != IssueStatus::Blocked {
                return Err(Error::Edit(EditError::IssueState {
                    issue: id.clone(),
                    status: issue.status,
                    wanted: "only a blocked issue can be unblocked",
                }));
            }
            issue.unblock();
            Ok(((), vec![Change::Issue(issue)]))
        })
        .await
    }

    /// Runs the prioritizer over the pending tasks again and saves their priorities and
    /// order, as the construct loop does whenever tasks are added.
    ///
    /// A dependency on a decomposed task is first rewired to its subtasks, and a task that
    /// could never be built as the board stands (on a dependency cycle, waiting on a task
    /// that is not on the board, …) is blocked with the reason, as `ralph construct` does
    /// when it starts, with the same [`Event::Warning`]s to the observers; then the rest is
    /// prioritized. The report's [`blocked`](PriorityReport::blocked) names the blocked
    /// tasks (`ralph task unblock ID` after the fix drops the dependencies that still cannot
    /// be met).
    ///
    /// # Errors
    ///
    /// [`Error::Prioritize`] when the prioritizer refuses the tasks left; otherwise as
    /// [`add_issue`](Self::add_issue).
    pub async fn prioritize(&self) -> Result<PriorityReport, Error> {
        let prioritizer = self.inner.prioritizer.clone();
        let (report, warnings) = self
            .edit(|board| {
                // Blocked tasks are not buildable, so the prioritizer never sees them.
                let (mut changes, warnings) = crate::construct::unsound_blocked(board);
                let blocked = blocked_items(&changes);
                let spec = spec_text(&self.inner.workspace, board);
                let event = crate::construct::prioritize_changes(
                    board,
                    &spec,
                    &*prioritizer,
                    &mut changes,
                    crate::construct::Priorities::Assign,
                )?;
                let mut report = match event {
                    Event::Prioritized { report, .. } => report,
                    _ => PriorityReport::default(),
                };
                report.blocked = blocked;
                Ok(((report, warnings), changes))
            })
            .await?;
        // Said once the changes they describe are saved, as a run says them.
        for warning in &warnings {
            for observer in &self.inner.observers {
                observer.on_event(warning);
            }
        }
        Ok(report)
    }

    /// Repairs a state file that holds lines ralph did not write (a load refused it with
    /// [`StoreError::NotWritten`](crate::store::StoreError::NotWritten), naming the line):
    /// rolls it back to the last record ralph wrote, keeping what it removes in a copy
    /// beside it (`plan.jsonl.removed-<UTC time>`), or, with `adopt`, accepts the lines as
    /// the person's own. Returns what was done, `None` when every line verifies. `ralph
    /// repair [--adopt]` is this.
    ///
    /// ```
    /// use ralph::{FakeAgent, JsonlStore, Ralph, Store, model::{Change, Task}, store::Repair};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let dir = tempfile::tempdir()?;
    /// let plan = dir.path().join(".ralph/plan.jsonl");
    /// JsonlStore::open(&plan)?.persist(&[Change::Task(Task::new("t-1", "Write hello.txt"))]).await?;
    /// // An agent appends a record of its own.
    /// let forged = r#"{"t":"task","id":"t-1","name":"Write hello.txt","s":"a"}"#;
    /// std::fs::write(&plan, std::fs::read_to_string(&plan)? + forged + "\n")?;
    ///
    /// let ralph = Ralph::builder()
    ///     .workspace(dir.path())
    ///     .agent(FakeAgent::new())
    ///     .store(JsonlStore::open(&plan)?)
    ///     .build()?;
    /// assert!(ralph.board().await.is_err(), "refused, naming plan.jsonl:2");
    /// let Some(Repair::RolledBack { lines, copy, .. }) = ralph.repair(false).await? else {
    ///     panic!("rolled back")
    /// };
    /// assert_eq!((lines, std::fs::read_to_string(copy)?), (1, format!("{forged}\n")));
    /// assert!(ralph.board().await?.task("t-1").unwrap().is_buildable(), "as ralph left it");
    /// assert_eq!(ralph.repair(false).await?, None, "nothing left to repair");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Busy`] while another ralph holds the workspace; [`Error::Store`] when the
    /// file cannot be read or written, or (adopting) a line is not a plan record.
    pub async fn repair(&self, adopt: bool) -> Result<Option<Repair>, Error> {
        let _lock = RunLock::take(&self.inner.workspace).await?;
        Ok(self.inner.store.repair(adopt).await?)
    }

    /// Changes task `id`, which must have status `from`, with `change`.
    async fn change_task(
        &self,
        id: &TaskId,
        from: TaskStatus,
        wanted: &'static str,
        change: impl FnOnce(&mut Task),
    ) -> Result<(), Error> {
        self.edit(|board| {
            let mut task = task_in(board, id, from, wanted)?;
            change(&mut task);
            Ok(((), vec![Change::Task(task)]))
        })
        .await
    }

    /// Under the workspace's lock: loads the board, lets `decide` work out the changes, and
    /// persists them.
    async fn edit<T>(
        &self,
        decide: impl FnOnce(&mut Board) -> Result<(T, Vec<Change>), Error>,
    ) -> Result<T, Error> {
        let _lock = RunLock::take(&self.inner.workspace).await?;
        let mut board = self.inner.store.load().await?;
        let (result, changes) = decide(&mut board)?;
        if !changes.is_empty() {
            self.inner.store.persist(&changes).await?;
        }
        Ok(result)
    }
}

/// The text of `board`'s spec on record, as the prompts carry it; empty without one (or
/// when it cannot be read: the order then rests on the tasks alone).
fn spec_text(workspace: &std::path::Path, board: &Board) -> String {
    board
        .run
        .spec
        .as_deref()
        .and_then(|rel| crate::runtime::spec::for_prompt(workspace, rel).ok())
        .unwrap_or_default()
}

/// The tasks `changes` block, with their reasons.
fn blocked_items(changes: &[Change]) -> Vec<BlockedItem> {
    changes
        .iter()
        .filter_map(|c| match c {
            Change::Task(t) if t.status == TaskStatus::Blocked => Some(BlockedItem::new(
                t.id.as_str(),
                t.blocked_reason.clone().unwrap_or_default(),
            )),
            _ => None,
        })
        .collect()
}

/// The changes that accept `done` tasks as a person's acceptance. A spec check answered
/// before them no longer stands for the board, so it is cleared: the next run asks again.
fn accepted_by_person(board: &Board, done: Vec<Task>) -> Vec<Change> {
    let mut changes: Vec<Change> = done
        .into_iter()
        .map(|t| {
            let mut task = t.with_status(TaskStatus::Accepted);
            task.accepted_by = Some(AcceptedBy::Person);
            Change::Task(task)
        })
        .collect();
    if !changes.is_empty() && board.run.spec_check.is_some() {
        let mut run = board.run.clone();
        run.spec_check = None;
        changes.push(Change::Run(run));
    }
    changes
}

/// The changes that make blocked `task` buildable on `board`, and what they did: pending
/// with a fresh retry budget, its dependencies on decomposed tasks rewired to their
/// subtasks, without the dependencies that can never be met, and under a
/// new id when its own cannot name a git branch or folder (the old record kept as replaced
/// by it, and its dependents rewired).
fn unblocked(board: &mut Board, mut task: Task) -> (Unblocked, Vec<Change>) {
    task.unblock();
    if let Some(deps) = rules::rewired_deps(board, &task) {
        // A decomposed task never finishes: its subtasks do.
        task.deps = deps;
    }
    let dropped = rules::unmeetable_deps(board, &task);
    task.deps.retain(|d| !dropped.contains(d));
    if rules::id_problem(task.id.as_str()).is_none() {
        let id = task.id.clone();
        return (Unblocked::new(id, dropped), vec![Change::Task(task)]);
    }
    let old = task.id.clone();
    let new = board.next_task_id();
    let mut changes = Vec::new();
    for dependent in board.tasks.values().filter(|t| t.deps.contains(&old)) {
        let mut rewired = dependent.clone();
        for dep in &mut rewired.deps {
            if *dep == old {
                *dep = new.clone();
            }
        }
        changes.push(Change::Task(rewired));
    }
    let mut replaced = task.clone();
    replaced.status = TaskStatus::Decomposed;
    task.id = new.clone();
    task.parent = Some(old);
    changes.push(Change::Task(task));
    changes.push(Change::Task(replaced));
    changes.push(Change::Run(board.run.clone()));
    (Unblocked::new(new, dropped), changes)
}

/// Task `id` of `board`, which a person's edit wants in status `from` (`wanted` says so).
fn task_in(
    board: &Board,
    id: &TaskId,
    from: TaskStatus,
    wanted: &'static str,
) -> Result<Task, Error> {
    let task = board
        .tasks
        .get(id)
        .cloned()
        .ok_or_else(|| Error::Edit(EditError::UnknownTask(id.clone())))?;
    if task.status != from {
        return Err(Error::Edit(EditError::TaskState {
            task: id.clone(),
            status: task.status,
            wanted,
        }));
    }
    Ok(task)
}
