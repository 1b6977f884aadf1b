//! A good guest in the user's repository (issue 26): a closed stdout ends the command
//! quietly.

use super::*;

/// A board of `n` pending tasks for `spec.md`, written by hand (seed 000's format).
fn long_board(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir.join(".ralph")).unwrap();
    let mut text = String::from(
        r#"{"t":"run","iteration":1,"spec":"spec.md","seeded":true,"next_task":1000}"#,
    );
    text.push('\n');
    for i in 1..=n {
        text.push_str(&format!(
            r#"{{"t":"task","id":"t-{i}","name":"Write t-{i}.txt","s":"p","accept":"it exists"}}"#
        ));
        text.push('\n');
    }
    std::fs::write(dir.join(".ralph/plan.jsonl"), text).unwrap();
}

/// Runs `ralph ARGS` in `dir` with its stdout a pipe whose reader is already closed.
fn with_reader_closed(dir: &Path, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    command(dir, args)
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap()
}

/// Audit row 60: a closed stdout ends `ralph demo` and `ralph status` on a long board
/// quietly, as SIGPIPE ends other commands: no panic, nothing on stderr.
#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let dir = project();
    long_board(dir.path(), 300);
    let parent = tempfile::tempdir().unwrap();
    let ws = parent.path().join("ws");
    for (at, args) in [
        (dir.path(), vec!["status"]),
        (parent.path(), vec!["demo", "--in", ws.to_str().unwrap()]),
    ] {
        let out = with_reader_closed(at, &args);
        assert_eq!(out.status.code(), Some(141), "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{args:?}");
    }
}
