//! `OpencodeCli`: opencode (`opencode run --format json`) as an agent.

use std::time::Duration;

use serde_json::Value;

use super::Settings as _;
use super::command::Raw;
use super::live::{LiveMap, Meaning, message};
use super::{LastWord, cli_agent_settings, read_events};
use crate::agent::reach::ApiSign;
use crate::agent::{Agent, AgentError, AgentEvent, AgentExit, AgentRequest, AgentRun, Usage};
use crate::config::CliConfig;
use crate::config::Config;

/// The permissions of a read-only role, merged over opencode's own (`OPENCODE_PERMISSION`).
const READ_ONLY: &str = r#"{"edit":"deny","bash":"deny","webfetch":"deny"}"#;

/// The least idle timeout of a run. opencode prints nothing until its first model call has
/// answered, and it starts slowly: 3.5–6 s here to its first request (1.18.33, a 2-core
/// machine under load), 8–10 s measured elsewhere. A smaller idle timeout would cut runs
/// that never reached the API, as stalled; this one leaves three times that start.
pub(crate) const IDLE_FLOOR: Duration = Duration::from_secs(30);

/// The idle timeout a run gets for a `configured` one: never below [`IDLE_FLOOR`].
fn idle_timeout(configured: Duration) -> Duration {
    configured.max(IDLE_FLOOR)
}

/// [`OpencodeCli`]: opencode's headless run (`opencode run --format json`), one fresh process
/// per run.
///
/// The prompt goes to stdin, which survives prompts of any size; stdout goes to a file
/// beside the log (see [`GeminiCli`](crate::agent::GeminiCli) for why), followed while the CLI
/// runs for the live events. The CLI prints one JSON event per line; ralph keeps the last
/// 8 MiB of them, a longer line (a huge final answer)
/// cut to the head and tail of its text, and reads:
///
/// | event | becomes |
/// |---|---|
/// | `step_start` | a model call: the answer starts over (the text of a call whose stream broke off is no answer) |
/// | `text` | the final answer: the text parts of the last model call after its last tool call; at once an [`AgentEvent::Text`] each |
/// | `tool_use` (printed when the tool is done) | at once an [`AgentEvent::ToolUse`]; the answer starts over |
/// | `step_finish` | [`AgentRun::usage`] (summed over the steps); at once an [`AgentEvent::Usage`] with the run's tokens so far; with reason `stop` and an answer, a completed turn |
/// | `error` | the failure, unless a turn completes with an answer after it: a rate limit is [`AgentExit::RateLimited`], a 401 or 403 fatal, a 5xx transient, anything else a failed attempt |
/// | any event's `sessionID` | [`AgentRun::session_id`]; the first at once an [`AgentEvent::Session`] |
///
/// BUILD runs with `--auto` (permissions not explicitly denied are granted), every other
/// role with `--agent plan` and edits, shell commands and fetches denied
/// (`OPENCODE_PERMISSION`): the plan agent alone still runs shell commands that write.
/// opencode retries failed API calls itself, waiting out a `retry-after`, and a stream that
/// broke off mid-answer as a new model call: until it gives up the run is silent, and the
/// idle and agent timeouts apply. The run is judged on how it ended, as
/// [`CodexCli`](crate::agent::CodexCli)'s is. The provider and model come from opencode's own configuration
/// (`opencode.json`, `OPENCODE_CONFIG_CONTENT`); `model` is `provider/model`. The run is
/// supervised as every process agent's is (see [`CommandAgent`](crate::agent::CommandAgent)).
///
/// Its settings are `[opencode]` in `ralph.toml`: `bin`, `model`, `args`, `env` and
/// `idle_timeout`, each also the builder method of the same name, which wins over it. The
/// idle timeout is at least 30 s: opencode is silent from its start until its first model
/// call answers, and its start alone takes several seconds.
///
/// ```no_run
/// use ralph::agent::{Agent, AgentRequest, OpencodeCli, Role};
///
/// # async fn demo() -> Result<(), ralph::AgentError> {
/// let opencode = OpencodeCli::new().model("anthropic/claude-sonnet-4-5");
/// let run = opencode.run(AgentRequest::new(Role::Build, "Write hello.txt", ".")).await?;
/// println!("{}", run.final_text);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct OpencodeCli {
    config: CliConfig,
    grace: Duration,
    /// Set in code: the workspace's `[opencode]` does not replace it.
    explicit: bool,
}

cli_agent_settings!(OpencodeCli, opencode);

impl OpencodeCli {
    /// The argv of a run for `request`.
    fn argv(&self, request: &AgentRequest) -> Vec<String> {
        let mut argv: Vec<String> = vec![
            self.config.program("opencode"),
            "run".into(),
            "--format".into(),
            "json".into(),
            // A title given: no extra model call to make one up.
            "--title".into(),
            format!("ralph {}", request.role),
            "--dir".into(),
            request.workspace.display().to_string(),
        ];
        if request.role.may_write() {
            argv.push("--auto".into());
        } else {
            argv.extend(["--agent".to_owned(), "plan".to_owned()]);
        }
        if let Some(model) = &self.config.model {
            argv.extend(["--model".to_owned(), model.clone()]);
        }
        argv.extend(self.config.args.iter().cloned());
        argv
    }
}

#[async_trait::async_trait]
impl Agent for OpencodeCli {
    /// The CLI runs in its own process, in the request's sandbox.
    fn in_process(&self) -> bool {
        false
    }

    fn name(&self) -> &str {
        "opencode"
    }

    async fn run(&self, request: AgentRequest) -> Result<AgentRun, AgentError> {
        if request.stop.is_stopped() {
            return Ok(AgentRun::new(AgentExit::Stopped));
        }
        let argv = self.argv(&request);
        let mut supervisor = self
            .config
            .supervisor(crate::agent::cli_files::Cli::Opencode, self.grace)
            .idle_timeout(idle_timeout(self.config.idle_timeout))
            .stdout_to_file();
        if !request.role.may_write() {
            // The plan agent alone still runs shell commands that write: deny them.
            supervisor = supervisor.env("OPENCODE_PERMISSION", READ_ONLY);
        }
        let raw = supervisor
            .live(LIVE)
            .supervise(&request, &argv, true, &[], None)
            .await?;
        let events = read_events(&raw.stdout, OpencodeEvents::take);
        let mut run = raw.finish(judge(&raw, events), &request);
        run.model = self.config.model.clone();
        Ok(run)
    }

    async fn check(&self) -> Result<(), AgentError> {
        let help =
            "install opencode, or name it in ralph.toml ([opencode] bin) or RALPH_OPENCODE__BIN";
        self.config.check("opencode", help).await
    }

    fn configure(&mut self, config: &Config) {
        self.take_config(config);
    }
}

/// What the CLI's event lines said.
#[derive(Debug, Default)]
struct OpencodeEvents {
    session: Option<String>,
    answer: Vec<String>,
    usage: Usage,
    last: LastWord,
}

impl OpencodeEvents {
    fn take(&mut self, event: &Value) {
        if let Some(id) = event.get("sessionID").and_then(Value::as_str) {
            self.session = Some(id.to_owned());
        }
        let part = event.get("part").unwrap_or(&Value::Null);
        match event.get("type").and_then(Value::as_str).unwrap_or("") {
            "text" => {
                if let Some(text) = part.get("text").and_then(Value::as_str) {
                    self.answer.push(text.to_owned());
                }
            }
            // A new model call: the answer is in the last one (a call whose stream broke
            // off is followed by another, and its text is no answer).
            "step_start" | "tool_use" => self.answer.clear(),
            "step_finish" => {
                // The model ended its turn (not a tool call, not a broken stream).
                if part["reason"] == "stop" {
                    self.last.turn_completed(!self.answer.is_empty());
                }
                let tokens = part.get("tokens").unwrap_or(&Value::Null);
                let n = |v: &Value| v.as_u64().unwrap_or(0);
                self.usage.input_tokens += n(&tokens["input"]);
                self.usage.output_tokens += n(&tokens["output"]);
                self.usage.cache_read_tokens += n(&tokens["cache"]["read"]);
                self.usage.cache_creation_tokens += n(&tokens["cache"]["write"]);
            }
            "error" => {
                let error = event.get("error").unwrap_or(&Value::Null);
                let message = error["data"]["message"]
                    .as_str()
                    .or_else(|| error["name"].as_str())
                    .unwrap_or("the run failed");
                let status = error["data"]["statusCode"]
                    .as_u64()
                    .map_or_else(String::new, |code| format!(" (status {code})"));
                self.last.error(format!("{message}{status}"));
            }
            _ => {}
        }
    }
}

/// The lines [`live`] and [`api`] read.
const LIVE: LiveMap = LiveMap {
    types: &["step_start", "tool_use", "text", "step_finish", "error"],
    map: live,
    api,
};

/// What a line says about the API: a model call's text, tool call or finish is its answer;
/// an `error` says what failed (a connection error when it says so).
fn api(event: &Value) -> Option<ApiSign> {
    match event["type"].as_str()? {
        "tool_use" | "text" | "step_finish" => Some(ApiSign::Answered),
        "error" => {
            let error = &event["error"];
            let message = error["data"]["message"]
                .as_str()
                .or_else(|| error["name"].as_str())?;
            Some(ApiSign::of_error(message))
        }
        _ => None,
    }
}

/// The live event a line of the CLI means: each tool call, each text part, each step's
/// tokens, and the session (named by every step; sent once).
fn live(event: &Value) -> Option<Meaning> {
    let part = &event["part"];
    let event = match event["type"].as_str()? {
        "step_start" => AgentEvent::Session {
            id: event["sessionID"].as_str()?.to_owned(),
        },
        "tool_use" => AgentEvent::ToolUse {
            name: part["tool"].as_str().unwrap_or("tool").to_owned(),
        },
        "text" => return Some(message(part["text"].as_str()?)),
        // One model call: what it read is the context in use.
        "step_finish" => {
            let tokens = &part["tokens"];
            let n = |v: &Value| v.as_u64().unwrap_or(0);
            let input = n(&tokens["input"]);
            AgentEvent::Usage {
                context_tokens: input + n(&tokens["cache"]["read"]) + n(&tokens["cache"]["write"]),
                window: None,
                input_tokens: input,
                output_tokens: n(&tokens["output"]),
            }
        }
        _ => return None,
    };
    Some(Meaning::Event(event))
}

/// The run from how the process ended and what its events said.
fn judge(raw: &Raw, events: OpencodeEvents) -> AgentRun {
    let answer = (!events.answer.is_empty()).then(|| events.answer.join("\n"));
    let mut run = events.last.judge("opencode", raw, answer, |_| None);
    run.session_id = events.session;
    run.usage = events.usage;
    run
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::cli::recorded;

    #[test]
    fn an_idle_timeout_below_opencode_s_start_is_raised_to_the_floor() {
        let secs = |s| Duration::from_secs(s);
        assert_eq!(idle_timeout(secs(5)), IDLE_FLOOR);
        assert_eq!(idle_timeout(Duration::ZERO), IDLE_FLOOR);
        assert_eq!(idle_timeout(secs(30)), secs(30));
        // The default (5m) and anything above the floor is kept.
        let default = crate::config::CliConfig::default().idle_timeout;
        assert_eq!(idle_timeout(default), default);
        assert_eq!(idle_timeout(secs(31)), secs(31));
    }

    /// A transcript the pinned CLI printed (`fixtures/opencode/`), read as a run that exited
    /// with `code`.
    fn replay(transcript: &str, code: i32) -> AgentRun {
        let raw = Raw::exited(code, transcript);
        judge(&raw, read_events(&raw.stdout, OpencodeEvents::take))
    }

    #[test]
    fn a_recorded_run_shows_its_session_each_tool_call_and_each_message() {
        let events = crate::agent::cli::live::replay(
            include_str!("../../../../../fixtures/opencode/tool-flow-done.jsonl"),
            LIVE,
        );
        assert_eq!(
            events,
            [
                "session",
                "tool bash",
                "usage 60/10 context 100",
                "text Wrote hello.txt.\n<TASK_DONE>",
                "usage 120/20 context 100",
            ]
        );
    }

    #[test]
    fn a_recorded_run_without_network_is_a_connection_error_shown_live_and_transient() {
        let transcript = include_str!("../../../../../fixtures/opencode/no-network.jsonl");
        let signs: Vec<ApiSign> = transcript
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|v| api(&v))
            .collect();
        let message =
            "Cannot connect to API: Unable to connect. Is the computer able to access the url?";
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
            include_str!("../../../../../fixtures/opencode/tool-flow-done.jsonl"),
            0,
        );
        recorded::assert_done(&done);

        let earlier = replay(
            include_str!("../../../../../fixtures/opencode/marker-in-tool-output.jsonl"),
            0,
        );
        recorded::assert_marker_in_tool_output_is_not_done(&earlier);

        let judged = replay(
            include_str!("../../../../../fixtures/opencode/read-only-structured.jsonl"),
            0,
        );
        recorded::assert_verdict_in_the_answer(&judged);

        let retried = replay(
            include_str!("../../../../../fixtures/opencode/api-500-then-ok.jsonl"),
            0,
        );
        assert_eq!(retried.final_text, "Done.\n<TASK_DONE>");
    }

    #[test]
    fn a_recorded_stream_broken_off_then_retried_leaves_only_the_last_answer() {
        for retried in [
            // The broken call's text comes after its step, before the next one.
            include_str!("../../../../../fixtures/opencode/stream-dropped-then-done.jsonl"),
            include_str!("../../../../../fixtures/opencode/response-failed-then-done.jsonl"),
        ] {
            let run = replay(retried, 0);
            recorded::assert_recovered(&run);
            assert_eq!(run.final_text, "Done.\n<TASK_DONE>");
        }
    }
}
