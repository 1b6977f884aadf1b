//! Seed 002's planning phase in build mode: every resume rule, plan invalidation, ordinary
//! rejection, planner failures, nested and escaping spec paths; real git, FakeAgent.

#![cfg(unix)]
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;

use crate::support::specs::*;
use crate::support::{Recorder, specs_complete};
use ralph::agent::Script;
use ralph::specs::Status;
use ralph::specs::plan_files::{PlanFiles, PlanStatus};
use ralph::{FakeAgent, Ralph, Role, SpecsOutcome};
use serde_json::Value;

const SPEC: &str = "# Greeter\n\nWrite greet.sh.\n";

fn meta(dir: &Path, rel: &str) -> Value {
    let text = std::fs::read_to_string(dir.join(format!("specs/plans/{rel}.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn plan_md(dir: &Path, rel: &str) -> String {
    std::fs::read_to_string(dir.join(format!("specs/plans/{rel}.md"))).unwrap()
}

/// No json and no md → the planner runs (read-only role); ralph writes the md (the answer
/// minus the magic phrase) and an active json; the implementer and the verifier get the plan.
#[tokio::test]
async fn a_fresh_spec_is_planned_and_the_plan_reaches_implementer_and_verifier() {
    let ws = workspace(&[("specs/a.md", SPEC)]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["Write greet.sh"])]);
    let agent = Arc::new(
        FakeAgent::new()
            .on(
                Role::Planner,
                "a",
                planner("# Plan: a\n\n## Steps\n1. Use printf, not echo."),
            )
            .on(Role::Build, "a-1", done())
            .on(Role::Verify, "a", accept()),
    );
    let recorder = Recorder::default();
    let ralph = ralph(dir, agent.clone(), recorder.clone(), vec![]);
    let outcome = ralph.build_specs().await.unwrap();
    assert_eq!(specs_complete(&outcome), (1, 1));
    assert!(!Role::Planner.may_write(), "the planner is read-only");

    assert_eq!(
        plan_md(dir, "a"),
        "# Plan: a\n\n## Steps\n1. Use printf, not echo.\n"
    );
    let info = meta(dir, "a");
    assert_eq!(info["status"], "active");
    assert_eq!(info["attempt"], 1);
    assert_eq!(info["spec_id"], "a");
    assert!(info["created_at_utc"].as_str().unwrap().starts_with("20"));

    let planner_prompt = &prompts(&agent, Role::Planner)[0].1;
    assert!(planner_prompt.contains("Write greet.sh."), "spec text");
    assert!(planner_prompt.contains("specs/plans/a.md"), "plan path");
    assert!(planner_prompt.contains("do NOT modify any file"));
    let build = &prompts(&agent, Role::Build)[0].1;
    assert!(build.contains("## Implementation Plan"), "{build}");
    assert!(build.contains("1. Use printf, not echo."), "{build}");
    let verify = &prompts(&agent, Role::Verify)[0].1;
    assert!(verify.contains("1. Use printf, not echo."), "{verify}");
    assert!(verify.contains("PLAN_INVALIDATION"), "{verify}");
    assert_eq!(recorder.of_kind("plan_written").len(), 1);
}

/// Seed 002's planner prompt: the paths (workspace root, ralph home, run logs, plan output)
/// and the SCRATCHPAD content, bounded.
#[tokio::test]
async fn the_planner_prompt_has_seed_002s_paths_and_the_scratchpad() {
    let ws = workspace(&[("specs/a.md", SPEC)]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["Write greet.sh"])]);
    let big = format!(
        "NOTE-HEAD: greet.sh lives in bin/\n{}\nNOTE-TAIL\n",
        "x".repeat(20_000)
    );
    write(dir, ".ralph/SCRATCHPAD.md", &big);
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "a", planner("# Plan: a"))
            .on(Role::Build, "a-1", done())
            .on(Role::Verify, "a", accept()),
    );
    let ralph = ralph(dir, agent.clone(), Recorder::default(), vec![]);
    ralph.build_specs().await.unwrap();
    let prompt = &prompts(&agent, Role::Planner)[0].1;
    let shown = |p: &Path| p.display().to_string();
    assert!(
        prompt.contains(&format!("Workspace root: {}\n", shown(dir))),
        "{prompt}"
    );
    assert!(
        prompt.contains(&shown(&dir.join(".ralph"))),
        "ralph home: {prompt}"
    );
    assert!(
        prompt.contains(&shown(&dir.join("build/ralph-logs/runs/a/"))),
        "{prompt}"
    );
    assert!(
        prompt.contains(&shown(&dir.join("specs/plans/a.md"))),
        "{prompt}"
    );
    assert!(
        prompt.contains(&shown(&dir.join("specs/a.md"))),
        "spec file: {prompt}"
    );
    assert!(
        prompt.contains(&shown(&dir.join(".ralph/SCRATCHPAD.md"))),
        "{prompt}"
    );
    assert!(prompt.contains("## SCRATCHPAD"), "{prompt}");
    assert!(prompt.contains("NOTE-HEAD: greet.sh lives in bin/"));
    assert!(prompt.contains("NOTE-TAIL"), "the tail is kept too");
    assert!(prompt.len() < 16_000, "bounded: {} bytes", prompt.len());
}

/// Without a scratchpad (or with a blank one) the prompt has no scratchpad section.
#[tokio::test]
async fn the_planner_prompt_has_no_scratchpad_section_without_one() {
    let ws = workspace(&[("specs/a.md", SPEC)]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["Write greet.sh"])]);
    write(dir, ".ralph/SCRATCHPAD.md", "  \n");
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "a", planner("# Plan: a"))
            .on(Role::Build, "a-1", done())
            .on(Role::Verify, "a", accept()),
    );
    let ralph = ralph(dir, agent.clone(), Recorder::default(), vec![]);
    ralph.build_specs().await.unwrap();
    let prompt = &prompts(&agent, Role::Planner)[0].1;
    assert!(!prompt.contains("## SCRATCHPAD"), "{prompt}");
    assert!(prompt.contains("none yet"), "{prompt}");
}

/// Seed 002's SCRATCHPAD is the planner's memory across runs: the read-only planner hands
/// its notes back in a `<SCRATCHPAD>` section of its answer; ralph keeps them out of the
/// plan, writes them to `.ralph/SCRATCHPAD.md` (out of `git status`), and the next run's
/// planner sees them; an empty section clears them.
#[tokio::test]
async fn the_planners_scratchpad_is_kept_by_ralph_and_shown_to_the_next_run() {
    let ws = workspace(&[("specs/a.md", SPEC), ("specs/b.md", SPEC)]);
    let dir = ws.path();
    implementation(
        dir,
        &[("a", 1, &["Write greet.sh"]), ("b", 2, &["Write bye.sh"])],
    );
    let notes = "greet.sh lives in bin/\ntests use plain sh";
    let agent = Arc::new(FakeAgent::new().on(
        Role::Planner,
        "a",
        planner(&format!(
            "# Plan: a\n1. bin/greet.sh\n<SCRATCHPAD>\n{notes}\n</SCRATCHPAD>"
        )),
    ));
    // Run 1 stops after its one session, the planner's.
    let first = Ralph::builder()
        .workspace(dir)
        .agent(agent.clone())
        .once(true)
        .build()
        .unwrap();
    first.build_specs().await.unwrap();
    drop(first);
    let kept = dir.join(".ralph/SCRATCHPAD.md");
    assert_eq!(
        std::fs::read_to_string(&kept).unwrap(),
        format!("{notes}\n")
    );
    let plan = std::fs::read_to_string(dir.join("specs/plans/a.md")).unwrap();
    assert!(
        plan.contains("1. bin/greet.sh")
            && !plan.contains("SCRATCHPAD")
            && !plan.contains("plain sh"),
        "{plan}"
    );
    assert!(!git(dir, &["status", "--porcelain"]).contains("SCRATCHPAD"));

    // Run 2: the next planner (of spec b) sees the notes, and clears them.
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Build, "a-1", done())
            .on(Role::Verify, "a", accept())
            .on(
                Role::Planner,
                "b",
                planner("# Plan: b\n<SCRATCHPAD>\n</SCRATCHPAD>"),
            )
            .on(Role::Build, "b-1", done())
            .on(Role::Verify, "b", accept()),
    );
    let second = ralph(dir, agent.clone(), Recorder::default(), vec![]);
    assert_eq!(specs_complete(&second.build_specs().await.unwrap()), (2, 2));
    let prompt = &prompts(&agent, Role::Planner)[0].1;
    assert!(prompt.contains("## SCRATCHPAD"), "{prompt}");
    assert!(prompt.contains(notes), "{prompt}");
    assert!(!kept.exists(), "an empty section clears the scratchpad");
}

/// json active + md → no planner run. md without json → adopted as a hand-written plan, json
/// created, no planner run.
#[tokio::test]
async fn an_active_plan_is_reused_and_a_hand_written_one_adopted() {
    let ws = workspace(&[("specs/a.md", SPEC), ("specs/b.md", SPEC)]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["One"]), ("b", 2, &["Two"])]);
    let plans = PlanFiles::new(dir, "specs");
    plans
        .write_plan("a", "a", "# Plan: a\nactive plan", 1)
        .unwrap();
    write(dir, "specs/plans/b.md", "# Plan: b\nhand-written plan\n");
    let agent = Arc::new(
        FakeAgent::new()
            .always(Role::Build, done())
            .always(Role::Verify, accept()),
    );
    let ralph = ralph(dir, agent.clone(), Recorder::default(), vec![]);
    let outcome = ralph.build_specs().await.unwrap();
    assert_eq!(specs_complete(&outcome), (2, 2));
    assert!(prompts(&agent, Role::Planner).is_empty(), "no planner ran");
    let builds = prompts(&agent, Role::Build);
    assert!(builds[0].1.contains("active plan"));
    assert!(builds[1].1.contains("hand-written plan"));
    let b = meta(dir, "b");
    assert_eq!(b["status"], "active");
    assert_eq!(b["attempt"], 1);
    assert_eq!(plan_md(dir, "b"), "# Plan: b\nhand-written plan\n");
}

/// json invalidated → the planner runs again with the previous plan and the reason.
#[tokio::test]
async fn an_invalidated_plan_is_replanned_with_the_old_plan_and_the_reason() {
    let ws = workspace(&[("specs/a.md", SPEC)]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["One"])]);
    let plans = PlanFiles::new(dir, "specs");
    plans
        .write_plan("a", "a", "# Plan: a\nuse bash arrays", 1)
        .unwrap();
    plans.invalidate("a", "bash is not available").unwrap();
    let agent = Arc::new(
        FakeAgent::new()
            .on_attempt(Role::Planner, "a", 2, planner("# Plan: a\nuse POSIX sh"))
            .on(Role::Build, "a-1", done())
            .on(Role::Verify, "a", accept()),
    );
    let ralph = ralph(dir, agent.clone(), Recorder::default(), vec![]);
    ralph.build_specs().await.unwrap();
    let prompt = &prompts(&agent, Role::Planner)[0].1;
    assert!(
        prompt.contains("The Previous Plan Was Invalidated"),
        "{prompt}"
    );
    assert!(prompt.contains("bash is not available"), "{prompt}");
    assert!(prompt.contains("use bash arrays"), "{prompt}");
    let info = meta(dir, "a");
    assert_eq!(info["status"], "active");
    assert_eq!(info["attempt"], 2);
    assert_eq!(plan_md(dir, "a"), "# Plan: a\nuse POSIX sh\n");
    assert!(dir.join("specs/plans/a.attempt-1.md").exists());
}

/// Audit row 002-R12: a person invalidates the plan by hand (the json's `status` set to
/// `invalidated`, the plan left in `<rel>.md`): the plan is kept as `<rel>.attempt-1.md`, as
/// ralph's own invalidation keeps it, and the re-planner gets it with the reason.
#[tokio::test]
async fn a_plan_invalidated_by_hand_is_kept_and_shown_to_the_replanner() {
    let ws = workspace(&[("specs/a.md", SPEC)]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["One"])]);
    let plans = PlanFiles::new(dir, "specs");
    plans
        .write_plan("a", "a", "# Plan: a\nuse bash arrays", 1)
        .unwrap();
    let mut info = meta(dir, "a");
    info["status"] = "invalidated".into();
    info["invalidation_reason"] = "bash is not available".into();
    std::fs::write(
        dir.join("specs/plans/a.json"),
        serde_json::to_string_pretty(&info).unwrap(),
    )
    .unwrap();
    let agent = Arc::new(
        FakeAgent::new()
            .on_attempt(Role::Planner, "a", 2, planner("# Plan: a\nuse POSIX sh"))
            .on(Role::Build, "a-1", done())
            .on(Role::Verify, "a", accept()),
    );
    let recorder = Recorder::default();
    let ralph = ralph(dir, agent.clone(), recorder.clone(), vec![]);
    ralph.build_specs().await.unwrap();
    let prompt = &prompts(&agent, Role::Planner)[0].1;
    assert!(prompt.contains("bash is not available"), "{prompt}");
    assert!(prompt.contains("use bash arrays"), "the old plan: {prompt}");
    let kept = std::fs::read_to_string(dir.join("specs/plans/a.attempt-1.md")).unwrap();
    assert_eq!(kept, "# Plan: a\nuse bash arrays\n");
    assert_eq!(plan_md(dir, "a"), "# Plan: a\nuse POSIX sh\n");
    assert_eq!(meta(dir, "a")["attempt"], 2);
    let invalidated = recorder.of_kind("plan_invalidated");
    assert_eq!(invalidated[0]["archived"], "specs/plans/a.attempt-1.md");
    assert_eq!(invalidated[0]["reason"], "bash is not available");
}

/// The verifier answers `PLAN_INVALIDATION: <reason>` → the plan is archived as
/// `<rel>.attempt-1.md`, the json records the reason, the planner re-plans with both, and a
/// rework task is implemented with the new plan before the verifier accepts.
#[tokio::test]
async fn plan_invalidation_archives_replans_and_reworks() {
    let ws = workspace(&[("specs/a.md", SPEC)]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["Write greet.sh"])]);
    let agent = Arc::new(
        FakeAgent::new()
            .on_attempt(Role::Planner, "a", 1, planner("# Plan: a\nedit lib/greet.py"))
            .on_attempt(Role::Planner, "a", 2, planner("# Plan: a\nwrite greet.sh in sh"))
            .on(Role::Build, "a-1", done())
            .on(Role::Build, "a-2", done())
            .on_attempt(
                Role::Verify,
                "a",
                1,
                reject("Wrong language.\nPLAN_INVALIDATION: the spec asks for sh, the plan uses Python"),
            )
            .on_attempt(Role::Verify, "a", 2, accept()),
    );
    let recorder = Recorder::default();
    let ralph = ralph(dir, agent.clone(), recorder.clone(), vec![]);
    let outcome = ralph.build_specs().await.unwrap();
    assert_eq!(specs_complete(&outcome), (1, 2));
    agent.verify().unwrap();

    let archived = std::fs::read_to_string(dir.join("specs/plans/a.attempt-1.md")).unwrap();
    assert!(archived.contains("edit lib/greet.py"));
    assert_eq!(plan_md(dir, "a"), "# Plan: a\nwrite greet.sh in sh\n");
    let info = meta(dir, "a");
    assert_eq!(info["status"], "active");
    assert_eq!(info["attempt"], 2);
    let replan = &prompts(&agent, Role::Planner)[1].1;
    assert!(
        replan.contains("the spec asks for sh, the plan uses Python"),
        "{replan}"
    );
    assert!(replan.contains("edit lib/greet.py"), "{replan}");

    let rework = &prompts(&agent, Role::Build)[1].1;
    assert!(
        rework.contains("# Task: Rework per the new plan: the spec asks for sh"),
        "{rework}"
    );
    assert!(
        rework.contains("write greet.sh in sh"),
        "the new plan: {rework}"
    );
    assert!(
        rework.contains("Wrong language."),
        "the verifier's feedback: {rework}"
    );
    let invalidated = recorder.of_kind("plan_invalidated");
    assert_eq!(invalidated[0]["archived"], "specs/plans/a.attempt-1.md");
    let spec = &load(dir).specs[0];
    assert_eq!(spec.attempts, 1);
    assert_eq!(spec.status, Status::Completed);
}

/// The same, stopped right after the invalidation: a new start sees json `invalidated` and
/// re-plans (seed 002's resume rule, after a real invalidation).
#[tokio::test]
async fn an_invalidation_survives_a_restart() {
    let ws = workspace(&[("specs/a.md", SPEC)]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["One"])]);
    let stop = ralph::StopToken::new();
    let cancel = stop.clone();
    let first = Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "a", planner("# Plan: a\nold"))
            .on(Role::Build, "a-1", done())
            .on(
                Role::Verify,
                "a",
                reject("PLAN_INVALIDATION: wrong approach"),
            ),
    );
    let ralph1 = ralph::Ralph::builder()
        .workspace(dir)
        .agent(first)
        .observer(move |e: &ralph::Event| {
            if matches!(e, ralph::Event::PlanInvalidated { .. }) {
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
    let info = meta(dir, "a");
    assert_eq!(info["status"], "invalidated");
    assert_eq!(info["invalidation_reason"], "wrong approach");
    assert!(
        info["invalidated_at_utc"]
            .as_str()
            .unwrap()
            .starts_with("20")
    );
    assert!(!dir.join("specs/plans/a.md").exists());
    assert_eq!(
        PlanFiles::new(dir, "specs")
            .load_info("a")
            .unwrap()
            .unwrap()
            .status,
        PlanStatus::Invalidated
    );

    let second = Arc::new(
        FakeAgent::new()
            .on_attempt(Role::Planner, "a", 2, planner("# Plan: a\nnew"))
            .on(Role::Build, "a-2", done())
            .on(Role::Verify, "a", accept()),
    );
    let ralph2 = crate::support::specs::ralph(dir, second.clone(), Recorder::default(), vec![]);
    ralph2.build_specs().await.unwrap();
    second.verify().unwrap();
    assert!(
        prompts(&second, Role::Planner)[0]
            .1
            .contains("wrong approach")
    );
}

/// An ordinary rejection keeps the plan and re-implements with the verifier's feedback.
#[tokio::test]
async fn an_ordinary_rejection_keeps_the_plan_and_carries_the_feedback() {
    let ws = workspace(&[("specs/a.md", SPEC)]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["Write greet.sh"])]);
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "a", planner("# Plan: a\nthe plan"))
            .on(Role::Build, "a-1", done())
            .on(Role::Build, "a-2", done())
            .on_attempt(
                Role::Verify,
                "a",
                1,
                reject("greet.sh ignores its argument"),
            )
            .on_attempt(Role::Verify, "a", 2, accept()),
    );
    let ralph = ralph(dir, agent.clone(), Recorder::default(), vec![]);
    let outcome = ralph.build_specs().await.unwrap();
    assert_eq!(specs_complete(&outcome), (1, 2));
    assert_eq!(prompts(&agent, Role::Planner).len(), 1, "no re-plan");
    assert!(!dir.join("specs/plans/a.attempt-1.md").exists());
    assert_eq!(meta(dir, "a")["attempt"], 1);
    let fix = &prompts(&agent, Role::Build)[1].1;
    assert!(fix.contains("Address the verifier's findings: greet.sh ignores its argument"));
    assert!(fix.contains("The verifier rejected the spec: greet.sh ignores its argument"));
    assert!(fix.contains("the plan"), "same plan: {fix}");
}

/// Planner failures (no magic phrase, an agent failure) are retried with a backoff and
/// count against `max_attempts`; when they run out, the spec stops with the reason.
#[tokio::test]
async fn planner_failures_retry_with_backoff_and_count_against_the_limit() {
    let ws = workspace(&[("specs/a.md", SPEC)]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["One"])]);
    let agent = Arc::new(
        FakeAgent::new()
            .then(Script::new().answer("# Plan: a\nI think this is it."))
            .then(Script::new().fail("the model crashed"))
            .then(planner("# Plan: a\nfinally"))
            .then(done())
            .then(accept()),
    );
    let recorder = Recorder::default();
    let ralph = ralph(dir, agent.clone(), recorder.clone(), vec![]);
    let outcome = ralph.build_specs().await.unwrap();
    assert_eq!(specs_complete(&outcome), (1, 1));
    assert_eq!(prompts(&agent, Role::Planner).len(), 3);
    let warnings = recorder.warnings();
    assert!(
        warnings[0]["message"]
            .as_str()
            .unwrap()
            .contains("PLAN_COMPLETE"),
        "{warnings:?}"
    );
    assert!(
        warnings[1]["message"]
            .as_str()
            .unwrap()
            .contains("retrying in 20ms")
    );
    assert_eq!(load(dir).specs[0].attempts, 2);

    // Out of attempts: the spec stops, blocked, with the last reason.
    let ws = workspace(&[("specs/a.md", SPEC)]);
    implementation(ws.path(), &[("a", 1, &["One"])]);
    let agent = Arc::new(FakeAgent::new().always(Role::Planner, Script::new().answer("no phrase")));
    let ralph = crate::support::specs::ralph(ws.path(), agent.clone(), Recorder::default(), vec![]);
    let outcome = ralph.build_specs().await.unwrap();
    let SpecsOutcome::AttemptsExhausted {
        spec,
        attempts,
        reason,
    } = &outcome
    else {
        panic!("{outcome:?}");
    };
    assert_eq!((spec.as_str(), *attempts), ("a", 3));
    assert!(reason.contains("planner"), "{reason}");
    assert_eq!(prompts(&agent, Role::Planner).len(), 3);
    assert_eq!(load(ws.path()).specs[0].status, Status::Blocked);
    assert!(!ws.path().join("specs/plans/a.md").exists());
}

/// Nested specs are mirrored under specs/plans; a spec outside the specs folder is refused
/// before any agent runs.
#[tokio::test]
async fn nested_specs_are_mirrored_and_escaping_specs_refused() {
    let ws = workspace(&[("specs/area/0002-bar.md", SPEC), ("secret.md", "x")]);
    let dir = ws.path();
    let mut plan = ralph::specs::Implementation::default();
    let mut spec = ralph::specs::SpecEntry::new("0002-bar", "specs/area/0002-bar.md");
    spec.tasks
        .push(ralph::specs::TaskEntry::new("0002-bar-1", "x"));
    plan.specs.push(spec);
    store(dir).save(&mut plan, "test").unwrap();
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Planner, "0002-bar", planner("# Plan: 0002-bar"))
            .on(Role::Build, "0002-bar-1", done())
            .on(Role::Verify, "0002-bar", accept()),
    );
    let ralph = ralph(dir, agent, Recorder::default(), vec![]);
    ralph.build_specs().await.unwrap();
    assert!(dir.join("specs/plans/area/0002-bar.md").exists());
    assert_eq!(meta(dir, "area/0002-bar")["spec_rel"], "area/0002-bar");
    drop(ralph);

    // `..`, outside the folder, absolute, and a symlink inside the folder pointing out. Each
    // comes after a good spec (priority 2): it is refused before any agent runs.
    std::os::unix::fs::symlink(dir.join("secret.md"), dir.join("specs/link.md")).unwrap();
    write(dir, "specs/good.md", SPEC);
    for (file, why) in [
        ("specs/../secret.md", "`..`"),
        ("secret.md", "outside the folder specs"),
        ("/etc/hostname", "absolute"),
        ("specs/link.md", "outside the folder specs"),
    ] {
        let mut plan = ralph::specs::Implementation::default();
        let mut good = ralph::specs::SpecEntry::new("good", "specs/good.md");
        good.priority = 1;
        good.tasks.push(ralph::specs::TaskEntry::new("good-1", "x"));
        let mut spec = ralph::specs::SpecEntry::new("evil", file);
        spec.priority = 2;
        spec.tasks.push(ralph::specs::TaskEntry::new("evil-1", "x"));
        plan.specs.extend([good, spec]);
        store(dir).save(&mut plan, "test").unwrap();
        let agent = Arc::new(FakeAgent::new());
        let ralph = crate::support::specs::ralph(dir, agent.clone(), Recorder::default(), vec![]);
        let err = ralph.build_specs().await.unwrap_err().to_string();
        assert!(err.contains(file) && err.contains(why), "{file}: {err}");
        assert!(agent.requests().is_empty(), "{file}");
    }
}

/// Seed 002: the planner must not modify code. ralph holds it, whatever the agent's own
/// read-only mode: a planner that changed a tracked file and wrote a new one fails its
/// round (its plan is not used) and what it wrote is set aside in a stash entry; an
/// ignored path it wrote (`build/`) and the user's own untracked file from before the run
/// are left alone. The next, clean, round plans.
#[tokio::test]
async fn a_planner_that_writes_fails_and_its_writes_are_set_aside() {
    let ws = workspace(&[("specs/a.md", SPEC)]);
    let dir = ws.path();
    implementation(dir, &[("a", 1, &["Write greet.sh"])]);
    git(dir, &["add", "-A"]);
    git(
        dir,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "commit",
            "-q",
            "-m",
            "plan",
        ],
    );
    write(dir, "mine.txt", "the user's own notes\n");
    let agent = Arc::new(
        FakeAgent::new()
            .on(
                Role::Planner,
                "a",
                Script::new()
                    .write("specs/a.md", "# Rewritten by the planner\n")
                    .write("src/hack.rs", "fn main() {}\n")
                    .write("build/cache.bin", "ignored\n")
                    .answer("# Plan: a\n1. ignore the spec\n\nPLAN_COMPLETE"),
            )
            // The same plan round: a failed round is retried under its number.
            .on(Role::Planner, "a", planner("# Plan: a\n1. greet.sh"))
            .on(Role::Build, "a-1", done())
            .on(Role::Verify, "a", accept()),
    );
    let recorder = Recorder::default();
    let ralph = ralph(dir, agent.clone(), recorder.clone(), vec![]);
    let outcome = ralph.build_specs().await.unwrap();
    assert_eq!(specs_complete(&outcome), (1, 1));
    assert_eq!(prompts(&agent, Role::Planner).len(), 2);

    assert_eq!(
        std::fs::read_to_string(dir.join("specs/a.md")).unwrap(),
        SPEC
    );
    assert!(!dir.join("src/hack.rs").exists());
    assert_eq!(
        std::fs::read_to_string(dir.join("build/cache.bin")).unwrap(),
        "ignored\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("mine.txt")).unwrap(),
        "the user's own notes\n"
    );
    let plan = std::fs::read_to_string(dir.join("specs/plans/a.md")).unwrap();
    assert!(
        plan.contains("1. greet.sh") && !plan.contains("ignore the spec"),
        "{plan}"
    );
    let stash = git(dir, &["stash", "list"]);
    assert!(
        stash.contains("ralph: what the read-only planner of a wrote"),
        "{stash}"
    );
    let kept = git(
        dir,
        &[
            "stash",
            "show",
            "--include-untracked",
            "--name-only",
            "stash@{0}",
        ],
    );
    assert!(
        kept.contains("specs/a.md") && kept.contains("src/hack.rs"),
        "{kept}"
    );
    assert!(
        !kept.contains("mine.txt") && !kept.contains("build/"),
        "{kept}"
    );
    let warnings = recorder.warnings();
    assert!(
        warnings.iter().any(|w| {
            let m = w["message"].as_str().unwrap();
            m.contains("the read-only planner of a changed the work tree")
                && m.contains("specs/a.md, src/hack.rs")
        }),
        "{warnings:?}"
    );
    assert_eq!(load(dir).specs[0].attempts, 1, "the broken round counts");
}
