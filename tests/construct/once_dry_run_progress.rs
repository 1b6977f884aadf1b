//! Seed 003 (the rslph build loop) in the engine, over a real markdown progress file: `once`,
//! `dry_run`, max iterations, recent-attempt memory, the iteration log, re-reading the file
//! each iteration, and each pitfall of the seed.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use ralph::agent::Script;
use ralph::model::{Change, KillReason, RunState, Stage, TaskStatus};
use ralph::{
    Event, FakeAgent, Observer, Outcome, ProgressStore, Ralph, RalphBuilder, Role, ShellGate, Store,
};

const SPEC: &str = "# Greeter\nWrite the files the progress file lists.\n";

const PROGRESS: &str = "# Progress: Greeter

## Status

In progress

## Phase 1: Files

- [ ] Write a.txt
- [ ] Write b.txt
";

/// A workspace with `spec.md` and `PROGRESS.md` (`progress`).
fn workspace_with(progress: &str) -> tempfile::TempDir {
    let dir = workspace(SPEC);
    write(dir.path(), "PROGRESS.md", progress);
    dir
}

fn progress_path(dir: &Path) -> PathBuf {
    dir.join("PROGRESS.md")
}

fn builder(dir: &Path, agent: Arc<FakeAgent>) -> RalphBuilder {
    Ralph::builder()
        .workspace(dir)
        .agent(agent)
        .store(ProgressStore::open(progress_path(dir)).unwrap())
        .stage_timeout(Duration::from_secs(20))
}

/// The spec's issue is covered by the person's two tasks; builds `t-1` and `t-2` (each writes
/// its file and claims done); verifiers accept.
fn builds_both() -> FakeAgent {
    FakeAgent::new()
        .on(Role::Investigate, "i-1", planned(&["t-1", "t-2"]))
        .always(Role::Verify, accept("ok"))
        .always(Role::GapAnalysis, no_gaps())
        .on(
            Role::Build,
            "t-1",
            Script::new()
                .write("a.txt", "a\n")
                .answer("Wrote a.txt.\n<TASK_DONE>"),
        )
        .on(
            Role::Build,
            "t-2",
            Script::new()
                .write("b.txt", "b\n")
                .answer("Wrote b.txt.\n<TASK_DONE>"),
        )
}

fn text(dir: &Path) -> String {
    std::fs::read_to_string(progress_path(dir)).unwrap()
}

fn builds(agent: &FakeAgent) -> Vec<(String, u32)> {
    agent
        .requests()
        .into_iter()
        .filter(|r| r.role == Role::Build)
        .map(|r| (r.subject.unwrap_or_default(), r.attempt))
        .collect()
}

#[tokio::test]
async fn a_progress_file_is_built_ticked_and_logged() {
    let dir = workspace_with(PROGRESS);
    let agent = Arc::new(builds_both());
    let outcome = builder(dir.path(), agent.clone())
        .build()
        .unwrap()
        .construct("spec.md")
        .await
        .unwrap();
    assert_eq!(complete(&outcome), (1, 2));
    let text = text(dir.path());
    assert!(text.contains("- [x] Write a.txt <!-- id:t-1 -->"), "{text}");
    assert!(text.contains("- [x] Write b.txt <!-- id:t-2 -->"), "{text}");
    assert!(
        text.contains("- Iteration 1, t-1: tried: Wrote a.txt. — result: done — next: verify"),
        "{text}"
    );
    assert!(
        text.contains("| 1 | ")
            && text.contains(" | 2 | 2 accepted, 0 rejected, 0 new task(s), 0 new issue(s) |"),
        "one log row, two tasks completed\n{text}"
    );
}

/// Pitfall 1, context pollution: every agent run is its own request (a fresh process for
/// the real CLI, which has no session to continue), and a later iteration's prompt carries
/// what it needs itself.
#[tokio::test]
async fn every_iteration_runs_a_fresh_agent() {
    let dir = workspace_with(PROGRESS);
    let agent = Arc::new(
        builds_both()
            .on_attempt(Role::Verify, "t-2", 1, reject("b.txt must say hello"))
            .on(
                Role::Build,
                "t-2",
                Script::new()
                    .write("b.txt", "hello\n")
                    .answer("Now says hello.\n<TASK_DONE>"),
            ),
    );
    let outcome = builder(dir.path(), agent.clone())
        .build()
        .unwrap()
        .construct("spec.md")
        .await
        .unwrap();
    assert_eq!(complete(&outcome), (2, 2));
    assert_eq!(
        builds(&agent),
        vec![("t-1".into(), 1), ("t-2".into(), 1), ("t-2".into(), 2)]
    );
    let second = agent
        .requests()
        .into_iter()
        .filter(|r| r.role == Role::Build)
        .nth(2)
        .unwrap();
    assert!(second.prompt.contains("# Task: Write b.txt"));
    assert!(
        second.prompt.contains("b.txt must say hello"),
        "the rejection travels in the prompt"
    );
    assert!(second.prompt.contains("## Recent Attempts"));
}

#[tokio::test]
async fn once_runs_one_iteration_and_the_next_call_the_next() {
    let dir = workspace_with(PROGRESS);
    let agent = Arc::new(
        builds_both()
            .on_attempt(Role::Verify, "t-2", 1, reject("not yet"))
            .on(Role::Build, "t-2", done()),
    );
    let outcome = builder(dir.path(), agent.clone())
        .once(true)
        .build()
        .unwrap()
        .construct("spec.md")
        .await
        .unwrap();
    assert_eq!(
        outcome,
        Outcome::Once {
            iteration: 1,
            remaining: 1
        }
    );
    assert_eq!(
        outcome.to_string(),
        "Stopped after one iteration (once): iteration 1 finished. Tasks remaining: 1"
    );
    assert_eq!(builds(&agent).len(), 2);

    let outcome = builder(dir.path(), agent.clone())
        .once(true)
        .build()
        .unwrap()
        .construct("spec.md")
        .await
        .unwrap();
    assert_eq!(complete(&outcome), (2, 2));
    assert_eq!(builds(&agent).len(), 3);
}

/// Pitfall 4, max iterations silent failure: the run says why it stopped and what remains.
#[tokio::test]
async fn max_iterations_says_so_with_the_remaining_count() {
    let dir = workspace_with(PROGRESS);
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Investigate, "i-1", planned(&["t-1", "t-2"]))
            .always(Role::Verify, reject("never good enough"))
            .always(Role::GapAnalysis, no_gaps())
            .always(Role::Build, done()),
    );
    let outcome = builder(dir.path(), agent)
        .max_iterations(2)
        .build()
        .unwrap()
        .construct("spec.md")
        .await
        .unwrap();
    assert_eq!(
        outcome.to_string(),
        "Stopped: max iterations (2) reached. Tasks remaining: 2"
    );
    assert_eq!(outcome.exit_code(), 2);
}

/// Pitfall 5, recent attempts growing unbounded: only the last N are kept, in the prompt and
/// in the file.
#[tokio::test]
async fn recent_attempts_are_trimmed_in_the_prompt_and_the_file() {
    let dir = workspace_with("# Progress: x\n\n## Tasks\n\n- [ ] Make the gate pass\n");
    let mut agent = FakeAgent::new().on(Role::Investigate, "i-1", planned(&["t-1"]));
    for n in 1..=5 {
        agent = agent.on_attempt(
            Role::Build,
            "t-1",
            n,
            Script::new().answer(format!("try number {n}\n<TASK_DONE>")),
        );
    }
    let agent = Arc::new(agent);
    let outcome = builder(dir.path(), agent.clone())
        .gate(ShellGate::new("never", "echo nope; exit 1"))
        .retries(4)
        .recent_attempts(2)
        .build()
        .unwrap()
        .construct("spec.md")
        .await
        .unwrap();
    assert!(matches!(outcome, Outcome::Blocked { .. }), "{outcome:?}");
    let prompts: Vec<String> = agent
        .requests()
        .into_iter()
        .filter(|r| r.role == Role::Build)
        .map(|r| r.prompt)
        .collect();
    assert_eq!(prompts.len(), 5);
    assert!(
        !prompts[0].contains("## Recent Attempts"),
        "nothing to remember yet"
    );
    let last = &prompts[4];
    assert!(
        last.contains(
            "tried: try number 3 — result: gates failed: never — next: retry (attempt 4 of 5)"
        ),
        "{last}"
    );
    assert!(
        last.contains(
            "tried: try number 4 — result: gates failed: never — next: retry (attempt 5 of 5)"
        ),
        "{last}"
    );
    assert!(
        !last.contains("try number 2 "),
        "older attempts are gone\n{last}"
    );
    let text = text(dir.path());
    let remembered: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("- Iteration 1, t-1"))
        .collect();
    assert_eq!(remembered.len(), 2, "{text}");
    assert!(remembered[1].contains("try number 5"), "{text}");
    assert!(
        remembered[1].contains("— next: blocked: out of attempts; a person decides"),
        "audit row 003-R12: the record says what comes next\n{text}"
    );
    assert!(!text.contains("try number 3 "), "{text}");
}

#[tokio::test]
async fn the_iteration_log_gets_one_row_per_iteration() {
    let dir = workspace_with(PROGRESS);
    let agent = Arc::new(
        builds_both()
            .on_attempt(Role::Verify, "t-2", 1, reject("again"))
            .on(Role::Build, "t-2", done()),
    );
    builder(dir.path(), agent)
        .build()
        .unwrap()
        .construct("spec.md")
        .await
        .unwrap();
    let store = ProgressStore::open(progress_path(dir.path())).unwrap();
    let log = store.load().await.unwrap().run.log;
    let rows: Vec<(u32, usize)> = log
        .iter()
        .map(|e| (e.iteration, e.tasks_completed))
        .collect();
    assert_eq!(rows, vec![(1, 1), (2, 1)]);
    assert_eq!(
        log[0].note,
        "1 accepted, 1 rejected, 0 new task(s), 0 new issue(s)"
    );
}

/// Edits the progress file when iteration 1 ends, as a person would between iterations.
struct EditAfterFirst(PathBuf);

impl Observer for EditAfterFirst {
    fn on_event(&self, event: &Event) {
        if let Event::IterationFinished { iteration: 1 } = event {
            let text = std::fs::read_to_string(&self.0).unwrap();
            let text = text.replace(
                "- [ ] Write b.txt <!-- id:t-2 -->",
                "- [x] Write b.txt <!-- id:t-2 -->\n- [ ] Write c.txt",
            );
            std::fs::write(&self.0, text).unwrap();
        }
    }
}

/// Re-read each iteration: a task ticked and a task added by hand between iterations count.
#[tokio::test]
async fn a_persons_edits_between_iterations_are_honored() {
    let dir = workspace_with(PROGRESS);
    let agent = Arc::new(
        builds_both()
            .on_attempt(Role::Verify, "t-2", 1, reject("wrong"))
            .on(
                Role::Build,
                "t-3",
                Script::new()
                    .write("c.txt", "c\n")
                    .answer("Wrote c.txt.\n<TASK_DONE>"),
            ),
    );
    let outcome = builder(dir.path(), agent.clone())
        .observer(EditAfterFirst(progress_path(dir.path())))
        .build()
        .unwrap()
        .construct("spec.md")
        .await
        .unwrap();
    assert_eq!(complete(&outcome), (2, 3));
    assert_eq!(
        builds(&agent),
        vec![("t-1".into(), 1), ("t-2".into(), 1), ("t-3".into(), 1)],
        "t-2 was ticked by hand: not rebuilt; the added line became t-3 and was built"
    );
    assert!(text(dir.path()).contains("- [x] Write c.txt <!-- id:t-3 -->"));
}

/// Cancels the stop token when `task` starts.
struct StopWhen(&'static str, ralph::StopToken);

impl Observer for StopWhen {
    fn on_event(&self, event: &Event) {
        if let Event::TaskStarted { task, .. } = event
            && task == self.0
        {
            self.1.stop();
        }
    }
}

/// Pitfall 2, lost progress on interrupt: a stop mid-agent keeps what was done, and the next
/// run resumes without redoing it.
#[tokio::test]
async fn an_interrupt_mid_agent_loses_nothing_and_the_next_run_resumes() {
    let dir = workspace_with(PROGRESS);
    let stop = ralph::StopToken::new();
    let first = Arc::new(
        FakeAgent::new()
            .on(Role::Investigate, "i-1", planned(&["t-1", "t-2"]))
            .on(
                Role::Build,
                "t-1",
                Script::new()
                    .write("a.txt", "a\n")
                    .answer("Wrote a.txt.\n<TASK_DONE>"),
            )
            .on(Role::Build, "t-2", Script::new().hang()),
    );
    let outcome = builder(dir.path(), first.clone())
        .stop_token(stop.clone())
        .observer(StopWhen("t-2", stop))
        .build()
        .unwrap()
        .construct("spec.md")
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Interrupted);
    {
        let store = ProgressStore::open(progress_path(dir.path())).unwrap();
        let board = store.load().await.unwrap();
        assert_eq!(
            board.task("t-1").unwrap().status,
            TaskStatus::Done,
            "t-1's work is on record"
        );
        assert_eq!(board.task("t-2").unwrap().status, TaskStatus::Pending);
    }

    let second = Arc::new(builds_both());
    let outcome = builder(dir.path(), second.clone())
        .build()
        .unwrap()
        .construct("spec.md")
        .await
        .unwrap();
    assert_eq!(complete(&outcome), (1, 2));
    assert_eq!(
        builds(&second),
        vec![("t-2".into(), 1)],
        "t-1 is not built again"
    );
}

/// Pitfall 6, timeout: a hanging agent is stopped at the limit, and the attempt is
/// remembered as killed.
#[tokio::test]
async fn a_hanging_agent_is_killed_at_the_timeout_and_remembered() {
    let dir = workspace_with("# Progress: x\n\n## Tasks\n\n- [ ] Hang\n");
    let stop = ralph::StopToken::new();
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Investigate, "i-1", planned(&["t-1"]))
            .on(Role::Build, "t-1", Script::new().hang()),
    );
    struct StopOnKill(ralph::StopToken);
    impl Observer for StopOnKill {
        fn on_event(&self, event: &Event) {
            if matches!(event, Event::TaskKilled { .. }) {
                self.0.stop();
            }
        }
    }
    let outcome = builder(dir.path(), agent)
        .agent_timeout(Duration::from_millis(300))
        .stop_token(stop.clone())
        .observer(StopOnKill(stop))
        .build()
        .unwrap()
        .construct("spec.md")
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Interrupted);
    let text = text(dir.path());
    assert!(text.contains("result: killed: timeout"), "{text}");
    let store = ProgressStore::open(progress_path(dir.path())).unwrap();
    assert_eq!(
        store.load().await.unwrap().task("t-1").unwrap().kill_reason,
        Some(KillReason::Timeout)
    );
}

/// Pitfall 3, RALPH_DONE parsed as task text: only a line of its own in Status counts.
#[tokio::test]
async fn ralph_done_counts_only_alone_in_the_status_section() {
    let elsewhere = [
        "# Progress: x\n\n## Status\n\nWrite RALPH_DONE when finished\n\n## Tasks\n\n- [ ] Write a.txt\n",
        "# Progress: x\n\n## Status\n\nIn progress\n\n## Tasks\n\n- [ ] RALPH_DONE\n",
        "# Progress: x\n\n## Tasks\n\n- [ ] Write a.txt\n\nRALPH_DONE\n",
        "# Progress: x\n\n## Tasks\n\n- [ ] Write a.txt\n\n## Recent Attempts\n\nRALPH_DONE\n",
        "# Progress: x\n\n## Status\n\n```\nRALPH_DONE\n```\n\n## Tasks\n\n- [ ] Write a.txt\n",
    ];
    for progress in elsewhere {
        let dir = workspace_with(progress);
        let agent = Arc::new(
            FakeAgent::new()
                .on(Role::Investigate, "i-1", planned(&["t-1"]))
                .always(Role::Build, done())
                .always(Role::Verify, accept("ok"))
                .always(Role::GapAnalysis, no_gaps()),
        );
        let outcome = builder(dir.path(), agent.clone())
            .build()
            .unwrap()
            .construct("spec.md")
            .await
            .unwrap();
        assert_eq!(complete(&outcome), (1, 1));
        assert_eq!(
            builds(&agent).len(),
            1,
            "the task was built, not skipped:\n{progress}"
        );
    }

    let dir = workspace_with(
        "# Progress: x\n\n## Status\n\nEnough for now.\nRALPH_DONE\n\n## Tasks\n\n- [ ] A\n- [ ] B\n",
    );
    let agent = Arc::new(FakeAgent::new());
    let outcome = builder(dir.path(), agent.clone())
        .build()
        .unwrap()
        .construct("spec.md")
        .await
        .unwrap();
    // Two boxes, and the spec's own issue (seeded by the run's start, never investigated).
    assert_eq!(
        outcome,
        Outcome::Declared { remaining: 3 },
        "a person's stop, boxes left: stopped, not complete"
    );
    assert!(agent.requests().is_empty());
}

fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(snapshot(&path));
        } else {
            out.insert(path.clone(), std::fs::read(&path).unwrap());
        }
    }
    out
}

#[tokio::test]
async fn dry_run_shows_the_next_step_and_touches_nothing() {
    let dir = workspace_with(PROGRESS);
    write(dir.path(), "prompts/build.md", "Custom: {{ task.name }}\n");
    write(
        dir.path(),
        "ralph.toml",
        "max_iterations = 7\nrecent_attempts = 3\nbuild_concurrency = 3\n[prompts]\nbuild = \"prompts/build.md\"\n",
    );
    // Give the file its trailers and sidecar first, as a run that investigated the spec would
    // have.
    let mut run = RunState::default();
    run.seeded = true;
    ProgressStore::open(progress_path(dir.path()))
        .unwrap()
        .persist(&[Change::Run(run)])
        .await
        .unwrap();
    let agent = Arc::new(FakeAgent::new());
    let ralph = builder(dir.path(), agent.clone())
        .gate(ShellGate::new("touch", "touch gate-ran"))
        .once(true)
        .build()
        .unwrap();
    let before = snapshot(dir.path());

    let report = ralph.dry_run("spec.md").await.unwrap();

    assert_eq!(snapshot(dir.path()), before, "no file written or changed");
    assert!(agent.requests().is_empty(), "no agent started");
    assert_eq!(report.stage, Stage::Build);
    assert_eq!(report.next, Some(("t-1".into(), "Write a.txt".into())));
    // With build_concurrency = 3, the other ready task would start beside it.
    assert_eq!(report.beside, [("t-2".into(), "Write b.txt".into())]);
    assert_eq!(report.template.as_deref(), Some("build"));
    assert!(
        report
            .template_source
            .as_deref()
            .unwrap()
            .ends_with("prompts/build.md")
    );
    let shown = report.to_string();
    for part in [
        "stage:     BUILD (iteration 1)",
        "next:      t-1: Write a.txt",
        "beside it: t-2: Write b.txt",
        "prompts/build.md)",
        "max iterations 7, stage timeout 20s, agent timeout 5m, retries 2, decompose after 2 rejections, once yes, recent attempts 3, build concurrency 3",
        "remaining: 2",
        // Seed 003's "tasks X/Y" (audit row 003-R5).
        "tasks:     0/2 accepted",
        // The progress file's path (003-R5).
        "state:     PROGRESS.md",
    ] {
        assert!(shown.contains(part), "missing {part:?} in\n{shown}");
    }
    assert_eq!((report.accepted, report.tasks), (0, 2));
}

#[tokio::test]
async fn store_kind_progress_and_the_new_keys_come_from_ralph_toml() {
    let dir = workspace_with(PROGRESS);
    write(
        dir.path(),
        "ralph.toml",
        "once = true\nrecent_attempts = 1\n[store]\nkind = \"progress\"\n",
    );
    let agent = Arc::new(builds_both().on_attempt(Role::Verify, "t-2", 1, reject("no")));
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(agent.clone())
        .build()
        .unwrap();
    assert!(ralph.config().once);
    assert_eq!(ralph.config().recent_attempts, 1);
    let outcome = ralph.construct("spec.md").await.unwrap();
    assert_eq!(
        outcome,
        Outcome::Once {
            iteration: 1,
            remaining: 1
        }
    );
    let text = text(dir.path());
    assert!(text.contains("- [x] Write a.txt <!-- id:t-1 -->"), "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("- Iteration "))
            .count(),
        1,
        "{text}"
    );
}

#[test]
fn old_plan_lines_without_the_new_fields_still_load() {
    let run: ralph::model::Change = serde_json::from_str(
        r#"{"t":"run","iteration":3,"seeded":true,"next_task":4,"next_issue":1}"#,
    )
    .unwrap();
    let ralph::model::Change::Run(run) = run else {
        panic!("not a run line")
    };
    assert!(run.attempts.is_empty() && run.log.is_empty());
    let line = serde_json::to_string(&ralph::model::Change::Run(run)).unwrap();
    assert!(
        !line.contains("attempts") && !line.contains("\"log\""),
        "{line}"
    );
}

/// Seed 000's `plan` mode: `construct_plan` seeds the spec, investigates it into tasks and
/// stops before BUILD (no build agent ran), so a person can change the list; a second call
/// on the planned board runs no agent; `construct` then builds the tasks as the person left
/// them (the task added by hand included) without investigating the spec again.
#[tokio::test]
async fn plan_only_stops_after_investigate_and_construct_builds_the_edited_plan() {
    let dir = workspace(SPEC);
    let build = |agent: &Arc<FakeAgent>| {
        Ralph::builder()
            .workspace(dir.path())
            .agent(agent.clone())
            .stage_timeout(Duration::from_secs(20))
            .build()
            .unwrap()
    };
    let agent = Arc::new(FakeAgent::new().on(
        Role::Investigate,
        "i-1",
        tasks(&[
            ("Write a.txt", "a.txt exists"),
            ("Write b.txt", "b.txt exists"),
        ]),
    ));
    let ralph = build(&agent);
    let outcome = ralph
        .construct_plan(Some("spec.md".as_ref()))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Planned { tasks: 2 });
    assert_eq!(outcome.exit_code(), 0);
    assert!(
        outcome
            .to_string()
            .contains("2 tasks to build; nothing was built"),
        "{outcome}"
    );
    assert_eq!(agent.requests().len(), 1, "only the investigator ran");
    let board = ralph.board().await.unwrap();
    assert_eq!(board.stage(), Stage::Build);
    assert_eq!(board.remaining_tasks().count(), 2);
    // The person adds a task of their own before anything is built.
    ralph
        .add_task(ralph::model::Task::new("t-9", "Write c.txt").with_acceptance("c.txt exists"))
        .await
        .unwrap();
    // Planned already: a second plan-only run starts no agent.
    assert_eq!(
        ralph.construct_plan(None).await.unwrap(),
        Outcome::Planned { tasks: 3 }
    );
    assert_eq!(agent.requests().len(), 1);
    drop(ralph);

    let agent = Arc::new(
        FakeAgent::new()
            .always(Role::Build, done())
            .always(Role::Verify, accept("fine"))
            .always(Role::GapAnalysis, no_gaps()),
    );
    let outcome = build(&agent).construct("spec.md").await.unwrap();
    assert_eq!(complete(&outcome).1, 3, "{outcome}");
    let roles: Vec<Role> = agent.requests().iter().map(|r| r.role).collect();
    assert!(!roles.contains(&Role::Investigate), "{roles:?}");
    assert_eq!(builds(&agent).len(), 3);
}

/// Seed 002's rule for read-only roles, held by ralph in the construct loop too: in a git
/// repository, a verifier that changed a tracked file and wrote a new one gives no verdict
/// (its "accept" is not used: the task is built and verified again) and its writes are set
/// aside in a stash entry; the progress
/// file, which ralph itself writes while verifiers run, is never taken for the agent's.
#[tokio::test]
async fn a_verifier_that_writes_gives_no_verdict_and_its_writes_are_set_aside() {
    let dir = workspace_with(PROGRESS);
    let ws = dir.path();
    write(ws, ".gitignore", ".ralph/\nbuild/\n");
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(ws)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "base"]);
    let agent = Arc::new(
        builds_both()
            .on(
                Role::Verify,
                "t-1",
                Script::new()
                    .write("spec.md", "# Spec, as the verifier would have it\n")
                    .write("hack.txt", "x\n")
                    .json(serde_json::json!({"verdict": "accept", "reason": "fine"})),
            )
            // No verdict is a rejection that does not count: t-1 is built again (and t-2 too
            // when its verifier ran beside t-1's: which one wrote cannot be told).
            .always(Role::Build, done()),
    );
    let recorder = crate::support::Recorder::default();
    let outcome = builder(ws, agent.clone())
        .verify_concurrency(2)
        .observer(recorder.clone())
        .build()
        .unwrap()
        .construct("spec.md")
        .await
        .unwrap();
    assert_eq!(complete(&outcome).1, 2, "{outcome}");
    let verifies: Vec<String> = agent
        .requests()
        .into_iter()
        .filter(|r| r.role == Role::Verify && r.subject.as_deref() == Some("t-1"))
        .map(|r| r.subject.unwrap_or_default())
        .collect();
    // At least twice: the first verdict was not used (a verifier beside it may have been
    // failed too, as which one wrote cannot be told).
    assert!(verifies.len() >= 2, "the first verdict was not used");
    assert_eq!(std::fs::read_to_string(ws.join("spec.md")).unwrap(), SPEC);
    assert!(!ws.join("hack.txt").exists());
    assert!(
        git(&["stash", "list"]).contains("ralph: what the read-only verify of t-1 wrote"),
        "{}",
        git(&["stash", "list"])
    );
    let messages: Vec<String> = recorder
        .warnings()
        .iter()
        .map(|w| w["message"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        messages.iter().any(
            |m| m.contains("the read-only verify of t-1 changed the work tree")
                && m.contains("(hack.txt, spec.md)")
        ),
        "{messages:?}"
    );
    assert!(
        !messages.iter().any(|m| m.contains("PROGRESS.md")),
        "{messages:?}"
    );
}

/// Audit row 003-R35: the progress file a run writes from nothing is laid out as seed 003's,
/// the boxes in one Tasks section above Recent Attempts and the Iteration Log, titled with
/// the spec's first heading, and a second run keeps that layout.
#[tokio::test]
async fn a_progress_file_ralph_starts_has_the_seeds_layout_and_the_specs_title() {
    let dir = workspace(SPEC);
    let agent = Arc::new(builds_both().on(
        Role::Investigate,
        "i-1",
        tasks(&[("Write a.txt", "a.txt"), ("Write b.txt", "b.txt")]),
    ));
    let run = || async {
        builder(dir.path(), agent.clone())
            .build()
            .unwrap()
            .construct("spec.md")
            .await
            .unwrap()
    };
    assert_eq!(complete(&run().await), (1, 2));
    let text = text(dir.path());
    let headings: Vec<&str> = text.lines().filter(|l| l.starts_with('#')).collect();
    let expected = [
        "# Progress: Greeter",
        "## Status",
        "## Tasks",
        "## Recent Attempts",
        "## Iteration Log",
    ];
    assert_eq!(headings, expected, "{text}");
    assert!(
        text.contains("## Tasks\n\n- [x] Write a.txt <!-- id:t-1 -->\n- [x] Write b.txt <!-- id:t-2 -->\n\n## Recent Attempts"),
        "{text}"
    );
    run().await;
    assert_eq!(self::text(dir.path()), text, "stable over runs");
}
