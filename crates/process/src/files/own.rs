//! Folders of ralph's own files keep themselves out of the user's `git status`.
//!
//! ralph is a guest in the user's repository: its state (`.ralph/`) and its logs must never
//! show up as untracked files, or a natural `git add -A` after a run commits them. `ralph
//! init` adds `.ralph/` to the repository's `.gitignore`, but a library user never runs
//! `init`, and the log folder is configurable. So each such folder ignores itself: a
//! `.gitignore` holding `*` inside it (which also ignores that `.gitignore`), written when
//! ralph makes the folder.
//!
//! - The state folder (a folder named [`STATE_DIR_NAME`]) is ralph's alone: its `.gitignore`
//!   is written whenever ralph makes anything in it and it has none, also in a folder an
//!   older version made ([`create_dir_all`]).
//! - Any other folder ralph makes for itself (the log folder) ignores itself when ralph is
//!   the one creating it ([`create_own_dir`]). A folder that was already there may be the user's own (a
//!   `log_dir = "docs"`), whose new files must not vanish from `git status`: it is left as
//!   it is.

use std::io;
use std::path::Path;

/// The name of ralph's state folder inside a workspace.
pub const STATE_DIR_NAME: &str = ".ralph";

/// What the `.gitignore` of one of ralph's folders says.
const IGNORE_ALL: &str = "# ralph's own files: kept out of git by ralph\n*\n";

/// Creates `dir` and its parents, as [`std::fs::create_dir_all`] does; when `dir` is in a
/// state folder, that folder ignores itself. Any other path, a user's file's folder, is
/// only created.
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    // Asked first: the folder is nearly always there (every agent run logs into it), and
    // `create_dir_all` would try `mkdir` and then ask anyway.
    if !dir.is_dir() {
        std::fs::create_dir_all(dir)?;
    }
    within_state_dir(dir)
}

/// When `dir` is in a state folder, that folder ignores itself.
fn within_state_dir(dir: &Path) -> io::Result<()> {
    match dir
        .ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == STATE_DIR_NAME))
    {
        Some(state) => ignore_itself(state),
        None => Ok(()),
    }
}

/// Creates `dir`, a folder for ralph's own files (its logs), and its parents: a folder
/// ralph makes ignores itself; one that was there already is left as it is.
pub fn create_own_dir(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return within_state_dir(dir);
    }
    create_dir_all(dir)?;
    ignore_itself(dir)
}

/// Writes `dir/.gitignore` with `*` unless it has one (a person's own is kept).
fn ignore_itself(dir: &Path) -> io::Result<()> {
    let path = dir.join(".gitignore");
    if path.exists() {
        return Ok(());
    }
    // Not atomic on purpose: two writers write the same bytes, and a torn file still
    // starts with the comment line and is rewritten by no one; `*` is all git needs.
    std::fs::write(path, IGNORE_ALL)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ignore_of(dir: &Path) -> Option<String> {
        std::fs::read_to_string(dir.join(".gitignore")).ok()
    }

    #[test]
    fn a_folder_ralph_makes_ignores_itself_and_its_parents_are_left_alone() {
        let ws = tempfile::tempdir().unwrap();
        let logs = ws.path().join("build/ralph-logs");
        create_own_dir(&logs).unwrap();
        assert_eq!(ignore_of(&logs).as_deref(), Some(IGNORE_ALL));
        assert_eq!(ignore_of(&ws.path().join("build")), None);
    }

    #[test]
    fn a_folder_that_was_there_is_the_users_and_stays_as_it_is() {
        let ws = tempfile::tempdir().unwrap();
        let docs = ws.path().join("docs");
        std::fs::create_dir(&docs).unwrap();
        create_own_dir(&docs).unwrap();
        assert_eq!(ignore_of(&docs), None);
    }

    #[test]
    fn the_state_folder_always_ignores_itself_whatever_is_made_under_it() {
        let ws = tempfile::tempdir().unwrap();
        let state = ws.path().join(STATE_DIR_NAME);
        std::fs::create_dir_all(&state).unwrap();
        create_dir_all(&state.join("threads/t-1")).unwrap();
        assert_eq!(ignore_of(&state).as_deref(), Some(IGNORE_ALL));
        assert_eq!(ignore_of(&state.join("threads/t-1")), None);
    }

    #[test]
    fn a_persons_own_gitignore_is_kept() {
        let ws = tempfile::tempdir().unwrap();
        let state = ws.path().join(STATE_DIR_NAME);
        std::fs::create_dir_all(&state).unwrap();
        std::fs::write(state.join(".gitignore"), "mine\n").unwrap();
        create_dir_all(&state).unwrap();
        assert_eq!(ignore_of(&state).as_deref(), Some("mine\n"));
    }
}
