//! Plan mode and build mode over `implementation.json`: several markdown specs, each planned,
//! built task by task with the gates after each session, verified, and committed.
//!
//! * [`Ralph::plan`](crate::Ralph::plan) (plan mode) turns the markdown specs into
//!   `implementation.json` ([`Implementation`]) with one structured answer;
//! * [`Ralph::build_specs`](crate::Ralph::build_specs) (build mode) works through it with no
//!   agent parsing it: a plan per spec (`.ralph/plans/`), one fresh session per task attempt,
//!   a verifier per spec, a commit per verified spec and an entry in `PROGRESS.md`.

pub(crate) mod build;
pub(crate) mod dry_run;
mod history;
#[doc(hidden)] // ralph's own tests reach it: no promise
pub mod implementation;
mod json_locate;
pub(crate) mod logs;
#[doc(hidden)] // ralph's own tests reach it: no promise
pub mod plan_files;
pub(crate) mod plan_mode;
pub(crate) mod scratchpad;
pub(crate) mod unblock;

pub use crate::runtime::error::SpecsError;
pub use dry_run::{BuildDryRun, PlanDryRun};
pub(crate) use implementation::ImplementationStore;
pub use implementation::{Implementation, SpecEntry, Status, TaskEntry};

/// Plan mode's and build mode's scope in the spend ledger: one run over
/// `implementation.json`, from its plan on ([`spend`](crate::runtime::spend)).
pub(crate) const SPEND_SCOPE: &str = "build";
