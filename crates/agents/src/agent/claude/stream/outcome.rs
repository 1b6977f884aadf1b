//! How a run ended, as the stream tells it, and what that means for ralph.

use std::fmt;
use std::time::SystemTime;

use crate::agent::{AgentExit, FailureKind};

use super::lenient::ApiStatus;

/// How the CLI's run ended, read from its `result` line, or from the lack of one.
///
/// Never from the exit code (SIGINT gives exit 0 with a failed result) nor from `subtype`
/// (API failures say `"success"`): only `is_error` says whether the run completed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunOutcome {
    /// A `result` line with `is_error: false`: the model gave its final answer (which may
    /// still say it is blocked, or lack a marker).
    Completed,
    /// A `result` line with `is_error: true`, or without `is_error` (never guessed as success).
    Failed(Failure),
    /// The stream ended without a `result` line: the CLI was killed (SIGTERM, SIGKILL) or
    /// crashed. The exit code does not change that, not even 0.
    NoResult,
}

impl RunOutcome {
    /// Whether the run completed.
    pub fn is_completed(&self) -> bool {
        matches!(self, RunOutcome::Completed)
    }

    /// The failure, if the run failed with a `result` line.
    pub fn failure(&self) -> Option<&Failure> {
        match self {
            RunOutcome::Failed(failure) => Some(failure),
            _ => None,
        }
    }

    /// What this outcome means for the engine (a pure function; the agent overrides it with
    /// what it knows itself: its own timeouts and stops).
    ///
    /// `rate_limited_until` is the reset time of a rejected `rate_limit_event`, if the stream
    /// had one: a failed or cut-off run that saw one is [`AgentExit::RateLimited`], unless it
    /// failed authentication (which no wait cures).
    ///
    /// | outcome | [`AgentExit`] |
    /// |---|---|
    /// | completed | `Completed` |
    /// | failed: authentication (401, 403) | `Failed`, [`FailureKind::Fatal`] |
    /// | failed or no result, with a rejected rate limit | `RateLimited { until }` |
    /// | failed: rate limited (429), no reset time | `Failed`, `Transient` |
    /// | failed: server error (5xx, 529), network (status null) | `Failed`, `Transient` |
    /// | failed: prompt too long | `ContextLimit` |
    /// | failed: max turns, budget exhausted, interrupted, other 4xx, unknown | `Failed`, `Attempt` |
    /// | no result line (killed or crashed) | `Failed`, `Attempt` |
    pub fn agent_exit(&self, rate_limited_until: Option<SystemTime>) -> AgentExit {
        let failure = match self {
            RunOutcome::Completed => return AgentExit::Completed,
            RunOutcome::Failed(failure) => Some(failure),
            RunOutcome::NoResult => None,
        };
        let cause = failure.map(|f| f.cause);
        if let (Some(until), false) = (
            rate_limited_until,
            cause == Some(FailureCause::Authentication),
        ) {
            return AgentExit::RateLimited { until };
        }
        match failure {
            Some(failure) if failure.cause == FailureCause::PromptTooLong => {
                AgentExit::ContextLimit
            }
            Some(failure) => AgentExit::Failed {
                reason: failure.to_string(),
                kind: failure.cause.kind(),
            },
            None => AgentExit::Failed {
                reason: "the CLI ended without a result line (killed or crashed)".to_owned(),
                kind: FailureKind::Attempt,
            },
        }
    }
}

/// A failed run: why, and the raw fields it was classified from.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Failure {
    /// The classification.
    pub cause: FailureCause,
    /// `result.subtype` (`error_max_turns`, `error_during_execution`, even `success`).
    pub subtype: Option<String>,
    /// `result.terminal_reason` (`max_turns`, `api_error`, `aborted_tools`, …).
    pub terminal_reason: Option<String>,
    /// `result.api_error_status`, when it is a number.
    pub api_error_status: Option<u16>,
    /// The error text: `result.result` of an API error, or `result.errors` joined; at most
    /// [`MAX_MESSAGE`](Self::MAX_MESSAGE) bytes.
    pub message: Option<String>,
}

impl Failure {
    /// The longest [`message`](Self::message) kept, in bytes.
    pub const MAX_MESSAGE: usize = 2048;
}

impl fmt::Display for Failure {
    /// `<cause> (<terminal_reason>): <message>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.cause)?;
        if let Some(status) = self.api_error_status {
            write!(f, " (HTTP {status})")?;
        } else if let Some(reason) = self.terminal_reason.as_deref().or(self.subtype.as_deref()) {
            write!(f, " ({reason})")?;
        }
        match &self.message {
            Some(message) => write!(f, ": {message}"),
            None => Ok(()),
        }
    }
}

/// Why a run failed, from `terminal_reason` first, then `api_error_status`, then the error
/// class of the CLI's synthetic API-error message.
///
/// | `terminal_reason` | `api_error_status` | cause |
/// |---|---|---|
/// | `max_turns` (or subtype `error_max_turns`) | | [`MaxTurns`](Self::MaxTurns) |
/// | `budget_exhausted` (or subtype `error_max_budget_usd`) | | [`BudgetExhausted`](Self::BudgetExhausted) |
/// | `prompt_too_long` | | [`PromptTooLong`](Self::PromptTooLong) |
/// | `aborted_streaming`, `aborted_tools` | | [`Interrupted`](Self::Interrupted) |
/// | any other | 401, 403 | [`Authentication`](Self::Authentication) |
/// | | 429 | [`RateLimited`](Self::RateLimited) |
/// | | 500–599 (529 included) | [`ServerError`](Self::ServerError) |
/// | | other 4xx | [`Rejected`](Self::Rejected) |
/// | | null, or absent with `api_error` | by the error class: `authentication_failed` → [`Authentication`](Self::Authentication), `rate_limit` → [`RateLimited`](Self::RateLimited), else [`Network`](Self::Network) |
/// | | anything else | [`Unknown`](Self::Unknown) |
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureCause {
    /// `--max-turns` was reached.
    MaxTurns,
    /// `--max-budget-usd` was reached.
    BudgetExhausted,
    /// The prompt did not fit the context window.
    PromptTooLong,
    /// The CLI got SIGINT (during an API call or a tool): exit 0, but failed.
    Interrupted,
    /// The API refused the credentials.
    Authentication,
    /// The API rate-limited every retry.
    RateLimited,
    /// The API failed on its side (5xx, 529 overloaded) after the CLI's retries.
    ServerError,
    /// The API could not be reached (connection refused, timeout).
    Network,
    /// The API rejected the request (a 4xx other than 401, 403, 429).
    Rejected,
    /// A failure this parser does not know.
    Unknown,
}

impl FailureCause {
    /// How the engine should treat a failure of this cause.
    ///
    /// [`Authentication`](Self::Authentication) is fatal; [`BudgetExhausted`](Self::BudgetExhausted)
    /// ends the attempt without an ordinary retry ([`FailureKind::RunBudget`]); [`RateLimited`](Self::RateLimited),
    /// [`ServerError`](Self::ServerError) and [`Network`](Self::Network) pass; every other
    /// cause counts as a failed attempt.
    pub fn kind(self) -> FailureKind {
        match self {
            FailureCause::Authentication => FailureKind::Fatal,
            FailureCause::BudgetExhausted => FailureKind::RunBudget,
            FailureCause::RateLimited | FailureCause::ServerError | FailureCause::Network => {
                FailureKind::Transient
            }
            _ => FailureKind::Attempt,
        }
    }
}

impl fmt::Display for FailureCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailureCause::MaxTurns => "max turns reached",
            FailureCause::BudgetExhausted => "budget exhausted",
            FailureCause::PromptTooLong => "prompt too long",
            FailureCause::Interrupted => "interrupted",
            FailureCause::Authentication => "authentication failed",
            FailureCause::RateLimited => "rate limited",
            FailureCause::ServerError => "API server error",
            FailureCause::Network => "API unreachable",
            FailureCause::Rejected => "API rejected the request",
            FailureCause::Unknown => "failed",
        })
    }
}

/// Classifies a failed result; see [`FailureCause`] for the table.
pub(super) fn classify(
    terminal_reason: Option<&str>,
    subtype: Option<&str>,
    status: ApiStatus,
    error_class: Option<&str>,
) -> FailureCause {
    let by_reason = match terminal_reason.or(subtype) {
        Some("max_turns" | "error_max_turns") => Some(FailureCause::MaxTurns),
        Some("budget_exhausted" | "error_max_budget_usd") => Some(FailureCause::BudgetExhausted),
        Some("prompt_too_long") => Some(FailureCause::PromptTooLong),
        Some("aborted_streaming" | "aborted_tools") => Some(FailureCause::Interrupted),
        _ => None,
    };
    by_reason.unwrap_or_else(|| match status {
        ApiStatus::Code(401 | 403) => FailureCause::Authentication,
        ApiStatus::Code(429) => FailureCause::RateLimited,
        ApiStatus::Code(500..=599) => FailureCause::ServerError,
        ApiStatus::Code(400..=499) => FailureCause::Rejected,
        ApiStatus::Null => by_error_class(error_class),
        ApiStatus::Absent if terminal_reason == Some("api_error") => by_error_class(error_class),
        _ => FailureCause::Unknown,
    })
}

/// A failure without an HTTP status, by the CLI's error class.
fn by_error_class(class: Option<&str>) -> FailureCause {
    match class {
        Some("authentication_failed") => FailureCause::Authentication,
        Some("rate_limit") => FailureCause::RateLimited,
        _ => FailureCause::Network,
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use rstest::rstest;

    use super::*;

    #[rstest]
    #[case::max_turns(
        Some("max_turns"),
        Some("error_max_turns"),
        ApiStatus::Absent,
        None,
        FailureCause::MaxTurns
    )]
    #[case::max_turns_by_subtype(
        None,
        Some("error_max_turns"),
        ApiStatus::Absent,
        None,
        FailureCause::MaxTurns
    )]
    #[case::budget(
        Some("budget_exhausted"),
        None,
        ApiStatus::Absent,
        None,
        FailureCause::BudgetExhausted
    )]
    #[case::budget_by_subtype(
        None,
        Some("error_max_budget_usd"),
        ApiStatus::Absent,
        None,
        FailureCause::BudgetExhausted
    )]
    #[case::prompt_too_long(
        Some("prompt_too_long"),
        Some("success"),
        ApiStatus::Code(400),
        None,
        FailureCause::PromptTooLong
    )]
    #[case::sigint_streaming(
        Some("aborted_streaming"),
        None,
        ApiStatus::Absent,
        None,
        FailureCause::Interrupted
    )]
    #[case::sigint_tools(
        Some("aborted_tools"),
        None,
        ApiStatus::Absent,
        None,
        FailureCause::Interrupted
    )]
    #[case::unauthorized(
        Some("api_error"),
        Some("success"),
        ApiStatus::Code(401),
        None,
        FailureCause::Authentication
    )]
    #[case::forbidden(
        Some("api_error"),
        None,
        ApiStatus::Code(403),
        None,
        FailureCause::Authentication
    )]
    #[case::rate_limited(
        Some("api_error"),
        None,
        ApiStatus::Code(429),
        None,
        FailureCause::RateLimited
    )]
    #[case::server(
        Some("api_error"),
        None,
        ApiStatus::Code(500),
        None,
        FailureCause::ServerError
    )]
    #[case::overloaded(
        Some("api_error"),
        None,
        ApiStatus::Code(529),
        None,
        FailureCause::ServerError
    )]
    #[case::bad_request(
        Some("api_error"),
        None,
        ApiStatus::Code(400),
        None,
        FailureCause::Rejected
    )]
    #[case::not_found(
        Some("api_error"),
        None,
        ApiStatus::Code(404),
        None,
        FailureCause::Rejected
    )]
    #[case::network(Some("api_error"), None, ApiStatus::Null, None, FailureCause::Network)]
    #[case::null_but_auth_class(
        Some("api_error"),
        None,
        ApiStatus::Null,
        Some("authentication_failed"),
        FailureCause::Authentication
    )]
    #[case::null_but_rate_class(
        Some("api_error"),
        None,
        ApiStatus::Null,
        Some("rate_limit"),
        FailureCause::RateLimited
    )]
    #[case::absent_status_api_error(
        Some("api_error"),
        None,
        ApiStatus::Absent,
        None,
        FailureCause::Network
    )]
    #[case::odd_status(
        Some("api_error"),
        None,
        ApiStatus::Code(302),
        None,
        FailureCause::Unknown
    )]
    #[case::drifted_status(Some("api_error"), None, ApiStatus::Other, None, FailureCause::Unknown)]
    #[case::during_execution(
        None,
        Some("error_during_execution"),
        ApiStatus::Absent,
        None,
        FailureCause::Unknown
    )]
    #[case::nothing(None, None, ApiStatus::Absent, None, FailureCause::Unknown)]
    fn classifies(
        #[case] reason: Option<&str>,
        #[case] subtype: Option<&str>,
        #[case] status: ApiStatus,
        #[case] class: Option<&str>,
        #[case] expected: FailureCause,
    ) {
        assert_eq!(classify(reason, subtype, status, class), expected);
    }

    fn failed(cause: FailureCause) -> RunOutcome {
        RunOutcome::Failed(Failure {
            cause,
            subtype: Some("success".to_owned()),
            terminal_reason: Some("api_error".to_owned()),
            api_error_status: None,
            message: Some("API Error".to_owned()),
        })
    }

    fn kind(exit: &AgentExit) -> Option<FailureKind> {
        match exit {
            AgentExit::Failed { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    #[test]
    fn maps_outcomes_to_exits() {
        use FailureCause::*;
        assert_eq!(RunOutcome::Completed.agent_exit(None), AgentExit::Completed);
        assert_eq!(
            kind(&RunOutcome::NoResult.agent_exit(None)),
            Some(FailureKind::Attempt)
        );
        assert_eq!(
            failed(PromptTooLong).agent_exit(None),
            AgentExit::ContextLimit
        );
        for (cause, expected) in [
            (MaxTurns, FailureKind::Attempt),
            (BudgetExhausted, FailureKind::RunBudget),
            (Interrupted, FailureKind::Attempt),
            (Authentication, FailureKind::Fatal),
            (RateLimited, FailureKind::Transient),
            (ServerError, FailureKind::Transient),
            (Network, FailureKind::Transient),
            (Rejected, FailureKind::Attempt),
            (Unknown, FailureKind::Attempt),
        ] {
            assert_eq!(
                kind(&failed(cause).agent_exit(None)),
                Some(expected),
                "{cause:?}"
            );
        }
    }

    #[test]
    fn a_rejected_rate_limit_wins_unless_authentication_failed() {
        let until = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let limited = AgentExit::RateLimited { until };
        assert_eq!(
            failed(FailureCause::RateLimited).agent_exit(Some(until)),
            limited
        );
        assert_eq!(
            failed(FailureCause::Unknown).agent_exit(Some(until)),
            limited
        );
        assert_eq!(RunOutcome::NoResult.agent_exit(Some(until)), limited);
        assert_eq!(
            RunOutcome::Completed.agent_exit(Some(until)),
            AgentExit::Completed
        );
        let auth = failed(FailureCause::Authentication).agent_exit(Some(until));
        assert_eq!(kind(&auth), Some(FailureKind::Fatal));
    }

    #[test]
    fn the_reason_names_cause_status_and_message() {
        let failure = Failure {
            cause: FailureCause::ServerError,
            subtype: Some("success".to_owned()),
            terminal_reason: Some("api_error".to_owned()),
            api_error_status: Some(529),
            message: Some("API Error: 529 overloaded".to_owned()),
        };
        assert_eq!(
            failure.to_string(),
            "API server error (HTTP 529): API Error: 529 overloaded"
        );
        let turns = Failure {
            cause: FailureCause::MaxTurns,
            subtype: Some("error_max_turns".to_owned()),
            terminal_reason: Some("max_turns".to_owned()),
            api_error_status: None,
            message: None,
        };
        assert_eq!(turns.to_string(), "max turns reached (max_turns)");
    }
}
