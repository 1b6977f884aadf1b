//! The gates judge what is committed: while a turn's gates run in the user's own work
//! tree, the untracked files its commit leaves out (the user's, there before the turn) are
//! moved aside, and what the gates themselves write is never the turn's work.
//!
//! Without this, a file the user happened to have in the tree (untracked, not ignored) made
//! the gates pass for a task whose commit does not hold it, and a coverage report a gate
//! wrote landed in the task's commit. The files go to `.ralph/aside/` (the same file
//! system: a rename, nothing copied) and come back when the gates end; a run killed in
//! between brings them back at its next start ([`Home::restore_aside`]). Ignored files
//! (`target/`, a virtualenv) stay where they are: the gates may need them, and no commit
//! holds them either way.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::Home;
use crate::git::GitError;
use crate::runtime::workspace;

/// The folder in ralph's state where the user's untracked files wait while gates run.
const ASIDE: &str = "aside";

/// What [`Home::gates_begin`] did, for [`Home::gates_end`] to undo and compare.
#[derive(Debug)]
pub(crate) struct GatesWatch {
    /// The files moved aside: where they were, relative to the top of the work tree.
    moved: Vec<String>,
    /// The turn's paths before the gates ran.
    before: HashSet<String>,
}

impl GatesWatch {
    /// The files moved aside while the gates ran, relative to the top of the work tree.
    pub(crate) fn moved(&self) -> &[String] {
        &self.moved
    }
}

impl Home {
    /// Before the noted turn's gates run: moves the user's untracked files (noted when the
    /// turn began) aside, and notes the turn's paths, so that what the gates write can be
    /// told apart. `None` when no turn is noted (nothing to do).
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails or the note cannot be read.
    ///
    /// `judges` (absolute) stay: the files the run is judged with (a gate's script, the
    /// config, the spec), which are no task's work even when nobody committed them.
    pub(crate) async fn gates_begin(
        &self,
        judges: &[PathBuf],
    ) -> Result<Option<GatesWatch>, GitError> {
        let Some(turn) = self.noted()? else {
            return Ok(None);
        };
        let aside = self.aside_dir();
        let moved = turn
            .untracked
            .iter()
            .filter(|path| !judges.contains(&self.top.join(path)))
            .filter(|path| move_to(&self.top.join(path), &aside.join(path)))
            .cloned()
            .collect();
        let before = self.turn_paths(&turn).await?.into_iter().collect();
        Ok(Some(GatesWatch { moved, before }))
    }

    /// After the gates: puts the files moved aside back, and notes the new files the gates
    /// wrote (a report, a cache), which the turn's commit then leaves out.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails or the note cannot be written.
    pub(crate) async fn gates_end(&self, watch: &GatesWatch) -> Result<(), GitError> {
        self.restore_aside();
        let Some(mut turn) = self.noted()? else {
            return Ok(());
        };
        // New files only: a tracked file a gate rewrites (`Cargo.lock` after the agent
        // added a dependency) belongs with the work it follows from.
        let written = self
            .changed()
            .await?
            .into_iter()
            .filter(|(path, untracked)| *untracked && !watch.before.contains(path))
            .map(|(path, _)| path)
            .filter(|path| !turn.untracked.contains(path) && !turn.gate_output.contains(path))
            .filter(|path| !self.bookkeeping.contains(path))
            .collect::<Vec<_>>();
        if written.is_empty() {
            return Ok(());
        }
        turn.gate_output.extend(written);
        self.write_note(&turn)
    }

    /// Puts back every file moved aside, at the start of a run too (one killed while its
    /// gates ran). A file whose place is taken again (a gate's output) replaces it: the
    /// user's file is what was there.
    pub(crate) fn restore_aside(&self) {
        let aside = self.aside_dir();
        for file in files_under(&aside) {
            if let Ok(rel) = file.strip_prefix(&aside) {
                let home = self.top.join(rel);
                if home.symlink_metadata().is_ok_and(|m| !m.is_dir()) {
                    let _ = std::fs::remove_file(&home);
                }
                move_to(&file, &home);
            }
        }
        let _ = std::fs::remove_dir_all(&aside);
    }

    fn aside_dir(&self) -> PathBuf {
        workspace::state_dir(self.git.dir()).join(ASIDE)
    }
}

/// Renames `from` to `to`, making `to`'s folder; false when `from` is not there or cannot
/// be moved (another file system), where it then stays.
fn move_to(from: &Path, to: &Path) -> bool {
    if from.symlink_metadata().is_err() {
        return false;
    }
    if let Some(parent) = to.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    // Durable: a person's file must be at one place or the other after a crash.
    crate::files::atomic::rename(from, to).is_ok()
}

/// The files (and links) under `dir`, at any depth.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => files.extend(files_under(&path)),
            Ok(_) => files.push(path),
            Err(_) => {}
        }
    }
    files
}
