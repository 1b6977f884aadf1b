//! `CodexCli` against the real, pinned Codex CLI talking to a scripted Responses API on
//! 127.0.0.1 (`support::responses_api`): the same adversarial cases as the Claude agent's.
//! Skipped (saying so) when no `codex` is installed, except under `CI=true`.

#![allow(clippy::unwrap_used)]

#[path = "../support/mod.rs"]
mod support;

mod fallback;

use std::path::{Path, PathBuf};
use std::time::Duration;

use ralph::agent::{Agent, AgentExit, AgentRequest, AgentRun, Claim, CodexCli, FailureKind, Role};
use support::messages_api::alive_with_env;
use support::responses_api::{Reply, ResponsesApi, codex_or_skip};

/// A workspace, a home for the CLI, the fake API and the agent pointed at both.
struct Rig {
    dir: tempfile::TempDir,
    home: tempfile::TempDir,
    api: ResponsesApi,
    codex: CodexCli,
}

impl Rig {
    async fn new(bin: PathBuf, replies: impl IntoIterator<Item = Reply>) -> Rig {
        let dir = support::messages_api::git_repo();
        let home = tempfile::tempdir().unwrap();
        let api = ResponsesApi::with_script(replies).await;
        let mut codex = CodexCli::new().bin(bin).model("gpt-5-codex");
        for arg in api.args() {
            codex = codex.arg(arg);
        }
        for (key, value) in api.env(home.path()) {
            codex = codex.env(key, value);
        }
        Rig {
            dir,
            home,
            api,
            codex,
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    async fn run(&self, role: Role, prompt: &str) -> AgentRun {
        self.run_with(role, prompt, ralph::agent::AgentEvents::none())
            .await
    }

    async fn run_with(
        &self,
        role: Role,
        prompt: &str,
        events: ralph::agent::AgentEvents,
    ) -> AgentRun {
        let request = AgentRequest::new(role, prompt, self.path())
            .log_path(self.home.path().join("logs/run.log"))
            .timeout(Duration::from_secs(120))
            .events(events);
        let run = self.codex.run(request).await.unwrap();
        support::record_transcript("codex", prompt, &self.home.path().join("logs/run.log"));
        run
    }
}

#[tokio::test]
async fn a_tool_call_writes_the_file_and_the_final_answer_claims_done() {
    let Some(bin) = codex_or_skip() else { return };
    let rig = Rig::new(
        bin,
        [
            Reply::shell("echo hello > hello.txt"),
            Reply::text("Wrote hello.txt.\n<TASK_DONE>"),
        ],
    )
    .await;

    let run = rig.run(Role::Build, "Write hello.txt").await;

    assert_eq!(run.exit, AgentExit::Completed, "{run:?}");
    assert_eq!(run.claim(), Claim::Done);
    assert_eq!(
        std::fs::read_to_string(rig.path().join("hello.txt")).unwrap(),
        "hello\n"
    );
    assert!(run.session_id.is_some());
    assert_eq!(run.usage.input_tokens, 200, "{:?}", run.usage);
    assert_eq!(run.usage.output_tokens, 20);
    let requests = rig.api.requests().await;
    assert_eq!(requests.len(), 2);
    assert!(requests[0].to_string().contains("Write hello.txt"));
}

#[tokio::test]
async fn a_marker_in_prose_in_an_earlier_turn_or_in_tool_output_is_not_done() {
    let Some(bin) = codex_or_skip() else { return };
    let prose = Rig::new(
        bin.clone(),
        [Reply::text("I will print <TASK_DONE> when done.")],
    )
    .await;
    let run = prose.run(Role::Build, "p").await;
    assert!(matches!(run.claim(), Claim::NotDone(_)), "{run:?}");

    let earlier = Rig::new(
        bin.clone(),
        [
            Reply::text_then_shell("<TASK_DONE>", "true"),
            Reply::text("Still more to do."),
        ],
    )
    .await;
    let run = earlier.run(Role::Build, "p").await;
    assert_eq!(run.final_text, "Still more to do.");
    assert!(matches!(run.claim(), Claim::NotDone(_)), "{run:?}");

    let tool = Rig::new(
        bin,
        [Reply::shell("echo '<TASK_DONE>'"), Reply::text("Checked.")],
    )
    .await;
    let run = tool.run(Role::Build, "p").await;
    assert!(matches!(run.claim(), Claim::NotDone(_)), "{run:?}");
}

#[tokio::test]
async fn a_marker_followed_by_more_text_is_not_done() {
    let Some(bin) = codex_or_skip() else { return };
    let rig = Rig::new(bin, [Reply::text("<TASK_DONE>\nBut the tests fail.")]).await;
    let run = rig.run(Role::Build, "p").await;
    assert!(matches!(run.claim(), Claim::NotDone(_)), "{run:?}");
}

#[tokio::test]
async fn background_jobs_of_a_tool_do_not_survive_the_run() {
    let Some(bin) = codex_or_skip() else { return };
    let mark = format!("m{}", std::process::id());
    let rig = Rig::new(
        bin,
        [
            Reply::shell(format!(
                "AGENT_LEFTOVER_MARK={mark} setsid sleep 300 > /dev/null 2>&1 & AGENT_LEFTOVER_MARK={mark} nohup sleep 301 > /dev/null 2>&1 &"
            )),
            Reply::text("Started.\n<TASK_DONE>"),
        ],
    )
    .await;

    let run = rig.run(Role::Build, "p").await;

    assert_eq!(run.claim(), Claim::Done, "{run:?}");
    assert!(
        alive_with_env("AGENT_LEFTOVER_MARK", &mark).is_empty(),
        "left running: {:?}",
        alive_with_env("AGENT_LEFTOVER_MARK", &mark)
    );
}

#[tokio::test]
async fn a_stalled_stream_is_cut_by_the_idle_timeout() {
    let Some(bin) = codex_or_skip() else { return };
    let rig = Rig::new(bin, [Reply::stall(Duration::from_secs(60))]).await;
    let codex = rig.codex.clone().idle_timeout(Duration::from_secs(3));
    let request = AgentRequest::new(Role::Build, "p", rig.path()).timeout(Duration::from_secs(120));

    let run = codex.run(request).await.unwrap();

    assert_eq!(run.exit, AgentExit::TimedOut, "{run:?}");
}

#[tokio::test]
async fn a_huge_answer_completes_with_a_bounded_buffer() {
    let Some(bin) = codex_or_skip() else { return };
    let big = "x".repeat(3 * 1024 * 1024);
    let rig = Rig::new(bin, [Reply::text(format!("{big}\n<TASK_DONE>"))]).await;

    let run = rig.run(Role::Build, "p").await;

    assert_eq!(run.claim(), Claim::Done, "{:?}", run.exit);
    assert_eq!(run.final_text.len(), big.len() + "\n<TASK_DONE>".len());
}

#[tokio::test]
async fn a_5xx_then_success_is_ridden_out_and_a_usage_limit_is_a_rate_limit_with_its_reset() {
    let Some(bin) = codex_or_skip() else { return };
    let flaky = Rig::new(
        bin.clone(),
        [Reply::status(500), Reply::text("Done.\n<TASK_DONE>")],
    )
    .await;
    let run = flaky.run(Role::Build, "p").await;
    assert_eq!(run.claim(), Claim::Done, "{run:?}");

    let limited = Rig::new(bin.clone(), [Reply::usage_limit(1800)]).await;
    let run = limited.run(Role::Build, "p").await;
    let AgentExit::RateLimited { until } = run.exit else {
        panic!("{run:?}")
    };
    let left = until
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default();
    assert!(
        left > Duration::from_secs(60) && left <= Duration::from_secs(1860),
        "{left:?}"
    );

    let denied = Rig::new(bin, [Reply::status(401), Reply::status(401)]).await;
    let run = denied.run(Role::Build, "p").await;
    assert!(
        matches!(
            run.exit,
            AgentExit::Failed {
                kind: FailureKind::Fatal,
                ..
            }
        ),
        "{run:?}"
    );
}

#[tokio::test]
async fn a_read_only_role_cannot_write_files() {
    let Some(bin) = codex_or_skip() else { return };
    let rig = Rig::new(
        bin,
        [
            Reply::shell("echo sneaky > sneaky.txt"),
            Reply::text(r#"{"task_id":"t-1","verdict":"accept","reason":"ok"}"#),
        ],
    )
    .await;

    let run = rig.run(Role::Verify, "Judge t-1").await;

    assert_eq!(run.exit, AgentExit::Completed, "{run:?}");
    assert!(
        !rig.path().join("sneaky.txt").exists(),
        "the sandbox let it write"
    );
    assert_eq!(run.structured.unwrap()["verdict"], "accept");
}

/// The `[codex]` table of a `ralph.toml` that points the CLI at the rig's API.
fn codex_toml(rig: &Rig, bin: &Path) -> String {
    let toml_list = |items: Vec<String>| {
        items
            .iter()
            .map(|i| format!("{i:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let env: Vec<String> = rig
        .api
        .env(rig.home.path())
        .into_iter()
        .map(|(k, v)| format!("{k} = {v:?}"))
        .collect();
    format!(
        "[codex]\nbin = {:?}\nmodel = \"gpt-5-codex\"\nargs = [{}]\nenv = {{ {} }}\n",
        bin.display().to_string(),
        toml_list(rig.api.args()),
        env.join(", ")
    )
}

/// `ralph construct spec.md --agent codex` takes a demo-sized spec to the end, with the
/// CLI set up in `ralph.toml`'s `[codex]`. The fake API refuses a schema outside strict
/// mode's subset, as OpenAI's does.
#[tokio::test]
async fn ralph_construct_with_the_codex_agent_completes_a_spec() {
    let Some(bin) = codex_or_skip() else { return };
    let rig = Rig::new(
        bin.clone(),
        [
            // Strict structured outputs answer every property, null for what they omit.
            Reply::text(
                r#"{"out_of_scope":false,"reason":null,"tasks":[{"name":"Write hello.txt","accept":"hello.txt says hello","notes":null,"deps":null,"priority":null,"complexity":null}]}"#,
            ),
            Reply::shell("echo hello > hello.txt"),
            Reply::text("Wrote hello.txt.\n<TASK_DONE>"),
            Reply::text(
                r#"{"task_id":"t-1","verdict":"accept","reason":"it says hello","gaps":null}"#,
            ),
            Reply::text(r#"{"tasks":[],"issues":[]}"#),
        ],
    )
    .await;
    std::fs::write(
        rig.path().join("spec.md"),
        "# Hello\nWrite hello.txt saying hello.\n",
    )
    .unwrap();
    std::fs::write(rig.path().join("ralph.toml"), codex_toml(&rig, &bin)).unwrap();

    let out = std::process::Command::new(support::ralph_bin())
        .args(["construct", "spec.md", "--agent", "codex"])
        .current_dir(rig.path())
        .output()
        .unwrap();

    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(rig.path().join("hello.txt")).unwrap(),
        "hello\n"
    );
    assert_eq!(rig.api.requests().await.len(), 5);
}

support::live_tool_call_test!(codex_or_skip());
