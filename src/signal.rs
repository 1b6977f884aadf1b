//! The one marker parser: `<TASK_DONE>`, `<TASK_BLOCKED reason="…">`, `RALPH_DONE`,
//! `PLAN_INVALIDATION: <reason>`.

/// What an agent's final answer says about its task.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TaskSignal {
    /// No marker.
    None,
    /// `<TASK_DONE>` as the last non-empty line.
    Done,
    /// `<TASK_BLOCKED reason="…">` as a whole line.
    Blocked {
        /// The reason, unescaped.
        reason: String,
    },
    /// Markers that contradict each other; counts as neither.
    Conflict,
}

/// Every marker found in one final answer.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Markers {
    /// The task marker.
    pub task: TaskSignal,
    /// `RALPH_DONE` as the last non-empty line.
    pub ralph_done: bool,
    /// The reason of a `PLAN_INVALIDATION: <reason>` line.
    pub plan_invalidation: Option<String>,
}

/// Parses the markers of a final answer. Placeholder; the real parser is being written.
pub fn parse(final_answer: &str) -> Markers {
    let last = final_answer.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    Markers {
        task: if last == "<TASK_DONE>" { TaskSignal::Done } else { TaskSignal::None },
        ralph_done: last == "RALPH_DONE",
        plan_invalidation: None,
    }
}
