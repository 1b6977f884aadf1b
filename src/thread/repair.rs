//! `thread.json` and the run records that are not what ralph wrote (see
//! [`seal`](crate::files::seal)): put back as ralph last wrote them, or adopted as the
//! person's own.

use std::path::{Path, PathBuf};

use super::record::write_json;
use super::{ThreadError, Threads};
use crate::files::{atomic, seal};
use crate::store::Repair;

impl Threads {
    /// Repairs every `thread.json` and `run.json` of the workspace that is not what ralph
    /// wrote: puts back the last version ralph wrote (keeping the changed one beside it as
    /// `<file>.removed-<time>`) or, with `adopt`, seals it as it is, as the person's own.
    /// Returns one entry per file repaired; empty when every file is ralph's. Holds the
    /// workspace's lock, so it is refused while a run goes on.
    ///
    /// ```
    /// use ralph::agent::FakeAgent;
    /// use ralph::store::Repair;
    /// use ralph::thread::Threads;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
    /// let dir = tempfile::tempdir()?;
    /// let threads = Threads::new(dir.path(), FakeAgent::new())?;
    /// let record = threads.create("Greet", "# Greet\n")?;
    /// let path = dir.path().join(".ralph/threads").join(&record.id).join("thread.json");
    /// let text = std::fs::read_to_string(&path)?;
    /// std::fs::write(&path, text.replace("Drafting", "Done"))?;
    /// assert!(threads.get(&record.id).is_err(), "an edit is refused");
    ///
    /// let repairs = threads.repair(false).await?;
    /// assert!(matches!(&repairs[..], [Repair::Restored { .. }]));
    /// assert_eq!(threads.get(&record.id)?.phase, record.phase);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ThreadError::Busy`] while a run holds the workspace; [`ThreadError::NotWritten`]
    /// when a changed file cannot be put back (ralph kept no earlier version: adopt it, or
    /// remove it); [`ThreadError::Io`], [`ThreadError::Corrupt`] (adopting what is not JSON).
    pub async fn repair(&self, adopt: bool) -> Result<Vec<Repair>, ThreadError> {
        let _lock = self.lock_runs().await?;
        let mut repairs = Vec::new();
        for path in self.sealed_files()? {
            let read = seal::read(&path).map_err(|error| io(&path, error))?;
            if let seal::Read::Changed(how) = read {
                repairs.push(match adopt {
                    true => reseal(&path)?,
                    false => restore(&path, how)?,
                });
            }
        }
        Ok(repairs)
    }

    /// Every `thread.json` and `runs/<run-id>/run.json` there is.
    fn sealed_files(&self) -> Result<Vec<PathBuf>, ThreadError> {
        let mut files: Vec<PathBuf> = self
            .list()?
            .into_iter()
            .map(|id| self.record_path(&id))
            .collect();
        let runs = self.root.join("runs");
        match std::fs::read_dir(&runs) {
            Ok(entries) => files.extend(
                entries
                    .flatten()
                    .map(|e| e.path().join("run.json"))
                    .filter(|p| p.exists()),
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(io(&runs, error)),
        }
        files.sort();
        Ok(files)
    }
}

/// Puts back the last version ralph wrote of `path`, keeping the changed one beside it.
fn restore(path: &Path, how: String) -> Result<Repair, ThreadError> {
    let Some(last) = seal::last_written(path).map_err(|error| io(path, error))? else {
        return Err(ThreadError::NotWritten {
            path: path.to_path_buf(),
            how: format!(
                "{how}, and ralph kept no earlier version to put back: `ralph repair --adopt` \
                 keeps it as yours"
            ),
        });
    };
    let changed = std::fs::read(path).map_err(|error| io(path, error))?;
    let copy = atomic::keep_copy(path, "removed", &changed).map_err(|(p, e)| io(&p, e))?;
    atomic::replace(path, &last).map_err(|error| io(path, error))?;
    Ok(Repair::Restored {
        path: path.to_path_buf(),
        copy,
        reason: how,
    })
}

/// Seals `path` as it is (what JSON it holds, less any old seal).
fn reseal(path: &Path) -> Result<Repair, ThreadError> {
    let text = std::fs::read_to_string(path).map_err(|error| io(path, error))?;
    let mut value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| ThreadError::Corrupt {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    if let Some(object) = value.as_object_mut() {
        object.remove("seal");
    }
    write_json(path, &value)?;
    Ok(Repair::Resealed {
        path: path.to_path_buf(),
    })
}

fn io(path: &Path, error: std::io::Error) -> ThreadError {
    ThreadError::Io {
        path: path.to_path_buf(),
        error,
    }
}
