//! `ShellGate` with real shell commands. Linux: checks use `/proc`.
#![cfg(target_os = "linux")]

use std::error::Error as _;
use std::fs;
use std::time::Duration;

use ralph::StopToken;
use ralph::gate::{Gate, GateContext, GateError, GateStatus, ShellGate};
use ralph_loop_process::output::{DEFAULT_HEAD, DEFAULT_TAIL};

fn gate(command: &str) -> ShellGate {
    ShellGate::new("test", command)
        .timeout(Duration::from_secs(10))
        .grace(Duration::from_millis(200))
}

fn ctx() -> (tempfile::TempDir, GateContext) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let ctx = GateContext::new(dir.path());
    (dir, ctx)
}

/// Gone, or a zombie waiting for init.
fn is_dead(pid: i32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    // The state follows the command name, which ends at the last ')'.
    let state = stat.rsplit(')').next().unwrap_or_default();
    state.trim_start().starts_with('Z')
}

#[tokio::test]
async fn exit_zero_passes() {
    let (_dir, ctx) = ctx();
    let report = gate("echo ok").check(ctx).await.unwrap();
    assert_eq!(report.name, "test");
    assert!(report.required);
    assert_eq!(report.status, GateStatus::Passed);
    assert!(!report.blocks());
    assert_eq!(report.output(), "ok\n");
    assert_eq!(report.leaked, 0);
    assert!(report.duration > Duration::ZERO);
}

#[tokio::test]
async fn a_non_zero_exit_fails_with_its_code() {
    let (_dir, ctx) = ctx();
    let report = gate("echo broken >&2; exit 7").check(ctx).await.unwrap();
    assert_eq!(
        report.status,
        GateStatus::Failed {
            code: Some(7),
            signal: None
        }
    );
    assert!(report.blocks());
    assert_eq!(report.output(), "broken\n");
}

#[tokio::test]
async fn death_by_signal_fails_with_the_signal() {
    let (_dir, ctx) = ctx();
    let report = gate("kill -9 $$").check(ctx).await.unwrap();
    assert_eq!(
        report.status,
        GateStatus::Failed {
            code: None,
            signal: Some(9)
        }
    );
}

#[tokio::test]
async fn a_slow_command_times_out() {
    let (_dir, ctx) = ctx();
    let report = gate("sleep 30")
        .timeout(Duration::from_millis(300))
        .check(ctx)
        .await
        .unwrap();
    assert_eq!(
        report.status,
        GateStatus::TimedOut {
            after: Duration::from_millis(300)
        }
    );
    // Re-audit case 17: the message says which timeout fired.
    assert_eq!(report.status.to_string(), "timed out after 300ms");
    assert!(report.blocks());
    assert!(report.duration < Duration::from_secs(2), "{report:?}");
}

#[tokio::test]
async fn the_stop_token_stops_it() {
    let (_dir, ctx) = ctx();
    let stop = StopToken::new();
    let trigger = stop.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        trigger.stop();
    });
    let report = gate("sleep 30").check(ctx.stop(stop)).await.unwrap();
    assert_eq!(report.status, GateStatus::Stopped);
    assert!(report.duration < Duration::from_secs(1), "{report:?}");
}

#[tokio::test]
async fn an_optional_gate_fails_without_blocking() {
    let (_dir, ctx) = ctx();
    let gate = gate("exit 1").with_required(false);
    assert!(!Gate::required(&gate));
    let report = gate.check(ctx).await.unwrap();
    assert!(!report.required);
    assert!(!report.status.passed());
    assert!(!report.blocks());
}

#[tokio::test]
async fn output_is_bounded() {
    let (_dir, ctx) = ctx();
    let report = gate("yes | head -c 20000000").check(ctx).await.unwrap();
    assert_eq!(report.status, GateStatus::Passed);
    let omitted = 20_000_000 - (DEFAULT_HEAD + DEFAULT_TAIL);
    let output = report.output();
    assert!(
        output.contains(&format!("[… {omitted} bytes omitted …]")),
        "{}",
        &output[DEFAULT_HEAD - 10..DEFAULT_HEAD + 60]
    );
    assert!(output.len() < DEFAULT_HEAD + DEFAULT_TAIL + 100);
}

#[tokio::test]
async fn it_runs_in_the_workspace_and_logs_everything() {
    let (dir, ctx) = ctx();
    let log = dir.path().join("gate.log");
    let report = gate("pwd -P; echo to-stderr >&2")
        .check(ctx.log_path(&log))
        .await
        .unwrap();
    let expected = format!(
        "{}\nto-stderr\n",
        dir.path().canonicalize().unwrap().display()
    );
    assert_eq!(report.output(), expected);
    assert_eq!(fs::read_to_string(&log).unwrap(), expected);
}

/// A gate that prints 100 MB leaves a log of a few MiB: its first MiB, its last 4 MiB, and
/// how much was skipped between them.
#[tokio::test]
async fn a_gate_printing_100_mb_leaves_a_bounded_log() {
    let (dir, ctx) = ctx();
    let log = dir.path().join("logs/gate.log");
    let report = gate("head -c 100000000 /dev/zero | tr '\\0' x; echo; echo the-last-line")
        .timeout(Duration::from_secs(120))
        .check(ctx.log_path(&log))
        .await
        .unwrap();
    assert_eq!(report.status, GateStatus::Passed);
    let size = fs::metadata(&log).unwrap().len();
    assert!(size < 5 * 1024 * 1024 + 200, "the log holds {size} bytes");
    let text = fs::read(&log).unwrap();
    let text = String::from_utf8_lossy(&text);
    let skipped = 100_000_000 + 1 + 14 - 5 * 1024 * 1024;
    assert!(
        text.contains(&format!("[… {skipped} bytes of output skipped")),
        "{}",
        &text[1024 * 1024 - 10..1024 * 1024 + 120]
    );
    assert!(text.starts_with("xxxx") && text.ends_with("x\nthe-last-line\n"));
    // The folder ralph made for the log keeps it out of `git status`.
    assert_eq!(
        fs::read_to_string(dir.path().join("logs/.gitignore")).unwrap(),
        "# ralph's own files: kept out of git by ralph\n*\n"
    );
}

#[tokio::test]
async fn leftover_processes_are_killed_and_reported() {
    let (_dir, ctx) = ctx();
    let report = gate("sleep 1000 & echo $!").check(ctx).await.unwrap();
    assert_eq!(report.status, GateStatus::Passed);
    assert_eq!(report.leaked, 1);
    let pid: i32 = report.output().trim().parse().unwrap();
    assert!(is_dead(pid));
}

#[tokio::test]
async fn a_missing_workspace_is_a_spawn_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let err = gate("true")
        .check(GateContext::new(&missing))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, GateError::Spawn { gate, .. } if gate == "test"),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "could not start gate test");
    let cause = err.source().unwrap().to_string();
    assert!(cause.contains(&*missing.to_string_lossy()), "{cause}");
}

#[test]
fn the_builder_keeps_the_command() {
    assert_eq!(
        ShellGate::new("lint", "cargo clippy").command(),
        "cargo clippy"
    );
}
