//! `thread.json` and `run.json`: what a thread remembers, versioned and written atomically.
//!
//! `thread.json` carries `schema_version` ([`SCHEMA_VERSION`]). A file without it is version
//! 0, the first layout (`{"id","title","state":"Running","iteration":3,"spec_version":1}`,
//! the phase a bare string), and is migrated on load; a newer version than this build knows
//! is refused with a clear error rather than misread.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ThreadError;
use super::phase::Phase;
use crate::files::seal;
use crate::git::Baseline;

/// The layout of `thread.json` this build writes.
pub const SCHEMA_VERSION: u32 = 1;

/// How many recent attempts a thread keeps (seed 003: bounded memory).
pub const RECENT_ATTEMPTS: usize = 5;

/// A thread's state, as stored in `threads/<id>/thread.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ThreadRecord {
    /// Layout version (this build writes 1).
    pub schema_version: u32,
    /// The thread's id (`1-add-greeting`).
    pub id: String,
    /// Its title.
    pub title: String,
    /// Where it stands.
    pub phase: Phase,
    /// The spec revision in force (`spec/v<N>.md`).
    pub spec_version: u32,
    /// The latest agent run, if any (`runs/<run-id>/`).
    #[serde(default)]
    pub current_run_id: Option<String>,
    /// The process running the loop, while it runs: a thread left Running by a process
    /// that died can be told from one still running.
    #[serde(default)]
    pub runner_pid: Option<u32>,
    /// Runs made so far (numbers the next run id).
    #[serde(default)]
    pub runs: u32,
    /// Where the work started, captured when implementation began: what going back to
    /// Drafting resets the work tree to. Read with [`baseline_commit`](Self::baseline_commit)
    /// and [`baseline_branch`](Self::baseline_branch).
    #[serde(default)]
    pub(crate) baseline: Option<Baseline>,
    /// The managed branch (`ralph/<id>`), once created.
    #[serde(default)]
    pub branch: Option<String>,
    /// How the loop runs.
    #[serde(default)]
    pub config: RunConfig,
    /// The iteration after which the current round of the loop stops.
    #[serde(default)]
    pub iteration_limit: u32,
    /// The last few attempts, newest last (at most 5).
    #[serde(default)]
    pub attempts: Vec<IterationRecord>,
    /// The attempt that passed the most criteria so far (the "closest output").
    #[serde(default)]
    pub closest: Option<IterationRecord>,
    /// What the last stuck loop left (kept until the next one).
    #[serde(default)]
    pub stuck: Option<StuckReport>,
    /// The latest AI review of the spec (Assessing), kept through Drafting.
    #[serde(default)]
    pub assessment: Option<super::assess::Assessment>,
    /// The reviewers' feedback of each send-back, oldest first; the latest is in every
    /// prompt of the loop until the spec is revised.
    #[serde(default)]
    pub feedback: Vec<Turn>,
    /// The work tree as the person approved it: a git tree id of everything but `.ralph/`.
    /// [`commit`](super::Thread::commit) commits only this tree.
    #[serde(default)]
    pub approved_tree: Option<String>,
    /// The agent that took the loop's latest run (a name of [`RunConfig::agents`], or the
    /// context agent's name); `None` before the loop. Each round and each resume starts
    /// with the first of the chain (see the [module docs](super#drafting-assessing-and-agents)).
    #[serde(default)]
    pub current_agent: Option<String>,
    /// Why the fallback chain gave the runs to [`current_agent`](Self::current_agent)
    /// (`first is rate limited until …`, `first is unavailable (…)`); `None` while the
    /// first agent takes them.
    #[serde(default)]
    pub agent_reason: Option<String>,
    /// While a run backs off a transient failure: the failures in a row so far.
    #[serde(default)]
    pub transient_failures: u32,
    /// While the loop waits out a rate limit: when the limit resets (RFC 3339). The wait
    /// is not an iteration; `None` when the loop is not waiting.
    #[serde(default)]
    pub rate_limited_until: Option<String>,
    /// RFC 3339 time of the last write.
    #[serde(default)]
    pub updated_at: String,
    /// Made in quick mode (`thread new --quick`): every later call of the thread advances
    /// through the checkpoints as quick mode does, whether or not it asks for quick mode.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub quick: bool,
}

/// The loop's settings, chosen in Configuring (quick mode takes the defaults).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct RunConfig {
    /// Iterations per round of the loop. Default 5.
    pub max_iterations: u32,
    /// Wall-clock limit of one agent run. Default 10 minutes.
    #[serde(with = "crate::config::duration")]
    pub agent_timeout: Duration,
    /// Wall-clock limit of one criterion's command. Default 10 minutes.
    #[serde(with = "crate::config::duration")]
    pub check_timeout: Duration,
    /// The agents (models) to run with, in order, by the names they were registered under
    /// ([`Threads::agent`](super::Threads::agent)): one [`Fallback`](crate::agent::Fallback)
    /// chain, whose next agent takes a run the one before cannot make (rate limited, down,
    /// failing); the thread is Stuck only when none is left. Empty: the context's agent (the
    /// one of [`Threads::new`](super::Threads::new) or of the [`Ralph`](crate::Ralph)).
    pub agents: Vec<String>,
    /// The read-only verifier of the criteria without a command, by its registered name.
    /// `None`: the models above.
    pub verifier: Option<String>,
    /// Transient failures (overload, 5xx) of the chain in a row before the iteration
    /// counts as failed; until then the same run is tried again after a backoff, not
    /// counted. Default 2.
    pub transient_retries: u32,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            max_iterations: 5,
            agent_timeout: Duration::from_secs(600),
            check_timeout: Duration::from_secs(600),
            agents: Vec::new(),
            verifier: None,
            transient_retries: 2,
        }
    }
}

impl RunConfig {
    /// Checks the numbers against the bounds every mode uses (those of `ralph.toml`): at
    /// least one iteration, at most 100,000; timeouts longer than zero and at most a week; at
    /// most 1,000 transient retries.
    ///
    /// # Errors
    ///
    /// The first setting out of range, named, with its value and the range.
    pub fn validate(&self) -> Result<(), String> {
        use crate::config::bounds::{MAX_ITERATIONS, MAX_RETRIES, MAX_TIMEOUT};
        if !(1..=MAX_ITERATIONS).contains(&self.max_iterations) {
            return Err(format!(
                "max_iterations must be from 1 to {MAX_ITERATIONS}, got {}",
                self.max_iterations
            ));
        }
        if self.transient_retries > MAX_RETRIES {
            return Err(format!(
                "transient_retries must be at most {MAX_RETRIES}, got {}",
                self.transient_retries
            ));
        }
        for (key, value) in [
            ("agent_timeout", self.agent_timeout),
            ("check_timeout", self.check_timeout),
        ] {
            if value.is_zero() || value > MAX_TIMEOUT {
                return Err(format!(
                    "{key} must be longer than zero and at most {}, got {}",
                    humantime::format_duration(MAX_TIMEOUT),
                    humantime::format_duration(value)
                ));
            }
        }
        Ok(())
    }

    /// Sets the iterations per round.
    #[must_use]
    pub fn max_iterations(mut self, n: u32) -> Self {
        self.max_iterations = n;
        self
    }

    /// Sets the agent timeout.
    #[must_use]
    pub fn agent_timeout(mut self, d: Duration) -> Self {
        self.agent_timeout = d;
        self
    }

    /// Sets the agents to fall back on, by name, in order (see [`RunConfig::agents`]).
    #[must_use]
    pub fn agents<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.agents = names.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the verifier of the criteria without a command, by name (see
    /// [`RunConfig::verifier`]).
    #[must_use]
    pub fn verifier(mut self, name: impl Into<String>) -> Self {
        self.verifier = Some(name.into());
        self
    }

    /// Sets the transient failures in a row before an iteration counts as failed.
    #[must_use]
    pub fn transient_retries(mut self, n: u32) -> Self {
        self.transient_retries = n;
        self
    }
}

/// What was said to a thread, as it keeps it: a turn of its Drafting conversation (a
/// person's message, the agent's reply), or a reviewer's feedback when sending it back
/// from review.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Turn {
    /// RFC 3339 time it was written.
    pub at: String,
    /// Who spoke: `person` or `agent` (Drafting), `reviewer` (a send-back).
    pub by: String,
    /// What they said.
    pub text: String,
    /// The spec revision the turn was about (for a reply that revised the spec, the new
    /// revision).
    pub spec_version: u32,
    /// For a reply that revised the spec: true. ralph wrote the revision.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub revised: bool,
    /// For a reply: the run that gave it (`runs/<run-id>/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

impl Turn {
    pub(super) fn new(by: &str, text: &str, spec_version: u32) -> Self {
        Turn {
            at: jiff::Timestamp::now().to_string(),
            by: by.to_owned(),
            text: text.to_owned(),
            spec_version,
            revised: false,
            run_id: None,
        }
    }
}

/// One iteration's result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct IterationRecord {
    /// The iteration.
    pub iteration: u32,
    /// Its run id.
    pub run_id: String,
    /// What happened, in one line (`claimed done; 1 of 2 criteria passed`).
    pub summary: String,
    /// Criteria that passed (their texts).
    #[serde(default)]
    pub passed: Vec<String>,
    /// Criteria that failed, each with why.
    #[serde(default)]
    pub failed: Vec<String>,
    /// The final answer, bounded.
    #[serde(default)]
    pub output: String,
}

/// What a stuck thread keeps for the person deciding what to do (seed 001's "Stuck").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StuckReport {
    /// Why the loop stopped.
    pub reason: String,
    /// The spec revision tried.
    pub spec_version: u32,
    /// Iterations run.
    pub iterations: u32,
    /// Criteria that passed at the closest attempt.
    pub passed: Vec<String>,
    /// Criteria that failed at the closest attempt.
    pub failed: Vec<String>,
    /// The closest-to-success attempt (most criteria passing), if any.
    pub closest: Option<IterationRecord>,
    /// `git diff` of the work tree from the baseline.
    pub diff: String,
}

/// One agent run, as stored in `runs/<run-id>/run.json` (its transcript is `output.log`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunRecord {
    /// `<thread-id>-r<n>`.
    pub id: String,
    /// The thread.
    pub thread: String,
    /// The iteration (or `0` for a verifier run outside the loop).
    pub iteration: u32,
    /// `build` or `verify`.
    pub role: String,
    /// RFC 3339 start time.
    pub started_at: String,
    /// RFC 3339 end time, once ended.
    pub ended_at: Option<String>,
    /// How it ended (`completed`, `interrupted`, `timed out`, `failed: …`), once ended.
    pub outcome: Option<String>,
}

/// Reads a sealed record's text (see [`seal`]); with whether it was unsealed (written by an
/// earlier ralph, taken as it is).
///
/// # Errors
///
/// [`ThreadError::NotWritten`] when it is not what ralph wrote; [`ThreadError::Io`].
pub(crate) fn read_sealed(path: &Path) -> Result<(String, bool), ThreadError> {
    let read = seal::read(path).map_err(|source| ThreadError::Io {
        path: path.to_path_buf(),
        error: source,
    })?;
    match read {
        seal::Read::Sealed(text) => Ok((text, false)),
        seal::Read::Unsealed(text) => Ok((text, true)),
        seal::Read::Changed(how) => Err(ThreadError::NotWritten {
            path: path.to_path_buf(),
            how,
        }),
    }
}

/// Reads `thread.json`, migrating older layouts; with whether it was unsealed (an earlier
/// ralph's, adopted: its next save seals it).
///
/// # Errors
///
/// [`ThreadError::NotWritten`] when it is not what ralph wrote; [`ThreadError::Corrupt`]
/// naming the file and serde's line and column; [`ThreadError::NewerSchema`].
pub(crate) fn load_checked(path: &Path) -> Result<(ThreadRecord, bool), ThreadError> {
    let (text, unsealed) = read_sealed(path)?;
    let corrupt = |e: serde_json::Error| ThreadError::Corrupt {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let mut value: serde_json::Value = serde_json::from_str(&text).map_err(corrupt)?;
    let version = value
        .get("schema_version")
        .map_or(Some(0), serde_json::Value::as_u64)
        .ok_or_else(|| ThreadError::Corrupt {
            path: path.to_path_buf(),
            message: "schema_version is not a number".into(),
        })?;
    if version > u64::from(SCHEMA_VERSION) {
        return Err(ThreadError::NewerSchema {
            path: path.to_path_buf(),
            found: version,
            known: SCHEMA_VERSION,
        });
    }
    if version == 0 {
        value = migrate_v0(value).map_err(|message| ThreadError::Corrupt {
            path: path.to_path_buf(),
            message,
        })?;
    }
    Ok((serde_json::from_value(value).map_err(corrupt)?, unsealed))
}

/// Version 0 → 1: `state` (a bare phase name) and `iteration` become the tagged `phase`.
fn migrate_v0(mut value: serde_json::Value) -> Result<serde_json::Value, String> {
    let object = value
        .as_object_mut()
        .ok_or("a version 0 thread.json must be a JSON object")?;
    let state = object
        .remove("state")
        .and_then(|s| s.as_str().map(str::to_owned))
        .ok_or("a version 0 thread.json needs a string `state`")?;
    let iteration = object
        .remove("iteration")
        .and_then(|i| i.as_u64())
        .unwrap_or(1);
    let phase = match state.as_str() {
        "Running" | "Verifying" => {
            serde_json::json!({"type": state, "data": {"iteration": iteration}})
        }
        "Paused" => serde_json::json!({"type": "Paused", "data": {
            "iteration": iteration, "criteria_passing": 0, "criteria_total": 0}}),
        "Stuck" => {
            serde_json::json!({"type": "Stuck", "data": {"reason": "stuck (from an older ralph)"}})
        }
        "PreflightFailed" => {
            serde_json::json!({"type": "PreflightFailed", "data": {"failures": []}})
        }
        "PendingReview" => {
            serde_json::json!({"type": "PendingReview", "data": {"recommend_approve": false}})
        }
        "ReadyToCommit" => serde_json::json!({"type": "ReadyToCommit", "data": {"message": ""}}),
        "Done" => serde_json::json!({"type": "Done", "data": {"commit": null}}),
        other => serde_json::json!({ "type": other }),
    };
    object.insert("phase".into(), phase);
    object.insert("schema_version".into(), SCHEMA_VERSION.into());
    object
        .entry("spec_version")
        .or_insert_with(|| serde_json::Value::from(1));
    Ok(value)
}

/// Writes `thread.json` atomically (temp file, fsync, rename, fsync of the directory).
///
/// # Errors
///
/// [`ThreadError::Io`] naming the file.
pub fn save(path: &Path, record: &mut ThreadRecord) -> Result<(), ThreadError> {
    record.updated_at = jiff::Timestamp::now().to_string();
    write_json(path, record)
}

/// Writes any record as pretty JSON, sealed, atomically (and its `.last` copy: see
/// [`seal`]).
pub(crate) fn write_json(path: &Path, value: &impl Serialize) -> Result<(), ThreadError> {
    let io = |source| ThreadError::Io {
        path: path.to_path_buf(),
        error: source,
    };
    if let Some(dir) = path.parent() {
        crate::files::own::create_dir_all(dir).map_err(io)?;
    }
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| io(std::io::Error::other(e)))?;
    seal::write(path, &bytes).map_err(|(path, error)| ThreadError::Io { path, error })
}

/// Reads a run record.
///
/// # Errors
///
/// [`ThreadError`] naming the file.
pub fn load_run(path: &Path) -> Result<RunRecord, ThreadError> {
    let (text, _) = read_sealed(path)?;
    serde_json::from_str(&text).map_err(|e| ThreadError::Corrupt {
        path: PathBuf::from(path),
        message: e.to_string(),
    })
}

/// Whether process `pid` is alive (a zombie counts as alive until reaped).
pub(crate) fn process_alive(pid: u32) -> bool {
    use nix::errno::Errno;
    use nix::sys::signal::kill;
    use nix::unistd::Pid;
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if raw <= 0 {
        return false;
    }
    // Signal 0 checks existence only; EPERM means it exists under another user.
    matches!(kill(Pid::from_raw(raw), None), Ok(()) | Err(Errno::EPERM))
}

impl ThreadRecord {
    /// The commit the work started from (HEAD when implementation began), once it began.
    pub fn baseline_commit(&self) -> Option<&str> {
        self.baseline.as_ref().map(|b| b.commit_sha.as_str())
    }

    /// The branch checked out when implementation began; `None` before, or when HEAD was
    /// detached then.
    pub fn baseline_branch(&self) -> Option<&str> {
        self.baseline.as_ref().and_then(|b| b.branch.as_deref())
    }

    /// Whether the thread is Running or Verifying with no live process behind it (the
    /// process that ran the loop died without saving Paused).
    pub fn is_orphaned(&self) -> bool {
        matches!(self.phase, Phase::Running { .. } | Phase::Verifying { .. })
            && !self.runner_pid.is_some_and(process_alive)
    }
}

#[cfg(test)]
mod bounds_tests {
    use super::*;

    #[test]
    fn loop_settings_out_of_range_are_named() {
        for (config, said) in [
            (
                RunConfig::default().max_iterations(0),
                "max_iterations must be from 1 to",
            ),
            (
                RunConfig::default().max_iterations(u32::MAX),
                "max_iterations must be from 1 to",
            ),
            (
                RunConfig::default().transient_retries(5000),
                "transient_retries must be at most",
            ),
            (
                RunConfig::default().agent_timeout(Duration::ZERO),
                "agent_timeout must be longer",
            ),
        ] {
            let err = config.validate().unwrap_err();
            assert!(err.contains(said), "{err}");
        }
        RunConfig::default().validate().unwrap();
    }
}
