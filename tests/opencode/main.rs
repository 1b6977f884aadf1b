//! `OpencodeCli` against the real, pinned opencode talking to a scripted Responses API on
//! 127.0.0.1 (`support::responses_api`, opencode's `openai` provider pointed at it): the
//! adversarial cases every CLI agent passes (`support::cli_rig`), then opencode's own.
//! Skipped (saying so) when no `opencode` is installed, except under `CI=true`.

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

use ralph::agent::{Agent, AgentExit, AgentRequest, Claim, OpencodeCli, Role, Usage};
use support::cli_rig::CliUnderTest;
use support::responses_api::{Reply, ResponsesApi, opencode_or_skip};

/// opencode, its `openai` provider pointed at the scripted Responses API.
struct Opencode;

impl CliUnderTest for Opencode {
    type Agent = OpencodeCli;
    type Api = ResponsesApi;
    type Reply = Reply;
    const NAME: &'static str = "opencode";
    const MODEL: &'static str = "openai/gpt-5-codex";
    const PRINTS_RECOVERED_ERRORS: bool = false;
    // `OpencodeCli` never waits less: opencode is silent from its start to its first answer.
    const IDLE_FLOOR: std::time::Duration = std::time::Duration::from_secs(30);

    async fn serve(replies: Vec<Reply>) -> ResponsesApi {
        ResponsesApi::with_script(replies).await
    }

    fn settings(api: &ResponsesApi, home: &Path) -> (Vec<String>, Vec<(String, String)>) {
        (Vec::new(), api.opencode_env(home))
    }

    fn agent(bin: PathBuf, args: Vec<String>, env: Vec<(String, String)>) -> OpencodeCli {
        let opencode = args.into_iter().fold(
            OpencodeCli::new().bin(bin).model(Self::MODEL),
            OpencodeCli::arg,
        );
        env.into_iter().fold(opencode, |o, (k, v)| o.env(k, v))
    }

    fn assert_usage(usage: &Usage) {
        // opencode counts cached input apart: 2 × (100 − 40), and 2 × 40 read from the cache.
        assert_eq!(
            (usage.input_tokens, usage.cache_read_tokens),
            (120, 80),
            "{usage:?}"
        );
    }
}

type Rig = support::cli_rig::Rig<Opencode>;

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

support::cli_rig::cli_agent_suite!(opencode_or_skip());

#[tokio::test]
async fn a_5xx_then_success_is_ridden_out() {
    let Some(bin) = opencode_or_skip() else {
        return;
    };
    let rig = Rig::new(bin, [Reply::status(500), Reply::text("Done.\n<TASK_DONE>")]).await;
    let run = rig.run(Role::Build, "p").await;
    assert_eq!(run.claim(), Claim::Done, "{run:?}");
}
