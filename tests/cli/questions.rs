//! An agent's question for a person (`<TASK_QUESTION question="…">`) and `ralph answer`,
//! through the `ralph` command: the task waits, not failed, while the others are built; an
//! unanswered question ends the run with exit 3 and a `next:` naming `ralph answer`; the
//! answer reaches the task's next attempt with its set-aside work, mid-run or in the next run.

#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::{command, stderr, stdout};

/// Two tasks: t-1's first attempt writes a draft and asks which database; its second
/// appends to the draft and is done; t-2 is built at once. Every verifier accepts.
const SCRIPT: &str = r#"
[[run]]
role = "investigate"
subject = "i-1"
steps = [{ json = { tasks = [{ name = "Write f1", accept = "f1.txt exists" }, { name = "Write f2", accept = "f2.txt exists" }] } }]

[[run]]
role = "build"
subject = "t-1"
attempt = 1
steps = [{ write = { path = "f1.txt", content = "draft\n" } }, { ask = "Postgres or \"SQLite\"?" }]

[[run]]
role = "build"
subject = "t-1"
attempt = 2
steps = [{ prompt = "prompts/t-1-a2.txt" }, { append = { path = "f1.txt", content = "final\n" } }, { answer = "Done.\n<TASK_DONE>" }]

[[run]]
role = "build"
subject = "t-2"
repeat = true
steps = [{ delay = "500ms" }, { write = { path = "f2.txt", content = "2\n" } }, { answer = "Done.\n<TASK_DONE>" }]

[[run]]
role = "verify"
repeat = true
steps = [{ json = { verdict = "accept", reason = "it is there" } }]

[[run]]
role = "gap_analysis"
repeat = true
steps = [{ json = { tasks = [], issues = [] } }]
"#;

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

/// A git repository with a spec, the script and `config` as ralph.toml.
fn repo(config: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("spec.md"), "# Files\nWrite the files.\n").unwrap();
    std::fs::write(
        dir.join(".gitignore"),
        ".ralph/\nbuild/\nprompts/\nscript.toml\nralph.toml\n",
    )
    .unwrap();
    std::fs::write(dir.join("script.toml"), SCRIPT).unwrap();
    std::fs::write(dir.join("ralph.toml"), config).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "base"]);
    tmp
}

fn construct(dir: &Path) -> Command {
    let mut construct = command(dir, &["construct", "spec.md", "--script", "script.toml"]);
    construct.env("CI", "true");
    construct
}

/// `ralph construct --json` running in `dir`, its events read until one that `until` holds:
/// the child, the lines still to read, and the events read.
fn construct_until(
    dir: &Path,
    until: impl Fn(&Value) -> bool,
) -> (
    std::process::Child,
    std::io::Lines<BufReader<std::process::ChildStdout>>,
    Vec<Value>,
) {
    let mut child = construct(dir)
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut events: Vec<Value> = Vec::new();
    while !events.last().is_some_and(&until) {
        let line = lines.next().expect("the run ended early").unwrap();
        events.push(serde_json::from_str(&line).unwrap());
    }
    (child, lines, events)
}

/// Whether `event` says the run waits for an answer (`question_wait` of 2m).
fn waits(event: &Value) -> bool {
    event["message"]
        .as_str()
        .is_some_and(|m| m.contains("waiting up to 2m"))
}

fn said(out: &std::process::Output) -> String {
    format!("{}{}", stdout(out), stderr(out))
}

/// What the answered attempt got and left: the question and the answer as a section of its
/// prompt, and its set-aside draft back under its own work, in t-1's one commit.
fn assert_answer_reached_t1(dir: &Path) {
    assert_prompt_answered(dir);
    assert_draft_committed(dir);
}

/// t-1's one commit holds the draft its asking attempt left and its answered attempt's work.
fn assert_draft_committed(dir: &Path) {
    let log = git(dir, &["log", "--format=%s"]);
    assert_eq!(log.matches("t-1: Write f1").count(), 1, "{log}");
    let f1 = git(dir, &["show", "HEAD:f1.txt"]);
    assert_eq!(
        f1, "draft\nfinal\n",
        "the draft came back to the next attempt"
    );
}

/// t-1's answered attempt got the question and the answer, as the prompt's section.
fn assert_prompt_answered(dir: &Path) {
    let prompt = std::fs::read_to_string(dir.join("prompts/t-1-a2.txt")).unwrap();
    let section = prompt
        .find("## Your question, answered")
        .unwrap_or_else(|| panic!("no answer in the prompt:\n{prompt}"));
    assert!(
        prompt[section..].contains("Postgres or \"SQLite\"?")
            && prompt[section..].contains("Use SQLite."),
        "{prompt}"
    );
}

#[test]
fn an_unanswered_question_waits_exits_3_and_the_answer_reaches_the_next_run() {
    let tmp = repo("");
    let dir = tmp.path();

    let run = construct(dir).output().unwrap();
    assert_eq!(run.status.code(), Some(3), "{}", said(&run));
    let out = said(&run);
    assert!(
        out.contains("t-1 asks: Postgres or \"SQLite\"?") && out.contains("ralph answer t-1"),
        "{out}"
    );
    let log = git(dir, &["log", "--format=%s"]);
    assert!(
        log.contains("t-2: Write f2") && !log.contains("t-1"),
        "t-2 was built meanwhile: {log}"
    );
    let stash = git(dir, &["stash", "list"]);
    assert!(
        stash.contains("ralph: t-1's unfinished work (waits for a person's answer)"),
        "{stash}"
    );
    assert!(!dir.join("f1.txt").exists(), "the draft is set aside");
    assert!(
        git(dir, &["status", "--porcelain"]).is_empty(),
        "nothing of ralph's in git status"
    );
    let board = std::fs::read_to_string(dir.join(".ralph/plan.jsonl")).unwrap();
    assert!(
        !board.contains("\"s\":\"d\",\"accept\":\"f1"),
        "t-1 is not done: {board}"
    );

    let status = command(dir, &["status"]).output().unwrap();
    let shown = stdout(&status);
    assert!(
        shown.contains("question from t-1 (waiting") && shown.contains("next: ralph answer t-1"),
        "{shown}"
    );
    let wrong = command(dir, &["answer", "t-2", "yes"]).output().unwrap();
    assert_ne!(wrong.status.code(), Some(0));
    assert!(
        said(&wrong).contains("no question of \"t-2\" waits for an answer (waiting: t-1)"),
        "{}",
        said(&wrong)
    );

    // The `next:` as printed, with the person's answer for ANSWER.
    let next = out
        .lines()
        .find_map(|l| l.split("next: ").nth(1))
        .unwrap_or_else(|| panic!("no next: in {out}"));
    let next = next
        .split('`')
        .nth(1)
        .unwrap()
        .replace("ANSWER", "Use SQLite.");
    let answered = Command::new("sh")
        .args(["-c", &next])
        .current_dir(dir)
        .env("CI", "true")
        .env("PATH", path_with_ralph())
        .output()
        .unwrap();
    assert_eq!(
        answered.status.code(),
        Some(0),
        "{next}: {}",
        said(&answered)
    );
    assert!(
        said(&answered).contains("Spec complete"),
        "{next}: {}",
        said(&answered)
    );
    assert_answer_reached_t1(dir);
    assert!(
        git(dir, &["stash", "list"]).is_empty(),
        "the entry was given back"
    );
    let again = command(dir, &["answer", "t-1", "again"]).output().unwrap();
    assert_ne!(again.status.code(), Some(0), "{}", said(&again));
}

/// `PATH` with the `ralph` under test first, for a printed `next:` run as it is.
fn path_with_ralph() -> String {
    let bin = crate::support::ralph_bin();
    format!(
        "{}:/usr/local/bin:/usr/bin:/bin",
        bin.parent().unwrap().display()
    )
}

#[test]
fn an_answer_given_while_the_run_waits_reaches_the_task_without_a_restart() {
    let tmp = repo("question_wait = \"2m\"\n");
    let dir = tmp.path();
    let (mut child, lines, mut events) = construct_until(dir, |e| e["event"] == "question_asked");
    let asked = events.last().unwrap();
    assert_eq!(asked["subject"], "t-1");
    assert_eq!(asked["question"], "Postgres or \"SQLite\"?");

    let answer = command(dir, &["answer", "t-1", "Use SQLite.", "--from", "ana"])
        .output()
        .unwrap();
    assert_eq!(answer.status.code(), Some(0), "{}", said(&answer));
    assert!(
        stdout(&answer).contains("run in progress"),
        "{}",
        stdout(&answer)
    );
    for line in lines {
        events.push(serde_json::from_str(&line.unwrap()).unwrap());
    }
    assert_eq!(child.wait().unwrap().code(), Some(0), "{events:#?}");
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "question_answered" && e["subject"] == "t-1"),
        "{events:#?}"
    );
    assert_answer_reached_t1(dir);
    let prompt = std::fs::read_to_string(dir.join("prompts/t-1-a2.txt")).unwrap();
    assert!(prompt.contains("ana answered:"), "{prompt}");
}

#[test]
fn with_two_tasks_at_once_a_question_keeps_its_work_tree_while_the_other_is_committed() {
    let tmp = repo("build_concurrency = 2\n");
    let dir = tmp.path();

    let run = construct(dir).output().unwrap();
    assert_eq!(run.status.code(), Some(3), "{}", said(&run));
    let log = git(dir, &["log", "--format=%s"]);
    assert!(
        log.contains("t-2: Write f2") && !log.contains("t-1"),
        "{log}"
    );
    let tree = dir.join(".ralph/worktrees/t-1");
    assert_eq!(
        std::fs::read_to_string(tree.join("f1.txt")).unwrap(),
        "draft\n",
        "t-1's work tree is kept, as its attempt left it"
    );
    assert!(
        git(dir, &["branch", "--list", "ralph-task/t-1"]).contains("ralph-task/t-1"),
        "and its branch"
    );

    let answer = command(dir, &["answer", "t-1", "Use SQLite."])
        .output()
        .unwrap();
    assert_eq!(answer.status.code(), Some(0), "{}", said(&answer));
    let run = construct(dir).output().unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", said(&run));
    // The prompt was written in the work tree, which is gone: the commit says it all.
    assert_draft_committed(dir);
    assert!(
        !tree.exists(),
        "the work tree went once the task was merged"
    );
}

/// Build mode: spec a's task asks, spec b is built and committed meanwhile, and the answer
/// reaches a's task in the next run with its set-aside work.
const SPECS_SCRIPT: &str = r##"
[[run]]
role = "planner"
repeat = true
steps = [{ answer = "# Plan\n1. Do it.\n\nPLAN_COMPLETE" }]

[[run]]
role = "build"
subject = "a-1"
attempt = 1
steps = [{ write = { path = "a.txt", content = "half of a\n" } }, { ask = "Which greeting should a.txt hold?" }]

[[run]]
role = "build"
subject = "a-1"
attempt = 2
steps = [{ prompt = "prompts/a-1.txt" }, { append = { path = "a.txt", content = "hello\n" } }, { answer = "ok\n<TASK_DONE>" }]

[[run]]
role = "build"
subject = "b-1"
steps = [{ write = { path = "b.txt", content = "b\n" } }, { answer = "ok\n<TASK_DONE>" }]

[[run]]
role = "verify"
repeat = true
steps = [{ json = { verdict = "accept", reason = "it is there" } }]
"##;

#[test]
fn in_build_mode_a_task_that_asks_holds_its_spec_while_the_others_are_built() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    std::fs::create_dir(ws.join("specs")).unwrap();
    std::fs::write(ws.join("specs/a.md"), "# A\nWrite a.txt.\n").unwrap();
    std::fs::write(ws.join("specs/b.md"), "# B\nWrite b.txt.\n").unwrap();
    std::fs::write(
        ws.join(".gitignore"),
        ".ralph/\nbuild/\nprompts/\nscript.toml\n",
    )
    .unwrap();
    let plan = serde_json::json!({"specs": [
        {"id": "a", "file": "specs/a.md", "name": "A", "priority": 1,
         "tasks": [{"id": "a-1", "description": "Write a.txt"}]},
        {"id": "b", "file": "specs/b.md", "name": "B", "priority": 2,
         "tasks": [{"id": "b-1", "description": "Write b.txt"}]},
    ]});
    std::fs::write(ws.join("implementation.json"), plan.to_string()).unwrap();
    std::fs::write(ws.join("script.toml"), SPECS_SCRIPT).unwrap();
    git(ws, &["init", "-q", "-b", "main"]);
    git(ws, &["add", "-A"]);
    git(ws, &["commit", "-q", "-m", "specs"]);
    let build = || {
        let mut build = command(ws, &["build", "--script", "script.toml"]);
        build.env("CI", "true");
        build.output().unwrap()
    };

    let out = build();
    let text = said(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(
        git(ws, &["log", "--format=%s"]).starts_with("B\n"),
        "b was built: {text}"
    );
    assert!(text.contains("a-1 asks: Which greeting"), "{text}");
    assert!(!ws.join("a.txt").exists(), "set aside: {text}");
    let status = stdout(&command(ws, &["status"]).output().unwrap());
    assert!(status.contains("question from a-1"), "{status}");
    let implementation = std::fs::read_to_string(ws.join("implementation.json")).unwrap();
    assert!(
        implementation.contains("\"question\"") && !implementation.contains("blocked"),
        "{implementation}"
    );

    let answer = command(ws, &["answer", "a-1", "Use SQLite."])
        .output()
        .unwrap();
    assert_eq!(answer.status.code(), Some(0), "{}", said(&answer));
    let again = build();
    assert_eq!(again.status.code(), Some(0), "{}", said(&again));
    let prompt = std::fs::read_to_string(ws.join("prompts/a-1.txt")).unwrap();
    assert!(
        prompt.contains("## Your question, answered") && prompt.contains("Use SQLite."),
        "{prompt}"
    );
    assert_eq!(git(ws, &["show", "HEAD:a.txt"]), "half of a\nhello\n");
    assert_eq!(git(ws, &["stash", "list"]), "");
    assert_eq!(git(ws, &["status", "--porcelain"]), "");
}

/// A thread's iteration asks: under CI the thread pauses at once (exit 3, a `next:` naming
/// `ralph answer`), and once answered, `resume` runs the same iteration again with the
/// question and the answer in its prompt.
#[tokio::test]
async fn a_thread_whose_agent_asks_pauses_and_resumes_with_the_answer() {
    let dir = crate::support::threads::repo().await;
    let ws = dir.path();
    let scripts = tempfile::tempdir().unwrap();
    let asks = scripts.path().join("asks.toml");
    std::fs::write(
        &asks,
        "[[run]]\nrole = \"build\"\nattempt = 1\nsteps = [{ ask = \"Greet the World by default?\" }]\n",
    )
    .unwrap();
    let fix = scripts.path().join("fix.toml");
    std::fs::write(
        &fix,
        "[[run]]\nrole = \"build\"\nattempt = 1\nsteps = [{ prompt = \"prompt.txt\" }, \
         { write = { path = \"greet.sh\", content = \"echo \\\"Hello, ${1:-World}!\\\"\\n\" } }, \
         { answer = \"GREETER_DONE\" }]\n",
    )
    .unwrap();
    let thread = |script: &Path, args: &[&str]| {
        let mut cmd = command(ws, &["thread", "--script"]);
        cmd.arg(script).args(args).env("CI", "true");
        cmd.output().unwrap()
    };
    let made = thread(
        &asks,
        &["new", "--title", "Greeter", "--spec", crate::THREAD_SPEC],
    );
    assert!(made.status.success(), "{}", said(&made));
    let finalized = thread(&asks, &["finalize"]);
    assert!(finalized.status.success(), "{}", said(&finalized));

    let started = thread(&asks, &["--quick", "start"]);
    let out = said(&started);
    assert_eq!(started.status.code(), Some(3), "{out}");
    assert!(
        out.contains("1-greeter asks: Greet the World by default?")
            && out.contains(
                "ralph answer 1-greeter \"ANSWER\" && ralph thread --id 1-greeter resume"
            ),
        "{out}"
    );
    let answered = command(ws, &["answer", "1-greeter", "Yes, World."])
        .output()
        .unwrap();
    assert_eq!(answered.status.code(), Some(0), "{}", said(&answered));

    let resumed = thread(&fix, &["--id", "1-greeter", "resume"]);
    assert!(resumed.status.success(), "{}", said(&resumed));
    let prompt = std::fs::read_to_string(ws.join("prompt.txt")).unwrap();
    assert!(
        prompt.contains("## Your question, answered") && prompt.contains("Yes, World."),
        "{prompt}"
    );
    assert!(
        ralph_questions(ws).is_empty(),
        "the question is closed once its answer was given"
    );
}

/// The questions `ralph status` lists.
fn ralph_questions(ws: &Path) -> Vec<String> {
    let status = stdout(&command(ws, &["status"]).output().unwrap());
    status
        .lines()
        .filter(|l| l.starts_with("question from"))
        .map(str::to_owned)
        .collect()
}

/// The investigator asks through its answer's `question` field: the issue waits (exit 3);
/// answered, the next investigation gets it. A verifier may not ask: its question is an
/// invalid answer, asked once more.
const INVESTIGATOR_ASKS: &str = r#"
[[run]]
role = "investigate"
subject = "i-1"
attempt = 1
steps = [{ json = { question = "One file or two?" } }]

[[run]]
role = "investigate"
subject = "i-1"
attempt = 2
steps = [{ prompt = "prompts/i-1.txt" }, { json = { tasks = [{ name = "Write f1", accept = "f1.txt exists" }] } }]

[[run]]
role = "build"
subject = "t-1"
steps = [{ write = { path = "f1.txt", content = "1\n" } }, { answer = "Done.\n<TASK_DONE>" }]

[[run]]
role = "verify"
subject = "t-1"
attempt = 1
steps = [{ ask = "Is one file enough?" }]

[[run]]
role = "verify"
subject = "t-1"
attempt = 2
steps = [{ json = { verdict = "accept", reason = "it is there" } }]

[[run]]
role = "gap_analysis"
repeat = true
steps = [{ json = { tasks = [], issues = [] } }]
"#;

#[test]
fn an_investigator_asks_through_its_answer_and_a_verifier_may_not_ask() {
    let tmp = repo("");
    let dir = tmp.path();
    std::fs::write(dir.join("script.toml"), INVESTIGATOR_ASKS).unwrap();

    let run = construct(dir).output().unwrap();
    assert_eq!(run.status.code(), Some(3), "{}", said(&run));
    assert!(
        said(&run).contains("i-1 asks: One file or two?"),
        "{}",
        said(&run)
    );
    let answer = command(dir, &["answer", "i-1", "One."]).output().unwrap();
    assert_eq!(answer.status.code(), Some(0), "{}", said(&answer));

    let run = construct(dir).arg("--json").output().unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", said(&run));
    let prompt = std::fs::read_to_string(dir.join("prompts/i-1.txt")).unwrap();
    assert!(
        prompt.contains("One file or two?") && prompt.contains("One."),
        "{prompt}"
    );
    let refused = stdout(&run)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["event"] == "answer_invalid" && e["role"] == "verify")
        .unwrap_or_else(|| panic!("no invalid verifier answer: {}", stdout(&run)));
    assert!(
        refused["cause"]
            .as_str()
            .unwrap()
            .contains("may not ask a person"),
        "{refused}"
    );
}

/// Plan mode's breakdown and build mode's planner ask too: each run that waits ends with
/// exit 3 and `next:` naming `ralph answer`; the next run's agent gets the answer.
#[test]
fn the_breakdown_and_the_planner_ask_and_get_their_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    std::fs::create_dir(ws.join("specs")).unwrap();
    std::fs::write(ws.join("specs/a.md"), "# A\nWrite a.txt.\n").unwrap();
    std::fs::write(
        ws.join(".gitignore"),
        ".ralph/\nbuild/\nprompts/\nscript.toml\n",
    )
    .unwrap();
    git(ws, &["init", "-q", "-b", "main"]);
    git(ws, &["add", "-A"]);
    git(ws, &["commit", "-q", "-m", "specs"]);
    let run = |mode: &str, script: &str| {
        std::fs::write(ws.join("script.toml"), script).unwrap();
        let mut run = command(ws, &[mode, "--script", "script.toml"]);
        run.env("CI", "true");
        run.output().unwrap()
    };

    let asked = run(
        "plan",
        "[[run]]\nrole = \"breakdown\"\nsteps = [{ json = { question = \"One task or two?\" } }]\n",
    );
    assert_eq!(asked.status.code(), Some(3), "{}", said(&asked));
    assert!(
        said(&asked).contains("next: ") && said(&asked).contains("ralph answer plan-mode"),
        "{}",
        said(&asked)
    );
    let answer = command(ws, &["answer", "plan-mode", "One."])
        .output()
        .unwrap();
    assert_eq!(answer.status.code(), Some(0), "{}", said(&answer));
    let planned = run(
        "plan",
        "[[run]]\nrole = \"breakdown\"\nsteps = [{ prompt = \"prompts/plan.txt\" }, { json = { specs = [{ id = \"a\", name = \"A\", file = \"specs/a.md\", priority = 1, tasks = [{ description = \"Write a.txt\" }] }] } }]\n",
    );
    assert_eq!(planned.status.code(), Some(0), "{}", said(&planned));
    let prompt = std::fs::read_to_string(ws.join("prompts/plan.txt")).unwrap();
    assert!(
        prompt.contains("One task or two?") && prompt.contains("One."),
        "{prompt}"
    );

    let asked = run(
        "build",
        "[[run]]\nrole = \"planner\"\nsteps = [{ ask = \"Greet whom?\" }]\n",
    );
    assert_eq!(asked.status.code(), Some(3), "{}", said(&asked));
    assert!(said(&asked).contains("ralph answer a "), "{}", said(&asked));
    let answer = command(ws, &["answer", "a", "The World."])
        .output()
        .unwrap();
    assert_eq!(answer.status.code(), Some(0), "{}", said(&answer));
    let built = run(
        "build",
        "[[run]]\nrole = \"planner\"\nsteps = [{ prompt = \"prompts/planner.txt\" }, { answer = \"# Plan\\n1. Do it.\\n\\nPLAN_COMPLETE\" }]\n\
         [[run]]\nrole = \"build\"\nsteps = [{ write = { path = \"a.txt\", content = \"a\\n\" } }, { answer = \"ok\\n<TASK_DONE>\" }]\n\
         [[run]]\nrole = \"verify\"\nsteps = [{ json = { verdict = \"accept\", reason = \"ok\" } }]\n",
    );
    assert_eq!(built.status.code(), Some(0), "{}", said(&built));
    let prompt = std::fs::read_to_string(ws.join("prompts/planner.txt")).unwrap();
    assert!(
        prompt.contains("Greet whom?") && prompt.contains("The World."),
        "{prompt}"
    );
}

/// The dry run says how long a run would wait for an answer: 0s under CI by default, the
/// setting otherwise.
#[test]
fn the_dry_run_shows_the_question_wait() {
    let tmp = repo("");
    let dir = tmp.path();
    let dry = construct(dir).arg("--dry-run").output().unwrap();
    assert!(stdout(&dry).contains("question wait 0s"), "{}", said(&dry));
    std::fs::write(dir.join("ralph.toml"), "question_wait = \"5m\"\n").unwrap();
    let dry = construct(dir).arg("--dry-run").output().unwrap();
    assert!(stdout(&dry).contains("question wait 5m"), "{}", said(&dry));
}

/// An answer posted just as the waiting run is SIGKILLed reaches the next run exactly once,
/// whether the killed run took it in or not.
#[test]
fn an_answer_posted_while_the_run_is_killed_reaches_the_next_run_once() {
    let tmp = repo("question_wait = \"2m\"\n");
    let dir = tmp.path();
    let (mut child, _lines, _events) = construct_until(dir, waits);
    let answer = command(dir, &["answer", "t-1", "Use SQLite."])
        .output()
        .unwrap();
    assert_eq!(answer.status.code(), Some(0), "{}", said(&answer));
    child.kill().unwrap();
    child.wait().unwrap();

    let resumed = construct(dir).output().unwrap();
    assert_eq!(resumed.status.code(), Some(0), "{}", said(&resumed));
    let prompt = std::fs::read_to_string(dir.join("prompts/t-1-a2.txt")).unwrap();
    assert_eq!(prompt.matches("Use SQLite.").count(), 1, "{prompt}");
    assert_draft_committed(dir);
}

/// `ralph stop` ends a run that waits for an answer: exit 4, the question still open.
#[test]
fn ralph_stop_ends_the_wait_for_an_answer() {
    let tmp = repo("question_wait = \"2m\"\n");
    let dir = tmp.path();
    let (mut child, _lines, _events) = construct_until(dir, waits);
    let stop = command(dir, &["stop"]).output().unwrap();
    assert_eq!(stop.status.code(), Some(0), "{}", said(&stop));
    assert_eq!(child.wait().unwrap().code(), Some(4));
    assert_eq!(ralph_questions(dir).len(), 1, "the question still waits");
}
