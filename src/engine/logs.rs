//! Stage logs (`build/ralph-logs/ralph-<timestamp>-<stage>.log`), agent and gate run logs
//! beside them, and the emitter that sends events to observers and the stage log.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::Error;
use crate::event::{Event, Observer};
use crate::model::Stage;

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
        if let Some(file) = self
            .stage_log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            // One write per line: `writeln!` on a `File` makes a syscall per formatted piece.
            let line = format!(
                "{} {}\n",
                now_rfc3339(),
                serde_json::to_string(event).unwrap_or_default()
            );
            // Logs are for people; a full disk must not stop the run, whose state is in the store.
            let _ = file.write_all(line.as_bytes());
        }
        for observer in self.observers.iter() {
            observer.on_event(event);
        }
    }

    fn set_stage_log(&self, file: File) {
        *self.stage_log.lock().unwrap_or_else(|e| e.into_inner()) = Some(file);
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
    pub(crate) fn open_run(&mut self, name: &str, emitter: &Emitter) -> Result<PathBuf, Error> {
        self.stamp = file_stamp();
        let (path, file) = self.create(&format!("ralph-{}-{}", self.stamp, sanitize(name)))?;
        emitter.set_stage_log(file);
        Ok(self.relative(&path))
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
        unique_path(&self.dir, &base)
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

fn unique_path(dir: &Path, base: &str) -> PathBuf {
    let first = dir.join(format!("{base}.log"));
    if !first.exists() {
        return first;
    }
    (1..)
        .map(|n| dir.join(format!("{base}-{n}.log")))
        .find(|p| !p.exists())
        .unwrap_or(first)
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

/// `20260119T103000.123Z`: sortable, no colons (valid on every file system).
pub(crate) fn file_stamp() -> String {
    let now = jiff::Timestamp::now();
    format!(
        "{}.{:03}Z",
        now.strftime("%Y%m%dT%H%M%S"),
        now.subsec_millisecond()
    )
}

/// The current time as RFC 3339 (`2026-01-19T10:30:00.123Z`).
pub(crate) fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Millisecond)
        .map(|t| t.to_string())
        .unwrap_or_default()
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
}
