//! Kills: a gate timeout, the stage timeout, the context limit; a compaction that works is no kill.

use super::*;

// ---------------------------------------------------------------------------------------
// 8. Gate timeout.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_gate_past_its_timeout_fails_the_attempt_and_leaves_no_process() {
    let h = Harness::new(one_task().always(Role::Build, done()));
    let slow = ShellGate::new("slow", "echo $$ >> gate.pids; exec sleep 30")
        .timeout(Duration::from_millis(300))
        .grace(Duration::from_millis(100));

    let outcome = h.run(|b| b.gate(slow).retries(1)).await;

    let items = blocked(&outcome);
    assert_eq!(items[0].id, "t-1");
    assert!(
        items[0]
            .reason
            .starts_with("gave up after 2 attempts: Quality gate `slow` timed out after 300ms"),
        "{}",
        items[0].reason
    );
    let timed_out = GateStatus::TimedOut {
        after: Duration::from_millis(300),
    };
    assert_eq!(h.gate_statuses(), [timed_out.clone(), timed_out]);
    let builds = h.requests(Role::Build, "t-1");
    assert_eq!(attempts(&builds), [1, 2]);
    assert!(
        builds[1].prompt.contains("Quality gate `slow` timed out"),
        "{}",
        builds[1].prompt
    );
    // A timeout is a failed attempt, not a kill.
    assert_eq!(h.task("t-1").kill_reason, None);
    assert!(h.events.of_kind("task_killed").is_empty());

    let pids: Vec<u32> = std::fs::read_to_string(h.path().join("gate.pids"))
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    for pid in pids {
        assert!(!sleep_alive(pid), "the gate's sleep {pid} survived");
    }
}

// ---------------------------------------------------------------------------------------
// 9. Kills: stage timeout, context limit; a compaction that works is no kill.
// ---------------------------------------------------------------------------------------

#[rstest]
#[case::stage_timeout(
    Script::new().print("compiling the world", 20).hang(),
    Some((KillReason::Timeout, "the build agent was stopped by stage_timeout (400ms)"))
)]
#[case::context_limit(
    Script::new().print("compiling the world", 20).usage(96, 100, None),
    Some((KillReason::ContextLimit, "the build agent was stopped at the context limit (95%)"))
)]
#[case::failed_compaction(
    Script::new().print("compiling the world", 20).usage(90, 100, Some(85)),
    Some((KillReason::ContextLimit, "the build agent was stopped at the context limit (95%)"))
)]
#[case::compaction_succeeds(
    Script::new().usage(90, 100, Some(40)).write("done.txt", "hi\n").answer("Done.\n<TASK_DONE>"),
    None
)]
#[tokio::test]
async fn a_killed_task_is_decomposed_and_a_compacted_one_carries_on(
    #[case] first_run: Script,
    #[case] kill: Option<(KillReason, &str)>,
) {
    let mut agent = one_task()
        .on(Role::Build, "t-1", first_run)
        .always(Role::Build, writes_done());
    if kill.is_some() {
        agent = agent.on(
            Role::Decompose,
            "t-1",
            Script::new().json(json!({"subtasks": [
                {"name": "Write the greeting", "accept": "greets"},
                {"name": "Write the farewell", "accept": "says bye"}
            ]})),
        );
    }
    let h = Harness::new(agent);

    let outcome = h
        .run(|b| {
            b.gate(done_gate())
                .stage_timeout(Duration::from_millis(400))
        })
        .await;

    h.agent.verify().unwrap();
    let Some((reason, tombstone)) = kill else {
        assert_eq!(complete(&outcome), (1, 1));
        assert!(h.events.of_kind("task_killed").is_empty());
        let compacted: Vec<_> = h
            .events
            .of_kind("agent")
            .into_iter()
            .filter(|e| e["kind"] == "compacted")
            .collect();
        assert_eq!(compacted.len(), 1);
        assert_eq!(compacted[0]["subject"], "t-1");
        let task = h.task("t-1");
        assert_eq!(
            (task.status, task.kill_reason),
            (TaskStatus::Accepted, None)
        );
        // Seed 000's log lines, in the BUILD stage's log (audit rows 000-R52, 000-R53).
        let logs = stage_logs(h.path());
        for line in [
            "[RALPH] Context pressure: 90% - compacting",
            "[RALPH] Context compacted: 90% -> 40%",
        ] {
            assert!(logs.contains(line), "missing {line:?} in\n{logs}");
        }
        return;
    };

    assert_eq!(complete(&outcome), (2, 2));
    let killed = h.events.of_kind("task_killed");
    assert_eq!(killed.len(), 1);
    assert_eq!(killed[0]["reason"], reason.to_string());
    // The kill was persisted (pending + kill_reason + kill_log) before DECOMPOSE ran.
    let history = h.history("t-1");
    let at_kill = history.iter().find(|t| t.kill_reason.is_some()).unwrap();
    assert_eq!(at_kill.status, TaskStatus::Pending);
    assert_eq!(at_kill.kill_reason, Some(reason));
    let log = at_kill.kill_log.clone().unwrap();
    assert!(log.is_relative() && log.starts_with("build/ralph-logs"));
    let text = std::fs::read_to_string(h.path().join(&log)).unwrap();
    assert!(text.contains("compiling the world"));
    assert_eq!(at_kill.tombstones[0].reason, tombstone);

    let decompose = &h.requests(Role::Decompose, "t-1")[0];
    assert!(decompose.prompt.contains("compiling the world"));
    assert!(decompose.prompt.contains(&reason.to_string()));
    let board = h.store.board();
    assert_eq!(board.task("t-1").unwrap().status, TaskStatus::Decomposed);
    for sub in ["t-1a", "t-1b"] {
        assert_eq!(board.task(sub).unwrap().status, TaskStatus::Accepted);
        assert_eq!(board.task(sub).unwrap().parent.as_ref().unwrap(), "t-1");
    }
    assert_eq!(
        h.events.stages(),
        [
            (1, "INVESTIGATE".to_owned()),
            (1, "BUILD".to_owned()),
            (1, "DECOMPOSE".to_owned()),
            (2, "BUILD".to_owned()),
            (2, "VERIFY".to_owned()),
        ]
    );
}

/// Audit case 24: an agent that hangs is not given ever smaller tasks (t-1, t-1a, t-1aa, …)
/// at the cost of one timeout each. A subtask stopped by the timeout, as its parent was, is
/// blocked with what to do; its sibling is still built.
#[tokio::test]
async fn a_subtask_that_times_out_like_its_parent_is_blocked_not_decomposed_again() {
    let hangs = || Script::new().print("waiting for the network", 3).hang();
    let agent = one_task()
        .on(Role::Build, "t-1", hangs())
        .on(Role::Build, "t-1a", hangs())
        .always(Role::Build, writes_done())
        .on(Role::Decompose, "t-1", two_parts());
    let h = Harness::new(agent);

    let outcome = h
        .run(|b| {
            b.gate(done_gate())
                .stage_timeout(Duration::from_millis(400))
        })
        .await;

    h.agent.verify().unwrap();
    let items = blocked(&outcome);
    assert_eq!(items.len(), 1, "{items:?}");
    let board = h.store.board();
    let t1a = &board.task("t-1a").unwrap();
    assert_eq!(t1a.status, TaskStatus::Blocked);
    let reason = t1a.blocked_reason.clone().unwrap();
    for part in [
        "the build agent was stopped by stage_timeout (400ms), as t-1 was",
        "raise the setting named",
        "its log: build/ralph-logs/",
    ] {
        assert!(reason.contains(part), "{part:?} not in {reason:?}");
    }
    assert_eq!(board.task("t-1b").unwrap().status, TaskStatus::Accepted);
    assert!(h.requests(Role::Decompose, "t-1a").is_empty());
    assert!(board.task("t-1aa").is_none());
}

/// Audit row 000-R52: at the warn tier (70 %) the user sees seed 000's line word for word,
/// in the stage's log and as the event's line (what `ralph` prints), and the task goes on:
/// no compaction, no kill.
#[tokio::test]
async fn the_warn_tier_line_is_seed_000s_and_the_task_carries_on() {
    let h = Harness::new(
        one_task().on(
            Role::Build,
            "t-1",
            Script::new()
                .usage(75, 100, None)
                .write("done.txt", "hi\n")
                .answer("Done.\n<TASK_DONE>"),
        ),
    );

    let outcome = h.run(|b| b.gate(done_gate())).await;

    assert_eq!(complete(&outcome), (1, 1));
    let line = "[RALPH] Context pressure: 75% - consider wrapping up";
    let logs = stage_logs(h.path());
    assert!(
        logs.lines().any(|l| l.ends_with(&format!(" {line}"))),
        "missing {line:?} in\n{logs}"
    );
    let shown: Vec<String> = h
        .events
        .events()
        .iter()
        .map(ToString::to_string)
        .filter(|l| l.contains("[RALPH]"))
        .collect();
    assert_eq!(shown, [line]);
    assert!(h.events.of_kind("task_killed").is_empty());
    let task = h.task("t-1");
    assert_eq!(
        (task.status, task.kill_reason),
        (TaskStatus::Accepted, None)
    );
}

// ---------------------------------------------------------------------------------------
// Kills outside BUILD go to DECOMPOSE too (audit rows 000-R49, 000-R50).
// ---------------------------------------------------------------------------------------

/// Two subtasks from the decomposer.
fn two_parts() -> Script {
    Script::new().json(json!({"subtasks": [
        {"name": "Write the greeting", "accept": "greets"},
        {"name": "Write the farewell", "accept": "says bye"}
    ]}))
}

#[rstest]
#[case::timeout(
    Script::new().print("reading every file", 20).hang(),
    KillReason::Timeout,
    "the verifier was stopped by stage_timeout (400ms)"
)]
#[case::context_limit(
    Script::new().print("reading every file", 20).usage(96, 100, None),
    KillReason::ContextLimit,
    "the verifier was stopped at the context limit (95%)"
)]
#[tokio::test]
async fn a_killed_verifier_sends_its_task_to_decompose_not_to_a_rejection(
    #[case] verifier: Script,
    #[case] reason: KillReason,
    #[case] tombstone: &str,
) {
    let h = Harness::new(
        one_task()
            .on(Role::Verify, "t-1", verifier)
            .on(Role::Decompose, "t-1", two_parts())
            .always(Role::Build, writes_done()),
    );

    let outcome = h
        .run(|b| {
            b.gate(done_gate())
                .stage_timeout(Duration::from_millis(400))
        })
        .await;

    h.agent.verify().unwrap();
    assert!(
        matches!(outcome, Outcome::Complete { accepted: 2, .. }),
        "{outcome:?}"
    );
    let killed = h.events.of_kind("task_killed");
    assert_eq!(killed.len(), 1);
    assert_eq!(killed[0]["task"], "t-1");
    assert_eq!(killed[0]["reason"], reason.to_string());
    // Not a verdict: no rejection, and t-1 was never built again.
    assert!(
        h.events
            .of_kind("verdict")
            .iter()
            .all(|v| v["task"] != "t-1")
    );
    assert_eq!(attempts(&h.requests(Role::Build, "t-1")), [1]);
    let at_kill = h
        .history("t-1")
        .into_iter()
        .find(|t| t.kill_reason.is_some())
        .unwrap();
    assert_eq!(at_kill.status, TaskStatus::Pending);
    assert_eq!(at_kill.tombstones.last().unwrap().reason, tombstone);
    let log = at_kill.kill_log.unwrap();
    let text = std::fs::read_to_string(h.path().join(&log)).unwrap();
    assert!(text.contains("reading every file"), "{log:?}");

    let decompose = &h.requests(Role::Decompose, "t-1")[0];
    assert!(decompose.prompt.contains("reading every file"));
    let board = h.store.board();
    assert_eq!(board.task("t-1").unwrap().status, TaskStatus::Decomposed);
    for sub in ["t-1a", "t-1b"] {
        assert_eq!(board.task(sub).unwrap().status, TaskStatus::Accepted);
    }
}

#[tokio::test]
async fn a_killed_investigator_sends_its_issue_to_decompose() {
    let h = Harness::new(
        FakeAgent::new()
            .on(
                Role::Investigate,
                "i-1",
                Script::new().print("listing the repository", 20).hang(),
            )
            .on(Role::Decompose, "i-1", two_parts())
            .always(Role::Build, writes_done())
            .always(Role::Verify, accept("meets the criteria"))
            .always(Role::GapAnalysis, no_gaps()),
    );

    let outcome = h
        .run(|b| {
            b.gate(done_gate())
                .stage_timeout(Duration::from_millis(400))
        })
        .await;

    h.agent.verify().unwrap();
    assert!(
        matches!(outcome, Outcome::Complete { accepted: 2, .. }),
        "{outcome:?}"
    );
    let killed = h.events.of_kind("issue_killed");
    assert_eq!(killed.len(), 1);
    assert_eq!(killed[0]["issue"], "i-1");
    assert_eq!(killed[0]["reason"], "timeout");
    // Investigated once, never again: DECOMPOSE made its tasks from the log.
    assert_eq!(h.requests(Role::Investigate, "i-1").len(), 1);
    let decompose = &h.requests(Role::Decompose, "i-1")[0];
    assert!(decompose.prompt.contains("listing the repository"));
    assert!(
        decompose.prompt.contains("The issue"),
        "{}",
        decompose.prompt
    );
    let decomposed = h.events.of_kind("issue_decomposed");
    assert_eq!(decomposed[0]["into"], json!(["t-1", "t-2"]));
    let board = h.store.board();
    let issue = &board.issue("i-1").unwrap();
    assert_eq!(issue.status, IssueStatus::Resolved);
    assert_eq!(issue.kill_reason, Some(KillReason::Timeout));
    assert_eq!(issue.tasks, ["t-1", "t-2"]);
    assert_eq!(
        h.events.stages()[..3],
        [
            (1, "INVESTIGATE".to_owned()),
            (1, "DECOMPOSE".to_owned()),
            (2, "BUILD".to_owned()),
        ]
    );
}

/// Every stage log of the run, one after the other.
fn stage_logs(workspace: &Path) -> String {
    let mut text = String::new();
    let logs = std::fs::read_dir(workspace.join("build/ralph-logs")).expect("the log folder");
    for entry in logs {
        let path = entry.expect("a log").path();
        if path.extension().is_some_and(|e| e == "log") {
            text.push_str(&std::fs::read_to_string(path).expect("a readable log"));
        }
    }
    text
}

/// The tombstone of task `id`'s kill, from every record of it a store kept.
fn kill_tombstone(store: &MemoryStore, id: &str) -> String {
    store
        .persisted()
        .into_iter()
        .find_map(|c| match c {
            Change::Task(t) if t.id == id && t.kill_reason.is_some() => {
                t.tombstones.last().map(|tomb| tomb.reason.clone())
            }
            _ => None,
        })
        .expect("a kill was recorded")
}

/// Issue 39: a kill names the clock that fired. With `agent_timeout` shorter than the stage,
/// a hanging build is stopped by `agent_timeout`, and its tombstone says so, not the stage's.
#[tokio::test]
async fn a_build_stopped_by_agent_timeout_names_agent_timeout() {
    let h = Harness::new(
        one_task()
            .on(Role::Build, "t-1", Script::new().print("working", 3).hang())
            .on(Role::Decompose, "t-1", two_parts())
            .always(Role::Build, writes_done()),
    );

    h.run(|b| {
        b.gate(done_gate())
            .agent_timeout(Duration::from_millis(300))
    })
    .await;

    assert_eq!(
        kill_tombstone(&h.store, "t-1"),
        "the build agent was stopped by agent_timeout (300ms)"
    );
}

/// Issue 39: a verifier cut by its agent's idle timeout (a command agent, silent after one
/// line) is named as the verifier, stopped by the idle timeout, not by `agent_timeout` or
/// `stage_timeout`; its built task waits for DECOMPOSE.
#[tokio::test]
async fn a_verifier_cut_by_the_idle_timeout_is_named_with_that_clock() {
    let dir = workspace(SPEC);
    let script = r#"cat > /dev/null
case "$1" in
  investigate) echo '{"tasks":[{"name":"Write done.txt","accept":"done.txt exists"}]}' ;;
  build) echo hello > done.txt; echo 'Wrote done.txt.'; echo '<TASK_DONE>' ;;
  verify) echo 'reading every file'; exec sleep 1000 ;;
  decompose) echo '{"subtasks":[{"name":"a","accept":"a"},{"name":"b","accept":"b"}]}' ;;
  *) echo '{"tasks":[],"issues":[]}' ;;
esac"#;
    let agent = ralph::agent::CommandAgent::new("sh", ["sh", "-c", script, "agent", "{role}"])
        .idle_timeout(Duration::from_millis(500))
        .grace(Duration::from_millis(200));
    let store = MemoryStore::new();
    let ralph = Ralph::builder()
        .workspace(dir.path())
        .agent(agent)
        .store(store.clone())
        .max_iterations(1)
        .stage_timeout(Duration::from_secs(60))
        .build()
        .unwrap();

    ralph.construct("spec.md").await.unwrap();

    assert_eq!(
        kill_tombstone(&store, "t-1"),
        "the verifier was stopped by its idle timeout (500ms without output)"
    );
    let t1 = store.board().task("t-1").unwrap().clone();
    assert_eq!(
        (t1.status, t1.kill_reason),
        (TaskStatus::Pending, Some(KillReason::Timeout)),
        "waiting for DECOMPOSE"
    );
}
