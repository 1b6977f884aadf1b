//! `ShellGate`: a shell command as a quality gate, run under [`crate::process`] supervision.

use std::time::Duration;

use async_trait::async_trait;

use super::{Gate, GateContext, GateError, GateReport, GateStatus};
use crate::process::{ProcessError, ProcessReport, ProcessSpec};

/// Runs `sh -c <command>` in the workspace.
///
/// Exit 0 passes, any other exit fails; the timeout and the context's stop token
/// terminate the command (SIGTERM, grace, SIGKILL). Everything the command started is
/// killed when it ends, and counted in [`GateReport::leaked`] if it outlived it.
///
/// The command runs in the context's [sandbox](GateContext::sandbox), which a run gives
/// no network; [`network`](Self::network) gives it back. Its report says when it ran
/// without ([`GateReport::offline`]), and so does the failure a retry is told, so that a
/// failure caused by it is told apart.
///
/// ```
/// use std::time::Duration;
/// use ralph::gate::{Gate, GateContext, GateStatus, ShellGate};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ralph::gate::GateError> {
/// let gate = ShellGate::new("lint", "echo checking; exit 2").timeout(Duration::from_secs(10));
/// let report = gate.check(GateContext::new(".")).await?;
/// assert_eq!(report.status, GateStatus::Failed { code: Some(2), signal: None });
/// assert_eq!(report.output(), "checking\n");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct ShellGate {
    name: String,
    command: String,
    required: bool,
    timeout: Duration,
    grace: Duration,
    network: bool,
}

impl ShellGate {
    /// A required gate with a 5-minute timeout.
    pub fn new(name: impl Into<String>, command: impl Into<String>) -> Self {
        ShellGate {
            name: name.into(),
            command: command.into(),
            required: true,
            timeout: Duration::from_secs(300),
            grace: crate::process::DEFAULT_GRACE,
            network: false,
        }
    }

    /// Sets whether the command has the network in a sandbox (by default it has not:
    /// `[[gates]] network = true`).
    #[must_use]
    pub fn network(mut self, on: bool) -> Self {
        self.network = on;
        self
    }

    /// Sets whether a failure blocks the task (the default: it does). Read it with
    /// [`Gate::required`](crate::Gate::required).
    #[must_use]
    pub fn with_required(mut self, required: bool) -> Self {
        self.required = required;
        self
    }

    /// Sets the timeout.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the grace period between SIGTERM and SIGKILL.
    #[must_use]
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The command.
    pub fn command(&self) -> &str {
        &self.command
    }
}

#[async_trait]
impl Gate for ShellGate {
    /// The command runs in its own process, in the context's sandbox.
    fn in_process(&self) -> bool {
        false
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn required(&self) -> bool {
        self.required
    }

    /// Runs the command in its own process group, supervised as the type's docs say.
    async fn check(&self, ctx: GateContext) -> Result<GateReport, GateError> {
        let offline = ctx.sandbox.confines() && !self.network;
        let report = self.spec(ctx).run().await.map_err(|err| self.error(err))?;
        let mut gate = GateReport::new(&self.name, self.required, status(&report, self.timeout));
        gate.duration = report.duration;
        gate.leaked = report.leaked;
        gate.output = report.output;
        gate.offline = offline;
        Ok(gate)
    }
}

impl ShellGate {
    fn spec(&self, ctx: GateContext) -> ProcessSpec {
        let sandbox = ctx.sandbox.clone();
        let sandbox = if sandbox.confines() {
            sandbox.network(self.network)
        } else {
            sandbox
        };
        let spec = ProcessSpec::new("sh")
            .sandbox(sandbox)
            .arg("-c")
            .arg(&self.command)
            .owner(crate::process::owner_of(&ctx.workspace))
            .cwd(ctx.workspace)
            .timeout(self.timeout)
            .grace(self.grace)
            .stop(ctx.stop);
        match ctx.log_path {
            Some(path) => spec.log_path(path),
            None => spec,
        }
    }

    fn error(&self, err: ProcessError) -> GateError {
        let gate = self.name.clone();
        match err {
            ProcessError::Spawn { .. } | ProcessError::Cwd { .. } => GateError::Spawn {
                gate,
                source: err.into(),
            },
            ProcessError::Log { .. } | ProcessError::Io { .. } => GateError::Io {
                gate,
                source: err.into(),
            },
        }
    }
}

fn status(report: &ProcessReport, timeout: Duration) -> GateStatus {
    if report.timed_out {
        GateStatus::TimedOut { after: timeout }
    } else if report.stopped {
        GateStatus::Stopped
    } else if report.success() {
        GateStatus::Passed
    } else {
        GateStatus::Failed {
            code: report.code(),
            signal: report.signal(),
        }
    }
}
