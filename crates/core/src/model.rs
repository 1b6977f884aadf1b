//! The work state: tasks, issues and run bookkeeping, and the stage derived from them.
//!
//! The whole state is one [`Board`]. A [`Store`](crate::Store) loads it and persists
//! [`Change`]s to it; the engine never mutates a board except through [`Board::apply`],
//! so what is on disk and what is in memory cannot drift apart.

use std::fmt;
use std::path::PathBuf;

/// The ordered map of [`Board::tasks`] and [`Board::issues`] (the `indexmap` crate).
#[doc(no_inline)]
use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod rules;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        ///
        /// Shared, not copied, when cloned: the engine and the prioritizer pass ids around
        /// by the hundred thousand on large boards.
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(std::sync::Arc<str>);

        impl $name {
            /// Wraps an id string.
            pub fn new(id: impl Into<String>) -> Self {
                Self(id.into().into())
            }

            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                Self(id.into())
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                Self(id.into())
            }
        }

        // Hash and Eq are those of the inner string, so maps keyed by ids can be
        // indexed with a `&str`.
        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                &*self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                &*self.0 == *other
            }
        }
    };
}

id_type!(
    /// Identifies a [`Task`], e.g. `t-3` or, for a decomposed subtask, `t-3a`.
    TaskId
);
id_type!(
    /// Identifies an [`Issue`], e.g. `i-1`.
    IssueId
);

/// How urgent a task is. Ordered: `Low < Medium < High`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Nice-to-have, documentation, cleanup.
    Low,
    /// Standard implementation work.
    Medium,
    /// Small tasks that unblock many others, and critical-path items.
    High,
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Priority::Low => "low",
            Priority::Medium => "medium",
            Priority::High => "high",
        })
    }
}

/// A task's estimated size.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Complexity {
    /// A few lines in one place.
    Small,
    /// An ordinary unit of work.
    Medium,
    /// Several files or a new subsystem.
    Large,
}

/// Where a task is in its lifecycle (seed 000's "Task States During Construct").
///
/// Serialized as the one-letter codes of `plan.jsonl` (`"s":"p"`); the long names are
/// accepted when reading hand-written files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum TaskStatus {
    /// Waiting to be built. A pending task with a `kill_reason` waits for DECOMPOSE.
    #[serde(rename = "p", alias = "pending")]
    Pending,
    /// Built, gates passed; waiting for the verifier.
    #[serde(rename = "d", alias = "done")]
    Done,
    /// Accepted by the verifier: complete, and out of the active plan.
    #[serde(rename = "a", alias = "accepted")]
    Accepted,
    /// The agent (or ralph, after the retry limit) declared it cannot proceed.
    #[serde(rename = "b", alias = "blocked")]
    Blocked,
    /// Replaced by its subtasks after DECOMPOSE (kept on record, not deleted: see the
    /// [differences from the seeds](https://github.com/ralph-rs/ralph/blob/main/docs/seed-differences.md)).
    #[serde(rename = "x", alias = "decomposed")]
    Decomposed,
}

impl TaskStatus {
    /// The status's name, as `ralph status` and `ralph query` print it and the long form
    /// `plan.jsonl` accepts: `pending`, `done`, `accepted`, `blocked`, `decomposed`.
    ///
    /// ```
    /// use ralph::model::TaskStatus;
    ///
    /// assert_eq!(TaskStatus::Blocked.as_str(), "blocked");
    /// assert_eq!(TaskStatus::Done.to_string(), "done");
    /// assert_eq!("accepted".parse::<TaskStatus>(), Ok(TaskStatus::Accepted));
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Pending => "pending",
            TaskStatus::Done => "done",
            TaskStatus::Accepted => "accepted",
            TaskStatus::Blocked => "blocked",
            TaskStatus::Decomposed => "decomposed",
        }
    }

    const ALL: [TaskStatus; 5] = [
        TaskStatus::Pending,
        TaskStatus::Done,
        TaskStatus::Accepted,
        TaskStatus::Blocked,
        TaskStatus::Decomposed,
    ];
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for TaskStatus {
    type Err = String;

    /// A status's name ([`as_str`](TaskStatus::as_str)); the error lists the names.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        TaskStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = TaskStatus::ALL.iter().map(|s| s.as_str()).collect();
                format!("no task status {name:?} (they are {})", names.join(", "))
            })
    }
}

/// Why ralph stopped a task's agent (seed 000's `kill_reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum KillReason {
    /// The stage or agent timeout fired.
    Timeout,
    /// The agent's context window filled past the kill threshold (or compaction failed).
    ContextLimit,
    /// Verifiers rejected the task as often as
    /// [`decompose_after_rejections`](crate::Config::decompose_after_rejections) allows
    /// (seed 000: a rejected task "remains for retry or decomposition"): building it once
    /// more is unlikely to help, so it is split instead.
    Rejected,
}

impl fmt::Display for KillReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KillReason::Timeout => "timeout",
            KillReason::ContextLimit => "context_limit",
            KillReason::Rejected => "rejected",
        })
    }
}

/// A record of one failed round of a task: a verifier rejection or a kill.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tombstone {
    /// Why the round failed, in words meant for the next prompt.
    pub reason: String,
    /// RFC 3339 time of the failure.
    pub at: String,
}

/// A verifier's answer about one done task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// `true` to accept the task, `false` to reject it.
    pub accepted: bool,
    /// Why.
    pub reason: String,
    /// Spec gaps the verifier noticed while checking this task.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<String>,
}

/// One unit of work for one fresh agent session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Task {
    /// Its id, unique on the board.
    pub id: TaskId,
    /// A one-line description.
    pub name: String,
    /// Lifecycle state.
    #[serde(rename = "s")]
    pub status: TaskStatus,
    /// Acceptance criteria, in words.
    #[serde(rename = "accept", default, skip_serializing_if = "String::is_empty")]
    pub acceptance: String,
    /// Free-form notes for the agent (context, output to suppress, hints).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub notes: String,
    /// Tasks that must be done first.
    ///
    /// A decomposed task is never done: its subtasks are. DECOMPOSE rewires the tasks that
    /// depend on the task it splits to wait on all of its subtasks; a dependency on a
    /// decomposed task that comes in later is rewired the same way (an agent's answer as it
    /// is made into tasks, a record written by hand when a run begins, with a warning), and
    /// a task depending on a decomposed task with no subtask on the board is blocked
    /// (unblocking it drops that dependency). [`Ralph::add_task`](https://docs.rs/ralph-loop/latest/ralph/struct.Ralph.html#method.add_task)
    /// refuses such a dependency, naming the subtasks. Before a run rewires a record,
    /// [`Board::waits_on`] and [`Board::deps_satisfied`] read it as rewired.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deps: Vec<TaskId>,
    /// An explicit priority; the prioritizer keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    /// The priority the prioritizer computed when there is no explicit one.
    #[serde(rename = "prio", default, skip_serializing_if = "Option::is_none")]
    pub computed_priority: Option<Priority>,
    /// Position in the prioritizer's order (lower runs first among equal priorities).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// An explicit size estimate; otherwise the prioritizer estimates one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complexity: Option<Complexity>,
    /// The issue or task this one came from (`i-1`, `t-3`, `verify`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// The task this one was decomposed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<TaskId>,
    /// Build attempts ever made (never reset; the attempt number an agent run sees).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempts: u32,
    /// `attempts` when the current round began; retries are counted from here.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retry_base: u32,
    /// Verifier runs ever made for this task.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub verifications: u32,
    /// Times a verifier judged its work and rejected it (never reset). At
    /// [`decompose_after_rejections`](crate::Config::decompose_after_rejections) the task
    /// goes to DECOMPOSE ([`KillReason::Rejected`]) instead of being built again.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rejections: u32,
    /// The previous attempt's failure (gate output, missing marker), for the retry prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
    /// Rejections and kills, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tombstones: Vec<Tombstone>,
    /// Why the task's agent was killed; a pending task with one goes to DECOMPOSE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill_reason: Option<KillReason>,
    /// The killed run's log, of which DECOMPOSE reads only the head and tail (for a task
    /// rejected too often, its last build's log).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill_log: Option<PathBuf>,
    /// The agent's log of its last build attempt that passed the gates, relative to the
    /// workspace: what a decomposer reads when verifiers keep rejecting that work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_log: Option<PathBuf>,
    /// Why the task is blocked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_reason: Option<String>,
    /// The question its agent asked a person (`<TASK_QUESTION question="…">`): a pending
    /// task with one waits for the answer (`ralph answer`), is not built meanwhile, and
    /// its attempt that asked did not count against its retries. Cleared when the answer
    /// comes, which its next attempt gets with the question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// The verifier's verdict, recorded before VERIFY applies it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    /// The required gates its done attempt passed, by name (empty when none was required,
    /// or when a person marked it done).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<String>,
    /// Who accepted it, once accepted: the evidence a complete run rests on, which
    /// [`Outcome::Complete`](crate::Outcome::Complete) reports (`verifier`, `people`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_by: Option<AcceptedBy>,
    /// The commit that holds its work on the user's branch (in a git workspace), from its
    /// done attempt; it is accepted only while that commit is on the branch. `None` outside
    /// git, or when the attempt changed nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// A branch that keeps work ralph could not merge (the user's files were in the way):
    /// the next build of the task merges it instead of building again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<String>,
}

/// Who accepted a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[doc(hidden)] // ralph's own record, not the API
pub enum AcceptedBy {
    /// A verifier agent, in VERIFY.
    Verifier,
    /// A person (`ralph task accept`, [`Ralph::accept_done`](https://docs.rs/ralph-loop/latest/ralph/struct.Ralph.html#method.accept_done)).
    Person,
}

impl fmt::Display for AcceptedBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AcceptedBy::Verifier => "a verifier",
            AcceptedBy::Person => "a person",
        })
    }
}

/// What [`Ralph::unblock`](https://docs.rs/ralph-loop/latest/ralph/struct.Ralph.html#method.unblock) did to make a blocked task buildable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Unblocked {
    /// The task, pending again: the id given, or a new one (`t-<n>`) when the given id
    /// could not name a git branch or folder; the old record is then kept as replaced
    /// ([`TaskStatus::Decomposed`], the new task its only subtask).
    pub task: TaskId,
    /// The dependencies dropped because they could never be met: tasks not on the board,
    /// and tasks that depend on this one in turn (a cycle).
    pub dropped: Vec<TaskId>,
}

impl Unblocked {
    /// `task`, pending again, with the dependencies `dropped`.
    pub fn new(task: TaskId, dropped: Vec<TaskId>) -> Self {
        Unblocked { task, dropped }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Task {
    /// A new pending task.
    pub fn new(id: impl Into<TaskId>, name: impl Into<String>) -> Self {
        Task {
            id: id.into(),
            name: name.into(),
            status: TaskStatus::Pending,
            acceptance: String::new(),
            notes: String::new(),
            deps: Vec::new(),
            priority: None,
            computed_priority: None,
            rank: None,
            complexity: None,
            origin: None,
            parent: None,
            attempts: 0,
            retry_base: 0,
            verifications: 0,
            rejections: 0,
            last_failure: None,
            tombstones: Vec::new(),
            kill_reason: None,
            kill_log: None,
            build_log: None,
            blocked_reason: None,
            verdict: None,
            gates: Vec::new(),
            accepted_by: None,
            commit: None,
            kept: None,
            question: None,
        }
    }

    /// Sets the acceptance criteria.
    #[must_use]
    pub fn with_acceptance(mut self, acceptance: impl Into<String>) -> Self {
        self.acceptance = acceptance.into();
        self
    }

    /// Sets the notes.
    #[must_use]
    pub fn with_notes(mut self, notes: impl Into<String>) -> Self {
        self.notes = notes.into();
        self
    }

    /// Sets the dependencies.
    #[must_use]
    pub fn with_deps<I, T>(mut self, deps: I) -> Self
    where
        I: IntoIterator<Item = T>,
        T: Into<TaskId>,
    {
        self.deps = deps.into_iter().map(Into::into).collect();
        self
    }

    /// Sets an explicit priority.
    #[must_use]
    pub fn with_priority(mut self, priority: Priority) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Sets an explicit complexity.
    #[must_use]
    pub fn with_complexity(mut self, complexity: Complexity) -> Self {
        self.complexity = Some(complexity);
        self
    }

    /// Sets the status.
    #[must_use]
    pub fn with_status(mut self, status: TaskStatus) -> Self {
        self.status = status;
        self
    }

    /// The explicit priority, else the computed one, else medium.
    pub fn effective_priority(&self) -> Priority {
        self.priority
            .or(self.computed_priority)
            .unwrap_or(Priority::Medium)
    }

    /// Pending, not waiting for DECOMPOSE nor for a person's answer to its question.
    pub fn is_buildable(&self) -> bool {
        self.status == TaskStatus::Pending && self.kill_reason.is_none() && self.question.is_none()
    }

    /// Pending with a `kill_reason`: seed 000's "rejected task with kill_reason".
    pub fn is_killed(&self) -> bool {
        self.status == TaskStatus::Pending && self.kill_reason.is_some()
    }

    /// Done or accepted: satisfies the dependencies of other tasks.
    pub fn is_finished(&self) -> bool {
        matches!(self.status, TaskStatus::Done | TaskStatus::Accepted)
    }

    /// Still part of the work: not accepted and not replaced by subtasks.
    pub fn is_remaining(&self) -> bool {
        !matches!(self.status, TaskStatus::Accepted | TaskStatus::Decomposed)
    }

    /// Build attempts made in the current round (since the last rejection or kill).
    pub fn round_attempts(&self) -> u32 {
        self.attempts.saturating_sub(self.retry_base)
    }

    /// A rejected round (by the verifier, or a person): pending again, with a tombstone, a
    /// fresh retry budget and `reason` carried into the next prompt. `by` says who rejected
    /// it (`the verifier`, `a person`).
    pub fn reject(&mut self, by: &str, reason: &str) {
        self.status = TaskStatus::Pending;
        self.tombstones.push(Tombstone {
            reason: format!("rejected by {by}: {reason}"),
            at: crate::time::now_rfc3339(),
        });
        self.retry_base = self.attempts;
        self.last_failure = Some(crate::output::bounded_failure(&format!(
            "The previous round was rejected by {by}: {reason}"
        )));
        self.verdict = None;
    }

    /// A blocked task back to pending, with a fresh retry budget (after a person fixed
    /// what blocked it: a broken gate, a missing credential).
    pub fn unblock(&mut self) {
        self.status = TaskStatus::Pending;
        self.blocked_reason = None;
        self.retry_base = self.attempts;
    }

    /// A limit killed this task's agent (in BUILD or VERIFY): pending, with the kill and a
    /// tombstone saying which limit (`note`), so DECOMPOSE takes it next.
    pub fn record_kill(&mut self, reason: KillReason, log: Option<PathBuf>, note: &str) {
        self.status = TaskStatus::Pending;
        self.kill_reason = Some(reason);
        self.kill_log = log;
        self.verdict = None;
        self.tombstones.push(Tombstone {
            reason: note.to_owned(),
            at: crate::time::now_rfc3339(),
        });
    }
}

/// Where an issue is in its lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum IssueStatus {
    /// Waiting for INVESTIGATE.
    #[serde(rename = "o", alias = "open")]
    Open,
    /// Turned into tasks.
    #[serde(rename = "r", alias = "resolved")]
    Resolved,
    /// Judged out of scope for the spec.
    #[serde(rename = "n", alias = "out_of_scope")]
    OutOfScope,
    /// Investigation (or the decomposition of a killed investigation) failed past the
    /// retry limit; [`Ralph::unblock_issue`](https://docs.rs/ralph-loop/latest/ralph/struct.Ralph.html#method.unblock_issue) opens it again.
    #[serde(rename = "b", alias = "blocked")]
    Blocked,
}

/// A question, bug or gap that INVESTIGATE turns into tasks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Issue {
    /// Its id, unique on the board.
    pub id: IssueId,
    /// What the issue is about.
    pub text: String,
    /// Lifecycle state.
    #[serde(rename = "s")]
    pub status: IssueStatus,
    /// An explicit priority, inherited by the tasks made from it. A hand-written record may
    /// spell it `prio`, as a task's record does.
    #[serde(default, alias = "prio", skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    /// Where it came from (`spec`, `verify`, `user`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// Investigation attempts ever made (never reset; the attempt number an agent run
    /// sees, and its log's name).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempts: u32,
    /// `attempts` when the current round began ([`unblock`](Self::unblock) starts a new
    /// one); retries are counted from here.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retry_base: u32,
    /// Tasks created from it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<TaskId>,
    /// Why it is out of scope or blocked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why its investigator was killed; an open issue with one goes to DECOMPOSE, which
    /// makes its tasks from the head and tail of the killed run's log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill_reason: Option<KillReason>,
    /// The killed investigator's log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill_log: Option<PathBuf>,
    /// The question its investigator asked a person (the answer's `question` field): an
    /// open issue with one waits for the answer (`ralph answer i-1 "…"`), which its next
    /// investigation gets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
}

impl Issue {
    /// A new open issue.
    pub fn new(id: impl Into<IssueId>, text: impl Into<String>) -> Self {
        Issue {
            id: id.into(),
            text: text.into(),
            status: IssueStatus::Open,
            priority: None,
            origin: None,
            attempts: 0,
            retry_base: 0,
            tasks: Vec::new(),
            reason: None,
            kill_reason: None,
            kill_log: None,
            question: None,
        }
    }

    /// Open, waiting for a person's answer to its investigator's question.
    pub fn is_asking(&self) -> bool {
        self.status == IssueStatus::Open && self.question.is_some()
    }

    /// Open, with its investigator killed: DECOMPOSE takes it, not INVESTIGATE.
    pub fn is_killed(&self) -> bool {
        self.status == IssueStatus::Open && self.kill_reason.is_some()
    }

    /// Investigation attempts made in the current round (since the last unblock).
    pub fn round_attempts(&self) -> u32 {
        self.attempts.saturating_sub(self.retry_base)
    }

    /// A blocked issue open again, with a fresh retry budget (after a person fixed what
    /// blocked it: an agent that was down, one that answered prose). Its attempts keep
    /// counting, so the next attempt's number and log name follow the last. An issue whose
    /// investigator was killed goes back to DECOMPOSE, which failed on it before.
    pub fn unblock(&mut self) {
        self.status = IssueStatus::Open;
        self.reason = None;
        self.retry_base = self.attempts;
    }

    /// Sets an explicit priority.
    #[must_use]
    pub fn with_priority(mut self, priority: Priority) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Sets where the issue came from.
    #[must_use]
    pub fn with_origin(mut self, origin: impl Into<String>) -> Self {
        self.origin = Some(origin.into());
        self
    }
}

/// Bookkeeping of the construct loop itself.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunState {
    /// The current iteration, starting at 1 (0 before the first run).
    #[serde(default)]
    pub iteration: u32,
    /// The spec being constructed, relative to the workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<String>,
    /// The spec's title, its first `# ` heading (else its file stem): the title of a
    /// progress file ralph writes for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_title: Option<String>,
    /// Whether the spec was turned into the board's first issue.
    #[serde(default)]
    pub seeded: bool,
    /// The number in the next generated task id (`t-<n>`).
    #[serde(default)]
    pub next_task: u64,
    /// The number in the next generated issue id (`i-<n>`).
    #[serde(default)]
    pub next_issue: u64,
    /// The most recent BUILD attempts, oldest first, trimmed to `recent_attempts` (seed 003's
    /// failure memory: the next prompts show them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<RecentAttempt>,
    /// One entry per finished iteration, oldest first, trimmed to
    /// [`ITERATION_LOG_LIMIT`] entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log: Vec<IterationEntry>,
    /// Input tokens of every agent run on this board so far (cache reads and writes not
    /// included): the spend ledger's `construct` scope, the one figure the budget, the
    /// summary and `ralph status` show ([`Ralph::spent`](https://docs.rs/ralph-loop/latest/ralph/struct.Ralph.html#method.spent)).
    /// [`Ralph::board`](https://docs.rs/ralph-loop/latest/ralph/struct.Ralph.html#method.board) and the running loop read it from the ledger;
    /// the store keeps it as of the board's last save (at least once per iteration, and at
    /// the end of a run).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub tokens_in: u64,
    /// Output tokens of every agent run so far, as [`tokens_in`](Self::tokens_in).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub tokens_out: u64,
    /// What the agent runs cost so far, in USD, as the agents reported it, as
    /// [`tokens_in`](Self::tokens_in).
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub cost_usd: f64,
    /// The last gap analysis (VERIFY comparing the spec with the code): a board whose tasks
    /// are all accepted is complete only when it answered validly; until one has run since
    /// the board last changed, the stage is VERIFY, and after one that failed it is
    /// UNVERIFIED. [`Outcome::Complete`](crate::Outcome::Complete) reports the iteration
    /// that answered (`gap_analysis`), [`Outcome::Unverified`](crate::Outcome::Unverified)
    /// why none did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_check: Option<SpecCheck>,
    /// The tree on which every required gate last passed: the branch's commit (empty
    /// outside git). A board is complete only when they passed on the tree it ends with;
    /// else they run once more on it first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gates_passed_on: Option<String>,
}

/// How the last gap analysis ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[doc(hidden)] // ralph's own record, not the API
pub struct SpecCheck {
    /// The iteration whose VERIFY ran it.
    pub iteration: u32,
    /// Why it gave no valid answer, when it gave none (after its retries); `None` when it
    /// answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

impl SpecCheck {
    /// A gap analysis of `iteration` that answered validly.
    pub fn answered(iteration: u32) -> Self {
        SpecCheck {
            iteration,
            failed: None,
        }
    }

    /// A gap analysis of `iteration` that gave no valid answer, for `reason`.
    pub fn failed(iteration: u32, reason: impl Into<String>) -> Self {
        SpecCheck {
            iteration,
            failed: Some(reason.into()),
        }
    }
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

fn is_zero_f64(n: &f64) -> bool {
    *n == 0.0
}

/// How many [`IterationEntry`]s the run state keeps; older ones are dropped (the JSONL store
/// still has them in its append-only history until it compacts).
pub const ITERATION_LOG_LIMIT: usize = 200;

/// One BUILD attempt, remembered for the prompts of later attempts (seed 003's "Recent
/// Attempts").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RecentAttempt {
    /// The iteration it ran in.
    pub iteration: u32,
    /// The task it was for.
    pub task: TaskId,
    /// What was tried, in one line (the first line of the agent's answer).
    pub tried: String,
    /// How it ended, in one line: `done`, `gates failed: test`, `blocked: <reason>`,
    /// `killed: <reason>`, `failed: <reason>`.
    pub result: String,
    /// What ralph does next with the task, in one line: `verify`, `retry (attempt 2 of 3)`,
    /// `decompose`, `a person decides`. Absent in records written before ralph kept it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// RFC 3339 time it ended.
    pub at: String,
}

impl RecentAttempt {
    /// An attempt record; `tried` and `result` are cut to one line.
    pub fn new(
        iteration: u32,
        task: TaskId,
        tried: impl AsRef<str>,
        result: impl AsRef<str>,
        at: impl Into<String>,
    ) -> Self {
        RecentAttempt {
            iteration,
            task,
            tried: one_line(tried.as_ref()),
            result: one_line(result.as_ref()),
            next: None,
            at: at.into(),
        }
    }

    /// The record with what comes next for its task, cut to one line.
    #[must_use]
    pub fn with_next(mut self, next: impl AsRef<str>) -> Self {
        self.next = Some(one_line(next.as_ref()));
        self
    }
}

/// One finished iteration (seed 003's "Iteration Log").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct IterationEntry {
    /// Its number.
    pub iteration: u32,
    /// RFC 3339 time it started.
    pub started: String,
    /// How long it took, in whole milliseconds.
    pub duration_ms: u64,
    /// Tasks accepted in it.
    pub tasks_completed: usize,
    /// A one-line note (`2 accepted, 1 rejected`).
    pub note: String,
}

impl IterationEntry {
    /// An entry; `note` is cut to one line.
    pub fn new(
        iteration: u32,
        started: impl Into<String>,
        duration: std::time::Duration,
        tasks_completed: usize,
        note: impl AsRef<str>,
    ) -> Self {
        IterationEntry {
            iteration,
            started: started.into(),
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            tasks_completed,
            note: one_line(note.as_ref()),
        }
    }

    /// How long the iteration took.
    pub fn duration(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.duration_ms)
    }
}

/// The first non-empty line of `text`, trimmed and at most 300 bytes (cut on a char boundary).
fn one_line(text: &str) -> String {
    const MAX: usize = 300;
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    if line.len() <= MAX {
        return line.to_owned();
    }
    let mut end = MAX;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &line[..end])
}

impl RunState {
    /// Records `attempt`, keeping only the last `keep` attempts.
    pub fn remember_attempt(&mut self, attempt: RecentAttempt, keep: usize) {
        self.attempts.push(attempt);
        let excess = self.attempts.len().saturating_sub(keep);
        self.attempts.drain(..excess);
    }

    /// Appends `entry` to the iteration log, keeping the last [`ITERATION_LOG_LIMIT`].
    pub fn log_iteration(&mut self, entry: IterationEntry) {
        self.log.push(entry);
        let excess = self.log.len().saturating_sub(ITERATION_LOG_LIMIT);
        self.log.drain(..excess);
    }

    /// The next task id (`t-<n>`) for which `taken` is false, advancing the counter.
    pub fn next_task_id(&mut self, taken: impl Fn(&TaskId) -> bool) -> TaskId {
        loop {
            self.next_task += 1;
            let id = TaskId::new(format!("t-{}", self.next_task));
            if !taken(&id) {
                return id;
            }
        }
    }

    /// The next issue id (`i-<n>`) for which `taken` is false, advancing the counter.
    pub fn next_issue_id(&mut self, taken: impl Fn(&IssueId) -> bool) -> IssueId {
        loop {
            self.next_issue += 1;
            let id = IssueId::new(format!("i-{}", self.next_issue));
            if !taken(&id) {
                return id;
            }
        }
    }
}

/// One persisted change to a [`Board`]: a whole record that replaces the one with its id.
///
/// Serialized as a `plan.jsonl` line: `{"t":"task",…}`, `{"t":"issue",…}`, `{"t":"run",…}`,
/// `{"t":"config",…}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "lowercase")]
#[non_exhaustive]
// Changes are built, persisted and applied once; boxing the task would cost every caller.
#[allow(clippy::large_enum_variant)]
pub enum Change {
    /// Insert or replace a task.
    Task(Task),
    /// Insert or replace an issue.
    Issue(Issue),
    /// Replace the run bookkeeping.
    Run(RunState),
    /// Record the limits a run used (seed 000's config line; informational, see the
    /// [differences from the seeds](https://github.com/ralph-rs/ralph/blob/main/docs/seed-differences.md)).
    Config(serde_json::Map<String, serde_json::Value>),
}

/// The stage of the construct loop, derived from the board (seed 000's "Stage Transitions").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum Stage {
    /// Open issues exist.
    Investigate,
    /// Buildable tasks exist.
    Build,
    /// Done tasks wait for the verifier and nothing is buildable.
    Verify,
    /// A task was killed (timeout or context limit), or rejected by verifiers
    /// `decompose_after_rejections` times, and waits to be split.
    Decompose,
    /// Nothing remains.
    Complete,
    /// Work remains, but all of it is blocked or waits on blocked tasks.
    Blocked,
    /// Every task is accepted, but the gap analysis that would compare the spec with the
    /// code gave no valid answer: nothing says the spec is done. The next run asks again.
    Unverified,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Investigate => "INVESTIGATE",
            Stage::Build => "BUILD",
            Stage::Verify => "VERIFY",
            Stage::Decompose => "DECOMPOSE",
            Stage::Complete => "COMPLETE",
            Stage::Blocked => "BLOCKED",
            Stage::Unverified => "UNVERIFIED",
        })
    }
}

impl Stage {
    /// The lower-case name used in log file names (`build`).
    pub fn file_name(self) -> &'static str {
        match self {
            Stage::Investigate => "investigate",
            Stage::Build => "build",
            Stage::Verify => "verify",
            Stage::Decompose => "decompose",
            Stage::Complete => "complete",
            Stage::Blocked => "blocked",
            Stage::Unverified => "unverified",
        }
    }
}

/// The whole work state.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Board {
    /// Every task ever created, in creation order: read with [`tasks`](Self::tasks) and
    /// [`task`](Self::task), changed with [`apply`](Self::apply).
    pub tasks: IndexMap<TaskId, Task>,
    /// Every issue ever created, in creation order: read with [`issues`](Self::issues) and
    /// [`issue`](Self::issue).
    pub issues: IndexMap<IssueId, Issue>,
    /// Loop bookkeeping.
    pub run: RunState,
    /// The last recorded config line, if any.
    pub config: Option<serde_json::Map<String, serde_json::Value>>,
    /// A person declared the work complete in a file they edit (the
    /// [`ProgressStore`](crate::store::ProgressStore)'s `RALPH_DONE` line in its Status
    /// section). The stage is then [`Stage::Complete`] whatever tasks remain, and a run ends
    /// with [`Outcome::Declared`](crate::Outcome::Declared) while work remains. Never
    /// persisted by the engine: only a store that reads such a declaration sets it.
    pub declared_complete: bool,
}

impl Board {
    /// An empty board.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every task ever created, in creation order (decomposed and accepted ones included).
    ///
    /// ```
    /// use ralph::model::{Board, Change, Task};
    ///
    /// let mut board = Board::new();
    /// board.apply_all([Change::Task(Task::new("t-1", "Parser")), Change::Task(Task::new("t-2", "Docs"))]);
    /// let names: Vec<_> = board.tasks().map(|task| task.name.as_str()).collect();
    /// assert_eq!(names, ["Parser", "Docs"]);
    /// assert_eq!(board.task("t-2").map(|task| task.name.as_str()), Some("Docs"));
    /// assert!(board.task("t-3").is_none());
    /// ```
    pub fn tasks(&self) -> impl DoubleEndedIterator<Item = &Task> + ExactSizeIterator + Clone {
        self.tasks.values()
    }

    /// The task `id` (a [`TaskId`] or its text, `"t-3"`), if the board has it.
    pub fn task(&self, id: impl AsRef<str>) -> Option<&Task> {
        self.tasks.get(id.as_ref())
    }

    /// Every issue ever created, in creation order (resolved ones included).
    pub fn issues(&self) -> impl DoubleEndedIterator<Item = &Issue> + ExactSizeIterator + Clone {
        self.issues.values()
    }

    /// The issue `id` (an [`IssueId`] or its text, `"i-1"`), if the board has it.
    pub fn issue(&self, id: impl AsRef<str>) -> Option<&Issue> {
        self.issues.get(id.as_ref())
    }

    /// Applies one change in memory.
    pub fn apply(&mut self, change: Change) {
        match change {
            Change::Task(task) => {
                self.tasks.insert(task.id.clone(), task);
            }
            Change::Issue(issue) => {
                self.issues.insert(issue.id.clone(), issue);
            }
            Change::Run(run) => self.run = run,
            Change::Config(config) => self.config = Some(config),
        }
    }

    /// Applies changes in order.
    pub fn apply_all(&mut self, changes: impl IntoIterator<Item = Change>) {
        for change in changes {
            self.apply(change);
        }
    }

    /// Every record of the board as changes, in a stable order; replaying them into an
    /// empty board rebuilds this one. Stores use it to compact.
    pub fn snapshot(&self) -> Vec<Change> {
        let mut out = Vec::with_capacity(self.tasks.len() + self.issues.len() + 2);
        if let Some(config) = &self.config {
            out.push(Change::Config(config.clone()));
        }
        out.push(Change::Run(self.run.clone()));
        out.extend(self.issues.values().cloned().map(Change::Issue));
        out.extend(self.tasks.values().cloned().map(Change::Task));
        out
    }

    /// Open issues, in creation order.
    pub fn open_issues(&self) -> impl Iterator<Item = &Issue> {
        self.issues
            .values()
            .filter(|i| i.status == IssueStatus::Open && !i.is_killed() && !i.is_asking())
    }

    /// Tasks that are not accepted and not decomposed.
    pub fn remaining_tasks(&self) -> impl Iterator<Item = &Task> {
        self.tasks.values().filter(|t| t.is_remaining())
    }

    /// What `task` waits on: its dependencies, each one on a decomposed task read as the
    /// subtasks that do its work (theirs in turn where they were decomposed too), as a run
    /// rewires it (see [`Task::deps`]). A dependency written by hand before a run rewired it
    /// is seen as the run will see it. A decomposed task with no subtask on the board stays:
    /// nothing satisfies it.
    ///
    /// ```
    /// use ralph::model::{Board, Change, Task, TaskId, TaskStatus};
    ///
    /// let subtask = |id: &str| {
    ///     let mut task = Task::new(id, "part of the parser");
    ///     task.parent = Some(TaskId::new("t-3"));
    ///     Change::Task(task)
    /// };
    /// let mut board = Board::new();
    /// board.apply_all([
    ///     Change::Task(Task::new("t-3", "Parser").with_status(TaskStatus::Decomposed)),
    ///     subtask("t-3a"),
    ///     subtask("t-3b"),
    ///     Change::Task(Task::new("t-4", "Docs").with_deps(["t-3"])),
    /// ]);
    /// let t4 = board.task("t-4").unwrap();
    /// assert_eq!(board.waits_on(t4), [TaskId::new("t-3a"), TaskId::new("t-3b")]);
    /// assert!(!board.deps_satisfied(t4), "the subtasks are still pending");
    /// ```
    pub fn waits_on(&self, task: &Task) -> Vec<TaskId> {
        rules::rewired_deps(self, task).unwrap_or_else(|| task.deps.clone())
    }

    /// Whether every task `task` [waits on](Self::waits_on) is done or accepted.
    ///
    /// A dependency on a decomposed task is satisfied when its subtasks are; one on a
    /// decomposed task with no subtask never is, nor one on an unknown id.
    pub fn deps_satisfied(&self, task: &Task) -> bool {
        let finished = |d: &TaskId| self.tasks.get(d).is_some_and(Task::is_finished);
        match rules::rewired_deps(self, task) {
            Some(deps) => deps.iter().all(finished),
            None => task.deps.iter().all(finished),
        }
    }

    /// The stage this board is in (seed 000's table, with DECOMPOSE first so a kill is
    /// handled before anything else, and `Blocked` when only blocked work remains).
    ///
    /// Complete is earned: a board of a spec on record whose work is all accepted is in
    /// VERIFY until a gap analysis has answered for it (the run state records how the last
    /// one ended), and UNVERIFIED when the last one gave no valid answer.
    pub fn stage(&self) -> Stage {
        let tasks = || self.tasks.values();
        if self.declared_complete {
            Stage::Complete
        } else if tasks().any(Task::is_killed) || self.issues.values().any(Issue::is_killed) {
            Stage::Decompose
        } else if self.open_issues().next().is_some() {
            Stage::Investigate
        } else if tasks().any(|t| t.is_buildable() && self.deps_satisfied(t)) {
            Stage::Build
        } else if tasks().any(|t| t.status == TaskStatus::Done) {
            Stage::Verify
        } else if tasks().any(Task::is_remaining)
            || self
                .issues
                .values()
                .any(|i| i.status == IssueStatus::Blocked || i.is_asking())
        {
            Stage::Blocked
        } else {
            match &self.run.spec_check {
                Some(SpecCheck {
                    failed: Some(_), ..
                }) => Stage::Unverified,
                None if self.run.seeded => Stage::Verify,
                _ => Stage::Complete,
            }
        }
    }

    /// A fresh task id (`t-<n>`), advancing the counter in `run`.
    pub fn next_task_id(&mut self) -> TaskId {
        let tasks = &self.tasks;
        self.run.next_task_id(|id| tasks.contains_key(id))
    }

    /// A fresh issue id (`i-<n>`), advancing the counter in `run`.
    pub fn next_issue_id(&mut self) -> IssueId {
        let issues = &self.issues;
        self.run.next_issue_id(|id| issues.contains_key(id))
    }

    /// Task ids for the subtasks of `parent`: `t-3a`, `t-3b`, … (`t-3aa` after `z`).
    pub fn subtask_ids(&self, parent: &TaskId, count: usize) -> Vec<TaskId> {
        let mut ids = Vec::with_capacity(count);
        let mut n = 0usize;
        while ids.len() < count {
            let id = TaskId::new(format!("{parent}{}", alpha_suffix(n)));
            if !self.tasks.contains_key(&id) {
                ids.push(id);
            }
            n += 1;
        }
        ids
    }
}

/// `0 → a`, `25 → z`, `26 → aa`, …
fn alpha_suffix(mut n: usize) -> String {
    let mut out = Vec::new();
    loop {
        out.push(b'a' + (n % 26) as u8);
        if n < 26 {
            break;
        }
        n = n / 26 - 1;
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_issue_record_reads_prio_as_its_priority() {
        let issue: Issue =
            serde_json::from_str(r#"{"id":"i-1","text":"x","s":"o","prio":"high"}"#).unwrap();
        assert_eq!(issue.priority, Some(Priority::High));
    }

    fn board(tasks: Vec<Task>, issues: Vec<Issue>) -> Board {
        let mut b = Board::new();
        b.apply_all(tasks.into_iter().map(Change::Task));
        b.apply_all(issues.into_iter().map(Change::Issue));
        b
    }

    #[test]
    fn empty_board_is_complete() {
        assert_eq!(Board::new().stage(), Stage::Complete);
    }

    #[test]
    fn stage_table() {
        let pending = Task::new("t-1", "a");
        let done = Task::new("t-2", "b").with_status(TaskStatus::Done);
        let mut killed = Task::new("t-3", "c");
        killed.kill_reason = Some(KillReason::Timeout);
        let issue = Issue::new("i-1", "q");

        assert_eq!(
            board(vec![], vec![issue.clone()]).stage(),
            Stage::Investigate
        );
        assert_eq!(board(vec![pending.clone()], vec![]).stage(), Stage::Build);
        assert_eq!(
            board(vec![pending.clone(), done.clone()], vec![]).stage(),
            Stage::Build
        );
        assert_eq!(board(vec![done.clone()], vec![]).stage(), Stage::Verify);
        assert_eq!(
            board(vec![killed, pending, done], vec![issue]).stage(),
            Stage::Decompose
        );
        let accepted = Task::new("t-9", "z").with_status(TaskStatus::Accepted);
        assert_eq!(board(vec![accepted], vec![]).stage(), Stage::Complete);
    }

    #[test]
    fn blocked_work_and_tasks_waiting_on_it_give_blocked() {
        let mut blocked = Task::new("t-1", "a").with_status(TaskStatus::Blocked);
        blocked.blocked_reason = Some("no credentials".into());
        let waiting = Task::new("t-2", "b").with_deps(["t-1"]);
        assert_eq!(
            board(vec![blocked, waiting], vec![]).stage(),
            Stage::Blocked
        );
    }

    #[test]
    fn done_deps_unblock() {
        let done = Task::new("t-1", "a").with_status(TaskStatus::Done);
        let waiting = Task::new("t-2", "b").with_deps(["t-1"]);
        assert_eq!(board(vec![done, waiting], vec![]).stage(), Stage::Build);
    }

    #[test]
    fn recent_attempts_and_the_iteration_log_are_bounded() {
        let mut run = RunState::default();
        for i in 1..=7 {
            let tried = format!("try {i}\nsecond line");
            run.remember_attempt(
                RecentAttempt::new(i, TaskId::new("t-1"), tried, "done", "now"),
                5,
            );
        }
        let kept: Vec<u32> = run.attempts.iter().map(|a| a.iteration).collect();
        assert_eq!(kept, vec![3, 4, 5, 6, 7]);
        assert_eq!(run.attempts[0].tried, "try 3", "one line");
        for i in 1..=(ITERATION_LOG_LIMIT as u32 + 10) {
            let d = std::time::Duration::from_millis(1500);
            run.log_iteration(IterationEntry::new(i, "now", d, 0, ""));
        }
        assert_eq!(run.log.len(), ITERATION_LOG_LIMIT);
        assert_eq!(run.log[0].iteration, 11);
        assert_eq!(
            run.log[0].duration(),
            std::time::Duration::from_millis(1500)
        );
        assert_eq!(
            one_line(&"é".repeat(400)).chars().count(),
            151,
            "150 chars and an ellipsis"
        );
    }

    #[test]
    fn declared_complete_wins_over_remaining_work() {
        let mut b = board(vec![Task::new("t-1", "a")], vec![]);
        assert_eq!(b.stage(), Stage::Build);
        b.declared_complete = true;
        assert_eq!(b.stage(), Stage::Complete);
    }

    #[test]
    fn subtask_ids_skip_taken_and_roll_over() {
        let b = board(vec![Task::new("t-3a", "x")], vec![]);
        let ids = b.subtask_ids(&TaskId::new("t-3"), 2);
        assert_eq!(ids, vec![TaskId::new("t-3b"), TaskId::new("t-3c")]);
        assert_eq!(alpha_suffix(25), "z");
        assert_eq!(alpha_suffix(26), "aa");
    }

    #[test]
    fn change_lines_use_seed_format() {
        let line = serde_json::to_string(&Change::Task(Task::new("t-abc", "x"))).unwrap();
        assert_eq!(line, r#"{"t":"task","id":"t-abc","name":"x","s":"p"}"#);
        let back: Change = serde_json::from_str(
            r#"{"t": "task", "id": "t-abc", "name": "...", "s": "p", "kill_reason": "timeout", "kill_log": "build/ralph-logs/ralph-20260119-build.log"}"#,
        )
        .unwrap();
        let Change::Task(task) = back else {
            panic!("not a task")
        };
        assert!(task.is_killed());
    }
}
