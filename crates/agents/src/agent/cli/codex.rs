//! `CodexCli`: the OpenAI Codex CLI as an agent.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use super::Settings as _;
use super::command::Raw;
use super::live::{LiveMap, Meaning, message};
use super::{LastWord, cli_agent_settings, read_events};
use crate::agent::reach::ApiSign;
use crate::agent::{Agent, AgentError, AgentEvent, AgentExit, AgentRequest, AgentRun, Usage};
use crate::config::CliConfig;
use crate::config::Config;

/// [`CodexCli`]: the OpenAI Codex CLI (`codex exec --json`), one fresh process per run.
///
/// The prompt goes to stdin (`-`), which survives prompts of any size. The CLI prints one
/// JSON event per line; ralph keeps the last 8 MiB of
/// them, a longer line (a huge final answer) cut to the head and tail of its text (the log
/// has all), and reads:
///
/// | event | becomes |
/// |---|---|
/// | `thread.started` | [`AgentRun::session_id`], and at once an [`AgentEvent::Session`] |
/// | `item.completed` of an `agent_message` | the final answer: the last one; at once an [`AgentEvent::Text`] |
/// | `item.started` of a `command_execution` | at once an [`AgentEvent::ToolUse`] |
/// | `turn.completed` | [`AgentRun::usage`]; at once an [`AgentEvent::Usage`] with the run's tokens so far |
/// | `turn.failed`, `error` | the failure, unless the turn completes with an answer after it: a usage limit is [`AgentExit::RateLimited`] until the time the CLI names; a 401, 403 or missing key is fatal; high demand, a 5xx or a dropped stream is transient; anything else a failed attempt. Each `error` at once an [`AgentEvent::Status`] |
///
/// Without network the CLI waits for it, printing `Reconnecting... waiting for network
/// (Connection failed: …)` now and then, for ever: once it has printed only such connection
/// errors for [`AgentRequest::unreachable_after`] (no message, command or completed turn
/// in between), the run is stopped as [`FailureKind::Unreachable`](crate::agent::FailureKind::Unreachable),
/// naming its last error.
///
/// The run is judged on how it ended: the CLI prints an `error` also for a call it retries
/// (`Reconnecting... 1/5 (…)`, after a 429 it waits out or a stream that broke off), so a
/// turn that then completes with an answer is a completed run, and its marker decides. An
/// error that no such turn followed is the run's failure.
///
/// In ralph's sandbox every role runs with `--sandbox danger-full-access`: the CLI's own
/// sandbox (bubblewrap) cannot be made inside ralph's, which confines the run instead, a
/// read-only role's work tree read-only. Unconfined, roles that may not write run in the
/// CLI's `read-only` sandbox and BUILD in `workspace-write`. Structured roles pass their
/// schema with `--output-schema`. The run is
/// supervised as every process agent's is (see [`CommandAgent`](crate::agent::CommandAgent)): its
/// own process group, the agent and idle timeouts, SIGTERM then SIGKILL, and a sweep of
/// what its tools left running.
///
/// Its settings are `[codex]` in `ralph.toml`: `bin`, `model`, `args`, `env` and
/// `idle_timeout`, each also the builder method of the same name, which wins over it.
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
    config: CliConfig,
    grace: Duration,
    /// Set in code: the workspace's `[codex]` does not replace it.
    explicit: bool,
}

cli_agent_settings!(CodexCli, codex);

impl CodexCli {
    /// The argv of a run for `request`, with its schema file when it has one.
    fn argv(&self, request: &AgentRequest, schema: Option<&std::path::Path>) -> Vec<String> {
        // The CLI's own sandbox (bubblewrap, since 0.169) cannot be made inside ralph's:
        // there ralph's confines it, a read-only role's work tree read-only included.
        let sandbox = if request.sandbox.confines() {
            "danger-full-access"
        } else if request.role.may_write() {
            "workspace-write"
        } else {
            "read-only"
        };
        let mut argv: Vec<String> = [
            self.config.program("codex").as_str(),
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
}

#[async_trait::async_trait]
impl Agent for CodexCli {
    /// The CLI runs in its own process, in the request's sandbox.
    fn in_process(&self) -> bool {
        false
    }

    fn name(&self) -> &str {
        "codex"
    }

    async fn run(&self, request: AgentRequest) -> Result<AgentRun, AgentError> {
        if request.stop.is_stopped() {
            return Ok(AgentRun::new(AgentExit::Stopped));
        }
        let schema_file = match &request.schema {
            Some(schema) => Some(write_schema(&request, schema).await?),
            None => None,
        };
        let argv = self.argv(&request, schema_file.as_ref().map(|(p, _)| p.as_path()));
        let ran = self
            .config
            .supervisor(crate::agent::cli_files::Cli::Codex, self.grace)
            .live(LIVE)
            .supervise(
                &request,
                &argv,
                true,
                &schema_file
                    .iter()
                    .map(|(p, _)| p.as_path())
                    .collect::<Vec<_>>(),
                None,
            )
            .await;
        if let Some((path, true)) = &schema_file {
            let _ = tokio::fs::remove_file(path).await;
        }
        let raw = ran?;
        let events = read_events(&raw.stdout, CodexEvents::take);
        let mut run = raw.finish(judge(&raw, events, &request), &request);
        run.model = self.config.model.clone();
        Ok(run)
    }

    async fn check(&self) -> Result<(), AgentError> {
        let help =
            "install the Codex CLI, or name it in ralph.toml ([codex] bin) or RALPH_CODEX__BIN";
        self.config.check("codex", help).await
    }

    fn configure(&mut self, config: &Config) {
        self.take_config(config);
    }
}

/// Writes the schema beside the log (else to the temp folder: then the flag is true, and
/// the file is removed after the run).
// The schema handed to `codex --output-schema`: the CLI's input, not state.
#[allow(clippy::disallowed_methods)]
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
    // The CLI sends it in strict mode, which wants a subset of JSON Schema.
    tokio::fs::write(&path, super::strict_schema::strict(schema).to_string())
        .await
        .map_err(io)?;
    Ok((path, temporary))
}

/// What the CLI's event lines said.
#[derive(Debug, Default)]
struct CodexEvents {
    session: Option<String>,
    answer: Option<String>,
    usage: Usage,
    last: LastWord,
}

impl CodexEvents {
    fn take(&mut self, event: &Value) {
        let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
        match event.get("type").and_then(Value::as_str).unwrap_or("") {
            "thread.started" => self.session = text(event, "thread_id"),
            "item.completed" => {
                let Some(item) = event.get("item") else {
                    return;
                };
                if item.get("type").and_then(Value::as_str) == Some("agent_message") {
                    self.answer = text(item, "text");
                }
            }
            // What failed before the turn (the CLI's setup) is not the turn's failure.
            "turn.started" => self.last = LastWord::default(),
            "turn.completed" => {
                self.last.turn_completed(self.answer.is_some());
                let Some(u) = event.get("usage") else { return };
                let n = |key: &str| u.get(key).and_then(Value::as_u64).unwrap_or(0);
                // OpenAI's input counts the cached part in; ralph keeps it apart.
                let cached = n("cached_input_tokens");
                self.usage.input_tokens += n("input_tokens").saturating_sub(cached);
                self.usage.output_tokens += n("output_tokens");
                self.usage.cache_read_tokens += cached;
                self.usage.cache_creation_tokens += n("cache_write_input_tokens");
            }
            "turn.failed" => self.last.error(
                event
                    .get("error")
                    .and_then(|e| text(e, "message"))
                    .unwrap_or_else(|| "the turn failed".into()),
            ),
            // Printed also for a call the CLI retries: the turn may still complete.
            "error" => self.last.error(
                text(event, "message").unwrap_or_else(|| "an error without a message".into()),
            ),
            _ => {}
        }
    }
}

/// The lines [`live`] and [`api`] read.
const LIVE: LiveMap = LiveMap {
    types: &[
        "thread.started",
        "item.started",
        "item.completed",
        "turn.completed",
        "error",
    ],
    map: live,
    api,
};

/// What a line says about the API: an item of the model's (a message, a command it runs)
/// or a completed turn is its answer; an `error` is a call the CLI retries or gives up on,
/// a connection error when it says so (`Reconnecting... waiting for network (Connection
/// failed: …)`). The CLI's own warnings (`item.completed` of an `error` item) say nothing.
fn api(event: &Value) -> Option<ApiSign> {
    match event["type"].as_str()? {
        "error" => Some(ApiSign::of_error(
            event["message"]
                .as_str()
                .unwrap_or("an error without a message"),
        )),
        "item.started" | "item.completed" if event["item"]["type"] == "error" => None,
        "item.started" | "item.completed" | "turn.completed" => Some(ApiSign::Answered),
        _ => None,
    }
}

/// The live event a line of the CLI means: its thread, each command as it starts, each
/// message, and each turn's tokens.
fn live(event: &Value) -> Option<Meaning> {
    let item = &event["item"];
    let event = match (event["type"].as_str()?, item["type"].as_str()) {
        ("thread.started", _) => AgentEvent::Session {
            id: event["thread_id"].as_str()?.to_owned(),
        },
        ("item.started", Some("command_execution")) => AgentEvent::ToolUse {
            name: "exec_command".into(),
        },
        ("item.completed", Some("agent_message")) => {
            return Some(message(item["text"].as_str()?));
        }
        // A turn's tokens, over all its model calls: the context in use is not among them.
        ("turn.completed", _) => {
            let usage = &event["usage"];
            AgentEvent::Usage {
                context_tokens: 0,
                window: None,
                input_tokens: usage["input_tokens"].as_u64()?,
                output_tokens: usage["output_tokens"].as_u64().unwrap_or(0),
            }
        }
        _ => return None,
    };
    Some(Meaning::Event(event))
}

/// The run from how the process ended and what its events said.
fn judge(raw: &Raw, events: CodexEvents, request: &AgentRequest) -> AgentRun {
    let mut run = events.last.judge("codex", raw, events.answer, reset_time);
    if run.exit == AgentExit::Completed && request.role.is_structured() {
        run.structured = serde_json::from_str(run.final_text.trim())
            .ok()
            .map(super::strict_schema::without_nulls);
    }
    run.session_id = events.session;
    run.usage = events.usage;
    run
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
    use crate::agent::Role;
    use crate::agent::cli::recorded;

    /// A transcript the pinned CLI printed (`fixtures/codex/`), read as a run of `role` that
    /// exited with `code`.
    fn replay(transcript: &str, role: Role, code: i32) -> AgentRun {
        let request = AgentRequest::new(role, "p", ".");
        let raw = Raw::exited(code, transcript);
        judge(&raw, read_events(&raw.stdout, CodexEvents::take), &request)
    }

    #[test]
    fn recorded_transcripts_read_as_the_live_runs_did() {
        let done = replay(
            include_str!("../../../../../fixtures/codex/tool-flow-done.jsonl"),
            Role::Build,
            0,
        );
        recorded::assert_done(&done);

        let earlier = replay(
            include_str!("../../../../../fixtures/codex/marker-in-tool-output.jsonl"),
            Role::Build,
            0,
        );
        recorded::assert_marker_in_tool_output_is_not_done(&earlier);

        let judged = replay(
            include_str!("../../../../../fixtures/codex/read-only-structured.jsonl"),
            Role::Verify,
            0,
        );
        assert_eq!(judged.structured.expect("structured")["verdict"], "accept");

        let limited = replay(
            include_str!("../../../../../fixtures/codex/usage-limit.jsonl"),
            Role::Build,
            1,
        );
        recorded::assert_rate_limited(&limited);

        let refused = replay(
            include_str!("../../../../../fixtures/codex/api-error-401.jsonl"),
            Role::Build,
            1,
        );
        recorded::assert_fatal(&refused);
    }

    #[test]
    fn a_recorded_turn_that_completes_after_an_error_it_retried_is_done() {
        for retried in [
            include_str!("../../../../../fixtures/codex/retry-after-then-done.jsonl"),
            include_str!("../../../../../fixtures/codex/stream-dropped-then-done.jsonl"),
            include_str!("../../../../../fixtures/codex/response-failed-then-done.jsonl"),
        ] {
            assert!(retried.contains(r#"{"type":"error","message":"Reconnecting... 1/1"#));
            let run = replay(retried, Role::Build, 0);
            recorded::assert_recovered(&run);
            assert_eq!(run.final_text, "Done.\n<TASK_DONE>");
        }

        // The retry met the same 429: the error is the last word.
        let limited = replay(
            include_str!("../../../../../fixtures/codex/retry-after-exhausted.jsonl"),
            Role::Build,
            1,
        );
        recorded::assert_rate_limited(&limited);
    }

    #[test]
    fn a_recorded_run_shows_its_thread_each_command_as_it_starts_and_each_message() {
        let events = crate::agent::cli::live::replay(
            include_str!("../../../../../fixtures/codex/tool-flow-done.jsonl"),
            LIVE,
        );
        assert_eq!(
            events,
            [
                "session",
                "tool exec_command",
                "text Wrote hello.txt.\n<TASK_DONE>",
                "usage 200/20 context 0",
            ]
        );
    }

    /// What the API signs of a recorded transcript's lines are, in order, in a word each.
    fn signs(transcript: &str) -> Vec<String> {
        transcript
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|v| api(&v))
            .map(|sign| match sign {
                ApiSign::Answered => "answered".to_owned(),
                ApiSign::Error(line) => format!("error {line}"),
                ApiSign::Unreached(line) => format!("unreached {line}"),
            })
            .collect()
    }

    #[test]
    fn recorded_lines_say_whether_the_api_answered_or_could_not_be_reached() {
        let waiting = "unreached Reconnecting... waiting for network (Connection failed: error sending request)";
        assert_eq!(
            signs(include_str!(
                "../../../../../fixtures/codex/no-network.jsonl"
            )),
            [waiting; 5],
            "the CLI's own warning item says nothing"
        );
        // A 429 waited out is the API answering; so is every item of the model's.
        assert_eq!(
            signs(include_str!(
                "../../../../../fixtures/codex/retry-after-then-done.jsonl"
            )),
            [
                "error Reconnecting... 1/1 (exceeded retry limit, last status: 429 Too Many Requests)",
                "answered",
                "answered",
            ]
        );
        assert!(
            signs(include_str!(
                "../../../../../fixtures/codex/stream-dropped-then-done.jsonl"
            ))[0]
                .starts_with("unreached Reconnecting... 1/1 (stream disconnected")
        );
        assert_eq!(
            signs(include_str!(
                "../../../../../fixtures/codex/tool-flow-done.jsonl"
            )),
            ["answered"; 4]
        );
    }

    #[test]
    fn each_error_is_shown_live() {
        let events = crate::agent::cli::live::replay(
            include_str!("../../../../../fixtures/codex/no-network.jsonl"),
            LIVE,
        );
        assert_eq!(
            events,
            [
                "session".to_owned(),
                "status Reconnecting... waiting for network (Connection failed: error sending request)".to_owned(),
            ]
            .into_iter()
            .chain(std::iter::repeat_n(
                "status Reconnecting... waiting for network (Connection failed: error sending request)".to_owned(),
                4
            ))
            .collect::<Vec<_>>()
        );
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
