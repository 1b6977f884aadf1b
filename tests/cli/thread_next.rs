//! Every thread phase has a `next:` that works, and a checkpoint prints where the thread
//! stands, not its history again (re-audit: "thread, continued" and case 39).

use std::path::Path;
use std::process::Output;

use crate::{THREAD_SCRIPT, THREAD_SPEC, ralph, stderr, stdout};

/// `ralph thread --script THREAD_SCRIPT ARGS` in `ws`, which must exit 0; its stdout.
fn thread_ok(ws: &Path, args: &[&str]) -> String {
    let out = thread(ws, args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}\n{}",
        stdout(&out),
        stderr(&out)
    );
    stdout(&out)
}

fn thread(ws: &Path, args: &[&str]) -> Output {
    let mut all = vec!["thread", "--script", THREAD_SCRIPT];
    all.extend_from_slice(args);
    ralph(ws, &all, &[])
}

/// The text of `out`'s `next:` line, which must be there and say something.
fn next_line(text: &str) -> String {
    let next = text
        .lines()
        .find_map(|l| l.strip_prefix("next: "))
        .unwrap_or_else(|| panic!("no next: line in\n{text}"));
    assert!(!next.trim().is_empty(), "an empty next: line in\n{text}");
    next.to_owned()
}

#[tokio::test]
async fn a_checkpoint_prints_what_is_new_and_approve_names_the_next_step() {
    let dir = crate::support::threads::repo().await;
    let ws = dir.path();
    thread_ok(ws, &["new", "--title", "Greeter", "--spec", THREAD_SPEC]);
    thread_ok(ws, &["finalize"]);
    let started = thread_ok(ws, &["start"]);
    assert!(
        started.contains("iteration 1:") && started.contains("iteration 2:"),
        "the loop prints the iterations it ran: {started}"
    );

    for step in ["review", "approve", "message"] {
        let out = thread_ok(ws, &[step]);
        assert!(
            !out.contains("iteration") && !out.contains("agents:"),
            "{step} reprints the history: {out}"
        );
        next_line(&out);
    }
    let shown = thread_ok(ws, &["show"]);
    assert!(
        shown.contains("iteration 1:") && shown.contains("iteration 2:"),
        "show keeps the whole history: {shown}"
    );
}

#[tokio::test]
async fn approve_says_to_prepare_the_message_then_commit() {
    let dir = crate::support::threads::repo().await;
    let ws = dir.path();
    thread_ok(ws, &["new", "--title", "Greeter", "--spec", THREAD_SPEC]);
    thread_ok(ws, &["finalize"]);
    thread_ok(ws, &["start"]);
    thread_ok(ws, &["review"]);

    let approved = thread_ok(ws, &["approve"]);

    let next = next_line(&approved);
    assert!(
        next.contains("`message`") && next.contains("`commit`"),
        "{approved}"
    );
}

/// Case 39: a `start` SIGKILLed while Verifying leaves the thread Verifying with a dead pid.
#[tokio::test]
async fn a_run_cut_short_while_verifying_says_resume_in_show_and_status() {
    let dir = crate::support::threads::repo().await;
    let ws = dir.path();
    thread_ok(ws, &["new", "--title", "Greeter", "--spec", THREAD_SPEC]);
    thread_ok(ws, &["finalize"]);
    let record = ws.join(".ralph/threads/1-greeter/thread.json");
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    json["phase"] = serde_json::json!({"type": "Verifying", "data": {"iteration": 1}});
    json["runner_pid"] = serde_json::json!(dead);
    json["iteration_limit"] = serde_json::json!(5);
    std::fs::write(&record, json.to_string()).unwrap();
    let adopted = ralph(ws, &["repair", "--adopt"], &[]);
    assert!(adopted.status.success(), "{}", stderr(&adopted));

    let shown = thread_ok(ws, &["show"]);
    assert!(
        next_line(&shown).contains("`ralph thread resume`"),
        "{shown}"
    );
    let status = ralph(ws, &["status"], &[]);
    let status = stdout(&status);
    let next = next_line(&status);
    assert!(
        next.contains("1-greeter") && next.contains("`ralph thread resume`"),
        "{status}"
    );
    assert!(!status.contains("every run here is complete"), "{status}");
    let resumed = thread_ok(ws, &["resume"]);
    assert!(resumed.contains("phase: Implemented"), "{resumed}");
}

/// Case 62: a spec without a promise tag is taken by `new` and `finalize`, with the warning
/// `start`'s preflight would refuse it with, so the person learns it before `start`.
#[tokio::test]
async fn new_and_finalize_warn_of_a_spec_with_no_promise_tag() {
    let dir = crate::support::threads::repo().await;
    let ws = dir.path();
    let spec = ws.join("np.md");
    std::fs::write(
        &spec,
        "# No promise\nWrite x.\n\n## Acceptance Criteria\n\n- [ ] exists: `test -f x`\n",
    )
    .unwrap();
    let spec = spec.to_str().unwrap();
    for args in [&["new", "--title", "NP", "--spec", spec][..], &["finalize"]] {
        let out = thread(ws, args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("warning: spec v1 (")
                && stderr(&out).contains("the spec has no promise tag: add a line"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let fine = thread(ws, &["new", "--title", "Greeter", "--spec", THREAD_SPEC]);
    assert_eq!(stderr(&fine), "", "a sound spec gets no warning");
}
