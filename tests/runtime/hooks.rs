//! `[[hooks]]` in every mode, through the `ralph` command as a user runs it: a hook on
//! `finished` gets the run's end as JSON on stdin (the line `--json` prints) for a complete
//! run and for one that ends in an error, in the construct loop, plan mode, build mode and
//! a thread's loop; a hook on `needs_person` only when a person must act; hooks run in the
//! order of their events; a hook that hangs is killed at its timeout and leaves no process.
//! (A required hook that fails: `tests/cli/hooks.rs`.)

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output};

use rstest::rstest;
use serde_json::Value;

use super::signal_matrix::{BUILD_SCRIPT, CONSTRUCT_SCRIPT, IMPLEMENTATION};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Construct,
    Plan,
    Build,
    Thread,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum End {
    /// The run reaches its outcome.
    Complete,
    /// The run fails with an error (the agent has no script for the run it is asked for,
    /// or the thread is not in a phase the command can run).
    Error,
}

/// A script whose only entry answers a role no mode asks here: every request fails the run.
const NO_SCRIPT: &str = "[[run]]\nrole = \"draft\"\n[[run.steps]]\nanswer = \"unused\"\n";

const PLAN_SCRIPT: &str = r#"
[[run]]
role = "breakdown"
[[run.steps]]
json = { specs = [{ id = "s", name = "S", file = "specs/s.md", priority = 1, tasks = [{ description = "Write done.txt" }] }] }
"#;

const THREAD_SCRIPT: &str = r#"
[[run]]
role = "build"
[[run.steps]]
write = { path = "done.txt", content = "done\n" }
[[run.steps]]
answer = "Wrote it.\nHOOKS_DONE"
"#;

const THREAD_SPEC: &str = "# Done\n<promise>HOOKS_DONE</promise>\n\n## Acceptance Criteria\n\n- [ ] done.txt exists: `test -f done.txt`\n";

/// A hook on `on` that appends its stdin to `file`.
fn recorder(on: &str, file: &Path) -> String {
    format!(
        "[[hooks]]\non = [{on:?}]\ncommand = [\"sh\", \"-c\", \"cat >> \\\"$0\\\"\", {:?}]\n",
        file.display().to_string()
    )
}

/// The JSON lines in `file`; none when it was never written.
fn lines(file: &Path) -> Vec<Value> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `value` without its timestamp, which each printer sets at its own moment.
fn untimed(mut value: Value) -> Value {
    value.as_object_mut().unwrap().remove("ts");
    value
}

/// A workspace of `mode` with `config` (hooks) in its `ralph.toml`, and the `ralph` command
/// that runs it to `end`; `--json` where the mode has it.
fn setup(mode: Mode, end: End, ws: &Path, scripts: &Path, config: &str) -> Command {
    let script = scripts.join("script.toml");
    let mut cmd = Command::new(crate::support::ralph_bin());
    cmd.arg("-C").arg(ws);
    match mode {
        Mode::Construct => {
            write(ws, "spec.md", "# Done\nWrite done.txt.\n");
            write(ws, "ralph.toml", config);
            let text = if end == End::Complete {
                CONSTRUCT_SCRIPT
            } else {
                NO_SCRIPT
            };
            write(scripts, "script.toml", text);
            cmd.args(["construct", "spec.md", "--json", "--script"])
                .arg(&script);
        }
        Mode::Plan | Mode::Build => {
            repo(ws, ".ralph/\nbuild/\n");
            write(ws, "specs/s.md", "# S\nWrite done.txt.\n");
            write(ws, "ralph.toml", config);
            if mode == Mode::Build {
                write(ws, "specs/plans/s.md", "# Plan: s\n1. Write done.txt.\n");
                write(ws, "implementation.json", IMPLEMENTATION);
            }
            commit(ws);
            let text = match (mode, end) {
                (_, End::Error) => NO_SCRIPT,
                (Mode::Plan, End::Complete) => PLAN_SCRIPT,
                _ => BUILD_SCRIPT,
            };
            write(scripts, "script.toml", text);
            let command = if mode == Mode::Plan { "plan" } else { "build" };
            cmd.args([command, "--json", "--script"]).arg(&script);
        }
        Mode::Thread => {
            repo(ws, ".ralph/\n");
            write(ws, "ralph.toml", config);
            commit(ws);
            write(scripts, "spec.md", THREAD_SPEC);
            write(scripts, "script.toml", THREAD_SCRIPT);
            let spec = scripts.join("spec.md");
            ralph_thread(ws, &script, &["new", "--title", "Done"], Some(&spec));
            // Complete: preflight, then the loop to Implemented. Error: a thread still
            // Drafting cannot be resumed.
            let args: &[&str] = if end == End::Complete {
                ralph_thread(ws, &script, &["finalize"], None);
                &["--max-iterations", "1", "start"]
            } else {
                &["resume"]
            };
            cmd.args(["thread", "--script"]).arg(&script).args(args);
        }
    }
    cmd
}

/// `ralph thread --script SCRIPT ARGS [--spec SPEC]`, which must succeed.
fn ralph_thread(ws: &Path, script: &Path, args: &[&str], spec: Option<&Path>) {
    let mut cmd = Command::new(crate::support::ralph_bin());
    cmd.arg("-C")
        .arg(ws)
        .args(["thread", "--script"])
        .arg(script)
        .args(args);
    if let Some(spec) = spec {
        cmd.arg("--spec").arg(spec);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", text(&out));
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[rstest]
#[case::construct_complete(Mode::Construct, End::Complete)]
#[case::construct_error(Mode::Construct, End::Error)]
#[case::plan_complete(Mode::Plan, End::Complete)]
#[case::plan_error(Mode::Plan, End::Error)]
#[case::build_complete(Mode::Build, End::Complete)]
#[case::build_error(Mode::Build, End::Error)]
#[case::thread_complete(Mode::Thread, End::Complete)]
#[case::thread_error(Mode::Thread, End::Error)]
fn a_hook_on_finished_gets_the_end_of_the_run_as_json_in_every_mode(
    #[case] mode: Mode,
    #[case] end: End,
) {
    let ws = tempfile::tempdir().unwrap();
    let scripts = tempfile::tempdir().unwrap();
    let finished = scripts.path().join("finished.jsonl");
    let needs_person = scripts.path().join("needs_person.jsonl");
    let config = format!(
        "{}{}",
        recorder("finished", &finished),
        recorder("needs_person", &needs_person)
    );

    let out = setup(mode, end, ws.path(), scripts.path(), &config)
        .output()
        .unwrap();

    let code = if end == End::Complete { 0 } else { 1 };
    assert_eq!(out.status.code(), Some(code), "{mode:?}: {}", text(&out));
    let got = lines(&finished);
    assert_eq!(got.len(), 1, "one run, one end: {got:?}");
    let event = &got[0];
    assert_eq!(event["event"], "finished", "{event}");
    let name = format!("{mode:?}").to_lowercase();
    assert_eq!(event["mode"], name.as_str(), "{event}");
    assert_eq!(event["exit_code"], code, "{event}");
    assert!(event["ts"].is_string(), "{event}");
    match end {
        End::Complete => {
            assert!(event.get("error").is_none(), "{event}");
            match mode {
                Mode::Construct => assert_eq!(event["outcome"]["outcome"], "complete"),
                Mode::Build => assert_eq!(event["specs_outcome"]["outcome"], "complete"),
                Mode::Plan => assert_eq!(
                    event["message"],
                    "planned 1 spec(s), 1 task(s) into implementation.json"
                ),
                Mode::Thread => {
                    assert_eq!(event["phase"], "Implemented", "{event}");
                    assert_eq!(event["thread"], "1-done", "{event}");
                }
            }
        }
        End::Error => {
            // The error the command printed, and the run's end said so.
            let error = event["error"].as_str().unwrap();
            assert!(
                String::from_utf8_lossy(&out.stderr).contains(error),
                "{error} not in {}",
                text(&out)
            );
            assert!(event["message"].as_str().unwrap().contains(error));
            assert!(event.get("outcome").is_none() && event.get("specs_outcome").is_none());
        }
    }
    // A person must act on an error; a complete run (a thread left Implemented, not at a
    // checkpoint) needs no one.
    let needed = lines(&needs_person);
    assert_eq!(event["needs_person"], end == End::Error, "{event}");
    assert_eq!(
        needed,
        if end == End::Error {
            got.clone()
        } else {
            vec![]
        }
    );
    // The same JSON as `--json` printed for that event.
    if mode != Mode::Thread {
        let printed: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .filter(|v: &Value| v["event"] == "finished")
            .collect();
        assert_eq!(printed.len(), 1, "{}", text(&out));
        assert_eq!(untimed(printed[0].clone()), untimed(event.clone()));
    }
}

/// Quick mode takes a thread to review, a checkpoint: its end is one a person must act on.
#[test]
fn a_thread_waiting_for_review_runs_the_hooks_on_needs_person() {
    let ws = tempfile::tempdir().unwrap();
    let scripts = tempfile::tempdir().unwrap();
    let needs_person = scripts.path().join("needs_person.jsonl");
    repo(ws.path(), ".ralph/\n");
    write(
        ws.path(),
        "ralph.toml",
        &recorder("needs_person", &needs_person),
    );
    commit(ws.path());
    write(scripts.path(), "spec.md", THREAD_SPEC);
    write(scripts.path(), "script.toml", THREAD_SCRIPT);
    let script = scripts.path().join("script.toml");
    let spec = scripts.path().join("spec.md");
    ralph_thread(ws.path(), &script, &["new", "--title", "Done"], Some(&spec));
    ralph_thread(ws.path(), &script, &["finalize"], None);

    ralph_thread(ws.path(), &script, &["--quick", "start"], None);

    let got = lines(&needs_person);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["event"], "finished");
    assert_eq!(got[0]["phase"], "PendingReview");
    assert_eq!(got[0]["needs_person"], true);
}

/// Hooks run one at a time in the order of their events, and a mid-run event's hook has
/// run before the command returns; `RALPH_EVENT` names the event.
#[test]
fn hooks_run_in_the_order_of_their_events_and_all_before_the_run_returns() {
    let ws = tempfile::tempdir().unwrap();
    let scripts = tempfile::tempdir().unwrap();
    let seen = scripts.path().join("seen.txt");
    let config = format!(
        "[[hooks]]\non = [\"task_started\", \"task_done\", \"finished\"]\ncommand = [\"sh\", \"-c\", \"echo \\\"$RALPH_EVENT\\\" >> \\\"$0\\\"\", {:?}]\n",
        seen.display().to_string()
    );
    let out = setup(
        Mode::Construct,
        End::Complete,
        ws.path(),
        scripts.path(),
        &config,
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        "task_started\ntask_done\nfinished\n"
    );
}

/// A hook that hangs, and a child it started, are killed at its timeout: the run goes on,
/// says so in a warning naming the hook, runs the next hook, and leaves no process.
#[rstest]
#[case::construct(Mode::Construct)]
#[case::thread(Mode::Thread)]
fn a_hook_that_hangs_is_killed_at_its_timeout_and_leaves_no_process(#[case] mode: Mode) {
    let ws = tempfile::tempdir().unwrap();
    let scripts = tempfile::tempdir().unwrap();
    let pids = scripts.path().join("pids");
    let after = scripts.path().join("after.jsonl");
    let config = format!(
        "grace = \"1s\"\n[[hooks]]\nname = \"hangs\"\non = [\"finished\"]\ncommand = [\"sh\", \"-c\", \"sleep 600 & echo $! >> \\\"$0\\\"; echo $$ >> \\\"$0\\\"; wait\", {:?}]\ntimeout = \"1s\"\n{}",
        pids.display().to_string(),
        recorder("finished", &after)
    );

    let out = setup(mode, End::Complete, ws.path(), scripts.path(), &config)
        .output()
        .unwrap();

    assert!(
        out.status.success(),
        "a hook that is not required fails nothing: {}",
        text(&out)
    );
    assert!(
        text(&out).contains("hook hangs (sh -c sleep 600 &")
            && text(&out).contains("failed on finished: timed out after 1s and was killed"),
        "{}",
        text(&out)
    );
    assert_eq!(lines(&after).len(), 1, "the next hook ran");
    let pids: Vec<i32> = std::fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2, "the hook and its child");
    for pid in pids {
        assert!(
            alive(pid).is_none(),
            "{pid} outlived the run: {:?}",
            alive(pid)
        );
    }
}

/// `pid`'s command line while it is alive and not a zombie.
fn alive(pid: i32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let state = stat.rsplit_once(") ")?.1.chars().next()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    // A pid reused by an unrelated process is not the hook's.
    let ours = cmdline.starts_with("sleep 600") || cmdline.starts_with("sh -c sleep 600");
    (state != 'Z' && ours).then(|| cmdline.trim().to_owned())
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

/// The library's observers get the end of a thread's run too, an error included, and hooks
/// can be set by the program (`RalphBuilder::config`) as well as in `ralph.toml`.
#[tokio::test]
async fn observers_get_a_threads_failed_end_and_the_builder_can_set_hooks() {
    let dir = crate::support::threads::repo().await;
    let scripts = tempfile::tempdir().unwrap();
    let file = scripts.path().join("finished.jsonl");
    let recorder = crate::support::Recorder::default();
    let hooks = serde_json::json!([{
        "on": ["finished"],
        "command": ["sh", "-c", "cat >> \"$0\"", file.display().to_string()],
    }]);
    let threads = ralph::Ralph::builder()
        .workspace(dir.path())
        .agent(ralph::FakeAgent::new())
        .observer(recorder.clone())
        .config("hooks", hooks)
        .build()
        .unwrap()
        .threads();
    let id = threads
        .create("Greeter", crate::support::threads::SPEC)
        .unwrap()
        .id;

    let err = threads.thread(&id).resume().await.unwrap_err();

    let ends = recorder.of_kind("finished");
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert_eq!(ends[0]["error"], err.to_string());
    assert_eq!(ends[0]["thread"], id.as_str());
    assert_eq!(ends[0]["phase"], "Drafting");
    assert_eq!(
        ends[0]["message"],
        format!("thread {id} stopped: {err}").as_str()
    );
    let heard = lines(&file);
    assert_eq!(heard.len(), 1);
    assert_eq!(untimed(heard[0].clone()), ends[0]);
}
