//! Every stop has a way forward (issue "Done is earned"): each dead end a person met (audit
//! rows 11, 24, 27, 54–56, 63 and 65) ends with a `next:` command naming the actual ids, and
//! that command, run as printed by a shell, makes progress. A person's bad edit is refused
//! naming the field.

use std::process::Output;

use super::*;

/// An agent for every role, as a shell script: `i-1` becomes one task, each build writes
/// `<task>.txt`, verifiers accept, the gap analysis finds nothing.
const WORKS: &str = r#"cat > /dev/null
case "$1" in
  investigate) echo '{"tasks":[{"name":"Write hello.txt","accept":"hello.txt says hello"}]}' ;;
  build) echo hello > "$2.txt"; printf 'Wrote %s.txt.\n<TASK_DONE>\n' "$2" ;;
  verify) echo '{"verdict":"accept","reason":"it says hello"}' ;;
  gap_analysis) echo '{"tasks":[],"issues":[]}' ;;
  *) echo "unexpected role $1" >&2; exit 1 ;;
esac
"#;

/// `ralph.toml` whose agent is `agents = [NAME]`, with the tables of `down` (an agent that
/// cannot work: `false`), `prose` (a sentence before its JSON) and `works` (the script in
/// `agent.sh`), and `more` settings.
fn config(dir: &Path, agent: &str, more: &str) {
    std::fs::write(
        dir.join("ralph.toml"),
        format!(
            "agents = [\"{agent}\"]\n{more}\n\
             [agent.down]\ncommand = [\"false\"]\n\
             [agent.prose]\ncommand = [\"sh\", \"prose.sh\"]\n\
             [agent.works]\ncommand = [\"sh\", \"agent.sh\", \"{{role}}\", \"{{subject}}\"]\n"
        ),
    )
    .unwrap();
}

/// A project with the agents' scripts (`agent.sh`: [`WORKS`]; `prose.sh`: an answer with a
/// sentence before its JSON).
pub(super) fn project_with_agents(agent: &str, more: &str) -> tempfile::TempDir {
    let dir = project();
    std::fs::write(dir.path().join("agent.sh"), WORKS).unwrap();
    std::fs::write(
        dir.path().join("prose.sh"),
        "cat > /dev/null\necho 'Here is the plan:'\necho '{\"tasks\":[]}'\n",
    )
    .unwrap();
    config(dir.path(), agent, more);
    dir
}

/// The command of `out`'s `next:` line: its first text in backticks.
pub(super) fn next_command(out: &Output) -> String {
    let text = stdout(out);
    let line = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("next: "))
        .unwrap_or_else(|| panic!("no next: line in\n{text}"));
    line.split('`')
        .nth(1)
        .unwrap_or_else(|| panic!("no command in {line:?}"))
        .to_owned()
}

/// Runs `command` in `dir` as a person would paste it into a shell, the `ralph` on PATH
/// being this build's.
pub(super) fn run_printed(dir: &Path, command: &str) -> Output {
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(ralph_bin(), bin.path().join("ralph")).unwrap();
    Command::new("sh")
        .args(["-c", command])
        .current_dir(dir)
        .env_remove("RALPH_CLAUDE_BIN")
        .env(
            "PATH",
            format!("{}:/usr/local/bin:/usr/bin:/bin", bin.path().display()),
        )
        .output()
        .unwrap()
}

fn ok(out: &Output) -> &Output {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        stdout(out),
        stderr(out)
    );
    out
}

/// Audit rows 11 and 65: an investigator that cannot work blocks the spec's issue; `ralph
/// status` lists it with its reason, the printed command unblocks it, and with a working
/// agent the same command completes the spec.
#[test]
fn a_failing_investigator_blocks_i_1_and_the_printed_unblock_leads_on() {
    let dir = project_with_agents("down", "");

    let out = ralph(dir.path(), &["construct", "spec.md"], &[]);

    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("i-1: the agent failed"),
        "{}",
        stdout(&out)
    );
    let command = next_command(&out);
    assert_eq!(command, "ralph issue unblock i-1 && ralph construct");
    let status = ok(&ralph(dir.path(), &["status"], &[])).clone();
    let text = stdout(&status);
    assert!(
        text.lines()
            .any(|l| l.starts_with("i-1    blocked    issue: ")
                && l.contains("— blocked: the agent failed")),
        "{text}"
    );
    assert_eq!(next_command(&status), command);
    // Case 11: a script sees what is blocked, and why.
    let issues = stdout(ok(&ralph(dir.path(), &["query", "issues"], &[])));
    let issue: serde_json::Value = serde_json::from_str(issues.trim()).unwrap();
    assert_eq!(
        (&issue["id"], &issue["status"]),
        (&"i-1".into(), &"blocked".into()),
        "{issues}"
    );
    assert!(
        issue["reason"]
            .as_str()
            .is_some_and(|r| r.contains("the agent failed")),
        "{issues}"
    );

    config(dir.path(), "works", "");
    let out = run_printed(dir.path(), &command);

    ok(&out);
    assert!(stdout(&out).contains("i-1 open again"), "{}", stdout(&out));
    assert!(stdout(&out).contains("Spec complete"), "{}", stdout(&out));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("t-1.txt")).unwrap(),
        "hello\n"
    );
}

/// Audit row 27: an investigate answer with a sentence before its JSON has the same way out;
/// `ralph task unblock i-1` works too, saying what it did.
#[test]
fn an_investigator_answering_prose_before_its_json_has_the_same_way_out() {
    let dir = project_with_agents("prose", "");

    let out = ralph(dir.path(), &["construct", "spec.md"], &[]);

    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("i-1: no valid answer after a retry"),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        next_command(&out),
        "ralph issue unblock i-1 && ralph construct"
    );

    config(dir.path(), "works", "");
    let unblocked = ok(&ralph(dir.path(), &["task", "unblock", "i-1"], &[])).clone();
    assert_eq!(stdout(&unblocked).trim(), "i-1 open again");
    let out = run_printed(dir.path(), "ralph construct");
    ok(&out);
    assert!(stdout(&out).contains("Spec complete"), "{}", stdout(&out));
}

/// Audit row 24: after `Stopped: max iterations`, the printed command runs as many
/// iterations again (the limit counts per invocation), and completes.
#[test]
fn after_max_iterations_the_printed_command_runs_more_iterations_and_completes() {
    // The verifier rejects the first time, then accepts: two iterations are needed.
    let state = tempfile::tempdir().unwrap();
    let once = state.path().join("rejected-once");
    // The verifier's memory is outside the work tree, which it may not write: the sandbox
    // is told.
    let more = format!(
        "max_iterations = 1\n[sandbox]\nwrite = [{:?}]",
        state.path().display().to_string()
    );
    let dir = project_with_agents("works", &more);
    let script = WORKS.replace(
        r#"  verify) echo '{"verdict":"accept","reason":"it says hello"}' ;;"#,
        &format!(
            "  verify) if [ -e '{0}' ]; then echo '{{\"verdict\":\"accept\",\"reason\":\"ok\"}}'; \
             else touch '{0}'; echo '{{\"verdict\":\"reject\",\"reason\":\"say hello louder\"}}'; fi ;;",
            once.display()
        ),
    );
    std::fs::write(dir.path().join("agent.sh"), script).unwrap();

    let out = ralph(dir.path(), &["construct", "spec.md"], &[]);

    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("Stopped: max iterations (1) reached"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("next: `ralph construct` runs up to 1 more iteration"),
        "{}",
        stdout(&out)
    );
    let iteration = |dir: &Path| -> u32 {
        stdout(&ralph(dir, &["query", "iteration"], &[]))
            .trim()
            .parse()
            .unwrap()
    };
    let before = iteration(dir.path());

    let out = run_printed(dir.path(), &next_command(&out));

    ok(&out);
    assert!(stdout(&out).contains("Spec complete"), "{}", stdout(&out));
    // The iteration that was next ran and completed the spec: the counter shows it.
    assert_eq!(
        iteration(dir.path()),
        before,
        "the command ran the next iteration"
    );
}

/// A task the gates blocked: the printed command unblocks it by its id and, once the gate
/// passes, the spec completes.
#[test]
fn a_task_the_gates_blocked_is_unblocked_by_the_printed_command() {
    let dir = project_with_agents(
        "works",
        "retries = 0\n[[gates]]\nname = \"fixed\"\ncommand = \"test -e fixed\"\n",
    );

    let out = ralph(dir.path(), &["construct", "spec.md"], &[]);

    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let command = next_command(&out);
    assert_eq!(command, "ralph task unblock t-1 && ralph construct");
    assert!(
        stdout(&out).contains("fix what blocked it (the reason above), then"),
        "{}",
        stdout(&out)
    );

    std::fs::write(dir.path().join("fixed"), "").unwrap();
    let out = run_printed(dir.path(), &command);

    ok(&out);
    assert!(
        stdout(&out).contains("t-1 pending again"),
        "{}",
        stdout(&out)
    );
    assert!(stdout(&out).contains("Spec complete"), "{}", stdout(&out));
}

/// The printed command repeats the flags that chose the agent: run with `--agent works`,
/// a blocked task's next step is unblocked and run with `--agent works` again.
#[test]
fn the_printed_command_keeps_the_agent_the_run_was_given() {
    let dir = project_with_agents(
        "down",
        "retries = 0\n[[gates]]\nname = \"fixed\"\ncommand = \"test -e fixed\"\n",
    );

    let out = ralph(
        dir.path(),
        &["construct", "spec.md", "--agent", "works"],
        &[],
    );

    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let command = next_command(&out);
    assert_eq!(
        command,
        "ralph task unblock t-1 && ralph construct --agent works"
    );
    std::fs::write(dir.path().join("fixed"), "").unwrap();
    ok(&run_printed(dir.path(), &command));
}

/// Audit rows 54–56 and 63: each bad edit is refused with the field it names, and the board
/// is left as it was.
#[test]
fn task_add_and_issue_add_say_which_field_is_wrong() {
    let dir = project();
    for (json, said) in [
        (r#"{"name":"n"}"#, "task add: accept is empty"),
        (r#"{"name":"","accept":"a"}"#, "task add: name is empty"),
        (
            r#"{"name":"a\nb","accept":"a"}"#,
            "task add: name holds a line break",
        ),
        (
            r#"{"name":"n","accept":"a","deps":["t-99"]}"#,
            "task add: deps[0] names t-99, which is not on the board",
        ),
        (
            r#"{"id":"t-50","name":"n","accept":"a","deps":["t-50"]}"#,
            "task add: deps[0] names the task itself (t-50): a dependency cycle",
        ),
        (
            r#"{"id":"has space","name":"n","accept":"a"}"#,
            r#"task add: id "has space" holds ' '"#,
        ),
        (
            r#"{"id":"../../../escape","name":"n","accept":"a"}"#,
            r#"task add: id "../../../escape" holds '/'"#,
        ),
    ] {
        let out = ralph(dir.path(), &["task", "add", json], &[]);
        assert_eq!(out.status.code(), Some(1), "{json}: {}", stdout(&out));
        assert!(stderr(&out).contains(said), "{json}: {}", stderr(&out));
    }
    for text in ["", "   "] {
        let out = ralph(dir.path(), &["issue", "add", text], &[]);
        assert_eq!(out.status.code(), Some(1), "{text:?}");
        assert!(
            stderr(&out).contains("issue add: text is empty"),
            "{}",
            stderr(&out)
        );
    }
    let list = ok(&ralph(dir.path(), &["task", "list"], &[])).clone();
    assert_eq!(stdout(&list), "", "nothing was added");
    let out = ralph(dir.path(), &["issue", "unblock", "i-9"], &[]);
    assert!(
        stderr(&out).contains("no issue i-9 on the board"),
        "{}",
        stderr(&out)
    );
}

/// `ralph task prioritize` on a hand-written plan with a dependency cycle blocks the cycle's
/// tasks (saying how to go on) and prioritizes the rest, instead of failing on the cycle.
#[test]
fn task_prioritize_blocks_a_dependency_cycle_and_ranks_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".ralph")).unwrap();
    std::fs::write(
        dir.path().join(".ralph/plan.jsonl"),
        concat!(
            r#"{"t":"task","id":"t-1","name":"Write t-1.txt","s":"p","accept":"it exists"}"#,
            "\n",
            r#"{"t":"task","id":"t-50","name":"Write t-50.txt","s":"p","accept":"it exists","deps":["t-50"]}"#,
            "\n",
        ),
    )
    .unwrap();

    let out = ok(&ralph(dir.path(), &["task", "prioritize"], &[])).clone();

    let report: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(report["prioritized"], 1, "{report}");
    assert_eq!(report["blocked"][0]["id"], "t-50", "{report}");
    assert_eq!(
        report["blocked"][0]["reason"],
        "dependency cycle: t-50 -> t-50"
    );
    assert!(
        stderr(&out).contains("t-50 blocked: dependency cycle: t-50 -> t-50")
            && stderr(&out).contains("`ralph task unblock t-50`"),
        "{}",
        stderr(&out)
    );
    let list = stdout(ok(&ralph(dir.path(), &["task", "list"], &[])));
    assert!(list.contains("t-50") && list.contains("blocked"), "{list}");
}

/// `ralph task prioritize` on a hand-written dependency on a decomposed task (t-4 on t-3,
/// now t-3a and t-3b) rewires it, as a run does, and says so with the run's warning.
#[test]
fn task_prioritize_warns_of_a_dependency_it_rewires_to_subtasks() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".ralph")).unwrap();
    std::fs::write(dir.path().join(".ralph/plan.jsonl"), DECOMPOSED_PLAN).unwrap();

    let out = ok(&ralph(dir.path(), &["task", "prioritize"], &[])).clone();

    assert!(
        stderr(&out).contains(
            "warning: t-4 depended on t-3, which was decomposed: it waits on t-3a, t-3b now"
        ),
        "{}",
        stderr(&out)
    );
    let report: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(report["prioritized"], 3, "{report}");
    let tasks = stdout(ok(&ralph(dir.path(), &["query", "tasks"], &[])));
    let t4 = tasks
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|t| t["id"] == "t-4")
        .unwrap();
    assert_eq!(t4["deps"], serde_json::json!(["t-3a", "t-3b"]), "{t4}");
    // Saved: a second prioritize has nothing to rewire.
    let again = ok(&ralph(dir.path(), &["task", "prioritize"], &[])).clone();
    assert!(!stderr(&again).contains("warning"), "{}", stderr(&again));
}

/// `ralph status` and `ralph query` read a hand-written dependency on a decomposed task as
/// a run will (its subtasks), before any run rewrote it: t-4 waits on t-3a and t-3b, not on
/// t-3, which never finishes; once they are accepted it is the next task to build, not a
/// BLOCKED board.
#[test]
fn status_and_query_show_a_dependency_on_a_decomposed_task_as_its_subtasks() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".ralph")).unwrap();
    let plan = dir.path().join(".ralph/plan.jsonl");
    std::fs::write(&plan, DECOMPOSED_PLAN).unwrap();
    let run = |args: &[&str]| stdout(ok(&ralph(dir.path(), args, &[])));
    let t4 = |tasks: &str| {
        tasks
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|t| t["id"] == "t-4")
            .unwrap()
    };

    let status = run(&["status"]);
    let line = status.lines().find(|l| l.starts_with("t-4")).unwrap();
    assert!(line.ends_with("— waits on t-3a, t-3b"), "{status}");
    assert_eq!(
        t4(&run(&["query", "tasks"]))["deps"],
        serde_json::json!(["t-3a", "t-3b"])
    );

    // The subtasks accepted (by hand, as the rest): t-4 is next, the board is not BLOCKED.
    let accepted = DECOMPOSED_PLAN
        .replace(
            r#""id":"t-3a","name":"Write the lexer","s":"p""#,
            r#""id":"t-3a","name":"Write the lexer","s":"a""#,
        )
        .replace(
            r#""id":"t-3b","name":"Write the grammar","s":"p""#,
            r#""id":"t-3b","name":"Write the grammar","s":"a""#,
        );
    std::fs::write(&plan, accepted).unwrap();
    assert_eq!(run(&["query", "stage"]).trim(), "BUILD");
    let next: serde_json::Value = serde_json::from_str(run(&["query", "next"]).trim()).unwrap();
    assert_eq!(next["action"], "build", "{next}");
    assert_eq!(next["item"]["id"], "t-4", "{next}");
    let status = run(&["status"]);
    assert!(status.starts_with("stage BUILD"), "{status}");
    let line = status.lines().find(|l| l.starts_with("t-4")).unwrap();
    assert!(!line.contains("waits on"), "{status}");
    // Nothing was written: the record still names t-3 until a run rewires it.
    assert!(
        std::fs::read_to_string(&plan)
            .unwrap()
            .contains(r#""deps":["t-3"]"#)
    );
}

/// A hand-written board: t-3 decomposed into t-3a and t-3b; t-4 still depends on t-3.
const DECOMPOSED_PLAN: &str = concat!(
    r#"{"t":"task","id":"t-3","name":"Write the parser","s":"x","accept":"it parses"}"#,
    "\n",
    r#"{"t":"task","id":"t-3a","name":"Write the lexer","s":"p","accept":"it lexes","parent":"t-3"}"#,
    "\n",
    r#"{"t":"task","id":"t-3b","name":"Write the grammar","s":"p","accept":"it parses","parent":"t-3"}"#,
    "\n",
    r#"{"t":"task","id":"t-4","name":"Document the parser","s":"p","accept":"documented","deps":["t-3"]}"#,
    "\n",
);

/// A `plan.jsonl` written by hand (seed 000's format, no `"h"` fields) with a dependency
/// cycle and a dependency on a task that is not there: the run builds the rest, blocks the
/// two with their reasons, and the printed command works once the missing task is added.
#[test]
fn bad_records_in_a_hand_written_plan_are_blocked_and_the_printed_unblock_works() {
    let dir = project_with_agents("works", "");
    std::fs::create_dir_all(dir.path().join(".ralph")).unwrap();
    std::fs::write(
        dir.path().join(".ralph/plan.jsonl"),
        concat!(
            r#"{"t":"run","iteration":1,"spec":"spec.md","seeded":true,"next_task":60}"#,
            "\n",
            r#"{"t":"task","id":"t-1","name":"Write t-1.txt","s":"p","accept":"it exists"}"#,
            "\n",
            r#"{"t":"task","id":"t-50","name":"Write t-50.txt","s":"p","accept":"it exists","deps":["t-50"]}"#,
            "\n",
            r#"{"t":"task","id":"t-6","name":"Write t-6.txt","s":"p","accept":"it exists","deps":["t-99"]}"#,
            "\n",
        ),
    )
    .unwrap();

    let out = ralph(dir.path(), &["construct"], &[]);

    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let text = stdout(&out);
    for part in [
        "t-50 blocked: dependency cycle: t-50 -> t-50",
        "t-6 blocked: depends on t-99, which is not on the board",
        "t-50: dependency cycle: t-50 -> t-50",
        "t-6: depends on t-99, which is not on the board",
    ] {
        assert!(text.contains(part), "missing {part:?} in\n{text}");
    }
    assert!(dir.path().join("t-1.txt").exists(), "the rest was built");
    let command = next_command(&out);
    assert_eq!(command, "ralph task unblock t-50 t-6 && ralph construct");

    ok(&ralph(
        dir.path(),
        &[
            "task",
            "add",
            r#"{"id":"t-99","name":"Write t-99.txt","accept":"it exists"}"#,
        ],
        &[],
    ));
    let out = run_printed(dir.path(), &command);

    ok(&out);
    let text = stdout(&out);
    assert!(
        text.contains("t-50 pending again, without its dependencies on t-50"),
        "{text}"
    );
    assert!(text.contains("t-6 pending again\n"), "{text}");
    assert!(text.contains("Spec complete"), "{text}");
    for task in ["t-50", "t-6", "t-99"] {
        assert!(dir.path().join(format!("{task}.txt")).exists(), "{task}");
    }
}

/// Seed 000: a task verifiers reject twice goes to DECOMPOSE, which `ralph status` and the
/// dry run show; the next run splits it and completes.
#[test]
fn status_and_the_dry_run_show_decompose_for_a_task_rejected_twice() {
    let dir = project();
    std::fs::write(
        dir.path().join("script.toml"),
        r#"
[[run]]
role = "investigate"
subject = "i-1"
[[run.steps]]
json = { tasks = [{ name = "Greet the guest", accept = "greets the guest by name" }] }

[[run]]
role = "build"
repeat = true
steps = [{ write = { path = "hello.txt", content = "hello\n" } }, { answer = "Done.\n<TASK_DONE>" }]

[[run]]
role = "verify"
subject = "t-1"
repeat = true
[[run.steps]]
json = { verdict = "reject", reason = "it greets nobody by name" }

[[run]]
role = "verify"
repeat = true
[[run.steps]]
json = { verdict = "accept", reason = "ok" }

[[run]]
role = "decompose"
subject = "t-1"
[[run.steps]]
json = { subtasks = [{ name = "Write the greeting", accept = "greets" }, { name = "Name the guest", accept = "names the guest", deps = [0] }] }

[[run]]
role = "gap_analysis"
repeat = true
[[run.steps]]
json = { tasks = [], issues = [] }
"#,
    )
    .unwrap();
    let script = ["--script", "script.toml"];

    let out = ralph(
        dir.path(),
        &[
            &["construct", "spec.md", "--max-iterations", "2"][..],
            &script,
        ]
        .concat(),
        &[],
    );

    assert_eq!(
        out.status.code(),
        Some(2),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("t-1 was rejected 2 times: DECOMPOSE splits it"),
        "{}",
        stdout(&out)
    );
    let command = next_command(&out);
    assert_eq!(
        command,
        "ralph construct --script script.toml --max-iterations 2"
    );
    let status = stdout(ok(&ralph(dir.path(), &["status"], &[])));
    assert!(status.starts_with("stage DECOMPOSE"), "{status}");
    assert!(
        status.contains("to decompose: rejected 2 times"),
        "{status}"
    );
    let dry = stdout(ok(&ralph(
        dir.path(),
        &[&["construct", "--dry-run"][..], &script].concat(),
        &[],
    )));
    assert!(dry.contains("stage:     DECOMPOSE"), "{dry}");
    assert!(dry.contains("next:      t-1: Greet the guest"), "{dry}");

    let out = run_printed(dir.path(), &command);

    ok(&out);
    assert!(stdout(&out).contains("Spec complete"), "{}", stdout(&out));
    let board = stdout(ok(&ralph(dir.path(), &["task", "list"], &[])));
    assert!(
        board
            .lines()
            .any(|l| l.starts_with("t-1 ") && l.contains("decomposed")),
        "{board}"
    );
}

/// A workspace whose gap analysis gave no valid answer is UNVERIFIED: the summary and `ralph
/// status` say `ralph construct` asks the gap analysis again, and it does.
#[test]
fn an_unverified_spec_is_checked_again_by_the_printed_command() {
    let dir = project_with_agents("works", "");
    let prose = WORKS.replace(
        r#"  gap_analysis) echo '{"tasks":[],"issues":[]}' ;;"#,
        "  gap_analysis) echo 'Nothing is missing, I think.' ;;",
    );
    std::fs::write(dir.path().join("agent.sh"), prose).unwrap();

    let out = ralph(dir.path(), &["construct", "spec.md"], &[]);

    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stdout(&out).contains("Unverified"), "{}", stdout(&out));
    let status = stdout(ok(&ralph(dir.path(), &["status"], &[])));
    assert!(status.starts_with("stage UNVERIFIED"), "{status}");
    for text in [stdout(&out), status] {
        assert!(
            text.contains("`ralph construct` asks the gap analysis again"),
            "{text}"
        );
    }

    std::fs::write(dir.path().join("agent.sh"), WORKS).unwrap();
    let out = run_printed(dir.path(), &next_command(&out));

    ok(&out);
    assert!(stdout(&out).contains("Spec complete"), "{}", stdout(&out));
}

/// Case 65: a run ended because the agent cannot reach its API ends with a `next:` line too,
/// whose command resumes the work once the agent is back.
#[test]
fn an_unreachable_agent_ends_with_a_next_step_that_resumes() {
    let dir = project_with_agents("works", "");
    let script = dir.path().join("offline.toml");
    std::fs::write(
        &script,
        "[[run]]\nrole = \"investigate\"\n[[run.steps]]\n\
         fail = { reason = \"fake is unreachable: connection refused\", kind = \"unreachable\" }\n",
    )
    .unwrap();

    let out = ralph(
        dir.path(),
        &["construct", "spec.md", "--script", "offline.toml"],
        &[],
    );

    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("cannot reach its API"),
        "{}",
        stderr(&out)
    );
    let command = next_command(&out);
    assert_eq!(command, "ralph construct --script offline.toml");
    assert!(
        stdout(&out).contains("once fake can reach its API again"),
        "{}",
        stdout(&out)
    );
    let resumed = run_printed(dir.path(), "ralph construct --agent works");
    ok(&resumed);
}

/// Plan mode ends the same way when its agent cannot reach its API: the error, then a
/// `next:` line that plans the named spec again with the same agent; once the agent works,
/// that command, run as printed, writes the plan.
#[test]
fn plan_mode_with_an_unreachable_agent_ends_with_a_next_step_that_plans_again() {
    let dir = project();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::write(
        dir.path().join("specs/hello.md"),
        "# Hello\nWrite hello.txt.\n",
    )
    .unwrap();
    let script = dir.path().join("planner.toml");
    std::fs::write(
        &script,
        "[[run]]\nrole = \"plan\"\n[[run.steps]]\n\
         fail = { reason = \"fake is unreachable: connection refused\", kind = \"unreachable\" }\n",
    )
    .unwrap();

    let out = ralph(
        dir.path(),
        &["plan", "specs/hello.md", "--script", "planner.toml"],
        &[],
    );

    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("cannot reach its API"),
        "{}",
        stderr(&out)
    );
    let command = next_command(&out);
    assert_eq!(command, "ralph plan specs/hello.md --script planner.toml");
    assert!(!dir.path().join("implementation.json").exists());

    // The agent is back: the same command plans the spec.
    std::fs::write(
        &script,
        r#"[[run]]
role = "plan"
[[run.steps]]
json = { specs = [ { id = "hello", name = "Hello", file = "specs/hello.md", priority = 1,
  context = "sh", tasks = [ { description = "Write hello.txt", acceptanceCriteria = ["hello.txt exists"] } ],
  acceptanceCriteria = ["hello.txt exists"] } ] }
"#,
    )
    .unwrap();
    let planned = run_printed(dir.path(), &command);
    ok(&planned);
    let plan = std::fs::read_to_string(dir.path().join("implementation.json")).unwrap();
    assert!(plan.contains("Write hello.txt"), "{plan}");
}
