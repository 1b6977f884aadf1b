//! Real git, run as a child process: what spec commits and the git safety of threads need
//! (baseline, managed branch, diff from the baseline, reset to it).
//!
//! Every call runs `git -C <dir> …` with `LC_ALL=C` and no terminal prompt, and a failure is
//! a [`GitError`] naming the command and carrying git's own message. Nothing here touches the
//! user's configuration: a missing `user.name`/`user.email` is supplied for ralph's commits
//! only, on the command line.
//!
//! # Example
//!
//! ```
//! use ralph_loop_core::git::Git;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let git = Git::new(dir.path());
//! git.init().await?;
//! std::fs::write(dir.path().join("a.txt"), "a\n")?;
//! let first = git.commit_all("Add a", &[]).await?.expect("something to commit");
//! let baseline = git.baseline().await?;
//! assert_eq!(baseline.commit_sha, first);
//!
//! std::fs::write(dir.path().join("b.txt"), "b\n")?;
//! assert!(git.diff_from(&baseline.commit_sha, &[]).await?.contains("+b"));
//! git.reset_to(&baseline, &[]).await?;
//! assert!(!dir.path().join("b.txt").exists());
//! # Ok(())
//! # }
//! ```

mod refusal;

use crate::process::{Captured, Exit, ProcessSpec, Sandbox};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

/// The identity ralph commits with when the repository has none configured.
const FALLBACK_NAME: &str = "ralph";
/// See [`FALLBACK_NAME`].
const FALLBACK_EMAIL: &str = "ralph@localhost";

/// A git command failed or could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GitError {
    /// `git` could not be started (not installed, not on `PATH`).
    #[error("could not run `git {command}` in {dir}")]
    Spawn {
        /// The arguments, joined by spaces.
        command: String,
        /// The repository directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `git` ran and failed.
    #[error("`git {command}` failed in {dir} ({status}): {stderr}")]
    Failed {
        /// The arguments, joined by spaces.
        command: String,
        /// The repository directory.
        dir: PathBuf,
        /// How it exited.
        status: String,
        /// What git said on stderr, trimmed.
        stderr: String,
    },
    /// git refused a commit of ralph's: a hook of the repository failed (`pre-commit`,
    /// `commit-msg`), or git could not sign it (`commit.gpgsign` with no usable key). The
    /// index is as it was before ralph staged the commit's paths, and the work is in the
    /// work tree, uncommitted.
    #[error(
        "{}",
        refusal::describe(.subject, .hook.as_deref(), *.sandboxed, .changed_by_hook, .stderr)
    )]
    #[non_exhaustive]
    CommitRefused {
        /// The commit's subject (`t-1: Write work.txt`).
        subject: String,
        /// The hook that refused, in the hooks folder (`core.hooksPath` followed), from the
        /// directory git ran in (`.git/hooks/pre-commit`) when it is inside it; `None` when
        /// the commit could not be signed.
        hook: Option<PathBuf>,
        /// Whether git could not sign the commit (`commit.gpgsign`, `user.signingkey`).
        signing: bool,
        /// Whether the commit ran in the sandbox of the repository's hooks, where gpg
        /// cannot reach `~/.gnupg` (see `docs/sandbox.md`).
        sandboxed: bool,
        /// The commit's paths (from the top of the work tree) that a hook changed before
        /// it failed: a formatter's rewrite, left in the work tree.
        changed_by_hook: Vec<String>,
        /// What git and the hook said on stderr, head and tail when long.
        stderr: String,
    },
    /// A file ralph keeps beside its git work could not be read or written.
    #[error("i/o error on {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The directory is in a git repository (a `.git` in it or above it), but `git`
    /// cannot run: ralph would commit nothing.
    #[error(
        "{dir} is in a git repository ({git_dir}), but `git` cannot run: {source}; install git or put it on PATH, so that ralph commits each task's work"
    )]
    Unavailable {
        /// The directory git was to run in.
        dir: PathBuf,
        /// The `.git` found.
        git_dir: PathBuf,
        /// Why git cannot run.
        #[source]
        source: std::io::Error,
    },
    /// The directory is not inside a git work tree.
    #[error("{0} is not a git repository (run `git init` there first)")]
    NotARepo(PathBuf),
    /// The repository has no commit yet, so there is nothing to return to.
    #[error("{0} has no commit yet; commit something before ralph works there")]
    NoCommit(PathBuf),
}

/// How a [`Git::rebase`] ended.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rebased {
    /// The commits now sit on top of the new base.
    Clean,
    /// They conflict with it on these paths; the branch is as it was.
    Conflict(Vec<String>),
}

/// How a [`Git::fast_forward`] ended.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Forwarded {
    /// The branch moved forward.
    Done,
    /// Files of the work tree would be overwritten; nothing changed.
    Blocked {
        /// The files, as git names them.
        paths: Vec<String>,
        /// Whether they are untracked (else tracked files with local changes).
        untracked: bool,
    },
}

/// Where the work started: the branch (none when HEAD is detached) and the commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Baseline {
    /// The branch checked out when the baseline was captured, if any.
    pub branch: Option<String>,
    /// The full SHA of HEAD then.
    pub commit_sha: String,
    /// RFC 3339 time of the capture.
    pub captured_at: String,
}

/// A git work tree.
#[derive(Clone, Debug)]
pub struct Git {
    dir: PathBuf,
    env: Vec<(String, String)>,
    /// Where the commands that run the repository's hooks run (see [`hooks_in`](Self::hooks_in)).
    hooks: Sandbox,
    /// What does not change during a run, asked of git once per handle (and its clones).
    known: Arc<Facts>,
}

/// Facts a handle learns once: each costs a git process.
#[derive(Debug, Default)]
struct Facts {
    /// The `-c user.name=… -c user.email=…` ralph's commits need.
    identity: OnceLock<Vec<String>>,
    /// `git rev-parse --absolute-git-dir`.
    git_dir: OnceLock<PathBuf>,
    /// The repository's git folders and its hooks folder (see [`HookPlaces`]).
    hook_places: OnceLock<HookPlaces>,
}

/// Where a hook-running command writes, and where its hooks are.
#[derive(Clone, Debug)]
struct HookPlaces {
    /// `--absolute-git-dir` and `--git-common-dir`: what the command writes.
    git_dirs: Vec<PathBuf>,
    /// `--git-path hooks`, which follows `core.hooksPath`.
    hooks: PathBuf,
}

impl HookPlaces {
    /// Whether any hook would run: an executable file in the hooks folder that is not one
    /// of git's `.sample`s. Read at every command: a person may add one during a run.
    fn any_hook(&self) -> bool {
        use std::os::unix::fs::PermissionsExt;
        std::fs::read_dir(&self.hooks).is_ok_and(|entries| {
            entries.flatten().any(|entry| {
                let sample = entry.file_name().to_string_lossy().ends_with(".sample");
                !sample
                    && entry
                        .metadata()
                        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
        })
    }
}

/// The git commands that may run the repository's hooks (`pre-commit`, `post-checkout`,
/// `post-merge`, `pre-rebase`, …): code from the workspace, run in the hooks' sandbox.
const HOOK_COMMANDS: &[&str] = &[
    "commit",
    "merge",
    "rebase",
    "checkout",
    "switch",
    "worktree",
    "cherry-pick",
    "am",
    "pull",
    "push",
];

impl Git {
    /// Git in `dir` (the work tree or any folder inside it).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Git {
            dir: dir.into(),
            env: Vec::new(),
            hooks: Sandbox::unconfined(),
            known: Arc::default(),
        }
    }

    /// Runs the commands that may run the repository's hooks in `sandbox`, with the
    /// repository's git folders writable in it: hooks are code from the workspace. Every
    /// other command (a status, a diff) runs hooks of no kind and runs as ralph does.
    #[must_use]
    pub fn hooks_in(mut self, sandbox: Sandbox) -> Self {
        self.hooks = sandbox;
        self
    }

    /// Sets an environment variable for every git command, e.g. `GIT_CONFIG_GLOBAL` to
    /// isolate ralph's git from the user's configuration.
    #[must_use]
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        // Another environment may mean another configuration.
        self.known = Arc::default();
        self
    }

    /// The directory git runs in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `git init` (with `main` as the first branch).
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails.
    pub async fn init(&self) -> Result<(), GitError> {
        self.run(&["init", "-q", "-b", "main"]).await.map(drop)
    }

    /// Whether the directory is inside a git work tree.
    pub async fn is_repo(&self) -> bool {
        matches!(
            self.run(&["rev-parse", "--is-inside-work-tree"]).await,
            Ok(out) if out.trim() == "true"
        )
    }

    /// Refuses a directory that is in a git repository (a `.git` in it or above it) when
    /// `git` itself cannot be started; `Ok` outside a repository, or when git runs.
    ///
    /// # Errors
    ///
    /// [`GitError::Unavailable`].
    pub async fn refuse_unrunnable(&self) -> Result<(), GitError> {
        let Some(git_dir) = self
            .dir
            .ancestors()
            .map(|d| d.join(".git"))
            .find(|g| g.exists())
        else {
            return Ok(());
        };
        match self.run(&["--version"]).await {
            Err(GitError::Spawn { source, .. }) => Err(GitError::Unavailable {
                dir: self.dir.clone(),
                git_dir,
                source,
            }),
            _ => Ok(()),
        }
    }

    /// The full SHA of HEAD, or `None` in a repository without commits.
    ///
    /// # Errors
    ///
    /// [`GitError::NotARepo`] outside a repository, or when git fails.
    pub async fn head(&self) -> Result<Option<String>, GitError> {
        let out = self
            .run_allowing(&["rev-parse", "-q", "--verify", "HEAD^{commit}"], &[1])
            .await
            .map_err(|e| self.outside_a_repo(e))?;
        Ok(non_empty(out))
    }

    /// The checked-out branch (`None` when HEAD is detached) and HEAD's commit (`None` in
    /// a repository without commits): [`current_branch`](Self::current_branch) and
    /// [`head`](Self::head), with one git process when there is a commit.
    ///
    /// # Errors
    ///
    /// [`GitError::NotARepo`] outside a repository, or when git fails.
    pub async fn position(&self) -> Result<(Option<String>, Option<String>), GitError> {
        // The commit, then (`--symbolic-full-name` applies to what follows it) the name of
        // HEAD: `refs/heads/<branch>`, or `HEAD` when detached.
        let both = self
            .run(&["rev-parse", "HEAD^{commit}", "--symbolic-full-name", "HEAD"])
            .await;
        if let Ok(out) = both {
            let mut lines = out.lines();
            if let (Some(commit), Some(name), None) = (lines.next(), lines.next(), lines.next()) {
                let branch = name.strip_prefix("refs/heads/").map(str::to_owned);
                return Ok((branch, non_empty(commit.to_owned())));
            }
        }
        // No commit yet (or a HEAD git would not name): ask each on its own.
        let head = self.head().await?;
        Ok((self.current_branch().await?, head))
    }

    /// The subject (first line of the message) of HEAD's commit, or `None` in a repository
    /// without commits.
    ///
    /// # Errors
    ///
    /// [`GitError::NotARepo`] outside a repository, or when git fails.
    pub async fn head_subject(&self) -> Result<Option<String>, GitError> {
        if self.head().await?.is_none() {
            return Ok(None);
        }
        let out = self.run(&["log", "-1", "--format=%s", "HEAD"]).await?;
        Ok(non_empty(out))
    }

    /// The newest commit after `since` up to `HEAD` whose subject is `subject`, if any
    /// (`git log since..HEAD`).
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails (e.g. `since` is not a commit here).
    pub async fn commit_with_subject(
        &self,
        since: &str,
        subject: &str,
    ) -> Result<Option<String>, GitError> {
        let range = format!("{since}..HEAD");
        let out = self.run(&["log", "--format=%H %s", &range]).await?;
        Ok(out
            .lines()
            .filter_map(|line| line.split_once(' '))
            .find(|(_, s)| *s == subject)
            .map(|(sha, _)| sha.to_owned()))
    }

    /// Where this directory is inside the work tree: its path from the top, with a
    /// trailing `/` (`sub/dir/`), or empty at the top.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails (e.g. outside a repository).
    pub async fn prefix(&self) -> Result<String, GitError> {
        Ok(self
            .run(&["rev-parse", "--show-prefix"])
            .await?
            .trim()
            .to_owned())
    }

    /// The checked-out branch, or `None` when HEAD is detached.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails.
    pub async fn current_branch(&self) -> Result<Option<String>, GitError> {
        let out = self
            .run_allowing(&["symbolic-ref", "-q", "--short", "HEAD"], &[1])
            .await
            .map_err(|e| self.outside_a_repo(e))?;
        Ok(non_empty(out))
    }

    /// The work tree's changes as `git status --porcelain` lines (untracked files listed
    /// one by one), leaving out paths under `exclude` (e.g. ralph's own `.ralph` folder).
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails.
    pub async fn changes(&self, exclude: &[&str]) -> Result<Vec<String>, GitError> {
        let mut args = vec![
            "status".to_owned(),
            "--porcelain=v1".to_owned(),
            "--untracked-files=all".to_owned(),
            "--".to_owned(),
            ".".to_owned(),
        ];
        args.extend(exclude.iter().map(|p| format!(":(exclude){p}")));
        let out = self.run_owned(&args).await?;
        Ok(out.lines().map(str::to_owned).collect())
    }

    /// `git diff --stat` of the work tree against HEAD, leaving out the `exclude` paths.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails (e.g. a repository without commits).
    pub async fn diff_stat(&self, exclude: &[&str]) -> Result<String, GitError> {
        let mut args: Vec<String> = ["diff", "--stat", "--no-color", "HEAD", "--", "."]
            .map(str::to_owned)
            .to_vec();
        args.extend(exclude.iter().map(|p| format!(":(exclude){p}")));
        self.run_owned(&args).await
    }

    /// Captures the current branch and HEAD commit.
    ///
    /// # Errors
    ///
    /// [`GitError::NoCommit`] in a repository without commits, or when git fails.
    pub async fn baseline(&self) -> Result<Baseline, GitError> {
        let commit_sha = self
            .head()
            .await?
            .ok_or_else(|| GitError::NoCommit(self.dir.clone()))?;
        Ok(Baseline {
            branch: self.current_branch().await?,
            commit_sha,
            captured_at: jiff::Timestamp::now().to_string(),
        })
    }

    /// Whether a local branch of that name exists.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails.
    pub async fn branch_exists(&self, name: &str) -> Result<bool, GitError> {
        let refname = format!("refs/heads/{name}");
        let out = self
            .run_allowing(&["rev-parse", "-q", "--verify", &refname], &[1])
            .await?;
        Ok(!out.trim().is_empty())
    }

    /// Creates branch `name` at `commit` and checks it out; the work tree's uncommitted
    /// changes come along, as with `git switch -c`.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails (e.g. the branch exists).
    pub async fn create_branch(&self, name: &str, commit: &str) -> Result<(), GitError> {
        self.run(&["switch", "-q", "-c", name, commit])
            .await
            .map(drop)
    }

    /// Checks out an existing branch.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails (e.g. local changes would be overwritten).
    pub async fn switch(&self, name: &str) -> Result<(), GitError> {
        self.run(&["switch", "-q", name]).await.map(drop)
    }

    /// Checks out `commit` detached (no branch).
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails (e.g. local changes would be overwritten).
    pub async fn detach(&self, commit: &str) -> Result<(), GitError> {
        self.run(&["switch", "-q", "--detach", commit])
            .await
            .map(drop)
    }

    /// Deletes a local branch, merged or not.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails (e.g. it is checked out).
    pub async fn delete_branch(&self, name: &str) -> Result<(), GitError> {
        self.run(&["branch", "-q", "-D", name]).await.map(drop)
    }

    /// Adds a work tree at `path` on a new branch `branch` at `commit` (a branch of that
    /// name left by an earlier run is reset to `commit`).
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails (e.g. `path` exists and is not empty).
    pub async fn add_worktree(
        &self,
        path: &Path,
        branch: &str,
        commit: &str,
    ) -> Result<(), GitError> {
        let path = path.to_string_lossy();
        self.run(&["worktree", "add", "-q", "-B", branch, &path, commit])
            .await
            .map(drop)
    }

    /// Adds a work tree at `path` on the existing branch `branch`.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails (e.g. the branch does not exist, or is checked out
    /// elsewhere).
    pub async fn add_worktree_on(&self, path: &Path, branch: &str) -> Result<(), GitError> {
        let path = path.to_string_lossy();
        self.run(&["worktree", "add", "-q", &path, branch])
            .await
            .map(drop)
    }

    /// Removes the work tree at `path`, with whatever it holds, and forgets it.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails (e.g. `path` is not a work tree of this repository).
    pub async fn remove_worktree(&self, path: &Path) -> Result<(), GitError> {
        let path = path.to_string_lossy();
        // Twice forced: a locked work tree goes too.
        self.run(&["worktree", "remove", "-f", "-f", &path])
            .await
            .map(drop)
    }

    /// The paths of the repository's work trees, the main one first; work trees whose
    /// folders are gone are forgotten first (`git worktree prune`).
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails.
    pub async fn worktrees(&self) -> Result<Vec<PathBuf>, GitError> {
        self.run(&["worktree", "prune"]).await?;
        let out = self.run(&["worktree", "list", "--porcelain"]).await?;
        Ok(out
            .lines()
            .filter_map(|l| l.strip_prefix("worktree "))
            .map(PathBuf::from)
            .collect())
    }

    /// Replays the commits of the checked-out branch onto `onto`. On a conflict the rebase
    /// is undone and the conflicting paths are returned.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails other than by a conflict.
    pub async fn rebase(&self, onto: &str) -> Result<Rebased, GitError> {
        let mut args = self.identity_args().await;
        args.extend(["rebase", "-q", onto].map(str::to_owned));
        match self.run_owned(&args).await {
            Ok(_) => Ok(Rebased::Clean),
            Err(GitError::Failed { .. }) if self.rebasing().await => {
                let paths = self
                    .run(&["diff", "--name-only", "--diff-filter=U"])
                    .await
                    .unwrap_or_default();
                self.run(&["rebase", "--abort"]).await?;
                Ok(Rebased::Conflict(
                    paths.lines().map(str::to_owned).collect(),
                ))
            }
            Err(e) => Err(e),
        }
    }

    /// Whether a rebase is stopped half-way in this work tree.
    async fn rebasing(&self) -> bool {
        let Ok(dir) = self.run(&["rev-parse", "--git-path", "rebase-merge"]).await else {
            return false;
        };
        let dir = Path::new(dir.trim());
        let dir = if dir.is_absolute() {
            dir.to_path_buf()
        } else {
            self.dir.join(dir)
        };
        dir.exists()
    }

    /// Moves the checked-out branch forward to `branch` (`git merge --ff-only`), updating
    /// the work tree. Files of the work tree that the merge would overwrite (untracked ones,
    /// or tracked ones with local changes) stop it before anything changes:
    /// [`Forwarded::Blocked`] names them.
    ///
    /// # Errors
    ///
    /// [`GitError`] when the branch has moved past it (no fast forward) or git fails
    /// otherwise.
    pub async fn fast_forward(&self, branch: &str) -> Result<Forwarded, GitError> {
        match self.run(&["merge", "-q", "--ff-only", branch]).await {
            Ok(_) => Ok(Forwarded::Done),
            Err(GitError::Failed { stderr, .. }) if stderr.contains("would be overwritten") => {
                Ok(Forwarded::Blocked {
                    untracked: stderr.contains("untracked working tree files"),
                    paths: stderr
                        .lines()
                        .filter_map(|l| l.strip_prefix('\t'))
                        .map(|p| p.trim().to_owned())
                        .collect(),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Stages everything except paths under `exclude` (ralph's own state, say) and commits
    /// it with `message`; returns the new commit's SHA, or `None` when there was nothing to
    /// commit.
    ///
    /// # Errors
    ///
    /// [`GitError::CommitRefused`] when a hook refuses the commit or git cannot sign it;
    /// [`GitError`] when git fails otherwise.
    pub async fn commit_all(
        &self,
        message: &str,
        exclude: &[&str],
    ) -> Result<Option<String>, GitError> {
        let add = self.add_all_args(exclude).await?;
        self.run_owned(&add)
            .await
            .map_err(|e| self.outside_a_repo(e))?;
        if !self.has_staged().await? {
            return Ok(None);
        }
        let mut args: Vec<String> = self.identity_args().await;
        args.extend(["commit", "-q", "-m", message].map(str::to_owned));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = self.capture(&args, &[]).await?;
        if !output.exit.success() {
            // A task's work tree or a first commit: no index of the user's to put back.
            return Err(self.refused(message, &args, output, Vec::new()).await);
        }
        self.head().await
    }

    /// `git add -A -- . :(exclude)…`: every change but the `exclude` paths.
    async fn add_all_args(&self, exclude: &[&str]) -> Result<Vec<String>, GitError> {
        let mut add = vec![
            "add".to_owned(),
            "-A".to_owned(),
            "--".to_owned(),
            ".".to_owned(),
        ];
        for path in exclude {
            // An ignored path is left out anyway, and naming it makes `git add` fail
            // ("paths are ignored by one of your .gitignore files").
            if !self.is_ignored(path).await? {
                add.push(format!(":(exclude){path}"));
            }
        }
        Ok(add)
    }

    /// The tree [`commit_all`](Self::commit_all) would commit now, as a git tree id: HEAD
    /// with every change of the work tree (untracked files included) but the `exclude`
    /// paths. Written through a private index, so the user's staging area is left as it
    /// was. Two calls give the same id exactly when the same content would be committed.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails (no commit yet, say).
    pub async fn work_tree_id(&self, exclude: &[&str]) -> Result<String, GitError> {
        let index = self.private_index("ralph-tree-index").await?;
        let env = [("GIT_INDEX_FILE", index.0.as_os_str())];
        self.run_with_env(&["read-tree", "HEAD"], &env).await?;
        let add = self.add_all_args(exclude).await?;
        let add: Vec<&str> = add.iter().map(String::as_str).collect();
        self.run_with_env(&add, &env).await?;
        let tree = self.run_with_env(&["write-tree"], &env).await?;
        Ok(tree.trim().to_owned())
    }

    /// The paths whose content differs between two trees (or commits).
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails (an unknown tree).
    pub async fn tree_changes(&self, from: &str, to: &str) -> Result<Vec<String>, GitError> {
        let out = self
            .run(&["diff", "--name-only", "--no-renames", "-z", from, to])
            .await?;
        Ok(out
            .split('\0')
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect())
    }

    /// The diff of the work tree, untracked files included, against `base`, without touching
    /// the repository's index, leaving out the `exclude` paths (ralph's own state).
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails (e.g. `base` is unknown).
    pub async fn diff_from(&self, base: &str, exclude: &[&str]) -> Result<String, GitError> {
        // A private index holding the whole work tree, so new files show up in the diff
        // and the user's staging area is left as it was.
        let index = self.private_index("ralph-diff-index").await?;
        let env = [("GIT_INDEX_FILE", index.0.as_os_str())];
        self.run_with_env(&["read-tree", base], &env).await?;
        self.run_with_env(&["add", "-A"], &env).await?;
        let excluded: Vec<String> = exclude.iter().map(|p| format!(":(exclude){p}")).collect();
        let mut diff = vec!["diff", "--cached", "--no-color", base, "--", "."];
        diff.extend(excluded.iter().map(String::as_str));
        self.run_with_env(&diff, &env).await
    }

    /// A fresh index file in the git directory, named `<name>.<pid>.<n>`, removed when
    /// dropped.
    async fn private_index(&self, name: &str) -> Result<PrivateIndex, GitError> {
        Ok(PrivateIndex(self.git_dir().await?.join(format!(
            "{name}.{}.{}",
            std::process::id(),
            NEXT_INDEX.fetch_add(1, Ordering::Relaxed)
        ))))
    }

    /// Puts the work tree back at `baseline`: checks out its branch (or, for a detached
    /// baseline, its commit detached), resets
    /// hard to its commit, and removes untracked files except those under `keep` (ralph's
    /// own state, for instance). Ignored files are left alone.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails.
    pub async fn reset_to(&self, baseline: &Baseline, keep: &[&str]) -> Result<(), GitError> {
        match &baseline.branch {
            Some(branch) => self.run(&["switch", "-q", "-f", branch]).await?,
            // A detached baseline: leave whatever branch is checked out (so it can be deleted).
            None => {
                self.run(&["switch", "-q", "-f", "--detach", &baseline.commit_sha])
                    .await?
            }
        };
        self.run(&["reset", "-q", "--hard", &baseline.commit_sha])
            .await?;
        let mut args = vec![
            "clean".to_owned(),
            "-q".to_owned(),
            "-f".to_owned(),
            "-d".to_owned(),
        ];
        for path in keep {
            args.push("-e".to_owned());
            args.push((*path).to_owned());
        }
        self.run_owned(&args).await.map(drop)
    }

    /// Whether commit `ancestor` is `descendant` or one of its ancestors (`git merge-base
    /// --is-ancestor`); false when either is unknown.
    ///
    /// # Errors
    ///
    /// [`GitError::Spawn`] when git cannot run.
    pub async fn is_ancestor(&self, ancestor: &str, descendant: &str) -> Result<bool, GitError> {
        if ancestor == descendant && is_sha(ancestor) {
            // A commit is its own ancestor; no need to ask.
            return Ok(true);
        }
        let args = ["merge-base", "--is-ancestor", ancestor, descendant];
        // 0: it is; 1: it is not; 128: one of them is not a commit here.
        let captured = self.capture(&args, &[]).await?;
        Ok(captured.exit.success())
    }

    /// The paths of the work tree's changes (tracked files changed, deleted or added to the
    /// index, and untracked files that are not ignored), relative to the top of the work tree,
    /// each with whether it is untracked; paths under `exclude` are left out.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails.
    pub async fn changed_paths(&self, exclude: &[&str]) -> Result<Vec<(String, bool)>, GitError> {
        let mut args = vec![
            "status".to_owned(),
            "--porcelain=v1".to_owned(),
            "-z".to_owned(),
            "--untracked-files=all".to_owned(),
            "--".to_owned(),
            ":/".to_owned(),
        ];
        args.extend(exclude.iter().map(|p| format!(":(top,exclude){p}")));
        let out = self.run_owned(&args).await?;
        Ok(parse_status_z(&out))
    }

    /// Stages exactly `paths` (changes, additions and deletions alike; relative to the top of
    /// the work tree) and commits them with `message`; returns the new commit, or `None` when
    /// they hold no change. Nothing else in the work tree or the index is touched, and when
    /// the commit fails the index is put back as it was before.
    ///
    /// # Errors
    ///
    /// [`GitError::CommitRefused`] when a hook refuses the commit or git cannot sign it;
    /// [`GitError`] when git fails otherwise.
    pub async fn commit_paths(
        &self,
        message: &str,
        paths: &[String],
    ) -> Result<Option<String>, GitError> {
        if paths.is_empty() {
            return Ok(None);
        }
        let list = PathList::write(self, paths).await?;
        let from = format!("--pathspec-from-file={}", list.0.display());
        let wanted: std::collections::HashSet<&str> = paths.iter().map(String::as_str).collect();
        // What the user had staged of the paths, put back if the commit fails.
        let before = refusal::Staged::of(self, &wanted).await?;
        self.run(&["add", "-A", "--pathspec-file-nul", &from])
            .await?;
        // `git diff` takes no pathspec file: what is staged is matched against the paths.
        let staged = self.run(&["diff", "--cached", "--name-only", "-z"]).await?;
        if !staged.split('\0').any(|path| wanted.contains(path)) {
            return Ok(None);
        }
        // With the paths named, the commit takes only them: whatever else the user staged
        // stays staged, out of ralph's commit.
        let mut args: Vec<String> = self.identity_args().await;
        args.extend(
            ["commit", "-q", "-m", message, "--pathspec-file-nul", &from].map(str::to_owned),
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = self.capture(&args, &[]).await?;
        if !output.exit.success() {
            // What a hook changed is read before the index is put back.
            let changed = refusal::changed_since_added(self, &wanted).await;
            before.put_back(self, paths).await?;
            return Err(self.refused(message, &args, output, changed).await);
        }
        self.head().await
    }

    /// The failure of ralph's commit `args` with `message`: [`GitError::CommitRefused`]
    /// when a hook refused it (`changed` are the paths the hook changed) or git could not
    /// sign it, else [`GitError::Failed`].
    async fn refused(
        &self,
        message: &str,
        args: &[&str],
        output: Captured,
        changed: Vec<String>,
    ) -> GitError {
        let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
        let signing = refusal::signing_failed(&stderr);
        // A hook that fails makes git exit 1; git's own failures exit 128.
        let hook = match (signing, output.exit) {
            (false, Exit::Code(1)) => match self.hook_places().await {
                Ok(places) => refusal::refusing_hook(&places.hooks).map(|hook| {
                    match hook.strip_prefix(&self.dir) {
                        Ok(inside) => inside.to_path_buf(),
                        Err(_) => hook,
                    }
                }),
                Err(_) => None,
            },
            _ => None,
        };
        if !signing && hook.is_none() {
            return self.failed(args, output);
        }
        GitError::CommitRefused {
            subject: message.lines().next().unwrap_or_default().to_owned(),
            hook,
            signing,
            sandboxed: self
                .sandbox_of(&["commit"])
                .await
                .is_ok_and(|s| s.confines()),
            changed_by_hook: changed,
            stderr: crate::output::truncate_middle(&stderr, refusal::STDERR_SHOWN),
        }
    }

    /// Moves `paths` (changes and untracked files, relative to the top of the work tree) out
    /// of the work tree into a stash entry named `message` (`git stash list` shows it; `git
    /// stash pop` brings it back). Returns false when there was nothing to stash.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails.
    pub async fn stash_paths(&self, message: &str, paths: &[String]) -> Result<bool, GitError> {
        if paths.is_empty() {
            return Ok(false);
        }
        let list = PathList::write(self, paths).await?;
        let from = format!("--pathspec-from-file={}", list.0.display());
        let mut args: Vec<String> = self.identity_args().await;
        args.extend(
            [
                "stash",
                "push",
                "-q",
                "--include-untracked",
                "-m",
                message,
                "--pathspec-file-nul",
                &from,
            ]
            .map(str::to_owned),
        );
        self.run_owned(&args).await?;
        Ok(true)
    }

    /// The newest stash entry whose message starts with `prefix`: its ref (`stash@{2}`) and
    /// its whole message; `None` when there is none.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails.
    pub async fn stash_named(&self, prefix: &str) -> Result<Option<(String, String)>, GitError> {
        let list = self.run(&["stash", "list", "--format=%gd%x00%s"]).await?;
        Ok(list.lines().find_map(|line| {
            let (entry, subject) = line.split_once('\0')?;
            // git shows `On <branch>: <message>` (a branch name holds no colon).
            let message = subject.split_once(": ").map_or(subject, |(_, m)| m);
            message
                .starts_with(prefix)
                .then(|| (entry.to_owned(), message.to_owned()))
        }))
    }

    /// Applies the stash entry `entry` (`stash@{2}`) to the work tree and drops it (`git
    /// stash pop`); on a conflict git keeps the entry, and the error says why.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails or the entry does not apply.
    pub async fn stash_pop(&self, entry: &str) -> Result<(), GitError> {
        self.run(&["stash", "pop", "-q", entry]).await.map(drop)
    }

    /// Moves the checked-out branch (or a detached HEAD) to `commit`, keeping the work
    /// tree's local changes (`git reset --keep`); refuses when a local change would be lost.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails.
    pub async fn reset_keep(&self, commit: &str) -> Result<(), GitError> {
        self.run(&["reset", "-q", "--keep", commit]).await.map(drop)
    }

    /// Whether `path` is ignored by a `.gitignore` (or `info/exclude`).
    /// Whether git ignores `path` (relative to the directory git runs in).
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails.
    pub async fn ignored(&self, path: &str) -> Result<bool, GitError> {
        self.is_ignored(path).await
    }

    async fn is_ignored(&self, path: &str) -> Result<bool, GitError> {
        // `check-ignore` exits 0 and prints the path when ignored, 1 when not.
        let out = self
            .run_allowing(&["check-ignore", "--", path], &[1])
            .await?;
        Ok(!out.trim().is_empty())
    }

    async fn has_staged(&self) -> Result<bool, GitError> {
        let out = self.run(&["diff", "--cached", "--name-only", "-z"]).await?;
        Ok(!out.is_empty())
    }

    /// `err`, or [`GitError::NotARepo`] when git failed because the directory is in no
    /// repository.
    fn outside_a_repo(&self, err: GitError) -> GitError {
        match err {
            GitError::Failed { stderr, .. } if stderr.contains("not a git repository") => {
                GitError::NotARepo(self.dir.clone())
            }
            err => err,
        }
    }

    /// `-c user.name=… -c user.email=…` for whichever of the two git has no value for;
    /// asked once per handle.
    async fn identity_args(&self) -> Vec<String> {
        if let Some(args) = self.known.identity.get() {
            return args.clone();
        }
        // Exit 1: neither is set.
        let set = self
            .run_allowing(&["config", "--get-regexp", r"^user\.(name|email)$"], &[1])
            .await
            .unwrap_or_default();
        let has = |key: &str| {
            set.lines().any(|line| {
                line.split_once(' ')
                    .is_some_and(|(k, v)| k == key && !v.trim().is_empty())
            })
        };
        let mut args = Vec::new();
        for (key, fallback) in [("user.name", FALLBACK_NAME), ("user.email", FALLBACK_EMAIL)] {
            if !has(key) {
                args.push("-c".to_owned());
                args.push(format!("{key}={fallback}"));
            }
        }
        self.known.identity.get_or_init(|| args).clone()
    }

    /// The repository's git directory, asked once per handle.
    async fn git_dir(&self) -> Result<PathBuf, GitError> {
        if let Some(dir) = self.known.git_dir.get() {
            return Ok(dir.clone());
        }
        let out = self.run(&["rev-parse", "--absolute-git-dir"]).await?;
        Ok(self
            .known
            .git_dir
            .get_or_init(|| PathBuf::from(out.trim()))
            .clone())
    }

    async fn run(&self, args: &[&str]) -> Result<String, GitError> {
        self.run_allowing(args, &[]).await
    }

    async fn run_owned(&self, args: &[String]) -> Result<String, GitError> {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.run(&args).await
    }

    async fn run_with_env(
        &self,
        args: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Result<String, GitError> {
        self.exec(args, env, &[]).await
    }

    /// Runs git; the exit codes in `quiet_failures` return empty output instead of an error
    /// (`rev-parse -q --verify` says "no such thing" with 1).
    async fn run_allowing(
        &self,
        args: &[&str],
        quiet_failures: &[i32],
    ) -> Result<String, GitError> {
        self.exec(args, &[], quiet_failures).await
    }

    /// The sandbox of `args`: the hooks' when the command may run hooks.
    async fn sandbox_of(&self, args: &[&str]) -> Result<Sandbox, GitError> {
        let runs_hooks = match args {
            // Of the work tree commands, only `add` checks out (`post-checkout`).
            ["worktree", sub, ..] => *sub == "add",
            [command, ..] => HOOK_COMMANDS.contains(command),
            [] => false,
        };
        if !self.hooks.confines() || !runs_hooks {
            return Ok(Sandbox::unconfined());
        }
        let places = self.hook_places().await?;
        // No hook, no code of the workspace's: the command runs as every other git command
        // does (a sandbox costs milliseconds per commit).
        if !places.any_hook() {
            return Ok(Sandbox::unconfined());
        }
        Ok(places
            .git_dirs
            .into_iter()
            .fold(self.hooks.clone(), |sandbox, dir| sandbox.write(dir)))
    }

    /// The repository's git folders and its hooks folder, asked once per handle.
    async fn hook_places(&self) -> Result<HookPlaces, GitError> {
        if let Some(places) = self.known.hook_places.get() {
            return Ok(places.clone());
        }
        // Boxed: `run` comes back to `sandbox_of`, for a command that runs no hooks.
        let ask = self.run(&[
            "rev-parse",
            "--absolute-git-dir",
            "--git-common-dir",
            "--git-path",
            "hooks",
        ]);
        let out = Box::pin(ask).await?;
        let mut paths: Vec<PathBuf> = out.lines().map(|line| self.dir.join(line.trim())).collect();
        let hooks = paths.pop().unwrap_or_default();
        let places = HookPlaces {
            git_dirs: paths,
            hooks,
        };
        Ok(self.known.hook_places.get_or_init(|| places).clone())
    }

    /// `git -C <dir> ARGS` with ralph's settings and `env`, run to its end.
    async fn capture(
        &self,
        args: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Result<Captured, GitError> {
        let sandbox = self.sandbox_of(args).await?;
        let spec = ProcessSpec::new("git")
            .sandbox(sandbox)
            .arg("-C")
            .arg(&self.dir)
            // No automatic housekeeping after ralph's commits, rebases and merges: git
            // detaches it into the background, where it would outlive the run (and, in a
            // work tree, could race the next `worktree add`). The user's own git runs it.
            .args(["-c", "gc.auto=0", "-c", "maintenance.auto=false"])
            .args(args)
            .env("LC_ALL", "C")
            .env("GIT_TERMINAL_PROMPT", "0")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .envs(env.iter().copied());
        spec.capture().await.map_err(|e| GitError::Spawn {
            command: args.join(" "),
            dir: self.dir.clone(),
            source: e.into(),
        })
    }

    async fn exec(
        &self,
        args: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
        quiet_failures: &[i32],
    ) -> Result<String, GitError> {
        let output = self.capture(args, env).await?;
        if output.exit.success() {
            return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
        }
        if output
            .exit
            .code()
            .is_some_and(|c| quiet_failures.contains(&c))
        {
            return Ok(String::new());
        }
        Err(self.failed(args, output))
    }

    /// [`GitError::Failed`] for `args`, which ended as `output` says.
    fn failed(&self, args: &[&str], output: Captured) -> GitError {
        GitError::Failed {
            command: args.join(" "),
            dir: self.dir.clone(),
            status: exit_status(output.exit),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        }
    }
}

/// How git exited, in the words of `std`'s exit status: `exit status: 128`.
fn exit_status(exit: Exit) -> String {
    match exit {
        Exit::Code(code) => format!("exit status: {code}"),
        Exit::Signal(signal) => format!("signal: {signal}"),
    }
}

/// Numbers the private index files of concurrent [`Git::diff_from`] calls.
static NEXT_INDEX: AtomicU64 = AtomicU64::new(0);

/// An index file that is removed when the diff is done, whatever happened.
struct PrivateIndex(PathBuf);

impl Drop for PrivateIndex {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A NUL-separated list of paths in the git directory, for `--pathspec-from-file` (a list
/// of thousands of paths does not fit on a command line); removed when dropped.
struct PathList(PathBuf);

impl PathList {
    // The path list handed to `git add --pathspec-from-file`: read once, then removed.
    #[allow(clippy::disallowed_methods)]
    async fn write(git: &Git, paths: &[String]) -> Result<PathList, GitError> {
        let path = git.git_dir().await?.join(format!(
            "ralph-paths.{}.{}",
            std::process::id(),
            NEXT_INDEX.fetch_add(1, Ordering::Relaxed)
        ));
        let mut bytes = Vec::new();
        for p in paths {
            // `:(top,literal)`: relative to the top, and never read as a pattern.
            bytes.extend_from_slice(format!(":(top,literal){p}").as_bytes());
            bytes.push(0);
        }
        std::fs::write(&path, bytes).map_err(|source| GitError::Spawn {
            command: "add --pathspec-from-file".into(),
            dir: git.dir.clone(),
            source,
        })?;
        Ok(PathList(path))
    }
}

impl Drop for PathList {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The paths of `git status --porcelain=v1 -z`, each with whether it is untracked; a rename
/// or copy gives both its paths.
fn parse_status_z(out: &str) -> Vec<(String, bool)> {
    let mut paths = Vec::new();
    let mut entries = out.split('\0').filter(|e| !e.is_empty());
    while let Some(entry) = entries.next() {
        let (code, path) = (entry.get(..2).unwrap_or(""), entry.get(3..).unwrap_or(""));
        paths.push((path.to_owned(), code == "??"));
        if code.contains(['R', 'C'])
            && let Some(from) = entries.next()
        {
            paths.push((from.to_owned(), false));
        }
    }
    paths
}

/// A full commit id (40 hex digits, or 64 in a SHA-256 repository).
fn is_sha(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

fn non_empty(out: String) -> Option<String> {
    let trimmed = out.trim();
    (!trimmed.is_empty()).then(|| trimmed.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error's text leaves its cause to `source()`: a printer of the chain says each once.
    #[test]
    fn an_error_names_what_failed_and_leaves_its_cause_to_source() {
        let cause = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let errors = [
            GitError::Spawn {
                command: "status".to_owned(),
                dir: PathBuf::from("/repo"),
                source: cause(),
            },
            GitError::Io {
                path: PathBuf::from("/repo/.git/ralph-note"),
                source: cause(),
            },
        ];
        for error in errors {
            let said = cause().to_string();
            assert!(!error.to_string().contains(&said), "{error}");
            let chain = crate::output::chain(&error);
            assert_eq!(chain.matches(&said).count(), 1, "{chain}");
        }
    }
}
