//! The one way every mode runs gates: each under the step's deadline, the run's stop token
//! and the grace, reported as an event; in order, the first required failure ending the
//! check.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use super::deadline::until_deadline;
use super::logs::Emitter;
use crate::event::Event;
use crate::gate::{Gate, GateContext, GateError, GateReport, GateStatus};
use crate::model::TaskId;
use crate::process::StopToken;

/// Where and under which limits gates run.
#[derive(Clone, Copy)]
pub(crate) struct GateRun<'a> {
    pub(crate) workspace: &'a Path,
    /// How the gates are confined.
    pub(crate) sandbox: &'a super::sandbox::RunSandbox,
    /// The run's stop token; each gate gets a child of it.
    pub(crate) stop: &'a StopToken,
    pub(crate) grace: Duration,
    /// The step's deadline.
    pub(crate) deadline: Instant,
    pub(crate) emitter: &'a Emitter,
    /// What the gates check: the task, its name and the attempt.
    pub(crate) task: &'a TaskId,
    pub(crate) task_name: &'a str,
    pub(crate) attempt: u32,
    /// The user's branch, when the gates run in the user's own work tree during a turn:
    /// its untracked files are set aside while they run (see `runtime::home::gates`).
    pub(crate) home: Option<&'a super::home::Home>,
}

/// Runs one gate, logging to `log`: its report (passed, failed, or its own timeout), or
/// `None` when it did not finish: the run was stopped (`run.stop` has stopped) or the
/// step's deadline stopped it.
///
/// # Errors
///
/// [`GateError`] when the gate could not run at all.
pub(crate) async fn check_one(
    gate: &dyn Gate,
    run: GateRun<'_>,
    log: Option<PathBuf>,
) -> Result<Option<GateReport>, GateError> {
    let token = run.stop.child();
    let mut ctx = GateContext::new(run.workspace).stop(token.clone()).task(
        run.task.clone(),
        run.task_name,
        run.attempt,
    );
    if let Some(log) = log {
        ctx = ctx.log_path(log);
    }
    ctx.sandbox = run.sandbox.gate(run.workspace);
    let span = tracing::info_span!(
        target: "ralph",
        "gate",
        gate = gate.name(),
        task = %run.task,
        attempt = run.attempt,
    );
    let checked = until_deadline(run.deadline, &token, run.grace, gate.check(ctx));
    let Some(report) = checked.instrument(span).await else {
        return Ok(None);
    };
    let report = report?;
    run.emitter.emit(&Event::GateFinished {
        task: run.task.clone(),
        gate: report.name.clone(),
        required: report.required,
        status: report.status.clone(),
        duration: report.duration,
    });
    // Stopped, by the run's stop token or the deadline that stopped its own.
    if run.stop.is_stopped() || report.status == GateStatus::Stopped {
        return Ok(None);
    }
    Ok(Some(report))
}

/// The failure for the retry prompt: a headline with the output's last line (usually the
/// error), then the bounded output itself.
pub(crate) fn failure(report: &GateReport) -> String {
    let output = report.output.to_string();
    let last = output.lines().rev().find(|l| !l.trim().is_empty());
    let headline = match last {
        Some(line) => format!(
            "Quality gate `{}` {}: {}",
            report.name,
            report.status,
            line.trim()
        ),
        None => format!(
            "Quality gate `{}` {} with no output.",
            report.name, report.status
        ),
    };
    let offline = if report.offline {
        "\n\nIt ran in ralph's sandbox without network: a test that needs a server outside \
         fails there (`network = true` in its [[gates]] entry gives it the network)."
    } else {
        ""
    };
    format!(
        "{headline}\n\nIts output:\n\n```\n{}\n```{offline}",
        output.trim_end()
    )
}
