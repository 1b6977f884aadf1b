//! Supervised processes, with real processes and real time. Linux: checks use `/proc`.
#![cfg(target_os = "linux")]

use std::fs;
use std::path::Path;
use std::time::Duration;

use ralph::StopToken;
use ralph_loop_process::process::{COOKIE_VAR, Exit, ProcessError, ProcessSpec};
use tokio::io::{AsyncBufReadExt, BufReader};

const SIGTERM: i32 = 15;
const SIGKILL: i32 = 9;

/// `sh -c script` with a short grace and a safety timeout.
fn sh(script: &str) -> ProcessSpec {
    ProcessSpec::new("sh")
        .args(["-c", script])
        .timeout(Duration::from_secs(10))
        .grace(Duration::from_millis(200))
}

/// Gone, or a zombie: with nothing else reaping, killed orphans wait for init.
fn is_dead(pid: i32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    // The state follows the command name, which ends at the last ')'.
    let state = stat.rsplit(')').next().unwrap_or_default();
    state.trim_start().starts_with('Z')
}

fn assert_dead(pids: &[i32]) {
    assert!(!pids.is_empty(), "no pids to check");
    for &pid in pids {
        assert!(is_dead(pid), "pid {pid} is still alive");
    }
}

/// Every line of `text` that is a number.
fn pids(text: &str) -> Vec<i32> {
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

fn read_pids(file: &Path) -> Vec<i32> {
    pids(&fs::read_to_string(file).unwrap_or_default())
}

/// A script line that starts `sleep 1000` in a session of its own (out of our process
/// group) and writes its pid to `$PIDS`.
const SETSID_SLEEP: &str = r#"setsid sh -c 'echo $$ >> "$PIDS"; exec sleep 1000' &"#;

/// A script line that waits until `$PIDS` has `$1` lines.
const AWAIT_PIDS: &str =
    r#"while [ "$(wc -l 2>/dev/null <"$PIDS" || echo 0)" -lt "$1" ]; do sleep 0.01; done"#;

#[tokio::test]
async fn exit_code_and_interleaved_output() {
    let report = sh("echo out; echo err >&2; echo out2; exit 3")
        .run()
        .await
        .unwrap();
    assert_eq!(report.exit, Some(Exit::Code(3)));
    assert_eq!(report.code(), Some(3));
    assert!(!report.success() && !report.timed_out && !report.stopped);
    assert_eq!(report.output.to_string(), "out\nerr\nout2\n");
    assert_eq!(report.leaked, 0);
}

#[tokio::test]
async fn the_main_process_is_reaped() {
    let report = sh("echo $$").run().await.unwrap();
    assert!(report.success());
    let pid = pids(&report.output.to_string())[0];
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "left a zombie"
    );
}

#[tokio::test]
async fn stdin_is_delivered_then_closed() {
    let report = ProcessSpec::new("cat")
        .stdin("hello\nworld")
        .timeout(Duration::from_secs(5))
        .run()
        .await
        .unwrap();
    assert!(report.success(), "{report:?}");
    assert_eq!(report.output.to_string(), "hello\nworld");
}

#[tokio::test]
async fn stdin_defaults_to_dev_null() {
    let report = ProcessSpec::new("cat")
        .timeout(Duration::from_secs(5))
        .run()
        .await
        .unwrap();
    assert!(report.success(), "{report:?}");
    assert!(report.output.is_empty());
}

#[tokio::test]
async fn env_cwd_and_cookie_reach_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let report = sh(r#"echo "$GREETING"; pwd -P; echo "$RALPH_RUN_COOKIE""#)
        .env("GREETING", "hi")
        .env(COOKIE_VAR, "overridden")
        .cwd(dir.path())
        .run()
        .await
        .unwrap();
    let text = report.output.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "hi");
    assert_eq!(Path::new(lines[1]), dir.path().canonicalize().unwrap());
    assert!(!lines[2].is_empty() && !lines[2].contains("overridden"));
}

#[tokio::test]
async fn timeout_terminates_the_group() {
    let report = sh("echo $$; sleep 30 & echo $!; wait")
        .timeout(Duration::from_millis(300))
        .run()
        .await
        .unwrap();
    assert!(report.timed_out && !report.stopped);
    assert_eq!(report.signal(), Some(SIGTERM));
    assert!(report.duration < Duration::from_secs(2), "{report:?}");
    assert_dead(&pids(&report.output.to_string()));
}

#[tokio::test]
async fn a_process_ignoring_sigterm_is_killed_after_the_grace() {
    let report = sh("trap '' TERM; echo $$; sleep 30 & echo $!; wait")
        .timeout(Duration::from_millis(300))
        .run()
        .await
        .unwrap();
    assert!(report.timed_out);
    assert_eq!(report.signal(), Some(SIGKILL));
    assert!(report.duration >= Duration::from_millis(500), "{report:?}");
    assert!(report.duration < Duration::from_secs(2), "{report:?}");
    assert_dead(&pids(&report.output.to_string()));
}

#[tokio::test]
async fn a_background_job_holding_the_pipe_does_not_hang_the_run() {
    let report = sh("sleep 1000 & echo $!; echo done").run().await.unwrap();
    assert!(report.success() && !report.timed_out, "{report:?}");
    assert!(report.duration < Duration::from_secs(2), "{report:?}");
    assert_eq!(report.leaked, 1);
    assert!(report.output.to_string().ends_with("done\n"));
    assert_dead(&pids(&report.output.to_string()));
}

#[tokio::test]
async fn a_setsid_escapee_holding_the_pipe_is_swept() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pids");
    let script = format!(
        r#"echo $$; {SETSID_SLEEP} {AWAIT_PIDS}
        pid=$(cat "$PIDS"); cut -d' ' -f5,6 /proc/$pid/stat"#
    );
    let report = sh(&script)
        .args(["_", "1"])
        .env("PIDS", &file)
        .run()
        .await
        .unwrap();
    assert!(report.success(), "{report:?}");
    assert!(report.duration < Duration::from_secs(2), "{report:?}");
    let text = report.output.to_string();
    let main: i32 = text.lines().next().unwrap().parse().unwrap();
    let escapee = read_pids(&file);
    // It really left: a session and group of its own.
    let ids = text.lines().nth(1).unwrap();
    assert_eq!(ids, format!("{0} {0}", escapee[0]));
    assert_ne!(escapee[0], main);
    assert!(report.leaked >= 1);
    assert_dead(&escapee);
}

#[tokio::test]
async fn a_double_forked_daemon_is_swept_after_a_clean_exit() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pids");
    // The subshell exits at once: the daemon is reparented, out of our group and
    // session, and holds none of our pipes.
    let script = format!("({SETSID_SLEEP}) >/dev/null 2>&1; {AWAIT_PIDS}");
    let report = sh(&script)
        .args(["_", "1"])
        .env("PIDS", &file)
        .run()
        .await
        .unwrap();
    assert!(report.success(), "{report:?}");
    assert_eq!(report.leaked, 1);
    assert_dead(&read_pids(&file));
}

#[tokio::test]
async fn a_nohup_job_is_killed_after_a_clean_exit() {
    let report = sh("nohup sleep 1000 >/dev/null 2>&1 & echo $!")
        .run()
        .await
        .unwrap();
    assert!(report.success(), "{report:?}");
    assert_eq!(report.leaked, 1);
    assert_dead(&pids(&report.output.to_string()));
}

#[tokio::test]
async fn huge_output_costs_only_the_caps() {
    let report = sh("yes | head -c 200000000")
        .output_limits(1024, 2048)
        .run()
        .await
        .unwrap();
    assert!(report.success(), "{report:?}");
    let out = &report.output;
    assert_eq!(out.total(), 200_000_000);
    assert_eq!(out.head().len(), 1024);
    assert_eq!(out.tail().len(), 2048);
    assert_eq!(out.omitted(), 200_000_000 - 3072);
    assert!(out.tail().ends_with("y\ny\n"));
}

#[tokio::test]
async fn non_utf8_output_is_kept_lossily() {
    let report = sh(r"printf '\377\376abc'").run().await.unwrap();
    assert_eq!(report.output.total(), 5);
    assert_eq!(report.output.to_string(), "\u{fffd}\u{fffd}abc");
}

#[tokio::test]
async fn the_log_file_gets_the_full_output_appended() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run.log");
    fs::write(&log, "previous\n").unwrap();
    let report = sh("seq 1 100000; echo tail >&2")
        .output_limits(16, 16)
        .log_path(&log)
        .run()
        .await
        .unwrap();
    let mut expected = String::from("previous\n");
    for n in 1..=100_000 {
        expected.push_str(&format!("{n}\n"));
    }
    expected.push_str("tail\n");
    assert_eq!(fs::read_to_string(&log).unwrap(), expected);
    assert_eq!(
        report.output.total(),
        (expected.len() - "previous\n".len()) as u64
    );
    assert!(report.output.omitted() > 0);
}

#[tokio::test]
async fn an_unwritable_log_is_an_error_naming_it() {
    // The log's folder is made when missing; under a file it cannot be.
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("file"), "").unwrap();
    let log = dir.path().join("file/run.log");
    let err = sh("true").log_path(&log).run().await.unwrap_err();
    assert!(matches!(err, ProcessError::Log { .. }), "{err:?}");
    assert!(err.to_string().contains(&log.display().to_string()));
}

#[tokio::test]
async fn a_log_failing_mid_run_is_an_error_naming_it() {
    // Every write to /dev/full fails with ENOSPC.
    let err = sh("seq 1 100000")
        .log_path("/dev/full")
        .run()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProcessError::Log { path, .. } if path == Path::new("/dev/full")),
        "{err:?}"
    );
}

#[tokio::test]
async fn the_stop_token_stops_promptly() {
    let stop = StopToken::new();
    let trigger = stop.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        trigger.stop();
    });
    let report = sh("echo $$; sleep 30 & echo $!; wait")
        .stop(stop)
        .run()
        .await
        .unwrap();
    assert!(report.stopped && !report.timed_out, "{report:?}");
    assert!(report.duration < Duration::from_secs(1), "{report:?}");
    assert_dead(&pids(&report.output.to_string()));
}

#[tokio::test]
async fn a_cancelled_stop_token_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let stop = StopToken::new();
    stop.stop();
    let report = sh("touch \"$MARKER\"")
        .env("MARKER", &marker)
        .stop(stop)
        .run()
        .await
        .unwrap();
    assert!(report.stopped && report.exit.is_none());
    assert!(!marker.exists());
}

#[tokio::test]
async fn dropping_the_run_future_kills_everything() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pids");
    let script = format!(
        r#"echo $$ >> "$PIDS"; sleep 1000 & echo $! >> "$PIDS"; {SETSID_SLEEP} {AWAIT_PIDS}; wait"#
    );
    let spec = sh(&script).args(["_", "3"]).env("PIDS", &file);
    let run = tokio::time::timeout(Duration::from_millis(500), spec.run()).await;
    assert!(run.is_err(), "the run should still have been going");
    let pids = read_pids(&file);
    assert_eq!(pids.len(), 3, "{pids:?}");
    assert_dead(&pids);
}

#[tokio::test]
async fn dropping_the_handle_kills_everything() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pids");
    let script = format!(
        r#"sleep 1000 & echo $! >> "$PIDS"; {SETSID_SLEEP} {AWAIT_PIDS}; echo ready; wait"#
    );
    let mut child = sh(&script)
        .args(["_", "2"])
        .env("PIDS", &file)
        .spawn()
        .unwrap();
    let main = i32::try_from(child.id()).unwrap();
    let mut lines = BufReader::new(child.take_stdout().unwrap()).lines();
    assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("ready"));
    drop(child);
    let mut pids = read_pids(&file);
    pids.push(main);
    assert_dead(&pids);
}

#[tokio::test]
async fn a_handle_streams_and_terminates() {
    let mut child = sh("echo ready; sleep 30").spawn().unwrap();
    let mut lines = BufReader::new(child.take_stdout().unwrap()).lines();
    assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("ready"));
    let ended = child.terminate(Duration::from_millis(200)).await.unwrap();
    assert_eq!(ended.exit, Some(Exit::Signal(SIGTERM)));
    assert_eq!(child.wait().await.unwrap(), Exit::Signal(SIGTERM));
    assert_dead(&[i32::try_from(child.id()).unwrap()]);
}

#[tokio::test]
async fn a_handle_waits_then_kills_what_was_left() {
    let mut child = sh("sleep 1000 >/dev/null 2>&1 & echo $!; echo oops >&2")
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.take_stdout().unwrap()).lines();
    let mut err = BufReader::new(child.take_stderr().unwrap()).lines();
    let pid: i32 = out.next_line().await.unwrap().unwrap().parse().unwrap();
    assert_eq!(err.next_line().await.unwrap().as_deref(), Some("oops"));
    assert!(child.take_stdout().is_none());
    assert_eq!(child.wait().await.unwrap(), Exit::Code(0));
    assert!(!is_dead(pid), "the background job should outlive wait()");
    assert_eq!(child.kill_all().await, 1);
    assert_dead(&[pid]);
}

#[tokio::test]
async fn a_missing_program_is_a_spawn_error_naming_it() {
    let spec = ProcessSpec::new("ralph-no-such-program");
    for err in [spec.spawn().unwrap_err(), spec.run().await.unwrap_err()] {
        assert!(
            matches!(&err, ProcessError::Spawn { program, source }
                if program == "ralph-no-such-program"
                    && source.kind() == std::io::ErrorKind::NotFound),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "could not start `ralph-no-such-program`");
    }
}

#[tokio::test]
async fn an_unusable_cwd_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let err = sh("true").cwd(&missing).run().await.unwrap_err();
    assert!(matches!(err, ProcessError::Cwd { .. }), "{err:?}");
    assert!(err.to_string().contains(&*missing.to_string_lossy()));

    let file = dir.path().join("file");
    fs::write(&file, "").unwrap();
    let err = sh("true").cwd(&file).spawn().unwrap_err();
    assert!(
        matches!(&err, ProcessError::Cwd { source, .. }
            if source.kind() == std::io::ErrorKind::NotADirectory),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_chain_of_processes_each_forking_the_next_and_exiting_is_swept() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pids");
    // Out of our session, each generation starts the next in the background and exits at
    // once: at any moment one or two of them live, each for about a millisecond, forking,
    // exec'ing or exiting. The last one, if reached, writes its pid and sleeps.
    let hop = r#"if [ "$1" -gt 0 ]; then sh -c "$HOP" sh $(($1 - 1)) & else echo $$ >> "$PIDS"; exec sleep 1000; fi"#;
    let report = sh(r#"setsid sh -c "$HOP" sh 200 & sleep 0.05"#)
        .env("HOP", hop)
        .env("PIDS", &file)
        .run()
        .await
        .unwrap();
    assert!(report.success(), "{report:?}");
    assert!(report.leaked >= 1, "{report:?}");
    // Long enough for an escaped chain to reach its end. (The last one may also have been
    // reached, and written its pid, before the sweep killed it.)
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let escaped: Vec<i32> = read_pids(&file)
        .into_iter()
        .filter(|&pid| !is_dead(pid))
        .collect();
    for &pid in &escaped {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(
        escaped.is_empty(),
        "the chain escaped the sweep: {escaped:?}"
    );
}
