//! Helpers shared by every test binary (`tests/<area>/main.rs` includes this module), with
//! [`specs`] for plan and build mode and [`threads`] for threads.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

pub mod cli_rig;
pub mod gemini_api;
pub mod hostile;
pub mod messages_api;
pub mod responses_api;
pub mod specs;
pub mod threads;

/// Every real CLI transcript in `fixtures/claude/transcripts/` (see its README).
pub const RECORDED_TRANSCRIPTS: [&str; 14] = [
    "api-500-then-ok",
    "api-error-401",
    "api-error-500",
    "autocompact",
    "blocked",
    "max-turns",
    "midstream-error-resume",
    "partial-messages",
    "permission-denied",
    "sigint-during-tool",
    "sigterm-during-tool-no-result",
    "structured-output",
    "tool-flow-done",
    "usage-growth-cached",
];

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ralph::agent::Script;
use ralph::{Event, Observer};
use serde_json::{Value, json};

/// The sandbox a run in the default mode (`[sandbox] mode = "auto"`) gives an agent that
/// works in `ws`: bubblewrap with `ws` writable where bubblewrap works here (CI installs it),
/// else none. A test that watches the run from outside adds the paths it writes.
pub fn sandbox(ws: &Path) -> ralph_loop_process::process::Sandbox {
    sandbox_for(ralph::Role::Build, ws)
}

/// [`sandbox`] for a run of `role`: the work tree read-only for a role that may not write,
/// as a run gives it.
pub fn sandbox_for(role: ralph::Role, ws: &Path) -> ralph_loop_process::process::Sandbox {
    ralph_loop_process::process::Sandbox::bubblewrap()
        .map(|sandbox| match role.may_write() {
            true => sandbox.write(ws),
            false => sandbox.protect(ws),
        })
        .unwrap_or_default()
}

/// The iterations and the accepted count of a complete construct run; panics with the
/// outcome when it is anything else.
pub fn complete(outcome: &ralph::Outcome) -> (u32, usize) {
    match outcome {
        ralph::Outcome::Complete {
            iterations,
            accepted,
            ..
        } => (*iterations, *accepted),
        other => panic!("expected Complete, got {other:?}"),
    }
}

/// The specs and tasks of a complete build-mode run; panics with the outcome when it is
/// anything else.
pub fn specs_complete(outcome: &ralph::SpecsOutcome) -> (usize, usize) {
    match outcome {
        ralph::SpecsOutcome::Complete { specs, tasks, .. } => (*specs, *tasks),
        other => panic!("expected Complete, got {other:?}"),
    }
}

/// Collects every event.
#[derive(Clone, Default)]
pub struct Recorder(Arc<Mutex<Vec<Event>>>);

impl Recorder {
    pub fn events(&self) -> Vec<Event> {
        self.0.lock().unwrap().clone()
    }

    /// `(iteration, STAGE)` of every stage entered.
    pub fn stages(&self) -> Vec<(u32, String)> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::StageEntered {
                    iteration, stage, ..
                } => Some((iteration, stage.to_string())),
                _ => None,
            })
            .collect()
    }

    /// Whether a warning says `text`.
    pub fn warned(&self, text: &str) -> bool {
        self.warnings()
            .iter()
            .any(|w| w["message"].as_str().unwrap_or("").contains(text))
    }

    /// The warnings, less the one every run without a required gate gets (most tests run
    /// no gate) and the one of a run on a machine without bubblewrap: what a test about
    /// some other warning looks at.
    pub fn warnings(&self) -> Vec<Value> {
        self.of_kind("warning")
            .into_iter()
            .filter(|w| {
                !w["message"].as_str().is_some_and(|m| {
                    m.starts_with("no required gate") || m.starts_with("running unconfined")
                })
            })
            .collect()
    }

    /// Events as JSON values whose `event` is `kind`.
    pub fn of_kind(&self, kind: &str) -> Vec<Value> {
        self.events()
            .iter()
            .map(|e| serde_json::to_value(e).unwrap())
            .filter(|v| v["event"] == kind)
            .collect()
    }
}

impl Observer for Recorder {
    fn on_event(&self, event: &Event) {
        self.0.lock().unwrap().push(event.clone());
    }
}

/// A workspace with a spec file.
pub fn workspace(spec: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("spec.md"), spec).unwrap();
    dir
}

pub fn write(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Every file and folder under `dir` with its bytes: what a dry run must leave as it was.
pub fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            if path.is_dir() {
                out.insert(rel, Vec::new());
                walk(&path, root, out);
            } else {
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The run state of a board whose spec was already seeded as an issue and investigated: a
/// test's hand-made board of tasks starts here, where a real run would have left it.
pub fn seeded() -> ralph::model::Change {
    let mut run = ralph::model::RunState::default();
    run.seeded = true;
    run.spec = Some("spec.md".into());
    ralph::model::Change::Run(run)
}

/// An investigate answer with tasks `(name, accept)`.
pub fn tasks(list: &[(&str, &str)]) -> Script {
    let tasks: Vec<Value> = list
        .iter()
        .map(|(name, accept)| json!({"name": name, "accept": accept}))
        .collect();
    Script::new().json(json!({ "tasks": tasks }))
}

/// An investigate answer saying the tasks `ids`, already on the board, cover the issue (the
/// spec's own issue, when a person planned the tasks before the first run).
pub fn planned(ids: &[&str]) -> Script {
    Script::new().json(json!({ "already_planned": ids }))
}

pub fn accept(reason: &str) -> Script {
    Script::new().json(json!({"verdict": "accept", "reason": reason}))
}

pub fn reject(reason: &str) -> Script {
    Script::new().json(json!({"verdict": "reject", "reason": reason}))
}

pub fn no_gaps() -> Script {
    Script::new().json(json!({"tasks": [], "issues": []}))
}

pub fn done() -> Script {
    Script::new().answer("Implemented.\n<TASK_DONE>")
}

/// `fake-claude`, a stand-in for the `claude` CLI (`fixtures/bin/fake_claude.rs`).
/// The `ralph` command: `$TEST_INSTALLED_RALPH` when set (CI sets it to the binary
/// `cargo install` made), else the one this build made.
pub fn ralph_bin() -> PathBuf {
    std::env::var_os("TEST_INSTALLED_RALPH")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_ralph")))
}

pub fn fake_claude() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fake-claude"))
}

/// With `TEST_RECORD_TRANSCRIPTS=DIR`, keeps the JSON lines a real CLI printed in a run (its
/// stdout file beside `log`, else the log's JSON lines) as `DIR/<cli>/<test>-<n>.jsonl`:
/// how `fixtures/<cli>/` was recorded. Without it, does nothing.
pub fn record_transcript(cli: &str, prompt: &str, log: &Path) {
    let Some(dir) = std::env::var_os("TEST_RECORD_TRANSCRIPTS") else {
        return;
    };
    let stdout = log.with_extension("stdout");
    let text =
        std::fs::read_to_string(if stdout.exists() { &stdout } else { log }).unwrap_or_default();
    let lines: String = text
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| format!("{l}\n"))
        .collect();
    // Named after the test (its thread), numbered when a test makes several runs.
    let test = std::thread::current()
        .name()
        .unwrap_or(prompt)
        .rsplit("::")
        .next()
        .unwrap_or("run")
        .to_owned();
    let out = Path::new(&dir).join(cli);
    std::fs::create_dir_all(&out).unwrap();
    let path = (1..)
        .map(|n| out.join(format!("{test}-{n}.jsonl")))
        .find(|p| !p.exists())
        .unwrap();
    std::fs::write(path, lines).unwrap();
}

/// Waits (at most 20 s) until `ready`, then stops the run with `stop` and says whether the
/// workspace's lock note is there with its holder: the look of the tests whose agent
/// deletes the note in one run and hangs in the next.
pub async fn lock_note_back(
    workspace: &Path,
    ready: impl Fn() -> bool,
    stop: &ralph::StopToken,
) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !ready() {
        assert!(std::time::Instant::now() < deadline, "never ready");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let back = std::fs::read_to_string(workspace.join(".ralph/ralph.lock"))
        .is_ok_and(|t| t.contains("pid"));
    stop.stop();
    back
}
