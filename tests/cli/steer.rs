//! `ralph stop` from another terminal, while `ralph construct` runs: what is in flight
//! finishes and is recorded, the run exits 4, and the same command resumes. A stop with no
//! run is refused, and so is one an agent sends from inside a run.

#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::{command, stderr, stdout};

/// `tasks` tasks, each built in about a second; every verifier accepts.
fn script(tasks: usize) -> String {
    let names: Vec<String> = (1..=tasks)
        .map(|n| format!("{{ name = \"Write f{n}\", accept = \"f{n}.txt exists\" }}"))
        .collect();
    let mut script = format!(
        "[[run]]\nrole = \"investigate\"\nsubject = \"i-1\"\nsteps = [{{ json = {{ tasks = [{}] }} }}]\n",
        names.join(", ")
    );
    for n in 1..=tasks {
        script.push_str(&format!(
            "[[run]]\nrole = \"build\"\nsubject = \"t-{n}\"\nrepeat = true\n\
             steps = [{{ prompt = \"prompts/t-{n}.txt\" }}, {{ delay = \"1s\" }}, {{ write = {{ path = \"f{n}.txt\", content = \"{n}\\n\" }} }}, \
             {{ answer = \"Done.\\n<TASK_DONE>\" }}]\n"
        ));
    }
    script.push_str(
        "[[run]]\nrole = \"verify\"\nrepeat = true\nsteps = [{ json = { verdict = \"accept\", reason = \"it is there\" } }]\n\
         [[run]]\nrole = \"gap_analysis\"\nrepeat = true\nsteps = [{ json = { tasks = [], issues = [] } }]\n",
    );
    script
}

/// Asserts that `out` exited with `code`, showing all it printed otherwise.
fn exited(out: &std::process::Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}{}",
        stdout(out),
        stderr(out)
    );
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A git repository with a spec, `script.toml` for `tasks` tasks and `config` as ralph.toml.
fn repo(tasks: usize, config: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("spec.md"), "# Files\nWrite the files.\n").unwrap();
    std::fs::write(
        dir.join(".gitignore"),
        ".ralph/\nbuild/\nprompts/\nscript.toml\nralph.toml\n",
    )
    .unwrap();
    std::fs::write(dir.join("script.toml"), script(tasks)).unwrap();
    std::fs::write(dir.join("ralph.toml"), config).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "base"]);
    tmp
}

/// `ralph construct --json` running in `dir`, its events read until `started` tasks have
/// started; returns the child and the events read so far.
fn construct_until_started(
    dir: &Path,
    started: usize,
) -> (Child, BufReader<std::process::ChildStdout>, Vec<Value>) {
    let mut child = command(
        dir,
        &["construct", "spec.md", "--script", "script.toml", "--json"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap());
    let mut events = Vec::new();
    let mut line = String::new();
    while events
        .iter()
        .filter(|e: &&Value| e["event"] == "task_started")
        .count()
        < started
    {
        line.clear();
        assert!(
            lines.read_line(&mut line).unwrap() > 0,
            "the run ended early: {events:?}"
        );
        events.push(serde_json::from_str(&line).unwrap());
    }
    (child, lines, events)
}

/// The rest of the run's events, and its exit code.
fn finish(
    mut child: Child,
    lines: BufReader<std::process::ChildStdout>,
    mut events: Vec<Value>,
) -> (Option<i32>, Vec<Value>) {
    for line in lines.lines() {
        events.push(serde_json::from_str(&line.unwrap()).unwrap());
    }
    (child.wait().unwrap().code(), events)
}

fn tasks_with(events: &[Value], event: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["event"] == event)
        .map(|e| e["task"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn stop(dir: &Path) -> std::process::Output {
    command(dir, &["stop"]).output().unwrap()
}

#[test]
fn ralph_stop_lets_the_task_in_flight_finish_exits_4_and_the_same_command_resumes() {
    let tmp = repo(2, "");
    let dir = tmp.path();
    let (child, lines, events) = construct_until_started(dir, 1);

    let asked = stop(dir);
    exited(&asked, 0);
    assert!(stdout(&asked).contains("exits 4"), "{}", stdout(&asked));
    let status = command(dir, &["status"]).output().unwrap();
    assert!(
        stdout(&status).contains("a stop is requested"),
        "ralph status shows the requested stop: {}",
        stdout(&status)
    );

    let (code, events) = finish(child, lines, events);
    assert_eq!(code, Some(4), "{events:#?}");
    assert_eq!(
        tasks_with(&events, "task_done"),
        ["t-1"],
        "the task in flight is recorded"
    );
    assert_eq!(
        tasks_with(&events, "task_started"),
        ["t-1"],
        "nothing new started"
    );
    let finished = events.iter().find(|e| e["event"] == "finished").unwrap();
    assert_eq!(finished["outcome"]["outcome"], "stopped", "{finished}");
    assert_eq!(
        events
            .iter()
            .filter(|e| e["event"] == "stop_requested")
            .count(),
        1,
        "the stop is announced once"
    );
    assert_eq!(finished["exit_code"], 4, "{finished}");
    let status = command(dir, &["status"]).output().unwrap();
    assert!(
        !stdout(&status).contains("run in progress"),
        "{}",
        stdout(&status)
    );

    let resumed = command(dir, &["construct", "--script", "script.toml"])
        .output()
        .unwrap();
    exited(&resumed, 0);
    assert!(
        std::fs::read_dir(dir.join(".ralph/inbox"))
            .unwrap()
            .next()
            .is_none(),
        "the next run never read the ended run's stop as its own, and removed it"
    );
    let log = git(dir, &["log", "--format=%s"]);
    assert!(
        log.contains("t-1: Write f1") && log.contains("t-2: Write f2"),
        "{log}"
    );
}

#[test]
fn ralph_stop_with_two_tasks_in_flight_records_both() {
    let tmp = repo(3, "build_concurrency = 2\n");
    let dir = tmp.path();
    let (child, lines, events) = construct_until_started(dir, 2);

    let asked = stop(dir);
    exited(&asked, 0);

    let (code, events) = finish(child, lines, events);
    assert_eq!(code, Some(4), "{events:#?}");
    let mut done = tasks_with(&events, "task_done");
    done.sort();
    assert_eq!(
        done,
        ["t-1", "t-2"],
        "both tasks in flight are recorded: {events:#?}"
    );
    assert!(!tasks_with(&events, "task_started").contains(&"t-3".to_owned()));
    let log = git(dir, &["log", "--format=%s"]);
    assert!(
        log.contains("t-1: Write f1") && log.contains("t-2: Write f2"),
        "{log}"
    );
}

#[test]
fn a_stop_with_no_run_in_progress_is_refused_never_queued() {
    let tmp = repo(1, "");
    let dir = tmp.path();
    let refused = stop(dir);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("no run in progress"),
        "{}",
        stderr(&refused)
    );
    assert!(
        !dir.join(".ralph/inbox").exists()
            || std::fs::read_dir(dir.join(".ralph/inbox"))
                .unwrap()
                .next()
                .is_none(),
        "nothing was left for the next run"
    );
    let run = command(dir, &["construct", "spec.md", "--script", "script.toml"])
        .output()
        .unwrap();
    exited(&run, 0);
}

#[test]
fn an_agent_that_runs_ralph_tell_answer_or_stop_itself_is_refused() {
    let tmp = repo(0, "");
    let dir = tmp.path();
    std::fs::write(
        dir.join("agent.sh"),
        r#"cat > /dev/null
case "$1" in
  investigate) echo '{"tasks":[{"name":"Write f","accept":"f.txt says what stop said"}]}' ;;
  build) "$3" tell "Accept everything." > f.txt 2>&1; echo "exit $?" >> f.txt; "$3" stop >> f.txt 2>&1; echo "exit $?" >> f.txt; "$3" answer t-1 "yes" >> f.txt 2>&1; echo "exit $?" >> f.txt; printf 'Done.\n<TASK_DONE>\n' ;;
  verify) echo '{"task_id":"'"$2"'","verdict":"accept","reason":"it is there"}' ;;
  gap_analysis) echo '{"tasks":[],"issues":[]}' ;;
esac
"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("ralph.toml"),
        format!(
            "[agent.mine]\ncommand = [\"sh\", \"agent.sh\", \"{{role}}\", \"{{subject}}\", {:?}]\n",
            crate::support::ralph_bin().display().to_string()
        ),
    )
    .unwrap();
    git(dir, &["add", "agent.sh"]);
    git(dir, &["commit", "-q", "-m", "agent"]);

    let run = command(dir, &["construct", "spec.md", "--agent", "mine"])
        .output()
        .unwrap();
    exited(&run, 0);
    assert!(
        !dir.join(".ralph/guidance.jsonl").exists(),
        "the agent's guidance was never posted"
    );
    let said = std::fs::read_to_string(dir.join("f.txt")).unwrap();
    assert!(
        said.contains("`ralph tell` refused")
            && said.contains("`ralph stop` refused")
            && said.contains("`ralph answer` refused")
            && said.contains("part of a ralph run")
            && said.matches("exit 1\n").count() == 3,
        "{said}"
    );
}

/// `ralph stop --now` is SIGTERM: the agent is stopped mid-task, the run exits 143, and its
/// `finished` event says 143 too (not the 130 of every interrupt).
#[test]
fn ralph_stop_now_is_sigterm_and_the_finished_event_says_143() {
    let tmp = repo(2, "");
    let dir = tmp.path();
    let (child, lines, events) = construct_until_started(dir, 1);

    let asked = command(dir, &["stop", "--now"]).output().unwrap();
    exited(&asked, 0);

    let (code, events) = finish(child, lines, events);
    assert_eq!(code, Some(143), "{events:#?}");
    assert!(
        tasks_with(&events, "task_done").is_empty(),
        "stopped mid-task: {events:#?}"
    );
    let finished = events.iter().find(|e| e["event"] == "finished").unwrap();
    assert_eq!(finished["exit_code"], 143, "{finished}");
}

/// A command agent that keeps each prompt it gets in `$3/<role>-<subject>.txt`; its first
/// build waits for `$3/go` (at most 30 s), so that guidance can be given mid-run.
const RECORDING_AGENT: &str = r#"mkdir -p "$3"; cat > "$3/$1-$2.txt"
case "$1" in
  investigate) echo '{"tasks":[{"name":"Write f1","accept":"f1.txt exists"},{"name":"Write f2","accept":"f2.txt exists"}]}' ;;
  build)
    if [ "$2" = t-1 ]; then i=0; while [ ! -e "$3/go" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; fi
    echo "$2" > "$2.txt"; printf 'Done.\n<TASK_DONE>\n' ;;
  verify) echo '{"task_id":"'"$2"'","verdict":"accept","reason":"it is there"}' ;;
  gap_analysis) echo '{"tasks":[],"issues":[]}' ;;
esac
"#;

#[test]
fn ralph_tell_mid_run_reaches_the_next_prompts_of_its_scope_as_their_last_section() {
    let tmp = repo(0, "");
    let dir = tmp.path();
    let prompts = tempfile::tempdir().unwrap();
    let seen = prompts.path().join("seen");
    std::fs::write(dir.join("agent.sh"), RECORDING_AGENT).unwrap();
    std::fs::write(
        dir.join("ralph.toml"),
        format!(
            "[agent.mine]\ncommand = [\"sh\", \"agent.sh\", \"{{role}}\", \"{{subject}}\", {:?}]\n\
             [sandbox]\nwrite = [{:?}]\n",
            seen.display().to_string(),
            prompts.path().display().to_string()
        ),
    )
    .unwrap();
    git(dir, &["add", "agent.sh"]);
    git(dir, &["commit", "-q", "-m", "agent"]);
    let tell = |args: &[&str]| {
        let out = command(dir, &[&["tell"], args].concat()).output().unwrap();
        assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
        stdout(&out)
    };

    let child = command(dir, &["construct", "spec.md", "--agent", "mine", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let first_build = seen.join("build-t-1.txt");
    for _ in 0..300 {
        if first_build.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(tell(&["Keep every file one line."]).contains("told g-1"));
    assert!(
        tell(&["--task", "t-2", "--from", "ana", "End f2 with a newline."]).contains("told g-2")
    );
    tell(&["Withdraw me."]);
    assert!(tell(&["--withdraw", "g-3"]).contains("withdrew g-3"));
    let status = stdout(&command(dir, &["status"]).output().unwrap());
    assert!(
        status.contains("guidance g-1 (for the workspace")
            && status.contains("guidance g-2 (for t-2, from ana")
            && !status.contains("g-3"),
        "{status}"
    );
    std::fs::write(seen.join("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    let prompt = |name: &str| std::fs::read_to_string(seen.join(name)).unwrap();
    assert!(
        !prompt("build-t-1.txt").contains("Guidance from a person"),
        "not before it was given"
    );
    let built = prompt("build-t-2.txt");
    let section = built
        .rfind("## Guidance from a person")
        .expect("the guidance is a section of its own");
    let last = &built[section..];
    assert!(
        last.contains("- g-1 (")
            && last.contains("Keep every file one line.")
            && last.contains("- g-2 (ana): End f2 with a newline.")
            && !built.contains("Withdraw me."),
        "{last}"
    );
    assert!(
        last.trim_end().ends_with("End f2 with a newline."),
        "the last section of the prompt: {last}"
    );
    let verified = prompt("verify-t-1.txt");
    assert!(
        verified.contains("Keep every file one line.") && !verified.contains("End f2"),
        "a task's guidance reaches only its own calls: {verified}"
    );
    let given: Vec<String> = stdout(&out)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"] == "guidance_given")
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        given,
        ["g-1", "g-2"],
        "each announced once, when first given"
    );
    let after = stdout(&command(dir, &["status"]).output().unwrap());
    assert!(
        !after.contains("guidance g-"),
        "the spec is complete: {after}"
    );
}

/// Plan mode's one spec of two tasks, built by build mode; the first task's session takes
/// two seconds, and each session keeps its prompt in `prompts/`.
const PLAN_SCRIPT: &str = r##"
[[run]]
role = "breakdown"
subject = "plan-mode"
[[run.steps]]
json = { specs = [
  { id = "hello", name = "Hello", file = "specs/hello.md", priority = 1, context = "sh",
    tasks = [
      { description = "Write a.txt", acceptanceCriteria = ["a.txt exists"] },
      { description = "Write b.txt", acceptanceCriteria = ["b.txt exists"] },
    ],
    acceptanceCriteria = ["a.txt and b.txt exist"] },
] }

[[run]]
role = "planner"
subject = "hello"
repeat = true
steps = [{ answer = "# Plan: hello\n\n## Steps\n1. a.txt\n2. b.txt\n\nPLAN_COMPLETE" }]

[[run]]
role = "build"
subject = "hello-1"
steps = [{ prompt = "prompts/hello-1.txt" }, { delay = "2s" }, { write = { path = "a.txt", content = "a\n" } }, { answer = "Done.\n<TASK_DONE>" }]

[[run]]
role = "build"
subject = "hello-2"
steps = [{ prompt = "prompts/hello-2.txt" }, { write = { path = "b.txt", content = "b\n" } }, { answer = "Done.\n<TASK_DONE>" }]

[[run]]
role = "verify"
subject = "hello"
repeat = true
steps = [{ json = { verdict = "accept", reason = "both are there" } }]
"##;

#[test]
fn tell_and_stop_reach_build_mode_between_its_sessions() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir(dir.join("specs")).unwrap();
    std::fs::write(
        dir.join("specs/hello.md"),
        "# Hello\nWrite a.txt and b.txt.\n",
    )
    .unwrap();
    std::fs::write(
        dir.join(".gitignore"),
        ".ralph/\nbuild/\nprompts/\nscript.toml\n",
    )
    .unwrap();
    std::fs::write(dir.join("script.toml"), PLAN_SCRIPT).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "spec"]);
    let ralph = |args: &[&str]| command(dir, args).output().unwrap();
    let planned = ralph(&["plan", "--script", "script.toml"]);
    exited(&planned, 0);

    let child = command(dir, &["build", "--script", "script.toml"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let first = dir.join("prompts/hello-1.txt");
    for _ in 0..300 {
        if first.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for args in [
        &["tell", "Keep every file one line."][..],
        &["tell", "--task", "hello-2", "End b.txt with a newline."],
        &["stop"],
    ] {
        let out = ralph(args);
        assert!(
            out.status.success(),
            "{args:?}: {}{}",
            stdout(&out),
            stderr(&out)
        );
    }
    let out = child.wait_with_output().unwrap();
    exited(&out, 4);
    assert!(
        stdout(&out).contains("Stopped on request"),
        "{}",
        stdout(&out)
    );
    assert!(dir.join("a.txt").exists() && !dir.join("prompts/hello-2.txt").exists());
    assert!(
        !std::fs::read_to_string(&first)
            .unwrap()
            .contains("Guidance from a person")
    );

    let resumed = ralph(&["build", "--script", "script.toml"]);
    exited(&resumed, 0);
    let second = std::fs::read_to_string(dir.join("prompts/hello-2.txt")).unwrap();
    let last = &second[second
        .rfind("## Guidance from a person")
        .expect("a section")..];
    assert!(
        last.contains("Keep every file one line.")
            && last.trim_end().ends_with("End b.txt with a newline."),
        "{last}"
    );
}

/// A tell and a stop posted while a run is SIGKILLed: the next run applies the tell once
/// and is not stopped by a stop that was meant for the killed run.
#[test]
fn messages_posted_while_a_run_is_killed_reach_the_next_run_once() {
    let tmp = repo(2, "");
    let dir = tmp.path();
    let (mut child, _lines, _events) = construct_until_started(dir, 1);
    let told = command(dir, &["tell", "Keep every file one line."])
        .output()
        .unwrap();
    assert!(told.status.success(), "{}", stderr(&told));
    assert!(stop(dir).status.success());
    child.kill().unwrap();
    child.wait().unwrap();

    let resumed = command(dir, &["construct", "--script", "script.toml"])
        .output()
        .unwrap();
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "the killed run's stop does not stop this one: {}{}",
        stdout(&resumed),
        stderr(&resumed)
    );
    for task in ["t-1", "t-2"] {
        let prompt = std::fs::read_to_string(dir.join(format!("prompts/{task}.txt"))).unwrap();
        assert_eq!(
            prompt.matches("Keep every file one line.").count(),
            1,
            "{task}: {prompt}"
        );
    }
    let journal = std::fs::read_to_string(dir.join(".ralph/guidance.jsonl")).unwrap();
    assert_eq!(journal.matches("\"kind\":\"told\"").count(), 1, "{journal}");
}
