//! A commit of ralph's that git refused: a hook of the repository failed, or git could not
//! sign it (`commit.gpgsign`). What it takes to give the person a way forward:
//!
//! - the index as it was before ralph staged the commit's paths ([`Staged`]): ralph's
//!   `git add` is undone, what the person had staged of those paths is put back;
//! - which of the paths a hook changed before it failed (a formatter that rewrote files
//!   and exited 1): after ralph's `git add` the index held each path as the work tree did,
//!   so a path that differs from the index now was changed by the hook;
//! - the failure named (the hook's path, or the signing settings) with git's own words,
//!   head and tail when long ([`describe`]).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::{Git, GitError, PathList};

/// How much of what git and the hook said the error carries (head and tail).
pub(super) const STDERR_SHOWN: usize = 4 * 1024;

/// The hooks a `git commit` runs that can refuse it, in the order it runs them.
const COMMIT_HOOKS: &[&str] = &["pre-commit", "prepare-commit-msg", "commit-msg"];

/// Whether git's stderr says it could not sign the commit: gpg refused ("gpg failed to
/// sign the data"), could not be started ("cannot run gpg"), or ssh signing failed.
pub(super) fn signing_failed(stderr: &str) -> bool {
    const SAID: &[&str] = &[
        "failed to sign the data",
        "cannot run gpg",
        "error: gpg",
        "gpg: signing failed",
        "ssh-keygen",
    ];
    SAID.iter().any(|said| stderr.contains(said))
}

/// The commit hook in `hooks` (the hooks folder, `core.hooksPath` followed) that refused a
/// commit which exited 1 without a signing error: the first of them git runs that is an
/// executable file. (git says nothing of its own when a hook fails, so which one is known
/// only when one exists.)
pub(super) fn refusing_hook(hooks: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    COMMIT_HOOKS
        .iter()
        .map(|name| hooks.join(name))
        .find(|hook| {
            hook.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// What the index held, before ralph's `git add`, for those of a commit's paths the person
/// had staged: each with its entry (mode and object), or `None` for a staged deletion.
#[derive(Debug, Default)]
pub(super) struct Staged {
    entries: Vec<(String, Option<(String, String)>)>,
}

impl Staged {
    /// The staged entries of `wanted` (paths relative to the top of the work tree) now.
    pub(super) async fn of(git: &Git, wanted: &HashSet<&str>) -> Result<Staged, GitError> {
        let staged = git.run(&["diff", "--cached", "--name-only", "-z"]).await?;
        let theirs: Vec<&str> = staged.split('\0').filter(|p| wanted.contains(p)).collect();
        if theirs.is_empty() {
            return Ok(Staged::default());
        }
        // A person's staged paths among a turn's are few (a run refuses to start over
        // uncommitted edits): named on the command line.
        let mut args = ["ls-files", "--full-name", "-s", "-z", "--"]
            .map(str::to_owned)
            .to_vec();
        args.extend(theirs.iter().map(|p| format!(":(top,literal){p}")));
        let listed = git.run_owned(&args).await?;
        let mut found: HashMap<&str, (String, String)> = HashMap::new();
        for record in listed.split('\0') {
            // `<mode> <object> <stage>\t<path>`
            let Some((entry, path)) = record.split_once('\t') else {
                continue;
            };
            let mut fields = entry.split(' ');
            if let (Some(mode), Some(object)) = (fields.next(), fields.next()) {
                found.insert(path, (mode.to_owned(), object.to_owned()));
            }
        }
        Ok(Staged {
            entries: theirs
                .iter()
                .map(|path| ((*path).to_owned(), found.remove(path)))
                .collect(),
        })
    }

    /// Puts the index back as it was for `paths`: the ones the person had not staged are
    /// unstaged (`git reset`), the others get their staged entry again.
    pub(super) async fn put_back(&self, git: &Git, paths: &[String]) -> Result<(), GitError> {
        let theirs: HashSet<&str> = self.entries.iter().map(|(p, _)| p.as_str()).collect();
        let ours: Vec<String> = paths
            .iter()
            .filter(|p| !theirs.contains(p.as_str()))
            .cloned()
            .collect();
        if !ours.is_empty() {
            let list = PathList::write(git, &ours).await?;
            let from = format!("--pathspec-from-file={}", list.0.display());
            git.run(&["reset", "-q", "--pathspec-file-nul", &from])
                .await?;
        }
        for (path, entry) in &self.entries {
            match entry {
                // `--cacheinfo` paths are from the top of the work tree.
                Some((mode, object)) => {
                    git.run(&["update-index", "--add", "--cacheinfo", mode, object, path])
                        .await?
                }
                None => {
                    let spec = format!(":(top,literal){path}");
                    git.run(&["rm", "-q", "--cached", "--ignore-unmatch", "--", &spec])
                        .await?
                }
            };
        }
        Ok(())
    }
}

/// The paths of `wanted` whose work-tree content differs from the index: after ralph's
/// `git add` of them, the ones a hook changed.
pub(super) async fn changed_since_added(git: &Git, wanted: &HashSet<&str>) -> Vec<String> {
    let Ok(out) = git.run(&["diff", "--name-only", "-z"]).await else {
        return Vec::new();
    };
    out.split('\0')
        .filter(|p| wanted.contains(p))
        .map(str::to_owned)
        .collect()
}

/// The message of [`GitError::CommitRefused`]: what refused, what it said, and where the
/// work is.
pub(super) fn describe(
    subject: &str,
    hook: Option<&Path>,
    sandboxed: bool,
    changed_by_hook: &[String],
    stderr: &str,
) -> String {
    let said = match stderr.trim() {
        "" => "(it said nothing)".to_owned(),
        text => text.to_owned(),
    };
    let changed = crate::output::list_some(changed_by_hook, 5);
    let mut text = match hook {
        Some(hook) => {
            let name = hook
                .file_name()
                .map_or_else(|| "commit".into(), |n| n.to_string_lossy().into_owned());
            let path = hook.display();
            match changed_by_hook.is_empty() {
                true => format!("the {name} hook ({path}) refused ralph's commit \"{subject}\""),
                false => format!(
                    "the {name} hook ({path}) changed {changed} and then refused ralph's \
                     commit \"{subject}\" (a formatter, say: its changes are in the work tree)"
                ),
            }
        }
        None => format!(
            "git could not sign ralph's commit \"{subject}\" (`commit.gpgsign` is on; \
             `user.signingkey` names the key)"
        ),
    };
    text.push_str(&format!(":\n{said}\n"));
    if hook.is_none() && sandboxed {
        text.push_str(
            "The commit ran in the sandbox of the repository's hooks, where ~/.gnupg and the \
             gpg agent are hidden, so it cannot be signed there (docs/sandbox.md, \"Commit \
             signing\"): sign the branch's commits afterwards, or set `[sandbox] mode = \
             \"off\"` for this repository.\n",
        );
    }
    if hook.is_none() && !changed_by_hook.is_empty() {
        text.push_str(&format!("The repository's hooks had changed {changed}.\n"));
    }
    text.push_str(
        "Nothing was committed and nothing ralph staged is left staged: the work is in the \
         work tree as the task's, and the next run takes it up (a change you make to it \
         first is taken up with it); the attempt was not counted",
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpg_that_fails_or_cannot_run_is_a_signing_error_and_a_hook_is_not() {
        assert!(signing_failed(
            "error: gpg failed to sign the data:\ngpg: skipped \"DEADBEEF\": No secret key\n\
             fatal: failed to write commit object"
        ));
        assert!(signing_failed(
            "error: cannot run gpg: No such file or directory\nfatal: failed to write commit object"
        ));
        assert!(!signing_failed("lint: work.txt has trailing spaces"));
    }

    #[test]
    fn a_hook_that_changed_files_is_named_as_such() {
        let changed = ["work.txt".to_owned()];
        let text = describe(
            "t-1: Write work.txt",
            Some(Path::new(".git/hooks/pre-commit")),
            false,
            &changed,
            "files were modified by this hook",
        );
        assert!(
            text.starts_with(
                "the pre-commit hook (.git/hooks/pre-commit) changed work.txt and then refused"
            ),
            "{text}"
        );
        assert!(text.contains("files were modified by this hook"), "{text}");
    }

    #[test]
    fn a_signing_error_in_the_sandbox_says_why_it_cannot_work_there() {
        let text = describe("t-1: x", None, true, &[], "error: gpg");
        assert!(text.contains("`commit.gpgsign`"), "{text}");
        assert!(text.contains("~/.gnupg"), "{text}");
    }
}
