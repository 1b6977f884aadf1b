//! What an implementer's final answer claims about its task, read the same way in every
//! mode by the one marker parser: done (the gates then decide), blocked with a reason, or not
//! done, with what to tell the next attempt.

use crate::signal::{self, TaskSignal};

/// What a final answer claims about its task ([`AgentRun::claim`](super::AgentRun::claim)).
/// A claim of done is no verdict: the required gates and the verifier still decide.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Claim {
    /// `<TASK_DONE>` as the last line: the required gates decide.
    Done,
    /// `<TASK_BLOCKED reason="…">`: the task waits for a person, for this reason.
    Blocked(String),
    /// No valid claim: the attempt failed; this goes into the next attempt's prompt.
    NotDone(String),
}

/// Reads the claim of `final_text`.
pub(crate) fn of(final_text: &str) -> Claim {
    match signal::parse(final_text).task {
        TaskSignal::Done => Claim::Done,
        TaskSignal::Blocked { reason } if reason.trim().is_empty() => {
            Claim::Blocked("the agent gave no reason".into())
        }
        TaskSignal::Blocked { reason } => Claim::Blocked(reason),
        TaskSignal::Conflict => Claim::NotDone(
            "Your final answer contained both <TASK_DONE> and <TASK_BLOCKED …>; end it with exactly one of them.".into(),
        ),
        _ => Claim::NotDone(
            "Your final answer did not end with <TASK_DONE> on a line of its own, so the task was not counted as done.".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_claim_is_read() {
        assert_eq!(of("Did it.\n<TASK_DONE>\n"), Claim::Done);
        assert_eq!(
            of("<TASK_BLOCKED reason=\"needs a key\">"),
            Claim::Blocked("needs a key".into())
        );
        assert_eq!(
            of("<TASK_BLOCKED>"),
            Claim::Blocked("the agent gave no reason".into())
        );
        assert!(matches!(
            of("I will print <TASK_DONE> later."),
            Claim::NotDone(_)
        ));
    }
}
