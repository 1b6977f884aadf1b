//! A scripted fake of the Gemini API, for driving the real `gemini` CLI offline.
//!
//! [`GeminiApi::with_script`] serves `POST /v1beta/models/{model}:streamGenerateContent` as
//! SSE on 127.0.0.1, answering each request with the next [`Reply`] (`script exhausted` once
//! it runs out); the router's `POST …:generateContent` gets its own answer, apart from the
//! script (see [`Router`]); every other endpoint gets `200 {}`. [`GeminiApi::env`] gives the
//! CLI a throw-away `HOME` whose settings select API-key authentication, the key, and
//! `GOOGLE_GEMINI_BASE_URL` pointing here.
//!
//! Facts measured against the real CLI 0.61.0 (`--prompt "" --output-format stream-json`,
//! prompt on stdin):
//! - Without `security.auth.selectedType` in its settings the CLI exits 41, "Invalid auth
//!   method selected.", before any request.
//! - The shell tool is the function `run_shell_command` with `{"command": "…"}`.
//! - Events: `init` (session id), `message` (user, then assistant with `delta: true`),
//!   `tool_use`, `tool_result`, `result` (`status` `success` or `error` with its message).
//! - A 5xx is retried by the CLI after about 9 s; a 429 with a per-day `QuotaFailure` ends
//!   at once: "You have exhausted your daily quota on this model."; a 401 ends at once with
//!   the API's error in the message.
//! - Without `--model` the model is `auto`: before the first model call of a write run
//!   (`--approval-mode yolo`) the CLI asks a router model to choose one, in a
//!   `POST /v1beta/models/gemini-3.5-flash-lite:generateContent` whose
//!   `generationConfig.responseJsonSchema` wants `{complexity_reasoning, complexity_score}`
//!   (1–100; below the threshold of 90 the run takes the flash model, `gemini-3.8-flash`,
//!   else pro). An answer it cannot read as that JSON (`{}`) is asked for 5 times, with
//!   backoff, ~93 s in all, before it falls back to pro, `gemini-3.1-pro-preview`.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use wiremock::matchers::{any, method, path_regex};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// The pinned CLI version the harness was measured against.
pub const GEMINI_VERSION: &str = "0.61.0";

/// `~/.gemini/settings.json`: API-key authentication, without which the CLI exits 41
/// (`docs/agents.md` shows the same to users).
pub const SETTINGS: &str = r#"{"security":{"auth":{"selectedType":"gemini-api-key"}}}"#;

/// One scripted model turn.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Parts of the model's message, sent after an optional delay.
    Parts(Vec<Value>, Option<Duration>),
    /// An HTTP error status with a Google-style error body.
    Status(u16, Value),
    /// The start of a message's text, then the stream breaks off: it ends (no finish
    /// reason, no usage), or sends the error given.
    BrokenOff(String, Option<Value>),
}

impl Reply {
    pub fn text(text: impl Into<String>) -> Self {
        Reply::Parts(vec![json!({"text": text.into()})], None)
    }

    pub fn shell(cmd: impl Into<String>) -> Self {
        Reply::Parts(
            vec![
                json!({"functionCall": {"name": "run_shell_command", "args": {"command": cmd.into()}}}),
            ],
            None,
        )
    }

    pub fn text_then_shell(text: impl Into<String>, cmd: impl Into<String>) -> Self {
        Reply::Parts(
            vec![
                json!({"text": text.into()}),
                json!({"functionCall": {"name": "run_shell_command", "args": {"command": cmd.into()}}}),
            ],
            None,
        )
    }

    pub fn stall(delay: Duration) -> Self {
        Reply::Parts(vec![json!({"text": "late"})], Some(delay))
    }

    pub fn status(code: u16) -> Self {
        let status = if code == 401 {
            "UNAUTHENTICATED"
        } else {
            "UNAVAILABLE"
        };
        Reply::Status(
            code,
            json!({"error": {"code": code, "message": format!("scripted {code}"), "status": status}}),
        )
    }

    /// A 429 for a per-minute quota, retried after `secs` (its `RetryInfo`).
    pub fn retry_after(secs: u64) -> Self {
        Reply::Status(
            429,
            json!({"error": {"code": 429, "message": "Quota exceeded for requests per minute",
                "status": "RESOURCE_EXHAUSTED", "details": [
                {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [
                    {"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                     "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}]},
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": format!("{secs}s")}]}}),
        )
    }

    /// `text` started, then the stream ends without a finish reason.
    pub fn dropped(text: impl Into<String>) -> Self {
        Reply::BrokenOff(text.into(), None)
    }

    /// `text` started, then the stream sends a server error.
    pub fn failed_midway(text: impl Into<String>) -> Self {
        Reply::BrokenOff(
            text.into(),
            Some(
                json!({"error": {"code": 500, "message": "scripted failure mid-stream",
                "status": "INTERNAL"}}),
            ),
        )
    }

    /// A 429 for the daily quota, which the CLI does not retry.
    pub fn daily_quota() -> Self {
        Reply::Status(
            429,
            json!({"error": {"code": 429, "message": "Quota exceeded for requests per day",
                "status": "RESOURCE_EXHAUSTED", "details": [
                {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [
                    {"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                     "quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]},
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "3600s"}]}}),
        )
    }
}

#[derive(Clone, Default)]
struct Script(Arc<Mutex<VecDeque<Reply>>>);

impl Respond for Script {
    fn respond(&self, _request: &Request) -> ResponseTemplate {
        let reply = self
            .0
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| Reply::text("script exhausted"));
        match reply {
            Reply::Parts(parts, delay) => {
                let chunk = json!({"candidates": [{"content": {"role": "model", "parts": parts},
                    "finishReason": "STOP", "index": 0}],
                    "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 10,
                        "cachedContentTokenCount": 40, "totalTokenCount": 110}});
                let template = ResponseTemplate::new(200)
                    .set_body_raw(format!("data: {chunk}\r\n\r\n"), "text/event-stream");
                match delay {
                    Some(delay) => template.set_delay(delay),
                    None => template,
                }
            }
            Reply::Status(code, body) => ResponseTemplate::new(code).set_body_json(body),
            Reply::BrokenOff(text, error) => {
                let chunk = json!({"candidates": [{"content": {"role": "model",
                    "parts": [{"text": text}]}, "index": 0}]});
                let body = std::iter::once(chunk)
                    .chain(error)
                    .map(|data| format!("data: {data}\r\n\r\n"))
                    .collect::<String>();
                ResponseTemplate::new(200).set_body_raw(body, "text/event-stream")
            }
        }
    }
}

/// The router's answer. With no model set the CLI asks a router model which model a
/// request needs, in a `:generateContent` call (not streamed) whose
/// `generationConfig.responseJsonSchema` names the fields it wants: a complexity score
/// (Gemini 3's numerical router) or a model choice (the older classifier). It answers
/// "simple", so the run takes the flash model; being apart from the script, it leaves the
/// scripted replies to the model calls whether or not the CLI routes.
struct Router;

impl Respond for Router {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
        let wants = &body["generationConfig"]["responseJsonSchema"]["properties"];
        let choice = if wants.get("complexity_score").is_some() {
            json!({"complexity_reasoning": "one file to write", "complexity_score": 10})
        } else if wants.get("model_choice").is_some() {
            json!({"reasoning": "one file to write", "model_choice": "flash"})
        } else {
            // Not the router: what every other endpoint gets.
            return ResponseTemplate::new(200).set_body_json(json!({}));
        };
        ResponseTemplate::new(200).set_body_json(json!({"candidates": [{"content":
            {"role": "model", "parts": [{"text": choice.to_string()}]},
            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 5,
                "totalTokenCount": 10}}))
    }
}

/// The fake API and its script.
pub struct GeminiApi {
    server: MockServer,
}

impl GeminiApi {
    pub async fn with_script(replies: impl IntoIterator<Item = Reply>) -> Self {
        let server = MockServer::start().await;
        let script = Script::default();
        script.0.lock().unwrap().extend(replies);
        Mock::given(method("POST"))
            .and(path_regex(r":streamGenerateContent$"))
            .respond_with(script)
            .with_priority(1)
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(path_regex(r":generateContent$"))
            .respond_with(Router)
            .with_priority(2)
            .mount(&server)
            .await;
        Mock::given(any())
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({})))
            .with_priority(10)
            .mount(&server)
            .await;
        GeminiApi { server }
    }

    /// The bodies of the model requests, in order.
    pub async fn requests(&self) -> Vec<Value> {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .filter(|r| r.url.path().ends_with(":streamGenerateContent"))
            .filter_map(|r| serde_json::from_slice(&r.body).ok())
            .collect()
    }

    /// The model of each model request (not the router's), in order: `gemini-2.5-pro`.
    pub async fn models(&self) -> Vec<String> {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .filter_map(|r| r.url.path().strip_suffix(":streamGenerateContent"))
            .filter_map(|path| path.rsplit('/').next().map(str::to_owned))
            .collect()
    }

    /// The bodies of the router's requests (see [`Router`]), in order.
    pub async fn router_requests(&self) -> Vec<Value> {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .filter(|r| r.url.path().ends_with(":generateContent"))
            .filter_map(|r| serde_json::from_slice(&r.body).ok())
            .collect()
    }

    /// The environment: a `HOME` whose settings select API-key auth, the key, the URL.
    pub fn env(&self, home: &std::path::Path) -> Vec<(String, String)> {
        let settings = home.join(".gemini");
        std::fs::create_dir_all(&settings).expect("the settings folder");
        std::fs::write(settings.join("settings.json"), SETTINGS).expect("the settings");
        vec![
            ("HOME".into(), home.display().to_string()),
            ("GEMINI_API_KEY".into(), "fake-key".into()),
            ("GOOGLE_GEMINI_BASE_URL".into(), self.server.uri()),
        ]
    }
}

/// The real CLI to test against: `$TEST_GEMINI_BIN`, else `gemini` on `PATH`; `None` (after
/// saying so) when neither is there, except under `CI=true`, where that is a failure.
#[allow(clippy::print_stdout)]
pub fn gemini_or_skip() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("TEST_GEMINI_BIN").filter(|b| !b.is_empty()) {
        return Some(PathBuf::from(bin));
    }
    let on_path = std::env::var_os("PATH").and_then(|dirs| {
        std::env::split_paths(&dirs)
            .map(|d| d.join("gemini"))
            .find(|c| c.is_file())
    });
    if on_path.is_some() {
        return on_path;
    }
    assert!(
        std::env::var("CI").map_or(true, |v| v != "true"),
        "CI needs the pinned Gemini CLI {GEMINI_VERSION}: .ci/run installs it and sets TEST_GEMINI_BIN"
    );
    println!(
        "skipped: no gemini CLI (npm install --prefix ~/.cache/ralph-gemini/{GEMINI_VERSION} @google/gemini-cli@{GEMINI_VERSION}; export TEST_GEMINI_BIN=…/node_modules/.bin/gemini)"
    );
    None
}
