//! `CodexCli` against the real, pinned Codex CLI talking to a scripted Responses API on
//! 127.0.0.1 (`support::responses_api`): the adversarial cases every CLI agent passes
//! (`support::cli_rig`), then Codex's own. Skipped (saying so) when no `codex` is installed,
//! except under `CI=true`.

#![allow(clippy::unwrap_used)]
// Tests set up and look at their workspaces with git and the CLIs they start themselves,
// outside any run: the rule that processes start in ralph-loop-process is the library's.
#![allow(clippy::disallowed_types)]
// Tests write their fixtures and workspaces directly, outside any run: the rule
// that state is written through ralph-loop-process's `files` is the library's.
#![allow(clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

mod fallback;
mod thread;
mod unreachable;

use std::path::{Path, PathBuf};
use std::time::Duration;

use ralph::agent::{Agent, AgentExit, AgentRequest, Claim, CodexCli, FailureKind, Role, Usage};
use support::cli_rig::CliUnderTest;
use support::responses_api::{Reply, ResponsesApi, codex_or_skip};

/// The Codex CLI, pointed at the scripted Responses API.
struct Codex;

impl CliUnderTest for Codex {
    type Agent = CodexCli;
    type Api = ResponsesApi;
    type Reply = Reply;
    const NAME: &'static str = "codex";
    const MODEL: &'static str = "gpt-5-codex";
    const PRINTS_RECOVERED_ERRORS: bool = true;

    async fn serve(replies: Vec<Reply>) -> ResponsesApi {
        ResponsesApi::with_script(replies).await
    }

    fn settings(api: &ResponsesApi, home: &Path) -> (Vec<String>, Vec<(String, String)>) {
        (api.args(), api.env(home))
    }

    fn agent(bin: PathBuf, args: Vec<String>, env: Vec<(String, String)>) -> CodexCli {
        let codex = args
            .into_iter()
            .fold(CodexCli::new().bin(bin).model(Self::MODEL), CodexCli::arg);
        env.into_iter().fold(codex, |c, (k, v)| c.env(k, v))
    }

    fn assert_usage(usage: &Usage) {
        // OpenAI counts the cached input in its input: 2 × (100 − 40) uncached, and
        // 2 × 40 read from the cache, kept apart.
        assert_eq!(
            (
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens
            ),
            (120, 20, 80),
            "{usage:?}"
        );
    }
}

type Rig = support::cli_rig::Rig<Codex>;

/// The replies `ralph construct` needs for one task. Strict structured outputs answer
/// every property, null for what they omit; the fake API refuses a schema outside strict
/// mode's subset, as OpenAI's does.
fn construct_script() -> [Reply; 5] {
    construct_script_running("echo hello > hello.txt")
}

/// The replies of a construct run whose one build runs `command` in the CLI's shell tool.
fn construct_script_running(command: &str) -> [Reply; 5] {
    [
        Reply::text(
            r#"{"out_of_scope":false,"reason":null,"tasks":[{"name":"Write hello.txt","accept":"hello.txt says hello","notes":null,"deps":null,"priority":null,"complexity":null}]}"#,
        ),
        Reply::shell(command),
        Reply::text("Wrote hello.txt.\n<TASK_DONE>"),
        Reply::text(r#"{"task_id":"t-1","verdict":"accept","reason":"it says hello","gaps":null}"#),
        Reply::text(r#"{"tasks":[],"issues":[]}"#),
    ]
}

support::cli_rig::cli_agent_suite!(codex_or_skip());

/// A read-only role's shell command runs inside ralph's sandbox and succeeds (it reads the
/// work tree), while its write is refused: Codex's own sandbox is off there, ralph's work
/// tree read-only (issue 34).
#[tokio::test]
async fn a_read_only_role_runs_a_shell_command_inside_ralph_s_sandbox() {
    let Some(bin) = codex_or_skip() else { return };
    if ralph_loop_process::process::Sandbox::bubblewrap().is_err() {
        eprintln!("skipped: no bubblewrap here");
        return;
    }
    let rig = Rig::new(
        bin,
        [
            Reply::shell("cat probe.txt; echo sneaky > sneaky.txt"),
            Reply::text(r#"{"task_id":"t-1","verdict":"accept","reason":"ok"}"#),
        ],
    )
    .await;
    std::fs::write(rig.path().join("probe.txt"), "probe-read-7731\n").unwrap();

    let run = rig.run(Role::Verify, "Judge t-1").await;

    assert_eq!(run.exit, AgentExit::Completed, "{run:?}");
    let second = rig.api.requests().await[1].to_string();
    assert!(
        second.contains("probe-read-7731"),
        "the command did not run: {second}"
    );
    assert!(
        !rig.path().join("sneaky.txt").exists(),
        "a read-only run wrote"
    );
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
async fn a_429_still_there_after_the_retry_is_a_rate_limit() {
    let Some(bin) = codex_or_skip() else { return };
    let rig = Rig::new(bin, [Reply::retry_after(1), Reply::retry_after(1)]).await;

    let run = rig.run(Role::Build, "p").await;

    // The last word is the error: "exceeded retry limit, last status: 429 Too Many Requests".
    assert!(matches!(run.exit, AgentExit::RateLimited { .. }), "{run:?}");
    assert_eq!(rig.api.requests().await.len(), 2);
}
