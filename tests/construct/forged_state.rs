//! Audit row 28, end to end: an agent that writes a record of its own into
//! `.ralph/plan.jsonl` during its build stops the run, the next run refuses the file
//! (naming it and the line) instead of trusting the forgery, and after `Ralph::repair` an
//! honest run builds the task the forgery claimed was accepted.

use std::io::{Seek, SeekFrom, Write};

use super::*;

const TWO_TASKS: &[(&str, &str)] = &[
    ("Write a.txt", "a.txt exists"),
    ("Write b.txt", "b.txt exists"),
];

/// What the forging agent wants ralph to believe: t-2 accepted, though b.txt was never
/// written.
const FORGED: &str = "{\"t\":\"task\",\"id\":\"t-2\",\"name\":\"Write b.txt\",\"s\":\"a\"}\n";

/// Investigates i-1 into t-1 and t-2; builds t-1 with `build` (the forgery); accepts.
fn forging(build: Script) -> FakeAgent {
    FakeAgent::new()
        .on(Role::Investigate, "i-1", tasks(TWO_TASKS))
        .on(Role::Build, "t-1", build)
        .always(Role::Verify, accept("the file is there"))
        .always(Role::GapAnalysis, no_gaps())
}

/// Does each task's work and nothing else, from wherever the board stands.
fn honest() -> FakeAgent {
    let writes = |file: &str| {
        Script::new()
            .write(file, "hello\n")
            .answer(format!("Wrote {file}.\n<TASK_DONE>"))
    };
    FakeAgent::new()
        .always(Role::Investigate, tasks(TWO_TASKS))
        .on(Role::Build, "t-1", writes("a.txt"))
        .on(Role::Build, "t-2", writes("b.txt"))
        .always(Role::Build, done())
        .always(Role::Verify, accept("the file is there"))
        .always(Role::GapAnalysis, no_gaps())
}

/// A `Ralph` on `dir` with the default store (`.ralph/plan.jsonl`), as `ralph construct`
/// builds it.
fn on_workspace(dir: &Path, agent: Arc<FakeAgent>) -> Ralph {
    build_unlocked(|| {
        Ralph::builder()
            .workspace(dir)
            .agent(agent.clone())
            .stage_timeout(Duration::from_secs(20))
    })
}

/// An agent that, during its build of t-1, edits t-2's latest record in place from pending
/// to accepted (same length, same inode), then answers as `inner` does.
struct RewritesInPlace(Arc<FakeAgent>);

#[async_trait]
impl Agent for RewritesInPlace {
    async fn run(&self, request: AgentRequest) -> Result<AgentRun, AgentError> {
        if request.role == Role::Build && request.subject.as_deref() == Some("t-1") {
            // A clock that ticks coarsely could stamp the edit with the time of ralph's last
            // write; a real agent takes far longer than this before it writes.
            tokio::time::sleep(Duration::from_millis(30)).await;
            accept_t2_in_place(&plan_file(&request.workspace));
        }
        self.0.run(request).await
    }
}

fn accept_t2_in_place(plan: &Path) {
    let text = std::fs::read_to_string(plan).expect("plan.jsonl");
    let line_start = text
        .match_indices("{\"t\":\"task\",\"id\":\"t-2\"")
        .last()
        .expect("t-2 on record")
        .0;
    let at = line_start + text[line_start..].find("\"s\":\"p\"").expect("pending");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(plan)
        .expect("plan.jsonl opens for writing");
    file.seek(SeekFrom::Start(at as u64)).expect("seek");
    file.write_all(b"\"s\":\"a\"").expect("the edit");
}

/// Runs the forging first run, the refused second run, the repair and the honest third
/// run; `first` is the forging agent.
async fn forged_then_repaired(first: Arc<dyn Agent>, how: &str) {
    let dir = workspace(SPEC);
    let plan = plan_file(dir.path());

    // 1. The forgery stops the run at ralph's next write.
    let ralph = build_unlocked(|| {
        Ralph::builder()
            .workspace(dir.path())
            .agent(first.clone())
            .stage_timeout(Duration::from_secs(20))
    });
    let err = ralph.construct("spec.md").await.expect_err("the run stops");
    drop(ralph);
    let Error::Store(StoreError::Changed { path, how: said }) = &err else {
        panic!("not stopped for the changed file: {err:?}")
    };
    assert!(path.ends_with(".ralph/plan.jsonl"), "{err}");
    assert!(said.contains(how), "{err}");
    assert!(!dir.path().join("b.txt").exists());

    // 2. The next run refuses the file, naming it and the line, and runs no agent.
    let agent = Arc::new(honest());
    let forged = std::fs::read(&plan).expect("plan.jsonl");
    let err = on_workspace(dir.path(), agent.clone())
        .construct("spec.md")
        .await
        .expect_err("the forged file is refused");
    let Error::Store(StoreError::NotWritten { path, line, .. }) = &err else {
        panic!("not refused: {err:?}")
    };
    assert!(path.ends_with(".ralph/plan.jsonl"), "{err}");
    assert!(
        err.to_string()
            .starts_with(&format!("{}:{line}: not written by ralph", path.display())),
        "{err}"
    );
    assert!(
        agent.requests().is_empty(),
        "no agent ran on a forged board"
    );
    assert_eq!(
        std::fs::read(&plan).expect("plan.jsonl"),
        forged,
        "nothing written"
    );

    // 3. The person rolls back; the removed lines are kept beside the file.
    let ralph = on_workspace(dir.path(), agent.clone());
    let repair = ralph.repair(false).await.expect("repaired");
    let Some(ralph::store::Repair::RolledBack {
        from_line, copy, ..
    }) = &repair
    else {
        panic!("rolled back: {repair:?}")
    };
    assert!(*from_line <= *line);
    assert!(
        std::fs::read_to_string(copy)
            .expect("the copy")
            .contains("\"id\":\"t-2\"")
    );
    let board = ralph.board().await.expect("loads after the repair");
    assert!(
        board
            .task("t-2")
            .is_none_or(|t| t.status != TaskStatus::Accepted),
        "the forgery is gone"
    );

    // 4. An honest run builds t-2, and its file exists.
    let outcome = ralph.construct("spec.md").await.expect("the honest run");
    assert!(matches!(outcome, Outcome::Complete { .. }), "{outcome:?}");
    assert!(
        agent
            .requests()
            .iter()
            .any(|r| r.role == Role::Build && r.subject.as_deref() == Some("t-2")),
        "t-2 was built"
    );
    assert!(dir.path().join("b.txt").exists());
    let board = ralph.board().await.expect("loads");
    assert_eq!(
        board.task("t-2").expect("t-2 is on the board").status,
        TaskStatus::Accepted
    );
}

#[tokio::test]
async fn a_record_appended_by_the_agent_stops_the_run_and_is_refused_until_repaired() {
    let build = Script::new()
        .write("a.txt", "hello\n")
        .append(".ralph/plan.jsonl", FORGED)
        .answer("Wrote a.txt.\n<TASK_DONE>");
    forged_then_repaired(Arc::new(forging(build)), "grew").await;
}

#[tokio::test]
async fn a_record_rewritten_in_place_by_the_agent_stops_the_run_and_is_refused_until_repaired() {
    let build = Script::new()
        .write("a.txt", "hello\n")
        .answer("Wrote a.txt.\n<TASK_DONE>");
    let agent = RewritesInPlace(Arc::new(forging(build)));
    forged_then_repaired(Arc::new(agent), "was modified").await;
}
