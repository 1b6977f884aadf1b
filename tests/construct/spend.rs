//! One figure of spend: the ledger (`.ralph/spend.jsonl`) is the truth, and the board, the
//! `finished` event and `Ralph::spent` are read from it; an edit of the ledger ralph did not
//! make is found and the budget still holds.

#![allow(clippy::unwrap_used)]

use super::*;

/// The ledger's total in dollars, read from the file as its docs say: one figure per run
/// (its last line: a provisional line is replaced by the run's next), none before a reset.
fn ledger_total(ws: &Path) -> f64 {
    let text = std::fs::read_to_string(ws.join(".ralph/spend.jsonl")).unwrap_or_default();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let start = lines
        .iter()
        .rposition(|l| l["reset"] == true)
        .map_or(0, |at| at + 1);
    let counted = &lines[start..];
    (0..counted.len())
        .filter(|at| {
            let run = &counted[*at]["run"];
            run.is_null() || counted[at + 1..].iter().all(|l| l["run"] != *run)
        })
        .map(|at| counted[at]["cost_usd"].as_f64().unwrap_or(0.0))
        .sum()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

// library-user F1: after a stop and a resume, the ledger, `Board::run` (as `Ralph::board`
// gives it and as the store saved it), the `finished` event and `Ralph::spent` give one
// figure. Before, the ledger said $0.07, the board $0.04 and the summary $0.02.
#[tokio::test]
async fn after_a_stop_and_a_resume_the_ledger_the_board_and_the_events_agree() {
    let dir = workspace(SPEC);
    let store = dir.path().join(".ralph/plan.jsonl");
    let first = Arc::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                Script::new()
                    .spend(100, 10, Some(0.01))
                    .json(json!({"tasks": [{"name": "Write done.txt", "accept": "greets"}]})),
            )
            .on(
                Role::Build,
                "t-1",
                Script::new().spend(200, 20, Some(0.02)).hang(),
            ),
    );
    let ralph = Arc::new(
        Ralph::builder()
            .workspace(dir.path())
            .agent(first.clone())
            .gate(done_gate())
            .store(JsonlStore::open(&store).unwrap())
            .build()
            .unwrap(),
    );
    let running = tokio::spawn({
        let ralph = ralph.clone();
        async move { ralph.construct("spec.md").await }
    });
    wait_for_request(&first, Role::Build).await;
    ralph.stop_token().stop();
    let outcome = running.await.unwrap().unwrap();
    assert_eq!(outcome, Outcome::Interrupted);
    drop(ralph);

    let events = Recorder::default();
    let second = FakeAgent::new()
        .on(
            Role::Build,
            "t-1",
            Script::new()
                .spend(300, 30, Some(0.03))
                .write("done.txt", "hello\n")
                .answer("Done.\n<TASK_DONE>"),
        )
        .on(
            Role::Verify,
            "t-1",
            Script::new()
                .spend(50, 5, Some(0.01))
                .json(json!({"verdict": "accept", "reason": "greets"})),
        )
        .always(Role::GapAnalysis, no_gaps());
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(second)
        .gate(done_gate())
        .store(JsonlStore::open(&store).unwrap())
        .observer(events.clone())
        .build()
        .unwrap();
    let outcome = ralph.construct("spec.md").await.unwrap();
    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");

    let ledger = ledger_total(dir.path());
    assert!(close(ledger, 0.07), "the ledger: {ledger}");
    let spent = ralph.spent("construct").unwrap();
    assert!(close(spent.cost_usd, ledger), "{spent:?}");
    assert_eq!((spent.input_tokens, spent.output_tokens), (650, 65));
    assert!(!spent.is_estimate(), "every run ended: {spent:?}");
    let board = ralph.board().await.unwrap();
    assert!(close(board.run.cost_usd, ledger), "{:?}", board.run);
    assert_eq!((board.run.tokens_in, board.run.tokens_out), (650, 65));
    // The store saved the same figure at the end of the run.
    let saved = JsonlStore::open(&store).unwrap().load().await.unwrap();
    assert!(close(saved.run.cost_usd, ledger), "{:?}", saved.run);
    assert_eq!(saved.run.tokens_in, 650);
    let finished = &events.of_kind("finished")[0];
    assert!(
        close(finished["spent_usd"].as_f64().unwrap(), ledger),
        "{finished}"
    );
    assert_eq!(finished["spent_tokens"], 715, "{finished}");
}

// The public read: each scope's figure as the ledger holds it, a run cut short counted by
// its last provisional line and said to be an estimate, a reset starting a scope afresh.
#[tokio::test]
async fn the_public_read_returns_each_scopes_figure() {
    let dir = workspace(SPEC);
    let lines = [
        r#"{"at":"t","scope":"construct","role":"build","input_tokens":500,"cost_usd":0.5}"#,
        r#"{"at":"t","scope":"build","run":"r1","estimate":true,"input_tokens":10,"cost_usd":0.1}"#,
        r#"{"at":"t","scope":"build","run":"r1","input_tokens":30,"output_tokens":3,"cost_usd":0.3}"#,
        r#"{"at":"t","scope":"build","run":"r2","estimate":true,"input_tokens":20,"cost_usd":0.2}"#,
        r#"{"at":"t","scope":"build","run":"r2","estimate":true,"input_tokens":40,"cost_usd":0.4}"#,
        r#"{"at":"t","scope":"construct","reset":true}"#,
        r#"{"at":"t","scope":"construct","role":"verify","output_tokens":7}"#,
    ];
    write(dir.path(), ".ralph/spend.jsonl", &(lines.join("\n") + "\n"));
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(FakeAgent::new())
        .build()
        .unwrap();
    let build = ralph.spent("build").unwrap();
    assert!(close(build.cost_usd, 0.7), "{build:?}");
    assert_eq!(
        (build.input_tokens, build.output_tokens, build.runs),
        (70, 3, 2)
    );
    assert_eq!(build.estimated_runs, 1);
    assert!(build.is_estimate());
    let construct = ralph.spent("construct").unwrap();
    assert_eq!((construct.runs, construct.unpriced_runs), (1, 1));
    assert_eq!((construct.tokens(), construct.cost_usd), (7, 0.0));
    assert_eq!(ralph.spent("thread/1-x").unwrap(), ralph::Spent::default());
}

// newcomer row 67: the ledger emptied under a running ralph (here by an unconfined agent of
// the run) is found at the next write; what it lost is restored, and the budget stops the
// run where it would have. Before, the run went on as if nothing had been spent.
#[tokio::test]
async fn a_ledger_emptied_under_a_run_is_found_and_the_budget_still_holds() {
    let dir = workspace(SPEC);
    let agent = FakeAgent::new()
        .on(
            Role::Investigate,
            "i-1",
            Script::new()
                .spend(1000, 200, Some(0.40))
                .json(json!({"tasks": [
                    {"name": "A", "accept": "a"}, {"name": "B", "accept": "b"},
                ]})),
        )
        .on(
            Role::Build,
            "t-1",
            Script::new()
                .spend(1000, 200, Some(0.40))
                .write("done.txt", "hello\n")
                .answer("Done.\n<TASK_DONE>"),
        )
        .on(
            Role::Build,
            "t-2",
            Script::new()
                .write(".ralph/spend.jsonl", "")
                .spend(1000, 200, Some(0.40))
                .answer("Done.\n<TASK_DONE>"),
        )
        .always(Role::Verify, accept("ok"))
        .always(Role::GapAnalysis, no_gaps());
    let events = Recorder::default();
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(agent)
        .gate(done_gate())
        .max_cost_usd(1.0)
        .observer(events.clone())
        .build()
        .unwrap();
    let outcome = ralph.construct("spec.md").await.unwrap();
    let Outcome::BudgetExhausted { spent_usd, .. } = outcome else {
        panic!("the budget stops the run: {outcome:?}");
    };
    assert!(close(spent_usd, 1.2), "{spent_usd}");
    // No run after the third: the two the edit took away still count.
    assert_eq!(events.of_kind("agent_finished").len(), 3);
    let warning = events
        .warnings()
        .into_iter()
        .map(|w| w["message"].as_str().unwrap().to_owned())
        .find(|m| m.contains("spend.jsonl"))
        .expect("a warning names the ledger");
    assert!(
        warning.contains("was truncated")
            && warning.contains("restored")
            && warning.contains("next:"),
        "{warning}"
    );
    // The file says so too: a `restored` line, and the same figure on the next load.
    assert!(close(ledger_total(dir.path()), 1.2));
    assert!(close(ralph.spent("construct").unwrap().cost_usd, 1.2));
}

// library-user F4: at the budget limit `TaskStarted` announced an attempt whose agent never
// ran. An attempt is announced only when its agent runs.
#[tokio::test]
async fn no_attempt_is_announced_past_the_budget() {
    let dir = workspace(SPEC);
    let costly = |file: &str| {
        Script::new()
            .spend(1000, 200, Some(0.60))
            .write(file, "hello\n")
            .answer("Done.\n<TASK_DONE>")
    };
    let agent = FakeAgent::new()
        .on(
            Role::Investigate,
            "i-1",
            Script::new().json(json!({"tasks": [
                {"name": "A", "accept": "a"}, {"name": "B", "accept": "b"}, {"name": "C", "accept": "c"},
            ]})),
        )
        .on(Role::Build, "t-1", costly("a.txt"))
        .on(Role::Build, "t-2", costly("b.txt"))
        .on(Role::Build, "t-3", costly("c.txt"))
        .always(Role::Verify, accept("ok"))
        .always(Role::GapAnalysis, no_gaps());
    let events = Recorder::default();
    let outcome = Ralph::builder()
        .workspace(dir.path())
        .agent(agent)
        .max_cost_usd(1.0)
        .observer(events.clone())
        .build()
        .unwrap()
        .construct("spec.md")
        .await
        .unwrap();
    assert!(
        matches!(outcome, Outcome::BudgetExhausted { .. }),
        "{outcome:?}"
    );
    let started: Vec<String> = events
        .of_kind("task_started")
        .iter()
        .map(|e| e["task"].as_str().unwrap().to_owned())
        .collect();
    let built: Vec<String> = events
        .of_kind("agent_finished")
        .iter()
        .filter(|e| e["role"] == "build")
        .map(|e| e["subject"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(started, built, "one announcement per build that ran");
    assert_eq!(built, ["t-1", "t-2"]);
}
