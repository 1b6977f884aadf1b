//! ralph's diagnostics reach an embedder's own `tracing` subscriber: spans per stage, task,
//! agent run and gate, and one event per line a person would read.
//!
//! A test binary of its own: a scoped subscriber and tracing's interest cache are
//! process-wide, and other tests running ralph on other threads at the same time made this
//! one see nothing now and then.

// Tests set up and look at their workspaces with git and the CLIs they start themselves,
// outside any run: the rule that processes start in ralph-loop-process is the library's.
#![allow(clippy::disallowed_types)]
// Tests write their fixtures and workspaces directly, outside any run: the rule
// that state is written through ralph-loop-process's `files` is the library's.
#![allow(clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

use std::sync::{Arc, Mutex};

use ralph::agent::{FakeAgent, Script};
use ralph::{MemoryStore, Outcome, Ralph, Role, ShellGate};
use support::{accept, no_gaps, tasks, workspace};

const SPEC: &str = "# Greeter\nWrite done.txt, which greets.\n";

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("buffer").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn an_embedders_subscriber_sees_stages_tasks_agent_runs_and_gates() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let dir = workspace(SPEC);
    tracing::subscriber::with_default(subscriber, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let ralph = Ralph::builder()
                .workspace(dir.path())
                .agent(
                    FakeAgent::new()
                        .on(
                            Role::Investigate,
                            "i-1",
                            tasks(&[("Write done.txt", "done.txt greets")]),
                        )
                        .on(
                            Role::Build,
                            "t-1",
                            Script::new()
                                .write("done.txt", "hello\n")
                                .answer("Wrote done.txt.\n<TASK_DONE>"),
                        )
                        .always(Role::Verify, accept("meets the criteria"))
                        .always(Role::GapAnalysis, no_gaps()),
                )
                .gate(ShellGate::new("done-file", "test -f done.txt"))
                .store(MemoryStore::new())
                .build()
                .expect("build");
            let outcome = ralph.construct("spec.md").await.expect("construct");
            assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
        });
    });

    let text = String::from_utf8(captured.0.lock().expect("buffer").clone()).expect("utf-8");
    for part in [
        "stage{iteration=1 stage=BUILD}:task{task=t-1 attempt=1}",
        "agent build t-1: completed",
        "t-1 gate done-file: passed",
        "✓ t-1 accepted",
    ] {
        assert!(text.contains(part), "missing {part:?} in\n{text}");
    }
}
