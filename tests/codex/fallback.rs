//! The fallback chain with the real CLIs: `ralph construct spec.md --agent claude,codex`,
//! where the pinned Claude CLI (logged in as a subscriber, against the scripted Messages
//! API) hits its five-hour limit on the first task, the pinned Codex CLI builds that task,
//! and once Claude's reset time has passed Claude builds the next one. `ralph status` then
//! shows both choices. (`bare = false`: `--bare` takes its credentials from
//! `ANTHROPIC_API_KEY` only, and only a logged-in CLI reads the subscription limits.)

use std::time::Duration;

use serde_json::json;

use super::Rig;
use crate::support;
use crate::support::messages_api::{self, ClaudeHome, MessagesApi, claude_or_skip};
use crate::support::responses_api::{Reply, codex_or_skip};

/// Claude's limit resets this long after its 429 (plus up to a second of rounding).
const LIMIT: Duration = Duration::from_secs(3);

#[tokio::test]
async fn claude_rate_limited_hands_the_task_to_codex_and_takes_the_next_once_its_limit_resets() {
    let Some(codex_bin) = codex_or_skip() else {
        return;
    };
    let Some(claude_bin) = claude_or_skip() else {
        return;
    };
    // Codex's build outlasts Claude's limit, so that the next task finds Claude reset.
    let rig = Rig::new(
        codex_bin.clone(),
        [
            Reply::shell(format!("sleep {} && echo a > a.txt", LIMIT.as_secs() + 2)),
            Reply::text("Wrote a.txt.\n<TASK_DONE>"),
        ],
    )
    .await;
    let accept = || {
        messages_api::Reply::tool_use(
            "StructuredOutput",
            json!({"verdict": "accept", "reason": "it is there"}),
        )
    };
    let claude_api = MessagesApi::with_script([
        messages_api::Reply::tool_use(
            "StructuredOutput",
            json!({"tasks": [
                {"name": "Write a.txt", "accept": "a.txt says a"},
                {"name": "Write b.txt", "accept": "b.txt says b"},
            ]}),
        ),
        messages_api::Reply::rate_limited(LIMIT),
        messages_api::Reply::tool_use("Bash", json!({"command": "echo b > b.txt"})),
        messages_api::Reply::text("Wrote b.txt.\n<TASK_DONE>"),
        accept(),
        accept(),
        messages_api::Reply::tool_use("StructuredOutput", json!({"tasks": [], "issues": []})),
    ])
    .await;
    let home = ClaudeHome::new();
    let claude_env: Vec<String> = claude_api
        .subscriber_env()
        .into_iter()
        .chain(home.env())
        .map(|(k, v)| format!("{k} = {v:?}"))
        .collect();
    std::fs::write(
        rig.path().join("spec.md"),
        "# Two files\nWrite a.txt saying a, then b.txt saying b.\n",
    )
    .unwrap();
    std::fs::write(
        rig.path().join("ralph.toml"),
        format!(
            "{}\n[claude]\nbin = {claude_bin:?}\nmax_retries = 0\nbare = false\npermission_mode = \"bypassPermissions\"\nenv = {{ {} }}\n",
            rig.toml(&codex_bin),
            claude_env.join(", ")
        ),
    )
    .unwrap();

    let workspace = rig.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(support::ralph_bin())
            .args(["construct", "spec.md", "--agent", "claude,codex"])
            .current_dir(workspace)
            .output()
            .unwrap()
    })
    .await
    .unwrap();

    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert_eq!(
        std::fs::read_to_string(rig.path().join("a.txt")).unwrap(),
        "a\n"
    );
    assert_eq!(
        std::fs::read_to_string(rig.path().join("b.txt")).unwrap(),
        "b\n"
    );
    assert_eq!(claude_api.remaining(), 0, "Claude took every other call");
    assert_eq!(rig.api.requests().await.len(), 2, "Codex built t-1 only");
    assert!(said.contains("claude is rate limited until"), "{said}");

    let status = std::process::Command::new(support::ralph_bin())
        .arg("status")
        .current_dir(rig.path())
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains("agent codex took t-1 at ")
            && status.contains("claude is rate limited until"),
        "{status}"
    );
    assert!(
        status.contains("agent claude took t-2 at ") && status.contains("its rate limit reset at"),
        "{status}"
    );
}
