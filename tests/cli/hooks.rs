//! A `required` hook that fails ends the run with exit 1, naming the hook: on the run's end
//! and on an event in the middle of it. (Every mode's hooks: `tests/runtime/hooks.rs`.)

use std::path::Path;

use super::{project, ralph, stderr, stdout};

/// One task: investigated, built, accepted, nothing missing.
pub(super) const SCRIPT: &str = r#"
[[run]]
role = "investigate"
subject = "i-1"
[[run.steps]]
json = { tasks = [{ name = "Write hello.txt", accept = "hello.txt exists" }] }

[[run]]
role = "build"
subject = "t-1"
[[run.steps]]
write = { path = "hello.txt", content = "hello\n" }
[[run.steps]]
answer = "Wrote it.\n<TASK_DONE>"

[[run]]
role = "verify"
subject = "t-1"
[[run.steps]]
json = { verdict = "accept", reason = "it exists" }

[[run]]
role = "gap_analysis"
[[run.steps]]
json = { tasks = [], issues = [] }
"#;

/// `ralph.toml` with a required hook named `pager` on `on` that fails saying why.
fn config(dir: &Path, on: &str) {
    std::fs::write(
        dir.join("ralph.toml"),
        format!(
            "[[hooks]]\nname = \"pager\"\non = [{on:?}]\ncommand = [\"sh\", \"-c\", \"echo cannot page >&2; exit 4\"]\nrequired = true\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.join("script.toml"), SCRIPT).unwrap();
}

#[test]
fn a_required_hook_that_fails_on_the_end_exits_1_naming_it() {
    let dir = project();
    config(dir.path(), "finished");

    let out = ralph(
        dir.path(),
        &["construct", "spec.md", "--script", "script.toml"],
        &[],
    );

    assert_eq!(
        out.status.code(),
        Some(1),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stderr(&out).contains(
            "ralph: required hook pager failed on finished: exited with code 4: cannot page"
        ),
        "{}",
        stderr(&out)
    );
    // The warning as it happened, and how the run itself ended.
    let text = stdout(&out);
    assert!(
        text.contains("warning: required hook pager (sh -c echo cannot page >&2; exit 4) failed on finished: exited with code 4: cannot page; the run fails"),
        "{text}"
    );
    assert!(text.contains("Spec complete"), "{text}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(),
        "hello\n",
        "the work was done"
    );
}

#[test]
fn a_required_hook_that_fails_mid_run_fails_the_run_at_its_end_and_its_finished_says_so() {
    let dir = project();
    config(dir.path(), "task_done");

    let out = ralph(
        dir.path(),
        &["construct", "spec.md", "--json", "--script", "script.toml"],
        &[],
    );

    assert_eq!(
        out.status.code(),
        Some(1),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("required hook pager failed on task_done: exited with code 4"),
        "{}",
        stderr(&out)
    );
    let finished: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &serde_json::Value| v["event"] == "finished")
        .collect();
    assert_eq!(finished.len(), 1, "{}", stdout(&out));
    let end = &finished[0];
    assert_eq!(end["outcome"]["outcome"], "complete", "{end}");
    assert_eq!(end["exit_code"], 1, "{end}");
    assert_eq!(end["needs_person"], true, "{end}");
    assert_eq!(
        end["error"],
        "required hook pager failed on task_done: exited with code 4: cannot page"
    );
}
