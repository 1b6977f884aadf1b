//! Switching the workspace's one board from its spec to another (`ralph construct other.md
//! --switch`, [`Ralph::switch_spec`](crate::Ralph::switch_spec)).
//!
//! ```
//! use ralph::{FakeAgent, Ralph};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! let dir = tempfile::tempdir()?;
//! std::fs::write(dir.path().join("one.md"), "# One\n")?;
//! std::fs::write(dir.path().join("two.md"), "# Two\n")?;
//! let ralph = Ralph::builder().workspace(dir.path()).agent(FakeAgent::new()).build()?;
//! // A board with no spec on record yet has nothing to archive.
//! assert_eq!(ralph.switch_spec("two.md").await?, None);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A workspace holds one board at a time, so that task ids stay unique and one spend total
//! counts against the limits. A switch moves the board of the spec on record out of the way,
//! into `.ralph/archive/<spec>-<date>/`: the board's file (and the files beside it that are
//! the store's), the spec text the board took in, and, in `archive.json`, the spend of the
//! ledger's `construct` scope. It then brings back the board of the spec switched to from
//! that spec's latest archive, if it has one, and the scope starts again from the spend kept
//! there; without one, the spec's first run starts a board afresh, its spend from 0.
//!
//! Refused while a run holds the workspace ([`Error::Busy`]), over work in the tree that the
//! other spec's run would commit as its own ([`Error::Uncommitted`]: an interrupted task's,
//! or a person's edits of tracked files), and for a store whose file is not in ralph's state
//! folder (a custom store, a progress file kept in the tree): ralph moves only its own files.
//!
//! Crash-safe in the order it works: `archive.json` (which lists the files) is written before
//! anything moves, and deleted last when an archive is brought back; a switch cut short is
//! finished by the same command run again.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::files::{atomic, own};
use crate::runtime::Context;
use crate::runtime::error::{EditError, Error};
use crate::runtime::spend::{Ledger, Spent};
use crate::runtime::workspace::{self, RunLock};

/// The folder of archived boards, in ralph's state folder.
const ARCHIVE: &str = "archive";

/// What an archive holds, in its folder.
const MANIFEST: &str = "archive.json";

/// The state files of a board besides the store's: the spec text it took in.
const BOARD_FILES: &[&str] = &["spec.taken"];

/// `archive.json`: the spec whose board it is, when it was archived, its files (relative to
/// the state folder) and its spend.
#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    spec: String,
    archived_at: String,
    files: Vec<String>,
    spent: Spent,
}

/// Switches the workspace's board to the spec `given`: see the module docs.
/// Returns the archive the board switched from went to (`None` when there was none to move).
pub(crate) async fn switch(ctx: &Context, given: &Path) -> Result<Option<PathBuf>, Error> {
    let _lock = RunLock::take(&ctx.workspace).await?;
    let rel = crate::runtime::spec::check(&ctx.workspace, given)?;
    let rel = rel.to_string_lossy().into_owned();
    let state = workspace::state_dir(&ctx.workspace);
    let store = store_file(ctx, &state)?;
    let board = ctx.store.load().await?;
    let recorded = board.run.spec.clone();
    if recorded.as_deref() == Some(rel.as_str()) {
        // Nothing to move, unless a switch back was cut short after its files came back.
        finish_restore(ctx, &state, &rel)?;
        return Ok(None);
    }
    if let Some(home) = super::home(ctx).await? {
        home.hand_over().await?;
    }
    let ledger = Ledger::open(&ctx.workspace, super::SPEND_SCOPE)?;
    let archived = match recorded {
        Some(from) => Some(archive(&state, &store, &from, ledger.spent())?),
        None => None,
    };
    let back = latest_archive(&state, &rel)?;
    if archived.is_none() && back.is_some() && !(board.tasks.is_empty() && board.issues.is_empty())
    {
        // Tasks or issues a person added before any spec was taken in would be lost.
        return Err(Error::Edit(EditError::Invalid {
            edit: "switch",
            field: "board".into(),
            reason: format!(
                "holds tasks or issues tied to no spec yet, and {rel}'s archived board would                  replace them: run `ralph construct` on a spec first, or remove them"
            ),
        }));
    }
    match back {
        Some(dir) => bring_back(&state, &dir, &ledger)?,
        // The next run starts the board afresh and resets the scope then; done now, so
        // that the archived spend no longer shows as this spec's meanwhile.
        None if archived.is_some() => ledger.reset()?,
        None => {}
    }
    Ok(archived)
}

/// The store's file, relative to the state folder `state`: a switch moves only ralph's own
/// files.
fn store_file(ctx: &Context, state: &Path) -> Result<String, Error> {
    let location = ctx.store.location();
    let inside = location
        .as_deref()
        .and_then(|l| Path::new(l).strip_prefix(state).ok())
        .filter(|rel| rel.components().count() == 1);
    match inside {
        Some(rel) => Ok(rel.to_string_lossy().into_owned()),
        None => Err(Error::Edit(EditError::Invalid {
            edit: "switch",
            field: "store".into(),
            reason: format!(
                "keeps the board {}, not in {}: ralph archives only its own files, so a \
                 switch needs the default store (or another workspace for the other spec)",
                location.map_or("in memory".to_owned(), |l| format!("at {l}")),
                state.display()
            ),
        })),
    }
}

/// Moves the board of `spec` (its store file `store`, the files beside it that start with
/// its name, and [`BOARD_FILES`]) into a new archive folder with its manifest; returns the
/// folder.
fn archive(state: &Path, store: &str, spec: &str, spent: Spent) -> Result<PathBuf, Error> {
    let dir = new_archive_dir(state, spec)?;
    let beside = format!("{store}.");
    let mut files: Vec<String> = list(state)?
        .into_iter()
        .filter(|name| name == store || name.starts_with(&beside))
        .collect();
    files.extend(
        BOARD_FILES
            .iter()
            .filter(|f| state.join(f).exists())
            .map(|f| (*f).to_owned()),
    );
    let manifest = Manifest {
        spec: spec.to_owned(),
        archived_at: crate::time::now_rfc3339(),
        files,
        spent,
    };
    write_manifest(&dir, &manifest)?;
    for file in &manifest.files {
        move_file(&state.join(file), &dir.join(file))?;
    }
    sync(state)?;
    Ok(dir)
}

/// A fresh `archive/<spec>-<date>[-n]` folder: the spec's path with `/` as `-`.
fn new_archive_dir(state: &Path, spec: &str) -> Result<PathBuf, Error> {
    let root = state.join(ARCHIVE);
    own::create_dir_all(&root).map_err(|source| io(&root, source))?;
    let date = crate::time::now_rfc3339()
        .chars()
        .take(10)
        .collect::<String>();
    let base = format!("{}-{date}", spec.replace('/', "-"));
    let mut n = 1;
    loop {
        let name = match n {
            1 => base.clone(),
            n => format!("{base}-{n}"),
        };
        let dir = root.join(name);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
            Err(source) => return Err(io(&dir, source)),
        }
    }
}

/// The latest archive of `spec`'s board, if any.
fn latest_archive(state: &Path, spec: &str) -> Result<Option<PathBuf>, Error> {
    let root = state.join(ARCHIVE);
    let mut found: Option<(String, PathBuf)> = None;
    for name in list(&root)? {
        let dir = root.join(name);
        let Some(manifest) = read_manifest(&dir)? else {
            continue;
        };
        if manifest.spec == spec
            && found
                .as_ref()
                .is_none_or(|(at, _)| manifest.archived_at > *at)
        {
            found = Some((manifest.archived_at, dir));
        }
    }
    Ok(found.map(|(_, dir)| dir))
}

/// Moves the archive `dir`'s files back into `state`, then restarts the ledger's scope from
/// its spend and removes the archive.
fn bring_back(state: &Path, dir: &Path, ledger: &Ledger) -> Result<(), Error> {
    let Some(manifest) = read_manifest(dir)? else {
        return Ok(());
    };
    for file in &manifest.files {
        let from = dir.join(file);
        if from.exists() {
            move_file(&from, &state.join(file))?;
        }
    }
    sync(state)?;
    ledger.restart_from(&manifest.spent)?;
    std::fs::remove_dir_all(dir).map_err(|source| io(dir, source))
}

/// A switch back to `spec` cut short after its files came back (its archive still holds
/// its manifest and nothing else): the ledger and the archive are finished.
fn finish_restore(ctx: &Context, state: &Path, spec: &str) -> Result<(), Error> {
    let Some(dir) = latest_archive(state, spec)? else {
        return Ok(());
    };
    let left = list(&dir)?;
    if left.iter().any(|name| name != MANIFEST) {
        // A board archived earlier and then started afresh: not this board's files.
        return Ok(());
    }
    let ledger = Ledger::open(&ctx.workspace, super::SPEND_SCOPE)?;
    bring_back(state, &dir, &ledger)
}

/// The names of the files in `dir` (none when it does not exist).
fn list(dir: &Path) -> Result<Vec<String>, Error> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(io(dir, source)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| io(dir, source))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

fn write_manifest(dir: &Path, manifest: &Manifest) -> Result<(), Error> {
    let path = dir.join(MANIFEST);
    let text = serde_json::to_vec_pretty(manifest).map_err(std::io::Error::other);
    text.and_then(|text| atomic::replace(&path, &text))
        .map_err(|source| io(&path, source))
}

/// The manifest in `dir`; `None` for a folder without one (no archive of ralph's).
fn read_manifest(dir: &Path) -> Result<Option<Manifest>, Error> {
    let path = dir.join(MANIFEST);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(io(&path, source)),
    };
    serde_json::from_str(&text).map(Some).map_err(|e| {
        io(
            &path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        )
    })
}

fn move_file(from: &Path, to: &Path) -> Result<(), Error> {
    atomic::rename(from, to).map_err(|source| io(from, source))
}

fn sync(dir: &Path) -> Result<(), Error> {
    atomic::sync_dir(dir).map_err(|source| io(dir, source))
}

fn io(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_archive_folder_is_never_reused() {
        let dir = tempfile::tempdir().unwrap();
        let first = new_archive_dir(dir.path(), "docs/auth.md").unwrap();
        let second = new_archive_dir(dir.path(), "docs/auth.md").unwrap();
        let name = first.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("docs-auth.md-2"), "{name}");
        assert_eq!(
            second.file_name().unwrap().to_string_lossy(),
            format!("{name}-2")
        );
    }

    #[test]
    fn the_latest_archive_of_a_spec_is_the_one_brought_back() {
        let dir = tempfile::tempdir().unwrap();
        for (at, spec) in [
            ("2026-01-02", "a.md"),
            ("2026-03-04", "a.md"),
            ("2026-05-06", "b.md"),
        ] {
            let folder = new_archive_dir(dir.path(), spec).unwrap();
            let manifest = Manifest {
                spec: spec.into(),
                archived_at: at.into(),
                files: Vec::new(),
                spent: Spent::default(),
            };
            write_manifest(&folder, &manifest).unwrap();
        }
        let latest = latest_archive(dir.path(), "a.md").unwrap().unwrap();
        let manifest = read_manifest(&latest).unwrap().unwrap();
        assert_eq!(manifest.archived_at, "2026-03-04");
        assert_eq!(latest_archive(dir.path(), "c.md").unwrap(), None);
    }
}
