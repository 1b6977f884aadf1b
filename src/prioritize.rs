//! The `Prioritizer` seam and the default [`CriticalPath`] algorithm (seed 000).

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::{Priority, Task, TaskId};

/// Counts reported after a prioritization (seed 000: `{"prioritized":5,"high":2,…}`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PriorityReport {
    /// Tasks ordered.
    pub prioritized: usize,
    /// Of which high.
    pub high: usize,
    /// Of which medium.
    pub medium: usize,
    /// Of which low.
    pub low: usize,
}

/// One task's place in the order.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Assignment {
    /// The task.
    pub id: TaskId,
    /// Its effective priority (the explicit one when set).
    pub priority: Priority,
}

/// The result of a prioritization: every given task, in the order it should run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Prioritized {
    /// Tasks in execution order: priority descending, never before a task it depends on.
    pub order: Vec<Assignment>,
    /// The counts.
    pub report: PriorityReport,
}

impl Prioritized {
    /// Builds the result from an ordered list, computing the report.
    pub fn from_order(order: Vec<Assignment>) -> Self {
        let mut report = PriorityReport {
            prioritized: order.len(),
            ..PriorityReport::default()
        };
        for a in &order {
            match a.priority {
                Priority::High => report.high += 1,
                Priority::Medium => report.medium += 1,
                Priority::Low => report.low += 1,
            }
        }
        Prioritized { order, report }
    }
}

/// The tasks' dependencies form a cycle, so no order exists.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PrioritizeError {
    /// A dependency cycle; `tasks` lists it in order, the first repeated at the end.
    #[error("dependency cycle: {}", join_ids(.tasks))]
    Cycle {
        /// The cycle, e.g. `t-1 -> t-2 -> t-1`.
        tasks: Vec<TaskId>,
    },
}

fn join_ids(ids: &[TaskId]) -> String {
    ids.iter()
        .map(TaskId::as_str)
        .collect::<Vec<_>>()
        .join(" -> ")
}

/// Orders pending tasks. Synchronous and pure. Usable as `dyn Prioritizer`.
///
/// The input is the set of tasks to order (the engine passes the pending ones); a dependency
/// on a task outside that set counts as already satisfied.
#[diagnostic::on_unimplemented(
    note = "implement `ralph::Prioritizer`, or use `ralph::CriticalPath`"
)]
pub trait Prioritizer: Send + Sync {
    /// Orders `tasks` and assigns each an effective priority.
    ///
    /// # Errors
    ///
    /// [`PrioritizeError::Cycle`] naming the tasks of a dependency cycle.
    fn prioritize(&self, tasks: &[Task]) -> Result<Prioritized, PrioritizeError>;
}

impl<T: Prioritizer + ?Sized> Prioritizer for Box<T> {
    fn prioritize(&self, tasks: &[Task]) -> Result<Prioritized, PrioritizeError> {
        (**self).prioritize(tasks)
    }
}

impl<T: Prioritizer + ?Sized> Prioritizer for Arc<T> {
    fn prioritize(&self, tasks: &[Task]) -> Result<Prioritized, PrioritizeError> {
        (**self).prioritize(tasks)
    }
}

/// Breaks the build if `Prioritizer` stops being usable as `dyn`.
#[allow(dead_code)]
fn _assert_prioritizer_object_safe(
    _: &dyn Prioritizer,
    _: Box<dyn Prioritizer>,
    _: Arc<dyn Prioritizer>,
) {
}

/// Seed 000's algorithm: dependency graph, unblock counts, critical path, complexity.
///
/// - explicit priorities are kept;
/// - HIGH: small tasks that unblock many others, and tasks on the critical path;
/// - LOW: documentation, cleanup, nice-to-have;
/// - MEDIUM: everything else;
/// - order: priority descending, never before a dependency; ties keep the input order.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct CriticalPath {}

impl CriticalPath {
    /// The default algorithm.
    pub fn new() -> Self {
        CriticalPath {}
    }
}

impl fmt::Display for CriticalPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("critical-path")
    }
}

impl Prioritizer for CriticalPath {
    fn prioritize(&self, tasks: &[Task]) -> Result<Prioritized, PrioritizeError> {
        // Placeholder until the real algorithm lands: explicit priority or medium, input order.
        Ok(Prioritized::from_order(
            tasks
                .iter()
                .map(|t| Assignment {
                    id: t.id.clone(),
                    priority: t.priority.unwrap_or(Priority::Medium),
                })
                .collect(),
        ))
    }
}
