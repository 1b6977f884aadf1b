//! Build mode stopped at the exact points between a verdict and its consequences, then
//! started again as a fresh `Ralph` on the same workspace: the end state is the one of an
//! uninterrupted run, and no verdict already acted on is asked for again.
//!
//! A stop is made real, not simulated in memory: a write ralph is about to make fails (its
//! target replaced by a folder, from an observer at the event just before it, or from a git
//! hook right after a commit), so the run ends with an error at that point and everything it
//! had not yet written is lost, as with a kill.

#![cfg(unix)]
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::support::specs::*;
use crate::support::{Recorder, specs_complete};
use ralph::specs::Status;
use ralph::{Event, FakeAgent, Ralph, Role};
use serde_json::Value;

const SPEC: &str = "# Greeter\n\nWrite greet.sh in POSIX sh.\n";
const INVALIDATION: &str =
    "Wrong language.\nPLAN_INVALIDATION: the spec asks for sh, the plan uses Python";

/// Makes the next write of `target` fail: the file is moved aside and a folder (with an
/// entry, so a rename onto it fails too) takes its place. [`unblock`] undoes it.
fn block(target: &Path) {
    if target.exists() {
        std::fs::rename(target, aside(target)).unwrap();
    }
    std::fs::create_dir_all(target.join("blocked")).unwrap();
}

fn unblock(target: &Path) {
    std::fs::remove_dir_all(target).unwrap();
    if aside(target).exists() {
        std::fs::rename(aside(target), target).unwrap();
    }
}

fn aside(target: &Path) -> PathBuf {
    target.with_extension("aside")
}

/// An observer that blocks `target` once, at the first event `when` matches.
fn block_at(
    target: PathBuf,
    when: impl Fn(&Event) -> bool + Send + Sync + 'static,
) -> impl Fn(&Event) + Send + Sync + 'static {
    let fired = AtomicBool::new(false);
    move |e: &Event| {
        if when(e) && !fired.swap(true, Ordering::SeqCst) {
            block(&target);
        }
    }
}

fn rejected(e: &Event) -> bool {
    matches!(
        e,
        Event::Verdict {
            accepted: false,
            ..
        }
    )
}

/// The first run: plans, builds task a-1, and the verifier invalidates the plan.
fn first_agent() -> Arc<FakeAgent> {
    Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "a", planner("# Plan: a\nedit lib/greet.py"))
            .on(Role::Build, "a-1", done())
            .on(Role::Verify, "a", reject(INVALIDATION)),
    )
}

/// What the rest of the work needs: the new plan, the rework task, the acceptance.
/// `verifier_again` when the restart has to ask the verifier about the first round again
/// (nothing of its verdict was written).
fn second_agent(verifier_again: bool) -> Arc<FakeAgent> {
    let mut agent = FakeAgent::new();
    if verifier_again {
        agent = agent.on_attempt(Role::Verify, "a", 1, reject(INVALIDATION));
    }
    Arc::new(
        agent
            .on_attempt(
                Role::Planner,
                "a",
                2,
                planner("# Plan: a\nwrite greet.sh in sh"),
            )
            .on(Role::Build, "a-2", done())
            .on(Role::Verify, "a", accept()),
    )
}

fn build(dir: &Path, agent: Arc<FakeAgent>, observer: impl ralph::Observer + 'static) -> Ralph {
    Ralph::builder()
        .workspace(dir)
        .agent(agent)
        .observer(observer)
        .build()
        .unwrap()
}

/// Everything a run leaves that matters: the spec's tasks and counts, the plan files, the
/// commits, and the progress entry's task list.
fn end_state(dir: &Path) -> Value {
    let plan = load(dir);
    let spec = &plan.specs[0];
    let tasks: Vec<Value> = spec
        .tasks
        .iter()
        .map(|t| serde_json::json!([t.id, t.description, t.status, t.last_failure.is_some()]))
        .collect();
    let mut meta: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("specs/plans/a.json")).unwrap())
            .unwrap();
    for stamp in ["created_at_utc", "invalidated_at_utc"] {
        meta[stamp] = Value::Bool(meta[stamp].is_string());
    }
    let progress = std::fs::read_to_string(dir.join("PROGRESS.md")).unwrap();
    serde_json::json!({
        "status": spec.status,
        "attempts": spec.attempts,
        "verified": spec.verified,
        "plan_invalidation": spec.plan_invalidation,
        "clean": git(dir, &["status", "--porcelain"]).is_empty(),
        "tasks": tasks,
        "meta": meta,
        "plan": std::fs::read_to_string(dir.join("specs/plans/a.md")).unwrap(),
        "archived": std::fs::read_to_string(dir.join("specs/plans/a.attempt-1.md")).unwrap(),
        "commits": commits(dir),
        "progress_tasks": progress.lines().filter(|l| l.contains("- [x]")).collect::<Vec<_>>(),
    })
}

/// The end state of a run that nothing interrupts.
async fn uninterrupted() -> Value {
    let ws = workspace(&[("specs/a.md", SPEC)]);
    implementation(ws.path(), &[("a", 1, &["Write greet.sh"])]);
    // One agent for the whole run: the first agent's scripts, then the second's.
    let both = Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "a", planner("# Plan: a\nedit lib/greet.py"))
            .on(Role::Build, "a-1", done())
            .on_attempt(Role::Verify, "a", 1, reject(INVALIDATION))
            .on_attempt(
                Role::Planner,
                "a",
                2,
                planner("# Plan: a\nwrite greet.sh in sh"),
            )
            .on(Role::Build, "a-2", done())
            .on_attempt(Role::Verify, "a", 2, accept()),
    );
    let ralph = build(ws.path(), both.clone(), Recorder::default());
    let outcome = ralph.build_specs().await.unwrap();
    assert_eq!(specs_complete(&outcome), (1, 2));
    both.verify().unwrap();
    end_state(ws.path())
}

/// Seed 002's invalidation, stopped at each point between "the verifier said
/// PLAN_INVALIDATION" and "the invalidation is fully applied": the restart ends where an
/// uninterrupted run ends, with one rework task, one re-plan, one archived plan.
#[tokio::test]
async fn a_stop_anywhere_in_a_plan_invalidation_resumes_to_the_same_state() {
    let want = uninterrupted().await;

    // (point, the file whose write fails, at which event, whether the verifier runs again)
    type When = fn(&Event) -> bool;
    let points: [(&str, &str, When, bool); 3] = [
        // Before anything of the verdict is written: the verdict is asked for again.
        (
            "before the verdict is saved",
            "implementation.json",
            rejected,
            true,
        ),
        // The rework task is saved; archiving the plan fails.
        (
            "before the plan is archived",
            "specs/plans/a.attempt-1.md",
            rejected,
            false,
        ),
        // The plan files are invalidated; clearing the record fails.
        (
            "before the record is cleared",
            "implementation.json",
            |e| matches!(e, Event::PlanInvalidated { .. }),
            false,
        ),
    ];
    for (point, file, when, verifier_again) in points {
        let ws = workspace(&[("specs/a.md", SPEC)]);
        let dir = ws.path();
        implementation(dir, &[("a", 1, &["Write greet.sh"])]);
        let target = dir.join(file);
        let ralph1 = build(dir, first_agent(), block_at(target.clone(), when));
        let err = ralph1.build_specs().await.unwrap_err().to_string();
        // The failed write is named (the archive's rename names its source).
        let named = if file.contains("attempt") {
            "specs/plans/a.md"
        } else {
            file
        };
        assert!(err.contains(named), "{point}: {err}");
        drop(ralph1);
        unblock(&target);

        let second = second_agent(verifier_again);
        let ralph2 = build(dir, second.clone(), Recorder::default());
        let outcome = ralph2.build_specs().await.unwrap();
        assert_eq!(specs_complete(&outcome), (1, 1), "{point}");
        second.verify().unwrap();
        let verifications = prompts(&second, Role::Verify).len();
        assert_eq!(verifications, 1 + usize::from(verifier_again), "{point}");
        assert_eq!(end_state(dir), want, "{point}");
    }
}

/// A `post-commit` hook that makes the next write of implementation.json fail: the run
/// stops right after the spec's commit, before the spec is recorded as completed.
/// Makes the removal of the note that the spec's commit is due fail, right after the
/// commit (a `post-commit` hook puts a folder in its place).
fn stop_after_commit(dir: &Path) {
    let hook = dir.join(".git/hooks/post-commit");
    std::fs::create_dir_all(hook.parent().unwrap()).unwrap();
    std::fs::write(
        &hook,
        "#!/bin/sh\nmv .ralph/spec-commit-due .ralph/spec-commit-due.aside\nmkdir -p .ralph/spec-commit-due/blocked\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// What every complete end shows: the spec completed in the file, its entry, nothing
/// uncommitted, and HEAD the spec's one commit holding all of it.
fn assert_completed_in_one_commit(dir: &Path) {
    let spec = &load(dir).specs[0];
    assert_eq!(spec.status, Status::Completed);
    assert!(!spec.verified, "cleared once completed");
    assert_eq!(git(dir, &["status", "--porcelain"]), "");
    assert_eq!(commits(dir), ["Spec a", "Initial commit"]);
    let shown = git(dir, &["show", "--name-only", "--format=", "HEAD"]);
    for file in ["greet.sh", "implementation.json", "PROGRESS.md"] {
        assert!(shown.contains(file), "{file} in {shown}");
    }
    assert_eq!(progress_headings(dir), ["a: Spec a"]);
}

fn one_task_agent() -> Arc<FakeAgent> {
    Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "a", planner("# Plan: a"))
            .on(
                Role::Build,
                "a-1",
                ralph::agent::Script::new()
                    .write("greet.sh", "echo hi\n")
                    .answer("ok\n<TASK_DONE>"),
            )
            .on(Role::Verify, "a", accept()),
    )
}

/// Stopped after the spec's git commit, before its note was cleared: the restart runs no
/// agent, makes no second commit, and says which commit the spec's is.
#[tokio::test]
async fn a_stop_after_the_commit_makes_no_second_commit_and_no_second_verification() {
    let ws = workspace(&[("specs/a.md", SPEC)]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["Write greet.sh"])]);
    stop_after_commit(dir);
    // Unconfined: the hook stands in for a crash between the commit and the note's removal,
    // so it must reach `.ralph/`, which the sandbox keeps from every hook.
    let ralph1 = Ralph::builder()
        .workspace(dir)
        .agent(one_task_agent())
        .config("sandbox.mode", "off")
        .build()
        .unwrap();
    let err = ralph1.build_specs().await.unwrap_err().to_string();
    assert!(err.contains("spec-commit-due"), "{err}");
    drop(ralph1);
    std::fs::remove_file(dir.join(".git/hooks/post-commit")).unwrap();
    unblock(&dir.join(".ralph/spec-commit-due"));
    assert_eq!(commits(dir), ["Spec a", "Initial commit"]);

    // No script at all: any agent run would fail the test.
    let idle = Arc::new(FakeAgent::new());
    let recorder = Recorder::default();
    let ralph2 = build(dir, idle.clone(), recorder.clone());
    let outcome = ralph2.build_specs().await.unwrap();
    assert_eq!(specs_complete(&outcome), (0, 0));
    assert!(idle.requests().is_empty(), "{:?}", idle.requests());
    assert_completed_in_one_commit(dir);
    let head = git(dir, &["rev-parse", "HEAD"]).trim().to_owned();
    assert_eq!(
        recorder.of_kind("spec_committed")[0]["commit"],
        head.as_str()
    );
    assert!(!dir.join(".ralph/spec-commit-due").exists());
}

/// Stopped after the spec was marked completed, before the commit (a `pre-commit` hook
/// refuses it): the restart commits the spec's work with its completion, named after the
/// spec, with no verifier run.
#[tokio::test]
async fn a_stop_before_the_commit_commits_on_restart_without_a_second_verification() {
    let ws = workspace(&[("specs/a.md", SPEC)]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["Write greet.sh"])]);
    let hook = dir.join(".git/hooks/pre-commit");
    std::fs::create_dir_all(hook.parent().unwrap()).unwrap();
    std::fs::write(&hook, "#!/bin/sh\nexit 1\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let ralph1 = build(dir, one_task_agent(), Recorder::default());
    ralph1.build_specs().await.unwrap_err();
    drop(ralph1);
    std::fs::remove_file(&hook).unwrap();
    assert_eq!(load(dir).specs[0].status, Status::Completed);
    assert_eq!(commits(dir), ["Initial commit"]);

    let idle = Arc::new(FakeAgent::new());
    let ralph2 = build(dir, idle.clone(), Recorder::default());
    let outcome = ralph2.build_specs().await.unwrap();
    assert_eq!(specs_complete(&outcome), (1, 0));
    assert!(idle.requests().is_empty());
    assert_completed_in_one_commit(dir);
}

/// Stopped after the spec was marked completed, before its PROGRESS.md entry was appended
/// (the append fails): the restart appends the entry and commits it with the spec's work,
/// with no verifier run; a third run writes nothing.
#[tokio::test]
async fn a_stop_before_the_progress_entry_commits_it_with_the_spec_on_restart() {
    let ws = workspace(&[("specs/a.md", SPEC)]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["Write greet.sh"])]);
    let progress = dir.join("PROGRESS.md");
    let accepted = |e: &Event| matches!(e, Event::Verdict { accepted: true, .. });
    let ralph1 = build(dir, one_task_agent(), block_at(progress.clone(), accepted));
    let err = ralph1.build_specs().await.unwrap_err().to_string();
    assert!(err.contains("PROGRESS.md"), "{err}");
    drop(ralph1);
    unblock(&progress);
    assert!(!progress.exists());
    assert_eq!(commits(dir), ["Initial commit"]);

    let idle = Arc::new(FakeAgent::new());
    let ralph2 = build(dir, idle.clone(), Recorder::default());
    let outcome = ralph2.build_specs().await.unwrap();
    assert_eq!(specs_complete(&outcome), (1, 0));
    assert!(idle.requests().is_empty());
    assert_completed_in_one_commit(dir);
    let text = std::fs::read_to_string(&progress).unwrap();

    drop(ralph2);
    let ralph3 = build(dir, idle, Recorder::default());
    ralph3.build_specs().await.unwrap();
    assert_eq!(std::fs::read_to_string(&progress).unwrap(), text);
    assert_eq!(commits(dir), ["Spec a", "Initial commit"]);
}

/// The progress entries' headings, in file order.
fn progress_headings(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("PROGRESS.md"))
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("## "))
        .map(|l| l.split_once(" · ").unwrap().1.to_owned())
        .collect()
}

/// Two specs; the run stops before the first one's entry. The restart builds the second
/// spec and PROGRESS.md ends with both entries, in completion order, each once.
#[tokio::test]
async fn a_missed_entry_comes_before_the_next_specs_entry() {
    let ws = workspace(&[("specs/a.md", SPEC), ("specs/b.md", "# B\n")]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["Write greet.sh"]), ("b", 2, &["Do b"])]);
    let progress = dir.join("PROGRESS.md");
    let accepted = |e: &Event| matches!(e, Event::Verdict { accepted: true, .. });
    let ralph1 = build(dir, one_task_agent(), block_at(progress.clone(), accepted));
    ralph1.build_specs().await.unwrap_err();
    drop(ralph1);
    unblock(&progress);

    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "b", planner("# Plan: b"))
            .on(Role::Build, "b-1", done())
            .on(Role::Verify, "b", accept()),
    );
    let ralph2 = build(dir, agent, Recorder::default());
    let outcome = ralph2.build_specs().await.unwrap();
    // a's commit, due from the first run, and b.
    assert_eq!(specs_complete(&outcome), (2, 1));
    assert_eq!(progress_headings(dir), ["a: Spec a", "b: Spec b"]);
    assert_eq!(commits(dir), ["Spec b", "Spec a", "Initial commit"]);
    assert_eq!(git(dir, &["status", "--porcelain"]), "");
    let text = std::fs::read_to_string(&progress).unwrap();
    assert_eq!(text.matches("# Progress").count(), 1, "{text}");
}
