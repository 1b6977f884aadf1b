//! The signal matrix: every mode (the construct loop, plan mode, build mode, a thread's loop)
//! × {SIGINT, SIGTERM, SIGKILL then resume, two SIGTERMs}, through the `ralph` command, with
//! a gate (in plan mode: the agent) that leaves `&` and `setsid` children behind.
//!
//! What must hold in every cell:
//! - nothing the run started is alive once it has ended (after a SIGKILL: once the next run
//!   has started on the workspace, which kills the leftovers under the workspace's lock);
//! - the exit code names the signal: 130 for SIGINT, 143 for SIGTERM;
//! - a second signal stops at once, without waiting out the (hour-long) grace;
//! - the resumed run completes, and nothing was lost: with `retries = 0`, an attempt the
//!   signal cut short must not have counted, or the resumed run would give up.

#![allow(clippy::unwrap_used)]

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rstest::rstest;

/// A generous bound for one run of an example: a run the signals cannot stop fails the test
/// here instead of hanging it.
const LIMIT: Duration = Duration::from_secs(120);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Construct,
    Plan,
    Build,
    Thread,
    /// The construct loop with `build_concurrency = 2` in a git repository: the task is
    /// built, and its gate leaks, in its own work tree.
    ConstructAtOnce,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Int,
    Term,
    KillThenResume,
    TermTwice,
}

/// One cell of the matrix: a workspace set up for `mode`, and a folder outside it for the
/// markers the gate or the agent leaves.
struct Cell {
    mode: Mode,
    ws: tempfile::TempDir,
    markers: tempfile::TempDir,
    /// The `sleep` durations only this cell's leaked processes use.
    sleeps: [u32; 3],
}

impl Cell {
    fn new(mode: Mode, stop: Stop, grace: &str) -> Cell {
        let index = mode as u32 * 4 + stop as u32;
        let base = 7000 + 10 * index;
        let cell = Cell {
            mode,
            ws: tempfile::tempdir().unwrap(),
            markers: tempfile::tempdir().unwrap(),
            sleeps: [base + 1, base + 2, base + 3],
        };
        cell.setup(grace);
        cell
    }

    fn ws(&self) -> &Path {
        self.ws.path()
    }

    fn marker(&self, name: &str) -> PathBuf {
        self.markers.path().join(name)
    }

    /// A shell command that passes once `go` exists, and otherwise leaves a background job
    /// and a `setsid` child behind, says it started, and waits. With `stubborn`, it ignores
    /// SIGTERM.
    fn leaking_command(&self) -> String {
        let [a, b, c] = self.sleeps;
        let go = self.marker("go").display().to_string();
        let started = self.marker("started").display().to_string();
        format!(
            "if [ -e {go} ]; then exit 0; fi; trap '' TERM; (sleep {a} &); setsid sleep {b} & touch {started}; sleep {c}"
        )
    }

    fn setup(&self, grace: &str) {
        let ws = self.ws();
        match self.mode {
            Mode::Construct => {
                crate::support::write(ws, "spec.md", "# Signals\nWrite done.txt.\n");
                crate::support::write(ws, "ralph.toml", &self.config(grace, true));
                crate::support::write(
                    &self.markers.path().join("x"),
                    "script.toml",
                    CONSTRUCT_SCRIPT,
                );
            }
            Mode::ConstructAtOnce => {
                git(ws, &["init", "-q", "-b", "main"]);
                crate::support::write(ws, ".gitignore", ".ralph/\nbuild/\n");
                crate::support::write(ws, "spec.md", "# Signals\nWrite done.txt.\n");
                let config = format!("build_concurrency = 2\n{}", self.config(grace, true));
                crate::support::write(ws, "ralph.toml", &config);
                git(ws, &["add", "-A"]);
                git(ws, &["commit", "-q", "-m", "init"]);
                crate::support::write(
                    &self.markers.path().join("x"),
                    "script.toml",
                    CONSTRUCT_SCRIPT,
                );
            }
            Mode::Build => {
                git(ws, &["init", "-q", "-b", "main"]);
                crate::support::write(ws, ".gitignore", ".ralph/\nbuild/\n");
                crate::support::write(ws, "specs/s.md", "# S\nWrite done.txt.\n");
                crate::support::write(ws, "specs/plans/s.md", "# Plan: s\n1. Write done.txt.\n");
                crate::support::write(ws, "implementation.json", IMPLEMENTATION);
                crate::support::write(ws, "ralph.toml", &self.config(grace, true));
                git(ws, &["add", "-A"]);
                git(ws, &["commit", "-q", "-m", "init"]);
                crate::support::write(&self.markers.path().join("x"), "script.toml", BUILD_SCRIPT);
            }
            Mode::Plan => {
                crate::support::write(ws, "specs/s.md", "# S\nWrite done.txt.\n");
                let bin = crate::support::fake_claude().display().to_string();
                let config = format!("{}\n[claude]\nbin = {bin:?}\n", self.config(grace, false));
                crate::support::write(ws, "ralph.toml", &config);
                crate::support::write(self.markers.path(), "plan.jsonl", PLAN_TRANSCRIPT);
            }
            Mode::Thread => {
                git(ws, &["init", "-q", "-b", "main"]);
                crate::support::write(ws, ".gitignore", ".ralph/\n");
                crate::support::write(ws, "ralph.toml", &self.config(grace, false));
                git(ws, &["add", "-A"]);
                git(ws, &["commit", "-q", "-m", "init"]);
                let spec = format!(
                    "# Signals\n<promise>SIGNALS_DONE</promise>\n\n## Acceptance Criteria\n\n- [ ] the gate passes: `{}`\n",
                    self.leaking_command()
                );
                crate::support::write(self.markers.path(), "spec.md", &spec);
                crate::support::write(&self.markers.path().join("x"), "script.toml", THREAD_SCRIPT);
                let spec = self.marker("spec.md").display().to_string();
                for args in [
                    vec!["new", "--title", "Signals", "--spec", spec.as_str()],
                    vec!["finalize"],
                ] {
                    let out = self.command(&args).output().unwrap();
                    assert!(out.status.success(), "{out:?}");
                }
            }
        }
    }

    /// `ralph.toml`: no retries (an interrupted attempt that counted would block the task),
    /// the grace given, and the leaking gate.
    fn config(&self, grace: &str, gate: bool) -> String {
        // The gate and the fake CLI leave their markers outside the work tree, and the fake
        // takes its knobs from ralph's environment: the sandbox is told.
        let mut text = format!(
            "retries = 0\nstage_timeout = \"10m\"\nagent_timeout = \"10m\"\ngrace = \"{grace}\"\n\
             \n[sandbox]\nwrite = [{:?}]\nenv = [\"FAKE_CLAUDE_*\"]\n",
            self.markers.path().display().to_string()
        );
        if gate {
            text.push_str(&format!(
                "\n[[gates]]\nname = \"leaky\"\ncommand = {:?}\ntimeout = \"10m\"\n",
                self.leaking_command()
            ));
        }
        text
    }

    /// The `ralph` command of this mode, with its arguments before `extra`.
    fn command(&self, extra: &[&str]) -> Command {
        let script = self.markers.path().join("x/script.toml");
        let mut cmd = Command::new(crate::support::ralph_bin());
        cmd.arg("-C").arg(self.ws());
        match self.mode {
            Mode::Construct | Mode::ConstructAtOnce => {
                cmd.args(["construct", "spec.md", "--script"]).arg(&script);
            }
            Mode::Build => {
                cmd.args(["build", "--script"]).arg(&script);
            }
            Mode::Plan => {
                let [a, b, _] = self.sleeps;
                cmd.arg("plan")
                    .env("FAKE_CLAUDE_SPAWN", format!("(sleep {a} &); sleep {b}"))
                    .env("FAKE_CLAUDE_SPAWN_PIDFILE", self.marker("started"))
                    .env("FAKE_CLAUDE_HANG_AFTER", "0")
                    .env("FAKE_CLAUDE_IGNORE_TERM", "1");
            }
            Mode::Thread => {
                cmd.args(["thread", "--script"])
                    .arg(&script)
                    .args(["--max-iterations", "1"]);
            }
        }
        cmd.args(extra);
        cmd
    }

    /// The command that starts the run the signal stops.
    fn first_run(&self) -> Child {
        let args: &[&str] = if self.mode == Mode::Thread {
            &["start"]
        } else {
            &[]
        };
        self.command(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// The command that resumes it, now with the gate passing (or the agent answering).
    fn resume(&self) -> std::process::Output {
        std::fs::write(self.marker("go"), "").unwrap();
        let mut cmd = match self.mode {
            Mode::Thread => self.command(&["resume"]),
            _ => self.command(&[]),
        };
        if self.mode == Mode::Plan {
            cmd.env_remove("FAKE_CLAUDE_SPAWN")
                .env_remove("FAKE_CLAUDE_SPAWN_PIDFILE")
                .env_remove("FAKE_CLAUDE_HANG_AFTER")
                .env_remove("FAKE_CLAUDE_IGNORE_TERM")
                .env("FAKE_CLAUDE_TRANSCRIPT", self.marker("plan.jsonl"));
        }
        cmd.output().unwrap()
    }

    /// The processes this cell's run left alive: by the `sleep`s only it uses, and by the
    /// workspace's owner tag in their environment.
    fn survivors(&self) -> Vec<String> {
        let owner = ralph_loop_process::process::owner_of(self.ws());
        let sleeps: Vec<String> = self.sleeps.iter().map(|s| format!("sleep {s}")).collect();
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let dir = entry.path();
            let Ok(cmdline) = std::fs::read(dir.join("cmdline")) else {
                continue;
            };
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            let environ = std::fs::read(dir.join("environ")).unwrap_or_default();
            let tagged = String::from_utf8_lossy(&environ).contains(owner.as_str());
            if tagged || sleeps.iter().any(|s| cmdline.trim_end() == s.as_str()) {
                // A zombie has no cmdline and is no survivor.
                if !cmdline.trim().is_empty() {
                    found.push(format!("{}: {}", dir.display(), cmdline.trim()));
                }
            }
        }
        found
    }

    /// What must be on disk after the resumed run completed.
    fn assert_complete(&self) {
        let ws = self.ws();
        match self.mode {
            Mode::Construct => {
                let plan = std::fs::read_to_string(ws.join(".ralph/plan.jsonl")).unwrap();
                assert!(plan.contains(r#""s":"a""#), "t-1 accepted:\n{plan}");
            }
            Mode::ConstructAtOnce => {
                let plan = std::fs::read_to_string(ws.join(".ralph/plan.jsonl")).unwrap();
                assert!(plan.contains(r#""s":"a""#), "t-1 accepted:\n{plan}");
                let git_out = |args: &[&str]| {
                    let out = Command::new("git").args(args).current_dir(ws).output();
                    String::from_utf8_lossy(&out.unwrap().stdout).into_owned()
                };
                assert_eq!(
                    git_out(&["log", "-1", "--format=%s"]).trim(),
                    "t-1: Write done.txt"
                );
                let trees = git_out(&["worktree", "list"]);
                assert_eq!(
                    trees.lines().count(),
                    1,
                    "no work tree of ralph's left:\n{trees}"
                );
            }
            Mode::Build => {
                let text = std::fs::read_to_string(ws.join("implementation.json")).unwrap();
                let plan: serde_json::Value = serde_json::from_str(&text).unwrap();
                assert_eq!(plan["specs"][0]["status"], "completed", "{text}");
                assert_eq!(plan["specs"][0]["tasks"][0]["attempts"], 1, "{text}");
            }
            Mode::Plan => {
                let text = std::fs::read_to_string(ws.join("implementation.json")).unwrap();
                assert!(text.contains(r#""id": "s-1""#), "{text}");
            }
            Mode::Thread => {
                let out = self.command(&["show"]).output().unwrap();
                let stdout = String::from_utf8_lossy(&out.stdout);
                assert!(stdout.contains("phase: Implemented"), "{stdout}");
                assert!(
                    stdout.contains("iteration 1: claimed done; 1 of 1"),
                    "{stdout}"
                );
            }
        }
    }
}

/// Also the script of `daemons.rs`: the same one-task run in each mode.
pub(crate) const CONSTRUCT_SCRIPT: &str = r#"
[[run]]
role = "investigate"
subject = "i-1"
[[run.steps]]
json = { tasks = [{ name = "Write done.txt", accept = "done.txt exists" }] }

[[run]]
role = "build"
subject = "t-1"
[[run.steps]]
write = { path = "done.txt", content = "done\n" }
[[run.steps]]
answer = "Wrote it.\n<TASK_DONE>"

[[run]]
role = "verify"
subject = "t-1"
[[run.steps]]
json = { verdict = "accept", reason = "done.txt exists" }

[[run]]
role = "gap_analysis"
[[run.steps]]
json = { tasks = [], issues = [] }
"#;

/// Also the script of `daemons.rs`: the same one-task run in each mode.
pub(crate) const IMPLEMENTATION: &str = r#"{"specs": [{"id": "s", "file": "specs/s.md", "name": "S",
  "tasks": [{"id": "s-1", "description": "Write done.txt"}]}]}"#;

/// Also the script of `daemons.rs`: the same one-task run in each mode.
pub(crate) const BUILD_SCRIPT: &str = r#"
[[run]]
role = "build"
subject = "s-1"
[[run.steps]]
write = { path = "done.txt", content = "done\n" }
[[run.steps]]
answer = "Wrote it.\n<TASK_DONE>"

[[run]]
role = "verify"
subject = "s"
[[run.steps]]
json = { verdict = "accept", reason = "done.txt exists" }
"#;

const THREAD_SCRIPT: &str = r#"
[[run]]
role = "build"
[[run.steps]]
write = { path = "done.txt", content = "done\n" }
[[run.steps]]
answer = "Wrote it.\nSIGNALS_DONE"
"#;

/// The CLI's stream for plan mode's answer: one spec, one task, as structured output.
const PLAN_TRANSCRIPT: &str = concat!(
    r#"{"type":"system","subtype":"init","session_id":"plan-1","tools":[],"model":"fake"}"#,
    "\n",
    r#"{"type":"result","subtype":"success","is_error":false,"num_turns":1,"terminal_reason":"completed","session_id":"plan-1","total_cost_usd":0,"result":"planned","structured_output":{"specs":[{"id":"s","name":"S","file":"specs/s.md","priority":1,"context":"","tasks":[{"description":"Write done.txt","acceptanceCriteria":["done.txt exists"]}],"acceptanceCriteria":[]}]}}"#,
    "\n"
);

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

fn signal(child: &Child, signal: nix::sys::signal::Signal) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, signal).unwrap();
}

/// Waits for `path` to appear (the gate or the agent has started).
fn wait_for(path: &Path, child: &mut Child) {
    let start = Instant::now();
    while !path.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("the run ended before its gate or agent started: {status}\n{err}");
        }
        assert!(start.elapsed() < LIMIT, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for the run to end; returns its status and stderr.
fn finish(mut child: Child) -> (ExitStatus, String) {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status, err);
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            panic!("the run did not stop within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[rstest]
fn a_signal_stops_every_mode_cleanly_and_the_run_resumes(
    #[values(
        Mode::Construct,
        Mode::Plan,
        Mode::Build,
        Mode::Thread,
        Mode::ConstructAtOnce
    )]
    mode: Mode,
    #[values(Stop::Int, Stop::Term, Stop::KillThenResume, Stop::TermTwice)] stop: Stop,
) {
    use nix::sys::signal::Signal;
    use std::os::unix::process::ExitStatusExt;

    // Two SIGTERMs must not wait out the grace: give it an hour.
    let grace = if stop == Stop::TermTwice { "1h" } else { "1s" };
    let cell = Cell::new(mode, stop, grace);
    let mut child = cell.first_run();
    wait_for(&cell.marker("started"), &mut child);

    let (status, stderr) = match stop {
        Stop::Int => {
            signal(&child, Signal::SIGINT);
            finish(child)
        }
        Stop::Term => {
            signal(&child, Signal::SIGTERM);
            finish(child)
        }
        Stop::TermTwice => {
            signal(&child, Signal::SIGTERM);
            // The first signal has been taken in hand once its message is out.
            std::thread::sleep(Duration::from_millis(300));
            signal(&child, Signal::SIGTERM);
            finish(child)
        }
        Stop::KillThenResume => {
            signal(&child, Signal::SIGKILL);
            finish(child)
        }
    };

    match stop {
        Stop::Int => {
            assert_eq!(status.code(), Some(130), "{mode:?}: {stderr}");
            assert!(stderr.contains("SIGINT: stopping"), "{mode:?}: {stderr}");
        }
        Stop::Term | Stop::TermTwice => {
            assert_eq!(status.code(), Some(143), "{mode:?}: {stderr}");
            assert!(stderr.contains("SIGTERM: stopping"), "{mode:?}: {stderr}");
        }
        Stop::KillThenResume => {
            assert_eq!(status.signal(), Some(9), "{mode:?}");
            // Killed without a chance to clean up: what it ran lives on, until the next run.
            assert!(
                !cell.survivors().is_empty(),
                "{mode:?}: the test leaks nothing"
            );
        }
    }
    if stop != Stop::KillThenResume {
        let alive = cell.survivors();
        assert!(alive.is_empty(), "{mode:?} {stop:?}: survivors {alive:#?}");
    }

    let resumed = cell.resume();
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{mode:?} {stop:?}: resume failed\n{}\n{}",
        String::from_utf8_lossy(&resumed.stdout),
        String::from_utf8_lossy(&resumed.stderr)
    );
    let alive = cell.survivors();
    assert!(
        alive.is_empty(),
        "{mode:?} {stop:?}: survivors after resume {alive:#?}"
    );
    cell.assert_complete();
}
