//! `ClaudeCli` against `fake_claude` (`fixtures/bin/fake_claude.rs`), a stand-in for the `claude`
//! binary: the invocation, every recorded transcript, the clocks, stopping, cleanup of what
//! the CLI leaves behind, usage errors, huge answers and context pressure with compaction.
//!
//! Linux: whether processes are gone is read from `/proc`. Every test marks the processes it
//! starts with a unique `FAKE_CLAUDE_TEST_MARK` in their environment, which their descendants
//! inherit, so "nothing is left" means no live process carries the mark.

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::support::fake_claude;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use ralph::ClaudeCli;
use ralph::StopToken;
use ralph::agent::{
    Agent, AgentError, AgentEvent, AgentExit, AgentRequest, AgentRun, FailureKind, Role,
};
use ralph::config::ContextThresholds;
use rstest::rstest;
use serde_json::{Value, json};

/// Longer than any run here may take: a hung run fails its test instead of hanging it.
const LIMIT: Duration = Duration::from_secs(30);
/// A generous bound for runs that a clock or a stop cuts short.
const PROMPTLY: Duration = Duration::from_secs(4);
const TRANSCRIPTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/claude/transcripts");
/// The model of the synthetic transcripts, and its window.
const SONNET: &str = "claude-sonnet-4-5";
const WINDOW: u64 = 200_000;

/// One test's directory (workspace, log, CLI config dir, scratch files) and process mark.
struct Fixture {
    dir: tempfile::TempDir,
    mark: String,
}

impl Fixture {
    fn new() -> Self {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let mark = format!(
            "{}-{}-{nanos}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("ws")).unwrap();
        Fixture { dir, mark }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn workspace(&self) -> PathBuf {
        self.path("ws")
    }

    fn log(&self) -> PathBuf {
        self.path("logs/run.jsonl")
    }

    /// The fake, marked, with the CLI's config dir in the fixture and unhurried clocks (a
    /// loaded machine must not trip them); tests that exercise a clock shorten it.
    fn cli(&self) -> ClaudeCli {
        ClaudeCli::new()
            .bin(fake_claude())
            .env("FAKE_CLAUDE_TEST_MARK", &self.mark)
            .env("CLAUDE_CONFIG_DIR", self.path("config").to_str().unwrap())
            .idle_timeout(Duration::from_secs(20))
            .result_grace(Duration::from_secs(2))
            .grace(Duration::from_secs(2))
    }

    /// The fake with these knobs.
    fn fake(&self, knobs: &[(&str, &str)]) -> ClaudeCli {
        knobs
            .iter()
            .fold(self.cli(), |cli, (key, value)| cli.env(*key, *value))
    }

    /// A BUILD request in the fixture's workspace, logged to [`log`](Self::log).
    /// Sandboxed as a run in the default mode is, the fixture's own files writable.
    fn request(&self, prompt: &str) -> AgentRequest {
        AgentRequest::new(Role::Build, prompt, self.workspace())
            .log_path(self.log())
            .sandbox(crate::support::sandbox(&self.workspace()).write(self.dir.path()))
    }

    /// Records every invocation of the fake to `record.jsonl`.
    fn recorded(&self, cli: ClaudeCli) -> ClaudeCli {
        cli.env(
            "FAKE_CLAUDE_RECORD",
            self.path("record.jsonl").to_str().unwrap(),
        )
    }

    fn records(&self) -> Vec<Value> {
        std::fs::read_to_string(self.path("record.jsonl"))
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// Writes a transcript of `lines` and returns its path.
    fn transcript(&self, name: &str, lines: &[Value]) -> String {
        let path = self.path(&format!("{name}.jsonl"));
        let text: String = lines.iter().map(|line| format!("{line}\n")).collect();
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    }

    /// Live processes carrying this fixture's mark.
    fn survivors(&self) -> Vec<i32> {
        let entry = format!("FAKE_CLAUDE_TEST_MARK={}", self.mark);
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|&pid| alive(pid))
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                    environ
                        .split(|&b| b == 0)
                        .any(|var| var == entry.as_bytes())
                })
            })
            .collect()
    }

    fn assert_nothing_left(&self) {
        let left: Vec<String> = self
            .survivors()
            .iter()
            .map(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                format!(
                    "{} [{}]",
                    stat.trim(),
                    String::from_utf8_lossy(&cmd).replace('\0', " ")
                )
            })
            .collect();
        assert!(left.is_empty(), "processes left behind: {left:#?}");
    }
}

impl Drop for Fixture {
    /// Should a test fail with processes left, they go with it (ours alone: they carry the mark).
    fn drop(&mut self) {
        for pid in self.survivors() {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Whether `pid` exists and is not a zombie.
fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .next()
        .unwrap_or("X");
    !matches!(state, "Z" | "X" | "x")
}

/// Collects the events of a run.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<AgentEvent>>>);

impl Events {
    fn sink(&self) -> impl Fn(AgentEvent) + Send + Sync + 'static {
        let events = self.clone();
        move |event: AgentEvent| events.0.lock().unwrap().push(event)
    }

    fn all(&self) -> Vec<AgentEvent> {
        self.0.lock().unwrap().clone()
    }

    /// `(tier, ratio)` of every context-pressure event.
    fn pressure(&self) -> Vec<(String, f64)> {
        self.all()
            .into_iter()
            .filter_map(|event| match event {
                AgentEvent::ContextPressure { ratio, tier } => Some((tier, ratio)),
                _ => None,
            })
            .collect()
    }

    fn notes(&self) -> Vec<String> {
        self.all()
            .into_iter()
            .filter_map(|event| match event {
                AgentEvent::Note { message } => Some(message),
                _ => None,
            })
            .collect()
    }
}

/// Runs `request`, within [`LIMIT`].
async fn run(cli: &ClaudeCli, request: AgentRequest) -> AgentRun {
    tokio::time::timeout(LIMIT, cli.run(request))
        .await
        .expect("the run ended in time")
        .expect("the run started")
}

/// A token cancelled as soon as the run reports its session, i.e. mid-run.
fn stop_on_session(events: &Events) -> (StopToken, impl Fn(AgentEvent) + Send + Sync + 'static) {
    let stop = StopToken::new();
    let token = stop.clone();
    let events = events.clone();
    let sink = move |event: AgentEvent| {
        if matches!(event, AgentEvent::Session { .. }) {
            token.stop();
        }
        events.0.lock().unwrap().push(event);
    };
    (stop, sink)
}

fn args_of(record: &Value) -> Vec<String> {
    record["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

/// The value following `flag` in `args`.
fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let at = args.iter().position(|a| a == flag)?;
    args.get(at + 1).map(String::as_str)
}

// ---------------------------------------------------------------------------------------
// The default run and the invocation

#[tokio::test]
async fn the_default_run_completes_with_everything_reported() {
    let f = Fixture::new();
    let events = Events::default();
    let prompt = "Implement the spec.".repeat(10); // 190 bytes: 48 input tokens

    let run = run(&f.cli(), f.request(&prompt).on_event(events.sink())).await;

    assert_eq!(run.exit, AgentExit::Completed);
    assert!(
        run.final_text.ends_with("<TASK_DONE>"),
        "{:?}",
        run.final_text
    );
    assert_eq!(run.final_text, "Done.\n<TASK_DONE>");
    assert_eq!(run.structured, None);
    assert_eq!(run.session_id.as_deref(), Some("fake-session"));
    assert_eq!(run.usage.input_tokens, 48);
    assert_eq!(run.usage.output_tokens, 5); // 17 answer bytes / 4, rounded up
    assert_eq!(run.usage.context_tokens, 48); // input + cache of the latest message
    assert_eq!(run.usage.context_window, Some(1_000_000));
    assert_eq!(run.cost_usd, Some(0.001));
    assert_eq!(run.turns, Some(1));
    assert_eq!(run.log_path.as_deref(), Some(f.log().as_path()));
    assert!(run.duration > Duration::ZERO && run.duration < LIMIT);
    assert!(events.all().contains(&AgentEvent::Session {
        id: "fake-session".into()
    }));

    // The log is the stdout: three JSON lines, each newline-terminated, nothing else.
    let log = std::fs::read_to_string(f.log()).unwrap();
    assert!(log.ends_with('\n'));
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["system", "assistant", "result"]);
    assert_eq!(lines[2]["result"], "Done.\n<TASK_DONE>");
    f.assert_nothing_left();
}

#[tokio::test]
async fn a_build_run_gets_the_prompt_on_stdin_and_ralph_s_flags() {
    let f = Fixture::new();
    // Above the 128 KiB limit of one argv string: only stdin can carry it.
    let prompt: String = (0..300_000u32)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let cli = f
        .recorded(f.cli())
        .model("sonnet")
        .max_turns(7)
        .max_retries(2)
        .args(["--effort", "high"])
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9");

    let run = run(&cli, f.request(&prompt)).await;

    assert_eq!(run.exit, AgentExit::Completed);
    let records = f.records();
    assert_eq!(records.len(), 1);
    let record = &records[0];
    assert!(
        record["stdin"] == prompt.as_str(),
        "the prompt arrived whole"
    );
    let args = args_of(record);
    // Runs keep their session (no `--no-session-persistence`): compaction resumes it. The
    // session files are removed after the run instead (see the session test below).
    assert_eq!(
        args,
        [
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--bare",
            "--dangerously-skip-permissions",
            "--model",
            "sonnet",
            "--max-turns",
            "7",
            "--disallowedTools",
            "AskUserQuestion",
            "--effort",
            "high",
        ]
    );
    assert_eq!(args, cli.command_line(&f.request(&prompt)));
    let cwd = f.workspace().canonicalize().unwrap();
    assert_eq!(record["cwd"], cwd.to_str().unwrap());
    let env = &record["env"];
    assert_eq!(env["CLAUDE_CODE_MAX_RETRIES"], "2");
    assert_eq!(env["ANTHROPIC_BASE_URL"], "http://127.0.0.1:9");
    assert!(env["RALPH_RUN_COOKIE"].is_string(), "{env}");
    let confined = ralph_loop_process::process::Sandbox::bubblewrap().is_ok();
    if nix::unistd::geteuid().is_root() && confined {
        // As root the CLI refuses to bypass permissions without it, and it is told so only
        // when it does run in a sandbox.
        assert_eq!(env["IS_SANDBOX"], "1");
    } else if confined {
        assert!(env.get("IS_SANDBOX").is_none(), "{env}");
    } else {
        // Unconfined, ralph sets nothing: the CLI sees what the test has, if any.
        let inherited = std::env::var("IS_SANDBOX").ok();
        assert_eq!(env["IS_SANDBOX"].as_str(), inherited.as_deref(), "{env}");
    }
    if confined {
        // Only the allowed variables of ralph's environment reach the CLI.
        assert!(env.get("CARGO_PKG_NAME").is_none(), "{env}");
    }
}

#[tokio::test]
async fn a_verify_run_is_read_only_and_passes_its_schema() {
    let f = Fixture::new();
    let schema = json!({"type": "object", "properties": {"verdict": {"type": "string"}}});
    let cli = f.recorded(f.cli());
    let request = AgentRequest::new(Role::Verify, "Judge it.", f.workspace()).schema(schema);

    let run = run(&cli, request).await;

    assert_eq!(run.exit, AgentExit::Completed);
    let record = &f.records()[0];
    let args = args_of(record);
    assert_eq!(flag_value(&args, "--permission-mode"), Some("plan"));
    assert!(!args.contains(&"--dangerously-skip-permissions".to_owned()));
    let passed: Value = serde_json::from_str(flag_value(&args, "--json-schema").unwrap()).unwrap();
    assert_eq!(passed["properties"]["verdict"]["type"], "string");
    // Only bypassing permissions needs IS_SANDBOX: the CLI sees what the test has, if any.
    let inherited = std::env::var("IS_SANDBOX").ok();
    assert_eq!(record["env"]["IS_SANDBOX"].as_str(), inherited.as_deref());
    assert_eq!(record["stdin"], "Judge it.");
}

#[tokio::test]
async fn a_session_that_can_neither_compact_nor_ask_is_not_persisted() {
    let f = Fixture::new();
    let cli = f.recorded(f.cli());
    // compact = kill = 1.0: the kill tier comes first, compaction can never start.
    let mut request = f
        .request("x")
        .context(ContextThresholds::new(0.7, 1.0, 1.0));
    // A BUILD run may ask a person a question: its session stays for the answer to resume.
    assert!(
        !cli.command_line(&request)
            .contains(&"--no-session-persistence".to_owned())
    );
    // A verifier may not.
    request.role = Role::Verify;
    assert!(
        cli.command_line(&request)
            .contains(&"--no-session-persistence".to_owned())
    );

    run(&cli, request).await;

    let args = args_of(&f.records()[0]);
    assert!(
        args.contains(&"--no-session-persistence".to_owned()),
        "{args:?}"
    );
}

#[rstest]
#[case::removed_by_default(false)]
#[case::kept_when_asked(true)]
#[tokio::test]
async fn the_cli_s_session_files_are_removed_unless_kept(#[case] keep: bool) {
    let f = Fixture::new();
    let project = f.path("config/projects/-ws");
    std::fs::create_dir_all(project.join("fake-session/tool-results")).unwrap();
    std::fs::write(project.join("fake-session.jsonl"), "{}\n").unwrap();
    std::fs::write(project.join("other-session.jsonl"), "{}\n").unwrap();

    let run = run(&f.cli().session_persistence(keep), f.request("x")).await;

    assert_eq!(run.exit, AgentExit::Completed);
    assert_eq!(project.join("fake-session.jsonl").exists(), keep);
    assert_eq!(project.join("fake-session").exists(), keep);
    assert!(project.join("other-session.jsonl").exists());
}

// ---------------------------------------------------------------------------------------
// Recorded transcripts

/// What a replayed transcript must end as.
#[derive(Debug)]
enum Expect {
    /// Completed with this final text.
    Completed(&'static str),
    /// Completed with this structured answer.
    Structured(&'static str),
    /// Failed, of this kind, with a reason containing the text.
    Failed(FailureKind, &'static str),
    ContextLimit,
}

/// The `session_id` of a transcript's first line that has one.
fn session_of(transcript: &[u8]) -> String {
    String::from_utf8_lossy(transcript)
        .lines()
        .find_map(|line| {
            let value: Value = serde_json::from_str(line).ok()?;
            Some(value["session_id"].as_str()?.to_owned())
        })
        .unwrap()
}

#[test]
fn every_recorded_transcript_has_a_replay_case() {
    let mut files: Vec<String> = std::fs::read_dir(TRANSCRIPTS)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            Some(name.strip_suffix(".jsonl")?.to_owned())
        })
        .collect();
    files.sort();
    assert_eq!(files, crate::support::RECORDED_TRANSCRIPTS);
}

/// Each transcript with the exit code the real CLI had (README), and what ralph makes of it
/// with the default context tiers.
#[rstest]
#[case::api_500_then_ok("api-500-then-ok", 0, Expect::Completed("recovered <TASK_DONE>"))]
#[case::api_error_401(
    "api-error-401",
    1,
    Expect::Failed(FailureKind::Fatal, "authentication failed (HTTP 401)")
)]
#[case::api_error_500(
    "api-error-500",
    1,
    Expect::Failed(FailureKind::Transient, "API server error (HTTP 500)")
)]
// 991k tokens of a 1M window before the CLI's own compaction: past ralph's kill tier.
#[case::autocompact("autocompact", 0, Expect::ContextLimit)]
#[case::blocked(
    "blocked",
    0,
    Expect::Completed(
        "The spec file does not exist, so I cannot continue.\n\
         <TASK_BLOCKED reason=\"spec file /nonexistent/spec.md missing\">"
    )
)]
#[case::max_turns(
    "max-turns",
    1,
    Expect::Failed(FailureKind::Attempt, "max turns reached")
)]
#[case::midstream_error_resume(
    "midstream-error-resume",
    0,
    Expect::Completed("second try <TASK_DONE>")
)]
#[case::partial_messages("partial-messages", 0, Expect::Completed("ok <TASK_DONE>"))]
#[case::permission_denied("permission-denied", 0, Expect::Completed("done <TASK_DONE>"))]
#[case::sigint_during_tool(
    "sigint-during-tool",
    0,
    Expect::Failed(FailureKind::Attempt, "interrupted (aborted_tools)")
)]
#[case::sigterm_during_tool_no_result(
    "sigterm-during-tool-no-result",
    143,
    Expect::Failed(FailureKind::Attempt, "without a result line")
)]
#[case::structured_output("structured-output", 0, Expect::Structured(r#"{"ok":true}"#))]
#[case::tool_flow_done(
    "tool-flow-done",
    0,
    Expect::Completed("Created hello.txt with the greeting.\n<TASK_DONE>")
)]
#[case::usage_growth_cached("usage-growth-cached", 0, Expect::Completed("All done.\n<TASK_DONE>"))]
#[tokio::test]
async fn a_recorded_transcript_ends_as_its_readme_says(
    #[case] name: &str,
    #[case] code: u8,
    #[case] expect: Expect,
) {
    let f = Fixture::new();
    let path = format!("{TRANSCRIPTS}/{name}.jsonl");
    let stdout = std::fs::read(&path).unwrap();
    let mut cli = f.fake(&[
        ("FAKE_CLAUDE_TRANSCRIPT", &path),
        ("FAKE_CLAUDE_EXIT_CODE", &code.to_string()),
    ]);
    if matches!(expect, Expect::ContextLimit) {
        // Paced, as the real CLI is (its compaction takes an API call): a stream cut at the
        // kill tier whose result line is already in the pipe would complete instead.
        cli = cli.env("FAKE_CLAUDE_DELAY_MS", "200");
    }

    let run = run(&cli, f.request("hi")).await;

    assert_eq!(run.session_id, Some(session_of(&stdout)), "{name}");
    let log = std::fs::read(f.log()).unwrap();
    match expect {
        Expect::Completed(text) => {
            assert_eq!(run.exit, AgentExit::Completed, "{name}");
            assert_eq!(run.final_text, text, "{name}");
            assert_eq!(run.structured, None, "{name}");
        }
        Expect::Structured(json) => {
            assert_eq!(run.exit, AgentExit::Completed, "{name}");
            let expected: Value = serde_json::from_str(json).unwrap();
            assert_eq!(run.structured, Some(expected), "{name}");
        }
        Expect::Failed(kind, reason) => {
            let AgentExit::Failed {
                kind: got,
                reason: why,
            } = &run.exit
            else {
                panic!("{name}: {:?}", run.exit);
            };
            assert_eq!(*got, kind, "{name}: {why}");
            assert!(why.contains(reason), "{name}: {why}");
            assert_eq!(run.final_text, "", "{name}");
        }
        Expect::ContextLimit => {
            assert_eq!(run.exit, AgentExit::ContextLimit, "{name}");
            assert_eq!(run.log_path.as_deref(), Some(f.log().as_path()));
        }
    }
    if matches!(expect, Expect::ContextLimit) {
        // Cut mid-stream: the log holds what was read, a prefix of the stdout.
        assert!(stdout.starts_with(&log) && !log.is_empty(), "{name}");
    } else {
        assert!(log == stdout, "{name}: the log is not the stdout");
        let with_result = !name.starts_with("sigterm");
        assert_eq!(run.turns.is_some(), with_result, "{name}");
        assert_eq!(run.cost_usd.is_some(), with_result, "{name}");
    }
    f.assert_nothing_left();
}

#[tokio::test]
async fn a_rejected_rate_limit_ends_as_rate_limited_until_the_reset() {
    let f = Fixture::new();
    let resets_at = 1_778_565_600_u64;
    let path = f.transcript(
        "rate-limited",
        &[
            init("s-rl"),
            json!({"type": "rate_limit_event", "session_id": "s-rl", "rate_limit_info": {
                "status": "rejected", "resetsAt": resets_at, "rateLimitType": "five_hour"}}),
            json!({"type": "assistant", "session_id": "s-rl", "error": "rate_limit",
                "is_api_error_message": true, "message": {"id": "e1", "model": "<synthetic>",
                "content": [{"type": "text", "text": "You've hit your limit · resets 2pm"}],
                "usage": {"input_tokens": 0}}}),
            json!({"type": "result", "subtype": "success", "is_error": true,
                "terminal_reason": "api_error", "api_error_status": 429, "session_id": "s-rl",
                "result": "You've hit your limit · resets 2pm", "num_turns": 1}),
        ],
    );
    let cli = f.fake(&[
        ("FAKE_CLAUDE_TRANSCRIPT", &path),
        ("FAKE_CLAUDE_EXIT_CODE", "1"),
    ]);

    let run = run(&cli, f.request("hi")).await;

    let until = UNIX_EPOCH + Duration::from_secs(resets_at);
    assert_eq!(run.exit, AgentExit::RateLimited { until });
}

#[tokio::test]
async fn the_cli_s_own_compaction_completes_when_ralph_s_tiers_are_not_reached() {
    let f = Fixture::new();
    let path = format!("{TRANSCRIPTS}/autocompact.jsonl");
    let cli = f.fake(&[("FAKE_CLAUDE_TRANSCRIPT", &path)]);
    let events = Events::default();
    let request = f
        .request("Do the thing")
        .context(ContextThresholds::new(0.996, 0.998, 0.999))
        .on_event(events.sink());

    let run = run(&cli, request).await;

    assert_eq!(run.exit, AgentExit::Completed);
    assert_eq!(run.final_text, "Finished after compaction. <TASK_DONE>");
    assert!(events.pressure().is_empty());
    assert_eq!(
        run.usage.context_tokens, 12_126,
        "the context after the boundary"
    );
}

// ---------------------------------------------------------------------------------------
// Clocks, stopping, and what is left behind

#[tokio::test]
async fn a_silent_cli_times_out_and_is_gone() {
    let f = Fixture::new();
    let cli = f
        .fake(&[("FAKE_CLAUDE_HANG_AFTER", "1")])
        .idle_timeout(Duration::from_millis(300));
    let started = Instant::now();

    let run = run(&cli, f.request("x")).await;

    assert_eq!(
        run.exit,
        AgentExit::Silent {
            after: Duration::from_millis(300)
        }
    );
    assert!(started.elapsed() < PROMPTLY, "{:?}", started.elapsed());
    assert_eq!(run.session_id.as_deref(), Some("fake-session"));
    f.assert_nothing_left();
}

#[tokio::test]
async fn the_request_s_timeout_bounds_the_whole_run() {
    let f = Fixture::new();
    // Lines keep coming (so the idle clock never fires), but far too slowly.
    let cli = f.fake(&[("FAKE_CLAUDE_DELAY_MS", "10000")]);
    let started = Instant::now();

    let run = run(&cli, f.request("x").timeout(Duration::from_millis(300))).await;

    assert_eq!(run.exit, AgentExit::TimedOut);
    assert!(started.elapsed() < PROMPTLY, "{:?}", started.elapsed());
    f.assert_nothing_left();
}

#[tokio::test]
async fn a_stop_mid_run_ends_it_promptly() {
    let f = Fixture::new();
    let events = Events::default();
    let (stop, sink) = stop_on_session(&events);
    let cli = f.fake(&[("FAKE_CLAUDE_HANG_AFTER", "1")]);
    let started = Instant::now();

    let run = run(&cli, f.request("x").stop(stop).on_event(sink)).await;

    assert_eq!(run.exit, AgentExit::Stopped);
    assert!(started.elapsed() < PROMPTLY, "{:?}", started.elapsed());
    f.assert_nothing_left();
}

#[tokio::test]
async fn a_stop_before_the_run_starts_ends_it_at_once() {
    let f = Fixture::new();
    let stop = StopToken::new();
    stop.stop();

    let run = run(
        &f.fake(&[("FAKE_CLAUDE_HANG_AFTER", "1")]),
        f.request("x").stop(stop),
    )
    .await;

    assert_eq!(run.exit, AgentExit::Stopped);
    f.assert_nothing_left();
}

#[tokio::test]
async fn a_cli_ignoring_sigterm_is_killed_after_the_grace() {
    let f = Fixture::new();
    let cli = f
        .fake(&[
            ("FAKE_CLAUDE_HANG_AFTER", "1"),
            ("FAKE_CLAUDE_IGNORE_TERM", "1"),
        ])
        .idle_timeout(Duration::from_millis(300))
        .grace(Duration::from_millis(200));
    let started = Instant::now();

    let run = run(&cli, f.request("x")).await;

    assert_eq!(
        run.exit,
        AgentExit::Silent {
            after: Duration::from_millis(300)
        }
    );
    assert!(started.elapsed() < PROMPTLY, "{:?}", started.elapsed());
    f.assert_nothing_left();
}

#[rstest]
#[case::exits_on_sigterm(false)]
#[case::ignores_sigterm(true)]
#[tokio::test]
async fn a_cli_lingering_after_its_result_completes_and_is_stopped(#[case] ignore_term: bool) {
    let f = Fixture::new();
    let ignore = if ignore_term { "1" } else { "0" };
    let cli = f
        .fake(&[
            ("FAKE_CLAUDE_LINGER_MS", "forever"),
            ("FAKE_CLAUDE_IGNORE_TERM", ignore),
        ])
        .result_grace(Duration::from_millis(200))
        .grace(Duration::from_millis(200));
    let started = Instant::now();

    let run = run(&cli, f.request("x")).await;

    assert_eq!(run.exit, AgentExit::Completed);
    assert_eq!(run.final_text, "Done.\n<TASK_DONE>");
    assert_eq!(run.turns, Some(1));
    assert!(started.elapsed() < PROMPTLY, "{:?}", started.elapsed());
    f.assert_nothing_left();
}

/// How a run with a grandchild ends.
#[derive(Debug, Clone, Copy)]
enum Ending {
    Completes,
    IdleTimeout,
    Stop,
}

#[rstest]
#[tokio::test]
async fn grandchildren_in_sessions_of_their_own_die_with_the_run(
    #[values(Ending::Completes, Ending::IdleTimeout, Ending::Stop)] ending: Ending,
    #[values("sleep 300", "nohup sleep 301 >/dev/null 2>&1 &")] command: &str,
) {
    let f = Fixture::new();
    let pidfile = f.path("grandchild.pid");
    let mut cli = f.fake(&[
        ("FAKE_CLAUDE_SPAWN", command),
        ("FAKE_CLAUDE_SPAWN_PIDFILE", pidfile.to_str().unwrap()),
    ]);
    let events = Events::default();
    let mut request = f.request("x").on_event(events.sink());
    match ending {
        Ending::Completes => {}
        Ending::IdleTimeout => {
            cli = cli
                .env("FAKE_CLAUDE_HANG_AFTER", "1")
                .idle_timeout(Duration::from_millis(300));
        }
        Ending::Stop => {
            cli = cli.env("FAKE_CLAUDE_HANG_AFTER", "1");
            let (stop, sink) = stop_on_session(&events);
            request = request.stop(stop).on_event(sink);
        }
    }

    let run = run(&cli, request).await;

    let expected = match ending {
        Ending::Completes => AgentExit::Completed,
        Ending::IdleTimeout => AgentExit::Silent {
            after: Duration::from_millis(300),
        },
        Ending::Stop => AgentExit::Stopped,
    };
    assert_eq!(run.exit, expected);
    let shell: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // In the sandbox the pid is one of its own PID namespace's: the test mark finds it.
    if ralph_loop_process::process::Sandbox::bubblewrap().is_err() {
        assert!(!alive(shell), "the grandchild's shell {shell} still runs");
    }
    f.assert_nothing_left(); // the shell, and its `sleep` too
    // What was killed is a fact of the run, and an event as it happens.
    assert!(run.leaked >= 1, "{run:?}");
    assert!(
        events
            .all()
            .iter()
            .any(|e| matches!(e, AgentEvent::LeftoversKilled { count } if *count >= 1)),
        "{:?}",
        events.all()
    );
}

#[tokio::test]
async fn dropping_the_run_kills_everything_it_started() {
    let f = Fixture::new();
    let pidfile = f.path("grandchild.pid");
    let cli = f.fake(&[
        ("FAKE_CLAUDE_HANG_AFTER", "1"),
        ("FAKE_CLAUDE_SPAWN", "sleep 300"),
        ("FAKE_CLAUDE_SPAWN_PIDFILE", pidfile.to_str().unwrap()),
    ]);
    let events = Events::default();
    let request = f.request("x").on_event(events.sink());
    let mut started = Box::pin(cli.run(request));

    // Run until the session is known, then drop the future.
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        tokio::select! {
            _ = &mut started => panic!("the run ended by itself"),
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
        if events
            .all()
            .iter()
            .any(|e| matches!(e, AgentEvent::Session { .. }))
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no session reported"
        );
    }
    assert!(!f.survivors().is_empty());
    drop(started);

    f.assert_nothing_left();
}

// ---------------------------------------------------------------------------------------
// Errors

#[tokio::test]
async fn a_usage_error_is_fatal_and_carries_the_cli_s_stderr() {
    let f = Fixture::new();
    let cli = f.fake(&[
        ("FAKE_CLAUDE_EXIT_AFTER", "0"),
        (
            "FAKE_CLAUDE_STDERR",
            "error: unknown option '--frobnicate'\n",
        ),
    ]);

    let run = run(&cli, f.request("x")).await;

    let AgentExit::Failed { kind, reason } = &run.exit else {
        panic!("{:?}", run.exit);
    };
    assert_eq!(*kind, FailureKind::Fatal, "{reason}");
    assert!(reason.contains("unknown option '--frobnicate'"), "{reason}");
    assert!(reason.contains("exited with code 1"), "{reason}");
    assert_eq!(run.session_id, None);
    f.assert_nothing_left();
}

#[tokio::test]
async fn a_crash_after_starting_is_a_failed_attempt_with_its_stderr() {
    let f = Fixture::new();
    let cli = f.fake(&[
        ("FAKE_CLAUDE_EXIT_AFTER", "2"),
        ("FAKE_CLAUDE_EXIT_CODE", "3"),
        ("FAKE_CLAUDE_STDERR", "panic: out of cheese\n"),
    ]);

    let run = run(&cli, f.request("x")).await;

    let AgentExit::Failed { kind, reason } = &run.exit else {
        panic!("{:?}", run.exit);
    };
    assert_eq!(*kind, FailureKind::Attempt, "{reason}");
    assert!(reason.contains("without a result line"), "{reason}");
    assert!(reason.contains("exited with code 3"), "{reason}");
    assert!(reason.contains("out of cheese"), "{reason}");
    assert_eq!(run.final_text, "");
}

#[tokio::test]
async fn a_missing_binary_is_a_spawn_error_naming_its_source() {
    let f = Fixture::new();
    let cli = f.cli().bin(f.path("no-such-claude"));

    let error = cli.run(f.request("x")).await.unwrap_err();

    let AgentError::Spawn { program, source } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
    assert!(program.contains("no-such-claude"), "{program}");
    assert!(program.contains("from claude.bin"), "{program}");
    assert!(error.to_string().contains("from claude.bin"), "{error}");
}

#[tokio::test]
async fn a_missing_workspace_is_an_error_naming_it() {
    let f = Fixture::new();
    let request = AgentRequest::new(Role::Build, "x", f.path("gone"));

    let error = f.cli().run(request).await.unwrap_err();

    assert!(error.to_string().contains("gone"), "{error}");
    f.assert_nothing_left();
}

#[tokio::test]
async fn a_log_that_cannot_be_written_is_an_error_and_leaves_nothing() {
    let f = Fixture::new();
    let cli = f.fake(&[("FAKE_CLAUDE_HANG_AFTER", "1")]);
    // A directory where the log file should be.
    std::fs::create_dir_all(f.log()).unwrap();

    let error = cli.run(f.request("x")).await.unwrap_err();

    let AgentError::Io { path, .. } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(path, &f.log());
    f.assert_nothing_left();
}

// ---------------------------------------------------------------------------------------
// A huge answer

#[tokio::test]
async fn a_huge_answer_completes_and_its_log_keeps_head_and_tail() {
    const HUGE: u64 = 100 << 20;
    let f = Fixture::new();

    let run = run(&f.fake(&[("FAKE_CLAUDE_HUGE", "100MiB")]), f.request("x")).await;

    assert_eq!(run.exit, AgentExit::Completed);
    assert!(run.final_text.ends_with("\n<TASK_DONE>"));
    assert!(run.final_text.len() < 1 << 20, "{}", run.final_text.len());
    assert_eq!(run.usage.output_tokens, (HUGE + 12).div_ceil(4));
    // Both lines (the assistant message and the result) passed the 8 MiB cap: a counted
    // fact of the run.
    assert_eq!(run.oversized_lines, 2, "{run:?}");
    assert_eq!(run.exit_code, Some(0));
    // Two copies of the answer plus the JSON around them passed through the log, which
    // keeps its first MiB and its last 4 MiB and counts the rest.
    let logged = std::fs::read(f.log()).unwrap();
    assert!(logged.len() < (5 << 20) + 200, "{}", logged.len());
    let text = String::from_utf8_lossy(&logged);
    assert!(text.contains(" bytes of output skipped"), "no marker");
    assert!(
        text.trim_end().ends_with('}'),
        "the result line's end is kept"
    );
    f.assert_nothing_left();
}

// ---------------------------------------------------------------------------------------
// Context pressure and compaction

fn init(session: &str) -> Value {
    json!({"type": "system", "subtype": "init", "session_id": session, "model": SONNET,
        "tools": ["Bash", "Edit", "Read"]})
}

/// An assistant message with `context` tokens in use.
fn assistant(session: &str, id: &str, context: u64, text: &str) -> Value {
    json!({"type": "assistant", "session_id": session, "parent_tool_use_id": null,
        "message": {"id": id, "type": "message", "role": "assistant", "model": SONNET,
            "content": [{"type": "text", "text": text}],
            "usage": {"input_tokens": 10, "cache_creation_input_tokens": 1000,
                "cache_read_input_tokens": context - 1010, "output_tokens": 20}}})
}

fn result(session: &str, text: &str, turns: u32, cost: f64) -> Value {
    json!({"type": "result", "subtype": "success", "is_error": false, "result": text,
        "session_id": session, "num_turns": turns, "total_cost_usd": cost,
        "terminal_reason": "completed",
        "usage": {"input_tokens": 10, "output_tokens": 20},
        "modelUsage": {SONNET: {"contextWindow": WINDOW, "inputTokens": 10}}})
}

/// What the CLI prints for `/compact` on a resumed session: the boundary, no API message of
/// the session itself, an empty result.
fn compacted(session: &str, pre: u64, post: Option<u64>) -> Vec<Value> {
    let mut lines = vec![
        init(session),
        json!({"type": "system", "subtype": "status", "status": "compacting",
            "session_id": session}),
    ];
    if let Some(post) = post {
        lines.push(json!({"type": "system", "subtype": "compact_boundary",
            "session_id": session,
            "compact_metadata": {"trigger": "manual", "pre_tokens": pre, "post_tokens": post}}));
    }
    lines.push(result(session, "", 1, 0.05));
    lines
}

/// A run that crosses the compact tier and stops there (the CLI's turn goes on; the fake
/// ends its stdout without a result, as a CLI interrupted by SIGINT before writing it).
fn over_compact_tier(session: &str) -> Vec<Value> {
    vec![
        init(session),
        assistant(session, "m1", 100_000, "Working."),
        assistant(session, "m2", 175_000, "Still working."), // 0.875
    ]
}

/// The fake replays `transcripts`, one per invocation.
fn per_invocation(f: &Fixture, transcripts: &[&str]) -> ClaudeCli {
    let counter = f.path("counter");
    f.recorded(f.fake(&[
        ("FAKE_CLAUDE_TRANSCRIPTS", &transcripts.join(",")),
        ("FAKE_CLAUDE_COUNTER", counter.to_str().unwrap()),
    ]))
}

#[tokio::test]
async fn the_warn_tier_is_reported_and_the_run_goes_on() {
    let f = Fixture::new();
    let path = f.transcript(
        "warn",
        &[
            init("s-w"),
            assistant("s-w", "m1", 150_000, "Working."), // 0.75
            assistant("s-w", "m2", 155_000, "Done.\n<TASK_DONE>"),
            result("s-w", "Done.\n<TASK_DONE>", 2, 0.2),
        ],
    );
    let events = Events::default();

    let run = run(
        &f.fake(&[("FAKE_CLAUDE_TRANSCRIPT", &path)]),
        f.request("x").on_event(events.sink()),
    )
    .await;

    assert_eq!(run.exit, AgentExit::Completed);
    assert_eq!(run.final_text, "Done.\n<TASK_DONE>");
    assert_eq!(events.pressure(), [("warn".to_owned(), 0.75)]);
    assert_eq!(run.usage.context_tokens, 155_000);
    assert_eq!(run.usage.context_window, Some(WINDOW));
}

#[tokio::test]
async fn the_kill_tier_ends_the_run_at_the_context_limit() {
    let f = Fixture::new();
    let path = f.transcript(
        "kill",
        &[
            init("s-k"),
            assistant("s-k", "m1", 192_000, "Working."), // 0.96
            result("s-k", "never read", 1, 0.1),
        ],
    );
    let events = Events::default();
    // The fake hangs after the message, as a CLI would go on working.
    let cli = f.fake(&[
        ("FAKE_CLAUDE_TRANSCRIPT", &path),
        ("FAKE_CLAUDE_HANG_AFTER", "2"),
    ]);

    let run = run(&cli, f.request("x").on_event(events.sink())).await;

    assert_eq!(run.exit, AgentExit::ContextLimit);
    assert_eq!(run.log_path.as_deref(), Some(f.log().as_path()));
    assert_eq!(run.session_id.as_deref(), Some("s-k"));
    assert_eq!(run.final_text, "");
    assert_eq!(events.pressure(), [("kill".to_owned(), 0.96)]);
    let log = std::fs::read_to_string(f.log()).unwrap();
    assert_eq!(log.lines().count(), 2);
    f.assert_nothing_left();
}

#[tokio::test]
async fn the_compact_tier_compacts_the_session_and_continues_it() {
    let f = Fixture::new();
    let first = f.transcript("first", &over_compact_tier("s-c"));
    let compact = f.transcript("compact", &compacted("s-c", 175_000, Some(20_000)));
    let cont = f.transcript(
        "continue",
        &[
            init("s-c"),
            assistant("s-c", "m3", 30_000, "Finished.\n<TASK_DONE>"),
            result("s-c", "Finished.\n<TASK_DONE>", 2, 0.4),
        ],
    );
    let cli = per_invocation(&f, &[&first, &compact, &cont]);
    let events = Events::default();

    let run = run(&cli, f.request("Build it.").on_event(events.sink())).await;

    assert_eq!(run.exit, AgentExit::Completed, "{:?}", events.notes());
    assert_eq!(run.final_text, "Finished.\n<TASK_DONE>");
    assert_eq!(run.session_id.as_deref(), Some("s-c"));
    assert_eq!(
        run.turns,
        Some(3),
        "the compaction's and the continuation's"
    );
    assert_eq!(run.cost_usd, Some(0.4), "the resumed session's total");
    assert_eq!(run.usage.context_tokens, 30_000);
    assert_eq!(events.pressure(), [("compact".to_owned(), 0.875)]);
    assert!(events.all().contains(&AgentEvent::Compacted {
        before: 0.875,
        after: 0.1
    }));
    assert!(
        events
            .notes()
            .iter()
            .any(|n| n == "compaction took the context from 0.88 to 0.10"),
        "{:?}",
        events.notes()
    );

    let records = f.records();
    assert_eq!(records.len(), 3);
    let args: Vec<Vec<String>> = records.iter().map(args_of).collect();
    assert_eq!(flag_value(&args[0], "--resume"), None);
    assert_eq!(records[0]["stdin"], "Build it.");
    assert_eq!(flag_value(&args[1], "--resume"), Some("s-c"));
    assert!(
        records[1]["stdin"]
            .as_str()
            .unwrap()
            .starts_with("/compact ")
    );
    assert_eq!(flag_value(&args[2], "--resume"), Some("s-c"));
    let prompt = records[2]["stdin"].as_str().unwrap();
    assert!(
        prompt.starts_with("Your context was compacted."),
        "{prompt}"
    );
    // Every process keeps the session for the next one.
    assert!(
        args.iter()
            .flatten()
            .all(|a| a != "--no-session-persistence")
    );

    // The log holds the three processes' stdout, in order.
    let log = std::fs::read_to_string(f.log()).unwrap();
    let expected: String = [&first, &compact, &cont]
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    assert_eq!(log, expected);
    f.assert_nothing_left();
}

/// Audit row 000-R53 (gap 8): a CLI whose `/compact` boundary gives no `post_tokens` and
/// reports the size in the result's usage (40,000 of 200,000) is shown as compacted to 20 %,
/// the figure it reported, not to 0 %; the task goes on.
#[tokio::test]
async fn a_compaction_is_shown_with_the_size_the_cli_reports_after_it() {
    let f = Fixture::new();
    let first = f.transcript("first", &over_compact_tier("s-r"));
    let mut sized = result("s-r", "", 1, 0.05);
    sized["usage"] = json!({"input_tokens": 40_000, "output_tokens": 300});
    let compact = f.transcript(
        "compact",
        &[
            init("s-r"),
            json!({"type": "system", "subtype": "compact_boundary", "session_id": "s-r",
                "compact_metadata": {"trigger": "manual", "pre_tokens": 175_000}}),
            sized,
        ],
    );
    let cont = f.transcript(
        "continue",
        &[
            init("s-r"),
            assistant("s-r", "m3", 45_000, "Finished.\n<TASK_DONE>"),
            result("s-r", "Finished.\n<TASK_DONE>", 2, 0.4),
        ],
    );
    let cli = per_invocation(&f, &[&first, &compact, &cont]);
    let events = Events::default();

    let run = run(&cli, f.request("Build it.").on_event(events.sink())).await;

    assert_eq!(run.exit, AgentExit::Completed, "{:?}", events.notes());
    let compacted: Vec<AgentEvent> = events
        .all()
        .into_iter()
        .filter(|e| matches!(e, AgentEvent::Compacted { .. }))
        .collect();
    assert_eq!(
        compacted,
        [AgentEvent::Compacted {
            before: 0.875,
            after: 0.2
        }]
    );
    f.assert_nothing_left();
}

#[rstest]
#[case::boundary_above_the_bar(Some(170_000))] // 0.85 > 0.80
#[case::no_boundary(None)]
#[tokio::test]
async fn a_compaction_that_does_not_free_enough_ends_at_the_context_limit(
    #[case] post: Option<u64>,
) {
    let f = Fixture::new();
    let first = f.transcript("first", &over_compact_tier("s-f"));
    let compact = f.transcript("compact", &compacted("s-f", 175_000, post));
    let never = f.transcript("never", &[init("s-f"), result("s-f", "no", 1, 0.0)]);
    let cli = per_invocation(&f, &[&first, &compact, &never]);

    let run = run(&cli, f.request("Build it.")).await;

    assert_eq!(run.exit, AgentExit::ContextLimit);
    assert_eq!(run.log_path.as_deref(), Some(f.log().as_path()));
    assert_eq!(run.final_text, "");
    assert_eq!(
        f.records().len(),
        2,
        "no continuation after a failed compaction"
    );
    f.assert_nothing_left();
}

#[tokio::test]
async fn a_context_that_keeps_growing_stops_after_two_compactions() {
    let f = Fixture::new();
    let first = f.transcript("first", &over_compact_tier("s-g"));
    let compact = f.transcript("compact", &compacted("s-g", 175_000, Some(20_000)));
    let cli = per_invocation(&f, &[&first, &compact, &first, &compact, &first]);
    let events = Events::default();

    let run = run(&cli, f.request("Build it.").on_event(events.sink())).await;

    assert_eq!(run.exit, AgentExit::ContextLimit);
    assert_eq!(f.records().len(), 5);
    assert!(
        events
            .notes()
            .iter()
            .any(|n| n.contains("after 2 compactions")),
        "{:?}",
        events.notes()
    );
    f.assert_nothing_left();
}

#[tokio::test]
async fn a_stop_at_the_compact_tier_does_not_compact() {
    let f = Fixture::new();
    let first = f.transcript("first", &over_compact_tier("s-s"));
    let compact = f.transcript("compact", &compacted("s-s", 175_000, Some(20_000)));
    let cli = per_invocation(&f, &[&first, &compact]);
    let stop = StopToken::new();
    let token = stop.clone();
    let events = move |event: AgentEvent| {
        if matches!(event, AgentEvent::ContextPressure { .. }) {
            token.stop();
        }
    };

    let run = run(&cli, f.request("Build it.").stop(stop).on_event(events)).await;

    assert_eq!(run.exit, AgentExit::Stopped);
    // The compacting process may have been started, but never the continuation.
    assert!(f.records().len() <= 2, "{:?}", f.records());
    f.assert_nothing_left();
}
