//! Seed 000's "Example Flow", replayed with the FakeAgent, a real shell gate and a
//! MemoryStore, asserting every transition:
//!
//! ```text
//! Iteration 1:  INVESTIGATE: 2 issues -> 3 tasks; BUILD: t-1 done, t-2 done, t-3 TIMEOUT
//!               -> DECOMPOSE: t-3 split into t-3a, t-3b
//! Iteration 2:  BUILD: t-3a done, t-3b done
//!               VERIFY: t-3a accepted, t-3b rejected (incomplete edge case), gap -> t-4,
//!               new issue (flaky test); PRIORITIZE: t-3b(high), t-4(medium)
//! Iteration 3:  INVESTIGATE: the new issue -> t-5; BUILD: t-3b, t-4, t-5 done;
//!               VERIFY: all accepted, no gaps -> TERMINATE
//! ```
//!
//! (t-1 and t-2, done in iteration 1, are verified and accepted in iteration 2: the kill ended
//! iteration 1 before its VERIFY.)

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use ralph::agent::Script;
use ralph::model::{Change, IssueStatus, KillReason, TaskStatus};
use ralph::{FakeAgent, MemoryStore, Ralph, Role, ShellGate};
use serde_json::json;

fn script() -> FakeAgent {
    FakeAgent::new()
        // Iteration 1
        .on(
            Role::Investigate,
            "i-1",
            tasks(&[("Parse config", "parses"), ("Load data", "loads")]),
        )
        .on(
            Role::Investigate,
            "i-2",
            tasks(&[("Render report", "renders")]),
        )
        // The spec's own issue, seeded after the two a person added: their tasks cover it.
        .on(Role::Investigate, "i-3", planned(&["t-1", "t-2", "t-3"]))
        .on(
            Role::Build,
            "t-1",
            Script::new()
                .write("src/config.rs", "// parse\n")
                .answer("Done.\n<TASK_DONE>"),
        )
        .on(
            Role::Build,
            "t-2",
            Script::new()
                .write("src/data.rs", "// load\n")
                .answer("Done.\n<TASK_DONE>"),
        )
        .on(
            Role::Build,
            "t-3",
            Script::new()
                .print("HEAD: starting the report", 1)
                .print("MIDDLE: verbose compiler output", 500)
                .print("TAIL: still rendering", 1)
                .hang(),
        )
        .on(
            Role::Decompose,
            "t-3",
            Script::new().json(json!({"subtasks": [
                {"name": "Render report header", "accept": "header renders"},
                {"name": "Render report rows", "accept": "rows render, empty input too",
                 "priority": "high", "notes": "pipe the compiler output through tail"}
            ]})),
        )
        // Iteration 2
        .on(
            Role::Build,
            "t-3a",
            Script::new()
                .write("src/header.rs", "// header\n")
                .answer("Done.\n<TASK_DONE>"),
        )
        .on_attempt(
            Role::Build,
            "t-3b",
            1,
            Script::new()
                .write("src/rows.rs", "// rows\n")
                .answer("Done.\n<TASK_DONE>"),
        )
        .on(Role::Verify, "t-1", accept("parses"))
        .on(Role::Verify, "t-2", accept("loads"))
        .on(Role::Verify, "t-3a", accept("meets criteria"))
        .on_attempt(
            Role::Verify,
            "t-3b",
            1,
            reject("incomplete edge case: empty input"),
        )
        .on(
            Role::GapAnalysis,
            "iteration-2",
            Script::new().json(json!({
                "tasks": [{"name": "Add error handling", "accept": "errors are reported"}],
                "issues": ["Flaky test discovered in report rendering"]
            })),
        )
        // Iteration 3
        .on(
            Role::Investigate,
            "i-4",
            tasks(&[("Stabilize the flaky test", "passes 100 times")]),
        )
        .on_attempt(
            Role::Build,
            "t-3b",
            2,
            Script::new()
                .append("src/rows.rs", "// empty input\n")
                .answer("Fixed.\n<TASK_DONE>"),
        )
        .on(
            Role::Build,
            "t-4",
            Script::new()
                .write("src/errors.rs", "// errors\n")
                .answer("Done.\n<TASK_DONE>"),
        )
        .on(
            Role::Build,
            "t-5",
            Script::new()
                .write("tests/flaky.rs", "// stable\n")
                .answer("Done.\n<TASK_DONE>"),
        )
        .on_attempt(Role::Verify, "t-3b", 2, accept("edge case handled"))
        .on(Role::Verify, "t-4", accept("errors reported"))
        .on(Role::Verify, "t-5", accept("stable"))
        .on(Role::GapAnalysis, "iteration-3", no_gaps())
}

#[tokio::test]
async fn seed_000_example_flow() {
    example_flow(script()).await;
}

#[tokio::test]
async fn seed_000_example_flow_from_a_toml_script() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/scripts/example-flow.toml"
    );
    example_flow(FakeAgent::from_toml_file(path).unwrap()).await;
}

/// Every TOML script under `fixtures/scripts/` loads.
#[test]
fn every_fixture_script_loads() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/scripts");
    let mut count = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            FakeAgent::from_toml_file(&path).unwrap();
            count += 1;
        }
    }
    assert!(count > 0);
    FakeAgent::from_toml_file(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/demo/script.toml"
    ))
    .unwrap();
}

async fn example_flow(agent: FakeAgent) {
    let dir = workspace("# Report tool\nParse config, load data, render a report.\n");
    let agent = Arc::new(agent);
    let store = MemoryStore::new();
    let events = Recorder::default();
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(agent.clone())
        .store(store.clone())
        .gate(ShellGate::new("sources", "test -d src"))
        .observer(events.clone())
        .stage_timeout(Duration::from_millis(1500))
        .build()
        .unwrap();
    ralph
        .add_issue("Users need a config parser and a data loader")
        .await
        .unwrap();
    ralph.add_issue("Users need a report").await.unwrap();

    let outcome = ralph.construct("spec.md").await.unwrap();

    assert_eq!(complete(&outcome), (3, 6));
    agent.verify().unwrap();

    // The stages, derived from the board at each step.
    let stage = |i: u32, s: &str| (i, s.to_owned());
    assert_eq!(
        events.stages(),
        vec![
            stage(1, "INVESTIGATE"),
            stage(1, "BUILD"),
            stage(1, "DECOMPOSE"),
            stage(2, "BUILD"),
            stage(2, "VERIFY"),
            stage(3, "INVESTIGATE"),
            stage(3, "BUILD"),
            stage(3, "VERIFY"),
        ]
    );

    // Iteration 1: 2 issues -> 3 tasks, which cover the spec's own issue.
    let investigated = events.of_kind("issue_investigated");
    assert_eq!(investigated[0]["issue"], "i-1");
    assert_eq!(investigated[0]["tasks"], json!(["t-1", "t-2"]));
    assert_eq!(investigated[1]["issue"], "i-2");
    assert_eq!(investigated[1]["tasks"], json!(["t-3"]));
    assert_eq!(investigated[2]["issue"], "i-3");
    assert_eq!(investigated[2]["tasks"], json!(["t-1", "t-2", "t-3"]));

    // t-1, t-2 done; t-3 killed by the timeout, with its log. In iteration 2, t-3b (high, as
    // the decomposer marked it) is built before t-3a.
    let done: Vec<_> = events
        .of_kind("task_done")
        .iter()
        .map(|e| e["task"].clone())
        .collect();
    assert_eq!(
        done,
        json!(["t-1", "t-2", "t-3b", "t-3a", "t-3b", "t-4", "t-5"])
            .as_array()
            .unwrap()
            .clone()
    );
    let killed = events.of_kind("task_killed");
    assert_eq!(killed.len(), 1);
    assert_eq!(killed[0]["task"], "t-3");
    assert_eq!(killed[0]["reason"], "timeout");
    let kill_log = killed[0]["log"].as_str().unwrap().to_owned();
    assert!(
        kill_log.starts_with("build/ralph-logs/ralph-"),
        "{kill_log}"
    );
    assert!(dir.path().join(&kill_log).exists());

    // Each request carried its role's schema, the one `ralph schema ROLE` prints.
    for request in agent.requests() {
        assert_eq!(
            request.schema,
            ralph::answer_schema(request.role),
            "{} {:?}",
            request.role,
            request.subject
        );
    }

    // DECOMPOSE saw only the log's head and tail.
    let decompose = agent
        .requests()
        .into_iter()
        .find(|r| r.role == Role::Decompose)
        .unwrap();
    assert!(decompose.prompt.contains("HEAD: starting the report"));
    assert!(decompose.prompt.contains("TAIL: still rendering"));
    assert!(decompose.prompt.contains("omitted"));
    let middle_lines = decompose
        .prompt
        .matches("MIDDLE: verbose compiler output")
        .count();
    assert!(
        middle_lines <= 150,
        "{middle_lines} middle lines reached the decomposer"
    );
    assert_eq!(
        events.of_kind("decomposed")[0]["into"],
        json!(["t-3a", "t-3b"])
    );

    // Iteration 2: verdicts, gap task and issue, priorities.
    let verdicts: Vec<(String, bool)> = events
        .of_kind("verdict")
        .iter()
        .map(|v| {
            (
                v["task"].as_str().unwrap().to_owned(),
                v["accepted"].as_bool().unwrap(),
            )
        })
        .collect();
    let mut round2: Vec<_> = verdicts[..4].to_vec();
    round2.sort();
    assert_eq!(
        round2,
        [
            ("t-1".into(), true),
            ("t-2".into(), true),
            ("t-3a".into(), true),
            ("t-3b".into(), false)
        ]
    );
    let gaps = events.of_kind("gaps_found");
    assert_eq!(gaps[0]["tasks"], json!(["t-4"]));
    assert_eq!(gaps[0]["issues"], json!(["i-4"]));
    // The prioritizer runs whenever tasks are added; at the end of VERIFY it is the seed's
    // PRIORITIZE: t-3b (rejected, back to pending) and the gap task t-4.
    let prioritized: Vec<_> = events
        .of_kind("prioritized")
        .into_iter()
        .map(|e| e["order"].clone())
        .collect();
    assert!(
        prioritized.contains(&json!(["t-3b:high", "t-4:medium"])),
        "{prioritized:?}"
    );
    assert_eq!(prioritized.last(), Some(&json!([])));

    // The rejected task's next prompt carries the verifier's reason.
    let rebuild = agent
        .requests()
        .into_iter()
        .find(|r| r.role == Role::Build && r.subject.as_deref() == Some("t-3b") && r.attempt == 2)
        .unwrap();
    assert!(rebuild.prompt.contains("incomplete edge case: empty input"));

    // Iteration 3: all accepted, terminate.
    let mut round3: Vec<_> = verdicts[4..].to_vec();
    round3.sort();
    assert_eq!(
        round3,
        [
            ("t-3b".into(), true),
            ("t-4".into(), true),
            ("t-5".into(), true)
        ]
    );
    let iterations: Vec<_> = events
        .of_kind("iteration_finished")
        .iter()
        .map(|e| e["iteration"].as_u64().unwrap())
        .collect();
    assert_eq!(iterations, [1, 2, 3]);

    // The persisted history of the interesting tasks.
    let history = |id: &str| -> Vec<String> {
        store
            .persisted()
            .into_iter()
            .filter_map(|c| match c {
                Change::Task(t) if t.id == id => Some(format!(
                    "{:?}{}{}",
                    t.status,
                    t.kill_reason.map(|r| format!("+{r}")).unwrap_or_default(),
                    if t.verdict.is_some() { "+verdict" } else { "" }
                )),
                _ => None,
            })
            .collect()
    };
    assert_eq!(
        history("t-3"),
        ["Pending", "Pending+timeout", "Decomposed+timeout"]
    );
    assert_eq!(
        history("t-3b"),
        [
            "Pending",
            "Done",
            "Done+verdict",
            "Pending",
            "Done",
            "Done+verdict",
            "Accepted+verdict"
        ]
    );
    let board = store.board();
    assert_eq!(
        board.task("t-3").unwrap().kill_reason,
        Some(KillReason::Timeout)
    );
    assert_eq!(board.task("t-3b").unwrap().tombstones.len(), 1);
    assert!(
        board
            .tasks()
            .all(|t| matches!(t.status, TaskStatus::Accepted | TaskStatus::Decomposed))
    );
    assert!(board.issues().all(|i| i.status == IssueStatus::Resolved));
    assert_eq!(
        events.of_kind("finished")[0]["outcome"]["outcome"],
        "complete"
    );
}
