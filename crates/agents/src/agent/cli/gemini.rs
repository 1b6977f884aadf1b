//! `GeminiCli`: the Google Gemini CLI as an agent.

use serde_json::Value;

use super::Settings as _;
use super::command::Raw;
use super::live::{LiveMap, Meaning, message};
use super::{LastWord, cli_agent_settings, read_events};
use crate::agent::reach::ApiSign;
use crate::agent::{Agent, AgentError, AgentEvent, AgentExit, AgentRequest, AgentRun, Usage};
use crate::config::CliConfig;
use crate::config::Config;

/// [`GeminiCli`]: the Google Gemini CLI in headless mode (`gemini --prompt "" --output-format
/// stream-json`), one fresh process per run.
///
/// The prompt goes to stdin, which survives prompts of any size (the CLI appends the empty
/// `--prompt` to it). The CLI prints one JSON event per line; ralph keeps the last
/// 8 MiB of them, a longer line (a huge final answer)
/// cut to the head and tail of its text (the log has all), and reads:
///
/// | event | becomes |
/// |---|---|
/// | `init` | [`AgentRun::session_id`], and at once an [`AgentEvent::Session`] |
/// | `message` of the assistant | the final answer: the text after the last tool call (deltas joined); at once an [`AgentEvent::Text`] per message (deltas joined) |
/// | `tool_use` | at once an [`AgentEvent::ToolUse`]; the answer starts over |
/// | `result` | [`AgentRun::usage`], and at once an [`AgentEvent::Usage`]; with `status: "success"` and an answer, a completed turn; with `status: "error"`, the failure: a 429 or exhausted quota is [`AgentExit::RateLimited`], a 401 or 403 is fatal, a 5xx transient, anything else a failed attempt |
/// | `error` | the failure (a warning too: `Loop detected, stopping execution`), unless a turn completes with an answer after it |
///
/// The CLI retries a failed API call itself (a 5xx, a 429 it may wait out, a stream that
/// broke off), saying so on stderr only: the text it printed of a stream that broke off
/// stays at the head of the answer. The run is judged on how it ended, as
/// [`CodexCli`](crate::agent::CodexCli)'s is.
///
/// BUILD runs with `--approval-mode yolo` (every tool allowed), every other role with
/// `--approval-mode plan` (read-only). The CLI needs its authentication set up as for any
/// headless use (`GEMINI_API_KEY` and `security.auth.selectedType` in its settings);
/// `GOOGLE_GEMINI_BASE_URL` points it at another endpoint. The run is supervised as every
/// process agent's is (see [`CommandAgent`](crate::agent::CommandAgent)).
///
/// Its settings are `[gemini]` in `ralph.toml`: `bin`, `model`, `args`, `env` and
/// `idle_timeout`, each also the builder method of the same name, which wins over it.
///
/// ```no_run
/// use ralph::agent::{Agent, AgentRequest, GeminiCli, Role};
///
/// # async fn demo() -> Result<(), ralph::AgentError> {
/// let gemini = GeminiCli::new().model("gemini-2.5-pro");
/// let run = gemini.run(AgentRequest::new(Role::Build, "Write hello.txt", ".")).await?;
/// println!("{}", run.final_text);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct GeminiCli {
    config: CliConfig,
    grace: std::time::Duration,
    /// Set in code: the workspace's `[gemini]` does not replace it.
    explicit: bool,
}

cli_agent_settings!(GeminiCli, gemini);

impl GeminiCli {
    /// The argv of a run for `request`.
    fn argv(&self, request: &AgentRequest) -> Vec<String> {
        let mode = if request.role.may_write() {
            "yolo"
        } else {
            "plan"
        };
        let mut argv: Vec<String> = vec![
            self.config.program("gemini"),
            "--prompt".into(),
            String::new(),
            "--output-format".into(),
            "stream-json".into(),
            "--skip-trust".into(),
            "--approval-mode".into(),
            mode.into(),
        ];
        if let Some(model) = &self.config.model {
            argv.extend(["--model".to_owned(), model.clone()]);
        }
        argv.extend(self.config.args.iter().cloned());
        argv
    }
}

#[async_trait::async_trait]
impl Agent for GeminiCli {
    /// The CLI runs in its own process, in the request's sandbox.
    fn in_process(&self) -> bool {
        false
    }

    fn name(&self) -> &str {
        "gemini"
    }

    async fn run(&self, request: AgentRequest) -> Result<AgentRun, AgentError> {
        if request.stop.is_stopped() {
            return Ok(AgentRun::new(AgentExit::Stopped));
        }
        let argv = self.argv(&request);
        let raw = self
            .config
            .supervisor(crate::agent::cli_files::Cli::Gemini, self.grace)
            // The CLI exits before a pipe takes a long answer; a file keeps it whole.
            .stdout_to_file()
            .live(LIVE)
            .supervise(&request, &argv, true, &[], None)
            .await?;
        let events = read_events(&raw.stdout, GeminiEvents::take);
        let mut run = raw.finish(judge(&raw, events), &request);
        run.model = self.config.model.clone();
        Ok(run)
    }

    async fn check(&self) -> Result<(), AgentError> {
        let help =
            "install the Gemini CLI, or name it in ralph.toml ([gemini] bin) or RALPH_GEMINI__BIN";
        self.config.check("gemini", help).await
    }

    fn configure(&mut self, config: &Config) {
        self.take_config(config);
    }
}

/// What the CLI's event lines said.
#[derive(Debug, Default)]
struct GeminiEvents {
    session: Option<String>,
    answer: String,
    answered: bool,
    usage: Usage,
    last: LastWord,
    succeeded: bool,
}

impl GeminiEvents {
    fn take(&mut self, event: &Value) {
        let text = |key: &str| event.get(key).and_then(Value::as_str).map(str::to_owned);
        match event.get("type").and_then(Value::as_str).unwrap_or("") {
            "init" => self.session = text("session_id"),
            "message" if text("role").as_deref() == Some("assistant") => {
                let content = text("content").unwrap_or_default();
                if event.get("delta").and_then(Value::as_bool) != Some(true) {
                    self.answer.clear();
                }
                self.answer.push_str(&content);
                self.answered = true;
            }
            "tool_use" => {
                self.answer.clear();
                self.answered = false;
            }
            "result" => {
                if let Some(stats) = event.get("stats") {
                    let n = |key: &str| stats.get(key).and_then(Value::as_u64).unwrap_or(0);
                    // Gemini's prompt count holds the cached part; ralph keeps it apart.
                    let cached = n("cached");
                    self.usage.input_tokens = n("input_tokens").saturating_sub(cached);
                    self.usage.output_tokens = n("output_tokens");
                    self.usage.cache_read_tokens = cached;
                }
                match text("status").as_deref() {
                    Some("success") => {
                        self.succeeded = true;
                        self.last.turn_completed(self.answered);
                    }
                    _ => self.last.error(
                        event
                            .get("error")
                            .and_then(|e| e.get("message"))
                            .and_then(Value::as_str)
                            .unwrap_or("the run ended with an error"),
                    ),
                }
            }
            // A warning too (a loop detected, then `result` says success).
            "error" => self
                .last
                .error(text("message").unwrap_or_else(|| "an error without a message".into())),
            _ => {}
        }
    }
}

/// The lines [`live`] and [`api`] read.
const LIVE: LiveMap = LiveMap {
    types: &["init", "tool_use", "message", "result", "error"],
    map: live,
    api,
};

/// What a line says about the API: the assistant's message, a tool call or a successful
/// result is its answer; an `error`, or a result with one, says what failed (a connection
/// error when it says so).
fn api(event: &Value) -> Option<ApiSign> {
    match event["type"].as_str()? {
        "message" if event["role"] == "assistant" => Some(ApiSign::Answered),
        "tool_use" => Some(ApiSign::Answered),
        "result" if event["status"] == "success" => Some(ApiSign::Answered),
        "result" => event["error"]["message"].as_str().map(ApiSign::of_error),
        "error" => event["message"].as_str().map(ApiSign::of_error),
        _ => None,
    }
}

/// The live event a line of the CLI means: its session, each tool call, each message of
/// the assistant, and the run's tokens.
fn live(event: &Value) -> Option<Meaning> {
    let event = match event["type"].as_str()? {
        "init" => AgentEvent::Session {
            id: event["session_id"].as_str()?.to_owned(),
        },
        "tool_use" => AgentEvent::ToolUse {
            name: event["tool_name"].as_str().unwrap_or("tool").to_owned(),
        },
        "message" if event["role"] == "assistant" => {
            let content = event["content"].as_str()?;
            // A streamed answer comes in pieces (`delta`), sent as one message.
            return Some(match event["delta"].as_bool() {
                Some(true) => Meaning::TextPiece(content.to_owned()),
                _ => message(content),
            });
        }
        // The run's tokens, printed once at its end.
        "result" => {
            let stats = &event["stats"];
            AgentEvent::Usage {
                context_tokens: 0,
                window: None,
                input_tokens: stats["input_tokens"].as_u64()?,
                output_tokens: stats["output_tokens"].as_u64().unwrap_or(0),
            }
        }
        _ => return None,
    };
    Some(Meaning::Event(event))
}

/// The run from how the process ended and what its events said.
fn judge(raw: &Raw, events: GeminiEvents) -> AgentRun {
    let answer = (events.succeeded && events.answered).then_some(events.answer);
    let mut run = events.last.judge("gemini", raw, answer, |_| None);
    run.session_id = events.session;
    run.usage = events.usage;
    run
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::FailureKind;
    use crate::agent::cli::recorded;

    /// A transcript the pinned CLI printed (`fixtures/gemini/`), read as a run that exited
    /// with `code`.
    fn replay(transcript: &str, code: i32) -> AgentRun {
        let raw = Raw::exited(code, transcript);
        judge(&raw, read_events(&raw.stdout, GeminiEvents::take))
    }

    #[test]
    fn a_recorded_run_shows_its_session_each_tool_call_and_each_message() {
        let events = crate::agent::cli::live::replay(
            include_str!("../../../../../fixtures/gemini/tool-flow-done.jsonl"),
            LIVE,
        );
        assert_eq!(
            events,
            [
                "session",
                "tool run_shell_command",
                "text Wrote hello.txt.\n<TASK_DONE>",
                "usage 200/20 context 0",
            ]
        );
    }

    #[test]
    fn a_recorded_run_without_network_is_a_connection_error_shown_live_and_transient() {
        let transcript = include_str!("../../../../../fixtures/gemini/no-network.jsonl");
        let signs: Vec<ApiSign> = transcript
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|v| api(&v))
            .collect();
        let message = "[API Error: exception TypeError: fetch failed sending request]";
        assert_eq!(signs, [ApiSign::Unreached(message.to_owned())]);
        let events = crate::agent::cli::live::replay(transcript, LIVE);
        assert!(events.contains(&format!("status {message}")), "{events:?}");
        let run = replay(transcript, 1);
        assert!(
            matches!(&run.exit, AgentExit::Failed { kind: crate::agent::FailureKind::Transient, reason }
                if reason.contains(message)),
            "{run:?}"
        );
    }

    #[test]
    fn recorded_transcripts_read_as_the_live_runs_did() {
        let done = replay(
            include_str!("../../../../../fixtures/gemini/tool-flow-done.jsonl"),
            0,
        );
        recorded::assert_done(&done);

        let earlier = replay(
            include_str!("../../../../../fixtures/gemini/marker-in-tool-output.jsonl"),
            0,
        );
        recorded::assert_marker_in_tool_output_is_not_done(&earlier);

        let judged = replay(
            include_str!("../../../../../fixtures/gemini/read-only-structured.jsonl"),
            0,
        );
        recorded::assert_verdict_in_the_answer(&judged);

        let limited = replay(
            include_str!("../../../../../fixtures/gemini/daily-quota.jsonl"),
            1,
        );
        recorded::assert_rate_limited(&limited);

        let refused = replay(
            include_str!("../../../../../fixtures/gemini/api-error-401.jsonl"),
            1,
        );
        recorded::assert_fatal(&refused);
    }

    #[test]
    fn a_recorded_retry_and_a_recorded_loop_read_as_the_live_runs_did() {
        let retried = replay(
            include_str!("../../../../../fixtures/gemini/stream-dropped-then-done.jsonl"),
            0,
        );
        recorded::assert_recovered(&retried);
        // The CLI prints nothing of the retry: the broken stream's text stays in the answer.
        assert_eq!(retried.final_text, "Half an ansDone.\n<TASK_DONE>");

        // A warning, then `result` says success without an answer: the warning says why.
        let looped = replay(
            include_str!("../../../../../fixtures/gemini/loop-detected.jsonl"),
            0,
        );
        assert!(
            matches!(&looped.exit, AgentExit::Failed { reason, kind: FailureKind::Attempt }
                if reason == "gemini: Loop detected, stopping execution"),
            "{looped:?}"
        );
    }
}
