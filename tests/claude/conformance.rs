//! `ClaudeCli` against the **real** Claude Code CLI, which talks to a scripted Messages API
//! served on 127.0.0.1 (`crate::support::messages_api`). Needs the pinned CLI (see `real_claude`):
//! under `CI=true` these tests never skip.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crate::support::messages_api::{
    ClaudeHome, MessagesApi, Reply, alive_with_env, claude_or_skip, git_repo,
};
use ralph::agent::{AgentEvent, AgentExit, AgentRequest, AgentRun, Claim, FailureKind, Role};
use ralph::config::ContextThresholds;
use ralph::{Agent, ClaudeCli};
use ralph_loop_core::signal::{self, TaskSignal};
use serde_json::{Value, json};
use tempfile::TempDir;

/// Generous: a run against the local API takes about a second.
const RUN_TIMEOUT: Duration = Duration::from_secs(90);

/// One scripted run of the real CLI through `ClaudeCli`, in a fresh git repo.
struct Rig {
    claude: ClaudeCli,
    api: MessagesApi,
    repo: TempDir,
    logs: TempDir,
    home: ClaudeHome,
    /// A marker in the CLI's environment, inherited by everything it starts.
    mark: String,
}

impl Rig {
    async fn new(replies: impl IntoIterator<Item = Reply>) -> Option<Self> {
        let bin = claude_or_skip()?;
        let api = MessagesApi::with_script(replies).await;
        let home = ClaudeHome::new();
        let mark = format!(
            "{}-{}",
            std::process::id(),
            api.uri().replace([':', '/'], "")
        );
        let mut claude = ClaudeCli::new()
            .bin(bin)
            .max_retries(0)
            .idle_timeout(Duration::from_secs(60))
            .grace(Duration::from_secs(3))
            .env("TEST_RUN_MARK", &mark);
        for (key, value) in api.env().into_iter().chain(home.env()) {
            claude = claude.env(key, value);
        }
        Some(Rig {
            claude,
            api,
            repo: git_repo(),
            logs: tempfile::tempdir().unwrap(),
            home,
            mark,
        })
    }

    /// In the sandbox a run of `role` gets in the default mode.
    fn request(&self, role: Role, prompt: &str) -> AgentRequest {
        AgentRequest::new(role, prompt, self.repo.path())
            .sandbox(crate::support::sandbox_for(role, self.repo.path()))
            .log_path(self.logs.path().join("run.jsonl"))
            .timeout(RUN_TIMEOUT)
    }

    async fn run(&self, request: AgentRequest) -> AgentRun {
        self.claude.run(request).await.unwrap()
    }

    async fn build(&self, prompt: &str) -> AgentRun {
        self.run(self.request(Role::Build, prompt)).await
    }

    /// Processes the run started that are still alive.
    fn leftovers(&self) -> Vec<i32> {
        alive_with_env("TEST_RUN_MARK", &self.mark)
    }
}

fn failure_kind(run: &AgentRun) -> Option<FailureKind> {
    match &run.exit {
        AgentExit::Failed { kind, .. } => Some(*kind),
        _ => None,
    }
}

#[tokio::test]
async fn tool_flow_creates_the_file_and_ends_done() {
    let Some(rig) = Rig::new([
        Reply::text_then_tool(
            "I will create the file.",
            "Bash",
            json!({"command": "echo hello > hello.txt"}),
        ),
        Reply::text("Created hello.txt.\n<TASK_DONE>"),
    ])
    .await
    else {
        return;
    };

    let run = rig.build("Create hello.txt saying hello.").await;

    assert_eq!(run.exit, AgentExit::Completed, "{run:?}");
    assert_eq!(
        std::fs::read_to_string(rig.repo.path().join("hello.txt")).unwrap(),
        "hello\n"
    );
    assert_eq!(signal::parse(&run.final_text).task, TaskSignal::Done);
    assert!(
        run.session_id.is_some() && run.cost_usd.is_some(),
        "{run:?}"
    );
    assert_eq!(run.turns, Some(2));
    assert!(run.usage.input_tokens > 0 && run.usage.context_tokens > 0);
    let log = std::fs::read_to_string(run.log_path.as_ref().unwrap()).unwrap();
    assert!(log.lines().last().unwrap().contains(r#""type":"result""#));
    let prompt = &rig.api.requests().await[0];
    assert!(
        prompt
            .to_string()
            .contains("Create hello.txt saying hello.")
    );
    assert!(rig.leftovers().is_empty());
    // The session was kept only while the run could need it (compaction resumes it).
    let sessions = walk(&rig.home.path().join("projects"));
    assert!(
        sessions
            .iter()
            .all(|p| p.extension().is_none_or(|e| e != "jsonl")),
        "{sessions:?}"
    );
}

#[tokio::test]
async fn blocked_marker_is_a_completed_run_that_says_blocked() {
    let Some(rig) = Rig::new([Reply::text(
        "I cannot: the spec names no database.\n<TASK_BLOCKED reason=\"no database configured\">",
    )])
    .await
    else {
        return;
    };

    let run = rig.build("Migrate the database.").await;

    assert_eq!(run.exit, AgentExit::Completed, "{run:?}");
    assert_eq!(
        signal::parse(&run.final_text).task,
        TaskSignal::Blocked {
            reason: "no database configured".into()
        }
    );
}

#[tokio::test]
async fn a_question_marker_is_a_completed_run_that_asks_not_one_that_is_done() {
    let Some(rig) = Rig::new([Reply::text(
        "Done with the schema.\n<TASK_DONE>\nBut which database?\n<TASK_QUESTION question=\"Postgres or SQLite?\">",
    )])
    .await
    else {
        return;
    };

    let run = rig.build("Add the storage layer.").await;

    assert_eq!(run.exit, AgentExit::Completed, "{run:?}");
    assert_eq!(
        run.claim(),
        Claim::Question("Postgres or SQLite?".into()),
        "{}",
        run.final_text
    );
}

/// Claude Code's own question tool resolves with empty answers when nobody is at the
/// terminal, and the agent goes on as if told: ralph's runs never offer it, and a model that
/// calls it anyway gets an error, never an answer that lets it end the task done.
#[tokio::test]
async fn the_cli_s_ask_user_question_tool_is_never_offered_nor_answered() {
    let Some(rig) = Rig::new([
        Reply::tool_use(
            "ToolSearch",
            json!({"query": "select:AskUserQuestion", "max_results": 1}),
        ),
        Reply::tool_use(
            "AskUserQuestion",
            json!({"questions": [{"question": "Postgres or SQLite?", "header": "Database",
                "multiSelect": false, "options": [{"label": "Postgres", "description": "a server"},
                {"label": "SQLite", "description": "a file"}]}]}),
        ),
        Reply::text("Nobody answered.\n<TASK_QUESTION question=\"Postgres or SQLite?\">"),
    ])
    .await
    else {
        return;
    };

    // Not `--bare`, where the CLI offers only Bash, Edit and Read anyway.
    let claude = rig.claude.clone().bare(false);
    let run = claude
        .run(rig.request(Role::Build, "Add the storage layer."))
        .await
        .unwrap();

    assert_eq!(run.exit, AgentExit::Completed, "{run:?}");
    assert_ne!(run.claim(), Claim::Done, "{}", run.final_text);
    let requests = rig.api.requests().await;
    let offered: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(!offered.contains(&"AskUserQuestion"), "{offered:?}");
    // The search for it finds nothing, and the call the model made anyway came back as an
    // error, with no answer in it.
    let last = requests.last().unwrap()["messages"].as_array().unwrap();
    let results: Vec<Value> = last
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|block| block["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(
        results[0]
            .to_string()
            .contains("No matching deferred tools"),
        "{results:?}"
    );
    assert_eq!(results[1]["is_error"], true, "{results:?}");
}

/// Issue 38: the prompt's stable part goes to the CLI's system prompt, which the CLI sends
/// with a cache breakpoint at its end; the call's own part is the user's message after it.
#[tokio::test]
async fn the_stable_part_is_cached_before_a_breakpoint_of_its_own() {
    let Some(rig) = Rig::new([Reply::text("Done.\n<TASK_DONE>")]).await else {
        return;
    };
    let stable = "# Build One Task of a Spec\n\nThe spec: greet the World.\n";
    let own = "# Task: t-7\n\nWrite hello.txt.\n";
    let mut request = rig.request(Role::Build, &format!("{stable}{own}"));
    request.stable_prefix = stable.len();

    let run = rig.run(request).await;

    assert_eq!(run.claim(), Claim::Done, "{run:?}");
    let sent = &rig.api.requests().await[0];
    let system = sent["system"].as_array().unwrap();
    let last = system.last().unwrap();
    assert!(
        last["text"].as_str().unwrap().ends_with(stable),
        "the stable part ends the system prompt: {system:?}"
    );
    assert_eq!(
        last["cache_control"]["type"], "ephemeral",
        "a breakpoint after it"
    );
    let user = sent["messages"][0]["content"].to_string();
    assert!(
        user.contains("# Task: t-7") && !user.contains("greet the World"),
        "{user}"
    );
}

#[tokio::test]
async fn a_500_then_success_is_ridden_out_by_the_cli_retry() {
    let Some(rig) = Rig::new([
        Reply::status(500, "fake api_error"),
        Reply::text("Done.\n<TASK_DONE>"),
    ])
    .await
    else {
        return;
    };
    let retries = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let seen = retries.clone();
    let events = move |event: AgentEvent| {
        if let AgentEvent::ApiRetry { .. } = event {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    };
    let claude = rig.claude.clone().max_retries(1);

    let run = claude
        .run(rig.request(Role::Build, "Do it.").on_event(events))
        .await
        .unwrap();

    assert_eq!(run.exit, AgentExit::Completed, "{run:?}");
    assert_eq!(signal::parse(&run.final_text).task, TaskSignal::Done);
    assert_eq!(retries.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_500_after_the_retries_is_transient() {
    let Some(rig) = Rig::new([Reply::status(500, "fake api_error")]).await else {
        return;
    };

    let run = rig.build("Do it.").await;

    assert_eq!(failure_kind(&run), Some(FailureKind::Transient), "{run:?}");
}

#[tokio::test]
async fn a_401_is_fatal_with_a_clear_reason() {
    let Some(rig) = Rig::new([Reply::status(401, "invalid x-api-key")]).await else {
        return;
    };

    let run = rig.build("Do it.").await;

    let AgentExit::Failed { reason, kind } = &run.exit else {
        panic!("{run:?}");
    };
    assert_eq!(*kind, FailureKind::Fatal);
    assert!(reason.contains("401"), "{reason}");
}

#[tokio::test]
async fn max_turns_exceeded_is_a_failed_attempt() {
    let Some(rig) = Rig::new([
        Reply::tool_use("Bash", json!({"command": "echo one"})),
        Reply::tool_use("Bash", json!({"command": "echo two"})),
    ])
    .await
    else {
        return;
    };
    let claude = rig.claude.clone().max_turns(1);

    let run = claude.run(rig.request(Role::Build, "Loop.")).await.unwrap();

    let AgentExit::Failed { reason, kind } = &run.exit else {
        panic!("{run:?}");
    };
    assert_eq!(*kind, FailureKind::Attempt);
    assert!(
        reason.contains("max_turns") || reason.contains("turns"),
        "{reason}"
    );
    assert!(run.final_text.is_empty());
}

#[tokio::test]
async fn a_marker_in_an_earlier_turn_is_not_done() {
    let Some(rig) = Rig::new([
        Reply::text_then_tool("I am done.\n<TASK_DONE>", "Bash", json!({"command": "ls"})),
        Reply::text("Verified the listing; one more thing remains."),
    ])
    .await
    else {
        return;
    };

    let run = rig.build("Do it.").await;

    assert_eq!(run.exit, AgentExit::Completed, "{run:?}");
    assert_eq!(
        run.final_text,
        "Verified the listing; one more thing remains."
    );
    assert_eq!(signal::parse(&run.final_text).task, TaskSignal::None);
    // The marker is in the transcript, but not in the final answer.
    let log = std::fs::read_to_string(run.log_path.as_ref().unwrap()).unwrap();
    assert!(log.contains("<TASK_DONE>"));
}

#[tokio::test]
async fn a_stalled_stream_is_cut_by_the_idle_timeout_and_nothing_is_left() {
    let Some(rig) = Rig::new([Reply::stall(Duration::from_secs(120))]).await else {
        return;
    };
    let claude = rig
        .claude
        .clone()
        .idle_timeout(Duration::from_secs(3))
        .grace(Duration::from_secs(2));

    let started = std::time::Instant::now();
    let run = claude
        .run(rig.request(Role::Build, "Hello?"))
        .await
        .unwrap();

    let idle = AgentExit::Silent {
        after: Duration::from_secs(3),
    };
    assert_eq!(run.exit, idle, "{run:?}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the stall was cut"
    );
    assert!(rig.leftovers().is_empty(), "{:?}", rig.leftovers());
}

#[tokio::test]
async fn background_jobs_of_the_bash_tool_do_not_survive_the_run() {
    let Some(rig) = Rig::new([
        Reply::tool_use(
            "Bash",
            json!({"command": "sleep 300 & nohup sleep 301 >/dev/null 2>&1 & setsid sleep 302 >/dev/null 2>&1 & echo started"}),
        ),
        Reply::text("Started them.\n<TASK_DONE>"),
    ])
    .await
    else {
        return;
    };

    let run = rig.build("Start the background jobs.").await;

    assert_eq!(run.exit, AgentExit::Completed, "{run:?}");
    assert!(rig.leftovers().is_empty(), "{:?}", rig.leftovers());
}

#[tokio::test]
async fn a_stop_during_a_long_tool_call_leaves_nothing() {
    let Some(rig) = Rig::new([Reply::tool_use(
        "Bash",
        json!({"command": "setsid sleep 303 >/dev/null 2>&1 & sleep 304"}),
    )])
    .await
    else {
        return;
    };
    let stop = ralph::StopToken::new();
    let request = rig.request(Role::Build, "Sleep.").stop(stop.clone());
    let mark = rig.mark.clone();
    tokio::spawn(async move {
        // Stop once the tool is running: its sleep carries the mark.
        while alive_with_env("TEST_RUN_MARK", &mark).len() < 3 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stop.stop();
    });

    let run = rig.run(request).await;

    assert_eq!(run.exit, AgentExit::Stopped, "{run:?}");
    assert!(rig.leftovers().is_empty(), "{:?}", rig.leftovers());
}

#[tokio::test]
async fn verifier_runs_read_only_and_answers_through_structured_output() {
    let Some(rig) = Rig::new([Reply::tool_use(
        "StructuredOutput",
        json!({"accepted": true, "reason": "meets the spec"}),
    )])
    .await
    else {
        return;
    };
    let schema = json!({
        "type": "object",
        "properties": {"accepted": {"type": "boolean"}, "reason": {"type": "string"}},
        "required": ["accepted", "reason"]
    });

    let run = rig
        .run(
            rig.request(Role::Verify, "Judge t-1.")
                .schema(schema.clone()),
        )
        .await;

    assert_eq!(run.exit, AgentExit::Completed, "{run:?}");
    assert_eq!(
        run.structured,
        Some(json!({"accepted": true, "reason": "meets the spec"}))
    );
    let request = &rig.api.requests().await[0];
    let tools = request["tools"].as_array().unwrap();
    let structured = tools
        .iter()
        .find(|t| t["name"] == "StructuredOutput")
        .expect("the StructuredOutput tool");
    assert_eq!(structured["input_schema"]["required"], schema["required"]);
}

#[tokio::test]
async fn a_verifier_cannot_write_files() {
    let Some(rig) = Rig::new([
        Reply::tool_use("Bash", json!({"command": "touch written.txt"})),
        Reply::tool_use(
            "StructuredOutput",
            json!({"accepted": false, "reason": "could not write"}),
        ),
    ])
    .await
    else {
        return;
    };
    let schema = json!({"type": "object"});

    let run = rig
        .run(rig.request(Role::Verify, "Judge t-1.").schema(schema))
        .await;

    assert_eq!(run.exit, AgentExit::Completed, "{run:?}");
    assert!(!rig.repo.path().join("written.txt").exists());
}

#[tokio::test]
async fn context_at_the_compact_tier_is_compacted_and_the_task_continues() {
    let Some(rig) = Rig::new([
        // 870k of a 1M window after the first call: the compact tier (0.85).
        Reply::text_then_tool("Working.", "Bash", json!({"command": "sleep 5"}))
            .usage(3, 800_000, 70_000),
        // The CLI's `/compact` asks for a summary (in `<summary>` tags, or it asks again).
        Reply::text("<summary>Task: create done.txt. Nothing done yet.</summary>"),
        // The continuing run.
        Reply::text_then_tool("Continuing.", "Bash", json!({"command": "touch done.txt"}))
            .usage(3, 0, 3000),
        Reply::text("Created done.txt.\n<TASK_DONE>").usage(3, 3000, 100),
    ])
    .await
    else {
        return;
    };
    let tiers = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = tiers.clone();
    let events = move |event: AgentEvent| match event {
        AgentEvent::ContextPressure { tier, .. } => seen.lock().unwrap().push(tier),
        AgentEvent::Compacted { .. } => seen.lock().unwrap().push("compacted".into()),
        _ => {}
    };

    let run = rig
        .run(
            rig.request(Role::Build, "Create done.txt.")
                .context(ContextThresholds::default())
                .on_event(events),
        )
        .await;

    assert_eq!(run.exit, AgentExit::Completed, "{run:?}");
    assert_eq!(signal::parse(&run.final_text).task, TaskSignal::Done);
    assert!(rig.repo.path().join("done.txt").exists());
    let tiers = tiers.lock().unwrap().clone();
    assert!(tiers.contains(&"compact".to_owned()), "{tiers:?}");
    assert!(tiers.contains(&"compacted".to_owned()), "{tiers:?}");
    let requests = rig.api.requests().await;
    assert!(
        requests
            .last()
            .unwrap()
            .to_string()
            .contains("Continue the task"),
        "the last run continued the task after the compaction"
    );
    // The CLI handed ralph's compaction policy to the model: what to keep, the summary's
    // form (audit rows 000-R56 to 000-R59).
    let compaction = requests
        .iter()
        .map(ToString::to_string)
        .find(|r| r.contains("=== COMPACTED CONTEXT ==="))
        .expect("a request carrying ralph's compaction policy");
    for part in ["Preserve in full", "Discard:", "Uncommitted changes"] {
        assert!(compaction.contains(part), "missing {part:?}");
    }
    assert!(rig.leftovers().is_empty(), "{:?}", rig.leftovers());
}

#[tokio::test]
async fn context_at_the_kill_tier_ends_the_run_for_decomposition() {
    let Some(rig) =
        Rig::new([
            Reply::text_then_tool("Working.", "Bash", json!({"command": "sleep 5"}))
                .usage(3, 900_000, 60_000),
        ])
        .await
    else {
        return;
    };

    let run = rig.build("Do a huge task.").await;

    assert_eq!(run.exit, AgentExit::ContextLimit, "{run:?}");
    assert!(run.log_path.as_ref().unwrap().exists());
    assert!(rig.leftovers().is_empty(), "{:?}", rig.leftovers());
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .flat_map(|e| {
            let path = e.path();
            if path.is_dir() {
                walk(&path)
            } else {
                vec![path]
            }
        })
        .collect()
}

#[tokio::test]
async fn session_files_are_kept_only_when_asked() {
    let Some(rig) = Rig::new([
        Reply::text("One.\n<TASK_DONE>"),
        Reply::text("Two.\n<TASK_DONE>"),
    ])
    .await
    else {
        return;
    };
    let jsonl = |rig: &Rig| {
        walk(&rig.home.path().join("projects"))
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
            .count()
    };

    let run = rig.build("One.").await;
    assert_eq!(run.exit, AgentExit::Completed, "{run:?}");
    assert_eq!(jsonl(&rig), 0, "removed after the run");

    let keeping = rig.claude.clone().session_persistence(true);
    let run = keeping.run(rig.request(Role::Build, "Two.")).await.unwrap();
    assert_eq!(run.exit, AgentExit::Completed, "{run:?}");
    assert_eq!(jsonl(&rig), 1, "kept");
}

#[tokio::test]
async fn ralph_constructs_a_spec_with_the_real_cli() {
    let Some(rig) = Rig::new([
        // INVESTIGATE the spec's issue.
        Reply::tool_use(
            "StructuredOutput",
            json!({"tasks": [{"name": "Create hello.txt", "accept": "hello.txt says hello"}]}),
        ),
        // BUILD t-1.
        Reply::text_then_tool(
            "Creating it.",
            "Bash",
            json!({"command": "echo hello > hello.txt"}),
        ),
        Reply::text("Created.\n<TASK_DONE>"),
        // VERIFY t-1, then the gap analysis.
        Reply::tool_use(
            "StructuredOutput",
            json!({"verdict": "accept", "reason": "hello.txt says hello"}),
        ),
        Reply::tool_use("StructuredOutput", json!({"tasks": [], "issues": []})),
    ])
    .await
    else {
        return;
    };
    std::fs::write(
        rig.repo.path().join("spec.md"),
        "# Hello\nCreate hello.txt.\n",
    )
    .unwrap();
    let finished = std::sync::Arc::new(Finished::default());
    let ralph = ralph::Ralph::builder()
        .workspace(rig.repo.path())
        .agent(rig.claude.clone())
        .observer(finished.clone())
        .store(ralph::MemoryStore::new())
        .gate(ralph::ShellGate::new("hello", "grep -qx hello hello.txt"))
        .build()
        .unwrap();

    let outcome = ralph.construct("spec.md").await.unwrap();

    assert!(
        matches!(outcome, ralph::Outcome::Complete { .. }),
        "{outcome:?}"
    );
    assert_eq!(rig.api.remaining(), 0, "every scripted reply was used");
    // Every agent run's report carries the CLI's session, cost and turns.
    let runs = finished.0.lock().unwrap().clone();
    assert_eq!(runs.len(), 4, "{runs:?}");
    assert!(
        runs.iter()
            .all(|(session, cost, turns)| session.is_some() && cost.is_some() && turns.is_some()),
        "{runs:?}"
    );
    assert!(rig.leftovers().is_empty(), "{:?}", rig.leftovers());
}

/// `(session_id, cost_usd, turns)` of an `AgentFinished` event.
type Report = (Option<String>, Option<f64>, Option<u32>);

/// The CLI's Bash tool in a BUILD builds a Cargo project inside ralph's sandbox: cargo
/// writes `target/` in the work tree (issue 34).
#[tokio::test]
async fn the_bash_tool_runs_cargo_build_in_the_sandbox_and_it_writes_target() {
    if ralph_loop_process::process::Sandbox::bubblewrap().is_err() {
        eprintln!("skipped: no bubblewrap here");
        return;
    }
    let Some(rig) = Rig::new([
        Reply::text_then_tool(
            "Building.",
            "Bash",
            json!({"command": "cargo build --offline -q && echo BUILT"}),
        ),
        Reply::text("Built.\n<TASK_DONE>"),
    ])
    .await
    else {
        return;
    };
    let ws = rig.repo.path();
    std::fs::write(
        ws.join("Cargo.toml"),
        "[package]\nname = \"built\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::create_dir(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/lib.rs"), "pub fn one() -> u32 { 1 }\n").unwrap();

    let run = rig.build("Build the crate.").await;

    assert_eq!(run.exit, AgentExit::Completed, "{run:?}");
    assert!(ws.join("target/debug").is_dir(), "cargo wrote no target/");
    let second = &rig.api.requests().await[1];
    assert!(second.to_string().contains("BUILT"), "{second}");
}

/// The hostile suite through the real CLI's Bash tool (issue 34): in a construct run (in the
/// run's sandbox, as every run is), the tool makes every attempt of
/// [`ATTACKS`](crate::support::hostile::ATTACKS) on the referee and the machine; each is
/// refused, and the run completes. (ralph's environment is the test's here, which holds
/// none of the planted secrets: the command agent's suite checks the variables.)
#[tokio::test]
async fn every_attempt_of_the_cli_s_bash_tool_is_refused_and_the_construct_completes() {
    if ralph_loop_process::process::Sandbox::bubblewrap().is_err() {
        eprintln!("skipped: no bubblewrap here");
        return;
    }
    let target = crate::support::hostile::Target::new();
    let attacks = format!(
        "HOSTILE_REPORT=attacks.txt sh {}",
        target.attacks().display()
    );
    let Some(mut rig) = Rig::new([
        Reply::tool_use(
            "StructuredOutput",
            json!({"tasks": [{"name": "Create hello.txt", "accept": "hello.txt says hello"}]}),
        ),
        Reply::text_then_tool("Trying things.", "Bash", json!({"command": attacks})),
        Reply::text_then_tool(
            "Creating it.",
            "Bash",
            json!({"command": "echo hello > hello.txt"}),
        ),
        Reply::text("Created.\n<TASK_DONE>"),
        Reply::tool_use(
            "StructuredOutput",
            json!({"verdict": "accept", "reason": "hello.txt says hello"}),
        ),
        Reply::tool_use("StructuredOutput", json!({"tasks": [], "issues": []})),
    ])
    .await
    else {
        return;
    };
    let ws = rig.repo.path().to_path_buf();
    let mut env = target.env(Some(std::process::id()));
    // The work tree is the rig's; the CLI keeps its own home (its config folder); the
    // secrets are not ralph's here, and set in the CLI's own `env` they would pass.
    env.retain(|(k, _)| {
        ![
            "HOME",
            "HOSTILE_WS",
            "AWS_SECRET_ACCESS_KEY",
            "GITHUB_TOKEN",
            "SSH_AUTH_SOCK",
        ]
        .contains(&k.as_str())
    });
    env.push(("HOSTILE_WS".into(), ws.display().to_string()));
    for (key, value) in env {
        rig.claude = rig.claude.clone().env(key, value);
    }
    std::fs::write(ws.join("spec.md"), "# Hello\nCreate hello.txt.\n").unwrap();
    std::fs::write(ws.join("ralph.toml"), "").unwrap();
    std::fs::create_dir_all(ws.join("build/ralph-logs")).unwrap();
    let git_config = std::fs::read_to_string(ws.join(".git/config")).unwrap();
    let ralph = ralph::Ralph::builder()
        .workspace(&ws)
        .agent(rig.claude.clone())
        .store(ralph::MemoryStore::new())
        .gate(ralph::ShellGate::new("hello", "grep -qx hello hello.txt"))
        // The planted key and the agent socket are the test's, not ralph's: hidden as
        // ralph hides `~/.ssh` and `$SSH_AUTH_SOCK`, by name.
        .config("sandbox.mode", "required")
        .config(
            "sandbox.hide",
            [target.path("home/.ssh"), target.path("agent.sock")],
        )
        .build()
        .unwrap();

    let outcome = ralph.construct("spec.md").await.unwrap();

    assert!(
        matches!(outcome, ralph::Outcome::Complete { .. }),
        "{outcome:?}"
    );
    let report = std::fs::read_to_string(ws.join("attacks.txt")).unwrap();
    let lines: Vec<String> = report.lines().map(str::to_owned).collect();
    crate::support::hostile::assert_all_refused(&lines, &[], "claude");
    target.assert_untouched(&ws, &git_config, &report, &lines);
    assert!(rig.leftovers().is_empty(), "{:?}", rig.leftovers());
}

/// The reports of every `AgentFinished` event.
#[derive(Default)]
struct Finished(std::sync::Mutex<Vec<Report>>);

impl ralph::Observer for Finished {
    fn on_event(&self, event: &ralph::Event) {
        if let ralph::Event::AgentFinished {
            session_id,
            cost_usd,
            turns,
            ..
        } = event
        {
            self.0
                .lock()
                .unwrap()
                .push((session_id.clone(), *cost_usd, *turns));
        }
    }
}

/// A run stopped by its own spending cap (`[claude] max_budget_usd`) is not retried: the
/// real CLI, given a cap far below what one reply costs, stops with `error_max_budget_usd`
/// before running the tool in flight; ralph blocks the task with the reason after that one
/// run instead of spending the same again.
#[tokio::test]
async fn a_run_stopped_by_its_budget_cap_is_not_retried() {
    let Some(rig) = Rig::new([
        Reply::tool_use("Bash", json!({"command": "echo hello > hello.txt"})).usage(200_000, 0, 0),
        // What a retry would be answered: never asked for.
        Reply::text("Created.\n<TASK_DONE>"),
    ])
    .await
    else {
        return;
    };
    std::fs::write(
        rig.repo.path().join("spec.md"),
        "# Hello\nCreate hello.txt.\n",
    )
    .unwrap();
    let mut board = ralph::model::Board::new();
    board.apply(ralph::model::Change::Task(
        ralph::model::Task::new("t-1", "Create hello.txt").with_acceptance("hello.txt exists"),
    ));
    let mut run = ralph::model::RunState::default();
    run.seeded = true;
    run.spec = Some("spec.md".into());
    board.apply(ralph::model::Change::Run(run));
    let ralph = ralph::Ralph::builder()
        .workspace(rig.repo.path())
        .agent(rig.claude.clone().max_budget_usd(0.001))
        .store(ralph::MemoryStore::with_board(board))
        .retries(2)
        .build()
        .unwrap();

    let outcome = ralph.construct("spec.md").await.unwrap();

    let ralph::Outcome::Blocked { items } = &outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(items[0].id, "t-1");
    assert!(
        items[0].reason.contains("spending cap"),
        "{}",
        items[0].reason
    );
    assert_eq!(rig.api.remaining(), 1, "one run, no retry");
    assert!(
        !rig.repo.path().join("hello.txt").exists(),
        "the tool never ran"
    );
    assert!(rig.leftovers().is_empty(), "{:?}", rig.leftovers());
}

/// Issue 37: a run that asks a person keeps the CLI's session, and the answer's run resumes
/// it: the CLI sends the asking conversation again, with the answer after it. A run that
/// ends otherwise leaves no session behind.
#[tokio::test]
async fn the_answer_resumes_the_session_that_asked() {
    let Some(rig) = Rig::new([
        Reply::text("Which database?\n<TASK_QUESTION question=\"Postgres or SQLite?\">"),
        Reply::text("Using SQLite.\n<TASK_DONE>"),
    ])
    .await
    else {
        return;
    };
    let transcripts = || -> Vec<String> {
        walkdir(&rig.home.path().join("projects"))
            .into_iter()
            .filter(|p| p.ends_with(".jsonl"))
            .collect()
    };

    let asked = rig.build("Add the storage layer.").await;
    assert_eq!(asked.claim(), Claim::Question("Postgres or SQLite?".into()));
    let session = asked.session_id.clone().expect("a session id");
    assert_eq!(transcripts().len(), 1, "the asking session is kept");

    let mut request = rig.request(Role::Build, "Add the storage layer.\n\nAnswer: SQLite.");
    request.resume = Some(session.clone());
    let answered = rig.run(request).await;

    assert_eq!(answered.claim(), Claim::Done, "{}", answered.final_text);
    let requests = rig.api.requests().await;
    let conversation = requests.last().unwrap()["messages"].to_string();
    assert!(
        conversation.contains("Postgres or SQLite?") && conversation.contains("Answer: SQLite."),
        "{conversation}"
    );
    assert!(transcripts().is_empty(), "{:?}", transcripts());
}

/// Every file under `dir`, as strings.
fn walkdir(dir: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walkdir(&path));
        } else {
            found.push(path.to_string_lossy().into_owned());
        }
    }
    found
}
