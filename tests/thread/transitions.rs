//! Seed 001's transition tables, row by row, against `ralph::thread::phase`; and every
//! other pair refused with both phases named.

#![allow(clippy::unwrap_used)]

use ralph::thread::phase::{PhaseKind as K, TRANSITIONS, TransitionGroup, check, find};
use rstest::rstest;

#[rstest]
// Forward Transitions.
#[case::drafting_assessing(K::Drafting, K::Assessing, TransitionGroup::Forward)]
#[case::drafting_finalized(K::Drafting, K::Finalized, TransitionGroup::Forward)]
#[case::assessing_finalized(K::Assessing, K::Finalized, TransitionGroup::Forward)]
#[case::finalized_preflight(K::Finalized, K::Preflight, TransitionGroup::Forward)]
#[case::preflight_configuring(K::Preflight, K::Configuring, TransitionGroup::Forward)]
#[case::configuring_running(K::Configuring, K::Running, TransitionGroup::Forward)]
#[case::running_verifying(K::Running, K::Verifying, TransitionGroup::Forward)]
#[case::verifying_implemented(K::Verifying, K::Implemented, TransitionGroup::Forward)]
#[case::implemented_polishing(K::Implemented, K::Polishing, TransitionGroup::Forward)]
#[case::implemented_pending_review(K::Implemented, K::PendingReview, TransitionGroup::Forward)]
#[case::polishing_implemented(K::Polishing, K::Implemented, TransitionGroup::Forward)]
#[case::pending_review_approved(K::PendingReview, K::Approved, TransitionGroup::Forward)]
#[case::approved_ready_to_commit(K::Approved, K::ReadyToCommit, TransitionGroup::Forward)]
#[case::ready_to_commit_done(K::ReadyToCommit, K::Done, TransitionGroup::Forward)]
// The diagram's preflight rows (not in the forward table's text, but in the diagram).
#[case::preflight_failed(K::Preflight, K::PreflightFailed, TransitionGroup::Forward)]
#[case::preflight_retry(K::PreflightFailed, K::Preflight, TransitionGroup::Forward)]
// Backward Transitions.
#[case::assessing_drafting(K::Assessing, K::Drafting, TransitionGroup::Backward)]
#[case::finalized_drafting(K::Finalized, K::Drafting, TransitionGroup::Backward)]
#[case::preflight_failed_drafting(K::PreflightFailed, K::Drafting, TransitionGroup::Backward)]
#[case::verifying_running(K::Verifying, K::Running, TransitionGroup::Backward)]
#[case::running_stuck(K::Running, K::Stuck, TransitionGroup::Backward)]
#[case::verifying_stuck(K::Verifying, K::Stuck, TransitionGroup::Backward)]
#[case::stuck_drafting(K::Stuck, K::Drafting, TransitionGroup::Backward)]
#[case::stuck_configuring(K::Stuck, K::Configuring, TransitionGroup::Backward)]
#[case::stuck_running(K::Stuck, K::Running, TransitionGroup::Backward)]
#[case::pending_review_running(K::PendingReview, K::Running, TransitionGroup::Backward)]
#[case::pending_review_drafting(K::PendingReview, K::Drafting, TransitionGroup::Backward)]
// ralph's one row beyond the seed's tables (docs/seed-differences.md, 001-R37): "any code
// changes require re-review", when a commit finds the work tree changed since approval.
#[case::ready_to_commit_pending_review(
    K::ReadyToCommit,
    K::PendingReview,
    TransitionGroup::Backward
)]
// User Control Transitions.
#[case::running_paused(K::Running, K::Paused, TransitionGroup::UserControl)]
#[case::paused_running(K::Paused, K::Running, TransitionGroup::UserControl)]
#[case::paused_configuring(K::Paused, K::Configuring, TransitionGroup::UserControl)]
fn seed_row_is_allowed(#[case] from: K, #[case] to: K, #[case] group: TransitionGroup) {
    let row = find(from, to).unwrap_or_else(|| panic!("{from} -> {to} missing"));
    assert_eq!(row.group, group);
    assert!(check(from, to).is_ok());
}

#[test]
fn any_non_terminal_phase_can_be_abandoned_and_terminal_ones_cannot() {
    for from in K::ALL {
        let allowed = check(from, K::Abandoned).is_ok();
        assert_eq!(allowed, !from.is_terminal(), "{from} -> Abandoned");
        if allowed {
            assert_eq!(
                find(from, K::Abandoned).unwrap().group,
                TransitionGroup::Abandon
            );
        }
    }
}

#[test]
fn terminal_phases_have_no_way_out() {
    for to in K::ALL {
        for from in [K::Done, K::Abandoned] {
            assert!(check(from, to).is_err(), "{from} -> {to}");
        }
    }
}

#[test]
fn the_table_has_exactly_the_seed_rows() {
    // 14 forward + 2 preflight + 11 backward + 3 user control + 15 abandon, and the re-review
    // of a work tree changed after approval.
    assert_eq!(TRANSITIONS.len(), 46);
}

#[test]
fn every_other_pair_is_refused_naming_both_phases() {
    let mut refused = 0;
    for from in K::ALL {
        for to in K::ALL {
            if find(from, to).is_some() {
                continue;
            }
            let err = check(from, to).unwrap_err();
            let message = err.to_string();
            assert!(
                message.contains(from.as_str()) && message.contains(to.as_str()),
                "{message}"
            );
            refused += 1;
        }
    }
    assert_eq!(refused, 17 * 17 - 46);
}
