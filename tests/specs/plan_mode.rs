//! Plan mode (seed 004): specs → implementation.json, re-planning keeps completed work, and
//! build mode then runs from the file alone.

#![cfg(unix)]
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use crate::support::specs::*;
use crate::support::{Recorder, specs_complete};
use ralph::agent::Script;
use ralph::specs::Status;
use ralph::{FakeAgent, Role, SpecsOutcome};
use serde_json::json;

fn plan_answer() -> Script {
    Script::new().json(json!({"specs": [
        {"id": "farewell", "name": "Farewell", "file": "specs/farewell.md", "priority": 2,
         "context": "bye.sh beside greet.sh",
         "tasks": [{"description": "Write bye.sh", "acceptanceCriteria": ["prints Bye"]}],
         "acceptanceCriteria": ["bye.sh prints Bye"]},
        {"id": "greeter", "name": "Greeter", "file": "specs/greeter.md", "priority": 1,
         "context": "POSIX sh only",
         "tasks": [
            {"description": "Write greet.sh", "acceptanceCriteria": ["prints Hello"]},
            {"description": "Test greet.sh"},
            {"description": "Document greet.sh"}
         ],
         "acceptanceCriteria": ["greet.sh NAME prints Hello, NAME!"]}
    ]}))
}

fn specs() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            "specs/greeter.md",
            "# Greeter\n\ngreet.sh NAME prints Hello, NAME!\n",
        ),
        ("specs/farewell.md", "# Farewell\n\nbye.sh prints Bye.\n"),
    ]
}

/// Seed 004: given specs, plan mode creates implementation.json with the extracted tasks,
/// acceptance criteria and priorities; the plan role gets a schema and every spec's text.
#[tokio::test]
async fn plan_mode_creates_implementation_json_from_the_specs() {
    let ws = workspace(&specs());
    let dir = ws.path();
    let agent = Arc::new(FakeAgent::new().on(Role::Breakdown, "plan-mode", plan_answer()));
    let ralph = ralph(dir, agent.clone(), Recorder::default(), vec![]);
    assert!(ralph.implementation().unwrap().is_none());

    let plan = ralph.plan(Vec::<&str>::new()).await.unwrap();
    assert_eq!(plan.updated_by.as_deref(), Some("plan-mode"));
    assert_eq!(load(dir), plan, "saved as returned");
    let greeter = plan.spec("greeter").unwrap();
    assert_eq!(greeter.name, "Greeter");
    assert_eq!(greeter.priority, 1);
    assert_eq!(greeter.context, "POSIX sh only");
    let ids: Vec<&str> = greeter.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["greeter-1", "greeter-2", "greeter-3"]);
    assert_eq!(greeter.tasks[0].acceptance_criteria, ["prints Hello"]);
    assert!(greeter.tasks.iter().all(|t| t.status == Status::Pending));
    assert_eq!(plan.build_order(), [1, 0], "greeter (priority 1) first");

    let requests = agent.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].schema,
        ralph::answer_schema(Role::Breakdown),
        "the schema `ralph schema plan` prints was sent"
    );
    assert!(!Role::Breakdown.may_write());
    for part in [
        "specs/greeter.md",
        "Hello, NAME!",
        "specs/farewell.md",
        "bye.sh prints Bye.",
    ] {
        assert!(requests[0].prompt.contains(part), "{part}");
    }
    assert!(dir.join("build/ralph-logs/runs/plan-mode").is_dir());
}

/// Seed 004: build mode reads implementation.json without LLM parsing — the agent below has
/// no plan-mode script at all, and the build completes from the file plan mode wrote.
#[tokio::test]
async fn build_mode_runs_from_plan_modes_file_without_parsing() {
    let ws = workspace(&specs());
    let dir = ws.path();
    let planner_agent = Arc::new(FakeAgent::new().on(Role::Breakdown, "plan-mode", plan_answer()));
    let ralph1 = ralph(dir, planner_agent, Recorder::default(), vec![]);
    ralph1
        .plan(["specs/greeter.md", "specs/farewell.md"])
        .await
        .unwrap();
    drop(ralph1);

    let builder_agent = Arc::new(
        FakeAgent::new()
            .always(Role::Planner, planner("# Plan\n1. Do it."))
            .always(Role::Build, done())
            .always(Role::Verify, accept()),
    );
    let ralph2 = ralph(dir, builder_agent.clone(), Recorder::default(), vec![]);
    let outcome = ralph2.build_specs().await.unwrap();
    assert_eq!(specs_complete(&outcome), (2, 4));
    for request in builder_agent.requests() {
        assert_eq!(
            request.schema,
            ralph::answer_schema(request.role),
            "{}",
            request.role
        );
    }
    assert!(
        builder_agent
            .requests()
            .iter()
            .all(|r| r.role != Role::Breakdown)
    );
    assert_eq!(
        commits(dir),
        [
            "Farewell",
            "Greeter",
            "ralph plan: 2 specs, 4 tasks",
            "Initial commit"
        ]
    );
}

/// Running plan mode again keeps completed tasks with their ids and history; tasks still to
/// do follow the new answer.
#[tokio::test]
async fn replanning_keeps_completed_tasks_and_their_history() {
    let ws = workspace(&specs());
    let dir = ws.path();
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Breakdown, "plan-mode", plan_answer())
            .on(Role::Planner, "greeter", planner("# Plan: greeter"))
            .on_attempt(Role::Build, "greeter-1", 1, Script::new().answer("not yet"))
            .on_attempt(Role::Build, "greeter-1", 2, done())
            .on(
                Role::Build,
                "greeter-2",
                Script::new().answer("<TASK_BLOCKED reason=\"unclear\">"),
            )
            // farewell does not depend on greeter: build mode goes on with it.
            .on(Role::Planner, "farewell", planner("# Plan: farewell"))
            .on(
                Role::Build,
                "farewell-1",
                Script::new().answer("<TASK_BLOCKED reason=\"later\">"),
            )
            .on(
                Role::Breakdown,
                "plan-mode",
                Script::new().json(json!({"specs": [
                    {"id": "greeter", "name": "Greeter", "file": "specs/greeter.md", "priority": 1,
                     "tasks": [
                        {"description": "Write greet.sh"},
                        {"description": "Test greet.sh with a NAME"},
                        {"description": "Document greet.sh"}
                     ]}
                ]})),
            ),
    );
    let ralph = ralph(dir, agent.clone(), Recorder::default(), vec![]);
    ralph.plan(Vec::<&str>::new()).await.unwrap();
    let outcome = ralph.build_specs().await.unwrap();
    assert!(
        matches!(outcome, SpecsOutcome::Blocked { .. }),
        "{outcome:?}"
    );
    let before = load(dir);
    let done = before.spec("greeter").unwrap().tasks[0].clone();
    assert_eq!((done.status, done.attempts), (Status::Completed, 2));

    let plan = ralph.plan(["specs/greeter.md"]).await.unwrap();
    let greeter = plan.spec("greeter").unwrap();
    let tasks: Vec<(&str, &str, Status)> = greeter
        .tasks
        .iter()
        .map(|t| (t.id.as_str(), t.description.as_str(), t.status))
        .collect();
    assert_eq!(
        tasks,
        [
            ("greeter-1", "Write greet.sh", Status::Completed),
            ("greeter-4", "Test greet.sh with a NAME", Status::Pending),
            ("greeter-3", "Document greet.sh", Status::Pending),
        ]
    );
    assert_eq!(
        greeter.tasks[0], done,
        "history kept: attempts, completedAt"
    );
    assert!(
        plan.spec("farewell").is_some(),
        "specs not re-planned are kept"
    );
    let second_prompt = &agent
        .requests()
        .into_iter()
        .filter(|r| r.role == Role::Breakdown)
        .nth(1)
        .unwrap()
        .prompt;
    assert!(second_prompt.contains("completed tasks, kept as they are: Write greet.sh"));
}

/// An unusable answer (a file that is not one of the specs, twice) leaves the file alone;
/// a spec outside the specs folder is refused before the agent runs.
#[tokio::test]
async fn bad_answers_and_bad_paths_change_nothing() {
    let ws = workspace(&specs());
    let dir = ws.path();
    let wrong = Script::new().json(json!({"specs": [
        {"id": "x", "name": "X", "file": "specs/other.md", "priority": 1, "tasks": []}
    ]}));
    let agent = Arc::new(FakeAgent::new().always(Role::Breakdown, wrong));
    let ralph = ralph(dir, agent.clone(), Recorder::default(), vec![]);
    let err = ralph
        .plan(["specs/greeter.md"])
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("specs/other.md") && err.contains("not changed"),
        "{err}"
    );
    assert_eq!(agent.requests().len(), 2, "one retry with the error shown");
    assert!(agent.requests()[1].prompt.contains("Invalid"));
    assert!(!dir.join("implementation.json").exists());

    let err = ralph.plan(["../outside.md"]).await.unwrap_err().to_string();
    assert!(err.contains("../outside.md"), "{err}");
    assert_eq!(agent.requests().len(), 2);
}

/// A hand-written implementation.json keeps the fields ralph does not know, at the top, in a
/// spec and in a task, through plan mode's merge and through a whole build.
#[tokio::test]
async fn unknown_fields_survive_plan_mode_and_build_mode() {
    let ws = workspace(&[("specs/greeter.md", "# Greeter\n\nWrite greet.sh.\n")]);
    let dir = ws.path();
    let hand_written = json!({
        "owner": "platform-team",
        "specs": [{
            "id": "greeter", "file": "specs/greeter.md", "jira": "GR-12",
            "tasks": [
                {"id": "greeter-1", "description": "Write greet.sh", "estimate": "1h"},
                {"id": "greeter-2", "description": "Test greet.sh", "status": "blocked"}
            ]
        }]
    });
    write(
        dir,
        "implementation.json",
        &serde_json::to_string_pretty(&hand_written).unwrap(),
    );
    let raw = || -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join("implementation.json")).unwrap())
            .unwrap()
    };
    let answer = Script::new().json(json!({"specs": [
        {"id": "greeter", "name": "Greeter", "file": "specs/greeter.md", "priority": 1,
         "tasks": [{"description": "Write greet.sh"}, {"description": "Test greet.sh"}]}
    ]}));
    let agent = Arc::new(
        FakeAgent::new()
            .on(Role::Breakdown, "plan-mode", answer)
            .on(Role::Planner, "greeter", planner("# Plan: greeter"))
            .always(Role::Build, done())
            .on(Role::Verify, "greeter", accept()),
    );
    let ralph = ralph(dir, agent, Recorder::default(), vec![]);
    ralph.plan(Vec::<&str>::new()).await.unwrap();
    let after_plan = raw();
    assert_eq!(after_plan["owner"], "platform-team");
    assert_eq!(after_plan["specs"][0]["jira"], "GR-12");
    assert_eq!(after_plan["specs"][0]["tasks"][0]["estimate"], "1h");
    assert_eq!(after_plan["specs"][0]["tasks"][1]["status"], "pending");
    assert_eq!(after_plan["updatedBy"], "plan-mode");

    let outcome = ralph.build_specs().await.unwrap();
    assert_eq!(specs_complete(&outcome), (1, 2));
    let after_build = raw();
    assert_eq!(after_build["owner"], "platform-team");
    assert_eq!(after_build["specs"][0]["jira"], "GR-12");
    assert_eq!(after_build["specs"][0]["tasks"][0]["estimate"], "1h");
    assert_eq!(after_build["specs"][0]["status"], "completed");
    assert_eq!(after_build["updatedBy"], "build-mode");
}
