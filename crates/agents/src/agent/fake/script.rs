//! What a fake run does: [`Script`], its steps, and the entries of a script file that say
//! which requests a script answers.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::agent::{FailureKind, Role};

/// One thing a fake run does. Steps run in order; the run ends after the last one. Built
/// with [`Script`]'s methods, or read from a script file (one TOML table per step, named
/// as the method: `{ answer = "…" }`, `{ write = { path = "…", content = "…" } }`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub(super) enum Step {
    /// Sets the final answer's text (the last one wins).
    Answer(String),
    /// Sets the final answer's text to a question for a person: its last line
    /// `<TASK_QUESTION question="…">` (the question's quotes and `&` written as entities).
    Ask(String),
    /// Sets the structured answer (and, if no answer is set, the final text to its JSON).
    Json(serde_json::Value),
    /// Writes a file in the workspace (creating directories).
    Write {
        /// Path relative to the workspace.
        path: PathBuf,
        /// New contents.
        content: String,
    },
    /// Appends to a file in the workspace.
    Append {
        /// Path relative to the workspace.
        path: PathBuf,
        /// Text to append.
        content: String,
    },
    /// Removes a file in the workspace.
    Remove(PathBuf),
    /// Writes the prompt the run was given to a file in the workspace: what a test of the
    /// prompts reads.
    Prompt(PathBuf),
    /// Prints a line to the run's log, `times` times (for log-excerpt tests).
    Print {
        /// The line.
        line: String,
        /// How often. Default 1.
        #[serde(default = "one")]
        times: usize,
    },
    /// Waits until the run is stopped or times out.
    Hang {},
    /// Waits, unless the run is stopped or times out first.
    Delay(#[serde(with = "crate::config::duration")] Duration),
    /// Reports context usage; the run reacts as a real agent would (warn, compact, kill).
    Usage {
        /// Tokens in the context now.
        context: u64,
        /// The model's window.
        window: u64,
        /// Context after a compaction, if the run compacts; none means compaction fails.
        #[serde(default)]
        after_compaction: Option<u64>,
    },
    /// Adds to what the run spent, as an agent's usage report would: input and output
    /// tokens, and dollars.
    Spend {
        /// Input tokens.
        #[serde(default)]
        input_tokens: u64,
        /// Output tokens.
        #[serde(default)]
        output_tokens: u64,
        /// Dollars; none leaves the run's cost unreported (as an agent that reports none).
        #[serde(default)]
        cost_usd: Option<f64>,
    },
    /// Ends the run as failed.
    Fail {
        /// Why.
        reason: String,
        /// How the engine should treat it. Default `attempt`.
        #[serde(default = "attempt_kind")]
        kind: FailureKind,
    },
    /// Ends the run as rate limited for `secs` seconds.
    RateLimit {
        /// Seconds until the limit resets.
        secs: u64,
    },
}

fn one() -> usize {
    1
}

fn attempt_kind() -> FailureKind {
    FailureKind::Attempt
}

/// The steps of one fake run, in order; the run ends after the last one (completed, unless
/// a step ended it first). A run with no steps completes with an empty answer.
///
/// In a script file the steps are the `steps` of a `[[run]]` entry (see
/// [`FakeAgent`](crate::agent::FakeAgent)), one table each, named as the method:
///
/// | method | TOML step | what the run does |
/// |---|---|---|
/// | [`answer`](Self::answer) | `{ answer = "Done.\n<TASK_DONE>" }` | sets the final text (the last one wins) |
/// | [`json`](Self::json) | `{ json = { verdict = "accept", reason = "ok" } }` | sets the structured answer; also the final text when no `answer` is given |
/// | [`write`](Self::write) | `{ write = { path = "src/lib.rs", content = "…" } }` | writes a file (folders made), relative to the workspace |
/// | [`append`](Self::append) | `{ append = { path = "README.md", content = "…" } }` | appends to a file |
/// | [`remove`](Self::remove) | `{ remove = "old.txt" }` | removes a file |
/// | [`print`](Self::print) | `{ print = { line = "compiling", times = 3 } }` | prints a line to the run's log (`times` defaults to 1) |
/// | [`delay`](Self::delay) | `{ delay = "300ms" }` | waits (ended early by a stop or the timeout) |
/// | [`hang`](Self::hang) | `{ hang = {} }` | waits until stopped or timed out |
/// | [`usage`](Self::usage) | `{ usage = { context = 90, window = 100, after_compaction = 40 } }` | reports context usage: warn, compact (to `after_compaction`; without it the compaction fails) or a kill at the limit |
/// | [`spend`](Self::spend) | `{ spend = { input_tokens = 1000, output_tokens = 200, cost_usd = 0.40 } }` | adds to what the run spent (tokens, and dollars when `cost_usd` is given), as an agent's usage report; also for a run that then fails, hangs or is stopped |
/// | [`fail`](Self::fail), [`fail_with`](Self::fail_with) | `{ fail = { reason = "flaky", kind = "transient" } }` | ends the run as failed; `kind` is `attempt` (the default), `transient` or `fatal` ([`FailureKind`]) |
/// | [`rate_limit`](Self::rate_limit) | `{ rate_limit = { secs = 60 } }` | ends the run as rate limited for `secs` seconds |
///
/// A path that is absolute or goes up with `..` fails the run
/// ([`AgentError::OutsideWorkspace`](crate::agent::AgentError::OutsideWorkspace)). Durations are
/// written as in `ralph.toml` (`"300ms"`, `"2s"`).
///
/// ```
/// use ralph::agent::{FakeAgent, Script};
///
/// let build = Script::new()
///     .write("hello.txt", "hello\n")
///     .print("compiling…", 3)
///     .answer("Wrote hello.txt.\n<TASK_DONE>");
///
/// // The same steps in TOML.
/// let toml = r#"
/// [[run]]
/// steps = [
///   { write = { path = "hello.txt", content = "hello\n" } },
///   { print = { line = "compiling…", times = 3 } },
///   { answer = "Wrote hello.txt.\n<TASK_DONE>" },
/// ]
/// "#;
/// let agent = FakeAgent::from_toml(toml, "inline.toml").unwrap();
/// assert_eq!(agent.unconsumed(), ["any role (sequence)"]);
/// # let _ = build;
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Script {
    pub(super) steps: Vec<Step>,
}

impl Script {
    /// An empty script (the run completes with an empty answer).
    pub fn new() -> Self {
        Self::default()
    }

    fn step(mut self, step: Step) -> Self {
        self.steps.push(step);
        self
    }

    /// Sets the final answer's text (the last one wins).
    #[must_use]
    pub fn answer(self, text: impl Into<String>) -> Self {
        self.step(Step::Answer(text.into()))
    }

    /// Ends the run with a question for a person: the final answer's last line is
    /// `<TASK_QUESTION question="…">`. The task then waits for `ralph answer`; the next
    /// attempt's prompt holds the question and the answer.
    ///
    /// ```
    /// use ralph::agent::{Claim, Script};
    /// # let _ = Claim::Done;
    /// let script = Script::new().ask("Postgres or SQLite?");
    /// # drop(script);
    /// ```
    #[must_use]
    pub fn ask(self, question: impl Into<String>) -> Self {
        self.step(Step::Ask(question.into()))
    }

    /// Sets the structured answer (and, if no answer is set, the final text to its JSON).
    #[must_use]
    pub fn json(self, value: serde_json::Value) -> Self {
        self.step(Step::Json(value))
    }

    /// Writes a file in the workspace (creating folders); `path` is relative to it.
    #[must_use]
    pub fn write(self, path: impl Into<PathBuf>, content: impl Into<String>) -> Self {
        self.step(Step::Write {
            path: path.into(),
            content: content.into(),
        })
    }

    /// Appends to a file in the workspace.
    #[must_use]
    pub fn append(self, path: impl Into<PathBuf>, content: impl Into<String>) -> Self {
        self.step(Step::Append {
            path: path.into(),
            content: content.into(),
        })
    }

    /// Removes a file in the workspace.
    #[must_use]
    pub fn remove(self, path: impl Into<PathBuf>) -> Self {
        self.step(Step::Remove(path.into()))
    }

    /// Writes the prompt the run was given to `path` in the workspace, for a test to read.
    #[must_use]
    pub fn prompt(self, path: impl Into<PathBuf>) -> Self {
        self.step(Step::Prompt(path.into()))
    }

    /// Prints `line` to the run's log, `times` times.
    #[must_use]
    pub fn print(self, line: impl Into<String>, times: usize) -> Self {
        self.step(Step::Print {
            line: line.into(),
            times,
        })
    }

    /// Waits until the run is stopped or times out.
    #[must_use]
    pub fn hang(self) -> Self {
        self.step(Step::Hang {})
    }

    /// Waits, unless the run is stopped or times out first.
    #[must_use]
    pub fn delay(self, duration: Duration) -> Self {
        self.step(Step::Delay(duration))
    }

    /// Reports context usage (`context` tokens of a `window`); the run reacts as a real agent
    /// would: warns, compacts to `after_compaction` (none: the compaction fails), or is
    /// killed at the limit.
    #[must_use]
    pub fn usage(self, context: u64, window: u64, after_compaction: Option<u64>) -> Self {
        self.step(Step::Usage {
            context,
            window,
            after_compaction,
        })
    }

    /// Adds `input_tokens`, `output_tokens` and `cost_usd` dollars to what the run spent,
    /// as an agent's usage report would (a run that then fails, hangs or is stopped has
    /// spent them all the same).
    ///
    /// ```
    /// use ralph::agent::Script;
    ///
    /// let costly = Script::new()
    ///     .spend(1000, 200, Some(0.40))
    ///     .answer("Done.\n<TASK_DONE>");
    /// # let _ = costly;
    /// ```
    #[must_use]
    pub fn spend(self, input_tokens: u64, output_tokens: u64, cost_usd: Option<f64>) -> Self {
        self.step(Step::Spend {
            input_tokens,
            output_tokens,
            cost_usd,
        })
    }

    /// Ends the run as failed, counting as an attempt ([`FailureKind::Attempt`]).
    #[must_use]
    pub fn fail(self, reason: impl Into<String>) -> Self {
        self.step(Step::Fail {
            reason: reason.into(),
            kind: FailureKind::Attempt,
        })
    }

    /// Ends the run as failed, of the given kind.
    #[must_use]
    pub fn fail_with(self, reason: impl Into<String>, kind: FailureKind) -> Self {
        self.step(Step::Fail {
            reason: reason.into(),
            kind,
        })
    }

    /// Ends the run as rate limited for `secs` seconds.
    #[must_use]
    pub fn rate_limit(self, secs: u64) -> Self {
        self.step(Step::RateLimit { secs })
    }
}

/// A script, and which requests it answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Entry {
    #[serde(default)]
    pub(super) role: Option<Role>,
    #[serde(default)]
    pub(super) subject: Option<String>,
    #[serde(default)]
    pub(super) attempt: Option<u32>,
    #[serde(default)]
    pub(super) repeat: bool,
    #[serde(default)]
    pub(super) steps: Script,
    #[serde(skip)]
    pub(super) consumed: bool,
}

impl Entry {
    pub(super) fn matches(&self, role: Role, subject: Option<&str>, attempt: u32) -> bool {
        (self.repeat || !self.consumed)
            && self.role.is_none_or(|r| r == role)
            && self.subject.as_deref().is_none_or(|s| Some(s) == subject)
            && self.attempt.is_none_or(|a| a == attempt)
    }

    /// Higher is more specific; sequence entries (no role) are the least specific.
    pub(super) fn specificity(&self) -> u8 {
        u8::from(self.role.is_some())
            + 2 * u8::from(self.subject.is_some())
            + u8::from(self.attempt.is_some())
    }

    pub(super) fn describe(&self) -> String {
        let mut key = match self.role {
            Some(role) => role.to_string(),
            None => "any role (sequence)".to_owned(),
        };
        if let Some(subject) = &self.subject {
            key.push_str(&format!(" {subject}"));
        }
        if let Some(attempt) = self.attempt {
            key.push_str(&format!(" attempt {attempt}"));
        }
        if self.repeat {
            key.push_str(" (repeat)");
        }
        key
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ScriptFile {
    #[serde(default)]
    pub(super) run: Vec<Entry>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::FakeAgent;

    /// Each step's name in a script file. No wildcard: a new step must be named here, and
    /// then documented.
    fn name(step: &Step) -> &'static str {
        match step {
            Step::Answer(_) => "answer",
            Step::Ask(_) => "ask",
            Step::Json(_) => "json",
            Step::Write { .. } => "write",
            Step::Append { .. } => "append",
            Step::Remove(_) => "remove",
            Step::Prompt(_) => "prompt",
            Step::Print { .. } => "print",
            Step::Hang {} => "hang",
            Step::Delay(_) => "delay",
            Step::Usage { .. } => "usage",
            Step::Spend { .. } => "spend",
            Step::Fail { .. } => "fail",
            Step::RateLimit { .. } => "rate_limit",
        }
    }

    #[test]
    fn the_script_page_documents_every_step_and_key_and_its_examples_load() {
        let page = include_str!("../../../../../docs/fake-agent.md");
        let every = Script::new()
            .answer("a")
            .json(serde_json::json!({}))
            .write("p", "c")
            .append("p", "c")
            .remove("p")
            .prompt("p")
            .print("l", 1)
            .delay(Duration::ZERO)
            .spend(1, 2, Some(0.5))
            .hang()
            .usage(1, 2, None)
            .fail("r")
            .rate_limit(1);
        assert_eq!(every.steps.len(), 13, "one of each step");
        for step in &every.steps {
            let written = serde_json::to_value(step).unwrap();
            let key = written.as_object().unwrap().keys().next().unwrap().clone();
            assert_eq!(key, name(step), "the name a script file gives it");
            assert!(
                page.contains(&format!("| `{key}` |")),
                "step {key} is not in the page"
            );
        }
        let entry = Entry {
            role: Some(Role::Build),
            subject: Some("t-1".into()),
            attempt: Some(1),
            repeat: true,
            steps: every,
            consumed: false,
        };
        for key in serde_json::to_value(&entry)
            .unwrap()
            .as_object()
            .unwrap()
            .keys()
        {
            assert!(
                page.contains(&format!("| `{key}` |")),
                "key {key} is not in the page"
            );
        }
        for block in page.split("```toml\n").skip(1) {
            let text = &block[..block.find("```").unwrap()];
            FakeAgent::from_toml(text, "docs/fake-agent.md").unwrap();
        }
    }
}
