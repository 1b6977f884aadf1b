//! One implementer attempt, in every mode that builds tasks (the construct loop, build
//! mode): a fresh agent run, the claim in its final answer, then the required gates. "Done
//! is ralph's verdict" is written here once; each pipeline maps only what differs (what a
//! kill leads to, how a failure is remembered).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::call::{Call, Caller, Ending, ends_the_run};
use super::error::Error;
use super::gates::{self, GateRun, GatesEnd};
use super::home::GatesWatch;
use super::referee::Referee;
use super::sandbox::RunSandbox;
use crate::agent::Claim;
use crate::agent::FailureKind;
use crate::gate::Gate;
use crate::model::KillReason;
use crate::output::first_line;

/// How one attempt ended.
#[derive(Debug)]
pub(crate) enum Attempted {
    /// The agent claimed done and every required gate passed.
    Done,
    /// The agent said it cannot go on, and why.
    Blocked(String),
    /// The attempt did not pass: the failure for the next attempt's prompt, and the
    /// required gate that failed, if one did.
    Failed {
        failure: String,
        gate: Option<String>,
    },
    /// A limit stopped the agent, or the deadline stopped a gate (`gate`, which build mode
    /// names in its failure).
    Killed {
        reason: KillReason,
        #[cfg(feature = "specs")]
        gate: Option<String>,
    },
    /// The run was stopped.
    Interrupted,
}

/// What an attempt produced besides how it ended.
#[derive(Debug, Default)]
pub(crate) struct Trace {
    /// What was tried, in one line: the first line of the agent's answer that is not a
    /// marker (seed 003's recent attempts).
    pub(crate) tried: Option<String>,
    /// The agent run's log, relative to the workspace.
    pub(crate) log: Option<PathBuf>,
}

/// Runs one attempt: `call` through `caller` (waits for rate limits and transient failures
/// move `call.deadline`), then, if the final answer claims done, `gates` in order under
/// that deadline, each logging to `gate_log(name)`.
///
/// # Errors
///
/// [`Error::AgentFatal`] when the agent failed in a way no retry can fix,
/// [`Error::AgentUnreachable`] when it could not reach its API,
/// [`Error::BudgetExhausted`] when the run-wide budget is spent;
/// [`Error::Agent`] or [`Error::Gate`] when one could not run at all.
pub(crate) async fn run(
    caller: &Caller,
    call: &mut Call,
    gates: &[Arc<dyn Gate>],
    gate_run: GateRun<'_>,
    gate_log: impl Fn(&str) -> PathBuf,
) -> Result<(Attempted, Trace), Error> {
    let mut trace = Trace::default();
    let sandbox = gate_run.sandbox;
    // Changed before the agent runs: a person's (see `runtime::referee`).
    sandbox.referee().refuse_changes(sandbox.workspace())?;
    // In a task's work tree the gates judge with the tree's own copies: held to what they
    // are before its agent runs.
    let copies = (gate_run.workspace != sandbox.workspace()).then(|| {
        sandbox
            .referee()
            .in_tree(sandbox.workspace(), gate_run.workspace)
    });
    let tree = copies.as_ref().map(|copies| (copies, gate_run.workspace));
    let ending = caller.call(call).await?;
    if let Some(failure) = judged_with_changed(sandbox, tree)? {
        return Ok((failure, trace));
    }
    let run = match ending {
        Ending::Answer(run) => run,
        Ending::Interrupted => return Ok((Attempted::Interrupted, trace)),
        Ending::Killed { reason, log } => {
            trace.log = log;
            let killed = Attempted::Killed {
                reason,
                #[cfg(feature = "specs")]
                gate: None,
            };
            return Ok((killed, trace));
        }
        Ending::Failed { reason, kind } if ends_the_run(kind) => {
            return Err(caller.fatal(call, reason, kind));
        }
        // A retry would spend the same again and stop at the same cap: a person decides.
        Ending::Failed {
            reason,
            kind: FailureKind::RunBudget,
        } => {
            let why = format!(
                "the agent's run reached its own spending cap ([claude] max_budget_usd): \
                 {reason}; raise the cap or split the task"
            );
            return Ok((Attempted::Blocked(why), trace));
        }
        Ending::Failed { reason, .. } => {
            let failure = format!("The agent run failed: {reason}");
            return Ok((
                Attempted::Failed {
                    failure,
                    gate: None,
                },
                trace,
            ));
        }
        // Ridden out by the callers of the pipelines that build tasks; kept total.
        Ending::RateLimited(_) => {
            let failure = "The agent was rate limited.".to_owned();
            return Ok((
                Attempted::Failed {
                    failure,
                    gate: None,
                },
                trace,
            ));
        }
    };
    trace.tried = summary(&run.final_text);
    trace.log = run.log_path.as_deref().map(|p| caller.relative(p));
    let end = match run.claim() {
        Claim::Done => {
            let home = gate_run.home;
            let run = GateRun {
                deadline: call.deadline,
                ..gate_run
            };
            // With no gate nothing is judged in between: no file to set aside or to catch.
            let watch = match home.filter(|_| !gates.is_empty()) {
                Some(home) => home.gates_begin(&sandbox.referee().paths()).await?,
                None => None,
            };
            let ended = gates::check_all(gates, run, gate_log).await;
            if let (Some(home), Some(watch)) = (home, &watch) {
                home.gates_end(watch).await?;
            }
            // A test the agent wrote, run by an unconfined gate, is the agent's hands too.
            if let Some(failure) = judged_with_changed(sandbox, tree)? {
                return Ok((failure, trace));
            }
            match ended? {
                GatesEnd::Passed => Attempted::Done,
                GatesEnd::Failed { gate, failure } => Attempted::Failed {
                    failure: with_set_aside(failure, watch.as_ref()),
                    gate: Some(gate),
                },
                #[cfg(feature = "specs")]
                GatesEnd::TimedOut { gate } => Attempted::Killed {
                    reason: KillReason::Timeout,
                    gate: Some(gate),
                },
                #[cfg(not(feature = "specs"))]
                GatesEnd::TimedOut { .. } => Attempted::Killed {
                    reason: KillReason::Timeout,
                },
                GatesEnd::Interrupted => Attempted::Interrupted,
            }
        }
        Claim::Blocked(reason) => Attempted::Blocked(reason),
        Claim::NotDone(why) => Attempted::Failed {
            failure: why,
            gate: None,
        },
    };
    Ok((end, trace))
}

/// After an agent run or the gates: a file the referee judges with that changed since the
/// run began. Unconfined, the agent did it: the file is put back and the attempt fails,
/// naming it. Confined, no agent could: a person's change stops the run. `tree` is a task's
/// work tree with the referee of its own copies.
fn judged_with_changed(
    sandbox: &RunSandbox,
    tree: Option<(&Referee, &Path)>,
) -> Result<Option<Attempted>, Error> {
    let watched: Vec<(&Referee, &Path)> = std::iter::once((sandbox.referee(), sandbox.workspace()))
        .chain(tree)
        .collect();
    let changed: Vec<PathBuf> = watched
        .iter()
        .flat_map(|(referee, dir)| referee.changed(dir))
        .collect();
    if changed.is_empty() {
        return Ok(None);
    }
    if sandbox.confines() {
        return Err(Error::ChangedDuringRun { paths: changed });
    }
    let names: Vec<String> = changed.iter().map(|p| p.display().to_string()).collect();
    let lost: Vec<PathBuf> = watched
        .iter()
        .flat_map(|(referee, _)| referee.restore())
        .collect();
    let put_back = match lost.is_empty() {
        true => "ralph put it back as it was".to_owned(),
        false => format!(
            "ralph could not put back {}",
            lost.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let failure = format!(
        "This attempt changed {}, which ralph judges the work with; {put_back}. Do not edit \
         ralph.toml, the gates' scripts or the spec: change the code until the gates pass.",
        crate::output::list_some(&names, 5)
    );
    Ok(Some(Attempted::Failed {
        failure,
        gate: None,
    }))
}

/// A gate's `failure`, and the untracked files that were set aside while it ran, which
/// it may have needed: the task's commit would not hold them.
fn with_set_aside(failure: String, watch: Option<&GatesWatch>) -> String {
    let moved = watch.map(GatesWatch::moved).unwrap_or_default();
    if moved.is_empty() {
        return failure;
    }
    format!(
        "{failure}\n\nWhile the gates ran, untracked files that were there before this task \
         were set aside, as its commit will not hold them: {}. If the gates need one, the \
         task must create it (or a person commits it first).",
        crate::output::list_some(moved, 10)
    )
}

/// The name of a gate's log for `attempt` of `task`, in every mode: `gate-<gate>-<task>-a<n>`
/// (made safe as a file name by the caller's folder).
pub(crate) fn gate_log_name(gate: &str, task: &str, attempt: u32) -> String {
    format!("gate-{gate}-{task}-a{attempt}")
}

/// What an attempt tried: the first line of the agent's answer that is not a marker.
fn summary(answer: &str) -> Option<String> {
    answer
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("<TASK_") && *l != "RALPH_DONE")
        .map(first_line)
}
