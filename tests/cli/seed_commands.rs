//! Seed 000's command table as a person types it: `construct --timeout <ms>`,
//! `query iteration` while a board runs, and `task accept [ID…]`.

use std::path::Path;

use crate::demo::{DEMO, construct_demo};
use crate::{project, ralph, stderr, stdout};

/// Audit row 000-R38: seed 000 writes the timeout in bare milliseconds; the suffixed forms
/// keep working, and zero is refused as a usage error.
#[test]
fn a_bare_timeout_is_milliseconds_as_in_seed_000() {
    let dir = project();
    let dry = |timeout: &str| {
        ralph(
            dir.path(),
            &["construct", "spec.md", "--dry-run", "--timeout", timeout],
            &[],
        )
    };

    for (given, shown) in [
        ("300000", "stage timeout 5m"),
        ("1500", "stage timeout 1s 500ms"),
        ("5m", "stage timeout 5m"),
    ] {
        let out = dry(given);
        assert_eq!(out.status.code(), Some(0), "{given}: {}", stderr(&out));
        assert!(stdout(&out).contains(shown), "{given}: {}", stdout(&out));
    }
    let zero = dry("0");
    assert_eq!(zero.status.code(), Some(64), "{}", stdout(&zero));
    assert!(
        stderr(&zero).contains("longer than zero"),
        "{}",
        stderr(&zero)
    );
    let help = ralph(dir.path(), &["construct", "--help"], &[]);
    assert!(
        stdout(&help).contains("a bare number is milliseconds"),
        "{}",
        stdout(&help)
    );
}

/// The demo's spec and config in a fresh directory.
fn demo_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for file in ["spec.md", "ralph.toml"] {
        std::fs::copy(Path::new(DEMO).join(file), dir.path().join(file)).unwrap();
    }
    dir
}

/// `ralph query iteration` in `dir`.
fn iteration(dir: &Path) -> String {
    let out = ralph(dir, &["query", "iteration"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    stdout(&out).trim().to_owned()
}

/// Audit row 000-R41: the counter as the board keeps it, read after each iteration: the
/// iteration running, or between runs the one to run next, so one more per iteration; once
/// the spec is complete, the iteration that completed it.
#[test]
fn query_iteration_counts_the_iterations_run() {
    let dir = demo_copy();
    assert_eq!(iteration(dir.path()), "0", "no run yet");
    let mut seen = Vec::new();
    for _ in 0..3 {
        let out = construct_demo(dir.path(), &["spec.md", "--max-iterations", "1"])
            .output()
            .unwrap();
        assert!(matches!(out.status.code(), Some(0 | 2)), "{}", stderr(&out));
        seen.push(iteration(dir.path()));
    }
    assert_eq!(
        seen,
        ["2", "3", "3"],
        "the demo completes in its third iteration"
    );
    assert_eq!(
        stdout(&ralph(dir.path(), &["query", "stage"], &[])).trim(),
        "COMPLETE"
    );
}

/// Audit rows 000-R46 and 000-R80: `task accept ID…` takes the named done tasks, and with
/// no id every done task; a task that is not done is refused, naming it.
#[test]
fn task_accept_takes_the_named_done_tasks_or_every_one() {
    let dir = project();
    let run = |args: &[&str]| {
        let out = ralph(dir.path(), args, &[]);
        (out.status.code(), stdout(&out), stderr(&out))
    };
    for n in 1..=4 {
        let task = format!(r#"{{"name": "Part {n}", "accept": "part {n} exists"}}"#);
        assert_eq!(run(&["task", "add", &task]).0, Some(0));
    }
    for id in ["t-1", "t-2", "t-3"] {
        assert_eq!(run(&["task", "done", id]).0, Some(0));
    }

    assert_eq!(
        run(&["task", "accept", "t-2", "t-3"]),
        (
            Some(0),
            "t-2 accepted\nt-3 accepted\n".to_owned(),
            String::new()
        )
    );
    let (code, _, error) = run(&["task", "accept", "t-4"]);
    assert_eq!(code, Some(1));
    assert!(
        error.contains("task t-4 is Pending; only a done task can be accepted"),
        "{error}"
    );
    let (_, done, _) = run(&["query", "tasks", "--done"]);
    assert!(
        done.contains("\"t-1\"") && !done.contains("\"t-2\""),
        "{done}"
    );
    assert_eq!(run(&["task", "accept"]).1, "accepted 1\n");
    let (_, list, _) = run(&["task", "list"]);
    let accepted = list.lines().filter(|l| l.contains("accepted")).count();
    assert_eq!(accepted, 3, "{list}");
}
