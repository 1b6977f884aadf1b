//! The work tree is checked around every run of a read-only role (all but
//! [`Role::Build`](crate::Role::Build): the planner, the verifiers, the gap analysis, the
//! investigator, the decomposer, plan mode, a thread's assessment and draft). Seed 002's
//! "the planner must not modify any code" is held by ralph, not only by the agent's own
//! read-only mode, which an `[agent.NAME]` command without `read_only_args` does not have.
//!
//! Before the run, a snapshot: `git status` (tracked changes and untracked files that are
//! not ignored) and a hash of each dirty path's content. After it, the same again. A path
//! that was clean and is now dirty is the agent's: the run fails (its answer is not used)
//! and what it wrote is moved into a `git stash` entry, so nothing is lost and the work
//! tree is as before. A path that was dirty before (the user's own uncommitted work) is
//! left as it is; when the agent changed it too, the run fails and says so. Ignored paths
//! (`target/`, ralph's `.ralph/` and logs) and ralph's own files in the work tree (a
//! progress file ralph writes while verifiers run, `implementation.json`) are not looked
//! at.
//!
//! Only in a git repository with a commit (a stash needs one); the check costs two `git
//! status` per read-only run, and nothing elsewhere.

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};

use crate::git::{Git, GitError};

/// The work tree of one caller, ready to be checked.
#[derive(Debug)]
pub(crate) struct Guard {
    /// Git at the top of the work tree: status paths are relative to it.
    git: Git,
    top: PathBuf,
    /// ralph's own paths, relative to the top of the work tree.
    kept_out: Vec<String>,
    /// The paths set aside so far. Held while the work tree is looked at, so that the
    /// checks of verifiers running at once take turns (two git commands at once contend
    /// for the index's lock), and so that what one run set aside is not taken by another
    /// run, whose snapshot saw it, for the user's work undone.
    set_aside: tokio::sync::Mutex<HashSet<String>>,
}

/// The dirty paths of the work tree at one moment: each one's `git status` code and a hash
/// of its content (`None` when it is gone).
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    dirty: HashMap<String, (bool, Option<u64>)>,
}

/// What a read-only run did to the work tree.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Breach {
    /// Paths it changed that were clean: set aside.
    pub(crate) wrote: Vec<String>,
    /// The stash entry that holds them, or why they could not be set aside.
    pub(crate) kept: Result<String, String>,
    /// Paths holding the user's uncommitted work that it changed too: left as they are.
    pub(crate) touched: Vec<String>,
}

impl Guard {
    /// The guard of the work tree `works_in` is in, with ralph's own paths `kept_out`
    /// (relative to `works_in`); `None` outside a git repository or before its first
    /// commit.
    pub(crate) async fn new(works_in: &Path, kept_out: &[String]) -> Option<Guard> {
        let git = Git::new(works_in);
        let prefix = git.prefix().await.ok()?;
        git.head().await.ok()??;
        let mut top = works_in.to_path_buf();
        for _ in Path::new(&prefix).components() {
            top.pop();
        }
        let kept_out = kept_out
            .iter()
            .flat_map(|p| own_patterns(p.trim_end_matches('/')))
            .map(|p| format!("{prefix}{p}"))
            .collect();
        Some(Guard {
            git: Git::new(&top),
            top,
            kept_out,
            set_aside: tokio::sync::Mutex::default(),
        })
    }

    /// The work tree's dirty paths now.
    ///
    /// # Errors
    ///
    /// [`GitError`] when `git status` fails.
    pub(crate) async fn snapshot(&self) -> Result<Snapshot, GitError> {
        let _turn = self.set_aside.lock().await;
        self.status().await
    }

    async fn status(&self) -> Result<Snapshot, GitError> {
        let kept_out: Vec<&str> = self.kept_out.iter().map(String::as_str).collect();
        let dirty = self
            .git
            .changed_paths(&kept_out)
            .await?
            .into_iter()
            .map(|(path, untracked)| {
                let hash = content_hash(&self.top.join(&path));
                (path, (untracked, hash))
            })
            .collect();
        Ok(Snapshot { dirty })
    }

    /// Compares the work tree with `before`; sets aside what the run wrote, in a stash entry
    /// named after `run` (`the read-only verify of t-3`). `None` when it changed nothing.
    ///
    /// # Errors
    ///
    /// [`GitError`] when `git status` fails.
    pub(crate) async fn check(
        &self,
        before: &Snapshot,
        run: &str,
    ) -> Result<Option<Breach>, GitError> {
        let mut set_aside = self.set_aside.lock().await;
        let after = self.status().await?;
        let (mut wrote, mut touched) = (Vec::new(), Vec::new());
        for (path, now) in &after.dirty {
            match before.dirty.get(path) {
                None => wrote.push(path.clone()),
                Some(was) if was != now => touched.push(path.clone()),
                Some(_) => {}
            }
        }
        // A user's change the run undid (a checkout, a reset) is gone from the status.
        touched.extend(
            before
                .dirty
                .keys()
                .filter(|p| !after.dirty.contains_key(*p) && !set_aside.contains(*p))
                .cloned(),
        );
        if wrote.is_empty() && touched.is_empty() {
            return Ok(None);
        }
        wrote.sort();
        touched.sort();
        let message = format!("ralph: what {run} wrote");
        let kept = match self.git.stash_paths(&message, &wrote).await {
            Ok(_) => {
                set_aside.extend(wrote.iter().cloned());
                Ok(message)
            }
            Err(e) => Err(crate::output::chain(&e)),
        };
        Ok(Some(Breach {
            wrote,
            kept,
            touched,
        }))
    }
}

impl Breach {
    /// The run's failure, for the retry and the events: what it changed, and where that is.
    pub(crate) fn reason(&self, run: &str) -> String {
        let mut text = format!("{run} changed the work tree, which it must not");
        if !self.wrote.is_empty() {
            text.push_str(&format!(" ({})", listed(&self.wrote)));
            match &self.kept {
                Ok(entry) => {
                    text.push_str(&format!("; set aside in `git stash list` as \"{entry}\""))
                }
                Err(why) => text.push_str(&format!("; could not be set aside: {why}")),
            }
        }
        if !self.touched.is_empty() {
            text.push_str(&format!(
                "; it also changed files that held your uncommitted work ({}), left as they are",
                listed(&self.touched)
            ));
        }
        text.push_str("; its answer is not used");
        text
    }
}

/// The pathspecs of one of ralph's own paths: the path, the temp files an atomic write of
/// it makes beside it, and the copies ralph keeps of it (`PROGRESS.md.changed-<time>`).
fn own_patterns(path: &str) -> [String; 3] {
    let temp = crate::files::atomic::temp_pattern(Path::new(path));
    let temp = temp.strip_prefix(".").unwrap_or(&temp);
    [
        path.to_owned(),
        temp.to_string_lossy().into_owned(),
        format!("{path}.*"),
    ]
}

/// Up to five paths, then how many more.
fn listed(paths: &[String]) -> String {
    let mut text = paths
        .iter()
        .take(5)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if paths.len() > 5 {
        text.push_str(&format!(" and {} more", paths.len() - 5));
    }
    text
}

/// A hash of the file's bytes; `None` when it cannot be read (gone, a folder).
fn content_hash(path: &Path) -> Option<u64> {
    let bytes = std::fs::read(path).ok()?;
    let mut hasher = DefaultHasher::new();
    bytes.hash(&mut hasher);
    Some(hasher.finish())
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests write their fixtures directly
mod tests {
    use super::*;

    // Sets up the test's repository, outside any run.
    #[allow(clippy::disallowed_types)]
    fn git(dir: &Path, args: &[&str]) {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }

    /// A repository with `sub/` as the workspace, `target/` ignored, two tracked files.
    fn repo() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path();
        std::fs::create_dir_all(top.join("sub")).unwrap();
        std::fs::write(top.join(".gitignore"), "target/\n").unwrap();
        std::fs::write(top.join("sub/a.txt"), "a\n").unwrap();
        std::fs::write(top.join("sub/b.txt"), "b\n").unwrap();
        std::fs::write(top.join("sub/PROGRESS.md"), "- [ ] x\n").unwrap();
        git(top, &["init", "-q", "-b", "main"]);
        git(top, &["add", "-A"]);
        git(top, &["commit", "-q", "-m", "base"]);
        dir
    }

    #[tokio::test]
    async fn only_what_the_run_changed_is_set_aside_and_the_users_work_is_named() {
        let dir = repo();
        let (top, ws) = (dir.path(), dir.path().join("sub"));
        // The user's own work from before the run.
        std::fs::write(ws.join("a.txt"), "the user's edit\n").unwrap();
        std::fs::write(ws.join("mine.txt"), "mine\n").unwrap();
        let guard = Guard::new(&ws, &["PROGRESS.md".to_owned()]).await.unwrap();
        let before = guard.snapshot().await.unwrap();
        assert!(guard.check(&before, "x").await.unwrap().is_none());

        // The run: a tracked file, a new file outside the workspace, an ignored file, the
        // user's edit changed again, and ralph's own progress file.
        std::fs::write(ws.join("b.txt"), "changed\n").unwrap();
        std::fs::write(top.join("new.txt"), "new\n").unwrap();
        std::fs::create_dir_all(ws.join("target")).unwrap();
        std::fs::write(ws.join("target/out"), "built\n").unwrap();
        std::fs::write(ws.join("a.txt"), "the agent's edit\n").unwrap();
        std::fs::write(ws.join("PROGRESS.md"), "- [x] x\n").unwrap();
        std::fs::write(ws.join(".PROGRESS.md.1.2.tmp"), "- [x] x\n").unwrap();
        let breach = guard.check(&before, "the run").await.unwrap().unwrap();
        assert_eq!(breach.wrote, ["new.txt", "sub/b.txt"]);
        assert_eq!(breach.touched, ["sub/a.txt"]);
        assert_eq!(breach.kept.as_deref(), Ok("ralph: what the run wrote"));
        let reason = breach.reason("the run");
        assert!(reason.contains("(new.txt, sub/b.txt)"), "{reason}");
        assert!(
            reason.contains("your uncommitted work (sub/a.txt), left as they are"),
            "{reason}"
        );

        assert_eq!(std::fs::read_to_string(ws.join("b.txt")).unwrap(), "b\n");
        assert!(!top.join("new.txt").exists());
        assert!(ws.join("target/out").exists());
        assert_eq!(
            std::fs::read_to_string(ws.join("mine.txt")).unwrap(),
            "mine\n"
        );
        assert_eq!(
            std::fs::read_to_string(ws.join("a.txt")).unwrap(),
            "the agent's edit\n"
        );
        assert_eq!(
            std::fs::read_to_string(ws.join("PROGRESS.md")).unwrap(),
            "- [x] x\n"
        );
    }

    #[tokio::test]
    async fn a_users_change_undone_by_the_run_is_named() {
        let dir = repo();
        let ws = dir.path().join("sub");
        std::fs::write(ws.join("a.txt"), "the user's edit\n").unwrap();
        let guard = Guard::new(&ws, &[]).await.unwrap();
        let before = guard.snapshot().await.unwrap();
        git(&ws, &["checkout", "--", "a.txt"]);
        let breach = guard.check(&before, "r").await.unwrap().unwrap();
        assert_eq!(
            (breach.wrote.len(), breach.touched.as_slice()),
            (0, &["sub/a.txt".to_owned()][..])
        );
    }

    #[tokio::test]
    async fn outside_git_or_before_the_first_commit_nothing_is_checked() {
        let plain = tempfile::tempdir().unwrap();
        assert!(Guard::new(plain.path(), &[]).await.is_none());
        git(plain.path(), &["init", "-q"]);
        assert!(Guard::new(plain.path(), &[]).await.is_none());
    }
}
