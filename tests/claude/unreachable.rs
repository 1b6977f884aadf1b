//! The pinned Claude CLI pointed at a closed port on 127.0.0.1: it retries each refused call
//! (`api_retry` lines, error class `unknown`). With the CLI's retries outlasting a short
//! `unreachable_after`, ralph stops it as unreachable, naming it and its last error, and
//! leaves nothing running. What is asserted is the outcome and the message, never the time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::messages_api::{
    ClaudeHome, MessagesApi, alive_with_env, claude_or_skip, git_repo,
};
use ralph::agent::{AgentEvent, AgentExit, AgentRequest, FailureKind, Role};
use ralph::{Agent, ClaudeCli};

#[tokio::test]
async fn claude_without_a_server_is_stopped_as_unreachable_naming_it_and_its_last_error() {
    let Some(bin) = claude_or_skip() else { return };
    // The scripted API gives the environment; the base URL is then a port nothing listens on.
    let api = MessagesApi::with_script([]).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let home = ClaudeHome::new();
    let mark = format!("unreachable-{}-{closed}", std::process::id());
    let claude = api
        .env()
        .into_iter()
        .chain(home.env())
        .chain([
            (
                "ANTHROPIC_BASE_URL".to_owned(),
                format!("http://127.0.0.1:{closed}"),
            ),
            ("TEST_RUN_MARK".to_owned(), mark.clone()),
        ])
        .fold(
            ClaudeCli::new()
                .bin(bin)
                .max_retries(10)
                .grace(Duration::from_secs(3)),
            |claude, (k, v)| claude.env(k, v),
        );
    let repo = git_repo();
    let statuses = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&statuses);
    let request = AgentRequest::new(Role::Build, "Write hello.txt", repo.path())
        .timeout(Duration::from_secs(120))
        .unreachable_after(Duration::from_secs(2))
        .on_event(move |event| {
            if let AgentEvent::Status { agent, line } = event {
                sink.lock().unwrap().push(format!("{agent}: {line}"));
            }
        });

    let run = claude.run(request).await.unwrap();

    let AgentExit::Failed { reason, kind } = &run.exit else {
        panic!("{run:?}")
    };
    assert_eq!(*kind, FailureKind::Unreachable, "{run:?}");
    let last = "API call failed without a response (connection refused or timed out)";
    assert!(
        reason.starts_with("claude is unreachable: no successful API exchange for 2s")
            && reason.contains(&format!("the last: {last}")),
        "{reason}"
    );
    let statuses = statuses.lock().unwrap();
    assert!(
        !statuses.is_empty()
            && statuses
                .iter()
                .all(|s| s.starts_with(&format!("claude: {last}"))),
        "{statuses:?}"
    );
    assert_eq!(alive_with_env("TEST_RUN_MARK", &mark), Vec::<i32>::new());
}
