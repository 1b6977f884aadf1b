//! Build mode over `implementation.json` (seed 004's acceptance criteria), with real git,
//! real shell gates and the FakeAgent.

#![cfg(unix)]
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use crate::support::specs::*;
use crate::support::{Recorder, specs_complete};
use ralph::agent::Script;
use ralph::specs::Status;
use ralph::{AgentRequest, Event, FakeAgent, Role, ShellGate, SpecsOutcome};

const SPEC_A: &str = "# Greeter\n\nWrite greet.sh, its test and its docs.\n";
const SPEC_B: &str = "# Farewell\n\nWrite bye.sh.\n";

/// Seed 004: a spec with 3 tasks is built in 3 separate agent sessions, one task each; when
/// the gates pass each task is "completed" in implementation.json; the spec's last task
/// leads to a commit named after the spec, and the next spec starts.
#[tokio::test]
async fn three_tasks_three_sessions_then_a_commit_per_spec_and_the_next_spec() {
    let ws = workspace(&[("specs/a.md", SPEC_A), ("specs/b.md", SPEC_B)]);
    let dir = ws.path();
    implementation(
        dir,
        &[
            ("b", 2, &["Write bye.sh"]),
            (
                "a",
                1,
                &["Write greet.sh", "Write the test", "Write the docs"],
            ),
        ],
    );
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "a", planner("# Plan: a\n1. greet.sh first."))
            .on(Role::Planner, "b", planner("# Plan: b\n1. bye.sh."))
            .on(
                Role::Build,
                "a-1",
                Script::new()
                    .write("greet.sh", "echo hi\n")
                    .answer("ok\n<TASK_DONE>"),
            )
            .on(
                Role::Build,
                "a-2",
                Script::new()
                    .write("test.sh", "sh greet.sh\n")
                    .answer("ok\n<TASK_DONE>"),
            )
            .on(
                Role::Build,
                "a-3",
                Script::new()
                    .write("README.md", "docs\n")
                    .answer("ok\n<TASK_DONE>"),
            )
            .on(
                Role::Build,
                "b-1",
                Script::new()
                    .write("bye.sh", "echo bye\n")
                    .answer("ok\n<TASK_DONE>"),
            )
            .on(Role::Verify, "a", accept())
            .on(Role::Verify, "b", accept()),
    );
    let recorder = Recorder::default();
    // A real gate that checks what the agent wrote, from the second task on.
    let gate = ShellGate::new("files", "test -f greet.sh");
    let ralph = ralph(dir, agent.clone(), recorder.clone(), vec![gate]);

    let outcome = ralph.build_specs().await.unwrap();
    assert_eq!(specs_complete(&outcome), (2, 4));
    agent.verify().unwrap();

    // One session per task, each prompt about its own task only.
    let builds = prompts(&agent, Role::Build);
    let subjects: Vec<&str> = builds.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(subjects, ["a-1", "a-2", "a-3", "b-1"]);
    let (_, second) = &builds[1];
    assert!(second.contains("# Task: Write the test"), "{second}");
    assert!(
        second.contains("Complete ONLY this task:\n\n> Write the test"),
        "{second}"
    );
    assert!(second.contains("- [x] Write greet.sh"), "{second}");
    assert!(second.contains("- [ ] Write the test is done"), "{second}");
    assert!(second.contains("Context of a."), "{second}");
    assert!(second.contains("Do NOT commit"), "{second}");
    assert!(!second.contains("> Write the docs"), "{second}");

    // Every task completed in the file; both specs completed with their commits.
    let plan = load(dir);
    for spec in &plan.specs {
        assert_eq!(spec.status, Status::Completed, "{}", spec.id);
        assert!(spec.tasks.iter().all(|t| t.status == Status::Completed));
        // The spec's commit holds its completion: a commit cannot name itself.
        assert_eq!(spec.commit, None);
    }
    // Each spec's commit holds its completion and its entry: nothing of ralph's is left.
    assert_eq!(git(dir, &["status", "--porcelain"]), "");
    let in_b = git(dir, &["show", "--name-only", "--format=", "HEAD"]);
    assert!(
        in_b.contains("implementation.json") && in_b.contains("PROGRESS.md"),
        "{in_b}"
    );
    // Commits named after the specs, spec a (priority 1) first.
    assert_eq!(commits(dir), ["Spec b", "Spec a", "Initial commit"]);
    let in_a = git(dir, &["show", "--name-only", "--format=", "HEAD~1"]);
    assert!(
        in_a.contains("greet.sh") && in_a.contains("README.md"),
        "{in_a}"
    );
    assert!(!in_a.contains("bye.sh"), "{in_a}");
    // The next spec started only after the first was committed.
    let events = recorder.events();
    let committed_a = events
        .iter()
        .position(|e| matches!(e, Event::SpecCommitted { spec, .. } if spec == "a"))
        .unwrap();
    let started_b = events
        .iter()
        .position(|e| matches!(e, Event::TaskStarted { task, .. } if task.as_str() == "b-1"))
        .unwrap();
    assert!(committed_a < started_b);

    // PROGRESS.md, appended per spec.
    let progress = std::fs::read_to_string(dir.join("PROGRESS.md")).unwrap();
    let a = progress.find("a: Spec a").unwrap();
    let b = progress.find("b: Spec b").unwrap();
    assert!(a < b, "{progress}");
    assert!(progress.contains("- [x] a-3 Write the docs"), "{progress}");
    assert!(
        progress.contains("- Commit: the one that adds this entry"),
        "{progress}"
    );
    let a_committed = git(dir, &["show", "HEAD~1:implementation.json"]);
    assert!(a_committed.contains("\"completedAt\""), "{a_committed}");

    // A second run has nothing to do and runs no agent.
    let before = agent.requests().len();
    drop(ralph);
    let again = crate::support::specs::ralph(dir, agent.clone(), Recorder::default(), vec![]);
    let outcome = again.build_specs().await.unwrap();
    assert_eq!(specs_complete(&outcome), (0, 0));
    assert_eq!(agent.requests().len(), before);
}

/// Seed 004: gates fail with retries left → a new agent session with the failure injected.
/// An optional gate's failure is reported, not enforced.
#[tokio::test]
async fn a_failed_gate_is_retried_in_a_new_session_with_the_failure_in_its_prompt() {
    let ws = workspace(&[("specs/a.md", SPEC_A)]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["Write greet.sh"])]);
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "a", planner("# Plan: a"))
            .on_attempt(
                Role::Build,
                "a-1",
                1,
                Script::new()
                    .write("greet.sh", "if true; then echo hi\n")
                    .answer("ok\n<TASK_DONE>"),
            )
            .on_attempt(
                Role::Build,
                "a-1",
                2,
                Script::new()
                    .write("greet.sh", "echo hi\n")
                    .answer("fixed\n<TASK_DONE>"),
            )
            .on(Role::Verify, "a", accept()),
    );
    let recorder = Recorder::default();
    let gates = vec![
        ShellGate::new("syntax", "sh -n greet.sh"),
        ShellGate::new("style", "echo 'style: too terse'; exit 1").with_required(false),
    ];
    let ralph = ralph(dir, agent.clone(), recorder.clone(), gates);
    let outcome = ralph.build_specs().await.unwrap();
    assert_eq!(specs_complete(&outcome), (1, 1));

    let builds = prompts(&agent, Role::Build);
    assert_eq!(builds.len(), 2, "two sessions");
    assert!(!builds[0].1.contains("Previous Attempt Failed"));
    let retry = &builds[1].1;
    assert!(retry.contains("## Previous Attempt Failed"), "{retry}");
    assert!(retry.contains("Quality gate `syntax` failed"), "{retry}");
    assert!(retry.contains("greet.sh"), "{retry}");
    assert!(retry.contains("# Task: Write greet.sh"), "{retry}");

    // The optional gate failed both times and did not block.
    let style: Vec<_> = recorder
        .of_kind("gate_finished")
        .into_iter()
        .filter(|g| g["gate"] == "style")
        .collect();
    assert_eq!(style.len(), 1, "runs only after the required gate passed");
    assert_eq!(style[0]["required"], false);
    let task = &load(dir).specs[0].tasks[0];
    assert_eq!(task.status, Status::Completed);
    assert_eq!(task.attempts, 2);
    assert_eq!(task.last_failure, None);
}

/// Out of retries → the task is blocked with the reason, and the spec stops there (and
/// so does a spec that depends on it).
#[tokio::test]
async fn a_task_out_of_retries_or_blocked_stops_its_spec() {
    let ws = workspace(&[("specs/a.md", SPEC_A), ("specs/b.md", SPEC_B)]);
    let dir = ws.path();
    implementation(
        dir,
        &[
            ("a", 1, &["Write greet.sh", "Never reached"]),
            ("b", 2, &["x"]),
        ],
    );
    depends_on(dir, "b", &["a"]);
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "a", planner("# Plan: a"))
            .always(Role::Build, Script::new().answer("I tried.")),
    );
    let ralph = ralph(dir, agent.clone(), Recorder::default(), vec![]);
    let outcome = ralph.build_specs().await.unwrap();
    let SpecsOutcome::Blocked { spec, items } = &outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(spec, "a");
    assert_eq!(items[0].id, "a-1");
    assert!(
        items[0].reason.contains("gave up after 3 attempts"),
        "{outcome}"
    );
    assert_eq!(prompts(&agent, Role::Build).len(), 3, "1 + 2 retries");
    let plan = load(dir);
    assert_eq!(plan.specs[0].tasks[0].status, Status::Blocked);
    assert_eq!(plan.specs[0].tasks[1].status, Status::Pending);
    assert_eq!(plan.specs[1].status, Status::Pending, "b waits for a");
    assert_eq!(commits(dir), ["Initial commit"]);

    // <TASK_BLOCKED reason> blocks at once.
    let ws = workspace(&[("specs/a.md", SPEC_A)]);
    implementation(ws.path(), &[("a", 1, &["Needs a key"])]);
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "a", planner("# Plan: a"))
            .on(
                Role::Build,
                "a-1",
                Script::new().answer("<TASK_BLOCKED reason=\"no API key\">"),
            ),
    );
    let ralph = crate::support::specs::ralph(ws.path(), agent, Recorder::default(), vec![]);
    let outcome = ralph.build_specs().await.unwrap();
    assert_eq!(outcome.exit_code(), 3);
    assert!(outcome.to_string().contains("no API key"), "{outcome}");
    let task = &load(ws.path()).specs[0].tasks[0];
    assert_eq!(task.blocked_reason.as_deref(), Some("no API key"));
}

/// Killed after task 1 (the stop token, as Ctrl+C would), a new start runs task 2 and does
/// not run task 1 again.
#[tokio::test]
async fn a_restart_mid_spec_resumes_at_the_next_task() {
    let ws = workspace(&[("specs/a.md", SPEC_A)]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["One", "Two"])]);
    let first = Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "a", planner("# Plan: a"))
            .on(Role::Build, "a-1", done()),
    );
    let stop = ralph::StopToken::new();
    let cancel = stop.clone();
    let ralph1 = ralph::Ralph::builder()
        .workspace(dir)
        .agent(first.clone())
        .observer(move |e: &Event| {
            if matches!(e, Event::TaskDone { .. }) {
                cancel.stop();
            }
        })
        .stop_token(stop)
        .build()
        .unwrap();
    assert_eq!(
        ralph1.build_specs().await.unwrap(),
        SpecsOutcome::Interrupted
    );
    drop(ralph1);
    let plan = load(dir);
    assert_eq!(plan.specs[0].tasks[0].status, Status::Completed);
    assert_eq!(plan.specs[0].tasks[1].status, Status::Pending);

    let second = Arc::new(FakeAgent::new().on(Role::Build, "a-2", done()).on(
        Role::Verify,
        "a",
        accept(),
    ));
    let ralph2 = crate::support::specs::ralph(dir, second.clone(), Recorder::default(), vec![]);
    let outcome = ralph2.build_specs().await.unwrap();
    assert_eq!(specs_complete(&outcome), (1, 1));
    let subjects: Vec<_> = second
        .requests()
        .into_iter()
        .map(|r| (r.role, r.subject.unwrap()))
        .collect();
    // No planner (the plan is active), no task 1.
    assert_eq!(
        subjects,
        [
            (Role::Build, "a-2".to_owned()),
            (Role::Verify, "a".to_owned())
        ]
    );
}

/// Seed 004: build mode reads implementation.json with no LLM parsing: no plan-mode call.
/// Without the file it says to run plan mode; outside a git repository it refuses.
#[tokio::test]
async fn build_mode_needs_no_plan_role_and_says_what_is_missing() {
    let ws = workspace(&[("specs/a.md", SPEC_A)]);
    let dir = ws.path();
    let agent = Arc::new(FakeAgent::new());
    let ralph = ralph(dir, agent.clone(), Recorder::default(), vec![]);
    let err = ralph.build_specs().await.unwrap_err().to_string();
    assert!(
        err.contains("implementation.json") && err.contains("plan mode"),
        "{err}"
    );

    implementation(dir, &[("a", 1, &["One"])]);
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "a", planner("# Plan: a"))
            .on(Role::Build, "a-1", done())
            .on(Role::Verify, "a", accept()),
    );
    drop(ralph);
    let ralph = crate::support::specs::ralph(dir, agent.clone(), Recorder::default(), vec![]);
    let outcome = ralph.build_specs().await.unwrap();
    assert_eq!(specs_complete(&outcome), (1, 1));
    assert!(agent.requests().iter().all(|r| r.role != Role::Breakdown));

    let plain = tempfile::tempdir().unwrap();
    write(plain.path(), "specs/a.md", SPEC_A);
    implementation(plain.path(), &[("a", 1, &["One"])]);
    let ralph = crate::support::specs::ralph(
        plain.path(),
        Arc::new(FakeAgent::new()),
        Recorder::default(),
        vec![],
    );
    let err = ralph.build_specs().await.unwrap_err().to_string();
    assert!(err.contains("not") && err.contains("git"), "{err}");
}

/// Run logs: runs/<spec_id>/<timestamp>/plan-attempt-N.log, impl-attempt-N.log, verify.log.
#[tokio::test]
async fn run_logs_go_to_the_specs_run_folder() {
    let ws = workspace(&[("specs/a.md", SPEC_A)]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["One", "Two"])]);
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "a", planner("# Plan: a"))
            .always(Role::Build, done())
            .on(Role::Verify, "a", accept()),
    );
    let ralph = ralph(
        dir,
        agent,
        Recorder::default(),
        vec![ShellGate::new("ok", "true")],
    );
    ralph.build_specs().await.unwrap();
    let runs = dir.join("build/ralph-logs/runs/a");
    let stamps: Vec<_> = std::fs::read_dir(&runs).unwrap().flatten().collect();
    assert_eq!(stamps.len(), 1);
    let mut names: Vec<String> = std::fs::read_dir(stamps[0].path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "gate-ok-a-1-a1.log",
            "gate-ok-a-2-a1.log",
            "impl-attempt-1.log",
            "impl-attempt-2.log",
            "plan-attempt-1.log",
            "verify.log"
        ]
    );
    let verify = std::fs::read_to_string(stamps[0].path().join("verify.log")).unwrap();
    assert!(verify.contains("verify a attempt 1"), "{verify}");
}

/// Seed 004's task prompt and retry prompt, rendered by the template engine: the marker is
/// never a whole line of a prompt (an echoed prompt claims nothing), and an override file
/// named in `[prompts]` replaces the built-in template.
#[test]
fn task_and_retry_prompts_follow_seed_004() {
    use ralph_loop_core::prompt::Prompts;
    use serde_json::json;
    let ctx = json!({
        "spec": {"id": "a", "name": "Avatars", "file": "specs/a.md", "context": "Use src/aws.ts."},
        "task": {"id": "a-2", "description": "Create the upload endpoint"},
        "criteria": ["Users can upload JPG/PNG up to 5MB"],
        "completed": [{"description": "Add avatarUrl to User"}],
        "plan": "1. endpoint in src/upload.ts",
        "gates": ["typecheck", "test"],
        "attempt": 2,
        "failure": "Quality gate `test` failed (exit 1): upload.test.ts",
    });
    let prompts = Prompts::builtin();
    let task = prompts.render("task", &ctx).unwrap();
    for part in [
        "# Task: Create the upload endpoint",
        "You are working on: **Avatars**",
        "Use src/aws.ts.",
        "## Completed Tasks\n\n- [x] Add avatarUrl to User",
        "Complete ONLY this task:\n\n> Create the upload endpoint",
        "- [ ] Users can upload JPG/PNG up to 5MB",
        "- Do NOT work on other tasks",
        "- Do NOT commit (Ralph handles commits: the spec's work becomes one commit once its verifier accepts it), and stay on the checked-out branch",
        "1. endpoint in src/upload.ts",
        "typecheck, test",
        "<TASK_DONE>",
        "<TASK_BLOCKED reason=",
    ] {
        assert!(task.contains(part), "missing {part:?} in\n{task}");
    }
    assert!(task.lines().all(|l| l.trim() != "<TASK_DONE>"));
    let retry = prompts.render("task_retry", &ctx).unwrap();
    assert!(retry.starts_with(&task.trim_end().to_string()));
    let mut ctx = ctx;
    ctx["completed_earlier"] = json!(12);
    let later = prompts.render("task", &ctx).unwrap();
    assert!(
        later.contains(
            "## Completed Tasks\n\n- [x] … 12 earlier tasks\n- [x] Add avatarUrl to User"
        ),
        "{later}"
    );
    assert!(retry.contains("Attempt 1 of this task did not pass"));
    assert!(retry.contains("upload.test.ts"));

    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "p/task.md", "Only {{ task.id }}");
    let paths = std::collections::BTreeMap::from([("task".to_owned(), "p/task.md".into())]);
    let custom = Prompts::load(dir.path(), &paths).unwrap();
    assert_eq!(custom.render("task", &ctx).unwrap(), "Only a-2\n");
}

/// Audit row 002-R32: seed 002 injects the plan "between paths and the mission": after the
/// spec's paths and context, before the rest of the prompt; everything else stays the same.
#[test]
fn the_plan_sits_between_the_paths_and_the_mission() {
    use ralph_loop_core::prompt::{Prompts, STABLE_END};
    use serde_json::json;
    let mut ctx = json!({
        "spec": {"id": "a", "name": "Avatars", "file": "specs/a.md", "context": "Use src/aws.ts."},
        "task": {"id": "a-2", "description": "Create the upload endpoint"},
        "criteria": ["Users can upload JPG/PNG up to 5MB"],
        "completed": [{"description": "Add avatarUrl to User"}],
        "plan": "1. endpoint in src/upload.ts",
        "gates": ["test"],
    });
    let prompts = Prompts::builtin();
    let with_plan = prompts.render("task", &ctx).unwrap();
    ctx["plan"] = json!(null);
    let without = prompts.render("task", &ctx).unwrap();

    let at = |part: &str| {
        with_plan
            .find(part)
            .unwrap_or_else(|| panic!("missing {part:?} in\n{with_plan}"))
    };
    let order = [
        at("(`specs/a.md`)"),
        at("Use src/aws.ts."),
        at("## Implementation Plan"),
        at("1. endpoint in src/upload.ts"),
        at(STABLE_END),
        at("## Your Assignment"),
        at("## Completed Tasks"),
    ];
    assert!(order.is_sorted(), "{order:?} in\n{with_plan}");
    // The plan ends the stable part, which every task of the spec shares (issue 38); the
    // task and the tasks completed so far come after it.
    let section = &with_plan[at("## Implementation Plan")..at(STABLE_END)];
    assert_eq!(with_plan.replacen(section, "", 1), without);
    assert!(!without.contains("## Implementation Plan"), "{without}");
}

/// A gate that floods its output: the retry prompt carries a bounded excerpt (8 KiB).
#[tokio::test]
async fn the_failure_in_a_retry_prompt_is_bounded() {
    let ws = workspace(&[("specs/a.md", SPEC_A)]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["One"])]);
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "a", planner("# Plan: a"))
            .on_attempt(Role::Build, "a-1", 1, done())
            .on_attempt(
                Role::Build,
                "a-1",
                2,
                Script::new().write("ok", "").answer("<TASK_DONE>"),
            )
            .on(Role::Verify, "a", accept()),
    );
    let flood = ShellGate::new(
        "flood",
        "test -f ok && exit 0; i=0; while [ $i -lt 5000 ]; do echo \"error line $i of the build\"; i=$((i+1)); done; exit 1",
    );
    let ralph = ralph(dir, agent.clone(), Recorder::default(), vec![flood]);
    ralph.build_specs().await.unwrap();
    let retry = &prompts(&agent, Role::Build)[1].1;
    assert!(
        retry.contains("error line 4999 of the build"),
        "the tail is kept"
    );
    assert!(retry.len() < 16 * 1024, "{} bytes", retry.len());
    let stored = &load(dir).specs[0].tasks[0];
    assert_eq!(stored.last_failure, None, "cleared once completed");
}

/// Hand-edited implementation.json: each bad input is an error naming the file and the key
/// (before any agent runs), never a panic.
#[tokio::test]
async fn hand_edited_bad_input_names_the_file_and_the_key() {
    let cases: [(&str, &[&str]); 4] = [
        // A spec with an empty file.
        (
            r#"{"specs": [{"id": "a", "file": "", "tasks": []}]}"#,
            &["implementation.json", "specs[0].file", "\"a\""],
        ),
        // A spec file that does not exist.
        (
            r#"{"specs": [{"id": "a", "file": "specs/gone.md"}]}"#,
            &["implementation.json", "specs[0].file", "specs/gone.md"],
        ),
        // A status ralph does not know: file, line and column, and the value.
        (
            "{\"specs\": [{\"id\": \"a\", \"file\": \"specs/a.md\",\n \"status\": \"paused\"}]}",
            &["implementation.json:2:", "paused"],
        ),
        // A spec without a file.
        (
            r#"{"specs": [{"id": "a"}]}"#,
            &["implementation.json:1:", "file"],
        ),
    ];
    for (json, wanted) in cases {
        let ws = workspace(&[("specs/a.md", "# A\n")]);
        let dir = ws.path();
        write(dir, "implementation.json", json);
        let agent = Arc::new(FakeAgent::new());
        let ralph = ralph(dir, agent.clone(), Recorder::default(), vec![]);
        let err = ralph.build_specs().await.unwrap_err().to_string();
        for want in wanted {
            assert!(err.contains(want), "{json}: {want:?} in {err}");
        }
        assert!(agent.requests().is_empty(), "{json}");
    }
}

/// A spec with no tasks goes straight to the verifier; a non-UTF-8 spec is refused, naming
/// the file and the byte offset, before any verifier sees it (issue 26: it was shown lossily).
#[tokio::test]
async fn a_spec_without_tasks_is_verified_and_a_non_utf8_spec_is_refused() {
    for (text, wanted) in [
        (&b"# A spec\n"[..], None),
        (
            b"# A \xff\xfe spec\n",
            Some("specs/a.md is not UTF-8 text: invalid byte 0xFF at byte offset 4"),
        ),
    ] {
        let ws = workspace(&[]);
        let dir = ws.path();
        std::fs::create_dir_all(dir.join("specs")).unwrap();
        std::fs::write(dir.join("specs/a.md"), text).unwrap();
        write(
            dir,
            "implementation.json",
            r#"{"specs": [{"id": "a", "file": "specs/a.md", "tasks": []}]}"#,
        );
        let agent = Arc::new(
            FakeAgent::new()
                .on(Role::Planner, "a", planner("# Plan: a"))
                .on(Role::Verify, "a", accept()),
        );
        let ralph = ralph(dir, agent.clone(), Recorder::default(), vec![]);
        let outcome = ralph.build_specs().await;
        match wanted {
            None => {
                assert_eq!(specs_complete(&outcome.unwrap()), (1, 0));
                let verify = &prompts(&agent, Role::Verify)[0].1;
                assert!(verify.contains("# A spec"), "{verify}");
            }
            Some(wanted) => {
                let err = outcome.unwrap_err().to_string();
                assert!(err.contains(wanted), "{err}");
                assert!(prompts(&agent, Role::Verify).is_empty());
            }
        }
    }
}

/// Makes spec `id` depend on `deps` in the workspace's implementation.json.
fn depends_on(dir: &std::path::Path, id: &str, deps: &[&str]) {
    let mut plan = load(dir);
    let spec = plan.specs.iter_mut().find(|s| s.id == id).unwrap();
    spec.depends_on = deps.iter().map(|d| (*d).to_owned()).collect();
    store(dir).save(&mut plan, "test").unwrap();
}

/// A blocked spec holds back only the specs that depend on it: an independent later spec is
/// built and committed, and the outcome is still the block (audit: "a blocked spec stops
/// every later spec").
#[tokio::test]
async fn a_blocked_spec_holds_back_only_the_specs_that_depend_on_it() {
    let ws = workspace(&[
        ("specs/a.md", SPEC_A),
        ("specs/b.md", SPEC_B),
        ("specs/c.md", SPEC_B),
    ]);
    let dir = ws.path();
    implementation(
        dir,
        &[
            ("a", 1, &["Needs a key"]),
            ("b", 2, &["x"]),
            ("c", 3, &["y"]),
        ],
    );
    depends_on(dir, "c", &["a"]);
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "a", planner("# Plan: a"))
            .on(Role::Planner, "b", planner("# Plan: b"))
            .on(
                Role::Build,
                "a-1",
                Script::new().answer("<TASK_BLOCKED reason=\"no API key\">"),
            )
            .on(Role::Build, "b-1", done())
            .always(Role::Verify, accept()),
    );
    let events = Recorder::default();
    let ralph = ralph(dir, agent.clone(), events.clone(), vec![]);

    let outcome = ralph.build_specs().await.unwrap();

    let SpecsOutcome::Blocked { spec, .. } = &outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(spec, "a");
    let plan = load(dir);
    assert_eq!(plan.specs[1].status, Status::Completed, "b does not need a");
    assert_eq!(plan.specs[2].status, Status::Pending, "c waits for a");
    assert_eq!(commits(dir), ["Spec b", "Initial commit"]);
    assert!(
        prompts(&agent, Role::Planner)
            .iter()
            .all(|(subject, _)| subject != "c"),
        "c was never planned"
    );
    assert!(
        events.of_kind("warning").iter().any(|w| w["message"]
            .as_str()
            .unwrap()
            .contains("do not depend on a")),
        "{:?}",
        events.of_kind("warning")
    );
    agent.verify().unwrap();
}

/// `build_concurrency` is the construct loop's: build mode says so rather than ignoring it.
#[tokio::test]
async fn build_mode_says_that_build_concurrency_is_the_construct_loops() {
    let ws = workspace(&[("specs/a.md", SPEC_A)]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["Write greet.sh"])]);
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "a", planner("# Plan: a\n1. greet.sh."))
            .on(
                Role::Build,
                "a-1",
                Script::new()
                    .write("greet.sh", "echo hi\n")
                    .answer("ok\n<TASK_DONE>"),
            )
            .on(Role::Verify, "a", accept()),
    );
    let recorder = Recorder::default();
    let ralph = ralph::Ralph::builder()
        .workspace(dir)
        .agent(agent)
        .observer(recorder.clone())
        .build_concurrency(3)
        .build()
        .unwrap();

    let outcome = ralph.build_specs().await.unwrap();

    assert_eq!(specs_complete(&outcome), (1, 1));
    assert!(
        recorder.events().iter().any(|e| matches!(e,
            Event::Warning { message } if message.starts_with("build_concurrency = 3 applies to the construct loop"))),
        "{:?}",
        recorder.events()
    );
}

/// Seed 002's "skip if done (and not forced)": a second `build_specs` leaves a completed
/// spec alone, and `rebuild` builds it again from its first task (the plan kept, a second
/// verdict, a second commit); an unknown spec is refused, naming the file and the specs.
#[tokio::test]
async fn a_done_spec_is_skipped_unless_forced_and_then_rebuilt_task_by_task() {
    let ws = workspace(&[("specs/a.md", SPEC_A)]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["Write greet.sh", "Write the test"])]);
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "a", planner("# Plan: a\n1. greet.sh."))
            .on_attempt(Role::Build, "a-1", 1, done())
            .on_attempt(Role::Build, "a-2", 1, done())
            .on(Role::Verify, "a", accept()),
    );
    let first = ralph(dir, agent.clone(), Recorder::default(), vec![]);
    assert_eq!(specs_complete(&first.build_specs().await.unwrap()), (1, 2));
    drop(first);

    // Done: a plain build runs no agent.
    let idle = Arc::new(FakeAgent::new());
    let again = ralph(dir, idle.clone(), Recorder::default(), vec![]);
    assert_eq!(specs_complete(&again.build_specs().await.unwrap()), (0, 0));
    assert!(idle.requests().is_empty());
    let err = again.rebuild("nope").await.unwrap_err().to_string();
    assert!(
        err.contains("implementation.json") && err.contains("\"nope\"") && err.contains(": a)"),
        "{err}"
    );
    drop(again);

    // Forced, by its file: every task is built again, in order, and verified again.
    let agent = Arc::new(
        FakeAgent::new()
            .on(
                Role::Build,
                "a-1",
                Script::new()
                    .write("greet.sh", "echo hello\n")
                    .answer("ok\n<TASK_DONE>"),
            )
            .on(Role::Build, "a-2", done())
            .on(Role::Verify, "a", accept()),
    );
    let recorder = Recorder::default();
    let forced = ralph(dir, agent.clone(), recorder.clone(), vec![]);
    let outcome = forced.rebuild("specs/a.md").await.unwrap();
    assert_eq!(specs_complete(&outcome), (1, 2));
    agent.verify().unwrap();
    let builds = prompts(&agent, Role::Build);
    let subjects: Vec<&str> = builds.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(subjects, ["a-1", "a-2"]);
    // The plan was kept: no planner ran.
    assert!(prompts(&agent, Role::Planner).is_empty());
    let spec = &load(dir).specs[0];
    assert_eq!(spec.status, Status::Completed);
    assert!(spec.tasks.iter().all(|t| t.status == Status::Completed));
    assert_eq!(
        spec.tasks[0].attempts, 1,
        "the earlier build's attempts were cleared"
    );
    assert_eq!(commits(dir), ["Spec a", "Spec a", "Initial commit"]);
    assert!(recorder.events().iter().any(|e| matches!(
        e,
        Event::Warning { message } if message.contains("spec a (Completed, forced)")
    )));
}

/// Issue 38: the prompts of a role in build mode share their stable part (the role's
/// instructions, the spec, its plan) up to the task: a spec's tasks, its retry and a
/// person's guidance all come after it; the verifier's repeat shares it too.
#[tokio::test]
async fn a_spec_s_task_prompts_share_their_stable_part() {
    use ralph_loop_core::prompt::STABLE_END;
    let ws = workspace(&[("specs/a.md", SPEC_A)]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["One", "Two"])]);
    ralph::steer::tell(dir, "Keep it short.", None, Some("ana")).unwrap();
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "a", planner("# Plan: a"))
            .on_attempt(Role::Build, "a-1", 1, Script::new().answer("Not yet."))
            .on_attempt(Role::Build, "a-1", 2, done())
            .on(Role::Build, "a-2", done())
            .on(Role::Verify, "a", accept()),
    );
    let ralph = ralph(dir, agent.clone(), Recorder::default(), vec![]);
    ralph.build_specs().await.unwrap();

    let builds: Vec<AgentRequest> = agent
        .requests()
        .into_iter()
        .filter(|r| r.role == Role::Build)
        .collect();
    assert_eq!(builds.len(), 3, "two tasks and a retry");
    let stable = &builds[0].prompt[..builds[0].stable_prefix];
    assert!(
        stable.contains("# Plan: a") && !stable.contains("a-1"),
        "{stable}"
    );
    assert!(!stable.contains(STABLE_END), "the marker is taken out");
    for build in &builds {
        assert_eq!(&build.prompt[..build.stable_prefix], stable);
        let own = &build.prompt[build.stable_prefix..];
        let task = own.find("# Task:").expect("the task");
        let guidance = own.find("## Guidance from a person").expect("the guidance");
        assert!(task < guidance, "the task, then the guidance:\n{own}");
    }
}
