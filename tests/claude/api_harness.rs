//! The scripted Messages API (`crate::support::messages_api`) driving the real `claude` CLI directly,
//! without ralph: proves the harness speaks the protocol the CLI expects, and pins the CLI facts
//! the Claude agent's design relies on. Needs the real CLI (see `real_claude`).

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::support::messages_api::{ClaudeHome, MessagesApi, Reply, claude_or_skip, git_repo};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

/// Generous: a run against the local fake takes well under a second.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// One invocation of the real CLI against the fake API, with the canonical flags.
struct Claude<'a> {
    bin: PathBuf,
    api: &'a MessagesApi,
    home: &'a ClaudeHome,
    cwd: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    persist: bool,
}

/// What one run left behind.
#[derive(Debug)]
struct Run {
    status: ExitStatus,
    lines: Vec<Value>,
    stderr: String,
    elapsed: Duration,
}

impl<'a> Claude<'a> {
    fn new(bin: PathBuf, api: &'a MessagesApi, home: &'a ClaudeHome, cwd: &Path) -> Self {
        Self {
            bin,
            api,
            home,
            cwd: cwd.to_owned(),
            args: Vec::new(),
            env: Vec::new(),
            persist: false,
        }
    }

    fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.to_owned());
        self
    }

    fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Drop `--no-session-persistence`, so the session can be resumed.
    fn persist(mut self) -> Self {
        self.persist = true;
        self
    }

    fn command(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.bin);
        cmd.args([
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--bare",
        ])
        .arg("--dangerously-skip-permissions");
        if !self.persist {
            cmd.arg("--no-session-persistence");
        }
        cmd.args(&self.args)
            .envs(self.api.env())
            .envs(self.home.env())
            .envs(self.env.iter().cloned())
            .current_dir(&self.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// Prompt on stdin, then stdin closed, as the agent will do.
    async fn run(self, prompt: &str) -> Run {
        let started = Instant::now();
        let mut child = self.command().spawn().expect("spawn claude");
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(prompt.as_bytes()).await.unwrap();
        drop(stdin);
        let output = tokio::time::timeout(RUN_TIMEOUT, child.wait_with_output())
            .await
            .expect("claude finished in time")
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        Run {
            status: output.status,
            lines: stdout
                .lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
                .collect(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            elapsed: started.elapsed(),
        }
    }
}

impl Run {
    /// The last line, which must be the `result`.
    fn result(&self) -> &Value {
        let last = self
            .lines
            .last()
            .unwrap_or_else(|| panic!("no stdout: {self:?}"));
        assert_eq!(last["type"], "result", "{self:?}");
        last
    }

    fn count(&self, kind: &str, subtype: &str) -> usize {
        self.lines
            .iter()
            .filter(|l| l["type"] == kind && l["subtype"] == subtype)
            .count()
    }
}

/// The text of every user message of a request, joined by newlines (the CLI sends a string or
/// text blocks; it also slips in an empty `role:"system"` message, so roles are checked).
fn user_text(request: &Value) -> String {
    let texts = |content: &Value| -> Vec<String> {
        match content {
            Value::String(s) => vec![s.clone()],
            Value::Array(blocks) => blocks
                .iter()
                .filter_map(|b| b["text"].as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        }
    };
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .flat_map(|m| texts(&m["content"]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The content blocks of the last user message of a request.
fn last_user_blocks(request: &Value) -> Vec<Value> {
    let messages = request["messages"].as_array().unwrap();
    let last = messages.iter().rev().find(|m| m["role"] == "user").unwrap();
    last["content"].as_array().cloned().unwrap_or_default()
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn tool_flow_creates_the_file_and_ends_with_the_marker() {
    let Some(bin) = claude_or_skip() else { return };
    let api = MessagesApi::with_script([
        Reply::text_then_tool(
            "I will create the file.",
            "Bash",
            json!({"command": "echo hello > hello.txt"}),
        ),
        Reply::text("Created.\n<TASK_DONE>"),
    ])
    .await;
    let (home, repo) = (ClaudeHome::new(), git_repo());

    let run = Claude::new(bin, &api, &home, repo.path())
        .run("Create hello.txt containing hello")
        .await;

    assert!(run.status.success(), "{run:?}");
    let result = run.result();
    assert_eq!(result["is_error"], false);
    assert!(result["result"].as_str().unwrap().ends_with("<TASK_DONE>"));
    let file = std::fs::read_to_string(repo.path().join("hello.txt")).unwrap();
    assert_eq!(file, "hello\n");

    let requests = api.requests().await;
    assert_eq!(requests.len(), 2);
    assert_eq!(user_text(&requests[0]), "Create hello.txt containing hello");
    assert_eq!(tool_names(&requests[0]), ["Bash", "Edit", "Read"]);
    let tool_result = &last_user_blocks(&requests[1])[0];
    assert_eq!(tool_result["type"], "tool_result", "{tool_result}");
    assert_eq!(tool_result["is_error"], false, "{tool_result}");
    assert_eq!(api.remaining(), 0);
}

#[tokio::test]
async fn a_500_is_retried_then_the_run_succeeds() {
    let Some(bin) = claude_or_skip() else { return };
    let api = MessagesApi::with_script([
        Reply::status(500, "boom"),
        Reply::text("recovered <TASK_DONE>"),
    ])
    .await;
    let (home, repo) = (ClaudeHome::new(), git_repo());

    let run = Claude::new(bin, &api, &home, repo.path())
        .env("CLAUDE_CODE_MAX_RETRIES", "1")
        .run("hi")
        .await;

    assert!(run.status.success(), "{run:?}");
    assert_eq!(run.count("system", "api_retry"), 1, "{run:?}");
    assert_eq!(run.result()["is_error"], false);
    assert_eq!(run.result()["result"], "recovered <TASK_DONE>");
    assert_eq!(api.requests().await.len(), 2);
}

#[tokio::test]
async fn a_401_without_retries_fails_the_run() {
    let Some(bin) = claude_or_skip() else { return };
    let api = MessagesApi::with_script([Reply::status(401, "invalid x-api-key")]).await;
    let (home, repo) = (ClaudeHome::new(), git_repo());

    let run = Claude::new(bin, &api, &home, repo.path())
        .env("CLAUDE_CODE_MAX_RETRIES", "0")
        .run("hi")
        .await;

    assert_eq!(run.status.code(), Some(1), "{run:?}");
    let result = run.result();
    assert_eq!(result["is_error"], true, "{result}");
    assert_eq!(result["api_error_status"], 401, "{result}");
    assert_eq!(api.requests().await.len(), 1);
}

#[tokio::test]
async fn a_trivial_bare_run_only_posts_messages() {
    let Some(bin) = claude_or_skip() else { return };
    let api =
        MessagesApi::with_script([Reply::text("hi <TASK_DONE>").usage(7, 150_000, 300)]).await;
    let (home, repo) = (ClaudeHome::new(), git_repo());

    let run = Claude::new(bin, &api, &home, repo.path()).run("hi").await;

    assert!(run.status.success(), "{run:?}");
    println!("trivial run took {:?}", run.elapsed);
    let endpoints = api.endpoints().await;
    assert_eq!(
        endpoints,
        [("POST".into(), "/v1/messages?beta=true".into())]
    );
    // The scripted usage reaches the assistant line, where context pressure is read.
    let assistant = run.lines.iter().find(|l| l["type"] == "assistant").unwrap();
    let usage = &assistant["message"]["usage"];
    assert_eq!(usage["input_tokens"], 7, "{usage}");
    assert_eq!(usage["cache_read_input_tokens"], 150_000, "{usage}");
    assert_eq!(usage["cache_creation_input_tokens"], 300, "{usage}");
}

#[tokio::test]
async fn a_stalled_reply_runs_into_api_timeout_and_is_retried() {
    let Some(bin) = claude_or_skip() else { return };
    let api = MessagesApi::with_script([
        Reply::stall(Duration::from_secs(30)),
        Reply::text("after the stall"),
    ])
    .await;
    let (home, repo) = (ClaudeHome::new(), git_repo());

    let run = Claude::new(bin, &api, &home, repo.path())
        .env("API_TIMEOUT_MS", "1000")
        .env("CLAUDE_CODE_MAX_RETRIES", "1")
        .run("hi")
        .await;

    assert!(run.status.success(), "{run:?}");
    assert_eq!(run.count("system", "api_retry"), 1, "{run:?}");
    assert_eq!(run.result()["result"], "after the stall");
    assert!(run.elapsed < Duration::from_secs(20), "{:?}", run.elapsed);
}

#[tokio::test]
async fn json_schema_adds_a_structured_output_tool_and_ends_the_run_on_its_call() {
    let Some(bin) = claude_or_skip() else { return };
    let api = MessagesApi::with_script([
        Reply::tool_use("StructuredOutput", json!({"ok": true, "n": 3})),
        Reply::text("never asked for"),
    ])
    .await;
    let (home, repo) = (ClaudeHome::new(), git_repo());
    let schema = json!({
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"}},
        "required": ["ok"],
    });

    let run = Claude::new(bin, &api, &home, repo.path())
        .arg("--json-schema")
        .arg(&schema.to_string())
        .run("answer")
        .await;

    assert!(run.status.success(), "{run:?}");
    let requests = api.requests().await;
    let tools = requests[0]["tools"].as_array().unwrap();
    let tool = tools.iter().find(|t| t["name"] == "StructuredOutput");
    assert_eq!(
        tool.expect("a StructuredOutput tool")["input_schema"],
        schema
    );
    let result = run.result();
    assert_eq!(
        result["structured_output"],
        json!({"ok": true, "n": 3}),
        "{result}"
    );
    assert_eq!(result["result"], r#"{"n":3,"ok":true}"#, "{result}");
    // The tool call ends the run: no second request, though num_turns says 2.
    assert_eq!((requests.len(), api.remaining()), (1, 1));
    assert_eq!(result["num_turns"], 2, "{result}");
}

#[tokio::test]
async fn max_turns_1_runs_the_tool_then_stops_with_error_max_turns() {
    let Some(bin) = claude_or_skip() else { return };
    let touch = json!({"command": "touch ran.txt"});
    let api = MessagesApi::with_script([Reply::tool_use("Bash", touch)]).await;
    let (home, repo) = (ClaudeHome::new(), git_repo());

    let run = Claude::new(bin, &api, &home, repo.path())
        .arg("--max-turns")
        .arg("1")
        .run("loop")
        .await;

    assert_eq!(run.status.code(), Some(1), "{run:?}");
    let result = run.result();
    assert_eq!(result["subtype"], "error_max_turns", "{result}");
    assert_eq!(result["terminal_reason"], "max_turns", "{result}");
    assert_eq!(result["is_error"], true, "{result}");
    assert_eq!(result["num_turns"], 2, "{result}");
    assert!(
        repo.path().join("ran.txt").exists(),
        "the last turn's tool ran"
    );
    assert_eq!(api.requests().await.len(), 1);
}

#[tokio::test]
async fn resume_sends_the_old_conversation_then_the_new_prompt() {
    let Some(bin) = claude_or_skip() else { return };
    let api = MessagesApi::with_script([
        Reply::text("first answer"),
        Reply::text("second answer <TASK_DONE>"),
    ])
    .await;
    let (home, repo) = (ClaudeHome::new(), git_repo());

    // Only a persisted session can be resumed; the resuming run itself need not persist.
    let first = Claude::new(bin.clone(), &api, &home, repo.path())
        .persist()
        .run("first prompt")
        .await;
    assert!(first.status.success(), "{first:?}");
    let session = first.result()["session_id"].as_str().unwrap().to_owned();
    let second = Claude::new(bin, &api, &home, repo.path())
        .arg("--resume")
        .arg(&session)
        .run("second prompt")
        .await;

    assert!(second.status.success(), "{second:?}");
    let result = second.result();
    assert_eq!(result["result"], "second answer <TASK_DONE>");
    assert_eq!(
        result["session_id"],
        session.as_str(),
        "the session id is kept"
    );
    let requests = api.requests().await;
    let roles: Vec<_> = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "system", "assistant", "user"]);
    assert_eq!(user_text(&requests[1]), "first prompt\nsecond prompt");
    // `usage` is this run's; total_cost_usd and modelUsage add up the whole session.
    let first_cost = first.result()["total_cost_usd"].as_f64().unwrap();
    let total = result["total_cost_usd"].as_f64().unwrap();
    assert!(total > first_cost * 1.5, "{first_cost} then {total}");
}

#[tokio::test]
async fn resuming_an_unknown_session_fails_before_any_request() {
    let Some(bin) = claude_or_skip() else { return };
    let api = MessagesApi::start().await;
    let (home, repo) = (ClaudeHome::new(), git_repo());

    let run = Claude::new(bin, &api, &home, repo.path())
        .arg("--resume")
        .arg("00000000-1111-4222-8333-944445555666")
        .run("hi")
        .await;

    assert_eq!(run.status.code(), Some(1), "{run:?}");
    assert!(
        run.stderr
            .starts_with("No conversation found with session ID"),
        "{run:?}"
    );
    let result = run.result();
    assert_eq!(result["subtype"], "error_during_execution", "{result}");
    assert_eq!(result["is_error"], true, "{result}");
    assert!(api.requests().await.is_empty());
}

/// `(pid, environ)` of every `sleep 30x` process whose cwd is `dir`: the cwd tells them apart
/// from other people's sleeps on the machine.
fn sleeps_in(dir: &Path) -> Vec<(i32, Vec<String>)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let proc_dir = entry.path();
        let Ok(cmdline) = std::fs::read(proc_dir.join("cmdline")) else {
            continue;
        };
        let is_sleep = cmdline.starts_with(b"sleep\0" as &[u8]) && cmdline[6..].starts_with(b"30");
        let in_dir = std::fs::read_link(proc_dir.join("cwd")).is_ok_and(|cwd| cwd == dir);
        if !(is_sleep && in_dir) {
            continue;
        }
        let Ok(environ) = std::fs::read(proc_dir.join("environ")) else {
            continue;
        };
        let vars = environ
            .split(|b| *b == 0)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect();
        found.push((pid, vars));
    }
    found
}

#[tokio::test]
async fn bash_tool_commands_inherit_the_cli_environment_and_outlive_it() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let Some(bin) = claude_or_skip() else { return };
    let command = "sleep 300 & nohup sleep 301 >/dev/null 2>&1 & \
                   setsid sleep 302 >/dev/null 2>&1 & echo started";
    let api = MessagesApi::with_script([
        Reply::tool_use("Bash", json!({"command": command})),
        Reply::text("started them"),
    ])
    .await;
    let (home, repo) = (ClaudeHome::new(), git_repo());
    let repo_path = repo.path().canonicalize().unwrap();

    let run = Claude::new(bin, &api, &home, repo.path())
        .env("RALPH_RUN_COOKIE", "abc123")
        .run("start background jobs")
        .await;
    assert!(run.status.success(), "{run:?}");

    // The CLI has exited; whatever is still running leaked.
    let sleeps = sleeps_in(&repo_path);
    for (pid, _) in &sleeps {
        let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
    }
    assert_eq!(
        sleeps.len(),
        3,
        "all three background sleeps outlive the CLI"
    );
    for (pid, vars) in &sleeps {
        assert!(
            vars.iter().any(|v| v == "RALPH_RUN_COOKIE=abc123"),
            "pid {pid}"
        );
        // The API key reaches the tools too.
        assert!(
            vars.iter().any(|v| v == "ANTHROPIC_API_KEY=sk-test"),
            "pid {pid}"
        );
        assert!(vars.iter().any(|v| v == "CLAUDECODE=1"), "pid {pid}");
    }
}
