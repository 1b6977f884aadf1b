//! How a construct run ended.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::TaskId;

/// A task or issue that cannot proceed, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BlockedItem {
    /// The task or issue id.
    pub id: String,
    /// Why it is blocked.
    pub reason: String,
}

impl BlockedItem {
    /// A blocked item.
    pub fn new(id: impl Into<String>, reason: impl Into<String>) -> Self {
        BlockedItem {
            id: id.into(),
            reason: reason.into(),
        }
    }
}

/// `gates a, b passed; accepted by a verifier: t-1; …; the gap analysis of iteration 2
/// found nothing missing`: what a complete construct run rests on.
fn evidence(
    f: &mut fmt::Formatter<'_>,
    gates: &[String],
    verifier: &[TaskId],
    people: &[TaskId],
    gap_analysis: u32,
) -> fmt::Result {
    match gates {
        [] => f.write_str("no required gates")?,
        gates => write!(f, "gates {} passed", gates.join(", "))?,
    }
    let ids = |ids: &[TaskId]| {
        ids.iter()
            .map(TaskId::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !verifier.is_empty() {
        write!(f, "; accepted by a verifier: {}", ids(verifier))?;
    }
    if !people.is_empty() {
        write!(f, "; accepted by a person: {}", ids(people))?;
    }
    write!(
        f,
        "; the gap analysis of iteration {gap_analysis} found nothing missing"
    )
}

/// How a construct run ended. Running out of a limit is an outcome, not an error.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Outcome {
    /// Every task was accepted and no issue is open: the spec is complete. With what that
    /// rests on: the gates that checked the work, who accepted each task, and the gap
    /// analysis that found nothing missing.
    Complete {
        /// Iterations used.
        iterations: u32,
        /// Tasks accepted over the whole run.
        accepted: usize,
        /// The required gates the accepted tasks passed, by name, in the order first seen;
        /// empty when no gate was required (the work is then done on the agent's word and
        /// the verifier's).
        gates: Vec<String>,
        /// Tasks a verifier accepted.
        verifier: Vec<TaskId>,
        /// Tasks a person accepted (`ralph task accept`).
        people: Vec<TaskId>,
        /// The iteration whose gap analysis compared the spec with the code and found
        /// nothing missing.
        gap_analysis: u32,
    },
    /// Every task was accepted, but the gap analysis that compares the spec with the code
    /// gave no valid answer, even when asked again: nothing says the spec is done. A person
    /// must look; the next run asks again.
    Unverified {
        /// Why the gap analysis gave no answer.
        reason: String,
    },
    /// The iteration limit was reached with work remaining.
    MaxIterations {
        /// The limit.
        limit: u32,
        /// Work not yet accepted: pending, done and blocked tasks, plus open issues (each of
        /// which becomes tasks).
        remaining: usize,
    },
    /// Work remains but all of it is blocked.
    Blocked {
        /// What is blocked and why.
        items: Vec<BlockedItem>,
    },
    /// An agent asked a person a question (`<TASK_QUESTION question="…">`) and nothing else
    /// could go on while it waited for the answer ([`Config::question_wait`](crate::Config::question_wait)).
    /// Answer with [`steer::answer`](https://docs.rs/ralph-loop/latest/ralph/steer/fn.answer.html) (`ralph answer t-3 "…"`); the same
    /// call resumes, and the asking task's next attempt gets the question and the answer.
    AwaitingAnswer {
        /// Each question: what asked it (a task, an issue) as `id`, the question as `reason`.
        questions: Vec<BlockedItem>,
    },
    /// One iteration ran and [`Config::once`](crate::Config::once) asked for no more
    /// (seed 003's `--once`); the same call runs the next one.
    Once {
        /// The iteration that ran.
        iteration: u32,
        /// Work not yet accepted, counted as for [`MaxIterations`](Self::MaxIterations).
        remaining: usize,
    },
    /// The run was asked to stop once the board is planned
    /// ([`Ralph::construct_plan`](https://docs.rs/ralph-loop/latest/ralph/struct.Ralph.html#method.construct_plan), `ralph construct
    /// --plan-only`; seed 000's `plan` mode): every open issue is investigated into tasks
    /// and nothing was built. Read and edit the tasks, then construct to build them.
    Planned {
        /// Tasks not yet accepted (waiting to be built, or blocked).
        tasks: usize,
    },
    /// A person wrote `RALPH_DONE` in the progress file's Status section
    /// ([`ProgressStore`](crate::store::ProgressStore)) while work remained: the loop stopped
    /// as asked, but the work is not complete by ralph's verdict (the tasks left were never
    /// built, gated or verified). When nothing remains the outcome is
    /// [`Complete`](Self::Complete) instead.
    Declared {
        /// Work not yet accepted, counted as for [`MaxIterations`](Self::MaxIterations).
        remaining: usize,
    },
    /// The run-wide budget (`max_cost_usd`, `max_tokens`) was reached over the state the
    /// run belongs to: no new agent run started. Raise the limit to go on; the spend so far
    /// is kept and counts.
    BudgetExhausted {
        /// Dollars spent over the scope, by the runs that reported a cost.
        spent_usd: f64,
        /// Input and output tokens over the scope (cache reads and writes not counted).
        spent_tokens: u64,
        /// `max_cost_usd`, if set.
        max_cost_usd: Option<f64>,
        /// `max_tokens`, if set.
        max_tokens: Option<u64>,
    },
    /// Stopped by [`Ralph::stop_token`](https://docs.rs/ralph-loop/latest/ralph/struct.Ralph.html#method.stop_token) (Ctrl+C); the state is saved and
    /// the same call resumes.
    Interrupted,
    /// A person asked the run to stop ([`steer::stop`](https://docs.rs/ralph-loop/latest/ralph/steer/fn.stop.html), `ralph stop`):
    /// the agent runs and gates in flight finished and their results were recorded; the
    /// same call resumes.
    Stopped {
        /// Work not yet accepted, counted as for [`MaxIterations`](Self::MaxIterations).
        remaining: usize,
    },
    /// One required gate failed with the same output for several tasks in a row and no
    /// task passed it meanwhile: the gate itself is likely broken (a missing tool, a typo in
    /// its command), not the tasks. The last task stays pending (earlier ones may have used up
    /// their retries and been blocked); fix the gate, unblock those, and run again.
    GateBroken {
        /// The gate.
        gate: String,
        /// Its output, the same each time (bounded).
        failure: String,
        /// The tasks it failed, in order.
        tasks: Vec<TaskId>,
    },
}

impl Outcome {
    /// The exit code the `ralph` command uses: 0 complete or one iteration done
    /// (`--once`), 2 limit or a declared stop with work left, 3 blocked, waiting for an
    /// answer or unverified (a person must look), 4 stopped on request (`ralph stop`), 130 interrupted.
    pub fn exit_code(&self) -> i32 {
        match self {
            Outcome::Complete { .. } | Outcome::Once { .. } | Outcome::Planned { .. } => 0,
            Outcome::MaxIterations { .. }
            | Outcome::Declared { .. }
            | Outcome::BudgetExhausted { .. } => 2,
            Outcome::Blocked { .. }
            | Outcome::AwaitingAnswer { .. }
            | Outcome::GateBroken { .. }
            | Outcome::Unverified { .. } => 3,
            Outcome::Stopped { .. } => 4,
            Outcome::Interrupted => 130,
        }
    }
}

impl Outcome {
    /// Whether only a person can move the work on from here: blocked, unverified, a
    /// broken gate, or the budget spent (a person raises the limit) (the `needs_person` of [`Event::Finished`](crate::Event::Finished)).
    /// A limit, a `once` step, a declared stop and an interrupt are moved on from by
    /// running again.
    pub fn needs_person(&self) -> bool {
        // No wildcard: a new outcome must be placed here.
        match self {
            Outcome::Blocked { .. }
            | Outcome::AwaitingAnswer { .. }
            | Outcome::Unverified { .. }
            | Outcome::GateBroken { .. }
            | Outcome::BudgetExhausted { .. } => true,
            Outcome::Complete { .. }
            | Outcome::MaxIterations { .. }
            | Outcome::Once { .. }
            | Outcome::Planned { .. }
            | Outcome::Declared { .. }
            | Outcome::Stopped { .. }
            | Outcome::Interrupted => false,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Complete { .. } => self.write_complete(f),
            Outcome::Unverified { reason } => write!(
                f,
                "Unverified: every task is accepted, but the gap analysis that compares the \
                 spec with the code gave no valid answer ({reason}); nothing says the spec is done"
            ),
            Outcome::MaxIterations { limit, remaining } => write!(
                f,
                "Stopped: max iterations ({limit}) reached. Tasks remaining: {remaining}"
            ),
            Outcome::Once {
                iteration,
                remaining,
            } => write!(
                f,
                "Stopped after one iteration (once): iteration {iteration} finished. Tasks remaining: {remaining}"
            ),
            Outcome::Planned { tasks } => write!(
                f,
                "Planned: the open issues are investigated into {tasks} {} to build; nothing \
                 was built (plan only)",
                plural(*tasks, "task", "tasks")
            ),
            Outcome::Declared { remaining } => write!(
                f,
                "Stopped: RALPH_DONE in the progress file's Status section. Tasks remaining \
                 (not verified by ralph): {remaining}"
            ),
            Outcome::Blocked { items } => {
                write!(f, "Blocked: {} item(s) cannot proceed", items.len())?;
                for item in items {
                    write!(f, "\n  {}: {}", item.id, item.reason)?;
                }
                Ok(())
            }
            Outcome::AwaitingAnswer { questions } => awaiting(f, questions),
            Outcome::Stopped { remaining } => write!(
                f,
                "Stopped on request: what was in flight is recorded, {remaining} {} left; run \
                 the same command to resume.",
                if *remaining == 1 { "task" } else { "tasks" }
            ),
            Outcome::Interrupted => {
                f.write_str("Interrupted: state saved; run the same command to resume.")
            }
            Outcome::BudgetExhausted {
                spent_usd,
                spent_tokens,
                max_cost_usd,
                max_tokens,
            } => budget(f, *spent_usd, *spent_tokens, *max_cost_usd, *max_tokens),
            Outcome::GateBroken {
                gate,
                failure,
                tasks,
            } => gate_broken(f, gate, failure, tasks),
        }
    }
}

impl Outcome {
    /// "Spec complete: 3 tasks accepted in 2 iterations. Evidence: …."; nothing for another
    /// outcome.
    fn write_complete(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Outcome::Complete {
            iterations,
            accepted,
            gates,
            verifier,
            people,
            gap_analysis,
        } = self
        else {
            return Ok(());
        };
        write!(
            f,
            "Spec complete: {accepted} {} accepted in {iterations} {}. Evidence: ",
            plural(*accepted, "task", "tasks"),
            plural(*iterations as usize, "iteration", "iterations"),
        )?;
        evidence(f, gates, verifier, people, *gap_analysis)?;
        f.write_str(".")
    }
}

/// "Waiting for an answer: 1 question of an agent waits for a person", then each question.
fn awaiting(f: &mut fmt::Formatter<'_>, questions: &[BlockedItem]) -> fmt::Result {
    write!(
        f,
        "Waiting for an answer: {} {} for a person (ralph answer ID \"…\"), the state saved",
        questions.len(),
        plural(
            questions.len(),
            "agent's question waits",
            "agents' questions wait"
        ),
    )?;
    for item in questions {
        write!(f, "\n  {} asks: {}", item.id, item.reason)?;
    }
    Ok(())
}

/// "Stopped: gate test failed the same way for 3 tasks in a row (…)", with the first line of
/// its output.
fn gate_broken(
    f: &mut fmt::Formatter<'_>,
    gate: &str,
    failure: &str,
    tasks: &[TaskId],
) -> fmt::Result {
    write!(
        f,
        "Stopped: gate {gate} failed the same way for {} tasks in a row ({}); it looks \
         broken, not the tasks. Fix the gate, unblock any task it blocked, and run again.",
        tasks.len(),
        failure
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no output")
    )
}

/// "Stopped: budget exhausted: spent $1.20 of the $1.00 limit (…)".
fn budget(
    f: &mut fmt::Formatter<'_>,
    spent_usd: f64,
    spent_tokens: u64,
    max_cost_usd: Option<f64>,
    max_tokens: Option<u64>,
) -> fmt::Result {
    write!(
        f,
        "Stopped: budget exhausted: spent ${spent_usd:.2} and {spent_tokens} tokens"
    )?;
    write!(
        f,
        " (limit: {}); no agent run starts past it",
        budget_limits(max_cost_usd, max_tokens)
    )
}

/// The run-wide limits that are set, as `ralph.toml` writes them: `max_cost_usd = 1,
/// max_tokens = 5000`.
pub fn budget_limits(max_cost_usd: Option<f64>, max_tokens: Option<u64>) -> String {
    let limits: Vec<String> = [
        max_cost_usd.map(|m| format!("max_cost_usd = {m}")),
        max_tokens.map(|m| format!("max_tokens = {m}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    limits.join(", ")
}

/// `one` or `many`, by `n`.
fn plural(n: usize, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 { one } else { many }
}

#[cfg(feature = "specs")]
/// How build mode over `implementation.json` ([`Ralph::build_specs`](https://docs.rs/ralph-loop/latest/ralph/struct.Ralph.html#method.build_specs))
/// ended. Running out of attempts is an outcome, not an error.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum SpecsOutcome {
    /// Every spec is completed: each one's tasks passed the required gates and its verifier
    /// accepted it, then it was committed.
    Complete {
        /// Specs completed (and committed) by this run.
        specs: usize,
        /// Tasks completed by this run.
        tasks: usize,
        /// The required gates every task passed, by name; empty when none was required
        /// (the tasks were then done on the agent's word and the verifier's).
        gates: Vec<String>,
    },
    /// A spec's verification gave no verdict (it failed, was killed, or answered
    /// invalidly, also when asked once more): nothing says the spec is done. A person must
    /// look; the next run asks again. The specs that do not depend on it were built.
    Unverified {
        /// The spec.
        spec: String,
        /// Why its verifier gave no verdict.
        reason: String,
    },
    /// A spec cannot proceed: a task is blocked; the specs after it wait.
    Blocked {
        /// The spec.
        spec: String,
        /// The blocked tasks and why.
        items: Vec<BlockedItem>,
    },
    /// A task's agent asked a person a question, and nothing else could go on while it waited
    /// for the answer ([`Config::question_wait`](crate::Config::question_wait)). Answer with
    /// [`steer::answer`](https://docs.rs/ralph-loop/latest/ralph/steer/fn.answer.html) (`ralph answer <task id> "…"`); the same call
    /// resumes.
    AwaitingAnswer {
        /// The spec.
        spec: String,
        /// Each question: the task that asked it as `id`, the question as `reason`.
        questions: Vec<BlockedItem>,
    },
    /// A spec used up `[planning] max_attempts` (planner failures, verifier rejections).
    AttemptsExhausted {
        /// The spec.
        spec: String,
        /// The limit.
        attempts: u32,
        /// The last failure.
        reason: String,
    },
    /// `once` was set: one agent session (a planner, an implementer or a verifier run) and
    /// what it led to were done and saved; the next call goes on from there.
    Once {
        /// What the session was and how it ended.
        step: String,
        /// Specs not yet completed.
        remaining: usize,
    },
    /// The run-wide budget (`max_cost_usd`, `max_tokens`) was reached over the state the
    /// run belongs to: no new agent run started. Raise the limit to go on; the spend so far
    /// is kept and counts.
    BudgetExhausted {
        /// Dollars spent over the scope, by the runs that reported a cost.
        spent_usd: f64,
        /// Input and output tokens over the scope (cache reads and writes not counted).
        spent_tokens: u64,
        /// `max_cost_usd`, if set.
        max_cost_usd: Option<f64>,
        /// `max_tokens`, if set.
        max_tokens: Option<u64>,
    },
    /// Stopped by the stop token; the state is saved and the same call resumes.
    Interrupted,
    /// A person asked the run to stop ([`steer::stop`](https://docs.rs/ralph-loop/latest/ralph/steer/fn.stop.html), `ralph stop`):
    /// the session in flight finished and was recorded; the same call resumes.
    Stopped {
        /// Specs not yet completed.
        remaining: usize,
    },
}

#[cfg(feature = "specs")]
impl SpecsOutcome {
    /// The exit code the `ralph` command uses: 0 complete or once, 2 attempts exhausted, 3
    /// blocked or unverified (a person must look), 4 stopped on request (`ralph stop`), 130 interrupted.
    pub fn exit_code(&self) -> i32 {
        match self {
            SpecsOutcome::Complete { .. } | SpecsOutcome::Once { .. } => 0,
            SpecsOutcome::AttemptsExhausted { .. } | SpecsOutcome::BudgetExhausted { .. } => 2,
            SpecsOutcome::Blocked { .. }
            | SpecsOutcome::AwaitingAnswer { .. }
            | SpecsOutcome::Unverified { .. } => 3,
            SpecsOutcome::Stopped { .. } => 4,
            SpecsOutcome::Interrupted => 130,
        }
    }
}

#[cfg(feature = "specs")]
impl SpecsOutcome {
    /// Whether only a person can move the work on from here: a spec blocked, unverified, or
    /// out of attempts (the `needs_person` of [`Event::Finished`](crate::Event::Finished)).
    pub fn needs_person(&self) -> bool {
        // No wildcard: a new outcome must be placed here.
        match self {
            SpecsOutcome::Blocked { .. }
            | SpecsOutcome::AwaitingAnswer { .. }
            | SpecsOutcome::Unverified { .. }
            | SpecsOutcome::AttemptsExhausted { .. }
            | SpecsOutcome::BudgetExhausted { .. } => true,
            SpecsOutcome::Complete { .. }
            | SpecsOutcome::Once { .. }
            | SpecsOutcome::Stopped { .. }
            | SpecsOutcome::Interrupted => false,
        }
    }
}

#[cfg(feature = "specs")]
impl fmt::Display for SpecsOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpecsOutcome::Complete {
                specs,
                tasks,
                gates,
            } => {
                write!(
                    f,
                    "All specs complete: {specs} {} committed, {tasks} {} completed in this run. \
                     Evidence: ",
                    plural(*specs, "spec", "specs"),
                    plural(*tasks, "task", "tasks"),
                )?;
                match gates.as_slice() {
                    [] => f.write_str("no required gates")?,
                    gates => write!(f, "gates {} passed", gates.join(", "))?,
                }
                f.write_str("; each spec accepted by its verifier.")
            }
            SpecsOutcome::Unverified { spec, reason } => write!(
                f,
                "Unverified: spec {spec}'s verification gave no verdict ({reason}); nothing \
                 says it is done"
            ),
            SpecsOutcome::Blocked { spec, items } => {
                write!(f, "Blocked: spec {spec} cannot proceed")?;
                for item in items {
                    write!(f, "\n  {}: {}", item.id, item.reason)?;
                }
                Ok(())
            }
            SpecsOutcome::AwaitingAnswer { spec, questions } => {
                write!(f, "spec {spec}: ")?;
                awaiting(f, questions)
            }
            SpecsOutcome::AttemptsExhausted {
                spec,
                attempts,
                reason,
            } => write!(
                f,
                "Stopped: spec {spec} failed {attempts} attempt(s); last: {reason}"
            ),
            SpecsOutcome::Once { step, remaining } => write!(
                f,
                "Stopped after one step (once): {step}. Specs remaining: {remaining}"
            ),
            SpecsOutcome::Stopped { remaining } => write!(
                f,
                "Stopped on request: the session in flight is recorded, {remaining} {} left; \
                 run the same command to resume.",
                if *remaining == 1 { "spec" } else { "specs" }
            ),
            SpecsOutcome::Interrupted => {
                f.write_str("Interrupted: state saved; run the same command to resume.")
            }
            SpecsOutcome::BudgetExhausted {
                spent_usd,
                spent_tokens,
                max_cost_usd,
                max_tokens,
            } => budget(f, *spent_usd, *spent_tokens, *max_cost_usd, *max_tokens),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_message_matches_seed_003() {
        let o = Outcome::MaxIterations {
            limit: 20,
            remaining: 4,
        };
        assert_eq!(
            o.to_string(),
            "Stopped: max iterations (20) reached. Tasks remaining: 4"
        );
        assert_eq!(o.exit_code(), 2);
    }

    #[test]
    fn a_declared_stop_is_not_complete() {
        let o = Outcome::Declared { remaining: 2 };
        assert_eq!(
            o.to_string(),
            "Stopped: RALPH_DONE in the progress file's Status section. Tasks remaining \
             (not verified by ralph): 2"
        );
        assert_eq!(o.exit_code(), 2);
    }

    #[test]
    fn once_says_which_iteration_and_what_remains() {
        let o = Outcome::Once {
            iteration: 3,
            remaining: 2,
        };
        assert_eq!(
            o.to_string(),
            "Stopped after one iteration (once): iteration 3 finished. Tasks remaining: 2"
        );
        assert_eq!(o.exit_code(), 0);
    }
}
