//! A thread's dry run: what the next call that runs the loop (`start`, `run`, `resume`,
//! `manual_assist`) would do, worked out from the record and the spec, without starting
//! an agent or a check, without taking the workspace's lock and without writing anything.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use super::phase::{Phase, PhaseKind};
use super::spec::ThreadSpec;
use super::{ThreadError, Threads};

/// What [`Thread::dry_run`](super::Thread::dry_run) found.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ThreadDryRun {
    /// The thread.
    pub id: String,
    /// Its phase.
    pub phase: PhaseKind,
    /// What the next call that runs the loop would do; `None` when the phase waits for a
    /// person's checkpoint instead.
    pub next: Option<String>,
    /// What the phase waits for, when it waits for a person.
    pub waits_for: Option<String>,
    /// The promise tag the model must print to claim done, if the spec has one.
    pub promise: Option<String>,
    /// The acceptance criteria: each with `(command)` or `(verifier)`.
    pub criteria: Vec<String>,
    /// The agents the loop would run with, in order (a fallback chain when several).
    pub agents: Vec<String>,
    /// How its agents and checks would be confined ("Sandbox" in docs/running.md).
    pub sandbox: String,
    /// The verifier of the criteria without a command: a registered name, or the agents
    /// above.
    pub verifier: Option<String>,
    /// Where the loop's prompt comes from: the file named in `[prompts] thread`, or
    /// `None` for the built-in one.
    pub prompt: Option<String>,
    /// Iterations per round.
    pub max_iterations: u32,
    /// One agent run's limit.
    #[serde(serialize_with = "crate::time::secs")]
    pub agent_timeout: Duration,
    /// One criterion command's limit.
    #[serde(serialize_with = "crate::time::secs")]
    pub check_timeout: Duration,
    /// The run-wide limits (`max_cost_usd`, `max_tokens`) and what the thread spent
    /// against them; `None` without limits.
    pub budget: Option<String>,
}

impl fmt::Display for ThreadDryRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Dry run of thread {} (nothing was run or written)",
            self.id
        )?;
        writeln!(f, "  phase:     {}", self.phase)?;
        if let Some(next) = &self.next {
            writeln!(f, "  next:      {next}")?;
            match &self.prompt {
                Some(file) => writeln!(f, "  prompt:    thread ({file})")?,
                None => writeln!(f, "  prompt:    thread (built-in)")?,
            }
        }
        if let Some(waits) = &self.waits_for {
            writeln!(f, "  waits for: {waits}")?;
        }
        if let Some(promise) = &self.promise {
            writeln!(f, "  promise:   {promise}")?;
        }
        for criterion in &self.criteria {
            writeln!(f, "  criterion: {criterion}")?;
        }
        writeln!(f, "  agents:    {}", self.agents.join(", "))?;
        writeln!(f, "  sandbox:   {}", self.sandbox)?;
        if let Some(verifier) = &self.verifier {
            writeln!(f, "  verifier:  {verifier}")?;
        }
        write!(
            f,
            "  limits:    {} iteration(s) per round, agent timeout {}, check timeout {}",
            self.max_iterations,
            humantime::format_duration(self.agent_timeout),
            humantime::format_duration(self.check_timeout),
        )?;
        if let Some(budget) = &self.budget {
            write!(f, "\n  budget:    {budget}")?;
        }
        Ok(())
    }
}

impl Threads {
    /// See [`Thread::dry_run`](super::Thread::dry_run).
    pub(crate) fn dry_run(&self, id: &str) -> Result<ThreadDryRun, ThreadError> {
        let record = self.get(id)?;
        let spec = ThreadSpec::parse(&self.spec_text(&record)?).ok();
        let config = match record.phase.kind() {
            // `start` gives the thread this handle's settings.
            PhaseKind::Finalized | PhaseKind::PreflightFailed => self.run_config.clone(),
            _ => record.config.clone(),
        };
        let agents = match self.chain(&config) {
            Ok(chain) => chain.into_iter().map(|(name, _)| name).collect(),
            Err(reason) => vec![format!("(unusable: {reason})")],
        };
        let next_iteration = record.attempts.last().map_or(1, |a| a.iteration + 1);
        let round = |from: u32| {
            format!(
                "iterations {from} to {} with {}",
                from.saturating_add(config.max_iterations.saturating_sub(1)),
                agents.first().map_or("the agent", String::as_str)
            )
        };
        let (next, waits_for) = next_step(
            &record.phase,
            self.quick_for(&record),
            next_iteration,
            round,
        );
        Ok(ThreadDryRun {
            id: record.id.clone(),
            phase: record.phase.kind(),
            next,
            waits_for,
            promise: spec.as_ref().map(|s| s.promise.clone()),
            criteria: criterion_lines(spec.as_ref()),
            agents,
            sandbox: self.ctx.sandbox.describe(),
            verifier: config.verifier.clone(),
            prompt: self.ctx.prompts.origin("thread").map(str::to_owned),
            max_iterations: config.max_iterations,
            agent_timeout: config.agent_timeout,
            check_timeout: config.check_timeout,
            budget: self.budget(&record.id)?.describe(),
        })
    }
}

/// What the loop's next call would do in `phase`, and what the thread waits for instead
/// when nothing would run. `round(from)` names the iterations a run would go through.
fn next_step(
    phase: &Phase,
    quick: bool,
    next_iteration: u32,
    round: impl Fn(u32) -> String,
) -> (Option<String>, Option<String>) {
    match phase {
        Phase::Finalized | Phase::PreflightFailed { .. } => (
            Some(format!(
                "preflight (a clean tree, a commit to start from, the spec's promise tag and \
                 criteria, an agent, no other thread running), then {}",
                if quick {
                    round(next_iteration)
                } else {
                    "Configuring".to_owned()
                }
            )),
            None,
        ),
        Phase::Configuring => (Some(round(next_iteration)), None),
        Phase::Paused { iteration, .. } => (Some(format!("resume: {}", round(*iteration))), None),
        Phase::Running { iteration } | Phase::Verifying { iteration } => (
            Some(format!(
                "recover it as Paused (its process is gone), then resume: {}",
                round(*iteration)
            )),
            None,
        ),
        Phase::Stuck { .. } => (
            Some(format!("manual assist: {}", round(next_iteration))),
            Some("a person's choice: revise, reconfigure, assist or abandon".into()),
        ),
        Phase::Drafting | Phase::Assessing => (None, Some("a person to finalize the spec".into())),
        Phase::Implemented | Phase::Polishing => {
            (None, Some("polish, or submission for review".into()))
        }
        Phase::PendingReview { .. } => {
            (None, Some("a person's review: approve or send back".into()))
        }
        Phase::Approved | Phase::ReadyToCommit { .. } => (None, Some("a person to commit".into())),
        _ => (None, Some("nothing: the thread is over".into())),
    }
}

/// The spec's criteria, each with how it is checked.
fn criterion_lines(spec: Option<&ThreadSpec>) -> Vec<String> {
    spec.iter()
        .flat_map(|s| &s.criteria)
        .map(|c| {
            let how = if c.command.is_some() {
                "command"
            } else {
                "verifier"
            };
            format!("{} ({how})", c.text)
        })
        .collect()
}
