//! The phases of a thread and the transitions between them, as data (seed 001's tables).
//!
//! [`Phase`] carries each phase's data and is stored in `thread.json` as a tagged enum
//! (`{"type":"Running","data":{"iteration":3}}`, `{"type":"Drafting"}`). [`PhaseKind`] is
//! the same list without data; [`TRANSITIONS`] is the table of every allowed move, and
//! [`check`] refuses any other with both phases named.
//!
//! ```
//! use ralph::thread::phase::{check, PhaseKind};
//!
//! assert!(check(PhaseKind::Drafting, PhaseKind::Finalized).is_ok());
//! let refused = check(PhaseKind::Drafting, PhaseKind::Running).unwrap_err();
//! assert_eq!(refused.to_string(), "a thread cannot go from Drafting to Running");
//! ```

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where a thread stands, with what that phase needs to remember.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data")]
#[non_exhaustive]
pub enum Phase {
    /// The spec is being written or refined.
    Drafting,
    /// The spec was handed for review (advisory).
    Assessing,
    /// The spec is locked: a person approved it.
    Finalized,
    /// Prerequisites are being checked.
    Preflight,
    /// Prerequisites are not met; a person must fix them.
    PreflightFailed {
        /// One clear message per failed check.
        failures: Vec<String>,
    },
    /// Models, iterations and verifiers are being set up.
    Configuring,
    /// The loop is running this iteration.
    Running {
        /// 1-based iteration.
        iteration: u32,
    },
    /// A person interrupted the loop; it continues from `iteration`.
    Paused {
        /// The iteration that was interrupted (and will run again on resume).
        iteration: u32,
        /// Criteria passing at the latest verification.
        criteria_passing: usize,
        /// Criteria in the spec.
        criteria_total: usize,
    },
    /// The model claimed done at `iteration`; the criteria are being checked.
    Verifying {
        /// The iteration whose claim is checked.
        iteration: u32,
    },
    /// The loop could not finish; see the thread's stuck report.
    Stuck {
        /// Why it stopped (`Stopped: max iterations (5) reached`).
        reason: String,
    },
    /// Every criterion passed.
    Implemented,
    /// Docs and tests are being added.
    Polishing,
    /// Waiting for a person to review.
    PendingReview {
        /// Every criterion passed at the last verification: the "recommend approve" badge.
        recommend_approve: bool,
    },
    /// A person approved the changes.
    Approved,
    /// A commit message is ready; a person must commit.
    ReadyToCommit {
        /// The proposed commit message.
        message: String,
    },
    /// Committed on the thread's branch.
    Done {
        /// The commit made, if there was anything to commit.
        commit: Option<String>,
    },
    /// Given up.
    Abandoned,
}

impl Phase {
    /// The phase without its data.
    pub fn kind(&self) -> PhaseKind {
        match self {
            Phase::Drafting => PhaseKind::Drafting,
            Phase::Assessing => PhaseKind::Assessing,
            Phase::Finalized => PhaseKind::Finalized,
            Phase::Preflight => PhaseKind::Preflight,
            Phase::PreflightFailed { .. } => PhaseKind::PreflightFailed,
            Phase::Configuring => PhaseKind::Configuring,
            Phase::Running { .. } => PhaseKind::Running,
            Phase::Paused { .. } => PhaseKind::Paused,
            Phase::Verifying { .. } => PhaseKind::Verifying,
            Phase::Stuck { .. } => PhaseKind::Stuck,
            Phase::Implemented => PhaseKind::Implemented,
            Phase::Polishing => PhaseKind::Polishing,
            Phase::PendingReview { .. } => PhaseKind::PendingReview,
            Phase::Approved => PhaseKind::Approved,
            Phase::ReadyToCommit { .. } => PhaseKind::ReadyToCommit,
            Phase::Done { .. } => PhaseKind::Done,
            Phase::Abandoned => PhaseKind::Abandoned,
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.kind().fmt(f)
    }
}

/// A phase's name, without data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum PhaseKind {
    /// See [`Phase::Drafting`].
    Drafting,
    /// See [`Phase::Assessing`].
    Assessing,
    /// See [`Phase::Finalized`].
    Finalized,
    /// See [`Phase::Preflight`].
    Preflight,
    /// See [`Phase::PreflightFailed`].
    PreflightFailed,
    /// See [`Phase::Configuring`].
    Configuring,
    /// See [`Phase::Running`].
    Running,
    /// See [`Phase::Paused`].
    Paused,
    /// See [`Phase::Verifying`].
    Verifying,
    /// See [`Phase::Stuck`].
    Stuck,
    /// See [`Phase::Implemented`].
    Implemented,
    /// See [`Phase::Polishing`].
    Polishing,
    /// See [`Phase::PendingReview`].
    PendingReview,
    /// See [`Phase::Approved`].
    Approved,
    /// See [`Phase::ReadyToCommit`].
    ReadyToCommit,
    /// See [`Phase::Done`].
    Done,
    /// See [`Phase::Abandoned`].
    Abandoned,
}

impl PhaseKind {
    /// All seventeen phases, in the order of seed 001's diagram.
    pub const ALL: [PhaseKind; 17] = [
        PhaseKind::Drafting,
        PhaseKind::Assessing,
        PhaseKind::Finalized,
        PhaseKind::Preflight,
        PhaseKind::PreflightFailed,
        PhaseKind::Configuring,
        PhaseKind::Running,
        PhaseKind::Paused,
        PhaseKind::Verifying,
        PhaseKind::Stuck,
        PhaseKind::Implemented,
        PhaseKind::Polishing,
        PhaseKind::PendingReview,
        PhaseKind::Approved,
        PhaseKind::ReadyToCommit,
        PhaseKind::Done,
        PhaseKind::Abandoned,
    ];

    /// Whether the thread has ended (Done or Abandoned): nothing leaves these.
    pub fn is_terminal(self) -> bool {
        matches!(self, PhaseKind::Done | PhaseKind::Abandoned)
    }

    /// Seed 001's "Human Action Required" column: the phases a person's decision makes or
    /// unblocks. Finalized and Approved are reached only by a person's approval; in
    /// PreflightFailed, Paused, Stuck, PendingReview and ReadyToCommit the thread waits for
    /// one. Drafting and Assessing are "No" in the seed: the person drives the conversation,
    /// but nothing waits on an approval.
    pub fn needs_person(self) -> bool {
        matches!(
            self,
            PhaseKind::Finalized
                | PhaseKind::PreflightFailed
                | PhaseKind::Paused
                | PhaseKind::Stuck
                | PhaseKind::PendingReview
                | PhaseKind::Approved
                | PhaseKind::ReadyToCommit
        )
    }

    /// The name, as in the seed (`PendingReview`).
    pub fn as_str(self) -> &'static str {
        match self {
            PhaseKind::Drafting => "Drafting",
            PhaseKind::Assessing => "Assessing",
            PhaseKind::Finalized => "Finalized",
            PhaseKind::Preflight => "Preflight",
            PhaseKind::PreflightFailed => "PreflightFailed",
            PhaseKind::Configuring => "Configuring",
            PhaseKind::Running => "Running",
            PhaseKind::Paused => "Paused",
            PhaseKind::Verifying => "Verifying",
            PhaseKind::Stuck => "Stuck",
            PhaseKind::Implemented => "Implemented",
            PhaseKind::Polishing => "Polishing",
            PhaseKind::PendingReview => "PendingReview",
            PhaseKind::Approved => "Approved",
            PhaseKind::ReadyToCommit => "ReadyToCommit",
            PhaseKind::Done => "Done",
            PhaseKind::Abandoned => "Abandoned",
        }
    }
}

impl fmt::Display for PhaseKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which table of seed 001 a transition comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransitionGroup {
    /// "Forward Transitions".
    Forward,
    /// "Backward Transitions".
    Backward,
    /// "User Control Transitions" (pause, resume, reconfigure).
    UserControl,
    /// "Any → Abandoned".
    Abandon,
}

/// One allowed move: from, to, its table, and what triggers it (the seed's words).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Transition {
    /// The phase left.
    pub from: PhaseKind,
    /// The phase entered.
    pub to: PhaseKind,
    /// The seed's table.
    pub group: TransitionGroup,
    /// What triggers it.
    pub trigger: &'static str,
}

const fn t(
    from: PhaseKind,
    to: PhaseKind,
    group: TransitionGroup,
    trigger: &'static str,
) -> Transition {
    Transition {
        from,
        to,
        group,
        trigger,
    }
}

use PhaseKind as K;
use TransitionGroup::{Abandon, Backward, Forward, UserControl};

/// Every allowed transition. Creation (→ Drafting) and the terminal "→ end" rows are not
/// moves between phases and are not listed; Done and Abandoned have no way out.
pub const TRANSITIONS: &[Transition] = &[
    // Forward.
    t(
        K::Drafting,
        K::Assessing,
        Forward,
        "user requests AI review",
    ),
    t(
        K::Drafting,
        K::Finalized,
        Forward,
        "user approves spec (skipping assessment)",
    ),
    t(
        K::Assessing,
        K::Finalized,
        Forward,
        "user approves after reviewing feedback",
    ),
    t(
        K::Finalized,
        K::Preflight,
        Forward,
        "user starts implementation",
    ),
    t(
        K::Preflight,
        K::Configuring,
        Forward,
        "all preflight checks pass",
    ),
    t(
        K::Preflight,
        K::PreflightFailed,
        Forward,
        "a preflight check fails",
    ),
    t(K::PreflightFailed, K::Preflight, Forward, "retry"),
    t(K::Configuring, K::Running, Forward, "user starts the loop"),
    t(
        K::Running,
        K::Verifying,
        Forward,
        "model outputs promise tag",
    ),
    t(
        K::Verifying,
        K::Implemented,
        Forward,
        "all criteria pass verification",
    ),
    t(
        K::Implemented,
        K::Polishing,
        Forward,
        "user wants to add docs/tests",
    ),
    t(
        K::Implemented,
        K::PendingReview,
        Forward,
        "user skips polish, ready for review",
    ),
    t(K::Polishing, K::Implemented, Forward, "polish complete"),
    t(
        K::PendingReview,
        K::Approved,
        Forward,
        "user approves changes",
    ),
    t(
        K::Approved,
        K::ReadyToCommit,
        Forward,
        "prepare commit message",
    ),
    t(K::ReadyToCommit, K::Done, Forward, "user commits"),
    // Backward.
    t(K::Assessing, K::Drafting, Backward, "AI found issues"),
    t(K::Finalized, K::Drafting, Backward, "user reopens spec"),
    t(
        K::PreflightFailed,
        K::Drafting,
        Backward,
        "spec needs fixes",
    ),
    t(K::Verifying, K::Running, Backward, "criteria failed"),
    t(K::Running, K::Stuck, Backward, "max iterations"),
    t(
        K::Verifying,
        K::Stuck,
        Backward,
        "criteria failed, no iterations",
    ),
    t(
        K::Stuck,
        K::Drafting,
        Backward,
        "spec was wrong (reset to baseline)",
    ),
    t(K::Stuck, K::Configuring, Backward, "try different config"),
    t(K::Stuck, K::Running, Backward, "manual assist"),
    t(
        K::PendingReview,
        K::Running,
        Backward,
        "implementation bugs",
    ),
    t(
        K::PendingReview,
        K::Drafting,
        Backward,
        "spec was wrong (reset to baseline)",
    ),
    // Not in the seed's table: its "any code changes require re-review", when a commit
    // finds the work tree changed since approval.
    t(
        K::ReadyToCommit,
        K::PendingReview,
        Backward,
        "the work tree changed since approval (re-review)",
    ),
    // User control.
    t(
        K::Running,
        K::Paused,
        UserControl,
        "user interrupt (Ctrl+C)",
    ),
    t(K::Paused, K::Running, UserControl, "user resumes"),
    t(
        K::Paused,
        K::Configuring,
        UserControl,
        "user wants to reconfigure",
    ),
    // Abandon, from every non-terminal phase.
    t(K::Drafting, K::Abandoned, Abandon, "abandon"),
    t(K::Assessing, K::Abandoned, Abandon, "abandon"),
    t(K::Finalized, K::Abandoned, Abandon, "abandon"),
    t(K::Preflight, K::Abandoned, Abandon, "abandon"),
    t(K::PreflightFailed, K::Abandoned, Abandon, "abandon"),
    t(K::Configuring, K::Abandoned, Abandon, "abandon"),
    t(K::Running, K::Abandoned, Abandon, "abandon"),
    t(K::Paused, K::Abandoned, Abandon, "abandon"),
    t(K::Verifying, K::Abandoned, Abandon, "abandon"),
    t(K::Stuck, K::Abandoned, Abandon, "abandon"),
    t(K::Implemented, K::Abandoned, Abandon, "abandon"),
    t(K::Polishing, K::Abandoned, Abandon, "abandon"),
    t(K::PendingReview, K::Abandoned, Abandon, "abandon"),
    t(K::Approved, K::Abandoned, Abandon, "abandon"),
    t(K::ReadyToCommit, K::Abandoned, Abandon, "abandon"),
];

/// A move the table does not allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a thread cannot go from {from} to {to}")]
#[non_exhaustive]
pub struct TransitionError {
    /// The phase the thread is in.
    pub from: PhaseKind,
    /// The phase asked for.
    pub to: PhaseKind,
}

/// The table's row for `from → to`, if the move is allowed.
pub fn find(from: PhaseKind, to: PhaseKind) -> Option<&'static Transition> {
    TRANSITIONS.iter().find(|t| t.from == from && t.to == to)
}

/// Whether `from → to` is allowed.
///
/// # Errors
///
/// [`TransitionError`] naming both phases when it is not.
pub fn check(from: PhaseKind, to: PhaseKind) -> Result<(), TransitionError> {
    match find(from, to) {
        Some(_) => Ok(()),
        None => Err(TransitionError { from, to }),
    }
}

#[cfg(test)]
mod tests {
    /// Audit row 001-R39: the column as the seed has it, phase by phase.
    #[test]
    fn the_phases_needing_a_person_are_the_seeds() {
        let needing: Vec<&str> = PhaseKind::ALL
            .iter()
            .filter(|k| k.needs_person())
            .map(|k| k.as_str())
            .collect();
        assert_eq!(
            needing,
            [
                "Finalized",
                "PreflightFailed",
                "Paused",
                "Stuck",
                "PendingReview",
                "Approved",
                "ReadyToCommit"
            ]
        );
    }

    use super::*;

    #[test]
    fn no_row_is_listed_twice_and_none_leaves_a_terminal_phase() {
        for (i, a) in TRANSITIONS.iter().enumerate() {
            assert!(!a.from.is_terminal(), "{a:?}");
            for b in &TRANSITIONS[i + 1..] {
                assert!(!(a.from == b.from && a.to == b.to), "duplicate {a:?}");
            }
        }
    }

    #[test]
    fn phase_serializes_as_a_tagged_enum() {
        let running = serde_json::to_value(Phase::Running { iteration: 3 }).unwrap();
        assert_eq!(
            running,
            serde_json::json!({"type": "Running", "data": {"iteration": 3}})
        );
        let drafting = serde_json::to_value(Phase::Drafting).unwrap();
        assert_eq!(drafting, serde_json::json!({"type": "Drafting"}));
    }
}
