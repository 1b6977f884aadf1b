//! The pinned Codex CLI pointed at a closed port on 127.0.0.1: without a server it waits for
//! the network for ever, printing `Reconnecting... waiting for network (Connection failed:
//! …)` now and then. With a short `unreachable_after`, ralph stops it as unreachable, names
//! it and its last error, and a fallback chain gives the run to its next agent. What is
//! asserted is the outcome and the message, never the time.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ralph::agent::{
    Agent, AgentEvent, AgentExit, AgentRequest, CodexCli, FailureKind, FakeAgent, Fallback, Role,
    Script,
};

use crate::support;
use crate::support::responses_api::codex_or_skip;

/// Short, so the test is quick; the CLI's first connection error comes after a few seconds.
const UNREACHABLE_AFTER: &str = "2s";

/// A port on 127.0.0.1 that nothing listens on (bound, then closed).
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// The arguments and environment that point the CLI at `port` (its own retry settings left
/// alone: it waits for the network), with `home` as its home.
fn settings(port: u16, home: &Path) -> (Vec<String>, Vec<(String, String)>) {
    std::fs::create_dir_all(home.join("codex")).unwrap();
    let args = vec![
        "-c".to_owned(),
        format!(
            "model_providers.fake={{name=\"fake\",base_url=\"http://127.0.0.1:{port}/v1\",wire_api=\"responses\",env_key=\"FAKE_OPENAI_KEY\"}}"
        ),
        "-c".to_owned(),
        "model_provider=\"fake\"".to_owned(),
    ];
    let env = vec![
        ("FAKE_OPENAI_KEY".to_owned(), "sk-fake".to_owned()),
        (
            "CODEX_HOME".to_owned(),
            home.join("codex").display().to_string(),
        ),
        ("HOME".to_owned(), home.display().to_string()),
    ];
    (args, env)
}

fn codex(bin: &Path, home: &Path) -> CodexCli {
    let (args, env) = settings(closed_port(), home);
    let codex = args
        .into_iter()
        .fold(CodexCli::new().bin(bin).model("gpt-5-codex"), CodexCli::arg);
    env.into_iter().fold(codex, |c, (k, v)| c.env(k, v))
}

/// The last connection error the CLI prints without a server.
const LAST_ERROR: &str = "Reconnecting... waiting for network (Connection failed";

#[tokio::test]
async fn codex_without_a_server_is_stopped_as_unreachable_naming_it_and_its_last_error() {
    let Some(bin) = codex_or_skip() else { return };
    let dir = support::messages_api::git_repo();
    let home = tempfile::tempdir().unwrap();
    let statuses = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&statuses);
    let log = home.path().join("logs/run.log");
    let request = AgentRequest::new(Role::Build, "Write hello.txt", dir.path())
        .log_path(&log)
        .timeout(Duration::from_secs(120))
        .unreachable_after(humantime::parse_duration(UNREACHABLE_AFTER).unwrap())
        .on_event(move |event| {
            if let AgentEvent::Status { agent, line } = event {
                sink.lock().unwrap().push(format!("{agent}: {line}"));
            }
        });

    let mark = format!("codex-unreachable-{}", std::process::id());
    let run = codex(&bin, home.path())
        .env("TEST_RUN_MARK", &mark)
        .run(request)
        .await
        .unwrap();
    support::record_transcript("codex", "unreachable", &log);
    assert_eq!(
        support::messages_api::alive_with_env("TEST_RUN_MARK", &mark),
        Vec::<i32>::new(),
        "the stopped CLI left nothing running"
    );

    let AgentExit::Failed { reason, kind } = &run.exit else {
        panic!("{run:?}")
    };
    assert_eq!(*kind, FailureKind::Unreachable, "{run:?}");
    assert!(
        reason.starts_with("codex is unreachable: no successful API exchange for 2s")
            && reason.contains(&format!("the last: {LAST_ERROR}")),
        "{reason}"
    );
    // Each error was shown live, as the CLI printed it.
    let statuses = statuses.lock().unwrap();
    assert!(
        !statuses.is_empty()
            && statuses
                .iter()
                .all(|s| s.starts_with(&format!("codex: {LAST_ERROR}"))),
        "{statuses:?}"
    );
}

#[tokio::test]
async fn a_chain_gives_the_run_of_an_unreachable_codex_to_its_next_agent() {
    let Some(bin) = codex_or_skip() else { return };
    let dir = support::messages_api::git_repo();
    let home = tempfile::tempdir().unwrap();
    let chain = Fallback::new()
        .agent("codex", codex(&bin, home.path()))
        .agent(
            "fake",
            FakeAgent::new().then(Script::new().answer("Did it.\n<TASK_DONE>")),
        );
    let chosen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&chosen);
    let request = AgentRequest::new(Role::Build, "Write hello.txt", dir.path())
        .timeout(Duration::from_secs(120))
        .unreachable_after(humantime::parse_duration(UNREACHABLE_AFTER).unwrap())
        .on_event(move |event| {
            if let AgentEvent::AgentChosen { agent, reason } = event {
                sink.lock().unwrap().push(format!("{agent}: {reason}"));
            }
        });

    let run = chain.run(request).await.unwrap();

    assert_eq!(run.final_text, "Did it.\n<TASK_DONE>", "{run:?}");
    let chosen = chosen.lock().unwrap();
    assert!(
        chosen.len() == 1
            && chosen[0].starts_with("fake: codex is unreachable (codex is unreachable:")
            && chosen[0].contains(LAST_ERROR),
        "{chosen:?}"
    );
}

#[tokio::test]
async fn ralph_construct_with_an_unreachable_codex_ends_naming_it_and_counts_nothing() {
    let Some(bin) = codex_or_skip() else { return };
    let dir = support::messages_api::git_repo();
    let home = tempfile::tempdir().unwrap();
    let (args, env) = settings(closed_port(), home.path());
    let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    let env: Vec<String> = env.iter().map(|(k, v)| format!("{k} = {v:?}")).collect();
    std::fs::write(
        dir.path().join("ralph.toml"),
        format!(
            "unreachable_after = {UNREACHABLE_AFTER:?}\n\n[codex]\nbin = {:?}\nmodel = \"gpt-5-codex\"\nargs = [{}]\nenv = {{ {} }}\n",
            bin.display().to_string(),
            args.join(", "),
            env.join(", ")
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("spec.md"), "# Hello\nWrite hello.txt.\n").unwrap();

    let workspace = dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(support::ralph_bin())
            .args(["construct", "spec.md", "--agent", "codex"])
            .current_dir(workspace)
            .output()
            .unwrap()
    })
    .await
    .unwrap();

    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("agent codex stopped on investigate i-1: it cannot reach its API (codex is unreachable: no successful API exchange for 2s")
            && stderr.contains(&format!("the last: {LAST_ERROR}")),
        "{stdout}\n{stderr}"
    );
    // The connection errors were shown as they came.
    assert!(
        stdout.contains(&format!("agent codex (i-1): {LAST_ERROR}")),
        "{stdout}"
    );
    // Not the issue's fault: it is still open, its attempt not counted, nothing killed.
    let issues = std::process::Command::new(support::ralph_bin())
        .args(["query", "issues"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let issues: Vec<serde_json::Value> = String::from_utf8_lossy(&issues.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        issues.len() == 1
            && issues[0]["id"] == "i-1"
            && issues[0]["attempts"].as_u64().unwrap_or(0) == 0,
        "{issues:?}"
    );
    assert!(!stdout.contains("killed"), "{stdout}");
}
