//! `CommandAgent`: any agent CLI from an argv template, under the same supervision as the
//! Claude agent — the prompt on stdin or in a file, the answer from stdout or a JSON
//! pointer, read-only flags for read-only roles, timeouts, bounded memory, and nothing
//! left running.

use std::path::Path;
use std::time::Duration;

use ralph::agent::{Agent, AgentExit, AgentRequest, AgentRun, Claim, CommandAgent, Role};
use ralph_loop_agents::agent::{ANSWER_KEPT, EVENTS_KEPT};

fn sh(script: &str) -> CommandAgent {
    CommandAgent::new("script", ["sh", "-c", script, "agent"]).grace(Duration::from_millis(200))
}

async fn run(agent: &CommandAgent, role: Role, prompt: &str, dir: &Path) -> AgentRun {
    let request = AgentRequest::new(role, prompt, dir)
        .log_path(dir.join("logs/run.log"))
        .timeout(Duration::from_secs(60));
    agent.run(request).await.expect("the agent ran")
}

#[tokio::test]
async fn a_huge_prompt_goes_on_stdin_and_stdout_is_the_answer() {
    let dir = tempfile::tempdir().expect("temp dir");
    let prompt = "write the file\n".repeat(400_000); // 6 MB
    let agent = sh("cat > got.txt; echo 'Wrote it.'; echo '<TASK_DONE>'");

    let run = run(&agent, Role::Build, &prompt, dir.path()).await;

    assert_eq!(run.exit, AgentExit::Completed, "{run:?}");
    assert_eq!(run.claim(), Claim::Done);
    assert_eq!(run.exit_code, Some(0));
    let got = std::fs::read_to_string(dir.path().join("got.txt")).expect("the prompt");
    assert_eq!(got, prompt);
    let log = std::fs::read_to_string(dir.path().join("logs/run.log")).expect("the log");
    assert!(log.contains("<TASK_DONE>"), "{log}");
}

#[tokio::test]
async fn placeholders_give_the_prompt_file_the_role_and_the_workspace() {
    let dir = tempfile::tempdir().expect("temp dir");
    let agent = CommandAgent::new(
        "script",
        [
            "sh",
            "-c",
            r#"cp "$1" seen.md; echo "role=$2 in=$3""#,
            "agent",
            "{prompt_file}",
            "{role}",
            "{workspace}",
        ],
    );

    let run = run(&agent, Role::Verify, "judge it", dir.path()).await;

    assert_eq!(
        run.final_text,
        format!("role=verify in={}", dir.path().display())
    );
    let seen = std::fs::read_to_string(dir.path().join("seen.md")).expect("the prompt file");
    assert_eq!(seen, "judge it");
}

#[tokio::test]
async fn read_only_roles_get_the_read_only_args_and_build_does_not() {
    let dir = tempfile::tempdir().expect("temp dir");
    let agent = sh(r#"echo "args:$*""#).read_only_args(["--sandbox", "read-only"]);

    let verify = run(&agent, Role::Verify, "p", dir.path()).await;
    let build = run(&agent, Role::Build, "p", dir.path()).await;

    assert_eq!(verify.final_text, "args:--sandbox read-only");
    assert_eq!(build.final_text, "args:");
}

#[tokio::test]
async fn the_answer_pointer_reads_the_last_json_line_and_a_marker_in_prose_is_not_done() {
    let dir = tempfile::tempdir().expect("temp dir");
    let agent = sh(concat!(
        r#"echo '{"type":"text","text":"I will print <TASK_DONE> when done"}';"#,
        r#"echo 'some progress';"#,
        // printf: dash's echo would turn the JSON's `\n` into a line break.
        r#"printf '%s\n' '{"type":"result","result":"Did it.\n<TASK_DONE>"}'"#,
    ))
    .answer_pointer("/result");
    let run1 = run(&agent, Role::Build, "p", dir.path()).await;
    assert_eq!(run1.final_text, "Did it.\n<TASK_DONE>");
    assert_eq!(run1.claim(), Claim::Done);

    let prose = sh(r#"echo '{"type":"result","result":"I did not write <TASK_DONE> yet."}'"#)
        .answer_pointer("/result");
    let run2 = run(&prose, Role::Build, "p", dir.path()).await;
    assert!(matches!(run2.claim(), Claim::NotDone(_)), "{run2:?}");

    let missing = sh("echo 'no json here'").answer_pointer("/result");
    let run3 = run(&missing, Role::Build, "p", dir.path()).await;
    assert!(
        matches!(&run3.exit, AgentExit::Failed { reason, .. } if reason.contains("/result")),
        "{run3:?}"
    );
}

#[tokio::test]
async fn an_error_printed_before_the_answer_line_does_not_fail_the_run() {
    let dir = tempfile::tempdir().expect("temp dir");
    // What a CLI that retries prints: the error it recovers from, then the answer.
    let agent = sh(concat!(
        r#"echo '{"type":"error","message":"Reconnecting... 1/5 (stream disconnected)"}';"#,
        r#"printf '%s\n' '{"type":"result","result":"Did it.\n<TASK_DONE>"}'"#,
    ))
    .answer_pointer("/result");

    let run = run(&agent, Role::Build, "p", dir.path()).await;

    assert_eq!(run.exit, AgentExit::Completed, "{run:?}");
    assert_eq!(run.claim(), Claim::Done);
}

#[tokio::test]
async fn an_answer_line_over_the_kept_buffer_is_read_to_its_marker() {
    let dir = tempfile::tempdir().expect("temp dir");
    let size = EVENTS_KEPT + 64 * 1024;
    let agent = sh(&format!(
        r#"echo '{{"type":"start"}}'; printf '%s' '{{"type":"result","result":"'; head -c {size} /dev/zero | tr '\0' x; printf '%s\n' '\n<TASK_DONE>"}}'"#
    ))
    .answer_pointer("/result");

    let run = run(&agent, Role::Build, "p", dir.path()).await;

    assert_eq!(run.claim(), Claim::Done, "{:?}", run.exit);
    // The line was shrunk as it streamed by, never held: its text is its head and tail.
    assert_eq!(run.oversized_lines, 1);
    assert!(run.final_text.starts_with("xxx"));
    assert!(
        run.final_text.len() <= ANSWER_KEPT,
        "{}",
        run.final_text.len()
    );
}

#[tokio::test]
async fn a_failing_command_is_a_failed_attempt_with_its_stderr() {
    let dir = tempfile::tempdir().expect("temp dir");
    let agent = sh("echo 'quota exceeded' >&2; exit 3");

    let run = run(&agent, Role::Build, "p", dir.path()).await;

    assert_eq!(run.exit_code, Some(3));
    assert!(
        matches!(&run.exit, AgentExit::Failed { reason, .. }
            if reason.contains("code 3") && reason.contains("quota exceeded")),
        "{run:?}"
    );
}

#[tokio::test]
async fn background_jobs_do_not_survive_the_run() {
    let dir = tempfile::tempdir().expect("temp dir");
    let agent = sh(r#"setsid sh -c 'echo $$ > escapee.pid; exec sleep 1000' & 
        while [ ! -s escapee.pid ]; do sleep 0.01; done; echo '<TASK_DONE>'"#);

    let run = run(&agent, Role::Build, "p", dir.path()).await;

    assert_eq!(run.claim(), Claim::Done);
    assert!(run.leaked >= 1, "{run:?}");
    let pid = std::fs::read_to_string(dir.path().join("escapee.pid")).expect("pid");
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
    let state = stat.rsplit(')').next().unwrap_or_default().trim_start();
    assert!(stat.is_empty() || state.starts_with('Z'), "alive: {stat}");
}

#[tokio::test]
async fn a_silent_command_is_cut_by_the_idle_timeout_and_a_stop_ends_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let stalled = sh("echo started; exec sleep 1000").idle_timeout(Duration::from_millis(300));
    let run1 = run(&stalled, Role::Build, "p", dir.path()).await;
    let idle = AgentExit::Silent {
        after: Duration::from_millis(300),
    };
    assert_eq!(run1.exit, idle, "the idle clock, named");

    let stop = ralph::StopToken::new();
    let request = AgentRequest::new(Role::Build, "p", dir.path()).stop(stop.clone());
    let agent = sh("exec sleep 1000");
    let running = tokio::spawn(async move { agent.run(request).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.stop();
    let run2 = running.await.expect("joined").expect("ran");
    assert_eq!(run2.exit, AgentExit::Stopped);
}

#[tokio::test]
async fn a_huge_answer_costs_a_bounded_buffer_and_a_bounded_log() {
    let dir = tempfile::tempdir().expect("temp dir");
    let agent = sh("head -c 50000000 /dev/zero | tr '\\0' 'x'; echo; echo '<TASK_DONE>'");

    let run = run(&agent, Role::Build, "p", dir.path()).await;

    assert_eq!(run.claim(), Claim::Done);
    assert!(
        run.final_text.len() <= ANSWER_KEPT,
        "{}",
        run.final_text.len()
    );
    // The log keeps the first MiB and the last 4 MiB, and says how much it skipped.
    let logged = std::fs::read(dir.path().join("logs/run.log")).expect("the log");
    assert!(logged.len() < (5 << 20) + 200, "{}", logged.len());
    let text = String::from_utf8_lossy(&logged);
    let skipped = 50_000_000 + 1 + 12 - (5 << 20);
    assert!(text.contains(&format!("[… {skipped} bytes of output skipped")));
    assert!(text.ends_with("x\n<TASK_DONE>\n"));
}
