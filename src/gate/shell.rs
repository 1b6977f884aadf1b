//! `ShellGate`: a shell command as a quality gate. Placeholder.

use std::time::Duration;

use async_trait::async_trait;

use super::{Gate, GateContext, GateError, GateReport, GateStatus};

/// Runs `sh -c <command>` in the workspace.
#[derive(Clone, Debug)]
pub struct ShellGate {
    name: String,
    command: String,
    required: bool,
    timeout: Duration,
    grace: Duration,
}

impl ShellGate {
    /// A required gate with a 5-minute timeout.
    pub fn new(name: impl Into<String>, command: impl Into<String>) -> Self {
        ShellGate {
            name: name.into(),
            command: command.into(),
            required: true,
            timeout: Duration::from_secs(300),
            grace: Duration::from_secs(5),
        }
    }

    /// Sets whether a failure blocks the task.
    #[must_use]
    pub fn required(mut self, required: bool) -> Self {
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
    fn name(&self) -> &str {
        &self.name
    }

    fn required(&self) -> bool {
        self.required
    }

    async fn check(&self, ctx: GateContext) -> Result<GateReport, GateError> {
        let out = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(&self.command)
            .current_dir(&ctx.workspace)
            .output()
            .await
            .map_err(|source| GateError::Spawn {
                gate: self.name.clone(),
                source,
            })?;
        let status = if out.status.success() {
            GateStatus::Passed
        } else {
            GateStatus::Failed {
                code: out.status.code(),
                signal: None,
            }
        };
        let mut output = crate::output::BoundedOutput::with_defaults();
        output.push(&out.stdout);
        output.push(&out.stderr);
        Ok(GateReport::new(&self.name, self.required, status).with_output(output))
    }
}
