//! A scripted fake of the OpenAI Responses API, for driving the real `codex` and `opencode`
//! CLIs offline.
//!
//! [`ResponsesApi::start`] serves `POST /v1/responses` as SSE on 127.0.0.1, answering each
//! request with the next [`Reply`]; when the script runs out it answers `script exhausted`.
//! [`ResponsesApi::args`] and [`ResponsesApi::env`] point the CLI at it through a custom
//! model provider (`-c model_providers.fake={…}`), with one retry on errors and one of a
//! turn whose stream broke off.
//!
//! Facts measured against the real CLI 0.169.0 (`codex exec --json`, prompt on stdin):
//! - One `POST /v1/responses` per model turn (`stream: true`); the shell tool is the function
//!   `exec_command` with `{"cmd": "…"}`; its result comes back as a `function_call_output`.
//! - Events on stdout: `thread.started`, `turn.started`, `item.started`/`item.completed`
//!   (`agent_message`, `command_execution`, `error`), `turn.completed` with `usage`, or
//!   `error` and `turn.failed` with the message, exit 1.
//! - A 429 `usage_limit_reached` with `resets_at` reads "… try again at 4:25 AM." (local
//!   time); a 401 reads "unexpected status 401 Unauthorized: …"; a 5xx after the retries
//!   reads "We’re currently experiencing high demand, …".
//! - A turn the CLI retries (a 429 with `retry-after`, waited out; a stream that ends
//!   before `response.completed` or says `response.failed`) prints an `error` event
//!   "Reconnecting... 1/1 (…)", then the turn goes on: `item.completed` and
//!   `turn.completed`, exit 0.
//! - opencode 1.18.33 retries every failed call itself (waiting out `retry-after`), and a
//!   stream broken off mid-answer as a new step, printing nothing of it.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// The pinned CLI version the harness was measured against.
pub const CODEX_VERSION: &str = "0.169.0";

/// One scripted model turn.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Output items: a message's text, or a shell command call.
    Items(Vec<Item>, Option<Duration>),
    /// An HTTP error status with an OpenAI-style error body.
    Status(u16, Value),
    /// A 429 rate limit (not a usage limit) saying `retry-after: secs`: the CLI waits, then
    /// sends the request again.
    RetryAfter(u64),
    /// The start of a message's text, then the stream breaks off: it ends without
    /// `response.completed`, or with `response.failed` when the error is given.
    BrokenOff(String, Option<Value>),
}

#[derive(Debug, Clone)]
pub enum Item {
    Text(String),
    Shell(String),
}

impl Reply {
    pub fn text(text: impl Into<String>) -> Self {
        Reply::Items(vec![Item::Text(text.into())], None)
    }

    pub fn shell(cmd: impl Into<String>) -> Self {
        Reply::Items(vec![Item::Shell(cmd.into())], None)
    }

    pub fn text_then_shell(text: impl Into<String>, cmd: impl Into<String>) -> Self {
        Reply::Items(vec![Item::Text(text.into()), Item::Shell(cmd.into())], None)
    }

    /// Headers and body only after `delay`.
    pub fn stall(delay: Duration) -> Self {
        Reply::Items(vec![Item::Text("late".into())], Some(delay))
    }

    pub fn status(code: u16) -> Self {
        Reply::Status(
            code,
            json!({"error": {"type": "server_error", "message": format!("scripted {code}")}}),
        )
    }

    /// A 429 saying `retry-after: secs`.
    pub fn retry_after(secs: u64) -> Self {
        Reply::RetryAfter(secs)
    }

    /// `text` started, then the stream ends without `response.completed`: what a dropped
    /// connection looks like to the CLI.
    pub fn dropped(text: impl Into<String>) -> Self {
        Reply::BrokenOff(text.into(), None)
    }

    /// `text` started, then `response.failed` with a server error.
    pub fn failed_midway(text: impl Into<String>) -> Self {
        Reply::BrokenOff(
            text.into(),
            Some(json!({"code": "server_error", "message": "scripted failure mid-stream"})),
        )
    }

    /// A usage limit that resets in `secs`.
    pub fn usage_limit(secs: u64) -> Self {
        let resets = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs()
            + secs;
        Reply::Status(
            429,
            json!({"error": {"type": "usage_limit_reached", "message": "The usage limit has been reached", "resets_at": resets}}),
        )
    }
}

/// One turn as the API streams it: each item added, its text or arguments as a delta, then
/// done; the AI SDK (opencode) needs every step, the Codex CLI reads the `done` items.
fn sse(items: &[Item], turn: usize, shell_tool: &str) -> String {
    let mut out = String::new();
    let mut seq = 0;
    let mut event = |kind: &str, mut data: Value| {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(seq);
        seq += 1;
        out.push_str(&format!("event: {kind}\ndata: {data}\n\n"));
    };
    let id = format!("resp_{turn}");
    event(
        "response.created",
        json!({"response": {"id": id, "created_at": 1, "model": "m", "status": "in_progress", "output": []}}),
    );
    for (i, item) in items.iter().enumerate() {
        match item {
            Item::Text(text) => {
                let msg = format!("msg_{turn}_{i}");
                event(
                    "response.output_item.added",
                    json!({"output_index": i, "item":
                    {"type": "message", "role": "assistant", "id": msg, "status": "in_progress", "content": []}}),
                );
                event(
                    "response.content_part.added",
                    json!({"item_id": msg, "output_index": i,
                    "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
                );
                event(
                    "response.output_text.delta",
                    json!({"item_id": msg, "output_index": i,
                    "content_index": 0, "delta": text}),
                );
                event(
                    "response.output_text.done",
                    json!({"item_id": msg, "output_index": i,
                    "content_index": 0, "text": text}),
                );
                event(
                    "response.output_item.done",
                    json!({"output_index": i, "item":
                    {"type": "message", "role": "assistant", "id": msg, "status": "completed",
                     "content": [{"type": "output_text", "text": text, "annotations": []}]}}),
                );
            }
            Item::Shell(cmd) => {
                let fc = format!("fc_{turn}_{i}");
                let call = format!("call_{turn}_{i}");
                // The Codex CLI's exec_command takes `cmd`; opencode's bash `command` and a
                // `description`, and refuses any other key.
                let args = if shell_tool == "bash" {
                    json!({"command": cmd, "description": "run it"})
                } else {
                    json!({"cmd": cmd})
                }
                .to_string();
                let name = shell_tool;
                event(
                    "response.output_item.added",
                    json!({"output_index": i, "item":
                    {"type": "function_call", "id": fc, "call_id": call, "name": name, "arguments": ""}}),
                );
                event(
                    "response.function_call_arguments.delta",
                    json!({"item_id": fc,
                    "output_index": i, "delta": args}),
                );
                event(
                    "response.output_item.done",
                    json!({"output_index": i, "item":
                    {"type": "function_call", "id": fc, "call_id": call, "name": name,
                     "arguments": args, "status": "completed"}}),
                );
            }
        }
    }
    event(
        "response.completed",
        json!({"response": {"id": id, "created_at": 1, "model": "m", "status": "completed", "output": [],
            "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 40},
            "output_tokens": 10, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 110}}}),
    );
    out
}

/// A turn whose stream breaks off in the middle of a message: `text` has started, then the
/// stream ends (no `response.completed`), or `response.failed` says `error`.
fn broken_off(text: &str, error: Option<&Value>, turn: usize) -> String {
    let id = format!("resp_{turn}");
    let msg = format!("msg_{turn}_0");
    let mut events = vec![
        (
            "response.created",
            json!({"response": {"id": id, "created_at": 1, "model": "m", "status": "in_progress", "output": []}}),
        ),
        (
            "response.output_item.added",
            json!({"output_index": 0, "item":
            {"type": "message", "role": "assistant", "id": msg, "status": "in_progress", "content": []}}),
        ),
        (
            "response.content_part.added",
            json!({"item_id": msg, "output_index": 0,
            "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
        ),
        (
            "response.output_text.delta",
            json!({"item_id": msg, "output_index": 0, "content_index": 0, "delta": text}),
        ),
    ];
    if let Some(error) = error {
        events.push((
            "response.failed",
            json!({"response": {"id": id, "created_at": 1, "model": "m", "status": "failed",
                "output": [], "error": error}}),
        ));
    }
    events
        .into_iter()
        .enumerate()
        .map(|(seq, (kind, mut data))| {
            data["type"] = json!(kind);
            data["sequence_number"] = json!(seq);
            format!("event: {kind}\ndata: {data}\n\n")
        })
        .collect()
}

#[derive(Clone, Default)]
struct Script {
    replies: Arc<Mutex<VecDeque<Reply>>>,
    turns: Arc<Mutex<usize>>,
}

impl Respond for Script {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        // The shell tool is `exec_command` in the Codex CLI, `bash` in opencode.
        let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
        let offers = |name: &str| {
            body["tools"]
                .as_array()
                .is_some_and(|tools| tools.iter().any(|t| t["name"] == name))
        };
        let shell_tool = if offers("bash") {
            "bash"
        } else {
            "exec_command"
        };
        // As the real API does, a strict schema outside structured outputs' subset is refused
        // before anything else (the scripted reply is not used).
        if let Err(problem) = strict_schema_problem(&body["text"]["format"]) {
            return ResponseTemplate::new(400).set_body_json(json!({"error": {
                "type": "invalid_request_error",
                "code": "invalid_json_schema",
                "param": "text.format.schema",
                "message": format!("Invalid schema for response_format 'codex_output_schema': {problem}"),
            }}));
        }
        let turn = {
            let mut turns = self.turns.lock().unwrap();
            *turns += 1;
            *turns
        };
        let reply = self
            .replies
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| Reply::text("script exhausted"));
        match reply {
            Reply::Items(items, delay) => {
                let template = ResponseTemplate::new(200)
                    .set_body_raw(sse(&items, turn, shell_tool), "text/event-stream");
                match delay {
                    Some(delay) => template.set_delay(delay),
                    None => template,
                }
            }
            Reply::Status(code, body) => ResponseTemplate::new(code).set_body_json(body),
            Reply::RetryAfter(secs) => ResponseTemplate::new(429)
                .insert_header("retry-after", secs.to_string().as_str())
                .set_body_json(json!({"error": {"type": "rate_limit_exceeded",
                    "code": "rate_limit_exceeded",
                    "message": format!("Rate limit reached. Please try again in {secs}s.")}})),
            Reply::BrokenOff(text, error) => ResponseTemplate::new(200)
                .set_body_raw(broken_off(&text, error.as_ref(), turn), "text/event-stream"),
        }
    }
}

/// The fake API and its script.
pub struct ResponsesApi {
    server: MockServer,
    script: Script,
}

impl ResponsesApi {
    pub async fn with_script(replies: impl IntoIterator<Item = Reply>) -> Self {
        let server = MockServer::start().await;
        let script = Script::default();
        script.replies.lock().unwrap().extend(replies);
        Mock::given(method("POST"))
            .and(path("/v1/responses"))
            .respond_with(script.clone())
            .mount(&server)
            .await;
        ResponsesApi { server, script }
    }

    /// The request bodies, in order.
    pub async fn requests(&self) -> Vec<Value> {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .filter_map(|r| serde_json::from_slice(&r.body).ok())
            .collect()
    }

    /// Arguments pointing the CLI at this server.
    pub fn args(&self) -> Vec<String> {
        vec![
            "-c".into(),
            format!(
                "model_providers.fake={{name=\"fake\",base_url=\"{}/v1\",wire_api=\"responses\",env_key=\"FAKE_OPENAI_KEY\",request_max_retries=1,stream_max_retries=1}}",
                self.server.uri()
            ),
            "-c".into(),
            "model_provider=\"fake\"".into(),
        ]
    }

    /// The environment: the key, and a throw-away `CODEX_HOME` and `HOME`.
    pub fn env(&self, home: &std::path::Path) -> Vec<(String, String)> {
        std::fs::create_dir_all(home.join("codex")).expect("CODEX_HOME");
        vec![
            ("FAKE_OPENAI_KEY".into(), "sk-fake".into()),
            (
                "CODEX_HOME".into(),
                home.join("codex").display().to_string(),
            ),
            ("HOME".into(), home.display().to_string()),
        ]
    }
}

impl ResponsesApi {
    /// opencode's environment: a throw-away `HOME` and `TMPDIR`, and a config whose `openai`
    /// provider is this server (model `openai/gpt-5-codex`).
    ///
    /// The `TMPDIR`: opencode 1.18.33 leaves a 5.5 MB native library in the temporary folder
    /// on every run that uses a tool; the throw-away folder keeps the suite from filling `/tmp`.
    pub fn opencode_env(&self, home: &std::path::Path) -> Vec<(String, String)> {
        let config = json!({
            "provider": {"openai": {"options": {"baseURL": format!("{}/v1", self.server.uri()),
                "apiKey": "sk-fake"}, "models": {"gpt-5-codex": {}}}},
            "autoupdate": false,
            "share": "disabled",
        });
        let tmp = home.join("tmp");
        std::fs::create_dir_all(&tmp).expect("TMPDIR");
        vec![
            ("HOME".into(), home.display().to_string()),
            ("TMPDIR".into(), tmp.display().to_string()),
            (
                "XDG_DATA_HOME".into(),
                home.join("data").display().to_string(),
            ),
            (
                "XDG_CONFIG_HOME".into(),
                home.join("config").display().to_string(),
            ),
            (
                "XDG_CACHE_HOME".into(),
                home.join("cache").display().to_string(),
            ),
            ("OPENCODE_CONFIG_CONTENT".into(), config.to_string()),
        ]
    }
}

/// The pinned opencode the tests were measured against.
pub const OPENCODE_VERSION: &str = "1.18.33";

/// The real opencode to test against: `$TEST_OPENCODE_BIN`, else `opencode` on `PATH`;
/// `None` (after saying so) when neither is there, except under `CI=true`.
#[allow(clippy::print_stdout)]
pub fn opencode_or_skip() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("TEST_OPENCODE_BIN").filter(|b| !b.is_empty()) {
        return Some(PathBuf::from(bin));
    }
    let on_path = std::env::var_os("PATH").and_then(|dirs| {
        std::env::split_paths(&dirs)
            .map(|d| d.join("opencode"))
            .find(|c| c.is_file())
    });
    if on_path.is_some() {
        return on_path;
    }
    assert!(
        std::env::var("CI").map_or(true, |v| v != "true"),
        "CI needs the pinned opencode {OPENCODE_VERSION}: .ci/run installs it and sets TEST_OPENCODE_BIN"
    );
    println!(
        "skipped: no opencode (npm install --prefix ~/.cache/ralph-opencode/{OPENCODE_VERSION} opencode-ai@{OPENCODE_VERSION}; export TEST_OPENCODE_BIN=…/node_modules/.bin/opencode)"
    );
    None
}

/// The real CLI to test against: `$TEST_CODEX_BIN`, else `codex` on `PATH`; `None` (after
/// saying so) when neither is there, except under `CI=true`, where that is a failure.
#[allow(clippy::print_stdout)]
pub fn codex_or_skip() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("TEST_CODEX_BIN").filter(|b| !b.is_empty()) {
        return Some(PathBuf::from(bin));
    }
    let on_path = std::env::var_os("PATH").and_then(|dirs| {
        std::env::split_paths(&dirs)
            .map(|d| d.join("codex"))
            .find(|c| c.is_file())
    });
    if on_path.is_some() {
        return on_path;
    }
    assert!(
        std::env::var("CI").map_or(true, |v| v != "true"),
        "CI needs the pinned Codex CLI {CODEX_VERSION}: .ci/run installs it and sets TEST_CODEX_BIN"
    );
    println!(
        "skipped: no codex CLI (npm install --prefix ~/.cache/ralph-codex/{CODEX_VERSION} @openai/codex@{CODEX_VERSION}; export TEST_CODEX_BIN=…/node_modules/.bin/codex)"
    );
    None
}

/// The `format` values structured outputs accept.
const STRICT_FORMATS: [&str; 9] = [
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// What OpenAI's structured outputs refuse in a `strict` JSON schema (`text.format`): an
/// object whose `required` misses a property or that allows additional ones, `oneOf`,
/// `allOf`, `not`, or a `format` outside [`STRICT_FORMATS`].
fn strict_schema_problem(format: &Value) -> Result<(), String> {
    if format["type"] != "json_schema" || format["strict"] != true {
        return Ok(());
    }
    check_strict(&format["schema"], "root")
}

fn check_strict(schema: &Value, at: &str) -> Result<(), String> {
    match schema {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, item)| check_strict(item, &format!("{at}[{i}]"))),
        Value::Object(map) => {
            for keyword in ["oneOf", "allOf", "not"] {
                if map.contains_key(keyword) {
                    return Err(format!("In context={at}, '{keyword}' is not permitted."));
                }
            }
            if let Some(format) = map
                .get("format")
                .and_then(Value::as_str)
                .filter(|f| !STRICT_FORMATS.contains(f))
            {
                return Err(format!(
                    "In context={at}, '{format}' is not a valid format."
                ));
            }
            if let Some(properties) = map.get("properties").and_then(Value::as_object) {
                let required: Vec<&str> = map
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                if let Some(missing) = properties.keys().find(|k| !required.contains(&k.as_str())) {
                    return Err(format!(
                        "In context={at}, 'required' is required to be supplied and to be an array including every key in properties. Missing '{missing}'."
                    ));
                }
                if map.get("additionalProperties") != Some(&Value::Bool(false)) {
                    return Err(format!(
                        "In context={at}, 'additionalProperties' is required to be supplied and to be false."
                    ));
                }
                for (name, property) in properties {
                    check_strict(property, &format!("{at}, 'properties', '{name}'"))?;
                }
            }
            for keyword in ["items", "anyOf", "$defs", "definitions"] {
                if let Some(inner) = map.get(keyword) {
                    match (keyword, inner) {
                        ("$defs" | "definitions", Value::Object(defs)) => {
                            for (name, def) in defs {
                                check_strict(def, &format!("{at}, '{keyword}', '{name}'"))?;
                            }
                        }
                        _ => check_strict(inner, &format!("{at}, '{keyword}'"))?,
                    }
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}
