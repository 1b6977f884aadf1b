//! `FakeAgent`: a deterministic, scripted [`Agent`] for tests, CI and demos.
//!
//! [`Script`] and its steps are in `script.rs`, a run carrying them out in `run.rs`.

mod run;
mod script;

use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

use super::{Agent, AgentError, AgentRequest, AgentRun, Role};
use run::FakeRun;
pub use script::Script;
use script::{Entry, ScriptFile};

/// `FakeAgent`: a deterministic, scripted [`Agent`] for tests, CI and demos.
///
/// A fake agent holds *entries*: a [`Script`] (the steps of one run) and the requests it
/// answers. Each request takes the most specific entry that matches it and is still unused,
/// runs its steps in the request's workspace, and is recorded ([`requests`](Self::requests)).
/// The same format drives `ralph … --script FILE.toml` and `ralph demo`; the page
/// `docs/fake-agent.md` of the repository says it for script authors, with the answers each
/// role must give.
///
/// # Entries
///
/// | TOML key | builder | the entry answers |
/// |---|---|---|
/// | `role` | [`on`](Self::on), [`on_attempt`](Self::on_attempt), [`on_role`](Self::on_role), [`always`](Self::always) | requests of that [`Role`], in snake_case: `investigate`, `build`, `verify`, `gap_analysis`, `decompose`, `breakdown` (or `plan`), `planner`, `assess`, `draft`. Without a role: any request, in the order the entries were added (a sequence, [`then`](Self::then)) |
/// | `subject` | [`on`](Self::on), [`on_attempt`](Self::on_attempt) | requests about that subject (a task, issue, spec or thread id; below) |
/// | `attempt` | [`on_attempt`](Self::on_attempt) | requests of that attempt number (below) |
/// | `repeat` | [`always`](Self::always) | `true`: every matching request; the entry is never used up |
/// | `steps` | the [`Script`] | — : what the run does (the steps are in [`Script`]'s docs) |
///
/// A request takes, of the entries that match it and are unused (or `repeat`), the most
/// specific: a `subject` counts 2, a `role` and an `attempt` 1 each; a tie goes to the entry
/// added first. Each entry is used once per `FakeAgent` — and so once per process of the
/// `ralph` command, which reads its `--script` anew each time it starts. A request that no
/// entry answers fails with [`AgentError::NoScript`], listing the entries left. A file may
/// hold only `[[run]]` entries, and an entry only these keys: anything else is
/// [`AgentError::BadScript`] naming the file and the position.
///
/// # Subjects and attempts
///
/// | mode | role | `subject` | `attempt` |
/// |---|---|---|---|
/// | construct | `investigate` | the issue: `i-1` | the issue's investigations, 1 first |
/// | | `build` | the task: `t-1`, a subtask `t-3a` | the task's builds: retries and rebuilds after a rejection count on |
/// | | `verify` | the task | the task's verifications |
/// | | `gap_analysis` | the iteration: `iteration-2` | 1 |
/// | | `decompose` | the task | 1 |
/// | plan mode | `breakdown` (`plan`) | `plan-mode` | 1 |
/// | build mode | `planner` | the spec: `greeter` | the spec's plan round (2 after an invalidated plan) |
/// | | `build` | the spec's task: `greeter-1` | the task's sessions |
/// | | `verify` | the spec | the spec's verification round |
/// | threads | `build`, `verify` (criteria without a command) | the thread: `1-greeter` | the loop's iteration |
/// | | `assess`, `draft` | the thread | 1 |
///
/// A structured answer ralph cannot use is asked for once more, with the next attempt
/// number. Attempt numbers come from the saved state, so an entry keyed by attempt answers
/// the same request when a killed run is resumed by a new process, where an entry without
/// one would be unused again: key by `attempt` what a resumed run must not repeat.
///
/// # What ralph reads from an answer
///
/// * `build` (construct, build mode): the final text ([`Script::answer`]) with
///   `<TASK_DONE>` alone on its last line, or a line `<TASK_BLOCKED reason="…">`; no marker
///   is a failed attempt. In a thread: the spec's promise tag (`<promise>TAG</promise>`)
///   alone on the last line.
/// * `planner`: the plan, ending with the magic phrase (`PLAN_COMPLETE`).
/// * The structured roles: a JSON object ([`Script::json`]) that matches the role's schema
///   ([`answer_schema`](https://docs.rs/ralph-loop/latest/ralph/fn.answer_schema.html), `ralph schema ROLE`). A verifier's `verdict` is `"accept"` or
///   `"reject"`, with a `reason`; in build mode a rejection's reason may hold a line
///   `PLAN_INVALIDATION: why`, which sends the spec back to its planner.
///
/// # Examples
///
/// In Rust:
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
/// The same in TOML ([`from_toml`](Self::from_toml), [`from_toml_file`](Self::from_toml_file)),
/// run: an entry keyed by subject and attempt is used once, a `repeat` entry answers every
/// request of its role.
///
/// ```
/// use ralph::agent::{AgentRequest, FakeAgent, Role};
/// use ralph::Agent as _;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let agent = FakeAgent::from_toml(
///     r#"
/// [[run]]
/// role = "build"
/// subject = "t-1"
/// attempt = 1
/// [[run.steps]]
/// write = { path = "hello.txt", content = "hello\n" }
/// [[run.steps]]
/// answer = "Wrote hello.txt.\n<TASK_DONE>"
///
/// [[run]]
/// role = "verify"
/// repeat = true
/// steps = [{ json = { verdict = "accept", reason = "hello.txt says hello" } }]
/// "#,
///     "inline.toml",
/// )?;
/// let dir = tempfile::tempdir()?;
/// let build = || AgentRequest::new(Role::Build, "Build t-1", dir.path()).subject("t-1");
///
/// let run = agent.run(build()).await?;
/// assert!(run.final_text.ends_with("<TASK_DONE>"));
/// assert_eq!(std::fs::read_to_string(dir.path().join("hello.txt"))?, "hello\n");
/// // Used up: a second build of t-1 finds no entry.
/// let err = agent.run(build()).await.unwrap_err();
/// assert!(err.to_string().contains("no script for build t-1 attempt 1"));
///
/// for task in ["t-1", "t-2"] {
///     let verify = AgentRequest::new(Role::Verify, "Judge it", dir.path()).subject(task);
///     assert_eq!(agent.run(verify).await?.structured.unwrap()["verdict"], "accept");
/// }
/// agent.verify()?; // every entry that is not `repeat` was used
/// # Ok(())
/// # }
/// ```
#[derive(Default)]
pub struct FakeAgent {
    state: Mutex<Playback>,
    record_file: Option<PathBuf>,
}

#[derive(Debug, Default)]
struct Playback {
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

    fn lock(&self) -> MutexGuard<'_, Playback> {
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

    #[allow(clippy::disallowed_methods)] // the record of requests, a test aid, not a state file
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    use crate::agent::{AgentEvent, AgentExit, FailureKind};

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
        stop.stop();
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
