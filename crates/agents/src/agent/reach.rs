//! Whether an agent can reach its API: what each line of a CLI's output says about it
//! ([`ApiSign`]), and the clock that ends a run that only prints connection errors
//! ([`Reach`]).
//!
//! Each CLI agent's line parser says which of its lines show the API answering (the model's
//! output, a completed turn, an HTTP error such as a 5xx or a 429 the CLI waits out) and
//! which show it out of reach (connection refused, no network, a stream that broke off). An
//! agent is *unreachable* when, from its first connection error on, no line shows the API
//! answering for [`AgentRequest::unreachable_after`](crate::agent::AgentRequest::unreachable_after):
//! the supervisor's listener clock then ends the run as
//! [`FailureKind::Unreachable`](crate::agent::FailureKind::Unreachable), naming the agent
//! and its last error. A wait announced for a rate limit is the API answering, never a
//! connection error.

use std::time::Duration;

use tokio::time::Instant;

use super::{AgentEvent, AgentEvents, AgentExit, FailureKind};

/// What one line of an agent's output says about its API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ApiSign {
    /// The API answered: the model's output, a completed turn.
    Answered,
    /// The API answered with an error the CLI retries or waits out (a 5xx, a 429 with its
    /// retry-after, a usage limit): the line, shown live.
    Error(String),
    /// The API could not be reached (connection refused, no network, a dropped stream): the
    /// line, shown live.
    Unreached(String),
}

impl ApiSign {
    /// An error message the CLI printed: [`Unreached`](Self::Unreached) when it says the
    /// connection failed (and no rate limit), else [`Error`](Self::Error).
    pub(crate) fn of_error(message: &str) -> ApiSign {
        let line = one_line(message);
        if is_connection_error(&line) {
            ApiSign::Unreached(line)
        } else {
            ApiSign::Error(line)
        }
    }
}

/// Whether an error message says the API could not be reached: the connection failed,
/// was refused or timed out, there is no network, or the stream broke off. A message that
/// names a rate or usage limit is the API answering, whatever else it says.
pub fn is_connection_error(message: &str) -> bool {
    let lower = message.to_lowercase();
    let any = |words: &[&str]| words.iter().any(|w| lower.contains(w));
    if any(&[
        "rate limit",
        "usage limit",
        "quota",
        "resource_exhausted",
        "too many requests",
    ]) || has_code(&lower, "429")
    {
        return false;
    }
    any(&[
        "waiting for network",
        "cannot connect",
        "unable to connect",
        "could not connect",
        "failed to connect",
        "connection failed",
        "connection refused",
        "connection reset",
        "connection closed",
        "error sending request",
        "stream disconnected",
        "econnrefused",
        "econnreset",
        "enotfound",
        "eai_again",
        "etimedout",
        "fetch failed",
        "network error",
        "dns error",
        "timed out",
    ])
}

/// Whether the status `code` stands in `text` on its own, not inside a longer number or
/// word: the URL in `… 401 Unauthorized: url: http://127.0.0.1:42913/v1/responses` names no
/// 429, nor does a request id that happens to hold those digits.
pub(crate) fn has_code(text: &str, code: &str) -> bool {
    text.match_indices(code).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + code.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric())
            && !after.is_some_and(|c| c.is_ascii_alphanumeric())
    })
}

/// The longest status line shown, in bytes.
const LINE_MAX: usize = 500;

/// `message` on one line, at most [`LINE_MAX`] bytes (cut at a character boundary).
fn one_line(message: &str) -> String {
    let line = message.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.len() <= LINE_MAX {
        return line;
    }
    let mut end = LINE_MAX;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &line[..end])
}

/// The unreachable clock of one run: when its connection errors began (since the API last
/// answered), and the last of them.
#[derive(Debug)]
pub(crate) struct Reach {
    agent: String,
    /// `None`: never unreachable.
    after: Option<Duration>,
    events: AgentEvents,
    /// The first connection error since the API last answered.
    since: Option<Instant>,
    last_error: Option<String>,
}

impl Reach {
    /// The clock of a run of `agent` that ends after `after` of connection errors only
    /// (`None`: never), showing each error line on `events` as an [`AgentEvent::Status`].
    pub(crate) fn new(agent: &str, after: Option<Duration>, events: AgentEvents) -> Self {
        Reach {
            agent: agent.to_owned(),
            after,
            events,
            since: None,
            last_error: None,
        }
    }

    /// Takes what a line said.
    pub(crate) fn heard(&mut self, sign: ApiSign) {
        match sign {
            ApiSign::Answered => self.since = None,
            ApiSign::Error(line) => {
                self.since = None;
                self.show(line);
            }
            ApiSign::Unreached(line) => {
                self.since.get_or_insert_with(Instant::now);
                self.last_error = Some(line.clone());
                self.show(line);
            }
        }
    }

    fn show(&self, line: String) {
        self.events.emit(AgentEvent::Status {
            agent: self.agent.clone(),
            line,
        });
    }

    /// When the run is cut as unreachable, unless the API answers first.
    pub(crate) fn cut_at(&self) -> Option<Instant> {
        self.since?.checked_add(self.after?)
    }

    /// Why a run cut as unreachable failed: the agent, how long, and its last error.
    pub(crate) fn reason(&self) -> String {
        let after = self.after.map_or_else(String::new, |d| {
            format!(" for {}", humantime::format_duration(d))
        });
        format!(
            "{} is unreachable: no successful API exchange{after}, only connection errors; the last: {}",
            self.agent,
            self.last_error.as_deref().unwrap_or("none")
        )
    }
}

/// The failure of a run cut as unreachable, for `reason`.
pub(crate) fn unreachable(reason: String) -> AgentExit {
    AgentExit::Failed {
        reason,
        kind: FailureKind::Unreachable,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[test]
    fn connection_errors_are_told_from_an_api_that_answers() {
        for reached in [
            "Reconnecting... 1/1 (exceeded retry limit, last status: 429 Too Many Requests)",
            "You’ve hit your usage limit. Try again at 6:22 AM.",
            "unexpected status 401 Unauthorized: bad key",
            "We’re currently experiencing high demand, which may cause temporary errors.",
            "Rate limit reached. Please try again in 20s (timed out waiting)",
        ] {
            assert!(!is_connection_error(reached), "{reached}");
        }
        for unreached in [
            "Reconnecting... waiting for network (Connection failed: error sending request)",
            "Reconnecting... 2/5 (stream disconnected before completion: error sending request for url (http://127.0.0.1:9/v1/responses))",
            "API Error: Connection refused — connect ECONNREFUSED 127.0.0.1:9",
            "TypeError: fetch failed",
            "getaddrinfo ENOTFOUND api.openai.com",
            // gemini 0.61.0 and opencode 1.18.33 against a closed port.
            "[API Error: exception TypeError: fetch failed sending request]",
            "Cannot connect to API: Unable to connect. Is the computer able to access the url?",
            // A port whose digits hold 429 is no rate limit.
            "Reconnecting... 1/5 (error sending request for url (http://127.0.0.1:42913/v1/responses))",
        ] {
            assert!(is_connection_error(unreached), "{unreached}");
        }
    }

    #[test]
    fn the_clock_runs_from_the_first_connection_error_until_the_api_answers() {
        let shown = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&shown);
        let events = AgentEvents::new(move |e| {
            if let AgentEvent::Status { agent, line } = e {
                sink.lock().unwrap().push(format!("{agent}: {line}"));
            }
        });
        let mut reach = Reach::new("codex", Some(Duration::from_secs(60)), events);
        assert_eq!(reach.cut_at(), None, "no error yet");

        reach.heard(ApiSign::of_error("Reconnecting... waiting for network (a)"));
        let first = reach.since.expect("started");
        assert_eq!(reach.cut_at(), Some(first + Duration::from_secs(60)));
        reach.heard(ApiSign::of_error(
            "Reconnecting... waiting for\nnetwork (b)",
        ));
        assert_eq!(
            reach.cut_at(),
            Some(first + Duration::from_secs(60)),
            "the first error starts it"
        );

        // A rate-limit wait is the API answering: the clock stops, and the line is shown.
        reach.heard(ApiSign::of_error(
            "Reconnecting... 1/5 (429 Too Many Requests)",
        ));
        assert_eq!(reach.cut_at(), None);
        reach.heard(ApiSign::of_error("stream disconnected before completion"));
        assert!(reach.cut_at().is_some());
        reach.heard(ApiSign::Answered);
        assert_eq!(reach.cut_at(), None);

        let AgentExit::Failed { reason, kind } = unreachable(reach.reason()) else {
            panic!("a failure")
        };
        assert_eq!(kind, FailureKind::Unreachable);
        assert_eq!(
            reason,
            "codex is unreachable: no successful API exchange for 1m, only connection errors; the last: stream disconnected before completion"
        );
        assert_eq!(
            *shown.lock().unwrap(),
            [
                "codex: Reconnecting... waiting for network (a)",
                "codex: Reconnecting... waiting for network (b)",
                "codex: Reconnecting... 1/5 (429 Too Many Requests)",
                "codex: stream disconnected before completion",
            ]
        );
    }

    #[test]
    fn without_a_time_an_agent_is_never_unreachable() {
        let mut reach = Reach::new("x", None, AgentEvents::none());
        reach.heard(ApiSign::of_error("connection refused"));
        assert_eq!(reach.cut_at(), None);
    }
}
