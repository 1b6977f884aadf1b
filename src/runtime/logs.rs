//! Where logs go, in every mode, and the emitter that sends events to observers and to the
//! current log.
//!
//! Two layouts, one per pipeline that asks for it:
//!
//! * the construct loop's stage logs, `<log_dir>/ralph-<timestamp>-<stage>.log`, with each
//!   agent or gate run's log beside them ([`Logs::run_log`]);
//! * build mode's run folders, `<log_dir>/runs/<spec>/<timestamp>/` holding
//!   `plan-attempt-N.log`, `impl-attempt-N.log` and `verify.log` (`specs::logs`), with one
//!   event log per call of a mode without stages ([`Logs::open_run`]).
//!
//! Threads keep each run's transcript in `.ralph/runs/<run-id>/output.log`.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::error::Error;
use super::hooks::{HookFailed, Hooks};
use crate::event::{Event, Observer};
use crate::files::capped::CappedLog;
use crate::model::Stage;
use crate::process::StopToken;
use crate::time::{file_stamp, now_rfc3339};

/// Sends events to the observers, one JSON line each to the current stage log, and to the
/// `[[hooks]]` on them.
#[derive(Clone)]
pub(crate) struct Emitter {
    observers: Arc<[Arc<dyn Observer>]>,
    stage_log: Arc<Mutex<Option<CappedLog>>>,
    hooks: Option<Hooks>,
    /// How the run is confined, for its `finished` event.
    sandbox: Option<Arc<str>>,
    /// The run's stop token: a signal that stopped it sets the `finished` event's exit code.
    stop: Option<StopToken>,
}

impl Emitter {
    /// An emitter to `observers`, without hooks (see [`with_hooks`](Self::with_hooks)).
    pub(crate) fn new(observers: &[Arc<dyn Observer>]) -> Self {
        Emitter {
            observers: observers.into(),
            stage_log: Arc::new(Mutex::new(None)),
            hooks: None,
            sandbox: None,
            stop: None,
        }
    }

    /// The same emitter, its `finished` event's exit code that of the signal that stopped
    /// `stop`, when one did (143 for SIGTERM, not the 130 of every interrupt).
    #[must_use]
    pub(crate) fn with_stop(mut self, stop: StopToken) -> Self {
        self.stop = Some(stop);
        self
    }

    /// The same emitter, its `finished` event saying how the run was confined.
    #[must_use]
    pub(crate) fn with_sandbox(mut self, label: String) -> Self {
        self.sandbox = Some(label.into());
        self
    }

    /// The same emitter, offering each event to `hooks` too.
    #[must_use]
    pub(crate) fn with_hooks(mut self, hooks: Option<Hooks>) -> Self {
        self.hooks = hooks;
        self
    }

    pub(crate) fn emit(&self, event: &Event) {
        self.write_to_log(event);
        trace_event(event);
        for observer in self.observers.iter() {
            observer.on_event(event);
        }
        if let Some(hooks) = &self.hooks {
            // A hook's failure is told without hooks: a hook on `warning` must not loop.
            hooks.offer(event, || {
                let plain = Emitter {
                    hooks: None,
                    ..self.clone()
                };
                Arc::new(move |warning: Event| plain.emit(&warning))
            });
        }
    }

    /// Ends a run with its [`Finished`](Event::Finished) event, in every mode: waits for the
    /// hooks of the run's earlier events, emits `finished` (saying so when a required hook
    /// already failed), then waits for the hooks on it. Call it while the run still holds
    /// the workspace's lock, so that no other run sweeps the hooks' processes.
    ///
    /// # Errors
    ///
    /// The first required hook that failed during the run or on its end: the run's call
    /// fails with it.
    pub(crate) async fn finish(&self, mut event: Event) -> Result<(), HookFailed> {
        if let (Some(label), Event::Finished { sandbox, .. }) = (&self.sandbox, &mut event) {
            *sandbox = label.to_string();
        }
        let signal = self.stop.as_ref().and_then(StopToken::signal_exit_code);
        if let (Some(code), Event::Finished { exit_code, .. }) = (signal, &mut event)
            && *exit_code == 130
        {
            *exit_code = i32::from(code);
        }
        let Some(hooks) = &self.hooks else {
            self.emit(&event);
            return Ok(());
        };
        let earlier = hooks.flush().await;
        // A run that failed says its own error; the hook's was a warning already.
        if let (
            Err(failed),
            Event::Finished {
                error: error @ None,
                message,
                exit_code,
                needs_person,
                ..
            },
        ) = (&earlier, &mut event)
        {
            let said = failed.to_string();
            *message = format!("{message}; {said}");
            *error = Some(said);
            *exit_code = 1;
            *needs_person = true;
        }
        self.emit(&event);
        let last = hooks.flush().await;
        earlier.and(last)
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

    /// Routes the lines to `file` from now on; the log it replaces is cut to its head and
    /// tail.
    fn set_stage_log(&self, file: CappedLog) {
        let mut log = self.stage_log.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = log.as_mut() {
            let _ = old.finish();
        }
        *log = Some(file);
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
    /// Log files kept in `dir` (`log_files_kept`).
    keep: usize,
    /// Stages entered: the logs are pruned every [`PRUNE_EVERY`] of them.
    entered: usize,
}

/// Stages between two prunings of the log folder within a run: a listing of a thousand
/// files per stage would cost more than the stage's own bookkeeping.
const PRUNE_EVERY: usize = 64;

impl Logs {
    /// The logs of a run that starts now, in `dir` (relative to `workspace`), made if
    /// missing; the oldest logs beyond `keep` files are deleted.
    pub(crate) fn new(workspace: &Path, dir: &Path, keep: usize) -> Result<Self, Error> {
        let dir = workspace.join(dir);
        crate::files::own::create_own_dir(&dir).map_err(|source| Error::Io {
            path: dir.clone(),
            source,
        })?;
        prune(&dir, keep);
        Ok(Logs {
            workspace: workspace.to_path_buf(),
            dir,
            stage: Stage::Investigate,
            stamp: file_stamp(),
            keep,
            entered: 0,
        })
    }

    /// Opens `ralph-<timestamp>-<stage>.log` for a stage that begins now and routes the
    /// emitter's lines to it. Returns its path.
    pub(crate) fn enter(&mut self, stage: Stage, emitter: &Emitter) -> Result<PathBuf, Error> {
        self.stage = stage;
        self.entered += 1;
        if self.entered.is_multiple_of(PRUNE_EVERY) {
            prune(&self.dir, self.keep);
        }
        self.open_run(stage.file_name(), emitter)
    }

    /// Opens `ralph-<timestamp>-<name>.log` for a whole run of a mode without stages (build
    /// mode, plan mode), or for a stage, and routes the emitter's lines to it. Returns its
    /// path.
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

    /// The path for one agent run of the current stage:
    /// `ralph-<stamp>-<stage>-<subject>[-<kind>]-a<attempt>.log`, the kind left out when it
    /// is the stage's own agent role (`build`, `verify`, `decompose`, `investigate`). Not
    /// yet fresh: the run that uses it takes the first unused name from it (see
    /// [`Caller`](super::call::Caller)), so that a run made again after a wait gets its own.
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
        self.dir.join(format!("{base}.log"))
    }

    /// `path` relative to the workspace when inside it (as `kill_log` records it).
    pub(crate) fn relative(&self, path: &Path) -> PathBuf {
        super::workspace::relative(&self.workspace, path)
    }

    /// Resolves a recorded log path against the workspace.
    pub(crate) fn resolve(&self, path: &Path) -> PathBuf {
        self.workspace.join(path)
    }

    #[allow(clippy::disallowed_methods)] // a log, not a state file
    fn create(&self, base: &str) -> Result<(PathBuf, CappedLog), Error> {
        let mut n = 0;
        loop {
            let name = if n == 0 {
                format!("{base}.log")
            } else {
                format!("{base}-{n}.log")
            };
            let path = self.dir.join(name);
            match OpenOptions::new()
                .read(true)
                .append(true)
                .create_new(true)
                .open(&path)
                .and_then(CappedLog::new)
            {
                Ok(log) => return Ok((path, log)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
                Err(source) => return Err(Error::Io { path, source }),
            }
        }
    }
}

/// Deletes the oldest files under `dir` (through its subfolders, by modification time)
/// beyond `keep`, then the folders left empty. Best effort: a log that cannot be listed or
/// deleted costs disk space, never the run.
fn prune(dir: &Path, keep: usize) {
    prune_matching(dir, keep, |_| true);
}

/// Deletes the oldest of the files under `dir` that `counts` beyond `keep`; everything
/// else stays. Threads keep each run's record (`run.json`, history) beside its transcript
/// (`output.log`, up to a capped log's size): only transcripts count, and are given up.
pub(crate) fn prune_matching(dir: &Path, keep: usize, counts: impl Fn(&Path) -> bool) {
    let mut files = Vec::new();
    list_files(dir, &mut files);
    files.retain(|(_, path)| counts(path));
    delete_oldest(dir, files, keep);
}

fn delete_oldest(dir: &Path, mut files: Vec<(std::time::SystemTime, PathBuf)>, keep: usize) {
    if files.len() <= keep {
        return;
    }
    files.sort();
    let excess = files.len() - keep;
    for (_, path) in files.into_iter().take(excess) {
        let _ = std::fs::remove_file(&path);
        // Only a folder left empty goes (`remove_dir` refuses any other), up to `dir`.
        for folder in path.ancestors().skip(1).take_while(|f| *f != dir) {
            if std::fs::remove_dir(folder).is_err() {
                break;
            }
        }
    }
}

/// The files under `dir` with their modification times, but its own `.gitignore`.
fn list_files(dir: &Path, files: &mut Vec<(std::time::SystemTime, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            list_files(&entry.path(), files);
        } else if entry.file_name() != ".gitignore"
            && let Ok(modified) = entry.metadata().and_then(|m| m.modified())
        {
            files.push((modified, entry.path()));
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
#[allow(clippy::disallowed_methods)] // tests write their fixtures directly
mod tests {
    use super::*;

    #[test]
    fn the_oldest_logs_beyond_the_limit_go_with_the_folders_left_empty() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path();
        let old = logs.join("runs/spec/1");
        std::fs::create_dir_all(&old).unwrap();
        std::fs::write(logs.join(".gitignore"), "*\n").unwrap();
        let t0 = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000);
        let write = |path: &Path, age: u64| {
            std::fs::write(path, "x").unwrap();
            let file = std::fs::File::options().write(true).open(path).unwrap();
            file.set_modified(t0 + std::time::Duration::from_secs(age))
                .unwrap();
        };
        write(&old.join("verify.log"), 1);
        write(&logs.join("ralph-a.log"), 2);
        write(&logs.join("ralph-b.log"), 3);
        write(&logs.join("ralph-c.log"), 4);
        prune(logs, 2);
        assert!(!logs.join("runs").exists(), "the emptied folders went too");
        assert!(!logs.join("ralph-a.log").exists());
        assert!(logs.join("ralph-b.log").exists() && logs.join("ralph-c.log").exists());
        assert!(
            logs.join(".gitignore").exists(),
            "not a log: never counted nor deleted"
        );
    }

    #[test]
    fn only_the_oldest_transcripts_beyond_the_limit_go_and_run_records_stay() {
        let dir = tempfile::tempdir().unwrap();
        let runs = dir.path();
        let t0 = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000);
        for (i, run) in ["th-r1", "th-r2", "th-r3"].into_iter().enumerate() {
            let folder = runs.join(run);
            std::fs::create_dir_all(&folder).unwrap();
            for name in ["run.json", "output.log"] {
                std::fs::write(folder.join(name), "x").unwrap();
                let file = std::fs::File::options()
                    .write(true)
                    .open(folder.join(name))
                    .unwrap();
                file.set_modified(t0 + std::time::Duration::from_secs(i as u64))
                    .unwrap();
            }
        }
        prune_matching(runs, 2, |p| {
            p.file_name().is_some_and(|n| n == "output.log")
        });
        assert!(!runs.join("th-r1/output.log").exists(), "the oldest went");
        for kept in [
            "th-r1/run.json",
            "th-r2/output.log",
            "th-r3/output.log",
            "th-r2/run.json",
        ] {
            assert!(runs.join(kept).exists(), "{kept} was kept");
        }
    }

    #[test]
    fn names_are_sortable_and_unique() {
        let dir = tempfile::tempdir().unwrap();
        let mut logs = Logs::new(dir.path(), Path::new("build/ralph-logs"), 1000).unwrap();
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
