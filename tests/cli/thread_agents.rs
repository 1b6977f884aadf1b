//! `ralph thread` with the agents of the other modes: `--agent NAME` and `agents = […]` /
//! `[agent.NAME]` of `ralph.toml`, a fallback chain of them, and `send-back TEXT` reaching
//! the agent's next prompt.

use std::path::Path;
use std::process::Output;

use super::{THREAD_SPEC, ralph, stderr, stdout};
use ralph_loop_core::git::Git;

/// A shell-script agent: keeps each prompt in `.ralph/prompts/` (ralph's state, never
/// committed, which the sandbox lets it write: see [`repo_with`]), and as a builder writes
/// `greet.sh` and claims done.
const AGENT: &str = r#"prompt=$(cat)
mkdir -p .ralph/prompts
n=$(ls .ralph/prompts | wc -l)
printf '%s\n' "$prompt" > ".ralph/prompts/$n.txt"
case "$1" in
  build) printf '#!/bin/sh\necho "Hello, ${1:-World}!"\n' > greet.sh; printf 'Wrote greet.sh.\nGREETER_DONE\n' ;;
  *) echo "unexpected role $1" >&2; exit 1 ;;
esac
"#;

/// A repository with one commit holding `agent.sh` and `ralph.toml` (`config`, then the
/// table of the agent `mine`).
async fn repo_with(config: &str) -> tempfile::TempDir {
    let dir = crate::support::threads::repo().await;
    std::fs::write(dir.path().join("agent.sh"), AGENT).unwrap();
    std::fs::write(
        dir.path().join("ralph.toml"),
        format!(
            "{config}\n[sandbox]\nwrite = [\".ralph/prompts\"]\n\n\
             [agent.mine]\ncommand = [\"sh\", \"agent.sh\", \"{{role}}\"]\n"
        ),
    )
    .unwrap();
    // The folder the test watches, writable in the sandbox once it exists.
    std::fs::create_dir_all(dir.path().join(".ralph/prompts")).unwrap();
    Git::new(dir.path())
        .commit_all("agents", &[])
        .await
        .unwrap();
    dir
}

/// `ralph thread ARGS` in `dir`, which must exit 0; its stdout.
fn thread(dir: &Path, args: &[&str]) -> String {
    let out = run(dir, args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}\n{}",
        stdout(&out),
        stderr(&out)
    );
    stdout(&out)
}

fn run(dir: &Path, args: &[&str]) -> Output {
    let mut all = vec!["thread"];
    all.extend_from_slice(args);
    ralph(dir, &all, &[])
}

/// The prompts the script agent kept, oldest first.
fn prompts(dir: &Path) -> Vec<String> {
    let folder = dir.join(".ralph/prompts");
    let count = std::fs::read_dir(&folder).unwrap().count();
    (0..count)
        .map(|n| std::fs::read_to_string(folder.join(format!("{n}.txt"))).unwrap())
        .collect()
}

#[tokio::test]
async fn a_thread_goes_from_new_to_commit_with_a_command_agent_from_ralph_toml() {
    let dir = repo_with("").await;
    let ws = dir.path();
    thread(ws, &["new", "--title", "Greeter", "--spec", THREAD_SPEC]);
    thread(ws, &["finalize"]);
    let dry = thread(ws, &["dry-run", "--agent", "mine"]);
    assert!(dry.contains("agents:    mine"), "{dry}");

    let started = thread(ws, &["start", "--agent", "mine"]);
    assert!(started.contains("phase: Implemented"), "{started}");
    let shown = thread(ws, &["show"]);
    assert!(
        shown.contains("agents: mine") && shown.contains("current model: mine"),
        "{shown}"
    );

    // The review sends it back with the reviewer's words, which the next prompt carries.
    thread(ws, &["review"]);
    let again = thread(ws, &["send-back", "Also greet Ada by name."]);
    assert!(again.contains("phase: Implemented"), "{again}");
    let prompts = prompts(ws);
    assert_eq!(prompts.len(), 2, "{prompts:?}");
    assert!(!prompts[0].contains("greet Ada"), "{}", prompts[0]);
    assert!(
        prompts[1].contains("## The Reviewer's Feedback")
            && prompts[1].contains("Also greet Ada by name."),
        "{}",
        prompts[1]
    );
    // A loop that goes on keeps the agents it was configured with.
    let refused = run(ws, &["resume", "--agent", "claude"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("runs with mine (set while Configuring)"),
        "{}",
        stderr(&refused)
    );

    thread(ws, &["review"]);
    thread(ws, &["approve"]);
    thread(ws, &["message"]);
    let done = thread(ws, &["commit"]);
    assert!(done.contains("phase: Done"), "{done}");
    let committed = std::process::Command::new("git")
        .args(["show", "--stat", "--format=%s", "ralph/1-greeter"])
        .current_dir(ws)
        .output()
        .unwrap();
    let committed = String::from_utf8_lossy(&committed.stdout);
    assert!(
        committed.contains("Greeter") && committed.contains("greet.sh"),
        "{committed}"
    );
    assert!(!committed.contains(".ralph"), "{committed}");
}

/// `agents = ["down", "mine"]`: `down` cannot start, so the chain passes it over and
/// `mine` takes the runs; `show` says which agent runs and why.
#[tokio::test]
async fn agents_of_ralph_toml_are_a_fallback_chain_in_threads() {
    let dir =
        repo_with("agents = [\"down\", \"mine\"]\n[agent.down]\ncommand = [\"./no-such-agent\"]\n")
            .await;
    let ws = dir.path();
    thread(ws, &["new", "--title", "Greeter", "--spec", THREAD_SPEC]);
    thread(ws, &["finalize"]);
    let started = thread(ws, &["start"]);
    assert!(started.contains("phase: Implemented"), "{started}");
    assert!(
        started.contains("agents: down → mine")
            && started.contains("current model: mine (down is unavailable ("),
        "{started}"
    );
    assert_eq!(prompts(ws).len(), 1, "mine built it once");
}
