//! Where logs go, in every mode, and the emitter that sends events to observers and to the
//! current log.
//!
//! Two layouts, one per pipeline that asks for it:
//!
//! * the construct loop's stage logs, `<log_dir>/ralph-<timestamp>-<stage>.log`, with each
//!   agent or gate run's log beside them ([`Logs::run_log`]);
//! * build mode's run folders, `<log_dir>/runs/<spec>/<timestamp>/` holding
//!   `plan-attempt-N.log`, `impl-attempt-N.log` and `verify.log` ([`folder_log`]), with one
//!   event log per call of a mode without stages ([`Logs::open_run`]).
//!
//! Threads keep each run's transcript in `.ralph/runs/<run-id>/output.log`.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::error::Error;
#[cfg(feature = "specs")]
use crate::agent::Role;
use crate::event::{Event, Observer};
use crate::model::Stage;
use crate::time::{file_stamp, now_rfc3339};

/// Sends events to the observers and, one JSON line each, to the current stage log.
#[derive(Clone)]
pub(crate) struct Emitter {
    observers: Arc<[Arc<dyn Observer>]>,
    stage_log: Arc<Mutex<Option<File>>>,
}

impl Emitter {
    pub(crate) fn new(observers: &[Arc<dyn Observer>]) -> Self {
        Emitter {
            observers: observers.into(),
            stage_log: Arc::new(Mutex::new(None)),
        }
    }

    pub(crate) fn emit(&self, event: &Event) {
        self.write_to_log(event);
        trace_event(event);
        for observer in self.observers.iter() {
            observer.on_event(event);
        }
    }

    /// Writes `event` to the current log only: for why a run stopped, which its caller
    /// receives as the error (and the `ralph` command prints), so observers are not told it
    /// a second time.
    #[cfg(feature = "specs")]
    pub(crate) fn log_only(&self, event: &Event) {
        self.write_to_log(event);
    }

    fn write_to_log(&self, event: &Event) {
        if let Some(file) = self
            .stage_log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            // One write per line: `writeln!` on a `File` makes a syscall per formatted piece.
            let at = now_rfc3339();
            let mut line = format!(
                "{at} {}\n",
                serde_json::to_string(event).unwrap_or_default()
            );
            if let Some(text) = event.context_line() {
                line.push_str(&format!("{at} {text}\n"));
            }
            // Logs are for people; a full disk must not stop the run, whose state is in the store.
            let _ = file.write_all(line.as_bytes());
        }
    }

    fn set_stage_log(&self, file: File) {
        *self.stage_log.lock().unwrap_or_else(|e| e.into_inner()) = Some(file);
    }
}

/// Every event also goes to `tracing` (target `ralph`), inside whatever span is current (a
/// stage, an agent run, a gate): embedders see ralph's diagnostics in their own subscriber.
fn trace_event(event: &Event) {
    match event {
        Event::Warning { message } => tracing::warn!(target: "ralph", "{message}"),
        Event::StateRepaired { note } => tracing::warn!(target: "ralph", "state repaired: {note}"),
        Event::Agent { .. } if event.context_line().is_some() => {
            tracing::warn!(target: "ralph", "{event}");
        }
        Event::Agent { detail, .. } => tracing::trace!(target: "ralph", ?detail, "agent"),
        other => {
            let line = other.to_string();
            if !line.is_empty() {
                tracing::info!(target: "ralph", "{line}");
            }
        }
    }
}

/// Names and creates log files under the configured log directory.
#[derive(Clone, Debug)]
pub(crate) struct Logs {
    workspace: PathBuf,
    dir: PathBuf,
    stage: Stage,
    stamp: String,
}

impl Logs {
    pub(crate) fn new(workspace: &Path, dir: &Path) -> Result<Self, Error> {
        let dir = workspace.join(dir);
        std::fs::create_dir_all(&dir).map_err(|source| Error::Io {
            path: dir.clone(),
            source,
        })?;
        Ok(Logs {
            workspace: workspace.to_path_buf(),
            dir,
            stage: Stage::Investigate,
            stamp: file_stamp(),
        })
    }

    /// Opens `ralph-<timestamp>-<stage>.log` for a stage that begins now and routes the
    /// emitter's lines to it. Returns its path.
    pub(crate) fn enter(&mut self, stage: Stage, emitter: &Emitter) -> Result<PathBuf, Error> {
        self.stage = stage;
        self.stamp = file_stamp();
        let (path, file) = self.create(&format!("ralph-{}-{}", self.stamp, stage.file_name()))?;
        emitter.set_stage_log(file);
        Ok(self.relative(&path))
    }

    /// Opens `ralph-<timestamp>-<name>.log` for a whole run of a mode without stages (build
    /// mode, plan mode) and routes the emitter's lines to it. Returns its path.
    #[cfg(feature = "specs")]
    pub(crate) fn open_run(&mut self, name: &str, emitter: &Emitter) -> Result<PathBuf, Error> {
        self.stamp = file_stamp();
        let (path, file) = self.create(&format!("ralph-{}-{}", self.stamp, sanitize(name)))?;
        emitter.set_stage_log(file);
        Ok(self.relative(&path))
    }

    /// A fresh path for a file of the current stage named `name`:
    /// `ralph-<stamp>-<stage>-<name>.log`.
    pub(crate) fn stage_file(&self, name: &str) -> PathBuf {
        let stage = self.stage.file_name();
        let base = format!("ralph-{}-{stage}-{}", self.stamp, sanitize(name));
        unused(&self.dir.join(format!("{base}.log")))
    }

    /// A fresh path for one agent or gate run of the current stage:
    /// `ralph-<stamp>-<stage>-<subject>[-<kind>]-a<attempt>.log`, the kind left out when it
    /// is the stage's own agent role (`build`, `verify`, `decompose`, `investigate`).
    pub(crate) fn run_log(&self, subject: &str, kind: &str, attempt: u32) -> PathBuf {
        let stage = self.stage.file_name();
        let kind = if kind == stage {
            String::new()
        } else {
            format!("-{}", sanitize(kind))
        };
        let base = format!(
            "ralph-{}-{stage}-{}{kind}-a{attempt}",
            self.stamp,
            sanitize(subject)
        );
        unused(&self.dir.join(format!("{base}.log")))
    }

    /// `path` relative to the workspace when inside it (as `kill_log` records it).
    pub(crate) fn relative(&self, path: &Path) -> PathBuf {
        path.strip_prefix(&self.workspace)
            .map(Path::to_path_buf)
            .unwrap_or_else(|_| path.to_path_buf())
    }

    /// Resolves a recorded log path against the workspace.
    pub(crate) fn resolve(&self, path: &Path) -> PathBuf {
        self.workspace.join(path)
    }

    fn create(&self, base: &str) -> Result<(PathBuf, File), Error> {
        let mut n = 0;
        loop {
            let name = if n == 0 {
                format!("{base}.log")
            } else {
                format!("{base}-{n}.log")
            };
            let path = self.dir.join(name);
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(file) => return Ok((path, file)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
                Err(source) => return Err(Error::Io { path, source }),
            }
        }
    }
}

pub(crate) fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect()
}

#[cfg(feature = "specs")]
/// A new run folder `<log_dir>/runs/<name>/<timestamp>/`, created.
pub(crate) fn run_folder(workspace: &Path, log_dir: &Path, name: &str) -> Result<PathBuf, Error> {
    let dir = workspace
        .join(log_dir)
        .join("runs")
        .join(sanitize(name))
        .join(file_stamp());
    std::fs::create_dir_all(&dir).map_err(|source| Error::Io {
        path: dir.clone(),
        source,
    })?;
    Ok(dir)
}

#[cfg(feature = "specs")]
/// The path of one agent run's log in a run folder: `plan-attempt-N.log` (N the plan's
/// attempt), `impl-attempt-N.log` (N counts the implementer sessions in the folder),
/// `verify.log`; a number is added when the name is taken.
pub(crate) fn folder_log(dir: &Path, role: Role, attempt: u32) -> PathBuf {
    let base = match role {
        Role::Planner => format!("plan-attempt-{attempt}"),
        Role::Build => {
            let n = (1..)
                .find(|n| !dir.join(format!("impl-attempt-{n}.log")).exists())
                .unwrap_or(1);
            format!("impl-attempt-{n}")
        }
        Role::Verify => "verify".to_owned(),
        other => format!("{other}-attempt-{attempt}"),
    };
    unused(&dir.join(format!("{base}.log")))
}

/// `path` if nothing is there yet, else the first free `<stem>-<n>.log` beside it (n from
/// 2): a retried run never writes into an earlier run's log.
pub(crate) fn unused(path: &Path) -> PathBuf {
    if !path.exists() {
        return path.to_path_buf();
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    (2..)
        .map(|n| dir.join(format!("{stem}-{n}.log")))
        .find(|p| !p.exists())
        .unwrap_or_else(|| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sortable_and_unique() {
        let dir = tempfile::tempdir().unwrap();
        let mut logs = Logs::new(dir.path(), Path::new("build/ralph-logs")).unwrap();
        let emitter = Emitter::new(&[]);
        let a = logs.enter(Stage::Build, &emitter).unwrap();
        let b = logs.enter(Stage::Build, &emitter).unwrap();
        assert_ne!(a, b);
        let name = a.file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with("ralph-20") && name.ends_with("-build.log"),
            "{name}"
        );
        assert!(a.starts_with("build/ralph-logs"));
        let run = logs.run_log("agent", "t/1 x", 2);
        assert!(
            run.to_str().unwrap().ends_with("-build-agent-t_1_x-a2.log"),
            "{run:?}"
        );
    }

    #[test]
    fn folder_logs_are_named_by_role() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert!(folder_log(d, Role::Planner, 2).ends_with("plan-attempt-2.log"));
        let first = folder_log(d, Role::Build, 1);
        assert!(first.ends_with("impl-attempt-1.log"));
        std::fs::write(&first, "").unwrap();
        assert!(folder_log(d, Role::Build, 1).ends_with("impl-attempt-2.log"));
        let verify = folder_log(d, Role::Verify, 1);
        assert!(verify.ends_with("verify.log"));
        std::fs::write(&verify, "").unwrap();
        assert!(folder_log(d, Role::Verify, 2).ends_with("verify-2.log"));
    }
}
