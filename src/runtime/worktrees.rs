//! The git work trees of tasks built at once (`build_concurrency`): one per task in flight,
//! at `.ralph/worktrees/<task>` on branch `ralph-task/<task>`.
//!
//! A work tree exists exactly while its task is in flight, so the folder is also the record
//! of what was in flight: a run killed with SIGKILL leaves its work trees behind, and the
//! next run of any mode removes them (and their branches) when it takes the workspace's
//! lock, before anything else ([`remove_leftovers`]). Their tasks were never marked done, so
//! they are simply built again. Processes started in a work tree carry the workspace's
//! owner tag ([`process::owner_of`](crate::process::owner_of)), so the lock's sweep has
//! already killed what they left running.

use std::path::{Path, PathBuf};

use crate::git::{Git, GitError};
use crate::model::TaskId;
use crate::process::WORKTREES;

/// The prefix of the branches of task work trees.
/// Not `ralph/`: that is where threads keep their branches.
pub(crate) const BRANCH_PREFIX: &str = "ralph-task/";

/// `.ralph/worktrees` of `workspace`.
pub(crate) fn dir(workspace: &Path) -> PathBuf {
    WORKTREES
        .iter()
        .fold(workspace.to_path_buf(), |p, c| p.join(c))
}

/// Where `task`'s work tree goes.
pub(crate) fn path(workspace: &Path, task: &TaskId) -> PathBuf {
    dir(workspace).join(task.as_str())
}

/// `task`'s branch.
pub(crate) fn branch(task: &TaskId) -> String {
    format!("{BRANCH_PREFIX}{task}")
}

/// The mark that keeps `task`'s work tree while its agent's question waits for an answer.
fn kept_mark(workspace: &Path, task: &str) -> PathBuf {
    dir(workspace).join(format!("{task}.asked"))
}

/// Keeps `task`'s work tree and branch, as its attempt left them, while its agent's
/// question waits for a person's answer: no run removes them as leftovers, and the next
/// attempt of the task goes on in them ([`take_kept`]).
///
/// # Errors
///
/// [`GitError::Io`] naming the mark when it cannot be written.
pub(crate) fn keep_for_answer(workspace: &Path, task: &TaskId) -> Result<(), GitError> {
    let mark = kept_mark(workspace, task.as_str());
    crate::files::atomic::replace(&mark, b"").map_err(|source| GitError::Io { path: mark, source })
}

/// `task`'s work tree kept for its next attempt ([`keep_for_answer`]), no longer marked
/// kept; `None` when there is none.
pub(crate) fn take_kept(workspace: &Path, task: &TaskId) -> Option<PathBuf> {
    let mark = kept_mark(workspace, task.as_str());
    let tree = path(workspace, task);
    if !(mark.exists() && tree.is_dir()) {
        return None;
    }
    // A mark left behind would keep a tree no attempt uses: it goes first.
    std::fs::remove_file(&mark).ok()?;
    Some(tree)
}

/// The tasks whose work trees exist: in flight now, or left by a killed run. A work tree
/// kept while its task's question waits ([`keep_for_answer`]) is neither.
pub(crate) fn in_flight(workspace: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir(workspace)) else {
        return Vec::new();
    };
    let mut tasks: Vec<String> = entries
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|task| !kept_mark(workspace, task).exists())
        .collect();
    tasks.sort();
    tasks
}

/// Git's record of work trees (`.git/worktrees/`) is not safe to change from two git
/// processes at once: a `git worktree list` or `prune` that runs while an `add` is half-way
/// fails ("failed to read .git/worktrees/t-1/commondir") or forgets the new work tree. Every
/// change ralph makes to it holds this lock.
static REGISTRY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Adds `task`'s work tree, on its branch at `commit`, after removing whatever an earlier
/// attempt left.
///
/// # Errors
///
/// [`GitError`] when git fails.
pub(crate) async fn add(
    git: &Git,
    workspace: &Path,
    task: &TaskId,
    commit: &str,
) -> Result<PathBuf, GitError> {
    let _registry = REGISTRY.lock().await;
    remove_unlocked(git, workspace, task).await?;
    let path = make_room(workspace, task)?;
    git.add_worktree(&path, &branch(task), commit).await?;
    Ok(path)
}

/// Adds `task`'s work tree on its existing branch, as an earlier run kept it.
///
/// # Errors
///
/// [`GitError`] when git fails (e.g. the branch is gone).
pub(crate) async fn check_out(
    git: &Git,
    workspace: &Path,
    task: &TaskId,
) -> Result<PathBuf, GitError> {
    let _registry = REGISTRY.lock().await;
    remove_tree(git, workspace, task).await?;
    let path = make_room(workspace, task)?;
    git.add_worktree_on(&path, &branch(task)).await?;
    Ok(path)
}

/// The folder of work trees, made if missing; the path of `task`'s.
fn make_room(workspace: &Path, task: &TaskId) -> Result<PathBuf, GitError> {
    let dir = dir(workspace);
    crate::files::own::create_dir_all(&dir).map_err(|source| GitError::Spawn {
        command: "worktree add".into(),
        dir,
        source,
    })?;
    Ok(path(workspace, task))
}

/// Removes `task`'s work tree and branch.
///
/// # Errors
///
/// [`GitError`] when git fails.
pub(crate) async fn remove(git: &Git, workspace: &Path, task: &TaskId) -> Result<(), GitError> {
    let _registry = REGISTRY.lock().await;
    remove_unlocked(git, workspace, task).await
}

/// Removes `task`'s work tree but keeps its branch, which holds work ralph could not merge.
///
/// # Errors
///
/// [`GitError`] when git fails.
pub(crate) async fn remove_keeping_branch(
    git: &Git,
    workspace: &Path,
    task: &TaskId,
) -> Result<(), GitError> {
    let _registry = REGISTRY.lock().await;
    remove_tree(git, workspace, task).await
}

async fn remove_tree(git: &Git, workspace: &Path, task: &TaskId) -> Result<(), GitError> {
    let path = path(workspace, task);
    if path.exists() {
        // Fails when git does not know the folder (a crash between its creation and git's
        // record); the folder goes below either way.
        let _ = git.remove_worktree(&path).await;
        let _ = std::fs::remove_dir_all(&path);
    }
    // Forgets work trees whose folders are gone.
    git.worktrees().await.map(drop)
}

async fn remove_unlocked(git: &Git, workspace: &Path, task: &TaskId) -> Result<(), GitError> {
    remove_tree(git, workspace, task).await?;
    let branch = branch(task);
    if git.branch_exists(&branch).await? {
        git.delete_branch(&branch).await?;
    }
    Ok(())
}

/// Removes the work trees and branches a killed run left, and says which tasks they were
/// for. Does nothing outside a git repository.
///
/// # Errors
///
/// [`GitError`] when git fails.
pub(crate) async fn remove_leftovers(workspace: &Path) -> Result<Vec<String>, GitError> {
    let tasks = in_flight(workspace);
    let git = Git::new(workspace);
    if tasks.is_empty() || !git.is_repo().await {
        return Ok(Vec::new());
    }
    for task in &tasks {
        remove(&git, workspace, &TaskId::new(task.as_str())).await?;
    }
    Ok(tasks)
}
