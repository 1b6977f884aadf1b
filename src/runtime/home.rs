//! The user's branch: recorded when a run starts, checked after every agent run, and put
//! back when an agent moved it.
//!
//! ralph's work lands on the branch the user had checked out when the run started (in the
//! construct loop, one commit per task; in build mode, one per spec). An agent runs with
//! the repository at hand and can switch branch, reset, or rewrite what ralph committed;
//! without a check the run would report work done that never reached the user's branch, and
//! could leave the user on the agent's branch. After every agent run the branch is checked:
//! still checked out, and still holding the newest commit ralph knows on it (commits on top,
//! the agent's own or the user's, are fine). When not, ralph puts it back and the attempt
//! fails with what happened as its retry feedback.

use std::path::Path;

use crate::git::{Git, GitError};

/// The user's branch as ralph last saw it.
#[derive(Clone, Debug)]
pub(crate) struct Home {
    git: Git,
    /// The branch checked out when the run started; `None` for a detached HEAD.
    branch: Option<String>,
    /// The newest commit ralph knows on it: the start, then each commit ralph made or
    /// merged, or found on top.
    head: String,
    /// ralph's own paths (its state, its logs), which putting the branch back leaves alone.
    kept_out: Vec<String>,
}

impl Home {
    /// The branch checked out in `workspace` now; `None` outside a git repository or before
    /// its first commit (ralph then commits nothing). `kept_out` are ralph's own paths,
    /// relative to the workspace (which may be a folder inside the repository).
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails.
    pub(crate) async fn record(
        workspace: &Path,
        kept_out: Vec<String>,
    ) -> Result<Option<Home>, GitError> {
        let git = Git::new(workspace);
        if !git.is_repo().await {
            return Ok(None);
        }
        let Some(head) = git.head().await? else {
            return Ok(None);
        };
        let prefix = git.prefix().await?;
        let kept_out = kept_out
            .into_iter()
            .map(|path| format!("{prefix}{path}"))
            .collect();
        Ok(Some(Home {
            branch: git.current_branch().await?,
            head,
            git,
            kept_out,
        }))
    }

    /// `main`, or `the detached HEAD`.
    pub(crate) fn name(&self) -> String {
        match &self.branch {
            Some(branch) => format!("branch {branch}"),
            None => "the detached HEAD".to_owned(),
        }
    }

    /// The newest commit ralph knows on the branch.
    pub(crate) fn head(&self) -> &str {
        &self.head
    }

    /// Git in the user's work tree.
    pub(crate) fn git(&self) -> &Git {
        &self.git
    }

    /// ralph's own paths, relative to the top of the work tree.
    pub(crate) fn kept_out(&self) -> Vec<&str> {
        self.kept_out.iter().map(String::as_str).collect()
    }

    /// ralph moved the branch itself (its commit, a merge) to `head`.
    pub(crate) fn advanced(&mut self, head: String) {
        self.head = head;
    }

    /// Whether `commit` is on the branch (the newest commit ralph knows, or before it).
    ///
    /// # Errors
    ///
    /// [`GitError`] when git cannot run.
    pub(crate) async fn holds(&self, commit: &str) -> Result<bool, GitError> {
        self.git.is_ancestor(commit, &self.head).await
    }

    /// Checks that the branch is still checked out and still holds what ralph committed.
    /// `Ok(None)` when it does (commits on top are taken in); otherwise ralph puts it back and
    /// says what the agent did, in words meant for the agent's next attempt.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails, or the branch cannot be put back.
    pub(crate) async fn check(&mut self) -> Result<Option<String>, GitError> {
        let mut moved = Vec::new();
        let branch = self.git.current_branch().await?;
        if branch != self.branch {
            moved.push(match &branch {
                Some(other) => format!("switched to branch {other}"),
                None => "detached HEAD".to_owned(),
            });
            self.switch_back(branch.as_deref()).await?;
        }
        let head = self.git.head().await?;
        match head {
            Some(head) if self.git.is_ancestor(&self.head, &head).await? => self.head = head,
            head => {
                moved.push(format!(
                    "moved {} from {} to {} (a reset, or a rewrite of what ralph committed)",
                    self.name(),
                    short(&self.head),
                    head.as_deref().map_or("nothing", short)
                ));
                self.git.reset_keep(&self.head).await?;
            }
        }
        Ok((!moved.is_empty()).then(|| {
            format!(
                "The agent {}. ralph commits each task's work on {} itself and put it back: \
                 stay on the checked-out branch, and do not create branches, reset, or rewrite \
                 commits.",
                moved.join(" and "),
                self.name()
            )
        }))
    }

    /// Checks the user's branch out again; what the agent left uncommitted on the other
    /// branch is kept in a stash entry first, so the switch cannot fail on it or lose it.
    async fn switch_back(&self, from: Option<&str>) -> Result<(), GitError> {
        let left: Vec<String> = self
            .git
            .changed_paths(&self.kept_out())
            .await?
            .into_iter()
            .map(|(path, _)| path)
            .collect();
        let place = from.map_or_else(|| "a detached HEAD".to_owned(), |b| format!("branch {b}"));
        self.git
            .stash_paths(&format!("ralph: what an agent left on {place}"), &left)
            .await?;
        match &self.branch {
            Some(branch) => self.git.switch(branch).await,
            None => self.git.detach(&self.head).await,
        }
    }
}

/// The first 12 hex digits of a commit.
fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}
