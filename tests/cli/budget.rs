//! Run-wide budgets (issue "Spend under control"): in every mode a scripted agent that spends
//! $0.40 a run, on work that needs at least six runs, under `max_cost_usd = 1.0`, stops
//! "budget exhausted" (exit 2) after three runs, and the spend on record is the sum of those
//! runs. A run stopped by SIGTERM is counted, and the limit holds across invocations.

#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Output, Stdio};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::support::threads::repo;
use crate::{THREAD_SPEC, command, stderr, stdout};

/// Every role spends $0.40 (1000 tokens in, 200 out) per run and answers so that the work
/// goes on: three tasks, each built and accepted, a plan of one spec with three tasks, and
/// a thread whose criteria never pass (the agent writes nothing).
const SCRIPT: &str = r##"
[[run]]
role = "investigate"
repeat = true
steps = [
  { spend = { input_tokens = 1000, output_tokens = 200, cost_usd = 0.40 } },
  { json = { tasks = [
    { name = "A", accept = "a" }, { name = "B", accept = "b" }, { name = "C", accept = "c" },
  ] } },
]

[[run]]
role = "breakdown"
repeat = true
steps = [
  { spend = { input_tokens = 1000, output_tokens = 200, cost_usd = 0.40 } },
  { json = { specs = [ { id = "s", name = "S", file = "specs/s.md", priority = 1, tasks = [
    { description = "One" }, { description = "Two" }, { description = "Three" },
  ] } ] } },
]

[[run]]
role = "planner"
repeat = true
steps = [
  { spend = { input_tokens = 1000, output_tokens = 200, cost_usd = 0.40 } },
  { answer = "# Plan\n\n1. Do it.\n\nPLAN_COMPLETE" },
]

[[run]]
role = "build"
repeat = true
steps = [
  { spend = { input_tokens = 1000, output_tokens = 200, cost_usd = 0.40 } },
  { answer = "Done.\n<TASK_DONE>" },
]

[[run]]
role = "verify"
repeat = true
steps = [
  { spend = { input_tokens = 1000, output_tokens = 200, cost_usd = 0.40 } },
  { json = { verdict = "accept", reason = "ok" } },
]

[[run]]
role = "gap_analysis"
repeat = true
steps = [
  { spend = { input_tokens = 1000, output_tokens = 200, cost_usd = 0.40 } },
  { json = { tasks = [], issues = [] } },
]
"##;

/// A git repository with the script, `ralph.toml` (`max_cost_usd = 1.0`, `extra`), a
/// construct spec and a plan-mode spec, committed.
async fn workspace(extra: &str) -> tempfile::TempDir {
    let dir = repo().await;
    let ws = dir.path();
    std::fs::write(ws.join("script.toml"), SCRIPT).unwrap();
    std::fs::write(
        ws.join("ralph.toml"),
        format!("max_cost_usd = 1.0\n{extra}"),
    )
    .unwrap();
    std::fs::write(ws.join("spec.md"), "# Three things\nDo A, B and C.\n").unwrap();
    std::fs::create_dir_all(ws.join("specs")).unwrap();
    std::fs::write(ws.join("specs/s.md"), "# S\nDo one, two, three.\n").unwrap();
    git(ws, &["add", "-A"]);
    git(ws, &["commit", "-q", "-m", "budget workspace"]);
    dir
}

fn git(ws: &Path, args: &[&str]) {
    let status = std::process::Command::new("git")
        .args(args)
        .current_dir(ws)
        .status()
        .unwrap();
    assert!(status.success(), "git {args:?}");
}

fn ralph(ws: &Path, args: &[&str]) -> Output {
    command(ws, args).output().unwrap()
}

/// The spend ledger's runs: (scope, cost) per agent run, by its last line (a run's
/// provisional lines, written while it ran, are replaced by its next line).
fn ledger(ws: &Path) -> Vec<(String, f64)> {
    let text = std::fs::read_to_string(ws.join(".ralph/spend.jsonl")).unwrap_or_default();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["reset"] != true)
        .collect();
    let last_of_its_run = |at: usize| {
        let run = &lines[at]["run"];
        run.is_null() || lines[at + 1..].iter().all(|l| l["run"] != *run)
    };
    (0..lines.len())
        .filter(|at| last_of_its_run(*at))
        .map(|at| {
            let v = &lines[at];
            let scope = v["scope"].as_str().unwrap().to_owned();
            (scope, v["cost_usd"].as_f64().unwrap_or(0.0))
        })
        .collect()
}

/// Asserts a stop at the budget: exit 2, the spend and the limit said, the next step.
fn assert_stopped_at_the_budget(out: &Output) {
    let text = format!("{}{}", stdout(out), stderr(out));
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("budget exhausted: spent $1.20") && text.contains("max_cost_usd = 1"),
        "{text}"
    );
    assert!(text.contains("--max-cost"), "the way on: {text}");
}

fn assert_three_runs(ws: &Path, scope: &str) {
    let runs = ledger(ws);
    assert_eq!(runs.len(), 3, "{runs:?}");
    assert!(runs.iter().all(|(s, _)| s == scope), "{runs:?}");
    let total: f64 = runs.iter().map(|(_, c)| c).sum();
    assert!((total - 1.2).abs() < 1e-9, "{runs:?}");
}

/// A limit given by a flag is the run's: `ralph status` after the run shows it (before, it
/// read ralph.toml alone and said `no limit`).
#[tokio::test]
async fn a_limit_given_by_a_flag_is_shown_as_the_runs() {
    let dir = workspace("").await;
    let ws = dir.path();
    std::fs::write(ws.join("ralph.toml"), "").unwrap();
    git(ws, &["commit", "-qam", "no limit in ralph.toml"]);
    let out = ralph(
        ws,
        &[
            "construct",
            "spec.md",
            "--script",
            "script.toml",
            "--max-cost",
            "1",
        ],
    );
    assert_stopped_at_the_budget(&out);
    let status = stdout(&ralph(ws, &["status"]));
    assert!(
        status.contains("limit max_cost_usd = 1.0 (the last run's)"),
        "{status}"
    );
}

#[tokio::test]
async fn construct_stops_at_the_budget_after_three_runs() {
    let dir = workspace("").await;
    let ws = dir.path();
    let out = ralph(ws, &["construct", "spec.md", "--script", "script.toml"]);
    assert_stopped_at_the_budget(&out);
    assert_three_runs(ws, "construct");
    let status = stdout(&ralph(ws, &["status"]));
    assert!(
        status.contains("spend construct: $1.20, 3000 in / 600 out tokens")
            && status.contains("limit max_cost_usd = 1"),
        "{status}"
    );
    // The dry run says so, and writes nothing.
    let ledger_before = std::fs::read(ws.join(".ralph/spend.jsonl")).unwrap();
    let dry = stdout(&ralph(
        ws,
        &["construct", "--dry-run", "--script", "script.toml"],
    ));
    assert!(
        dry.contains(
            "budget:    spent $1.20 of max_cost_usd = 1 (construct) — exhausted: no agent run would start"
        ),
        "{dry}"
    );
    assert_eq!(
        std::fs::read(ws.join(".ralph/spend.jsonl")).unwrap(),
        ledger_before
    );
    // The limit holds on the next invocation: nothing more is spent.
    let again = ralph(ws, &["construct", "--script", "script.toml"]);
    assert_stopped_at_the_budget(&again);
    assert_eq!(ledger(ws).len(), 3);
    // The JSON outcome carries the spend and the limit.
    let json = ralph(ws, &["construct", "--script", "script.toml", "--json"]);
    let finished = stdout(&json)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["event"] == "finished")
        .expect("a finished event");
    assert_eq!(finished["outcome"]["outcome"], "budget_exhausted");
    assert_eq!(finished["outcome"]["max_cost_usd"], 1.0);
    assert_eq!(finished["outcome"]["spent_tokens"], 3600);
}

#[tokio::test]
async fn plan_and_build_stop_at_the_budget_after_three_runs() {
    let dir = workspace("").await;
    let ws = dir.path();
    let planned = ralph(ws, &["plan", "--script", "script.toml"]);
    assert_eq!(planned.status.code(), Some(0), "{}", stderr(&planned));
    let out = ralph(ws, &["build", "--script", "script.toml"]);
    assert_stopped_at_the_budget(&out);
    assert_three_runs(ws, "build");
    let dry = stdout(&ralph(
        ws,
        &["build", "--dry-run", "--script", "script.toml"],
    ));
    assert!(
        dry.contains("budget:    spent $1.20 of max_cost_usd = 1 (build) — exhausted"),
        "{dry}"
    );
    // A plan mode run past the limit starts no agent either, and says the way on where
    // every `next:` goes: stdout, or a JSON line.
    let again = ralph(ws, &["plan", "--script", "script.toml"]);
    assert_stopped_at_the_budget(&again);
    let next = stdout(&again);
    assert!(
        next.contains("next: ") && next.contains("ralph plan") && next.contains("--max-cost 3"),
        "{next}"
    );
    let json = ralph(ws, &["plan", "--json", "--script", "script.toml"]);
    assert_eq!(json.status.code(), Some(2), "{}", stderr(&json));
    assert!(
        stdout(&json)
            .lines()
            .any(|l| l.contains("\"next\"") && l.contains("--max-cost 3")),
        "{}",
        stdout(&json)
    );
    assert_eq!(ledger(ws).len(), 3);
}

#[tokio::test]
async fn a_thread_stops_at_the_budget_after_three_runs() {
    let dir = workspace("").await;
    let ws = dir.path();
    let thread = |args: &[&str]| {
        let mut all = vec!["thread", "--quick", "--script", "script.toml"];
        all.extend_from_slice(args);
        ralph(ws, &all)
    };
    let made = thread(&["new", "--title", "Greeter", "--spec", THREAD_SPEC]);
    assert_eq!(made.status.code(), Some(0), "{}", stderr(&made));
    thread(&["finalize"]);
    let out = thread(&["start", "--max-iterations", "10"]);
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("budget exhausted: spent $1.20"), "{text}");
    assert!(
        text.contains("ralph thread reconfigure --max-cost"),
        "{text}"
    );
    assert_three_runs(ws, "thread/1-greeter");
    let dry = stdout(&thread(&["dry-run"]));
    assert!(
        dry.contains("budget:    spent $1.20 of max_cost_usd = 1 (thread/1-greeter) — exhausted"),
        "{dry}"
    );
}

/// A run the budget refuses never starts, so it gets no run record: the thread's last run
/// is the last that ran, and every iteration names a run on disk.
#[tokio::test]
async fn a_thread_refused_at_the_budget_opens_no_run_record() {
    let dir = workspace("").await;
    let ws = dir.path();
    let thread = |args: &[&str]| {
        let mut all = vec!["thread", "--quick", "--script", "script.toml"];
        all.extend_from_slice(args);
        ralph(ws, &all)
    };
    thread(&["new", "--title", "Greeter", "--spec", THREAD_SPEC]);
    thread(&["finalize"]);
    let out = thread(&["start", "--max-iterations", "10"]);
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("budget exhausted: spent $1.20"), "{text}");
    let runs = || {
        let mut names: Vec<String> = std::fs::read_dir(ws.join(".ralph/runs"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let three = ["1-greeter-r1", "1-greeter-r2", "1-greeter-r3"];
    assert_eq!(runs(), three, "one record per run that started");
    let status = stdout(&thread(&["show"]));
    assert!(status.contains("last run: 1-greeter-r3 ("), "{status}");
    let record: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(ws.join(".ralph/threads/1-greeter/thread.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(record["current_run_id"], "1-greeter-r3", "{record}");
    for attempt in record["attempts"].as_array().unwrap() {
        let run = attempt["run_id"].as_str().unwrap();
        assert!(three.contains(&run), "{attempt}");
    }
}

/// SIGTERM while an agent runs, then the same command: the interrupted run's spend is on
/// record, and the limit counts it.
#[tokio::test]
async fn an_interrupted_run_is_counted_and_the_limit_holds_across_invocations() {
    let dir = workspace("").await;
    let ws = dir.path();
    // The first build hangs after spending: it is what SIGTERM stops.
    let script = SCRIPT.replacen(
        "  { answer = \"Done.\\n<TASK_DONE>\" },\n]",
        "  { answer = \"Done.\\n<TASK_DONE>\" },\n]\n\n[[run]]\nrole = \"build\"\nsubject = \"t-1\"\nattempt = 1\nsteps = [\n  { spend = { input_tokens = 1000, output_tokens = 200, cost_usd = 0.40 } },\n  { hang = {} },\n]",
        1,
    );
    std::fs::write(ws.join("hang.toml"), script).unwrap();
    let mut child = command(
        ws,
        &["construct", "spec.md", "--script", "hang.toml", "--json"],
    )
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    let requests = ws.join(".ralph/fake-requests.jsonl");
    let mut stopped = false;
    // Read to the end: a reader that went away would end ralph with EPIPE instead.
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if !stopped && line.contains("\"task_started\"") {
            stopped = true;
            // The agent run has begun once the fake agent recorded its request.
            while !std::fs::read_to_string(&requests)
                .unwrap_or_default()
                .contains("\"build\"")
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
        }
    }
    let stopped = child.wait().unwrap();
    assert_eq!(stopped.code(), Some(143));
    assert_eq!(ledger(ws).len(), 2, "investigate and the interrupted build");

    // Resumed without the hang: the build is run again, and the verifier is past the limit.
    let out = ralph(ws, &["construct", "--script", "script.toml"]);
    assert_stopped_at_the_budget(&out);
    assert_three_runs(ws, "construct");
}

/// The budget is checked again after a wait: a thread's first run spends past the limit and
/// then ends rate limited (reset now) or failed transiently (a 1 ms backoff). The wait
/// closes that run; after it no run starts and no run record is opened; the thread stops
/// at its budget (Stuck, exit 2), its last run the one the wait closed.
#[tokio::test]
async fn a_thread_waiting_out_a_rate_limit_or_a_backoff_stops_at_the_budget_after_it() {
    for (ending, closed) in [
        ("{ rate_limit = { secs = 0 } }", "rate limited: resets at"),
        (
            "{ fail = { reason = \"overloaded\", kind = \"transient\" } }",
            "failed (transient): overloaded",
        ),
    ] {
        let dir = workspace("transient_backoff = \"1ms\"\n").await;
        let ws = dir.path();
        // The first build spends $1.20 of the $1 and then waits; any other run spends $0.40.
        let script = format!(
            "[[run]]\nrole = \"build\"\nattempt = 1\nsteps = [\n  \
             {{ spend = {{ input_tokens = 1000, output_tokens = 200, cost_usd = 1.20 }} }},\n  \
             {ending},\n]\n{SCRIPT}"
        );
        std::fs::write(ws.join("wait.toml"), script).unwrap();
        git(ws, &["add", "wait.toml"]);
        git(ws, &["commit", "-q", "-m", "the script that waits"]);
        let thread = |args: &[&str]| {
            let mut all = vec!["thread", "--quick", "--script", "wait.toml"];
            all.extend_from_slice(args);
            ralph(ws, &all)
        };
        thread(&["new", "--title", "Greeter", "--spec", THREAD_SPEC]);
        thread(&["finalize"]);
        let out = thread(&["start", "--max-iterations", "10"]);
        let text = format!("{}{}", stdout(&out), stderr(&out));
        assert_eq!(out.status.code(), Some(2), "{ending}: {text}");
        assert!(text.contains("budget exhausted: spent $1.20"), "{text}");
        assert!(text.contains("--max-cost"), "the way on: {text}");
        // One agent run spent, and one run record: the wait's.
        let runs = ledger(ws);
        assert_eq!(runs.len(), 1, "{ending}: {runs:?}");
        let records: Vec<String> = std::fs::read_dir(ws.join(".ralph/runs"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(records, ["1-greeter-r1"], "{ending}: {text}");
        let run: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(ws.join(".ralph/runs/1-greeter-r1/run.json")).unwrap(),
        )
        .unwrap();
        let outcome = run["outcome"].as_str().unwrap_or_default();
        assert!(outcome.starts_with(closed), "{ending}: {run}");
        let record: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(ws.join(".ralph/threads/1-greeter/thread.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(record["current_run_id"], "1-greeter-r1", "{record}");
        assert_eq!(record["phase"]["type"], "Stuck", "{record}");
        assert!(record["rate_limited_until"].is_null(), "{record}");
    }
}

/// `hang.toml`: the script, but the first build of t-1 spends $0.40 (its CLI's report, as
/// it runs) and then hangs.
fn hanging_script(ws: &Path) {
    let script = SCRIPT.replacen(
        "  { answer = \"Done.\\n<TASK_DONE>\" },\n]",
        "  { answer = \"Done.\\n<TASK_DONE>\" },\n]\n\n[[run]]\nrole = \"build\"\nsubject = \"t-1\"\nattempt = 1\nsteps = [\n  { spend = { input_tokens = 1000, output_tokens = 200, cost_usd = 0.40 } },\n  { hang = {} },\n]",
        1,
    );
    std::fs::write(ws.join("hang.toml"), script).unwrap();
}

/// A SIGKILL of ralph while an agent runs: what the agent had reported is on record (a
/// provisional line, synced as it came), counts against `max_cost_usd` on resume, and the
/// summary and `status` say the total is an estimate. Before, the killed run's spend was
/// lost and the resumed run spent past the limit.
#[tokio::test]
async fn a_sigkill_mid_run_keeps_what_the_agent_reported_against_the_limit() {
    let dir = workspace("").await;
    let ws = dir.path();
    hanging_script(ws);
    let mut child = command(ws, &["construct", "spec.md", "--script", "hang.toml"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ledger_path = ws.join(".ralph/spend.jsonl");
    let reported = || {
        std::fs::read_to_string(&ledger_path)
            .unwrap_or_default()
            .lines()
            .any(|l| l.contains("\"estimate\":true") && l.contains("\"build\""))
    };
    let started = std::time::Instant::now();
    while !reported() {
        assert!(
            started.elapsed().as_secs() < 30,
            "the build reported nothing"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    let killed = child.wait().unwrap();
    assert_eq!(killed.code(), None, "SIGKILL");
    assert_eq!(
        ledger(ws).len(),
        2,
        "investigate, and the killed build's report"
    );

    // Resumed without the hang: one more run ($0.40) reaches the $1.00 limit.
    let out = ralph(ws, &["construct", "--script", "script.toml"]);
    assert_stopped_at_the_budget(&out);
    assert_three_runs(ws, "construct");
    let text = stdout(&out);
    assert!(
        text.contains("cost: $1.2000") && text.contains("an estimate: 1 run cut short"),
        "{text}"
    );
    let status = stdout(&ralph(ws, &["status"]));
    assert!(
        status.contains(
            "spend construct: $1.20 (an estimate: 1 cut short), 3000 in / 600 out tokens"
        ) && status.lines().filter(|l| l.contains("tokens")).count() == 1,
        "{status}"
    );
}

/// newcomer row 67: the ledger emptied between two runs is found at the next load, by its
/// mark: the next run and `status` still count what ralph recorded, say so naming the file,
/// and give the next step. Before, the emptied ledger let $1.50 through a $0.70 cap.
#[tokio::test]
async fn an_emptied_ledger_is_found_at_the_next_load_and_the_limit_holds() {
    let dir = workspace("").await;
    let ws = dir.path();
    let out = ralph(ws, &["construct", "spec.md", "--script", "script.toml"]);
    assert_stopped_at_the_budget(&out);
    std::fs::write(ws.join(".ralph/spend.jsonl"), "").unwrap();

    let status = ralph(ws, &["status"]);
    assert!(
        stdout(&status).contains("spend construct: $1.20"),
        "{}",
        stdout(&status)
    );
    assert!(
        stderr(&status).contains(".ralph/spend.jsonl is shorter than ralph left it"),
        "{}",
        stderr(&status)
    );
    let again = ralph(ws, &["construct", "--script", "script.toml"]);
    assert_stopped_at_the_budget(&again);
    let text = format!("{}{}", stdout(&again), stderr(&again));
    assert!(
        text.contains("spend.jsonl is shorter than ralph left it (0 of ")
            && text.contains("restored")
            && text.contains("next: leave the ledger to ralph"),
        "{text}"
    );
    // The run restored it in the file: the next load needs no mark to count it.
    let restored = std::fs::read_to_string(ws.join(".ralph/spend.jsonl")).unwrap();
    assert!(restored.contains("\"restored\":true"), "{restored}");
    assert!(stdout(&ralph(ws, &["status"])).contains("spend construct: $1.20"));
}

/// The subjects of the build runs on the ledger (each run once, by its final line), sorted.
fn built(ws: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(ws.join(".ralph/spend.jsonl")).unwrap_or_default();
    let mut subjects: Vec<String> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["role"] == "build" && v["estimate"] != true)
        .map(|v| v["subject"].as_str().unwrap().to_owned())
        .collect();
    subjects.sort();
    subjects
}

/// The `▸ ID … (attempt N)` lines of a run's output: the tasks whose attempt was announced.
fn announced(text: &str) -> Vec<String> {
    let mut ids: Vec<String> = text
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("▸ "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    ids.sort();
    ids
}

/// newcomer Part 1 step 7: a construct run stopped at its budget with tasks built and not
/// yet verified counts them in its summary (before: `0 accepted, 1 pending` beside two
/// done tasks), and announces no attempt of the task whose agent the budget refused, one
/// task at a time and two at once. Investigate, t-1 and t-2 spend $0.40 each: t-3 never
/// runs.
#[tokio::test]
async fn a_budget_stop_counts_the_tasks_awaiting_verify_and_announces_no_refused_attempt() {
    for extra in ["", "build_concurrency = 2\n"] {
        let dir = workspace(extra).await;
        let ws = dir.path();
        let out = ralph(ws, &["construct", "spec.md", "--script", "script.toml"]);
        assert_stopped_at_the_budget(&out);
        let text = stdout(&out);
        assert!(
            text.contains("tasks: 0 accepted, 2 done (awaiting verify), 1 pending, 0 blocked"),
            "{extra}: {text}"
        );
        assert_eq!(announced(&text), ["t-1", "t-2"], "{extra}: {text}");
        assert_eq!(built(ws), ["t-1", "t-2"], "{extra}: {text}");
    }
}

/// Build mode stopped at its budget announces no attempt whose agent did not run: each
/// task announced is a task built.
#[tokio::test]
async fn build_mode_at_its_budget_announces_no_refused_attempt() {
    let dir = workspace("").await;
    let ws = dir.path();
    let planned = ralph(ws, &["plan", "--script", "script.toml"]);
    assert_eq!(planned.status.code(), Some(0), "{}", stderr(&planned));
    let out = ralph(ws, &["build", "--script", "script.toml"]);
    assert_stopped_at_the_budget(&out);
    let text = stdout(&out);
    assert_eq!(announced(&text), built(ws), "{text}");
    assert_eq!(built(ws), ["s-1"], "{text}");
}

/// Two tasks at once: t-3 starts when t-1 lands, at $0.80 of the $1.00, and while its work
/// tree is made (a `post-checkout` hook holds it 3 s) t-2's agent spends the rest. Its
/// agent is then refused at the limit, and its attempt is never announced: before, the
/// announcement was made when t-3 was scheduled, before the limit was reached.
#[tokio::test]
async fn a_task_refused_at_the_budget_after_its_work_tree_was_made_is_not_announced() {
    let dir = workspace("build_concurrency = 2\n").await;
    let ws = dir.path();
    let slow_t2 = "[[run]]\nrole = \"build\"\nsubject = \"t-2\"\nrepeat = true\nsteps = [\n  \
                   { delay = \"1500ms\" },\n  \
                   { spend = { input_tokens = 1000, output_tokens = 200, cost_usd = 0.40 } },\n  \
                   { answer = \"Done.\\n<TASK_DONE>\" },\n]\n";
    std::fs::write(ws.join("slow.toml"), format!("{slow_t2}{SCRIPT}")).unwrap();
    let marker = ws.join(".git/t-3-checked-out");
    let hook = ws.join(".git/hooks/post-checkout");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\ncase \"$PWD\" in *t-3) : > '{}'; sleep 3 ;; esac\n",
            marker.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = ralph(ws, &["construct", "spec.md", "--script", "slow.toml"]);
    assert_stopped_at_the_budget(&out);
    let text = stdout(&out);
    assert!(marker.exists(), "t-3 was never started: {text}");
    assert_eq!(built(ws), ["t-1", "t-2"], "{text}");
    assert_eq!(announced(&text), ["t-1", "t-2"], "{text}");
}

/// A command agent (`[agent.mine]`, a shell script) that builds three tasks; each run
/// writes `usage` to the file `RALPH_USAGE_FILE` names, when `usage` is not empty.
fn reporting_agent(usage: &str) -> String {
    format!(
        r#"cat > /dev/null
if [ -n '{usage}' ]; then printf '%s' '{usage}' > "$RALPH_USAGE_FILE"; fi
case "$1" in
  investigate) echo '{{"tasks":[{{"name":"A","accept":"a"}},{{"name":"B","accept":"b"}},{{"name":"C","accept":"c"}}]}}' ;;
  build) echo "$2" > "$2.txt"; printf 'Done.\n<TASK_DONE>\n' ;;
  verify) echo '{{"task_id":"'"$2"'","verdict":"accept","reason":"ok"}}' ;;
  gap_analysis) echo '{{"tasks":[],"issues":[]}}' ;;
  *) echo "unexpected role $1" >&2; exit 1 ;;
esac
"#
    )
}

/// A workspace whose agent is `mine`, running [`reporting_agent`] with `usage`, under
/// `max_tokens = 3000`.
async fn command_agent_workspace(usage: &str) -> tempfile::TempDir {
    let dir = workspace("").await;
    let ws = dir.path();
    std::fs::write(ws.join("agent.sh"), reporting_agent(usage)).unwrap();
    std::fs::write(
        ws.join("ralph.toml"),
        "agents = [\"mine\"]\nmax_tokens = 3000\n\n\
         [agent.mine]\ncommand = [\"sh\", \"agent.sh\", \"{role}\", \"{subject}\"]\n",
    )
    .unwrap();
    git(ws, &["add", "-A"]);
    git(ws, &["commit", "-q", "-m", "a command agent"]);
    dir
}

/// The warning a run with a limit gives when its agent is a command agent.
const UNMETERED: &str = "max_tokens = 3000 may not act: agent mine runs a command, which \
                         reports no tokens or cost unless it writes them to the file \
                         $RALPH_USAGE_FILE names";

/// newcomer Part 1 step 6: a command agent that writes its usage to `RALPH_USAGE_FILE`
/// is counted like any other agent, and `max_tokens` stops it (exit 2): investigate and
/// two builds report 1200 tokens each. The same agent writing nothing is never stopped;
/// either way the run, its dry run and `--json` say at the start that the limit may not
/// act. Before, a command agent's runs counted 0 tokens, and nothing said so.
#[tokio::test]
async fn a_command_agent_that_reports_its_usage_stops_at_max_tokens() {
    let dir = command_agent_workspace(r#"{"input_tokens": 1000, "output_tokens": 200}"#).await;
    let ws = dir.path();
    let dry = ralph(ws, &["construct", "spec.md", "--dry-run"]);
    assert!(
        stdout(&dry).contains(&format!(
            "budget:    spent 0 of max_tokens = 3000 (construct); {UNMETERED}"
        )),
        "{}",
        stdout(&dry)
    );
    let out = ralph(ws, &["construct", "spec.md"]);
    let (text, err) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(2), "{text}\n{err}");
    assert!(
        text.contains("budget exhausted: spent $0.00 and 3600 tokens"),
        "{text}"
    );
    assert!(text.contains(UNMETERED), "{text}");
    assert!(text.contains("tokens: 3000 in, 600 out"), "{text}");
    let runs = ledger(ws);
    assert_eq!(runs.len(), 3, "{runs:?}");
    let status = stdout(&ralph(ws, &["status"]));
    assert!(status.contains("3000 in / 600 out tokens"), "{status}");

    let silent = command_agent_workspace("").await;
    let json = ralph(silent.path(), &["construct", "spec.md", "--json"]);
    let text = stdout(&json);
    assert_eq!(json.status.code(), Some(0), "{text}\n{}", stderr(&json));
    let warned = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .any(|e| e["event"] == "warning" && e["message"].as_str().unwrap().contains(UNMETERED));
    assert!(warned, "{text}");
}

/// A usage file the agent wrote wrong is a warning naming the file and what is wrong; the
/// run's answers stand and the run goes on to its end.
#[tokio::test]
async fn a_malformed_usage_file_is_a_warning_and_the_run_goes_on() {
    let dir = command_agent_workspace("tokens: lots").await;
    let ws = dir.path();
    let out = ralph(ws, &["construct", "spec.md"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}\n{}", stderr(&out));
    assert!(text.contains("Spec complete"), "{text}");
    let warning = text
        .lines()
        .find(|l| l.starts_with("warning: the usage file "))
        .unwrap_or_else(|| panic!("no warning: {text}"));
    assert!(
        warning.contains("/usage.json (RALPH_USAGE_FILE) is not a usage object")
            && warning.contains("its answer stands"),
        "{warning}"
    );
}
