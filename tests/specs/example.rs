//! The `construct` example's plan mode and build mode on the bundled plan demo: plan, then
//! build from the resulting implementation.json, with real git and real shell gates.

#![cfg(unix)]
#![allow(clippy::unwrap_used)]

use std::process::Command;

use crate::support::example;

fn run(mode: &str, workspace: &std::path::Path) -> (Option<i32>, String) {
    let out = Command::new(example())
        .arg(mode)
        .arg("--workspace")
        .arg(workspace)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

#[test]
fn plan_then_build_the_plan_demo() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");

    // Build first: there is nothing to build from yet.
    let (code, text) = run("build", &ws);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("run plan mode first"), "{text}");

    let (code, text) = run("plan", &ws);
    assert_eq!(code, Some(0), "{text}");
    for part in ["greeter-1 Write greet.sh", "farewell-1 Write bye.sh"] {
        assert!(text.contains(part), "missing {part:?} in\n{text}");
    }
    assert!(ws.join("implementation.json").exists());

    let (code, text) = run("build", &ws);
    assert_eq!(code, Some(0), "{text}");
    for part in [
        "plan specs/plans/greeter.md (attempt 1)",
        "Syntax error",
        "greeter committed",
        "plan invalidated (the spec requires POSIX sh, the plan chose bash)",
        "plan specs/plans/farewell.md (attempt 2)",
        "farewell committed",
        "All specs complete: 2 spec(s) committed, 4 task(s) completed in this run.",
    ] {
        assert!(text.contains(part), "missing {part:?} in\n{text}");
    }
    let log = Command::new("git")
        .arg("-C")
        .arg(&ws)
        .args(["log", "--format=%s"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&log.stdout),
        "Farewell\nGreeter\nSpecs of the plan demo\n"
    );
    assert!(ws.join("specs/plans/farewell.attempt-1.md").exists());
    let progress = std::fs::read_to_string(ws.join("PROGRESS.md")).unwrap();
    assert!(progress.contains("greeter: Greeter") && progress.contains("farewell: Farewell"));
}
