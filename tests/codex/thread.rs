//! A thread from `new` to `commit` with `ralph thread --agent codex`: the pinned Codex CLI,
//! set up in `ralph.toml`, against the scripted Responses API, through the installed binary.

use std::path::Path;

use super::Rig;
use crate::support;
use crate::support::responses_api::{Reply, codex_or_skip};
use ralph_loop_core::git::Git;

/// A spec whose criteria are commands, so the loop asks Codex only to build.
const SPEC: &str = "# Greeter\n\nWrite greet.sh: `sh greet.sh` prints `Hello, World!`.\n\n<promise>GREETER_DONE</promise>\n\n## Acceptance Criteria\n\n- [ ] greets the world: `sh greet.sh | grep -qx 'Hello, World!'`\n";

fn thread(dir: &Path, args: &[&str]) -> String {
    let mut all = vec!["thread"];
    all.extend_from_slice(args);
    let out = std::process::Command::new(support::ralph_bin())
        .args(&all)
        .current_dir(dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test]
async fn a_thread_goes_from_new_to_commit_with_codex() {
    let Some(bin) = codex_or_skip() else { return };
    let rig = Rig::new(
        bin.clone(),
        [
            Reply::shell("printf 'echo \"Hello, World!\"\\n' > greet.sh"),
            Reply::text("Wrote greet.sh.\nGREETER_DONE"),
        ],
    )
    .await;
    let ws = rig.path();
    std::fs::write(ws.join("ralph.toml"), rig.toml(&bin)).unwrap();
    std::fs::write(ws.join(".gitignore"), ".ralph/\n").unwrap();
    Git::new(ws).commit_all("init", &[]).await.unwrap();
    let spec = rig.home.path().join("spec.md");
    std::fs::write(&spec, SPEC).unwrap();

    thread(
        ws,
        &[
            "new",
            "--title",
            "Greeter",
            "--spec",
            spec.to_str().unwrap(),
        ],
    );
    thread(ws, &["finalize"]);
    let started = thread(ws, &["start", "--agent", Rig::NAME]);
    assert!(
        started.contains("phase: Implemented") && started.contains("current model: codex"),
        "{started}"
    );
    assert!(
        rig.api.requests().await[0]
            .to_string()
            .contains("GREETER_DONE"),
        "the thread's prompt reached the API"
    );
    thread(ws, &["review"]);
    thread(ws, &["approve"]);
    thread(ws, &["message"]);
    let done = thread(ws, &["commit"]);
    assert!(done.contains("phase: Done"), "{done}");
    let committed = std::process::Command::new("git")
        .args(["show", "ralph/1-greeter:greet.sh"])
        .current_dir(ws)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&committed.stdout),
        "echo \"Hello, World!\"\n"
    );
}
