//! Threads stand on the runtime's context, as every mode does: `ralph.toml`'s `[context]`
//! reaches every agent request, a `[prompts]` override replaces a thread template, every
//! agent is given the workspace's config, and `Ralph::threads` shares the builder's.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::threads::{SPEC, finalized, repo, writes};
use ralph::Ralph;
use ralph::agent::{Agent, AgentError, AgentRequest, AgentRun, FakeAgent, Script};
use ralph::config::{Config, ContextThresholds};
use ralph::thread::{PhaseKind, Threads};
use ralph_loop_core::git::Git;
use serde_json::json;

/// `inner`, keeping the context thresholds of every request and the `grace` of the config
/// it was given.
struct Seen {
    inner: FakeAgent,
    contexts: Mutex<Vec<ContextThresholds>>,
    configured: Arc<Mutex<Option<Duration>>>,
}

impl Seen {
    fn new(inner: FakeAgent) -> Self {
        Seen {
            inner,
            contexts: Mutex::new(Vec::new()),
            configured: Arc::default(),
        }
    }
}

#[ralph::async_trait]
impl Agent for Seen {
    async fn run(&self, request: AgentRequest) -> Result<AgentRun, AgentError> {
        self.contexts.lock().unwrap().push(request.context);
        self.inner.run(request).await
    }

    fn configure(&mut self, config: &Config) {
        *self.configured.lock().unwrap() = Some(config.grace);
    }
}

/// Writes `files` into the repository at `dir` and commits them, so preflight finds the
/// tree clean.
async fn committed(dir: &std::path::Path, files: &[(&str, &str)]) {
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    Git::new(dir).commit_all("config", &[]).await.unwrap();
}

fn quick(threads: Threads) -> Threads {
    threads.quick(true)
}

#[tokio::test]
async fn context_thresholds_of_ralph_toml_reach_every_request_of_a_thread() {
    let dir = repo().await;
    committed(
        dir.path(),
        &[(
            "ralph.toml",
            "grace = \"3s\"\n[context]\nwarn = 0.5\ncompact = 0.6\nkill = 0.9\n",
        )],
    )
    .await;
    let spec = format!("{SPEC}- [ ] the greeting is friendly\n");
    let agent = Seen::new(
        FakeAgent::new()
            .then(writes("hello\n"))
            .then(Script::new().json(json!({"verdict": "accept", "reason": "friendly"}))),
    );
    let configured = Arc::clone(&agent.configured);
    let agent = Arc::new(agent);
    let named = Seen::new(FakeAgent::new());
    let named_configured = Arc::clone(&named.configured);
    let threads =
        quick(Threads::new(dir.path(), Arc::clone(&agent)).unwrap()).agent("named", named);
    let id = finalized(&threads, &spec);

    let thread = threads.thread(&id).start().await.unwrap();

    assert_eq!(thread.phase.kind(), PhaseKind::PendingReview);
    let contexts = agent.contexts.lock().unwrap().clone();
    assert_eq!(contexts.len(), 2, "the build and the verifier");
    for context in contexts {
        assert_eq!(context, ContextThresholds::new(0.5, 0.6, 0.9));
    }
    // `Agent::configure`: an `Arc` shared with the test keeps its own settings (as with
    // `RalphBuilder::agent`); an agent handed over, or registered by name, takes the config.
    assert_eq!(*configured.lock().unwrap(), None);
    assert_eq!(
        *named_configured.lock().unwrap(),
        Some(Duration::from_secs(3))
    );
}

#[tokio::test]
async fn the_agent_handed_to_threads_new_is_given_the_workspace_config() {
    let dir = repo().await;
    std::fs::write(dir.path().join("ralph.toml"), "grace = \"4s\"\n").unwrap();
    let agent = Seen::new(FakeAgent::new());
    let configured = Arc::clone(&agent.configured);
    let _threads = Threads::new(dir.path(), agent).unwrap();
    assert_eq!(*configured.lock().unwrap(), Some(Duration::from_secs(4)));
}

#[tokio::test]
async fn a_prompts_override_of_a_thread_template_is_used() {
    let dir = repo().await;
    committed(
        dir.path(),
        &[
            (
                "ralph.toml",
                "[prompts]\nthread = \"prompts/thread.md\"\nthread_verify = \"prompts/verify.md\"\n",
            ),
            (
                "prompts/thread.md",
                "Ours: {{ title }}, iteration {{ iteration }}; end with the tag.\n",
            ),
            ("prompts/verify.md", "Ours too: is it true that {{ criterion }}?\n"),
        ],
    )
    .await;
    let spec = format!("{SPEC}- [ ] the greeting is friendly\n");
    let agent = Arc::new(
        FakeAgent::new()
            .then(writes("hello\n"))
            .then(Script::new().json(json!({"verdict": "accept", "reason": "friendly"}))),
    );
    let threads = quick(Threads::new(dir.path(), Arc::clone(&agent)).unwrap());
    let id = finalized(&threads, &spec);
    let dry = threads.thread(&id).dry_run().unwrap().to_string();
    assert!(
        dry.contains("prompt:    thread (") && dry.contains("prompts/thread.md"),
        "{dry}"
    );

    threads.thread(&id).start().await.unwrap();

    let prompts: Vec<String> = agent.requests().iter().map(|r| r.prompt.clone()).collect();
    assert_eq!(
        prompts,
        [
            "Ours: Greeter, iteration 1; end with the tag.\n",
            "Ours too: is it true that the greeting is friendly?\n"
        ]
    );
}

/// `Ralph::threads`: the builder's overrides, observers and stop token hold in threads.
#[tokio::test]
async fn threads_of_a_ralph_share_its_config_and_stop_token() {
    let dir = repo().await;
    let agent = Seen::new(FakeAgent::new().then(writes("hello\n")));
    let agent = Arc::new(agent);
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(Arc::clone(&agent))
        .config("context.warn", 0.4)
        .build()
        .unwrap();
    let threads = quick(ralph.threads());
    let id = finalized(&threads, SPEC);
    threads.thread(&id).start().await.unwrap();
    assert_eq!(agent.contexts.lock().unwrap()[0].warn, 0.4);

    ralph.stop_token().stop();
    assert!(threads.stop_token().is_stopped());
}
