//! `GeminiCli` against the real, pinned Gemini CLI talking to a scripted Gemini API on
//! 127.0.0.1 (`support::gemini_api`): the adversarial cases every CLI agent passes
//! (`support::cli_rig`), then Gemini's own. Skipped (saying so) when no `gemini` is
//! installed, except under `CI=true`.

#![allow(clippy::unwrap_used)]
// Tests set up and look at their workspaces with git and the CLIs they start themselves,
// outside any run: the rule that processes start in ralph-loop-process is the library's.
#![allow(clippy::disallowed_types)]
// Tests write their fixtures and workspaces directly, outside any run: the rule
// that state is written through ralph-loop-process's `files` is the library's.
#![allow(clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};

use ralph::agent::{Agent, AgentExit, AgentRequest, Claim, FailureKind, GeminiCli, Role, Usage};
use support::cli_rig::CliUnderTest;
use support::gemini_api::{GeminiApi, Reply, gemini_or_skip};

/// The Gemini CLI, pointed at the scripted Gemini API.
struct Gemini;

impl CliUnderTest for Gemini {
    type Agent = GeminiCli;
    type Api = GeminiApi;
    type Reply = Reply;
    const NAME: &'static str = "gemini";
    const MODEL: &'static str = "gemini-2.5-pro";
    const PRINTS_RECOVERED_ERRORS: bool = false;

    async fn serve(replies: Vec<Reply>) -> GeminiApi {
        GeminiApi::with_script(replies).await
    }

    fn settings(api: &GeminiApi, home: &Path) -> (Vec<String>, Vec<(String, String)>) {
        (Vec::new(), api.env(home))
    }

    fn agent(bin: PathBuf, args: Vec<String>, env: Vec<(String, String)>) -> GeminiCli {
        let gemini = args
            .into_iter()
            .fold(GeminiCli::new().bin(bin).model(Self::MODEL), GeminiCli::arg);
        env.into_iter().fold(gemini, |g, (k, v)| g.env(k, v))
    }

    fn assert_usage(usage: &Usage) {
        // Gemini counts the cached content in its prompt: 2 × (100 − 40) uncached, and
        // 2 × 40 read from the cache, kept apart.
        assert_eq!(
            (usage.input_tokens, usage.cache_read_tokens),
            (120, 80),
            "{usage:?}"
        );
    }
}

type Rig = support::cli_rig::Rig<Gemini>;

/// The replies `ralph construct` needs for one task.
fn construct_script() -> [Reply; 5] {
    construct_script_running("echo hello > hello.txt")
}

/// The replies of a construct run whose one build runs `command` in the CLI's shell tool.
fn construct_script_running(command: &str) -> [Reply; 5] {
    [
        Reply::text(r#"{"tasks":[{"name":"Write hello.txt","accept":"hello.txt says hello"}]}"#),
        Reply::shell(command),
        Reply::text("Wrote hello.txt.\n<TASK_DONE>"),
        Reply::text(r#"{"task_id":"t-1","verdict":"accept","reason":"it says hello"}"#),
        Reply::text(r#"{"tasks":[],"issues":[]}"#),
    ]
}

support::cli_rig::cli_agent_suite!(gemini_or_skip());

#[tokio::test]
async fn a_5xx_then_success_is_ridden_out_a_daily_quota_is_a_rate_limit_and_a_401_is_fatal() {
    let Some(bin) = gemini_or_skip() else { return };
    let flaky = Rig::new(
        bin.clone(),
        [Reply::status(503), Reply::text("Done.\n<TASK_DONE>")],
    )
    .await;
    let run = flaky.run(Role::Build, "p").await;
    assert_eq!(run.claim(), Claim::Done, "{run:?}");

    let limited = Rig::new(bin.clone(), [Reply::daily_quota()]).await;
    let run = limited.run(Role::Build, "p").await;
    assert!(matches!(run.exit, AgentExit::RateLimited { .. }), "{run:?}");

    let denied = Rig::new(bin, [Reply::status(401)]).await;
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
async fn a_loop_the_cli_detects_is_a_failed_attempt_saying_so() {
    let Some(bin) = gemini_or_skip() else { return };
    // The same tool call again and again: the CLI stops, warns, and says success.
    let rig = Rig::new(bin, (0..6).map(|_| Reply::shell("true"))).await;

    let run = rig.run(Role::Build, "p").await;

    assert!(rig.stdout().contains(r#""status":"success""#));
    assert!(
        matches!(&run.exit, AgentExit::Failed { reason, kind: FailureKind::Attempt }
            if reason.contains("Loop detected")),
        "{run:?}"
    );
}

/// With no model set, the CLI asks its router model which model a write run needs before
/// calling it: the scripted API answers the router apart from the script, so the run
/// completes on the model the router chose, after one router call (an unanswered router is
/// asked 5 times over ~93 s, then the CLI falls back to pro).
#[tokio::test]
async fn with_no_model_the_router_chooses_one_and_the_task_completes() {
    let Some(bin) = gemini_or_skip() else { return };
    let api = GeminiApi::with_script([
        Reply::shell("echo hello > hello.txt"),
        Reply::text("Wrote hello.txt.\n<TASK_DONE>"),
    ])
    .await;
    let home = tempfile::tempdir().unwrap();
    let ws = support::messages_api::git_repo();
    let gemini = api
        .env(home.path())
        .into_iter()
        .fold(GeminiCli::new().bin(bin), |g, (k, v)| g.env(k, v));
    let request = AgentRequest::new(Role::Build, "Write hello.txt", ws.path())
        .sandbox(support::sandbox(ws.path()))
        .timeout(std::time::Duration::from_secs(120));

    let started = std::time::Instant::now();
    let run = gemini.run(request).await.unwrap();

    assert_eq!(run.claim(), Claim::Done, "{run:?}");
    assert!(ws.path().join("hello.txt").exists());
    let routed = api.router_requests().await;
    assert_eq!(
        routed.len(),
        1,
        "the router was asked again: its answer was not read"
    );
    let models = api.models().await;
    assert_eq!(models.len(), 2, "{models:?}");
    assert!(
        models
            .iter()
            .all(|m| m.contains("flash") && !m.contains("lite")),
        "not the flash model the router chose: {models:?}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
}
