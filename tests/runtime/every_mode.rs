//! The promises the runtime keeps in every mode (the construct loop, plan mode, build mode,
//! threads), one test per mode: a dry run writes nothing; a state file lost under a run is an
//! error naming it, never a run that reports success without its state; one rule for spec
//! paths; the workspace's lock and the sweep of a killed run's leftovers even with a store
//! passed to the builder; the lock's note put back between agent runs; `once` in build
//! mode; a torn tail repaired at load is an event.
//! (Signals are in `signal_matrix.rs`.)

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::support::{Recorder, accept as accepts, done, no_gaps, tasks, tree, write};
use async_trait::async_trait;
use ralph::agent::{Agent, AgentError, AgentRequest, AgentRun, FakeAgent, Script};
use ralph::store::StoreError;
use ralph::thread::PhaseKind;
use ralph::{Error, Event, JsonlStore, MemoryStore, Outcome, Ralph, Role, SpecsOutcome};

/// An agent that deletes `victim` before its first run, then runs `inner`.
struct DeletesFirst {
    victim: PathBuf,
    inner: FakeAgent,
}

#[async_trait]
impl Agent for DeletesFirst {
    fn name(&self) -> &str {
        "deletes-first"
    }

    async fn run(&self, request: AgentRequest) -> Result<AgentRun, AgentError> {
        if self.victim.exists() {
            std::fs::remove_file(&self.victim).unwrap();
        }
        self.inner.run(request).await
    }
}

fn one_task_agent() -> FakeAgent {
    FakeAgent::new()
        .on(Role::Investigate, "i-1", tasks(&[("Write a", "a exists")]))
        .on(Role::Build, "t-1", done())
        .on(Role::Verify, "t-1", accepts("ok"))
        .always(Role::GapAnalysis, no_gaps())
}

/// A build-mode workspace: one spec with `tasks`, a hand-written plan (no planner runs).
fn build_workspace(tasks: &[&str]) -> tempfile::TempDir {
    let dir = crate::support::specs::workspace(&[("specs/s.md", "# S\nDo it.\n")]);
    write(dir.path(), "specs/plans/s.md", "# Plan: s\n1. Do it.\n");
    crate::support::specs::implementation(dir.path(), &[("s", 1, tasks)]);
    dir
}

// ── A dry run writes nothing ────────────────────────────────────────────────────────────

#[tokio::test]
async fn a_construct_dry_run_writes_nothing_fresh_or_resumed() {
    let dir = crate::support::workspace("# S\nWrite a.\n");
    let before = tree(dir.path());
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(one_task_agent())
        .build()
        .unwrap();
    let report = ralph.dry_run("spec.md").await.unwrap();
    assert_eq!(report.template.as_deref(), Some("investigate"));
    drop(ralph);
    assert_eq!(
        tree(dir.path()),
        before,
        "no .ralph/, no lock, no empty state file"
    );

    // With state: one iteration run, then a dry run of the next.
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(FakeAgent::new().on(Role::Investigate, "i-1", tasks(&[("Write a", "ok")])))
        .once(true)
        .build()
        .unwrap();
    let _ = ralph.construct("spec.md").await;
    drop(ralph);
    let before = tree(dir.path());
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(FakeAgent::new())
        .build()
        .unwrap();
    let report = ralph.dry_run("spec.md").await.unwrap();
    assert_eq!(report.template.as_deref(), Some("build"));
    assert_eq!(tree(dir.path()), before);
}

#[tokio::test]
async fn a_plan_mode_dry_run_writes_nothing() {
    let dir = crate::support::specs::workspace(&[("specs/a.md", "# A\n"), ("specs/b.md", "# B\n")]);
    let before = tree(dir.path());
    let ralph = crate::support::specs::ralph(
        dir.path(),
        Arc::new(FakeAgent::new()),
        Recorder::default(),
        vec![],
    );
    let report = ralph.dry_run_plan(Vec::<PathBuf>::new()).unwrap();
    assert_eq!(report.specs, ["specs/a.md", "specs/b.md"]);
    assert!(
        report
            .to_string()
            .contains("prompt:    plan_mode (built-in)")
    );
    assert_eq!(tree(dir.path()), before);
}

#[tokio::test]
async fn a_build_mode_dry_run_writes_nothing() {
    let dir = build_workspace(&["one", "two"]);
    let before = tree(dir.path());
    let agent = Arc::new(FakeAgent::new());
    let ralph =
        crate::support::specs::ralph(dir.path(), agent.clone(), Recorder::default(), vec![]);
    let report = ralph.dry_run_build().unwrap();
    assert_eq!(report.spec.as_deref(), Some("s"));
    assert_eq!(report.next.as_deref(), Some("task s-1: one (session 1)"));
    assert_eq!(report.template.as_deref(), Some("task"));
    assert_eq!(
        tree(dir.path()),
        before,
        "not even the hand-written plan is adopted"
    );
    assert!(agent.requests().is_empty());
}

#[tokio::test]
async fn a_thread_dry_run_writes_nothing() {
    let dir = crate::support::threads::repo().await;
    let agent = Arc::new(FakeAgent::new());
    let threads = crate::support::threads::threads(dir.path(), &agent, false, 3);
    let id = crate::support::threads::finalized(&threads, crate::support::threads::SPEC);
    let before = tree(dir.path());
    let report = threads.thread(&id).dry_run().unwrap();
    assert_eq!(report.phase, PhaseKind::Finalized);
    assert!(
        report.next.as_deref().unwrap().starts_with("preflight"),
        "{report}"
    );
    assert_eq!(report.criteria.len(), 2);
    assert_eq!(tree(dir.path()), before);
    assert!(agent.requests().is_empty());
}

// ── A state file lost under a run ───────────────────────────────────────────────────────

#[tokio::test]
async fn construct_stops_when_its_state_file_is_deleted_under_it() {
    let dir = crate::support::workspace("# S\nWrite a.\n");
    let state = dir.path().join(".ralph/plan.jsonl");
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(DeletesFirst {
            victim: state.clone(),
            inner: one_task_agent(),
        })
        .build()
        .unwrap();
    let err = ralph.construct("spec.md").await.unwrap_err();
    assert!(
        matches!(err, Error::Store(StoreError::Changed { .. })),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("plan.jsonl") && text.contains("was deleted"),
        "{text}"
    );
    assert!(
        !state.exists(),
        "not recreated holding only what the run knew"
    );
}

#[tokio::test]
async fn construct_with_a_progress_file_stops_when_its_sidecar_is_deleted_under_it() {
    let dir = crate::support::workspace("# S\nWrite a.\n");
    write(dir.path(), "ralph.toml", "[store]\nkind = \"progress\"\n");
    let sidecar = dir.path().join(".ralph/progress-state.json");
    // The first run writes the sidecar; the second run's agent deletes it.
    let first = Ralph::builder()
        .workspace(dir.path())
        .agent(FakeAgent::new().on(Role::Investigate, "i-1", tasks(&[("Write a", "ok")])))
        .once(true)
        .build()
        .unwrap();
    let _ = first.construct("spec.md").await;
    drop(first);
    assert!(sidecar.exists());
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(DeletesFirst {
            victim: sidecar.clone(),
            inner: one_task_agent(),
        })
        .build()
        .unwrap();
    let err = ralph.resume().await.unwrap_err().to_string();
    assert!(
        err.contains("progress-state.json") && err.contains("was deleted"),
        "{err}"
    );
}

#[tokio::test]
async fn build_mode_stops_when_implementation_json_is_deleted_under_it() {
    let dir = build_workspace(&["one"]);
    let file = dir.path().join("implementation.json");
    let agent = DeletesFirst {
        victim: file.clone(),
        inner: FakeAgent::new().on(Role::Build, "s-1", done()).on(
            Role::Verify,
            "s",
            Script::new().json(serde_json::json!({"verdict": "accept", "reason": "ok"})),
        ),
    };
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(agent)
        .build()
        .unwrap();
    let err = ralph.build_specs().await.unwrap_err().to_string();
    assert!(
        err.contains("implementation.json") && err.contains("was deleted"),
        "{err}"
    );
    assert!(!file.exists());
}

#[tokio::test]
async fn plan_mode_does_not_overwrite_an_implementation_json_replaced_under_it() {
    let dir = crate::support::specs::workspace(&[("specs/a.md", "# A\n")]);
    crate::support::specs::implementation(dir.path(), &[("a", 1, &["old"])]);
    let file = dir.path().join("implementation.json");
    let answer = serde_json::json!({"specs": [{"id": "a", "name": "A", "file": "specs/a.md",
        "priority": 1, "tasks": [{"description": "new"}]}]});
    let agent = DeletesFirst {
        victim: file.clone(),
        inner: FakeAgent::new().always(Role::Breakdown, Script::new().json(answer)),
    };
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(agent)
        .build()
        .unwrap();
    let err = ralph
        .plan(Vec::<PathBuf>::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("implementation.json") && err.contains("was deleted"),
        "{err}"
    );
}

#[tokio::test]
async fn a_thread_loop_stops_when_its_thread_json_is_deleted_under_it() {
    let dir = crate::support::threads::repo().await;
    let fake = Arc::new(FakeAgent::new());
    let threads = crate::support::threads::threads(dir.path(), &fake, false, 3);
    let id = crate::support::threads::finalized(&threads, crate::support::threads::SPEC);
    let record = dir.path().join(format!(".ralph/threads/{id}/thread.json"));
    let threads = ralph::thread::Threads::new(
        dir.path(),
        DeletesFirst {
            victim: record.clone(),
            inner: FakeAgent::new().always(Role::Build, crate::support::threads::writes("hello\n")),
        },
    )
    .unwrap();
    threads.thread(&id).start().await.unwrap();
    let err = threads.thread(&id).run().await.unwrap_err().to_string();
    assert!(
        err.contains("thread.json") && err.contains("was deleted"),
        "{err}"
    );
    assert!(!record.exists());
}

// ── One rule for spec paths ─────────────────────────────────────────────────────────────

#[tokio::test]
async fn construct_refuses_spec_paths_outside_the_workspace() {
    let outer = tempfile::tempdir().unwrap();
    let dir = outer.path().join("ws");
    std::fs::create_dir(&dir).unwrap();
    write(outer.path(), "secret.md", "# Secret\n");
    std::os::unix::fs::symlink(outer.path().join("secret.md"), dir.join("link.md")).unwrap();
    let agent = Arc::new(one_task_agent());
    let ralph = Ralph::builder()
        .workspace(&dir)
        .agent(agent.clone())
        .store(MemoryStore::new())
        .build()
        .unwrap();
    for (spec, why) in [
        ("/etc/passwd", "is absolute"),
        ("../secret.md", "goes up with `..`"),
        ("link.md", "outside the workspace"),
    ] {
        let err = ralph.construct(spec).await.unwrap_err();
        assert!(matches!(err, Error::SpecPath { .. }), "{spec}: {err:?}");
        let text = err.to_string();
        assert!(text.contains(spec) && text.contains(why), "{spec}: {text}");
        let err = ralph.dry_run(spec).await.unwrap_err().to_string();
        assert!(err.contains(why), "dry run, {spec}: {err}");
    }
    assert!(
        agent.requests().is_empty(),
        "no spec outside was sent to the agent"
    );
}

#[tokio::test]
async fn plan_mode_refuses_spec_paths_outside_the_specs_folder() {
    let dir =
        crate::support::specs::workspace(&[("specs/a.md", "# A\n"), ("secret.md", "# Secret\n")]);
    std::os::unix::fs::symlink(
        dir.path().join("secret.md"),
        dir.path().join("specs/link.md"),
    )
    .unwrap();
    let agent = Arc::new(FakeAgent::new());
    let ralph =
        crate::support::specs::ralph(dir.path(), agent.clone(), Recorder::default(), vec![]);
    for (spec, why) in [
        ("/etc/passwd", "is absolute"),
        ("specs/../secret.md", "goes up with `..`"),
        ("specs/link.md", "outside the folder specs"),
        ("secret.md", "outside the folder specs"),
    ] {
        let err = ralph.plan([spec]).await.unwrap_err().to_string();
        assert!(err.contains(spec) && err.contains(why), "{spec}: {err}");
        let err = ralph.dry_run_plan([spec]).unwrap_err().to_string();
        assert!(err.contains(why), "dry run, {spec}: {err}");
    }
    assert!(agent.requests().is_empty());
}

// ── The lock and the sweep, with a store passed in ──────────────────────────────────────

/// Starts `sleep <secs>` in a session of its own, tagged as a process of `workspace`'s
/// runs: what a SIGKILLed ralph leaves behind.
fn leftover(workspace: &Path, secs: u32) -> u32 {
    let owner = ralph_loop_process::process::owner_of(workspace);
    let out = std::process::Command::new("sh")
        .args([
            "-c",
            &format!("setsid sleep {secs} >/dev/null 2>&1 & echo $!"),
        ])
        .env(
            ralph_loop_process::process::COOKIE_VAR,
            format!("dead-run:{owner}"),
        )
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

#[tokio::test]
async fn a_store_passed_to_the_builder_keeps_the_lock_and_the_sweep() {
    let dir = crate::support::workspace("# S\nWrite a.\n");
    let pid = leftover(dir.path(), 7991);
    assert!(alive(pid));
    let events = Recorder::default();
    let store = JsonlStore::open(dir.path().join("elsewhere.jsonl")).unwrap();
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(one_task_agent())
        .store(store)
        .observer(events.clone())
        .build()
        .unwrap();
    let outcome = ralph.construct("spec.md").await.unwrap();
    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    assert!(!alive(pid), "the killed run's leftover was swept");
    assert!(
        events
            .events()
            .iter()
            .any(|e| matches!(e, Event::Warning { message }
            if message.contains("killed 1 process(es) left running"))),
        "{:?}",
        events.events()
    );
}

#[tokio::test]
async fn every_mode_is_refused_while_another_run_holds_the_workspace() {
    let dir = build_workspace(&["one"]);
    write(dir.path(), "spec.md", "# S\n");
    let hold = Ralph::builder()
        .workspace(dir.path())
        .agent(FakeAgent::new().always(Role::Investigate, Script::new().hang()))
        .store(MemoryStore::new())
        .build()
        .unwrap();
    let stop = hold.stop_token();
    let running = tokio::spawn(async move { hold.construct("spec.md").await });
    // Wait until the first run holds the lock.
    let lock = dir.path().join(".ralph/ralph.lock");
    while !std::fs::read_to_string(&lock).is_ok_and(|t| t.contains("pid")) {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let other = Ralph::builder()
        .workspace(dir.path())
        .agent(FakeAgent::new())
        .store(MemoryStore::new())
        .build()
        .unwrap();
    let busy = |e: Error| {
        assert!(matches!(e, Error::Busy { .. }), "{e:?}");
        assert!(e.to_string().contains("ralph.lock"), "{e}");
    };
    busy(other.construct("spec.md").await.unwrap_err());
    busy(other.build_specs().await.unwrap_err());
    busy(other.plan(Vec::<PathBuf>::new()).await.unwrap_err());
    // A person's changes to the board wait for the run too.
    busy(other.add_issue("more").await.unwrap_err());
    busy(
        other
            .add_task(ralph::model::Task::new("t-9", "x"))
            .await
            .unwrap_err(),
    );
    busy(other.unblock(&"t-9".into()).await.unwrap_err());
    busy(other.prioritize().await.unwrap_err());
    let threads = ralph::thread::Threads::new(dir.path(), FakeAgent::new()).unwrap();
    let id = threads
        .create("T", crate::support::threads::SPEC)
        .unwrap()
        .id;
    threads.thread(&id).finalize().unwrap();
    let started = threads.thread(&id).start().await.unwrap();
    assert_eq!(
        started.phase.kind(),
        PhaseKind::PreflightFailed,
        "{started:?}"
    );
    stop.stop();
    assert_eq!(running.await.unwrap().unwrap(), Outcome::Interrupted);
}

// ── Build mode's once ───────────────────────────────────────────────────────────────────

/// The workspace lock's note, deleted during a session of build mode (here by the agent
/// itself, as an unconfined one could), is back before the next session starts: s-2's
/// session hangs, so only the check between sessions can have put it back.
#[tokio::test]
async fn build_mode_puts_the_lock_note_back_between_sessions() {
    let dir = build_workspace(&["one", "two"]);
    let agent = FakeAgent::new()
        .on(Role::Build, "s-1", done().remove(".ralph/ralph.lock"))
        .on(
            Role::Build,
            "s-2",
            Script::new().prompt("s-2.prompt").hang(),
        );
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(agent)
        .build()
        .unwrap();
    let stop = ralph.stop_token();
    let started = dir.path().join("s-2.prompt");
    let look = crate::support::lock_note_back(dir.path(), || started.exists(), &stop);
    let (outcome, back) = tokio::join!(ralph.build_specs(), look);
    assert!(back, "the note is back before s-2's session");
    assert!(
        matches!(outcome.unwrap(), SpecsOutcome::Interrupted),
        "stopped"
    );
}

#[tokio::test]
async fn build_mode_with_once_makes_one_agent_session_per_call() {
    let dir = build_workspace(&["one", "two"]);
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Build, "s-1", done())
            .on(Role::Build, "s-2", done())
            .on(Role::Verify, "s", crate::support::specs::accept()),
    );
    let build = || {
        Ralph::builder()
            .workspace(dir.path())
            .agent(agent.clone())
            .once(true)
            .build()
            .unwrap()
    };
    let mut steps = Vec::new();
    loop {
        match build().build_specs().await.unwrap() {
            SpecsOutcome::Once { step, .. } => steps.push(step),
            SpecsOutcome::Complete { .. } => break,
            other => panic!("{other:?}"),
        }
        assert!(steps.len() < 10, "{steps:?}");
    }
    assert_eq!(
        steps,
        [
            "ran task s-1 (session 1)",
            "ran task s-2 (session 1)",
            "verified s"
        ]
    );
    assert_eq!(agent.requests().len(), 3, "one session per call");
    assert_eq!(crate::support::specs::commits(dir.path())[0], "Spec s");
}

// ── A torn tail repaired at load ────────────────────────────────────────────────────────

#[tokio::test]
async fn a_torn_tail_dropped_at_load_is_an_event() {
    let dir = crate::support::workspace("# S\nWrite a.\n");
    write(
        dir.path(),
        ".ralph/plan.jsonl",
        "{\"t\":\"task\",\"id\":\"t-1\",\"name\":\"Write a\",\"s\":\"p\"}\n{\"t\":\"task\",\"id\":\"t-2\",\"na",
    );
    let events = Recorder::default();
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(FakeAgent::new().on(Role::Build, "t-1", Script::new().hang()))
        .observer(events.clone())
        .build()
        .unwrap();
    ralph.stop_token().stop();
    let _ = ralph.construct("spec.md").await;
    let repaired = events.of_kind("state_repaired");
    assert_eq!(repaired.len(), 1, "{:?}", events.events());
    assert!(
        repaired[0]["note"]
            .as_str()
            .unwrap()
            .contains("torn final line (line 2"),
        "{repaired:?}"
    );
}

// ── The files ralph writes stay inside the workspace ────────────────────────────────────

#[test]
fn state_and_log_paths_outside_the_workspace_are_refused_naming_the_key() {
    for (toml, key) in [
        ("[store]\npath = \"../outside-plan.jsonl\"\n", "store.path"),
        ("[store]\npath = \"\"\n", "store.path"),
        ("log_dir = \"/tmp/logs\"\n", "log_dir"),
        ("log_dir = \"../x\"\n", "log_dir"),
        (
            "[planning]\nimplementation = \"../impl.json\"\n",
            "planning.implementation",
        ),
    ] {
        let dir = crate::support::workspace("# S\n");
        write(dir.path(), "ralph.toml", toml);
        let err = Ralph::builder()
            .workspace(dir.path())
            .agent(FakeAgent::new())
            .build()
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{toml}: {err}");
        assert!(
            !dir.path().join(".ralph").exists(),
            "{toml}: nothing written"
        );
    }
}

// ── Numbers are range-checked where they enter ──────────────────────────────────────────

#[tokio::test]
async fn out_of_range_numbers_are_refused_naming_the_key_in_every_mode() {
    // The construct loop, plan mode and build mode share the config.
    let dir = build_workspace(&["one"]);
    let err = Ralph::builder()
        .workspace(dir.path())
        .agent(FakeAgent::new())
        .retries(u32::MAX)
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("retries must be at most 1000, got 4294967295")
            && err.contains("RalphBuilder::config"),
        "{err}"
    );
    // Threads take their loop settings per thread.
    let repo = crate::support::threads::repo().await;
    let threads = ralph::thread::Threads::new(repo.path(), FakeAgent::new()).unwrap();
    let id = crate::support::threads::finalized(&threads, crate::support::threads::SPEC);
    threads.thread(&id).start().await.unwrap();
    let err = threads
        .thread(&id)
        .configure(ralph::thread::RunConfig::default().max_iterations(0))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("max_iterations must be from 1 to 100000, got 0"),
        "{err}"
    );
}
