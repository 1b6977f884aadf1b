//! What the referee judges with, as it was when the run started: `ralph.toml`, each gate's
//! script, the spec on record, `.pre-commit-config.yaml`, the programs of `[[hooks]]` in
//! the tree, `[sandbox] protect`.
//!
//! The sandbox keeps an agent's hands off them; what it cannot prevent (a run unconfined,
//! a person's edit during the run) ralph detects. The files are read when the run starts
//! and compared before and after every implementer's agent run:
//!
//! - changed during an agent run that was not confined: the agent's doing. The file is put
//!   back as it was, and the attempt fails naming it, so the retry is told;
//! - changed otherwise (between agent runs, or during a confined one, which could not): a
//!   person's. The run stops before the next gate ([`Error::ChangedDuringRun`]), so the
//!   change neither judges this run nor lands in its commits; the same command run again
//!   takes the new file.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::error::Error;

/// Files larger than this are compared, not kept: one changed cannot be put back.
const KEPT_BYTES: u64 = 4 << 20;

/// The referee's files as the run found them.
#[derive(Debug, Default)]
pub(crate) struct Referee {
    files: Mutex<Vec<Recorded>>,
}

#[derive(Debug)]
struct Recorded {
    /// Absolute.
    path: PathBuf,
    /// Its bytes when recorded; `None` when it was not there (or too large to keep:
    /// `too_large`).
    bytes: Option<Vec<u8>>,
    too_large: Option<std::time::SystemTime>,
}

impl Referee {
    /// Records `paths` (absolute; folders are skipped) as they are now, beside what is
    /// recorded already.
    pub(crate) fn record(&self, paths: impl IntoIterator<Item = PathBuf>) {
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        for path in paths {
            if path.is_dir() || files.iter().any(|f| f.path == path) {
                continue;
            }
            files.push(Recorded::now(path));
        }
    }

    /// The files recorded inside `workspace` as `tree`'s copies of them are now: what the
    /// gates judge with in a task's work tree (`build_concurrency`), made from the branch.
    pub(crate) fn in_tree(&self, workspace: &Path, tree: &Path) -> Referee {
        let copies: Vec<PathBuf> = self
            .paths()
            .iter()
            .filter_map(|path| path.strip_prefix(workspace).ok())
            .map(|rel| tree.join(rel))
            .collect();
        let referee = Referee::default();
        referee.record(copies);
        referee
    }

    /// The recorded files, absolute.
    pub(crate) fn paths(&self) -> Vec<PathBuf> {
        let files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        files.iter().map(|f| f.path.clone()).collect()
    }

    /// Forgets every file (a new run records them afresh).
    pub(crate) fn clear(&self) {
        self.files.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// The recorded files that changed since, relative to `workspace` where inside it.
    pub(crate) fn changed(&self, workspace: &Path) -> Vec<PathBuf> {
        let files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        files
            .iter()
            .filter(|f| !f.unchanged())
            .map(|f| {
                f.path
                    .strip_prefix(workspace)
                    .unwrap_or(&f.path)
                    .to_path_buf()
            })
            .collect()
    }

    /// Puts every changed file back as it was recorded; returns those it could not (too
    /// large to have been kept, or not writable).
    pub(crate) fn restore(&self) -> Vec<PathBuf> {
        let files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        files
            .iter()
            .filter(|f| !f.unchanged() && !f.put_back())
            .map(|f| f.path.clone())
            .collect()
    }

    /// Stops the run when a recorded file changed: a person's change (see the module docs).
    ///
    /// # Errors
    ///
    /// [`Error::ChangedDuringRun`] naming the files.
    pub(crate) fn refuse_changes(&self, workspace: &Path) -> Result<(), Error> {
        let paths = self.changed(workspace);
        match paths.is_empty() {
            true => Ok(()),
            false => Err(Error::ChangedDuringRun { paths }),
        }
    }
}

impl Recorded {
    fn now(path: PathBuf) -> Recorded {
        let meta = std::fs::metadata(&path).ok();
        let too_large = meta
            .as_ref()
            .filter(|m| m.len() > KEPT_BYTES)
            .and_then(|m| m.modified().ok());
        let bytes = match too_large {
            Some(_) => None,
            None => std::fs::read(&path).ok(),
        };
        Recorded {
            path,
            bytes,
            too_large,
        }
    }

    fn unchanged(&self) -> bool {
        if let Some(modified) = self.too_large {
            return std::fs::metadata(&self.path)
                .and_then(|m| m.modified())
                .is_ok_and(|now| now == modified);
        }
        std::fs::read(&self.path).ok() == self.bytes
    }

    /// Writes the recorded bytes back (or removes a file that was not there).
    fn put_back(&self) -> bool {
        if self.too_large.is_some() {
            return false;
        }
        match &self.bytes {
            Some(bytes) => crate::files::atomic::replace(&self.path, bytes).is_ok(),
            None => std::fs::remove_file(&self.path).is_ok(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests write their fixtures directly
mod tests {
    use super::*;

    #[test]
    fn a_change_is_found_and_put_back_and_a_new_file_removed() {
        let ws = tempfile::tempdir().unwrap();
        let ws = ws.path();
        std::fs::write(ws.join("check.sh"), "exit 1\n").unwrap();
        let referee = Referee::default();
        referee.record([ws.join("check.sh"), ws.join("ralph.toml")]);
        assert!(referee.changed(ws).is_empty());
        std::fs::write(ws.join("check.sh"), "exit 0\n").unwrap();
        std::fs::write(ws.join("ralph.toml"), "[[gates]]\n").unwrap();
        assert_eq!(
            referee.changed(ws),
            [PathBuf::from("check.sh"), PathBuf::from("ralph.toml")]
        );
        assert!(referee.restore().is_empty());
        assert_eq!(
            std::fs::read_to_string(ws.join("check.sh")).unwrap(),
            "exit 1\n"
        );
        assert!(!ws.join("ralph.toml").exists());
        assert!(referee.changed(ws).is_empty());
    }
}
