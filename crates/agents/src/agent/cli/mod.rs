//! The agents that run a CLI: [`CommandAgent`] (any program from an argv template) and the
//! vendors' CLIs on top of it, one file each. What the agents of other vendors' CLIs share ([`CodexCli`](crate::agent::CodexCli),
//! [`GeminiCli`](crate::agent::GeminiCli), [`OpencodeCli`](crate::agent::OpencodeCli)): their settings,
//! their builder, their supervision, how a run is judged on how it ended ([`LastWord`]) and
//! what a failure message means for the task.

use std::time::{Duration, SystemTime};

mod codex;
mod command;
mod gemini;
mod kept;
mod live;
mod opencode;
mod strict_schema;
mod usage;

pub use codex::CodexCli;
pub use command::ANSWER_KEPT;
pub use command::CommandAgent;
pub use gemini::GeminiCli;
pub use opencode::OpencodeCli;
pub use usage::USAGE_FILE_VAR;

use crate::agent::cli_files::Cli;
use crate::agent::reach::has_code;
use crate::agent::{Agent, AgentError, AgentExit, AgentRun, FailureKind};
use crate::config::CliConfig;
use command::Raw;

/// How long a usage limit is waited out when the CLI names no reset time.
pub(crate) const UNKNOWN_RESET: Duration = Duration::from_secs(15 * 60);

/// How much of a CLI's event lines is kept in memory: the last bytes, which hold the final
/// answer unless its line alone is larger. Such a line is never held: it is shrunk as it
/// streams by, each long string cut to its head and tail (64 KiB each) around a line
/// `[… N bytes omitted …]`, so the answer is still read, to the marker at its end (the log
/// has it all).
pub const EVENTS_KEPT: usize = 8 * 1024 * 1024;

/// What an agent of this module does with its `[codex]`, `[gemini]` or `[opencode]` table.
trait Settings {
    /// The program: `bin`, else `name`.
    fn program(&self, name: &str) -> String;
    /// Finds the program without running it.
    async fn check(&self, name: &str, help: &'static str) -> Result<(), AgentError>;
    /// The supervisor of one run.
    fn supervisor(&self, cli: Cli, grace: Duration) -> CommandAgent;
}

impl Settings for CliConfig {
    /// The program: `bin`, else `name`.
    fn program(&self, name: &str) -> String {
        self.bin
            .as_ref()
            .map_or_else(|| name.to_owned(), |b| b.display().to_string())
    }

    /// Finds the program without running it. Not found, the error names where its name came
    /// from (`codex.bin`, else `PATH`) and `help`, the documented ways to set it: the
    /// `[agent.NAME] command` of a command agent is not how a vendor's CLI is named.
    async fn check(&self, name: &str, help: &'static str) -> Result<(), AgentError> {
        let command = CommandAgent::new(name, [self.program(name)]);
        let found = Agent::check(&command).await;
        found.map_err(|e| match e {
            AgentError::NotFound { agent, program, .. } => AgentError::NotFound {
                agent,
                program,
                from: match self.bin {
                    Some(_) => format!("{name}.bin"),
                    None => "PATH".to_owned(),
                },
                help,
            },
            other => other,
        })
    }

    /// The supervisor of one run: the environment, the idle timeout and the grace, keeping
    /// [`EVENTS_KEPT`] of stdout.
    fn supervisor(&self, cli: Cli, grace: Duration) -> CommandAgent {
        let name = cli.name();
        self.env
            .iter()
            .fold(CommandAgent::new(name, [name]), |agent, (k, v)| {
                agent.env(k, v)
            })
            .idle_timeout(self.idle_timeout)
            .grace(grace)
            .keep_lines(EVENTS_KEPT)
            .cli_files(cli)
    }
}

/// The constructors and setters of a CLI agent with `config: CliConfig`, `grace` and
/// `explicit` fields, whose section of the config is `$field`.
macro_rules! cli_agent_settings {
    ($agent:ident, $field:ident) => {
        impl Default for $agent {
            fn default() -> Self {
                Self::new()
            }
        }

        impl $agent {
            #[doc = concat!("The CLI with the default settings; a `Ralph` it is given to gives it the workspace's `[", stringify!($field), "]` and `grace`, unless settings were made here.")]
            pub fn new() -> Self {
                $agent {
                    config: crate::config::CliConfig::default(),
                    grace: crate::config::Config::default().grace,
                    explicit: false,
                }
            }

            #[doc = concat!("The CLI as `[", stringify!($field), "]` and `grace` of `config` say.")]
            pub fn from_config(config: &crate::config::Config) -> Self {
                $agent {
                    config: config.$field.clone(),
                    grace: config.grace,
                    explicit: false,
                }
            }

            /// The program to run.
            #[must_use]
            pub fn bin(mut self, bin: impl Into<std::path::PathBuf>) -> Self {
                self.config.bin = Some(bin.into());
                self.explicit = true;
                self
            }

            /// The model.
            #[must_use]
            pub fn model(mut self, model: impl Into<String>) -> Self {
                self.config.model = Some(model.into());
                self.explicit = true;
                self
            }

            /// Appends an argument (before the prompt).
            #[must_use]
            pub fn arg(mut self, arg: impl Into<String>) -> Self {
                self.config.args.push(arg.into());
                self.explicit = true;
                self
            }

            /// Sets an environment variable for the CLI.
            #[must_use]
            pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
                self.config.env.insert(key.into(), value.into());
                self.explicit = true;
                self
            }

            /// Longest silence on the CLI's output before the run is cut as timed out.
            #[must_use]
            pub fn idle_timeout(mut self, idle: std::time::Duration) -> Self {
                self.config.idle_timeout = idle;
                self.explicit = true;
                self
            }

            /// Takes `grace`, and the config's section unless settings were made in code.
            fn take_config(&mut self, config: &crate::config::Config) {
                self.grace = config.grace;
                if !self.explicit {
                    self.config = config.$field.clone();
                }
            }
        }
    };
}

use cli_agent_settings;

/// The JSON event lines in the kept tail of a CLI's stdout, in order: the first line may
/// be cut, so a line that does not parse is skipped.
fn event_lines(stdout: &str) -> impl Iterator<Item = serde_json::Value> + '_ {
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
}

/// What a CLI's event lines in the kept tail of its stdout say, `take`n one by one into a
/// vendor's own record of them (see [`event_lines`]).
fn read_events<E: Default>(stdout: &str, take: impl Fn(&mut E, &serde_json::Value)) -> E {
    let mut events = E::default();
    for event in event_lines(stdout) {
        take(&mut events, &event);
    }
    events
}

/// How a CLI's run ended, by its last word. The CLIs retry a failed API call themselves, and
/// Codex prints the error it recovers from (`Reconnecting... 1/5 (…)`) before carrying on to
/// a complete answer: an error is the run's failure only when no turn completed with an
/// answer after it.
#[derive(Debug, Default)]
struct LastWord {
    /// The last error that no answered turn followed.
    failure: Option<String>,
}

impl LastWord {
    /// The CLI printed an error: a call it retries, or a turn that failed.
    fn error(&mut self, message: impl Into<String>) {
        self.failure = Some(message.into());
    }

    /// A turn completed. With an answer, what failed before it was recovered from; without
    /// one, that error still says why there is none.
    fn turn_completed(&mut self, answered: bool) {
        if answered {
            self.failure = None;
        }
    }

    /// The run: stopped, timed out or unreachable as the process was; else the failure, classified
    /// (`reset` reads a usage limit's reset time in it); else `answer` when the process
    /// exited 0; else no answer.
    fn judge(
        &self,
        agent: &str,
        raw: &Raw,
        answer: Option<String>,
        reset: fn(&str) -> Option<SystemTime>,
    ) -> AgentRun {
        match (&raw.cut, &self.failure, answer) {
            (Some(cut), ..) => AgentRun::new(cut.clone()),
            (None, Some(failure), _) => AgentRun::new(classify(agent, failure, reset(failure))),
            (None, None, Some(answer)) if raw.exit.is_some_and(crate::process::Exit::success) => {
                AgentRun::completed(answer)
            }
            (None, None, _) => AgentRun::new(no_answer(agent, raw)),
        }
    }
}

/// A run that exited without a failure in its events and without an answer: what stderr
/// says, else that the kept tail of stdout held none.
fn no_answer(agent: &str, raw: &Raw) -> AgentExit {
    let detail = if raw.stderr.trim().is_empty() {
        format!(
            "no answer in the last {} MiB of its output (the log has all of it)",
            EVENTS_KEPT >> 20
        )
    } else {
        raw.stderr.trim().to_owned()
    };
    AgentExit::Failed {
        reason: format!("{agent} {}: {detail}", raw.how()),
        kind: FailureKind::Attempt,
    }
}

/// What a CLI's failure message means for the task: a usage or rate limit rests the agent
/// until `reset` (or [`UNKNOWN_RESET`] from now); bad credentials are fatal; overload, a
/// 5xx, a dropped stream or a connection error (the runtime's unreachable clock counts
/// those) are transient; anything else is a failed attempt.
fn classify(agent: &str, message: &str, reset: Option<SystemTime>) -> AgentExit {
    let lower = message.to_lowercase();
    let any = |words: &[&str]| words.iter().any(|w| lower.contains(w));
    if any(&["usage limit", "rate limit", "resource_exhausted", "quota"]) || has_code(&lower, "429")
    {
        let until = reset.unwrap_or_else(|| SystemTime::now() + UNKNOWN_RESET);
        return AgentExit::RateLimited { until };
    }
    let kind = if has_code(&lower, "401")
        || has_code(&lower, "403")
        || any(&[
            "unauthorized",
            "forbidden",
            "permission_denied",
            "missing environment variable",
            "api key",
        ]) {
        FailureKind::Fatal
    } else if any(&[
        "high demand",
        "temporar",
        "stream disconnected",
        "status 5",
        "\"code\":5",
        "overloaded",
        "unavailable",
        "timed out",
    ]) || crate::agent::is_connection_error(message)
    {
        FailureKind::Transient
    } else {
        FailureKind::Attempt
    };
    AgentExit::Failed {
        reason: format!("{agent}: {message}"),
        kind,
    }
}

/// The checks every vendor CLI's recorded transcripts pass (`fixtures/<cli>/`), read as
/// the agent reads them.
#[cfg(test)]
mod recorded {
    use crate::agent::{AgentExit, AgentRun, Claim, FailureKind};

    /// `tool-flow-done`: a tool call, then the final answer claiming done, with a session
    /// and the tokens used.
    pub(in crate::agent) fn assert_done(done: &AgentRun) {
        assert_eq!(done.exit, AgentExit::Completed, "{done:?}");
        assert_eq!(done.final_text, "Wrote hello.txt.\n<TASK_DONE>");
        assert_eq!(done.claim(), Claim::Done);
        assert!(done.session_id.is_some());
        assert!(done.usage.input_tokens > 0 && done.usage.output_tokens > 0);
    }

    /// `marker-in-tool-output`: the marker came back from a tool; the answer after it does
    /// not claim done.
    pub(in crate::agent) fn assert_marker_in_tool_output_is_not_done(earlier: &AgentRun) {
        assert_eq!(earlier.final_text, "Still more to do.");
        assert_ne!(earlier.claim(), Claim::Done);
    }

    /// `read-only-structured`: a verifier's verdict, as the answer's text.
    pub(in crate::agent) fn assert_verdict_in_the_answer(judged: &AgentRun) {
        assert_eq!(judged.exit, AgentExit::Completed, "{judged:?}");
        assert!(
            judged.final_text.contains("\"verdict\":\"accept\""),
            "{judged:?}"
        );
    }

    /// An API error the CLI recovered from, then the final answer claiming done: a
    /// completed run, whatever the CLI printed of the error.
    pub(in crate::agent) fn assert_recovered(retried: &AgentRun) {
        assert_eq!(retried.exit, AgentExit::Completed, "{retried:?}");
        assert_eq!(retried.claim(), Claim::Done, "{retried:?}");
    }

    /// A usage limit or exhausted quota: the agent rests.
    pub(in crate::agent) fn assert_rate_limited(limited: &AgentRun) {
        assert!(
            matches!(limited.exit, AgentExit::RateLimited { .. }),
            "{limited:?}"
        );
    }

    /// `api-error-401`: bad credentials fail every run alike.
    pub(in crate::agent) fn assert_fatal(refused: &AgentRun) {
        assert!(
            matches!(
                refused.exit,
                AgentExit::Failed {
                    kind: FailureKind::Fatal,
                    ..
                }
            ),
            "{refused:?}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The run of an exited process whose events said `words`, in order (an error, or a turn
    /// completed with or without an answer), ending with `answer`.
    fn judged(words: &[Result<bool, &str>], answer: Option<&str>) -> AgentExit {
        let mut last = LastWord::default();
        for word in words {
            match word {
                Ok(answered) => last.turn_completed(*answered),
                Err(message) => last.error(*message),
            }
        }
        let raw = Raw::exited(0, "");
        last.judge("x", &raw, answer.map(str::to_owned), |_| None)
            .exit
    }

    #[test]
    fn the_last_word_decides_how_a_run_ended() {
        let retried = "Reconnecting... 1/5 (stream disconnected before completion)";
        assert_eq!(
            judged(&[Err(retried), Ok(true)], Some("Done.")),
            AgentExit::Completed
        );
        // The error is the last word: the turn did not complete after it.
        assert!(matches!(
            judged(&[Ok(true), Err(retried)], Some("Done.")),
            AgentExit::Failed {
                kind: FailureKind::Transient,
                ..
            }
        ));
        // A turn without an answer recovered nothing: the error says why there is none.
        assert!(matches!(
            judged(&[Err("Loop detected, stopping execution"), Ok(false)], None),
            AgentExit::Failed { reason, .. } if reason.contains("Loop detected")
        ));
        assert!(matches!(
            judged(
                &[Err(retried), Err("exceeded retry limit, last status: 429")],
                None
            ),
            AgentExit::RateLimited { .. }
        ));
    }

    #[test]
    fn failures_are_classified_by_what_they_mean_for_the_task() {
        let kind = |m: &str| match classify("x", m, None) {
            AgentExit::Failed { kind, .. } => Some(kind),
            _ => None,
        };
        assert_eq!(
            kind("unexpected status 401 Unauthorized: bad key"),
            Some(FailureKind::Fatal)
        );
        assert_eq!(
            kind("Missing environment variable: `OPENAI_API_KEY`."),
            Some(FailureKind::Fatal)
        );
        assert_eq!(
            kind("We’re currently experiencing high demand, which may cause temporary errors."),
            Some(FailureKind::Transient)
        );
        assert_eq!(
            kind(r#"[API Error: {"error":{"code":503,"message":"x","status":"UNAVAILABLE"}}]"#),
            Some(FailureKind::Transient)
        );
        assert_eq!(
            kind("[API Error: exception TypeError: fetch failed sending request]"),
            Some(FailureKind::Transient),
            "gemini 0.61.0 against a closed port"
        );
        assert_eq!(kind("something else"), Some(FailureKind::Attempt));
        // A status's digits inside a port or an id are not that status.
        assert_eq!(
            kind(
                "unexpected status 401 Unauthorized: scripted 401, url: http://127.0.0.1:42913/v1/responses"
            ),
            Some(FailureKind::Fatal)
        );
        assert_eq!(
            kind("stream disconnected, url: http://127.0.0.1:14013/v1/responses"),
            Some(FailureKind::Transient)
        );
        assert_eq!(
            kind("request id req_4017a failed"),
            Some(FailureKind::Attempt)
        );
        assert!(matches!(
            classify(
                "x",
                "exceeded retry limit, last status: 429 Too Many Requests",
                None
            ),
            AgentExit::RateLimited { .. }
        ));
        assert!(matches!(
            classify("x", "You’ve hit your usage limit.", None),
            AgentExit::RateLimited { .. }
        ));
    }
}
