//! The custom tool of `examples/custom_tool`: its own gate, prioritizer, store and observer,
//! driven by a scripted agent, the way a user tests a tool built on ralph.

#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::sync::{Arc, Mutex};

use crate::support::complete;
use ralph::agent::{FakeAgent, Role, Script};
use ralph::model::{Complexity, Priority, Task, TaskStatus};
use ralph::prioritize::Prioritizer;
use ralph::store::Store;
use serde_json::json;

#[path = "../../examples/custom_tool/parts.rs"]
#[allow(dead_code)]
mod parts;

/// What the observer printed, shared with the test.
#[derive(Clone, Default)]
struct Printed(Arc<Mutex<Vec<u8>>>);

impl Write for Printed {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Printed {
    fn lines(&self) -> Vec<String> {
        let bytes = self.0.lock().unwrap().clone();
        String::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

fn agent() -> FakeAgent {
    let tasks = json!({"tasks": [
        {"name": "Write the README", "accept": "README.md names the port", "complexity": "large"},
        {"name": "Write config.json", "accept": "config.json holds the port", "complexity": "small"},
    ]});
    let accept = || Script::new().json(json!({"verdict": "accept", "reason": "looks right"}));
    FakeAgent::new()
        .on(Role::Investigate, "i-1", Script::new().json(tasks))
        .on_attempt(
            Role::Build,
            "t-2",
            1,
            Script::new()
                .write("config.json", "{\"port\": 8080,}\n")
                .answer("Done.\n<TASK_DONE>"),
        )
        .on_attempt(
            Role::Build,
            "t-2",
            2,
            Script::new()
                .write("config.json", "{\"port\": 8080}\n")
                .answer("Fixed.\n<TASK_DONE>"),
        )
        .on(
            Role::Build,
            "t-1",
            Script::new()
                .write("README.md", "Port 8080.\n")
                .answer("Done.\n<TASK_DONE>"),
        )
        .on(Role::Verify, "t-1", accept())
        .on(Role::Verify, "t-2", accept())
        .always(
            Role::GapAnalysis,
            Script::new().json(json!({"tasks": [], "issues": []})),
        )
}

#[tokio::test]
async fn the_custom_parts_run_a_spec_to_the_end() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("spec.md"),
        "# Settings\nA config and a README.\n",
    )
    .unwrap();
    let printed = Printed::default();
    let ralph = parts::assemble(dir.path(), agent(), printed.clone()).unwrap();

    let outcome = ralph.construct("spec.md").await.unwrap();
    assert_eq!(complete(&outcome), (1, 2));

    let lines = printed.lines();
    let started: Vec<&str> = lines
        .iter()
        .filter(|l| l.starts_with("start"))
        .map(String::as_str)
        .collect();
    assert_eq!(
        started,
        [
            "start   t-2 Write config.json (attempt 1)",
            "start   t-2 Write config.json (attempt 2)",
            "start   t-1 Write the README (attempt 1)",
        ],
        "the small task first (SmallFirst), and the broken config retried: {lines:#?}"
    );
    assert!(
        lines.contains(&"gate    t-2 json failed".to_owned()),
        "{lines:#?}"
    );
    assert!(
        lines.contains(&"gate    t-2 json passed".to_owned()),
        "{lines:#?}"
    );

    // The state is in state.json, and a fresh store reads it back.
    let board = parts::JsonFileStore::new(dir.path().join("state.json"))
        .load()
        .await
        .unwrap();
    assert!(
        board.tasks().all(|t| t.status == TaskStatus::Accepted),
        "{board:#?}"
    );
}

#[tokio::test]
async fn the_json_gate_says_where_the_file_breaks() {
    use ralph::gate::{Gate, GateContext};
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), "{\n  \"port\": 8080,\n}\n").unwrap();
    let report = parts::JsonParses::new("config.json")
        .check(GateContext::new(dir.path()))
        .await
        .unwrap();
    assert!(report.blocks());
    let said = report.output();
    assert!(
        said.contains("config.json") && said.contains("line 3"),
        "{said}"
    );
}

#[test]
fn small_first_keeps_dependencies_before_their_dependents() {
    let mut big = Task::new("t-1", "Lay the schema");
    big.complexity = Some(Complexity::Large);
    let mut small = Task::new("t-2", "Seed the schema");
    small.complexity = Some(Complexity::Small);
    small.deps = vec!["t-1".into()];
    let out = parts::SmallFirst.prioritize(&[big, small]).unwrap();
    let order: Vec<(&str, Priority)> = out.iter().map(|(id, p)| (id.as_str(), *p)).collect();
    assert_eq!(order, [("t-1", Priority::Low), ("t-2", Priority::High)]);
}

#[test]
fn small_first_names_a_cycle() {
    let mut a = Task::new("t-1", "A");
    a.deps = vec!["t-2".into()];
    let mut b = Task::new("t-2", "B");
    b.deps = vec!["t-1".into()];
    let err = parts::SmallFirst.prioritize(&[a, b]).unwrap_err();
    assert!(err.to_string().contains("t-1"), "{err}");
}
