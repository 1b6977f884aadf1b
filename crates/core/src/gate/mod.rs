//! The `Gate` seam: a quality check ralph runs itself after an agent claims a task is done.
//!
//! A failing check is an outcome (`Ok` with [`GateStatus::Failed`]), not an error; `Err`
//! means the check could not run at all.

mod shell;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;

use crate::model::TaskId;
use crate::output::BoundedOutput;
use crate::process::StopToken;

pub use shell::ShellGate;

/// Where and how a gate runs.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GateContext {
    /// The directory to run in.
    pub workspace: PathBuf,
    /// Stopped when ralph is interrupted; the gate stops and reports [`GateStatus::Stopped`].
    pub stop: StopToken,
    /// Where to write the full output, if anywhere.
    pub log_path: Option<PathBuf>,
    /// The task whose work is checked (in a thread: the thread), if any.
    pub task: Option<TaskId>,
    /// That task's name (in a thread: its title).
    pub task_name: Option<String>,
    /// The attempt checked: 1 for the task's first (in a thread: the iteration).
    pub attempt: u32,
    /// How the gate's processes are confined: the run's sandbox for gates, without the
    /// network; unconfined in a context made with [`new`](Self::new). A gate that starts
    /// processes of its own runs them with [`command`](Self::command).
    #[doc(hidden)]
    pub sandbox: crate::process::Sandbox,
}

impl GateContext {
    /// A context for `workspace` with a fresh stop token and no log.
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        GateContext {
            workspace: workspace.into(),
            stop: StopToken::new(),
            log_path: None,
            task: None,
            task_name: None,
            attempt: 1,
            sandbox: crate::process::Sandbox::unconfined(),
        }
    }

    /// Sets how the gate's processes are confined (ralph's own tests: a run sets it).
    #[doc(hidden)]
    #[must_use]
    pub fn sandbox(mut self, sandbox: crate::process::Sandbox) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// `command` as this check must start it: inside the run's sandbox for gates when the
    /// run is confined (no network), else a copy (see [`AgentRequest::command`](crate::AgentRequest::command)).
    // Builds a command for an embedder's adapter to start; ralph starts none here.
    #[allow(clippy::disallowed_types)]
    pub fn command(&self, command: &crate::process::StdCommand) -> crate::process::StdCommand {
        self.sandbox.command(command)
    }

    /// Sets the task checked, its name and the attempt.
    #[must_use]
    pub fn task(mut self, id: impl Into<TaskId>, name: impl Into<String>, attempt: u32) -> Self {
        self.task = Some(id.into());
        self.task_name = Some(name.into());
        self.attempt = attempt;
        self
    }

    /// Sets the stop token.
    #[must_use]
    pub fn stop(mut self, stop: StopToken) -> Self {
        self.stop = stop;
        self
    }

    /// Sets the log path.
    #[must_use]
    pub fn log_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.log_path = Some(path.into());
        self
    }
}

/// How a gate ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
#[non_exhaustive]
pub enum GateStatus {
    /// The check passed.
    Passed,
    /// The check failed.
    Failed {
        /// Exit code, if it exited.
        code: Option<i32>,
        /// Signal that ended it, if any.
        signal: Option<i32>,
    },
    /// The gate's timeout fired; it was stopped.
    TimedOut {
        /// The gate's timeout, which the messages name (`timed out after 3s`).
        #[serde(rename = "after_secs", serialize_with = "crate::time::secs")]
        after: Duration,
    },
    /// Stopped because [`GateContext::stop`] has stopped.
    Stopped,
}

impl GateStatus {
    /// Whether the check passed.
    pub fn passed(&self) -> bool {
        matches!(self, GateStatus::Passed)
    }
}

impl fmt::Display for GateStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GateStatus::Passed => f.write_str("passed"),
            GateStatus::Failed {
                code: Some(code), ..
            } => write!(f, "failed (exit {code})"),
            GateStatus::Failed {
                signal: Some(sig), ..
            } => write!(f, "failed (signal {sig})"),
            GateStatus::Failed { .. } => f.write_str("failed"),
            GateStatus::TimedOut { after } => {
                write!(f, "timed out after {}", humantime::format_duration(*after))
            }
            GateStatus::Stopped => f.write_str("stopped"),
        }
    }
}

/// What one gate run found.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct GateReport {
    /// The gate's name.
    pub name: String,
    /// Whether a failure blocks the task.
    pub required: bool,
    /// How it ended.
    pub status: GateStatus,
    /// stdout and stderr, interleaved, bounded: see [`output`](Self::output).
    pub output: BoundedOutput,
    /// Wall time.
    pub duration: Duration,
    /// Processes still alive after the gate's command ended, which ralph then killed.
    pub leaked: usize,
    /// It ran in a sandbox without network: a failure may be caused by that (see
    /// [`ShellGate::network`](crate::ShellGate::network)).
    pub offline: bool,
}

impl GateReport {
    /// A report with no output.
    pub fn new(name: impl Into<String>, required: bool, status: GateStatus) -> Self {
        GateReport {
            name: name.into(),
            required,
            status,
            output: BoundedOutput::with_defaults(),
            duration: Duration::ZERO,
            leaked: 0,
            offline: false,
        }
    }

    /// Sets the output: `text`, bounded as ralph bounds every gate's.
    #[must_use]
    pub fn with_output(mut self, text: &str) -> Self {
        self.output = BoundedOutput::from_text(text);
        self
    }

    /// Appends `text` to the output, bounded as the rest: a gate that wraps another adds
    /// what it found to the report it got (its status is the field `status`).
    ///
    /// ```
    /// use ralph::gate::{GateReport, GateStatus};
    ///
    /// let mut report = GateReport::new("coverage", true, GateStatus::Passed).with_output("ok\n");
    /// report.push_output("coverage 41% < 80%\n");
    /// report.status = GateStatus::Failed { code: Some(1), signal: None };
    /// assert_eq!(report.output(), "ok\ncoverage 41% < 80%\n");
    /// assert!(report.blocks());
    /// ```
    pub fn push_output(&mut self, text: &str) {
        self.output.push(text.as_bytes());
    }

    /// stdout and stderr, interleaved: all of it, or for a long output its head and its
    /// tail around a line `[… N bytes omitted …]` (the gate's log has it all).
    pub fn output(&self) -> String {
        self.output.to_string()
    }

    /// Whether this report should fail the task: a required gate that did not pass.
    pub fn blocks(&self) -> bool {
        self.required && !self.status.passed()
    }
}

/// A gate could not run at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GateError {
    /// The command could not be started.
    #[error("could not start gate {gate}")]
    Spawn {
        /// The gate.
        gate: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An I/O error while running it.
    #[error("i/o error in gate {gate}")]
    Io {
        /// The gate.
        gate: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The backend of a gate of your own failed: a service it calls, a report it parses… (a
    /// check that ran and failed is `Ok` with [`GateStatus::Failed`], not this). ralph's
    /// gates never return it.
    #[error("gate {gate} could not check")]
    Backend {
        /// The gate.
        gate: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl GateError {
    /// [`GateError::Backend`]: gate `gate` could not check because of `source`.
    pub fn backend(
        gate: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        GateError::Backend {
            gate: gate.into(),
            source: source.into(),
        }
    }
}

/// A quality check. Usable as `dyn Gate`, so a mixed list of gates is one `Vec`.
///
/// # Implementing
///
/// Put `#[ralph::async_trait]` on the impl. A check that ran and failed is `Ok` with a
/// failed [`GateStatus`]; [`GateError`] is for a check that could not run at all. The
/// [`GateContext`] says where to run and which task and attempt are checked.
///
/// ```
/// use ralph::async_trait;
/// use ralph::gate::{Gate, GateContext, GateError, GateReport, GateStatus};
///
/// /// Passes when the workspace has a file of this name.
/// struct HasFile(&'static str);
///
/// #[async_trait]
/// impl Gate for HasFile {
///     fn name(&self) -> &str {
///         "has-file"
///     }
///
///     async fn check(&self, ctx: GateContext) -> Result<GateReport, GateError> {
///         let found = tokio::fs::try_exists(ctx.workspace.join(self.0))
///             .await
///             .map_err(|e| GateError::backend(self.name(), e))?;
///         let status = if found {
///             GateStatus::Passed
///         } else {
///             GateStatus::Failed { code: None, signal: None }
///         };
///         let said = format!("{} {}", self.0, if found { "exists" } else { "is missing" });
///         Ok(GateReport::new(self.name(), self.required(), status)
///             .with_output(&said))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let ctx = GateContext::new(dir.path()).task("t-1", "Write the README", 1);
/// let report = HasFile("README.md").check(ctx).await?;
/// assert!(report.blocks(), "required, and the file is missing");
/// # Ok(())
/// # }
/// ```
#[diagnostic::on_unimplemented(
    note = "implement `ralph::Gate` for your check, or use `ralph::ShellGate` for a shell command"
)]
#[async_trait]
pub trait Gate: Send + Sync {
    /// The gate's name (`test`, `lint`).
    fn name(&self) -> &str;

    /// Whether a failure blocks the task. Optional gates are reported, not enforced.
    fn required(&self) -> bool {
        true
    }

    /// Runs the check.
    ///
    /// # Errors
    ///
    /// [`GateError`] when the check could not run; a failing check is `Ok`.
    async fn check(&self, ctx: GateContext) -> Result<GateReport, GateError>;

    /// Whether the check runs in ralph's own process, where no sandbox reaches (a gate
    /// written in Rust): dry runs say so. The default is true; [`ShellGate`] says false and
    /// runs its command in [`GateContext::sandbox`].
    fn in_process(&self) -> bool {
        true
    }
}

#[async_trait]
impl<T: Gate + ?Sized> Gate for Box<T> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn required(&self) -> bool {
        (**self).required()
    }

    fn in_process(&self) -> bool {
        (**self).in_process()
    }

    async fn check(&self, ctx: GateContext) -> Result<GateReport, GateError> {
        (**self).check(ctx).await
    }
}

#[async_trait]
impl<T: Gate + ?Sized> Gate for Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn required(&self) -> bool {
        (**self).required()
    }

    fn in_process(&self) -> bool {
        (**self).in_process()
    }

    async fn check(&self, ctx: GateContext) -> Result<GateReport, GateError> {
        (**self).check(ctx).await
    }
}

/// Breaks the build if `Gate` stops being usable as `dyn`.
#[allow(dead_code)]
fn _assert_gate_object_safe(_: &dyn Gate, _: Box<dyn Gate>, _: Arc<dyn Gate>) {}
