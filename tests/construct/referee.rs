//! What the referee judges with cannot change under a run (audit rows 1 and 3): a gate's
//! script or `ralph.toml` changed during an unconfined agent run is the agent's doing, put
//! back and the attempt failed; changed by a person (or during a confined run, where no
//! agent could) it stops the run before the next gate, with nothing committed.

#![allow(clippy::unwrap_used)]

use super::*;

/// The gate and its script: passes once `done.txt` is there.
const CHECK: &str = "test -f done.txt || { echo 'done.txt is missing'; exit 1; }\n";

fn with_gate_script(sandbox: &str) -> tempfile::TempDir {
    let dir = workspace(SPEC);
    write(dir.path(), "check.sh", CHECK);
    write(
        dir.path(),
        "ralph.toml",
        &format!(
            "[[gates]]\nname = \"check\"\ncommand = \"sh check.sh\"\n\n[sandbox]\nmode = \"{sandbox}\"\n"
        ),
    );
    dir
}

fn ralph(dir: &Path, agent: FakeAgent, events: &Recorder) -> Ralph {
    Ralph::builder()
        .workspace(dir)
        .agent(agent)
        .store(MemoryStore::new())
        .observer(events.clone())
        .build()
        .unwrap()
}

/// Row 3: an agent that rewrote the gate's script to `exit 0` was judged by it. Unconfined,
/// the rewrite is found after its run: put back, the attempt fails naming the script, and
/// the retry is told; the honest retry passes the real gate.
#[tokio::test]
async fn an_unconfined_agent_that_rewrites_the_gate_script_fails_and_it_is_put_back() {
    let dir = with_gate_script("off");
    let cheat = Script::new()
        .write("check.sh", "exit 0\n")
        .answer("Made the check pass.\n<TASK_DONE>");
    let agent = one_task()
        .on_attempt(Role::Build, "t-1", 1, cheat)
        .on_attempt(Role::Build, "t-1", 2, writes_done());
    let events = Recorder::default();

    let outcome = ralph(dir.path(), agent, &events)
        .construct("spec.md")
        .await
        .unwrap();

    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("check.sh")).unwrap(),
        CHECK
    );
    let retries = events.of_kind("task_retry");
    assert_eq!(retries.len(), 1, "{retries:?}");
    assert!(
        retries[0]["reason"].as_str().unwrap().contains("check.sh"),
        "{retries:?}"
    );
}

/// A person who edits the gate's script while the agent works (with the run confined, no
/// agent could have): the run stops before the gate with `ChangedDuringRun`, the agent's
/// attempt neither judged nor counted; the same command then uses the new script.
#[tokio::test]
async fn a_person_who_changes_the_gate_script_during_a_run_stops_it_before_the_gate() {
    let dir = with_gate_script("auto");
    if !bwrap_works() {
        eprintln!("skipped: no working bubblewrap, so the run is not confined here");
        return;
    }
    let script = dir.path().join("check.sh");
    let slow = Script::new()
        .delay(Duration::from_millis(800))
        .write("done.txt", "hello\n")
        .answer("Wrote done.txt.\n<TASK_DONE>");
    let agent = one_task().always(Role::Build, slow);
    let events = Recorder::default();
    let ralph = ralph(dir.path(), agent, &events);
    let edit = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        std::fs::write(script, format!("{CHECK}echo checked\n")).unwrap();
    });

    let err = ralph.construct("spec.md").await.unwrap_err();
    edit.await.unwrap();

    assert!(matches!(err, Error::ChangedDuringRun { .. }), "{err:?}");
    assert!(err.to_string().contains("check.sh"), "{err}");
    assert!(events.of_kind("gate_started").is_empty(), "no gate ran");
    let board = ralph.board().await.unwrap();
    assert_eq!(
        board.task("t-1").unwrap().attempts,
        0,
        "the attempt is not counted"
    );
    let outcome = ralph.construct("spec.md").await.unwrap();
    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
}

/// Row 3 with tasks built at once (`build_concurrency = 2`): the gate runs in the task's
/// work tree, with the tree's copy of its script. An unconfined agent that rewrites that
/// copy fails the same way, the copy is put back, and nothing of the rewrite is merged.
#[tokio::test]
async fn an_unconfined_agent_that_rewrites_its_work_trees_gate_script_fails() {
    let dir = with_gate_script("off");
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "base"]);
    let cheat = Script::new()
        .write("check.sh", "exit 0\n")
        .answer("Made the check pass.\n<TASK_DONE>");
    let agent = one_task()
        .on_attempt(Role::Build, "t-1", 1, cheat)
        .on_attempt(Role::Build, "t-1", 2, writes_done());
    let events = Recorder::default();

    let outcome = Ralph::builder()
        .workspace(dir.path())
        .agent(agent)
        .store(MemoryStore::new())
        .observer(events.clone())
        .build_concurrency(2)
        .build()
        .unwrap()
        .construct("spec.md")
        .await
        .unwrap();

    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    let retries = events.of_kind("task_retry");
    assert_eq!(retries.len(), 1, "{retries:?}");
    assert!(
        retries[0]["reason"].as_str().unwrap().contains("check.sh"),
        "{retries:?}"
    );
    assert_eq!(
        git(&["show", "HEAD:check.sh"]),
        CHECK,
        "the rewrite was not merged"
    );
    assert_eq!(git(&["show", "HEAD:done.txt"]), "hello\n");
}

fn bwrap_works() -> bool {
    std::process::Command::new("bwrap")
        .args(["--ro-bind", "/", "/", "--unshare-user", "true"])
        .status()
        .is_ok_and(|s| s.success())
}
