//! One implementer attempt, in every mode that builds tasks (the construct loop, build
//! mode): a fresh agent run, the claim in its final answer, then the required gates. "Done
//! is ralph's verdict" is written here once; each pipeline maps only what differs (what a
//! kill leads to, how a failure is remembered).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::time::Instant;

use super::call::{Call, Caller, Limit};
use super::error::Error;
use super::gates::{self, GateRun};
use super::home::GatesWatch;
use super::referee::Referee;
use super::sandbox::RunSandbox;
use crate::agent::{AgentExit, AgentRun, Claim, FailureKind};
use crate::gate::{Gate, GateError};
use crate::output::first_line;

/// How one attempt ended: the verdict on it, in every mode that builds tasks.
#[derive(Debug, PartialEq)]
pub(crate) enum AttemptEnd {
    /// The agent claimed done and every required gate passed.
    Done,
    /// The task waits for a person, for this reason: the agent said it cannot go on, or
    /// its passing work could not be merged ([`Attempt::kept`]).
    Blocked(String),
    /// The attempt did not pass: the failure for the next attempt's prompt.
    Failed(String),
    /// The agent asked a person this question (`<TASK_QUESTION question="…">`): the task
    /// waits for the answer; the attempt is no failure.
    Question(String),
    /// A limit stopped the agent, or the step's deadline stopped a gate.
    Killed(Limit),
    /// The run was stopped.
    Interrupted,
}

/// One attempt, returned by value: how it ended and what it left.
#[derive(Debug)]
pub(crate) struct Attempt {
    pub(crate) end: AttemptEnd,
    /// The required gate that failed, or that the deadline stopped, if one did.
    pub(crate) gate: Option<String>,
    /// What was tried, in one line: the first line of the agent's answer that is not a
    /// marker (seed 003's recent attempts).
    pub(crate) tried: Option<String>,
    /// The agent run's log, relative to the workspace.
    pub(crate) log: Option<PathBuf>,
    /// The step's deadline, moved by the time waited out (rate limits, transient failures).
    pub(crate) deadline: Instant,
    /// The commit that holds the passing work, once a pipeline made it.
    pub(crate) commit: Option<String>,
    /// The branch passing work is kept on when it could not be merged (files of the user's
    /// were in the way): the task is blocked until a person clears the way.
    pub(crate) kept: Option<String>,
}

impl Attempt {
    /// An attempt that ended `end` before its agent gave anything, under `deadline`.
    pub(crate) fn ended(end: AttemptEnd, deadline: Instant) -> Attempt {
        Attempt {
            end,
            gate: None,
            tried: None,
            log: None,
            deadline,
            commit: None,
            kept: None,
        }
    }

    /// This attempt failed for `failure` (the agent moved a branch, a merge conflicted),
    /// unless a limit or a stop ended it first.
    pub(crate) fn failed_unless_stopped(self, failure: String) -> Attempt {
        match self.end {
            AttemptEnd::Killed(_) | AttemptEnd::Interrupted => self,
            _ => Attempt {
                end: AttemptEnd::Failed(failure),
                gate: None,
                commit: None,
                ..self
            },
        }
    }

    /// Whether it passed.
    pub(crate) fn done(&self) -> bool {
        self.end == AttemptEnd::Done
    }
}

/// Runs one attempt: `call` through `caller` (waits for rate limits and transient failures
/// move its deadline), then, if the final answer claims done, `gates` in order under that
/// deadline, each logging to `gate_log(name)`.
///
/// # Errors
///
/// [`Error::AgentFatal`] when the agent failed in a way no retry can fix,
/// [`Error::AgentUnreachable`] when it could not reach its API,
/// [`Error::BudgetExhausted`] when the run-wide budget is spent;
/// [`Error::Agent`] or [`Error::Gate`] when one could not run at all.
pub(crate) async fn run(
    caller: &Caller,
    mut call: Call,
    gates: &[Arc<dyn Gate>],
    gate_run: GateRun<'_>,
    gate_log: impl Fn(&str) -> PathBuf,
) -> Result<Attempt, Error> {
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
    let run = caller.call(&mut call).await?;
    let mut attempt = Attempt::ended(AttemptEnd::Interrupted, call.deadline);
    attempt.log = run.log_path.as_deref().map(|p| caller.relative(p));
    if let Some(failure) = judged_with_changed(sandbox, tree)? {
        attempt.end = failure;
        return Ok(attempt);
    }
    if let Some(end) = unanswered(caller, &call, &run)? {
        attempt.end = end;
        return Ok(attempt);
    }
    attempt.tried = summary(&run.final_text);
    attempt.end = match run.claim() {
        Claim::Done => {
            let run = GateRun {
                deadline: call.deadline,
                ..gate_run
            };
            let (end, gate) = judged(gates, run, gate_log, tree).await?;
            attempt.gate = gate;
            end
        }
        Claim::Blocked(reason) => AttemptEnd::Blocked(reason),
        Claim::Question(question) => AttemptEnd::Question(question),
        Claim::NotDone(why) => AttemptEnd::Failed(why),
    };
    Ok(attempt)
}

/// How an attempt ends when its agent's run gave no answer to judge; `None` when it did.
fn unanswered(caller: &Caller, call: &Call, run: &AgentRun) -> Result<Option<AttemptEnd>, Error> {
    Ok(Some(match &run.exit {
        AgentExit::Completed => return Ok(None),
        AgentExit::Stopped => AttemptEnd::Interrupted,
        AgentExit::Failed { reason, kind } if kind.ends_the_run() => {
            return Err(caller.fatal(call, reason.clone(), *kind));
        }
        // A retry would spend the same again and stop at the same cap: a person decides.
        AgentExit::Failed {
            reason,
            kind: FailureKind::RunBudget,
        } => AttemptEnd::Blocked(format!(
            "the agent's run reached its own spending cap ([claude] max_budget_usd): \
             {reason}; raise the cap or split the task"
        )),
        AgentExit::Failed { reason, .. } => {
            AttemptEnd::Failed(format!("The agent run failed: {reason}"))
        }
        // Ridden out by the callers of the pipelines that build tasks; kept total.
        AgentExit::RateLimited { .. } => AttemptEnd::Failed("The agent was rate limited.".into()),
        exit => AttemptEnd::Killed(Limit::of(exit, call.deadline).unwrap_or(Limit::Stage)),
    }))
}

/// The required gates' verdict on an attempt that claims done, and the gate that gave it.
/// The user's untracked files are set aside while they run (in the user's own work tree,
/// during a turn), and the files the work is judged with must be as they were after.
async fn judged(
    gates: &[Arc<dyn Gate>],
    run: GateRun<'_>,
    gate_log: impl Fn(&str) -> PathBuf,
    tree: Option<(&Referee, &Path)>,
) -> Result<(AttemptEnd, Option<String>), Error> {
    let sandbox = run.sandbox;
    // With no gate nothing is judged in between: no file to set aside or to catch.
    let watch = match run.home.filter(|_| !gates.is_empty()) {
        Some(home) => home.gates_begin(&sandbox.referee().paths()).await?,
        None => None,
    };
    let ended = check_gates(gates, run, gate_log).await;
    if let (Some(home), Some(watch)) = (run.home, &watch) {
        home.gates_end(watch).await?;
    }
    // A test the agent wrote, run by an unconfined gate, is the agent's hands too.
    if let Some(failure) = judged_with_changed(sandbox, tree)? {
        return Ok((failure, None));
    }
    Ok(match ended? {
        (AttemptEnd::Failed(failure), gate) => (
            AttemptEnd::Failed(with_set_aside(failure, watch.as_ref())),
            gate,
        ),
        ended => ended,
    })
}

/// Runs `gates` in order, each logging to `log(gate name)`, until a required one fails.
/// Returns how the check ends, and the gate that ended it: [`AttemptEnd::Done`] when every
/// required gate passed (optional failures were reported, not enforced), `Failed` with the
/// failure for the retry prompt, `Killed` when the step's deadline stopped a gate, or
/// `Interrupted`.
///
/// # Errors
///
/// [`GateError`] when a gate could not run at all.
pub(crate) async fn check_gates(
    gates: &[Arc<dyn Gate>],
    run: GateRun<'_>,
    log: impl Fn(&str) -> PathBuf,
) -> Result<(AttemptEnd, Option<String>), GateError> {
    for gate in gates {
        let name = Some(gate.name().to_owned());
        match gates::check_one(gate.as_ref(), run, Some(log(gate.name()))).await? {
            Some(report) if report.blocks() => {
                return Ok((AttemptEnd::Failed(gates::failure(&report)), name));
            }
            Some(_) => {}
            None if run.stop.is_stopped() => return Ok((AttemptEnd::Interrupted, None)),
            None => return Ok((AttemptEnd::Killed(Limit::Stage), name)),
        }
    }
    Ok((AttemptEnd::Done, None))
}

/// After an agent run or the gates: a file the referee judges with that changed since the
/// run began. Unconfined, the agent did it: the file is put back and the attempt fails,
/// naming it. Confined, no agent could: a person's change stops the run. `tree` is a task's
/// work tree with the referee of its own copies.
fn judged_with_changed(
    sandbox: &RunSandbox,
    tree: Option<(&Referee, &Path)>,
) -> Result<Option<AttemptEnd>, Error> {
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
    Ok(Some(AttemptEnd::Failed(failure)))
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
