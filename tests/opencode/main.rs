//! `OpencodeCli` against the real, pinned opencode talking to a scripted Responses API on
//! 127.0.0.1 (`support::responses_api`, opencode's `openai` provider pointed at it): the
//! same adversarial cases as the Claude agent's. Skipped (saying so) when no `opencode` is
//! installed, except under `CI=true`.

#![allow(clippy::unwrap_used)]

#[path = "../support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use ralph::agent::{Agent, AgentExit, AgentRequest, AgentRun, Claim, OpencodeCli, Role};
use support::messages_api::alive_with_env;
use support::responses_api::{Reply, ResponsesApi, opencode_or_skip};

/// A workspace, a home for the CLI, the fake API and the agent pointed at both.
struct Rig {
    dir: tempfile::TempDir,
    home: tempfile::TempDir,
    api: ResponsesApi,
    opencode: OpencodeCli,
}

impl Rig {
    async fn new(bin: PathBuf, replies: impl IntoIterator<Item = Reply>) -> Rig {
        let dir = support::messages_api::git_repo();
        let home = tempfile::tempdir().unwrap();
        let api = ResponsesApi::with_script(replies).await;
        let opencode = api.opencode_env(home.path()).into_iter().fold(
            OpencodeCli::new().bin(bin).model("openai/gpt-5-codex"),
            |o, (k, v)| o.env(k, v),
        );
        Rig {
            dir,
            home,
            api,
            opencode,
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
        let run = self.opencode.run(request).await.unwrap();
        support::record_transcript("opencode", prompt, &self.home.path().join("logs/run.log"));
        run
    }
}

#[tokio::test]
async fn a_tool_call_writes_the_file_and_the_final_answer_claims_done() {
    let Some(bin) = opencode_or_skip() else {
        return;
    };
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
    // opencode counts cached input apart: 2 × (100 − 40), and 2 × 40 read from the cache.
    assert_eq!(
        (run.usage.input_tokens, run.usage.cache_read_tokens),
        (120, 80),
        "{:?}",
        run.usage
    );
    assert!(
        rig.api.requests().await[0]
            .to_string()
            .contains("Write hello.txt")
    );
}

#[tokio::test]
async fn a_marker_in_prose_in_an_earlier_turn_in_tool_output_or_before_more_text_is_not_done() {
    let Some(bin) = opencode_or_skip() else {
        return;
    };
    let cases = [
        vec![Reply::text("I will print <TASK_DONE> when done.")],
        vec![
            Reply::text_then_shell("<TASK_DONE>", "true"),
            Reply::text("Still more to do."),
        ],
        vec![Reply::shell("echo '<TASK_DONE>'"), Reply::text("Checked.")],
        vec![Reply::text("<TASK_DONE>\nBut the tests fail.")],
    ];
    for script in cases {
        let rig = Rig::new(bin.clone(), script).await;
        let run = rig.run(Role::Build, "p").await;
        assert_eq!(run.exit, AgentExit::Completed, "{run:?}");
        assert!(matches!(run.claim(), Claim::NotDone(_)), "{run:?}");
    }
    // The tool really ran and its output, marker included, went back to the model.
    let rig = Rig::new(
        bin,
        [Reply::shell("echo '<TASK_DONE>'"), Reply::text("Checked.")],
    )
    .await;
    rig.run(Role::Build, "p").await;
    let requests = rig.api.requests().await;
    assert!(
        requests[1].to_string().contains("<TASK_DONE>"),
        "the tool's output reached the model"
    );
}

#[tokio::test]
async fn background_jobs_of_a_tool_do_not_survive_the_run() {
    let Some(bin) = opencode_or_skip() else {
        return;
    };
    let mark = format!("o{}", std::process::id());
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
        rig.api.requests().await[1]
            .to_string()
            .contains("function_call_output"),
        "the tool ran"
    );
    assert!(
        alive_with_env("AGENT_LEFTOVER_MARK", &mark).is_empty(),
        "left running"
    );
}

#[tokio::test]
async fn a_stalled_stream_is_cut_by_the_idle_timeout() {
    let Some(bin) = opencode_or_skip() else {
        return;
    };
    let rig = Rig::new(bin, [Reply::stall(Duration::from_secs(60))]).await;
    let opencode = rig.opencode.clone().idle_timeout(Duration::from_secs(5));
    let request = AgentRequest::new(Role::Build, "p", rig.path()).timeout(Duration::from_secs(120));

    let run = opencode.run(request).await.unwrap();

    assert_eq!(run.exit, AgentExit::TimedOut, "{run:?}");
}

#[tokio::test]
async fn a_huge_answer_completes_with_a_bounded_buffer() {
    let Some(bin) = opencode_or_skip() else {
        return;
    };
    let big: String = (0..200_000)
        .map(|i| format!("line {i} of the report\n"))
        .collect();
    let rig = Rig::new(bin, [Reply::text(format!("{big}<TASK_DONE>"))]).await;

    let run = rig.run(Role::Build, "p").await;

    assert_eq!(run.claim(), Claim::Done, "{:?}", run.exit);
    assert_eq!(run.final_text.len(), big.len() + "<TASK_DONE>".len());
}

#[tokio::test]
async fn a_5xx_then_success_is_ridden_out() {
    let Some(bin) = opencode_or_skip() else {
        return;
    };
    let rig = Rig::new(bin, [Reply::status(500), Reply::text("Done.\n<TASK_DONE>")]).await;
    let run = rig.run(Role::Build, "p").await;
    assert_eq!(run.claim(), Claim::Done, "{run:?}");
}

#[tokio::test]
async fn a_read_only_role_cannot_write_files() {
    let Some(bin) = opencode_or_skip() else {
        return;
    };
    let rig = Rig::new(
        bin,
        [
            Reply::shell("echo sneaky > sneaky.txt"),
            Reply::text(r#"{"task_id":"t-1","verdict":"accept","reason":"ok"}"#),
        ],
    )
    .await;

    let run = rig.run(Role::Verify, "Judge t-1").await;

    assert!(
        !rig.path().join("sneaky.txt").exists(),
        "the plan agent let it write"
    );
    assert_eq!(run.exit, AgentExit::Completed, "{run:?}");
}

/// `ralph construct spec.md --agent opencode` takes a demo-sized spec to the end, with the
/// CLI set up in `ralph.toml`'s `[opencode]`.
#[tokio::test]
async fn ralph_construct_with_the_opencode_agent_completes_a_spec() {
    let Some(bin) = opencode_or_skip() else {
        return;
    };
    let rig = Rig::new(
        bin.clone(),
        [
            Reply::text(
                r#"{"tasks":[{"name":"Write hello.txt","accept":"hello.txt says hello"}]}"#,
            ),
            Reply::shell("echo hello > hello.txt"),
            Reply::text("Wrote hello.txt.\n<TASK_DONE>"),
            Reply::text(r#"{"task_id":"t-1","verdict":"accept","reason":"it says hello"}"#),
            Reply::text(r#"{"tasks":[],"issues":[]}"#),
        ],
    )
    .await;
    std::fs::write(
        rig.path().join("spec.md"),
        "# Hello\nWrite hello.txt saying hello.\n",
    )
    .unwrap();
    let env: Vec<String> = rig
        .api
        .opencode_env(rig.home.path())
        .into_iter()
        .map(|(k, v)| format!("{k} = {v:?}"))
        .collect();
    std::fs::write(
        rig.path().join("ralph.toml"),
        format!(
            "[opencode]\nbin = {:?}\nmodel = \"openai/gpt-5-codex\"\nenv = {{ {} }}\n",
            bin.display().to_string(),
            env.join(", ")
        ),
    )
    .unwrap();

    let out = std::process::Command::new(support::ralph_bin())
        .args(["construct", "spec.md", "--agent", "opencode"])
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
}

support::live_tool_call_test!(opencode_or_skip());
