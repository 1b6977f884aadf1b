//! A scripted fake of the Anthropic Messages API, for driving the real `claude` CLI offline.
//!
//! [`MessagesApi::start`] serves `POST /v1/messages` as SSE on 127.0.0.1, answering each request
//! with the next [`Reply`] of a script; every other endpoint gets a harmless `200 {}`.
//! [`MessagesApi::env`] and [`ClaudeHome::env`] give the environment the CLI needs to talk to it.
//!
//! When the script runs out, the server answers a final text `script exhausted` (stop_reason
//! `end_turn`) rather than an error: an error would start the CLI's retry loop (10 retries,
//! minutes of backoff by default), while a text ends the run at once and shows up in its result.
//!
//! Facts measured with this harness against the real CLI 2.1.328 (`--bare`, stdin prompt;
//! `tests/claude/api_harness.rs` keeps each one as a test):
//! - Requests: only `POST /v1/messages?beta=true`, one per model turn; nothing else (no
//!   `count_tokens`, no `HEAD /`) with `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`. Each request's
//!   `messages` holds an empty `{"role":"system","content":[]}` entry after the first user message.
//! - A trivial run takes 0.75–1.4 s from spawn to exit on a loaded 2-core machine; the CLI's own
//!   `duration_ms` is only 120–280 ms of that.
//! - Bash tool commands inherit the CLI's whole environment (a `RALPH_RUN_COOKIE` given to the
//!   CLI, and also `ANTHROPIC_API_KEY`), plus `CLAUDECODE=1`, `CLAUDE_CODE_SESSION_ID`,
//!   `CLAUDE_PID`. `sleep 300 &`, `nohup sleep 301 &` and `setsid sleep 302 &` all outlive a
//!   normal exit, reparented to pid 1, each in its own process group.
//! - `--json-schema S` adds a `StructuredOutput` tool (`input_schema` = S) to the request. The
//!   model's call to it ends the run at once (no further request): the result line has
//!   `structured_output` = the call's input and `result` = the same JSON as text.
//! - `--resume <session_id>` works when the first run persisted its session (no
//!   `--no-session-persistence`) into the same `CLAUDE_CONFIG_DIR`; the resuming run may pass
//!   `--no-session-persistence` (then it is not appended to the transcript) and may use another
//!   cwd. Its first request holds the old messages, then the new prompt; the session id is kept;
//!   `total_cost_usd`/`modelUsage` add up the persisted session, `usage` is this run's only.
//!   An unknown id: stderr `No conversation found with session ID: …`, result
//!   `error_during_execution`, exit 1, no request.
//! - `--max-turns 1` with a tool_use reply: the tool runs, then result `error_max_turns`
//!   (`terminal_reason:max_turns`, `num_turns:2`), exit 1, after one request.
//! - `Reply::stall` with `API_TIMEOUT_MS=1000`: the CLI gives up on the headers after 1 s and
//!   retries (one `system/api_retry` line).

#![allow(dead_code)]

use std::collections::VecDeque;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use wiremock::matchers::{any, method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// The pinned CLI version the harness was measured against.
pub const CLAUDE_VERSION: &str = "2.1.328";

/// One content block of a scripted assistant message.
#[derive(Debug, Clone)]
enum Block {
    Text(String),
    ToolUse { name: String, input: Value },
}

#[derive(Debug, Clone)]
enum Answer {
    /// A streamed assistant message.
    Message(Vec<Block>),
    /// An HTTP error with an Anthropic-shaped JSON body.
    Status { code: u16, message: String },
    /// A 429 whose subscription rate limit is rejected until `after` from when it is sent.
    RateLimited { after: Duration },
}

/// The `message_start` usage of a scripted message.
#[derive(Debug, Clone, Copy)]
struct Usage {
    input: u64,
    cache_read: u64,
    cache_creation: u64,
}

/// The answer to one `POST /v1/messages` request.
#[derive(Debug, Clone)]
pub struct Reply {
    answer: Answer,
    usage: Option<Usage>,
    delay: Option<Duration>,
}

impl Reply {
    fn message(blocks: Vec<Block>) -> Self {
        Self {
            answer: Answer::Message(blocks),
            usage: None,
            delay: None,
        }
    }

    /// One text block, stop_reason `end_turn`.
    pub fn text(text: impl Into<String>) -> Self {
        Self::message(vec![Block::Text(text.into())])
    }

    /// Several text blocks in one message, stop_reason `end_turn`.
    pub fn text_blocks<I, S>(texts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::message(texts.into_iter().map(|t| Block::Text(t.into())).collect())
    }

    /// One tool_use block, stop_reason `tool_use`.
    pub fn tool_use(name: impl Into<String>, input: Value) -> Self {
        Self::message(vec![tool_block(name, input)])
    }

    /// A text block then a tool_use block in the same message (as real models often answer).
    pub fn text_then_tool(text: impl Into<String>, name: impl Into<String>, input: Value) -> Self {
        Self::message(vec![Block::Text(text.into()), tool_block(name, input)])
    }

    /// Adds another tool_use block to a message (parallel tool calls).
    pub fn and_tool(mut self, name: impl Into<String>, input: Value) -> Self {
        if let Answer::Message(blocks) = &mut self.answer {
            blocks.push(tool_block(name, input));
        }
        self
    }

    /// An HTTP error `code` with body `{"type":"error","error":{"type":<by code>,"message":…}}`.
    pub fn status(code: u16, message: impl Into<String>) -> Self {
        Self {
            answer: Answer::Status {
                code,
                message: message.into(),
            },
            usage: None,
            delay: None,
        }
    }

    /// A 429 as the API sends it to a subscriber over their five-hour limit: the
    /// `anthropic-ratelimit-unified-*` headers say rejected, resetting `after` from when the
    /// reply is sent (rounded up to a whole second). The CLI reads those headers only when
    /// logged in ([`MessagesApi::subscriber_env`]); then it prints a rejected
    /// `rate_limit_event` with `resetsAt`.
    pub fn rate_limited(after: Duration) -> Self {
        Self {
            answer: Answer::RateLimited { after },
            usage: None,
            delay: None,
        }
    }

    /// The server stays silent for `delay` (no headers), then answers a text `stall over`.
    pub fn stall(delay: Duration) -> Self {
        Self::text("stall over").delayed(delay)
    }

    /// Delays this reply (headers included) by `delay`.
    pub fn delayed(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Sets the `message_start` usage, e.g. to fake context pressure. Without it, input_tokens
    /// is about request_bytes / 4 and the cache counts are 0.
    pub fn usage(mut self, input: u64, cache_read: u64, cache_creation: u64) -> Self {
        self.usage = Some(Usage {
            input,
            cache_read,
            cache_creation,
        });
        self
    }

    fn template(&self, request: &Request) -> ResponseTemplate {
        let template = match &self.answer {
            Answer::Message(blocks) => sse_template(blocks, self.usage, request),
            Answer::Status { code, message } => error_template(*code, message),
            Answer::RateLimited { after } => rate_limited_template(*after),
        };
        match self.delay {
            Some(delay) => template.set_delay(delay),
            None => template,
        }
    }
}

fn tool_block(name: impl Into<String>, input: Value) -> Block {
    Block::ToolUse {
        name: name.into(),
        input,
    }
}

/// A process-wide counter, so message and tool_use ids never repeat across replies or servers.
fn next_id(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!(
        "{prefix}_harness{:016}",
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Anthropic's error `type` for an HTTP status.
fn error_type(code: u16) -> &'static str {
    match code {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

fn error_template(code: u16, message: &str) -> ResponseTemplate {
    let body = json!({
        "type": "error",
        "error": {"type": error_type(code), "message": message},
    });
    ResponseTemplate::new(code).set_body_json(body)
}

fn rate_limited_template(after: Duration) -> ResponseTemplate {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let reset = (now + after).as_secs() + 1;
    let reset = reset.to_string();
    error_template(429, "You have hit your limit")
        .insert_header("anthropic-ratelimit-unified-status", "rejected")
        .insert_header("anthropic-ratelimit-unified-reset", reset.as_str())
        .insert_header(
            "anthropic-ratelimit-unified-representative-claim",
            "five_hour",
        )
        .insert_header("anthropic-ratelimit-unified-5h-status", "rejected")
        .insert_header("anthropic-ratelimit-unified-5h-reset", reset.as_str())
}

fn sse_template(blocks: &[Block], usage: Option<Usage>, request: &Request) -> ResponseTemplate {
    let model = request
        .body_json::<Value>()
        .ok()
        .and_then(|body| body["model"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "claude-harness".to_owned());
    let usage = usage.unwrap_or(Usage {
        input: request.body.len() as u64 / 4,
        cache_read: 0,
        cache_creation: 0,
    });
    let body = sse_body(blocks, usage, &model);
    ResponseTemplate::new(200)
        .insert_header("cache-control", "no-cache")
        .set_body_raw(body, "text/event-stream")
}

fn event(out: &mut String, value: Value) {
    let name = value["type"].as_str().unwrap_or("unknown").to_owned();
    out.push_str(&format!("event: {name}\ndata: {value}\n\n"));
}

/// The whole SSE stream of one assistant message.
fn sse_body(blocks: &[Block], usage: Usage, model: &str) -> String {
    let mut out = String::new();
    event(&mut out, message_start(usage, model));
    let mut output_tokens = 1;
    for (index, block) in blocks.iter().enumerate() {
        output_tokens += block_events(&mut out, index, block);
    }
    let stop_reason = if blocks.iter().any(|b| matches!(b, Block::ToolUse { .. })) {
        "tool_use"
    } else {
        "end_turn"
    };
    event(
        &mut out,
        json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": output_tokens},
        }),
    );
    event(&mut out, json!({"type": "message_stop"}));
    out
}

fn message_start(usage: Usage, model: &str) -> Value {
    json!({
        "type": "message_start",
        "message": {
            "id": next_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": {
                "input_tokens": usage.input,
                "cache_read_input_tokens": usage.cache_read,
                "cache_creation_input_tokens": usage.cache_creation,
                "output_tokens": 1,
            },
        },
    })
}

/// Start, one delta, stop. Returns a rough output-token count for the block.
fn block_events(out: &mut String, index: usize, block: &Block) -> u64 {
    let (start, delta, len) = match block {
        Block::Text(text) => (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": text}),
            text.len(),
        ),
        Block::ToolUse { name, input } => {
            let partial = input.to_string();
            let len = partial.len();
            (
                json!({"type": "tool_use", "id": next_id("toolu"), "name": name, "input": {}}),
                json!({"type": "input_json_delta", "partial_json": partial}),
                len,
            )
        }
    };
    event(
        out,
        json!({"type": "content_block_start", "index": index, "content_block": start}),
    );
    event(
        out,
        json!({"type": "content_block_delta", "index": index, "delta": delta}),
    );
    event(out, json!({"type": "content_block_stop", "index": index}));
    len as u64 / 4 + 1
}

/// Hands out the script, one reply per `/v1/messages` request.
struct Script(Arc<Mutex<VecDeque<Reply>>>);

impl Respond for Script {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let next = self.0.lock().expect("script lock").pop_front();
        next.unwrap_or_else(|| Reply::text("script exhausted"))
            .template(request)
    }
}

/// The fake API server and its script.
#[derive(Debug)]
pub struct MessagesApi {
    server: MockServer,
    script: Arc<Mutex<VecDeque<Reply>>>,
}

impl MessagesApi {
    /// A server of its own (not wiremock's pool, so a CLI still retrying from another test can
    /// never eat this test's script), with an empty script.
    pub async fn start() -> Self {
        let server = MockServer::builder().start().await;
        let script = Arc::new(Mutex::new(VecDeque::new()));
        Mock::given(method("POST"))
            .and(path("/v1/messages"))
            .respond_with(Script(script.clone()))
            .with_priority(1)
            .mount(&server)
            .await;
        // Whatever else the CLI may call (count_tokens, HEAD /, …) must not fail a run.
        Mock::given(any())
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({})))
            .with_priority(255)
            .mount(&server)
            .await;
        Self { server, script }
    }

    /// A server with `replies` as its script.
    pub async fn with_script(replies: impl IntoIterator<Item = Reply>) -> Self {
        let api = Self::start().await;
        api.push_all(replies);
        api
    }

    /// Appends one reply to the script.
    pub fn push(&self, reply: Reply) {
        self.script.lock().expect("script lock").push_back(reply);
    }

    /// Appends replies to the script, in order.
    pub fn push_all(&self, replies: impl IntoIterator<Item = Reply>) {
        self.script.lock().expect("script lock").extend(replies);
    }

    /// Replies not consumed yet.
    pub fn remaining(&self) -> usize {
        self.script.lock().expect("script lock").len()
    }

    /// `http://127.0.0.1:PORT`.
    pub fn uri(&self) -> String {
        self.server.uri()
    }

    /// The bodies of the `POST /v1/messages` requests received so far, in order.
    pub async fn requests(&self) -> Vec<Value> {
        self.received()
            .await
            .into_iter()
            .filter(|r| r.method.as_str() == "POST" && r.url.path() == "/v1/messages")
            .map(|r| r.body_json().expect("a /v1/messages body is JSON"))
            .collect()
    }

    /// `(method, path?query)` of every request received so far, in order.
    pub async fn endpoints(&self) -> Vec<(String, String)> {
        self.received()
            .await
            .into_iter()
            .map(|r| {
                let query = r.url.query().map(|q| format!("?{q}")).unwrap_or_default();
                (r.method.to_string(), format!("{}{query}", r.url.path()))
            })
            .collect()
    }

    async fn received(&self) -> Vec<Request> {
        self.server
            .received_requests()
            .await
            .expect("request recording is on")
    }

    /// The environment that points the CLI at this server. `CLAUDE_CODE_MAX_RETRIES` is left to
    /// the caller (the CLI's default is 10 retries with backoff).
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            pair("ANTHROPIC_BASE_URL", &self.uri()),
            pair("ANTHROPIC_API_KEY", "sk-test"),
            pair("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ];
        // As root the CLI refuses --dangerously-skip-permissions unless it believes it is sandboxed.
        if running_as_root() {
            env.push(pair("IS_SANDBOX", "1"));
        }
        env
    }
}

impl MessagesApi {
    /// As [`env`](Self::env), but logged in as a subscriber (`CLAUDE_CODE_OAUTH_TOKEN`, no API
    /// key): the CLI then reads the subscription rate-limit headers
    /// ([`Reply::rate_limited`]).
    pub fn subscriber_env(&self) -> Vec<(String, String)> {
        self.env()
            .into_iter()
            .filter(|(k, _)| k != "ANTHROPIC_API_KEY")
            .chain([pair("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-test")])
            .collect()
    }
}

fn pair(key: &str, value: &str) -> (String, String) {
    (key.to_owned(), value.to_owned())
}

/// `/proc/self` is owned by the process's effective uid: no libc call needed.
fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// A fresh `CLAUDE_CONFIG_DIR` (sessions, `.claude.json`, shell snapshots), removed on drop, so
/// runs never see the user's `~/.claude` or each other's state.
#[derive(Debug)]
pub struct ClaudeHome(tempfile::TempDir);

impl ClaudeHome {
    pub fn new() -> Self {
        Self(tempfile::tempdir().expect("temp CLAUDE_CONFIG_DIR"))
    }

    pub fn path(&self) -> &std::path::Path {
        self.0.path()
    }

    /// `CLAUDE_CONFIG_DIR`, and `HOME` too: the Bash tool runs `bash -l`, which would
    /// otherwise run the machine's own profile — a `pyenv init` there starts a background
    /// `pyenv rehash` that the run's cleanup kills mid-way, leaving pyenv's lock behind so
    /// that every later login shell on the machine waits on it for a minute.
    pub fn env(&self) -> Vec<(String, String)> {
        let dir = self.path().to_string_lossy();
        vec![pair("CLAUDE_CONFIG_DIR", &dir), pair("HOME", &dir)]
    }
}

impl Default for ClaudeHome {
    fn default() -> Self {
        Self::new()
    }
}

/// The real CLI to test against: `$RALPH_CLAUDE_BIN`, else `claude` on `PATH`.
///
/// Without either, returns `None` when `RALPH_SKIP_REAL_CLAUDE=1` (the caller prints "skipped"
/// and returns), and panics otherwise, with install instructions. Under `CI=true` it never skips.
pub fn real_claude() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("RALPH_CLAUDE_BIN").filter(|b| !b.is_empty()) {
        return Some(PathBuf::from(bin));
    }
    if let Some(bin) = on_path("claude") {
        return Some(bin);
    }
    let in_ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let skip = std::env::var("RALPH_SKIP_REAL_CLAUDE").is_ok_and(|v| v == "1");
    if skip && !in_ci {
        return None;
    }
    panic!(
        "these tests need the real Claude Code CLI {CLAUDE_VERSION}, found neither \
         $RALPH_CLAUDE_BIN nor `claude` on PATH. Install it with\n  \
         npm install --prefix ~/.cache/ralph-claude/{CLAUDE_VERSION} @anthropic-ai/claude-code@{CLAUDE_VERSION}\n  \
         export RALPH_CLAUDE_BIN=~/.cache/ralph-claude/{CLAUDE_VERSION}/node_modules/.bin/claude\n\
         or set RALPH_SKIP_REAL_CLAUDE=1 to skip them (never skipped when CI=true)."
    );
}

fn on_path(name: &str) -> Option<PathBuf> {
    let dirs = std::env::var_os("PATH")?;
    std::env::split_paths(&dirs)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// The real CLI, or `None` after printing why the test is skipped.
#[allow(clippy::print_stdout)]
pub fn claude_or_skip() -> Option<PathBuf> {
    let bin = real_claude();
    if bin.is_none() {
        println!("skipped: no real claude CLI (RALPH_SKIP_REAL_CLAUDE=1)");
    }
    bin
}

/// A temp dir with `git init` done, as the agent's workspaces are.
pub fn git_repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("git")
        .args(["init", "--quiet"])
        .current_dir(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    dir
}

/// Live processes (zombies excluded) whose environment holds `key=value`: a test sets a
/// unique marker in the agent's environment, which every process it starts inherits.
pub fn alive_with_env(key: &str, value: &str) -> Vec<i32> {
    let needle = format!("{key}={value}").into_bytes();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if !environ
            .split(|b| *b == 0)
            .any(|var| var == needle.as_slice())
        {
            continue;
        }
        let zombie = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(") ")
                    .map(|(_, rest)| rest.starts_with('Z'))
            })
            .unwrap_or(true);
        if !zombie {
            found.push(pid);
        }
    }
    found
}
