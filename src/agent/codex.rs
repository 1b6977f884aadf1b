//! `CodexCli`: the OpenAI Codex CLI as an agent.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::command::{CommandAgent, Ending, Raw};
use super::{Agent, AgentError, AgentEvent, AgentExit, AgentRequest, AgentRun, FailureKind, Usage};
use crate::config::Config;

/// How much of the CLI's event lines is kept in memory: the last bytes, which hold the
/// final answer unless it alone is larger (then the run fails, saying so; the log has it).
pub const CODEX_KEPT: usize = 16 * 1024 * 1024;

/// How long a usage limit is waited out when the CLI names no reset time.
pub const UNKNOWN_RESET: Duration = Duration::from_secs(15 * 60);

/// `[codex]` of `ralph.toml`: how [`CodexCli`] runs the Codex CLI.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct CodexConfig {
    /// The program. Default `codex` (looked up on `PATH`).
    pub bin: PathBuf,
    /// `--model`. Default: the CLI's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// More arguments, before the prompt (`-c key=value` overrides of the CLI's config).
    pub args: Vec<String>,
    /// Environment variables for the CLI.
    pub env: BTreeMap<String, String>,
    /// Longest silence on the CLI's output before the run is cut as timed out. Default 5m.
    #[serde(with = "crate::config::duration")]
    pub idle_timeout: Duration,
}

impl Default for CodexConfig {
    fn default() -> Self {
        CodexConfig {
            bin: PathBuf::from("codex"),
            model: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            idle_timeout: Duration::from_secs(300),
        }
    }
}

/// [`CodexCli`]: the OpenAI Codex CLI (`codex exec --json`), one fresh process per run.
///
/// The prompt goes to stdin (`-`), which survives prompts of any size. The CLI prints one
/// JSON event per line; ralph keeps the last [`CODEX_KEPT`] bytes of them (the log has all)
/// and reads:
///
/// | event | becomes |
/// |---|---|
/// | `thread.started` | [`AgentRun::session_id`] |
/// | `item.completed` of an `agent_message` | the final answer: the last one |
/// | `item.completed` of a `command_execution` | an [`AgentEvent::ToolUse`] |
/// | `turn.completed` | [`AgentRun::usage`] |
/// | `turn.failed`, `error` | the failure: a usage limit is [`AgentExit::RateLimited`] until the time the CLI names; a 401, 403 or missing key is fatal; high demand, a 5xx or a dropped stream is transient; anything else a failed attempt |
///
/// Roles that may not write run in the CLI's `read-only` sandbox, BUILD in
/// `workspace-write`; structured roles pass their schema with `--output-schema`. The run is
/// supervised as every process agent's is (see [`CommandAgent`](super::CommandAgent)): its
/// own process group, the agent and idle timeouts, SIGTERM then SIGKILL, and a sweep of
/// what its tools left running.
///
/// In `ralph.toml` (every key optional):
///
/// ```toml
/// [codex]
/// bin = "codex"
/// model = "gpt-5-codex"
/// args = ["-c", "model_reasoning_effort=\"high\""]
/// env = { CODEX_HOME = "/home/me/.codex" }
/// idle_timeout = "5m"
/// ```
///
/// ```no_run
/// use ralph::agent::{Agent, AgentRequest, CodexCli, Role};
///
/// # async fn demo() -> Result<(), ralph::AgentError> {
/// let codex = CodexCli::new().model("gpt-5-codex");
/// let run = codex.run(AgentRequest::new(Role::Build, "Write hello.txt", ".")).await?;
/// println!("{}", run.final_text);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct CodexCli {
    config: CodexConfig,
    grace: Duration,
    /// Set in code: the workspace's `[codex]` does not replace it.
    explicit: bool,
}

impl Default for CodexCli {
    fn default() -> Self {
        Self::new()
    }
}

impl CodexCli {
    /// The CLI with the default [`CodexConfig`].
    pub fn new() -> Self {
        CodexCli {
            config: CodexConfig::default(),
            grace: Config::default().grace,
            explicit: false,
        }
    }

    /// The CLI as `[codex]` and `grace` of `config` say.
    pub fn from_config(config: &Config) -> Self {
        CodexCli {
            config: config.codex.clone(),
            grace: config.grace,
            explicit: false,
        }
    }

    /// The program to run.
    #[must_use]
    pub fn bin(mut self, bin: impl Into<PathBuf>) -> Self {
        self.config.bin = bin.into();
        self.explicit = true;
        self
    }

    /// `--model`.
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

    /// Longest silence on the CLI's output.
    #[must_use]
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.config.idle_timeout = idle;
        self.explicit = true;
        self
    }

    /// The argv of a run for `request`, with its schema file when it has one.
    fn argv(&self, request: &AgentRequest, schema: Option<&std::path::Path>) -> Vec<String> {
        let sandbox = if request.role.may_write() {
            "workspace-write"
        } else {
            "read-only"
        };
        let mut argv: Vec<String> = [
            self.config.bin.display().to_string().as_str(),
            "exec",
            "--json",
            "--color",
            "never",
            "--skip-git-repo-check",
            "--ephemeral",
            "--sandbox",
            sandbox,
            "--cd",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        argv.push(request.workspace.display().to_string());
        if let Some(model) = &self.config.model {
            argv.extend(["--model".to_owned(), model.clone()]);
        }
        if let Some(schema) = schema {
            argv.extend(["--output-schema".to_owned(), schema.display().to_string()]);
        }
        argv.extend(self.config.args.iter().cloned());
        argv.push("-".to_owned());
        argv
    }

    /// The supervisor of one run: the CLI's environment, idle timeout and grace.
    fn supervisor(&self) -> CommandAgent {
        self.config
            .env
            .iter()
            .fold(CommandAgent::new("codex", ["codex"]), |agent, (k, v)| {
                agent.env(k, v)
            })
            .idle_timeout(self.config.idle_timeout)
            .grace(self.grace)
            .keep(CODEX_KEPT)
    }
}

#[async_trait::async_trait]
impl Agent for CodexCli {
    fn name(&self) -> &str {
        "codex"
    }

    async fn run(&self, request: AgentRequest) -> Result<AgentRun, AgentError> {
        if request.stop.is_cancelled() {
            return Ok(AgentRun::new(AgentExit::Stopped));
        }
        let schema_file = match &request.schema {
            Some(schema) => Some(write_schema(&request, schema).await?),
            None => None,
        };
        let argv = self.argv(&request, schema_file.as_ref().map(|(p, _)| p.as_path()));
        let ran = self.supervisor().supervise(&request, &argv, true).await;
        if let Some((path, true)) = &schema_file {
            let _ = tokio::fs::remove_file(path).await;
        }
        let raw = ran?;
        let events = Events::read(&raw.stdout, &request);
        Ok(raw.finish(judge(&raw, events, &request), &request))
    }

    async fn check(&self) -> Result<(), AgentError> {
        CommandAgent::new("codex", [self.config.bin.display().to_string()])
            .check()
            .await
    }

    fn configure(&mut self, config: &Config) {
        self.grace = config.grace;
        if !self.explicit {
            self.config = config.codex.clone();
        }
    }
}

/// Writes the schema beside the log (else to the temp folder: then the flag is true, and
/// the file is removed after the run).
async fn write_schema(
    request: &AgentRequest,
    schema: &Value,
) -> Result<(PathBuf, bool), AgentError> {
    let (path, temporary) = match &request.log_path {
        Some(log) => (log.with_extension("schema.json"), false),
        None => (
            std::env::temp_dir().join(format!(
                "ralph-codex-schema-{}-{}.json",
                std::process::id(),
                SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos())
            )),
            true,
        ),
    };
    let io = |source| AgentError::Io {
        path: path.clone(),
        source,
    };
    if let Some(dir) = path.parent() {
        tokio::fs::create_dir_all(dir).await.map_err(io)?;
    }
    tokio::fs::write(&path, schema.to_string())
        .await
        .map_err(io)?;
    Ok((path, temporary))
}

/// What the CLI's event lines said.
#[derive(Debug, Default)]
struct Events {
    session: Option<String>,
    answer: Option<String>,
    usage: Usage,
    failure: Option<String>,
}

impl Events {
    /// Reads the kept tail of stdout: the first line may be cut, so lines that do not parse
    /// are skipped.
    fn read(stdout: &str, request: &AgentRequest) -> Self {
        let mut events = Events::default();
        for line in stdout.lines() {
            let Ok(event) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            events.take(&event, request);
        }
        events
    }

    fn take(&mut self, event: &Value, request: &AgentRequest) {
        let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
        match event.get("type").and_then(Value::as_str).unwrap_or("") {
            "thread.started" => self.session = text(event, "thread_id"),
            "item.completed" => {
                let Some(item) = event.get("item") else {
                    return;
                };
                match item.get("type").and_then(Value::as_str).unwrap_or("") {
                    "agent_message" => self.answer = text(item, "text"),
                    "command_execution" => request.events.emit(AgentEvent::ToolUse {
                        name: "exec_command".into(),
                    }),
                    _ => {}
                }
            }
            "turn.started" => self.failure = None,
            "turn.completed" => {
                let Some(u) = event.get("usage") else { return };
                let n = |key: &str| u.get(key).and_then(Value::as_u64).unwrap_or(0);
                self.usage.input_tokens += n("input_tokens");
                self.usage.output_tokens += n("output_tokens");
                self.usage.cache_read_tokens += n("cached_input_tokens");
                self.usage.cache_creation_tokens += n("cache_write_input_tokens");
            }
            "turn.failed" => {
                self.failure = event
                    .get("error")
                    .and_then(|e| text(e, "message"))
                    .or_else(|| Some("the turn failed".into()));
            }
            "error" if self.failure.is_none() => self.failure = text(event, "message"),
            _ => {}
        }
    }
}

/// The run from how the process ended and what its events said.
fn judge(raw: &Raw, events: Events, request: &AgentRequest) -> AgentRun {
    let mut run = match raw.ending {
        Ending::Stopped => AgentRun::new(AgentExit::Stopped),
        Ending::TimedOut => AgentRun::new(AgentExit::TimedOut),
        Ending::Exited => match (&events.failure, &events.answer) {
            (Some(failure), _) => AgentRun::new(classify(failure)),
            (None, Some(answer)) if raw.exit.is_some_and(crate::process::Exit::success) => {
                let mut run = AgentRun::completed(answer.clone());
                if request.role.is_structured() {
                    run.structured = serde_json::from_str(answer.trim()).ok();
                }
                run
            }
            _ => {
                let detail = if raw.stderr.trim().is_empty() {
                    format!(
                        "no answer in the last {} MiB of its output (the log has all of it)",
                        CODEX_KEPT >> 20
                    )
                } else {
                    raw.stderr.trim().to_owned()
                };
                AgentRun::new(AgentExit::Failed {
                    reason: format!("codex {}: {detail}", raw.how()),
                    kind: FailureKind::Attempt,
                })
            }
        },
    };
    run.session_id = events.session;
    run.usage = events.usage;
    run
}

/// What a failure message of the CLI means for the task.
fn classify(message: &str) -> AgentExit {
    let lower = message.to_lowercase();
    if lower.contains("usage limit") || lower.contains("rate limit") {
        let until = reset_time(message).unwrap_or_else(|| SystemTime::now() + UNKNOWN_RESET);
        return AgentExit::RateLimited { until };
    }
    let kind = if [
        "401",
        "403",
        "unauthorized",
        "forbidden",
        "missing environment variable",
        "api key",
    ]
    .iter()
    .any(|s| lower.contains(s))
    {
        FailureKind::Fatal
    } else if [
        "high demand",
        "temporar",
        "stream disconnected",
        "status 5",
        "overloaded",
        "timed out",
    ]
    .iter()
    .any(|s| lower.contains(s))
    {
        FailureKind::Transient
    } else {
        FailureKind::Attempt
    };
    AgentExit::Failed {
        reason: format!("codex: {message}"),
        kind,
    }
}

/// The reset time in "… try again at 4:25 AM.": the next such local time.
fn reset_time(message: &str) -> Option<SystemTime> {
    let at = message
        .rsplit("try again at ")
        .next()
        .filter(|_| message.contains("try again at "))?;
    let mut words = at.split_whitespace();
    let clock = words.next()?;
    let half = words.next()?.trim_end_matches('.');
    let (h, m) = clock.split_once(':')?;
    let (mut hour, minute): (i8, i8) = (h.parse().ok()?, m.parse().ok()?);
    match half.to_ascii_uppercase().as_str() {
        "AM" if hour == 12 => hour = 0,
        "AM" => {}
        "PM" if hour < 12 => hour += 12,
        "PM" => {}
        _ => return None,
    }
    let now = jiff::Zoned::now();
    let mut at = now
        .with()
        .hour(hour)
        .minute(minute)
        .second(0)
        .subsec_nanosecond(0)
        .build()
        .ok()?;
    if at <= now {
        at = at.checked_add(jiff::Span::new().days(1)).ok()?;
    }
    Some(SystemTime::from(at.timestamp()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_classified_by_what_they_mean_for_the_task() {
        let kind = |m: &str| match classify(m) {
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
        assert_eq!(kind("something else"), Some(FailureKind::Attempt));
        assert!(matches!(
            classify("You’ve hit your usage limit. … try again at 4:25 AM."),
            AgentExit::RateLimited { .. }
        ));
    }

    #[test]
    fn the_reset_time_is_the_next_such_local_time() {
        let until = reset_time("You’ve hit your usage limit. Upgrade … or try again at 4:25 PM.")
            .expect("a time");
        let left = until
            .duration_since(SystemTime::now())
            .expect("in the future");
        assert!(left <= Duration::from_secs(24 * 3600), "{left:?}");
        let zoned = jiff::Timestamp::try_from(until)
            .expect("a timestamp")
            .to_zoned(jiff::tz::TimeZone::system());
        assert_eq!((zoned.hour(), zoned.minute()), (16, 25));
        assert_eq!(reset_time("try again later."), None);
    }
}
