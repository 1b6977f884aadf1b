//! A gate that starts a daemon which clears its environment and leaves the session
//! (`env -i setsid …`, what a real daemon does) leaves nothing running once the run has
//! ended, ten runs out of ten, in every mode that runs gates: the construct loop (one
//! task at a time, and at once in work trees), build mode and a thread's loop.
//!
//! Such a daemon carries neither the run's cookie nor its process group; only its
//! ancestry ties it to the run, and that is gone once its parent has exited.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use rstest::rstest;

use super::signal_matrix::{BUILD_SCRIPT, CONSTRUCT_SCRIPT, IMPLEMENTATION};

/// Runs of each mode: the escape was a race, lost about one run in three.
const RUNS: usize = 10;

#[derive(Clone, Copy, Debug)]
enum Mode {
    Construct,
    ConstructAtOnce,
    Build,
    Thread,
}

/// The gate: starts the daemon, waits until it has written its pid (so it has cleared its
/// environment and left the session), and passes. The daemon sleeps for `sleep`, which no
/// other process uses: in the sandbox its pid is one of the sandbox's own, so the test
/// finds it by its command line.
fn daemon_gate(pidfile: &Path, sleep: &str) -> String {
    let pidfile = pidfile.display();
    format!(
        "env -i setsid sh -c 'echo $$ > {pidfile}.new && mv {pidfile}.new {pidfile}; cd /; exec sleep {sleep}' \
         </dev/null >/dev/null 2>&1 & while [ ! -s {pidfile} ]; do sleep 0.01; done"
    )
}

/// A workspace of `mode` whose one gate is [`daemon_gate`], and the `ralph` command that
/// runs it to completion.
fn setup(mode: Mode, ws: &Path, scripts: &Path, pidfile: &Path, sleep: &str) -> Command {
    let gate = daemon_gate(pidfile, sleep);
    // The daemon's pid file is outside the work tree: the sandbox is told.
    let sandbox = format!("[sandbox]\nwrite = [{:?}]\n", scripts.display().to_string());
    let gates = format!("{sandbox}\n[[gates]]\nname = \"daemon\"\ncommand = {gate:?}\n");
    let mut cmd = Command::new(crate::support::ralph_bin());
    cmd.arg("-C").arg(ws);
    match mode {
        Mode::Construct | Mode::ConstructAtOnce => {
            let at_once = matches!(mode, Mode::ConstructAtOnce);
            if at_once {
                repo(ws, ".ralph/\nbuild/\n");
            }
            write(ws, "spec.md", "# Daemon\nWrite done.txt.\n");
            let concurrency = if at_once {
                "build_concurrency = 2\n"
            } else {
                ""
            };
            write(ws, "ralph.toml", &format!("{concurrency}{gates}"));
            if at_once {
                commit(ws);
            }
            write(scripts, "script.toml", CONSTRUCT_SCRIPT);
            cmd.args(["construct", "spec.md", "--script"])
                .arg(scripts.join("script.toml"));
        }
        Mode::Build => {
            repo(ws, ".ralph/\nbuild/\n");
            write(ws, "specs/s.md", "# S\nWrite done.txt.\n");
            write(ws, "specs/plans/s.md", "# Plan: s\n1. Write done.txt.\n");
            write(ws, "implementation.json", IMPLEMENTATION);
            write(ws, "ralph.toml", &gates);
            commit(ws);
            write(scripts, "script.toml", BUILD_SCRIPT);
            cmd.args(["build", "--script"])
                .arg(scripts.join("script.toml"));
        }
        Mode::Thread => {
            repo(ws, ".ralph/\n");
            write(ws, "ralph.toml", &sandbox);
            commit(ws);
            let spec = format!(
                "# Daemon\n<promise>DAEMON_DONE</promise>\n\n## Acceptance Criteria\n\n- [ ] the gate passes: `{gate}`\n"
            );
            write(scripts, "spec.md", &spec);
            write(scripts, "script.toml", THREAD_SCRIPT);
            let spec = scripts.join("spec.md");
            let spec = spec.to_str().unwrap();
            for args in [
                vec!["new", "--title", "Daemon", "--spec", spec],
                vec!["finalize"],
            ] {
                let out = Command::new(crate::support::ralph_bin())
                    .arg("-C")
                    .arg(ws)
                    .args(["thread", "--script"])
                    .arg(scripts.join("script.toml"))
                    .args(args)
                    .output()
                    .unwrap();
                assert!(out.status.success(), "{out:?}");
            }
            cmd.args(["thread", "--script"])
                .arg(scripts.join("script.toml"))
                .args(["--max-iterations", "1", "start"]);
        }
    }
    cmd
}

#[rstest]
#[case::construct(Mode::Construct)]
#[case::construct_at_once(Mode::ConstructAtOnce)]
#[case::build(Mode::Build)]
#[case::thread(Mode::Thread)]
fn a_gate_that_starts_an_environment_clearing_daemon_leaves_nothing(#[case] mode: Mode) {
    let mut escaped = Vec::new();
    for run in 1..=RUNS {
        let ws = tempfile::tempdir().unwrap();
        let scripts = tempfile::tempdir().unwrap();
        let pidfile = scripts.path().join("daemon.pid");
        // Unique to the run: the cases run at once, in one test process.
        let sleep = format!("600.{}{}{run:02}", std::process::id(), mode as u8);
        let out = setup(mode, ws.path(), scripts.path(), &pidfile, &sleep)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "run {run} of {mode:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(daemon_pid(&pidfile) > 0, "the daemon started");
        for (pid, alive) in sleeping(&sleep) {
            escaped.push(format!("run {run}: {alive}"));
            kill(pid);
        }
    }
    assert!(
        escaped.is_empty(),
        "{mode:?}: the daemon outlived {} of {RUNS} runs:\n{}",
        escaped.len(),
        escaped.join("\n")
    );
}

/// The daemon's pid, which the gate waited for.
fn daemon_pid(pidfile: &PathBuf) -> i32 {
    let text = std::fs::read_to_string(pidfile).unwrap();
    text.trim().parse().unwrap()
}

/// The live processes (not zombies) running `sleep DURATION`, each with its command line.
fn sleeping(duration: &str) -> Vec<(i32, String)> {
    let wanted = format!("sleep {duration}");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let state = stat.rsplit_once(") ")?.1.chars().next()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            (state != 'Z' && cmdline.trim() == wanted).then(|| (pid, format!("{pid}: {wanted}")))
        })
        .collect()
}

fn kill(pid: i32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

fn write(dir: &Path, rel: &str, text: &str) {
    crate::support::write(dir, rel, text);
}

fn repo(ws: &Path, ignore: &str) {
    git(ws, &["init", "-q", "-b", "main"]);
    write(ws, ".gitignore", ignore);
}

fn commit(ws: &Path) {
    git(ws, &["add", "-A"]);
    git(ws, &["commit", "-q", "-m", "init"]);
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

const THREAD_SCRIPT: &str = r#"
[[run]]
role = "build"
[[run.steps]]
write = { path = "done.txt", content = "done\n" }
[[run.steps]]
answer = "Wrote it.\nDAEMON_DONE"
"#;
