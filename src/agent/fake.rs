//! `FakeAgent`: a deterministic, scripted [`Agent`] for tests, CI and demos.

use std::fmt;
use std::io::Write as _;
use std::path::{Component, Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{
    Agent, AgentError, AgentEvent, AgentExit, AgentRequest, AgentRun, FailureKind, Role, Usage,
};
use crate::context::{ContextAction, ContextMonitor};

/// One thing a fake run does. Steps run in order; the run ends after the last one. Built
/// with [`Script`]'s methods, or read from a script file (one TOML table per step, named
/// as the method: `{ answer = "…" }`, `{ write = { path = "…", content = "…" } }`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum Step {
    /// Sets the final answer's text (the last one wins).
    Answer(String),
    /// Sets the structured answer (and, if no answer is set, the final text to its JSON).
    Json(serde_json::Value),
    /// Writes a file in the workspace (creating directories).
    Write {
        /// Path relative to the workspace.
        path: PathBuf,
        /// New contents.
        content: String,
    },
    /// Appends to a file in the workspace.
    Append {
        /// Path relative to the workspace.
        path: PathBuf,
        /// Text to append.
        content: String,
    },
    /// Removes a file in the workspace.
    Remove(PathBuf),
    /// Prints a line to the run's log, `times` times (for log-excerpt tests).
    Print {
        /// The line.
        line: String,
        /// How often. Default 1.
        #[serde(default = "one")]
        times: usize,
    },
    /// Waits until the run is stopped or times out.
    Hang {},
    /// Waits, unless the run is stopped or times out first.
    Delay(#[serde(with = "crate::config::duration")] Duration),
    /// Reports context usage; the run reacts as a real agent would (warn, compact, kill).
    Usage {
        /// Tokens in the context now.
        context: u64,
        /// The model's window.
        window: u64,
        /// Context after a compaction, if the run compacts; none means compaction fails.
        #[serde(default)]
        after_compaction: Option<u64>,
    },
    /// Ends the run as failed.
    Fail {
        /// Why.
        reason: String,
        /// How the engine should treat it. Default `attempt`.
        #[serde(default = "attempt_kind")]
        kind: FailureKind,
    },
    /// Ends the run as rate limited for `secs` seconds.
    RateLimit {
        /// Seconds until the limit resets.
        secs: u64,
    },
}

fn one() -> usize {
    1
}

fn attempt_kind() -> FailureKind {
    FailureKind::Attempt
}

/// The steps of one fake run, in order; the run ends after the last one.
///
/// ```
/// use ralph::agent::Script;
///
/// let build = Script::new()
///     .write("hello.txt", "hello\n")
///     .print("compiling…", 3)
///     .answer("Wrote hello.txt.\n<TASK_DONE>");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Script {
    steps: Vec<Step>,
}

impl Script {
    /// An empty script (the run completes with an empty answer).
    pub fn new() -> Self {
        Self::default()
    }

    fn step(mut self, step: Step) -> Self {
        self.steps.push(step);
        self
    }

    /// Sets the final answer's text (the last one wins).
    #[must_use]
    pub fn answer(self, text: impl Into<String>) -> Self {
        self.step(Step::Answer(text.into()))
    }

    /// Sets the structured answer (and, if no answer is set, the final text to its JSON).
    #[must_use]
    pub fn json(self, value: serde_json::Value) -> Self {
        self.step(Step::Json(value))
    }

    /// Writes a file in the workspace (creating folders); `path` is relative to it.
    #[must_use]
    pub fn write(self, path: impl Into<PathBuf>, content: impl Into<String>) -> Self {
        self.step(Step::Write {
            path: path.into(),
            content: content.into(),
        })
    }

    /// Appends to a file in the workspace.
    #[must_use]
    pub fn append(self, path: impl Into<PathBuf>, content: impl Into<String>) -> Self {
        self.step(Step::Append {
            path: path.into(),
            content: content.into(),
        })
    }

    /// Removes a file in the workspace.
    #[must_use]
    pub fn remove(self, path: impl Into<PathBuf>) -> Self {
        self.step(Step::Remove(path.into()))
    }

    /// Prints `line` to the run's log, `times` times.
    #[must_use]
    pub fn print(self, line: impl Into<String>, times: usize) -> Self {
        self.step(Step::Print {
            line: line.into(),
            times,
        })
    }

    /// Waits until the run is stopped or times out.
    #[must_use]
    pub fn hang(self) -> Self {
        self.step(Step::Hang {})
    }

    /// Waits, unless the run is stopped or times out first.
    #[must_use]
    pub fn delay(self, duration: Duration) -> Self {
        self.step(Step::Delay(duration))
    }

    /// Reports context usage (`context` tokens of a `window`); the run reacts as a real agent
    /// would: warns, compacts to `after_compaction` (none: the compaction fails), or is
    /// killed at the limit.
    #[must_use]
    pub fn usage(self, context: u64, window: u64, after_compaction: Option<u64>) -> Self {
        self.step(Step::Usage {
            context,
            window,
            after_compaction,
        })
    }

    /// Ends the run as failed, counting as an attempt ([`FailureKind::Attempt`]).
    #[must_use]
    pub fn fail(self, reason: impl Into<String>) -> Self {
        self.step(Step::Fail {
            reason: reason.into(),
            kind: FailureKind::Attempt,
        })
    }

    /// Ends the run as failed, of the given kind.
    #[must_use]
    pub fn fail_with(self, reason: impl Into<String>, kind: FailureKind) -> Self {
        self.step(Step::Fail {
            reason: reason.into(),
            kind,
        })
    }

    /// Ends the run as rate limited for `secs` seconds.
    #[must_use]
    pub fn rate_limit(self, secs: u64) -> Self {
        self.step(Step::RateLimit { secs })
    }
}

/// A script, and which requests it answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    #[serde(default)]
    role: Option<Role>,
    #[serde(default)]
    subject: Option<String>,
    #[serde(default)]
    attempt: Option<u32>,
    #[serde(default)]
    repeat: bool,
    #[serde(default)]
    steps: Script,
    #[serde(skip)]
    consumed: bool,
}

impl Entry {
    fn matches(&self, role: Role, subject: Option<&str>, attempt: u32) -> bool {
        (self.repeat || !self.consumed)
            && self.role.is_none_or(|r| r == role)
            && self.subject.as_deref().is_none_or(|s| Some(s) == subject)
            && self.attempt.is_none_or(|a| a == attempt)
    }

    /// Higher is more specific; sequence entries (no role) are the least specific.
    fn specificity(&self) -> u8 {
        u8::from(self.role.is_some())
            + 2 * u8::from(self.subject.is_some())
            + u8::from(self.attempt.is_some())
    }

    fn describe(&self) -> String {
        let mut key = match self.role {
            Some(role) => role.to_string(),
            None => "any role (sequence)".to_owned(),
        };
        if let Some(subject) = &self.subject {
            key.push_str(&format!(" {subject}"));
        }
        if let Some(attempt) = self.attempt {
            key.push_str(&format!(" attempt {attempt}"));
        }
        if self.repeat {
            key.push_str(" (repeat)");
        }
        key
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptFile {
    #[serde(default)]
    run: Vec<Entry>,
}

/// `FakeAgent`: a deterministic, scripted [`Agent`] for tests, CI and demos.
///
/// A fake agent holds *entries*: a [`Script`] (the steps of one run) plus what requests it
/// answers — a role, optionally a subject (task or issue id) and an attempt number. Entries
/// with no role answer any request, in order ("in sequence"). Each request takes the most
/// specific unconsumed matching entry; ties go to the earliest. Entries are consumed once
/// unless marked `repeat`.
///
/// Attempt numbers come from the persisted board, so a script keyed by attempt behaves the
/// same when a killed run is resumed by a new process.
///
/// ```
/// use ralph::agent::{FakeAgent, Role, Script};
///
/// let agent = FakeAgent::new()
///     .on(Role::Build, "t-1", Script::new().write("hello.txt", "hello\n").answer("Done.\n<TASK_DONE>"))
///     .on_role(Role::Verify, Script::new().json(serde_json::json!({"verdict": "accept", "reason": "ok"})));
/// assert_eq!(agent.unconsumed().len(), 2);
/// ```
///
/// Scripts can also be written in TOML (see [`FakeAgent::from_toml`]):
///
/// ```toml
/// [[run]]
/// role = "build"
/// subject = "t-1"
/// attempt = 1
/// [[run.steps]]
/// write = { path = "src/lib.rs", content = "pub fn f() {}\n" }
/// [[run.steps]]
/// answer = "Implemented.\n<TASK_DONE>"
/// ```
#[derive(Default)]
pub struct FakeAgent {
    state: Mutex<State>,
    record_file: Option<PathBuf>,
}

#[derive(Debug, Default)]
struct State {
    entries: Vec<Entry>,
    requests: Vec<AgentRequest>,
}

impl fmt::Debug for FakeAgent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("FakeAgent")
            .field("entries", &state.entries.len())
            .field("requests", &state.requests.len())
            .finish()
    }
}

impl FakeAgent {
    /// A fake agent with no scripts.
    pub fn new() -> Self {
        Self::default()
    }

    fn push(mut self, entry: Entry) -> Self {
        self.state
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .entries
            .push(entry);
        self
    }

    fn entry(
        role: Option<Role>,
        subject: Option<&str>,
        attempt: Option<u32>,
        script: Script,
    ) -> Entry {
        Entry {
            role,
            subject: subject.map(str::to_owned),
            attempt,
            repeat: false,
            steps: script,
            consumed: false,
        }
    }

    /// Answers the next `role` request about `subject` with `script`.
    #[must_use]
    pub fn on(self, role: Role, subject: &str, script: Script) -> Self {
        self.push(Self::entry(Some(role), Some(subject), None, script))
    }

    /// Answers the `role` request about `subject` at `attempt` with `script`.
    #[must_use]
    pub fn on_attempt(self, role: Role, subject: &str, attempt: u32, script: Script) -> Self {
        self.push(Self::entry(
            Some(role),
            Some(subject),
            Some(attempt),
            script,
        ))
    }

    /// Answers the next `role` request, whatever its subject.
    #[must_use]
    pub fn on_role(self, role: Role, script: Script) -> Self {
        self.push(Self::entry(Some(role), None, None, script))
    }

    /// Answers every `role` request not matched by a more specific entry.
    #[must_use]
    pub fn always(self, role: Role, script: Script) -> Self {
        let mut entry = Self::entry(Some(role), None, None, script);
        entry.repeat = true;
        self.push(entry)
    }

    /// Answers the next request of any role, in the order these were added.
    #[must_use]
    pub fn then(self, script: Script) -> Self {
        self.push(Self::entry(None, None, None, script))
    }

    /// Also appends one NDJSON line per request to `path`, so runs across several processes
    /// can be checked afterwards.
    #[must_use]
    pub fn record_to(mut self, path: impl Into<PathBuf>) -> Self {
        self.record_file = Some(path.into());
        self
    }

    /// Loads entries from TOML (the format is in the [`FakeAgent`] docs).
    ///
    /// # Errors
    ///
    /// [`AgentError::BadScript`] naming `origin` and the TOML error's position.
    pub fn from_toml(text: &str, origin: impl Into<PathBuf>) -> Result<Self, AgentError> {
        let file: ScriptFile = toml::from_str(text).map_err(|e| AgentError::BadScript {
            path: origin.into(),
            message: e.to_string(),
        })?;
        Ok(file.run.into_iter().fold(Self::new(), Self::push))
    }

    /// Loads entries from a TOML file.
    ///
    /// # Errors
    ///
    /// [`AgentError::BadScript`] when the file cannot be read or parsed.
    pub fn from_toml_file(path: impl AsRef<Path>) -> Result<Self, AgentError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| AgentError::BadScript {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Self::from_toml(&text, path)
    }

    /// Every request received, in order, as received.
    pub fn requests(&self) -> Vec<AgentRequest> {
        self.lock().requests.clone()
    }

    /// Descriptions of entries never used (repeat entries are never reported).
    pub fn unconsumed(&self) -> Vec<String> {
        self.lock()
            .entries
            .iter()
            .filter(|e| !e.consumed && !e.repeat)
            .map(Entry::describe)
            .collect()
    }

    /// Checks that every non-repeat entry was used.
    ///
    /// # Errors
    ///
    /// [`AgentError::ScriptsLeft`] listing the unused entries.
    pub fn verify(&self) -> Result<(), AgentError> {
        let left = self.unconsumed();
        if left.is_empty() {
            Ok(())
        } else {
            Err(AgentError::ScriptsLeft { entries: left })
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the request and takes its script.
    fn take_script(&self, request: &AgentRequest) -> Result<Script, AgentError> {
        let mut state = self.lock();
        let subject = request.subject.as_deref();
        state.requests.push(request.clone());
        let best = state
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.matches(request.role, subject, request.attempt))
            .max_by_key(|(i, e)| (e.specificity(), std::cmp::Reverse(*i)))
            .map(|(i, _)| i);
        let Some(index) = best else {
            return Err(AgentError::NoScript {
                role: request.role,
                subject: request.subject.clone(),
                attempt: request.attempt,
                available: state
                    .entries
                    .iter()
                    .filter(|e| !e.consumed || e.repeat)
                    .map(Entry::describe)
                    .collect(),
            });
        };
        let entry = &mut state.entries[index];
        entry.consumed = true;
        Ok(entry.steps.clone())
    }

    fn record_line(&self, request: &AgentRequest) {
        let Some(path) = &self.record_file else {
            return;
        };
        let line = serde_json::json!({
            "role": request.role,
            "subject": request.subject,
            "attempt": request.attempt,
        });
        // Best effort: the record is a test aid, and a failure to write it must not change
        // the run being recorded. One write per line, so a kill cannot split a line.
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = file.write_all(format!("{line}\n").as_bytes());
        }
    }
}

#[async_trait]
impl Agent for FakeAgent {
    fn name(&self) -> &str {
        "fake"
    }

    async fn run(&self, request: AgentRequest) -> Result<AgentRun, AgentError> {
        let script = self.take_script(&request)?;
        self.record_line(&request);
        let mut run = FakeRun::new(&request)?;
        let exit = run.execute(&request, &script.steps).await?;
        Ok(run.finish(exit))
    }
}

/// The state of one fake run in progress.
struct FakeRun {
    started: Instant,
    deadline: Option<tokio::time::Instant>,
    log: Option<std::fs::File>,
    log_path: Option<PathBuf>,
    final_text: Option<String>,
    structured: Option<serde_json::Value>,
    usage: Usage,
}

/// Why a wait ended early.
enum Interrupted {
    Stopped,
    TimedOut,
}

impl FakeRun {
    fn new(request: &AgentRequest) -> Result<Self, AgentError> {
        let log = match &request.log_path {
            Some(path) => Some(open_log(path)?),
            None => None,
        };
        Ok(FakeRun {
            started: Instant::now(),
            deadline: request.timeout.map(|t| tokio::time::Instant::now() + t),
            log,
            log_path: request.log_path.clone(),
            final_text: None,
            structured: None,
            usage: Usage::default(),
        })
    }

    fn log(&mut self, line: &str) {
        if let Some(file) = &mut self.log {
            // The transcript is a diagnostic copy; a full disk must not fail the run itself.
            // One write per line (`writeln!` would make two).
            let _ = file.write_all(format!("{line}\n").as_bytes());
        }
    }

    async fn execute(
        &mut self,
        request: &AgentRequest,
        steps: &[Step],
    ) -> Result<AgentExit, AgentError> {
        self.log(&format!(
            "[fake] {} {} attempt {}",
            request.role,
            request.subject.as_deref().unwrap_or("-"),
            request.attempt
        ));
        for step in steps {
            if let Some(exit) = self.step(request, step).await? {
                return Ok(exit);
            }
        }
        Ok(AgentExit::Completed)
    }

    /// Runs one step; `Some(exit)` ends the run.
    async fn step(
        &mut self,
        request: &AgentRequest,
        step: &Step,
    ) -> Result<Option<AgentExit>, AgentError> {
        match step {
            Step::Answer(text) => {
                self.log(text);
                self.final_text = Some(text.clone());
            }
            Step::Json(value) => {
                self.log(&value.to_string());
                self.structured = Some(value.clone());
            }
            Step::Write { path, content } => {
                let full = workspace_path(&request.workspace, path)?;
                self.log(&format!(
                    "[fake] write {} ({} bytes)",
                    path.display(),
                    content.len()
                ));
                write_file(&full, content, false)?;
            }
            Step::Append { path, content } => {
                let full = workspace_path(&request.workspace, path)?;
                self.log(&format!(
                    "[fake] append {} ({} bytes)",
                    path.display(),
                    content.len()
                ));
                write_file(&full, content, true)?;
            }
            Step::Remove(path) => {
                let full = workspace_path(&request.workspace, path)?;
                self.log(&format!("[fake] remove {}", path.display()));
                std::fs::remove_file(&full)
                    .map_err(|source| AgentError::Io { path: full, source })?;
            }
            Step::Print { line, times } => {
                for _ in 0..*times {
                    self.log(line);
                }
            }
            Step::Hang {} => {
                self.log("[fake] hanging until stopped");
                return Ok(Some(self.interrupted_exit(self.wait(request, None).await)));
            }
            Step::Delay(duration) => {
                if let Some(why) = self.wait(request, Some(*duration)).await {
                    return Ok(Some(self.interrupted_exit(Some(why))));
                }
            }
            Step::Usage {
                context,
                window,
                after_compaction,
            } => return Ok(self.usage_step(request, *context, *window, *after_compaction)),
            Step::Fail { reason, kind } => {
                self.log(&format!("[fake] fail: {reason}"));
                return Ok(Some(AgentExit::Failed {
                    reason: reason.clone(),
                    kind: *kind,
                }));
            }
            Step::RateLimit { secs } => {
                self.log(&format!("[fake] rate limited for {secs}s"));
                return Ok(Some(AgentExit::RateLimited {
                    until: SystemTime::now() + Duration::from_secs(*secs),
                }));
            }
        }
        Ok(None)
    }

    /// Waits for `duration` (forever if `None`); returns why it ended early, if it did.
    async fn wait(
        &self,
        request: &AgentRequest,
        duration: Option<Duration>,
    ) -> Option<Interrupted> {
        let sleep = async {
            match duration {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        let deadline = async {
            match self.deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = sleep => None,
            () = request.stop.cancelled() => Some(Interrupted::Stopped),
            () = deadline => Some(Interrupted::TimedOut),
        }
    }

    fn interrupted_exit(&mut self, why: Option<Interrupted>) -> AgentExit {
        match why {
            Some(Interrupted::TimedOut) => {
                self.log("[fake] timed out");
                AgentExit::TimedOut
            }
            // A hang that ends without stop or deadline cannot happen; treat it as stopped.
            Some(Interrupted::Stopped) | None => {
                self.log("[fake] stopped");
                AgentExit::Stopped
            }
        }
    }

    fn usage_step(
        &mut self,
        request: &AgentRequest,
        context: u64,
        window: u64,
        after_compaction: Option<u64>,
    ) -> Option<AgentExit> {
        self.usage.context_tokens = context;
        self.usage.context_window = Some(window);
        self.usage.input_tokens += context;
        request.events.emit(AgentEvent::Usage {
            context_tokens: context,
            window: Some(window),
            input_tokens: self.usage.input_tokens,
            output_tokens: self.usage.output_tokens,
        });
        let mut monitor = ContextMonitor::new(request.context, window);
        match monitor.observe(context) {
            ContextAction::Warn(ratio) => {
                self.log(&format!("[fake] context pressure {:.0}%", ratio * 100.0));
                emit_pressure(request, ratio, "warn");
                None
            }
            ContextAction::Compact(ratio) => {
                emit_pressure(request, ratio, "compact");
                // A failed compaction leaves the context where it was.
                let after = after_compaction.unwrap_or(context);
                let verdict = monitor.after_compaction(after);
                request.events.emit(AgentEvent::Compacted {
                    before: ratio,
                    after: monitor.ratio(),
                });
                self.usage.context_tokens = after;
                self.log(&format!(
                    "[fake] compacted {:.0}% -> {:.0}%",
                    ratio * 100.0,
                    monitor.ratio() * 100.0
                ));
                match verdict {
                    ContextAction::Kill(r) => Some(self.context_kill(request, r)),
                    _ => None,
                }
            }
            ContextAction::Kill(ratio) => Some(self.context_kill(request, ratio)),
            _ => None,
        }
    }

    fn context_kill(&mut self, request: &AgentRequest, ratio: f64) -> AgentExit {
        self.log(&format!(
            "[fake] context limit {:.0}%: stopping",
            ratio * 100.0
        ));
        emit_pressure(request, ratio, "kill");
        AgentExit::ContextLimit
    }

    fn finish(self, exit: AgentExit) -> AgentRun {
        let final_text = match (&self.final_text, &self.structured) {
            (Some(text), _) => text.clone(),
            (None, Some(value)) => value.to_string(),
            (None, None) => String::new(),
        };
        let mut run = AgentRun::new(exit);
        run.final_text = final_text;
        run.structured = self.structured;
        run.usage = self.usage;
        run.log_path = self.log_path;
        run.duration = self.started.elapsed();
        run.turns = Some(1);
        run
    }
}

fn emit_pressure(request: &AgentRequest, ratio: f64, tier: &str) {
    request.events.emit(AgentEvent::ContextPressure {
        ratio,
        tier: tier.to_owned(),
    });
}

fn open_log(path: &Path) -> Result<std::fs::File, AgentError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| AgentError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|source| AgentError::Io {
            path: path.to_path_buf(),
            source,
        })
}

/// Joins `rel` to the workspace, refusing absolute paths and `..`.
fn workspace_path(workspace: &Path, rel: &Path) -> Result<PathBuf, AgentError> {
    let escapes = rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
    if escapes || rel.as_os_str().is_empty() {
        return Err(AgentError::OutsideWorkspace {
            path: rel.to_path_buf(),
        });
    }
    Ok(workspace.join(rel))
}

fn write_file(path: &Path, content: &str, append: bool) -> Result<(), AgentError> {
    let io = |source| AgentError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(path)
        .map_err(io)?;
    file.write_all(content.as_bytes()).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn request(role: Role, subject: &str, dir: &Path) -> AgentRequest {
        AgentRequest::new(role, "prompt", dir).subject(subject)
    }

    #[tokio::test]
    async fn most_specific_entry_wins_and_is_consumed_once() {
        let dir = tempfile::tempdir().unwrap();
        let agent = FakeAgent::new()
            .on_role(Role::Build, Script::new().answer("generic"))
            .on(Role::Build, "t-1", Script::new().answer("specific"));
        let run = agent
            .run(request(Role::Build, "t-1", dir.path()))
            .await
            .unwrap();
        assert_eq!(run.final_text, "specific");
        let run = agent
            .run(request(Role::Build, "t-1", dir.path()))
            .await
            .unwrap();
        assert_eq!(run.final_text, "generic");
        let err = agent
            .run(request(Role::Build, "t-1", dir.path()))
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("no script for build t-1 attempt 1"),
            "{err}"
        );
        assert_eq!(agent.requests().len(), 3);
        agent.verify().unwrap();
    }

    #[tokio::test]
    async fn attempt_keys_select_by_attempt() {
        let dir = tempfile::tempdir().unwrap();
        let agent = FakeAgent::new()
            .on_attempt(Role::Build, "t-1", 2, Script::new().answer("second"))
            .on_attempt(Role::Build, "t-1", 1, Script::new().answer("first"));
        let second = agent
            .run(request(Role::Build, "t-1", dir.path()).attempt(2))
            .await
            .unwrap();
        assert_eq!(second.final_text, "second");
        assert_eq!(agent.unconsumed(), vec!["build t-1 attempt 1".to_owned()]);
        assert!(
            agent
                .verify()
                .unwrap_err()
                .to_string()
                .contains("attempt 1")
        );
    }

    #[tokio::test]
    async fn sequence_entries_answer_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let agent = FakeAgent::new()
            .then(Script::new().answer("one"))
            .then(Script::new().answer("two"));
        let a = agent
            .run(request(Role::Verify, "x", dir.path()))
            .await
            .unwrap();
        let b = agent
            .run(request(Role::Build, "y", dir.path()))
            .await
            .unwrap();
        assert_eq!(
            (a.final_text.as_str(), b.final_text.as_str()),
            ("one", "two")
        );
    }

    #[tokio::test]
    async fn file_steps_change_the_workspace_and_refuse_escapes() {
        let dir = tempfile::tempdir().unwrap();
        let agent = FakeAgent::new()
            .then(Script::new().write("a/b.txt", "x").append("a/b.txt", "y"))
            .then(Script::new().write("../evil", "x"));
        agent
            .run(request(Role::Build, "t", dir.path()))
            .await
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a/b.txt")).unwrap(),
            "xy"
        );
        let err = agent
            .run(request(Role::Build, "t", dir.path()))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("inside the workspace"), "{err}");
    }

    #[tokio::test]
    async fn hang_ends_on_stop_and_on_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let agent = FakeAgent::new().always(Role::Build, Script::new().hang());
        let timed = agent
            .run(request(Role::Build, "t", dir.path()).timeout(Duration::from_millis(20)))
            .await
            .unwrap();
        assert_eq!(timed.exit, AgentExit::TimedOut);
        let req = request(Role::Build, "t", dir.path());
        let stop = req.stop.clone();
        let handle = tokio::spawn(async move { agent.run(req).await });
        tokio::time::sleep(Duration::from_millis(10)).await;
        stop.cancel();
        assert_eq!(handle.await.unwrap().unwrap().exit, AgentExit::Stopped);
    }

    #[tokio::test]
    async fn usage_walks_the_context_tiers() {
        let dir = tempfile::tempdir().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let events = move |e| sink.lock().unwrap().push(e);
        let agent = FakeAgent::new()
            .then(
                Script::new()
                    .usage(75, 100, None)
                    .usage(90, 100, Some(40))
                    .answer("ok"),
            )
            .then(Script::new().usage(90, 100, Some(85)).answer("never"));
        let ok = agent
            .run(request(Role::Build, "t", dir.path()).on_event(events.clone()))
            .await
            .unwrap();
        assert_eq!(ok.exit, AgentExit::Completed);
        assert_eq!(ok.usage.context_tokens, 40);
        let killed = agent
            .run(request(Role::Build, "t", dir.path()).on_event(events))
            .await
            .unwrap();
        assert_eq!(killed.exit, AgentExit::ContextLimit);
        let tiers: Vec<String> = seen
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                AgentEvent::ContextPressure { tier, .. } => Some(tier.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(tiers, ["warn", "compact", "compact", "kill"]);
    }

    #[tokio::test]
    async fn log_gets_the_transcript() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("logs/run.log");
        let agent = FakeAgent::new().then(Script::new().print("compiling", 3).answer("done"));
        let run = agent
            .run(request(Role::Build, "t", dir.path()).log_path(&log))
            .await
            .unwrap();
        assert_eq!(run.log_path.as_deref(), Some(log.as_path()));
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(text.matches("compiling").count(), 3);
    }

    #[tokio::test]
    async fn toml_scripts_load_and_errors_name_the_file() {
        let agent = FakeAgent::from_toml(
            r#"
            [[run]]
            role = "verify"
            subject = "t-1"
            [[run.steps]]
            json = { verdict = "accept", reason = "fine" }

            [[run]]
            role = "build"
            repeat = true
            [[run.steps]]
            delay = "1ms"
            [[run.steps]]
            fail = { reason = "flaky", kind = "transient" }
            "#,
            "inline.toml",
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let v = agent
            .run(request(Role::Verify, "t-1", dir.path()))
            .await
            .unwrap();
        assert_eq!(v.structured.unwrap()["verdict"], "accept");
        let b = agent
            .run(request(Role::Build, "t-9", dir.path()))
            .await
            .unwrap();
        assert!(matches!(
            b.exit,
            AgentExit::Failed {
                kind: FailureKind::Transient,
                ..
            }
        ));

        let err = FakeAgent::from_toml("[[run]]\nrole = \"builder\"\n", "bad.toml").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("bad.toml") && msg.contains("builder"), "{msg}");
    }
}
