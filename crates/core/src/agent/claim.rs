//! What an implementer's final answer claims about its task, read the same way in every
//! mode by the one marker parser: done (the gates then decide), blocked with a reason, or not
//! done, with what to tell the next attempt.

use crate::signal::{self, TaskSignal};

/// What a final answer claims about its task ([`AgentRun::claim`](super::AgentRun::claim)).
/// A claim of done is no verdict: the required gates and the verifier still decide.
#[derive(Clone, Debug, PartialEq, Eq)]
// Exhaustive: the runtime acts on each; a new one must reach it.
pub enum Claim {
    /// `<TASK_DONE>` as the last line: the required gates decide.
    Done,
    /// `<TASK_BLOCKED reason="…">`: the task waits for a person, for this reason.
    Blocked(String),
    /// `<TASK_QUESTION question="…">` as the last line: the agent needs a person's answer
    /// to go on (`ralph answer`); the task waits for it, without counting the attempt as a
    /// failure.
    Question(String),
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
        TaskSignal::Question { question } => Claim::Question(question),
        TaskSignal::Conflict => Claim::NotDone(
            "Your final answer contained more than one of <TASK_DONE>, <TASK_BLOCKED …> and <TASK_QUESTION …>; end it with exactly one of them.".into(),
        ),
        _ if fenced_marker(final_text) => Claim::NotDone(
            "Your final answer had <TASK_DONE> on a line of its own but inside a code fence (```), where a marker does not count, so the task was not counted as done; end the answer with <TASK_DONE> as its last line, outside any fence.".into(),
        ),
        _ => Claim::NotDone(
            "Your final answer did not end with <TASK_DONE> on a line of its own, so the task was not counted as done.".into(),
        ),
    }
}

/// Whether `<TASK_DONE>` is a whole line of `text` only inside fenced code: the one near miss
/// the generic message would misdescribe. The parser's rule stands (a fenced line is code,
/// never a marker); only what the next attempt is told changes.
fn fenced_marker(text: &str) -> bool {
    let marker = "<TASK_DONE>";
    text.lines().any(|line| line.trim() == marker) && !signal::is_marker_line(text, marker)
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
        assert_eq!(
            of("Which one?\n<TASK_QUESTION question=\"Postgres or SQLite?\">"),
            Claim::Question("Postgres or SQLite?".into())
        );
        assert!(matches!(
            of("I will print <TASK_DONE> later."),
            Claim::NotDone(_)
        ));
    }

    /// Re-audit case 22: a marker on its own line inside a fence is still not done, and the
    /// next attempt is told that the fence was the fault.
    #[test]
    fn a_fenced_marker_is_not_done_and_the_fence_is_named() {
        let Claim::NotDone(why) = of("Done.\n```\n<TASK_DONE>\n```\n") else {
            panic!("a fenced marker counted");
        };
        assert!(why.contains("inside a code fence"), "{why}");
        for near in ["Done.\n> <TASK_DONE>\n", "<TASK_DONE>\nP.S. more\n"] {
            let Claim::NotDone(why) = of(near) else {
                panic!("{near:?} counted");
            };
            assert!(!why.contains("fence"), "{near:?}: {why}");
        }
    }
}
