//! The `fake_claude` example, a stand-in for the `claude` CLI: one test per knob.
//! Linux: the session checks read `/proc`.

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::fake_claude;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::Value;

/// The flags ralph passes.
const FLAGS: [&str; 4] = ["-p", "--output-format", "stream-json", "--verbose"];
/// Longer than any run here should take; a hung fake fails the test instead of hanging it.
const LIMIT: Duration = Duration::from_secs(20);
const TRANSCRIPTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/claude/transcripts");

/// `fake_claude FLAGS`, with knobs `(name, value)` and none inherited from the test's env.
fn fake(knobs: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(fake_claude());
    cmd.args(FLAGS);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("FAKE_CLAUDE_") {
            cmd.env_remove(name);
        }
    }
    cmd.envs(knobs.iter().copied());
    cmd
}

/// Runs to the end with `stdin` as the prompt.
fn run(cmd: &mut Command, stdin: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let written = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    // A fake that exits at once (a usage error) may close its stdin before the prompt is in.
    if let Err(e) = written {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || tx.send(child.wait_with_output()));
    match rx.recv_timeout(LIMIT) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            sigkill(pid);
            panic!("fake_claude still running after {LIMIT:?}");
        }
    }
}

/// A running fake whose stdout lines arrive on a channel; SIGKILLed when dropped.
struct Running {
    child: Child,
    lines: Receiver<String>,
}

impl Running {
    fn start(cmd: &mut Command) -> Self {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in stdout.lines() {
                if tx.send(line.unwrap()).is_err() {
                    break;
                }
            }
        });
        Self { child, lines }
    }

    fn line(&self) -> Value {
        let line = self.lines.recv_timeout(LIMIT).expect("a stdout line");
        serde_json::from_str(&line).unwrap()
    }

    /// No line and no end of stdout for `quiet`.
    fn assert_silent(&self, quiet: Duration) {
        let got = self.lines.recv_timeout(quiet);
        assert_eq!(got, Err(RecvTimeoutError::Timeout), "expected silence");
    }

    /// The exit status, within `LIMIT`.
    fn wait(&mut self) -> ExitStatus {
        let deadline = Instant::now() + LIMIT;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            thread::sleep(Duration::from_millis(10));
        }
        panic!("fake_claude still running after {LIMIT:?}");
    }

    fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.child.id() as i32), signal).unwrap();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sigkill(pid: u32) {
    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
}

/// Every stdout line, each parsed as JSON.
fn json_lines(output: &Output) -> Vec<Value> {
    String::from_utf8(output.stdout.clone())
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// Field 6 of `/proc/<pid>/stat`: the session id.
fn session_of(pid: &str) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // `pid (comm) state ppid pgrp session …`; comm may hold spaces and parentheses.
    let after_comm = &stat[stat.rfind(')').unwrap() + 1..];
    after_comm
        .split_whitespace()
        .nth(3)
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn the_default_run_is_init_assistant_result() {
    let out = run(&mut fake(&[]), "Implement the spec.");
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stderr.is_empty());
    let lines = json_lines(&out);
    let kinds: Vec<_> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["system", "assistant", "result"]);
    assert_eq!(lines[0]["subtype"], "init");
    let text = &lines[1]["message"]["content"][0]["text"];
    assert_eq!(text, "Done.\n<TASK_DONE>");
    let result = &lines[2];
    for (field, value) in [
        ("subtype", Value::from("success")),
        ("is_error", Value::from(false)),
        ("terminal_reason", Value::from("completed")),
        ("num_turns", Value::from(1)),
        ("total_cost_usd", Value::from(0.001)),
        ("result", Value::from("Done.\n<TASK_DONE>")),
        ("session_id", Value::from("fake-session")),
    ] {
        assert_eq!(result[field], value, "{field}");
    }
    assert!(result["duration_ms"].is_u64());
    assert_eq!(result["usage"]["input_tokens"], 5); // 19 prompt bytes / 4, rounded up
    assert!(lines.iter().all(|l| l["session_id"] == "fake-session"));
}

#[test]
fn answer_and_session_are_escaped() {
    let answer = "He said \"hi\"\\\n\ttab é ✓\n<TASK_DONE>";
    let out = run(
        &mut fake(&[
            ("FAKE_CLAUDE_ANSWER", answer),
            ("FAKE_CLAUDE_SESSION", "s\"1"),
        ]),
        "",
    );
    let lines = json_lines(&out);
    assert_eq!(lines[1]["message"]["content"][0]["text"], answer);
    assert_eq!(lines[2]["result"], answer);
    assert!(lines.iter().all(|l| l["session_id"] == "s\"1"));
}

#[test]
fn stream_json_without_verbose_is_a_usage_error() {
    let message = "Error: When using --print, --output-format=stream-json requires --verbose\n";
    for args in [
        &["-p", "--output-format", "stream-json"][..],
        &["-p", "--output-format=stream-json", "--bare"],
    ] {
        let mut cmd = Command::new(fake_claude());
        let out = run(cmd.args(args), "prompt");
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(out.stdout.is_empty());
        assert_eq!(String::from_utf8_lossy(&out.stderr), message);
    }
    // Without `--output-format` in argv there is nothing to check.
    let out = run(Command::new(fake_claude()).arg("-p"), "prompt");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_transcript_is_replayed_byte_for_byte() {
    let mut files: Vec<_> = std::fs::read_dir(TRANSCRIPTS)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "{files:?}");
    for file in files {
        let out = run(
            &mut fake(&[("FAKE_CLAUDE_TRANSCRIPT", file.to_str().unwrap())]),
            "",
        );
        assert_eq!(out.status.code(), Some(0), "{file:?}");
        assert!(out.stdout == std::fs::read(&file).unwrap(), "{file:?}");
    }
}

#[test]
fn delay_paces_every_line() {
    let start = Instant::now();
    let out = run(&mut fake(&[("FAKE_CLAUDE_DELAY_MS", "100")]), "");
    assert_eq!(json_lines(&out).len(), 3);
    assert!(start.elapsed() >= Duration::from_millis(300));
}

#[test]
fn hang_after_keeps_stdout_open_and_silent() {
    let mut fake = Running::start(&mut fake(&[("FAKE_CLAUDE_HANG_AFTER", "1")]));
    assert_eq!(fake.line()["subtype"], "init");
    fake.assert_silent(Duration::from_millis(300));
    assert!(fake.is_running());
}

#[test]
fn exit_after_ends_without_a_result_line() {
    for (knobs, code) in [
        (&[("FAKE_CLAUDE_EXIT_AFTER", "2")][..], 1),
        (
            &[
                ("FAKE_CLAUDE_EXIT_AFTER", "2"),
                ("FAKE_CLAUDE_EXIT_CODE", "7"),
            ],
            7,
        ),
    ] {
        let out = run(&mut fake(knobs), "");
        assert_eq!(out.status.code(), Some(code));
        let kinds: Vec<_> = json_lines(&out).iter().map(|l| l["type"].clone()).collect();
        assert_eq!(kinds, ["system", "assistant"]);
    }
}

#[test]
fn exit_code_applies_to_a_complete_run() {
    let out = run(&mut fake(&[("FAKE_CLAUDE_EXIT_CODE", "3")]), "");
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(json_lines(&out)[2]["type"], "result");
}

#[test]
fn linger_keeps_running_after_the_result_line() {
    let mut forever = Running::start(&mut fake(&[("FAKE_CLAUDE_LINGER_MS", "forever")]));
    let mut lingering = Running::start(&mut fake(&[("FAKE_CLAUDE_LINGER_MS", "300")]));
    let kinds: Vec<Value> = (0..3).map(|_| lingering.line()["type"].clone()).collect();
    assert_eq!(kinds, ["system", "assistant", "result"]);
    let result_seen = Instant::now();
    assert!(lingering.wait().success());
    assert!(result_seen.elapsed() >= Duration::from_millis(250));

    assert_eq!(forever.line()["type"], "system");
    assert_eq!(forever.line()["type"], "assistant");
    assert_eq!(forever.line()["type"], "result");
    assert!(forever.is_running()); // 300 ms after it started, at least
}

#[test]
fn sigterm_exits_143_without_a_result_line() {
    let mut fake = Running::start(&mut fake(&[("FAKE_CLAUDE_HANG_AFTER", "2")]));
    fake.line();
    fake.line();
    fake.signal(Signal::SIGTERM);
    let status = fake.wait();
    assert_eq!(status.code(), Some(143), "{status:?}"); // an exit, not death by signal
    assert!(fake.lines.recv_timeout(LIMIT).is_err(), "no more lines");
}

#[test]
fn ignore_term_survives_sigterm_until_sigkill() {
    let mut fake = Running::start(&mut fake(&[
        ("FAKE_CLAUDE_IGNORE_TERM", "1"),
        ("FAKE_CLAUDE_HANG_AFTER", "1"),
    ]));
    fake.line();
    fake.signal(Signal::SIGTERM);
    thread::sleep(Duration::from_millis(300));
    assert!(fake.is_running());
    fake.signal(Signal::SIGKILL);
    assert_eq!(fake.wait().signal(), Some(Signal::SIGKILL as i32));
}

/// SIGKILLs a grandchild's process group when dropped: `sh -c cmd` leads its session and its
/// group, and may have forked the command. It is not ours to wait for.
struct Grandchild(i32);

impl Drop for Grandchild {
    fn drop(&mut self) {
        let _ = killpg(Pid::from_raw(self.0), Signal::SIGKILL);
    }
}

#[test]
fn spawn_leaves_a_grandchild_in_a_session_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let out = run(
        &mut fake(&[
            ("FAKE_CLAUDE_SPAWN", "sleep 300"),
            ("FAKE_CLAUDE_SPAWN_PIDFILE", pidfile.to_str().unwrap()),
        ]),
        "",
    );
    let pid = std::fs::read_to_string(&pidfile).unwrap().trim().to_owned();
    let grandchild = Grandchild(pid.parse().unwrap());
    // The fake exited and its stdout reached EOF while the grandchild lives on.
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(json_lines(&out).len(), 3);
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    assert_eq!(session_of(&pid), pid.parse::<i32>().unwrap());
    assert_ne!(session_of(&pid), session_of("self"));
    for fd in 0..3 {
        let target = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).unwrap();
        assert_eq!(target, Path::new("/dev/null"), "fd {fd}");
    }
    drop(grandchild);
}

#[test]
fn huge_prints_the_answer_twice_as_two_long_lines() {
    const SIZE: usize = 10 << 20;
    let out = run(&mut fake(&[("FAKE_CLAUDE_HUGE", "10MiB")]), "");
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    let long: Vec<&str> = lines.into_iter().filter(|l| l.len() > SIZE).collect();
    assert_eq!(long.len(), 2);
    let assistant: Value = serde_json::from_str(long[0]).unwrap();
    let result: Value = serde_json::from_str(long[1]).unwrap();
    for answer in [
        &assistant["message"]["content"][0]["text"],
        &result["result"],
    ] {
        let answer = answer.as_str().unwrap();
        assert_eq!(answer.len(), SIZE + "\n<TASK_DONE>".len());
        assert!(answer.ends_with("\n<TASK_DONE>"));
    }
}

#[test]
fn record_appends_one_line_per_invocation() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    for prompt in ["first \"prompt\"\n", "second"] {
        let mut cmd = fake(&[("FAKE_CLAUDE_RECORD", record.to_str().unwrap())]);
        cmd.arg("--model")
            .arg("sonnet")
            .current_dir(dir.path())
            .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
            .env("RALPH_RUN_COOKIE", "cookie")
            .env("UNRELATED_VAR", "x");
        assert!(run(&mut cmd, prompt).status.success());
    }
    let text = std::fs::read_to_string(&record).unwrap();
    let entries: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0]["stdin"], "first \"prompt\"\n");
    assert_eq!(entries[1]["stdin"], "second");
    let entry = &entries[0];
    let args: Vec<&str> = FLAGS.iter().copied().chain(["--model", "sonnet"]).collect();
    assert_eq!(entry["args"], serde_json::json!(args));
    let cwd = dir.path().canonicalize().unwrap();
    assert_eq!(entry["cwd"], cwd.to_str().unwrap());
    let env = entry["env"].as_object().unwrap();
    assert_eq!(env["ANTHROPIC_BASE_URL"], "http://127.0.0.1:9");
    assert_eq!(env["RALPH_RUN_COOKIE"], "cookie");
    assert_eq!(env["FAKE_CLAUDE_RECORD"], record.to_str().unwrap());
    assert!(!env.contains_key("UNRELATED_VAR"));
    assert!(!env.contains_key("PATH"));
}

#[test]
fn stderr_text_is_written_as_is() {
    let out = run(&mut fake(&[("FAKE_CLAUDE_STDERR", "warning: x\n")]), "");
    assert_eq!(out.stderr, b"warning: x\n");
    assert_eq!(json_lines(&out).len(), 3);
}

#[test]
fn a_bad_knob_value_is_an_error_naming_it() {
    let out = run(&mut fake(&[("FAKE_CLAUDE_DELAY_MS", "soon")]), "");
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("FAKE_CLAUDE_DELAY_MS"), "{stderr}");
}

#[test]
fn transcripts_are_replayed_one_per_invocation_then_the_last_again() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let paths: Vec<String> = ["a", "b"]
        .iter()
        .map(|name| {
            let path = dir.path().join(format!("{name}.jsonl"));
            std::fs::write(&path, format!("{{\"type\":\"{name}\"}}\n")).unwrap();
            path.to_str().unwrap().to_owned()
        })
        .collect();
    let list = paths.join(",");
    let knobs = [
        ("FAKE_CLAUDE_TRANSCRIPTS", list.as_str()),
        ("FAKE_CLAUDE_COUNTER", counter.to_str().unwrap()),
    ];
    let kinds: Vec<Value> = (0..3)
        .map(|_| {
            let out = run(&mut fake(&knobs), "");
            assert_eq!(out.status.code(), Some(0));
            let lines = json_lines(&out);
            assert_eq!(lines.len(), 1);
            lines[0]["type"].clone()
        })
        .collect();
    assert_eq!(kinds, ["a", "b", "b"]);
    assert_eq!(std::fs::read_to_string(&counter).unwrap().trim(), "3");

    // Without a counter, or with a single transcript too, the fake refuses to run.
    for knobs in [
        &[("FAKE_CLAUDE_TRANSCRIPTS", list.as_str())][..],
        &[
            ("FAKE_CLAUDE_TRANSCRIPTS", list.as_str()),
            ("FAKE_CLAUDE_COUNTER", counter.to_str().unwrap()),
            ("FAKE_CLAUDE_TRANSCRIPT", paths[0].as_str()),
        ],
    ] {
        let out = run(&mut fake(knobs), "");
        assert_eq!(out.status.code(), Some(2), "{knobs:?}");
        assert!(out.stdout.is_empty());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("FAKE_CLAUDE_TRANSCRIPT"), "{stderr}");
    }
    assert_eq!(std::fs::read_to_string(&counter).unwrap().trim(), "3");
}
