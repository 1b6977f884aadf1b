//! `ralph`, the command, run as a user runs it: a separate process in a fresh git repository
//! with a Cargo project. The binary is `$TEST_INSTALLED_RALPH` when set (CI sets it to the one
//! `cargo install --path . --features cli` installed), else the one this build made.

#![allow(clippy::unwrap_used)]
// Tests set up and look at their workspaces with git and the CLIs they start themselves,
// outside any run: the rule that processes start in ralph-loop-process is the library's.
#![allow(clippy::disallowed_types)]
// Tests write their fixtures and workspaces directly, outside any run: the rule
// that state is written through ralph-loop-process's `files` is the library's.
#![allow(clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

mod budget;
mod crash_resume;
mod dead_ends;
mod demo;
mod docs;
mod guest;
mod hooks;
mod integrity;
mod messages;
mod newcomer;
mod parallel_crash;
mod plan_build;
mod questions;
mod refusals;
mod repair;
mod sandbox;
mod schema;
mod seed_commands;
mod steer;
mod switch;
mod thread_agents;
mod thread_next;
mod thread_signals;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::json;
use support::messages_api::{ClaudeHome, MessagesApi, Reply, claude_or_skip};
use support::{ralph_bin, tree};

/// A fresh git repository holding a Cargo project and a spec.
fn project() -> tempfile::TempDir {
    let dir = support::messages_api::git_repo();
    std::fs::write(
        dir.path().join("Cargo.toml"),
        "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2024\"\n",
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("src")).unwrap();
    std::fs::write(dir.path().join("src/lib.rs"), "").unwrap();
    std::fs::write(dir.path().join("spec.md"), "# Hello\nCreate hello.txt.\n").unwrap();
    dir
}

/// `ralph ARGS` in `dir`, with no claude reachable.
fn command(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(ralph_bin());
    command
        .args(args)
        .current_dir(dir)
        .env_remove("RALPH_CLAUDE_BIN")
        .env("PATH", "/usr/local/bin:/usr/bin:/bin");
    command
}

/// Runs `ralph ARGS` in `dir`, with no claude reachable unless `env` says where.
fn ralph(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = command(dir, args);
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn init_guesses_the_gates_ignores_the_state_and_never_overwrites() {
    let dir = project();

    let out = ralph(dir.path(), &["init"], &[]);

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let config = std::fs::read_to_string(dir.path().join("ralph.toml")).unwrap();
    for gate in ["cargo fmt --check", "cargo clippy", "cargo test"] {
        assert!(config.contains(gate), "{config}");
    }
    assert!(
        config.contains("max_budget_usd") && config.contains("permission_mode"),
        "{config}"
    );
    let ignore = std::fs::read_to_string(dir.path().join(".gitignore")).unwrap();
    assert!(ignore.lines().any(|l| l == ".ralph/"), "{ignore}");
    // The file loads: every key in it is one ralph knows, at its default.
    assert!(
        config.contains("decompose_after_rejections = 2"),
        "{config}"
    );
    let dry = ralph(dir.path(), &["construct", "spec.md", "--dry-run"], &[]);
    assert_eq!(dry.status.code(), Some(0), "{}", stderr(&dry));
    assert!(
        stdout(&dry).contains("decompose after 2 rejections"),
        "{}",
        stdout(&dry)
    );

    std::fs::write(dir.path().join("ralph.toml"), "# mine\n").unwrap();
    let again = ralph(dir.path(), &["init"], &[]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("ralph.toml exists"),
        "{}",
        stderr(&again)
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ralph.toml")).unwrap(),
        "# mine\n"
    );
}

/// Audit rows 004-R28, 004-R33: init writes build mode's `implementation.json` where a
/// `specs/` folder exists, and never replaces one.
/// `ralph init`'s `next:` names what is there: a spec at the top, a `specs/` folder for plan
/// mode, or nothing yet.
#[test]
fn init_names_the_next_step_from_what_is_there() {
    let next = |setup: &dyn Fn(&Path)| {
        let dir = tempfile::tempdir().unwrap();
        setup(dir.path());
        let out = ralph(dir.path(), &["init"], &[]);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
            .lines()
            .find_map(|l| l.strip_prefix("next: ").map(str::to_owned))
            .unwrap()
    };
    assert!(next(&|_| {}).contains("write a spec (spec.md)"));
    let spec = next(&|dir| std::fs::write(dir.join("SPEC.md"), "# S\n").unwrap());
    assert!(spec.contains("`ralph construct SPEC.md`"), "{spec}");
    let specs = next(&|dir| std::fs::create_dir(dir.join("specs")).unwrap());
    assert!(
        specs.contains("`ralph plan`") && specs.contains("`ralph build`"),
        "{specs}"
    );
}

#[test]
fn init_writes_an_empty_implementation_json_beside_a_specs_folder_and_keeps_an_existing_one() {
    let dir = project();
    let plain = ralph(dir.path(), &["init"], &[]);
    assert_eq!(plain.status.code(), Some(0), "{}", stderr(&plain));
    assert!(!dir.path().join("implementation.json").exists());

    let with_specs = project();
    std::fs::create_dir(with_specs.path().join("specs")).unwrap();
    let out = ralph(with_specs.path(), &["init"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("implementation.json"),
        "{}",
        stdout(&out)
    );
    let text = std::fs::read_to_string(with_specs.path().join("implementation.json")).unwrap();
    let plan: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(plan["version"], 1, "{text}");
    assert_eq!(plan["specs"], json!([]), "{text}");
    let dry = ralph(with_specs.path(), &["build", "--dry-run"], &[]);
    assert_eq!(dry.status.code(), Some(0), "{}", stderr(&dry));

    let kept = project();
    std::fs::create_dir(kept.path().join("specs")).unwrap();
    std::fs::write(kept.path().join("implementation.json"), "{\"specs\":[]}\n").unwrap();
    let out = ralph(kept.path(), &["init"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(kept.path().join("implementation.json")).unwrap(),
        "{\"specs\":[]}\n"
    );
}

/// Any agent CLI from an `[agent.NAME]` table (issue: more agents): a shell script that
/// answers by role takes a spec to the end through `ralph construct --agent NAME`.
#[test]
fn construct_runs_a_command_agent_from_ralph_toml() {
    let dir = project();
    std::fs::write(
        dir.path().join("agent.sh"),
        r#"cat > /dev/null
case "$1" in
  investigate) echo '{"tasks":[{"name":"Write hello.txt","accept":"hello.txt says hello"}]}' ;;
  build) echo hello > hello.txt; printf 'Wrote hello.txt.\n<TASK_DONE>\n' ;;
  verify) echo '{"task_id":"'"$2"'","verdict":"accept","reason":"it says hello"}' ;;
  gap_analysis) echo '{"tasks":[],"issues":[]}' ;;
  *) echo "unexpected role $1" >&2; exit 1 ;;
esac
"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("ralph.toml"),
        "[agent.mine]\ncommand = [\"sh\", \"agent.sh\", \"{role}\", \"{subject}\"]\n",
    )
    .unwrap();

    let out = ralph(
        dir.path(),
        &["construct", "spec.md", "--agent", "mine"],
        &[],
    );

    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(),
        "hello\n"
    );
    let unknown = ralph(
        dir.path(),
        &["construct", "spec.md", "--agent", "nobody"],
        &[],
    );
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        stderr(&unknown).contains("[agent.nobody]")
            && stderr(&unknown).contains("claude, codex, gemini, opencode, mine"),
        "{}",
        stderr(&unknown)
    );
}

/// `--agent NAME` is the same in plan mode: a command agent breaks the specs down.
#[test]
fn plan_mode_runs_a_command_agent_from_ralph_toml() {
    let dir = project();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::write(
        dir.path().join("specs/hello.md"),
        "# Hello\nWrite hello.txt.\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("agent.sh"),
        r#"cat > /dev/null
[ "$1" = breakdown ] || { echo "unexpected role $1" >&2; exit 1; }
echo '{"specs":[{"id":"hello","name":"Hello","file":"specs/hello.md","priority":1,"context":"sh","tasks":[{"description":"Write hello.txt","acceptanceCriteria":["hello.txt exists"]}],"acceptanceCriteria":["hello.txt exists"]}]}'
"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("ralph.toml"),
        "[agent.mine]\ncommand = [\"sh\", \"agent.sh\", \"{role}\"]\n",
    )
    .unwrap();

    let out = ralph(dir.path(), &["plan", "--agent", "mine"], &[]);

    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    let plan = std::fs::read_to_string(dir.path().join("implementation.json")).unwrap();
    assert!(plan.contains("Write hello.txt"), "{plan}");
}

#[test]
fn the_board_from_the_shell_status_task_add_and_query_next() {
    let dir = project();

    let added = ralph(
        dir.path(),
        &["task", "add", r#"{"name":"x","accept":"x is done"}"#],
        &[],
    );
    assert_eq!(stdout(&added).trim(), "t-1", "{}", stderr(&added));
    let next = ralph(dir.path(), &["query", "next"], &[]);
    let next: serde_json::Value = serde_json::from_str(&stdout(&next)).unwrap();
    assert_eq!(
        next,
        json!({"action": "build", "item": {"id": "t-1", "name": "x"}})
    );
    assert_eq!(
        stdout(&ralph(dir.path(), &["query", "stage"], &[])).trim(),
        "BUILD"
    );
    assert_eq!(
        stdout(&ralph(dir.path(), &["query", "iteration"], &[])).trim(),
        "0"
    );

    let status = ralph(dir.path(), &["status"], &[]);
    let text = stdout(&status);
    assert!(
        text.contains("t-1") && text.contains("pending") && text.contains("next:"),
        "{text}"
    );

    let done = ralph(dir.path(), &["task", "done"], &[]);
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    let reject = ralph(dir.path(), &["task", "reject", "too short"], &[]);
    assert_eq!(reject.status.code(), Some(0), "{}", stderr(&reject));
    let wrong = ralph(dir.path(), &["task", "unblock", "t-1"], &[]);
    assert_eq!(wrong.status.code(), Some(1));
    assert!(
        stderr(&wrong).contains("only a blocked task can be unblocked"),
        "{}",
        stderr(&wrong)
    );
    let issue = ralph(dir.path(), &["issue", "add", "more tests"], &[]);
    assert_eq!(stdout(&issue).trim(), "i-1");
}

#[test]
fn a_dry_run_of_construct_changes_no_file() {
    let dir = project();
    let before = tree(dir.path());

    // `--timeout` sets the stage timeout over ralph.toml (audit row 000-R38).
    let out = ralph(
        dir.path(),
        &["construct", "spec.md", "--dry-run", "--timeout", "90s"],
        &[],
    );

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("INVESTIGATE"), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("stage timeout 1m 30s"),
        "{}",
        stdout(&out)
    );
    assert_eq!(tree(dir.path()), before, "a dry run writes nothing");
}

#[test]
fn construct_without_an_agent_says_what_is_missing_and_never_runs_the_demo() {
    let dir = project();
    let before = tree(dir.path());

    let out = ralph(dir.path(), &["construct", "spec.md"], &[]);

    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let message = stderr(&out);
    assert!(
        message.contains("claude") && message.contains("RALPH_CLAUDE_BIN"),
        "{message}"
    );
    assert_eq!(tree(dir.path()), before, "nothing was written, no demo ran");
}

#[test]
fn the_demo_runs_in_a_new_directory_only() {
    let parent = tempfile::tempdir().unwrap();
    let fresh = parent.path().join("demo");

    let out = ralph(
        parent.path(),
        &["demo", "--in", fresh.to_str().unwrap()],
        &[],
    );

    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(stdout(&out).contains("Spec complete"), "{}", stdout(&out));
    assert!(fresh.join("greet.sh").exists());

    let project = project();
    let before = tree(project.path());
    let refused = ralph(project.path(), &["demo", "--in", "."], &[]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("not empty"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(
        tree(project.path()),
        before,
        "a user's repository is never touched"
    );

    // Re-audit: `--in` is relative to `-C DIR`, as every other path of the command is.
    let elsewhere = tempfile::tempdir().unwrap();
    let out = ralph(
        elsewhere.path(),
        &["-C", parent.path().to_str().unwrap(), "demo", "--in", "sub"],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(parent.path().join("sub/greet.sh").exists());
    assert!(!elsewhere.path().join("sub").exists());
}

/// `ralph demo --in sub` inside a user's repository: the demo commits its tasks to a
/// repository of its own there, never to the user's branch.
#[test]
fn a_demo_inside_a_repository_commits_to_its_own() {
    let project = project();
    let git = |dir: &Path, args: &[&str]| -> String {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    git(project.path(), &["add", "-A"]);
    git(project.path(), &["commit", "-q", "-m", "mine"]);
    let head = git(project.path(), &["rev-parse", "HEAD"]);

    let out = ralph(project.path(), &["demo", "--in", "sub"], &[]);

    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(git(project.path(), &["rev-parse", "HEAD"]), head);
    assert_eq!(git(project.path(), &["status", "--porcelain"]), "?? sub/\n");
    let demo_log = git(&project.path().join("sub"), &["log", "--format=%s"]);
    assert!(demo_log.contains("t-1: Create greet.sh"), "{demo_log}");
}

#[test]
fn usage_errors_have_their_own_exit_code() {
    let dir = project();
    assert_eq!(
        ralph(dir.path(), &["constrict"], &[]).status.code(),
        Some(64)
    );
    assert_eq!(
        ralph(dir.path(), &["construct", "--max-iterations", "x"], &[])
            .status
            .code(),
        Some(64)
    );
    let help = ralph(dir.path(), &["--help"], &[]);
    assert_eq!(help.status.code(), Some(0));
    assert!(stdout(&help).contains("Exit codes:"), "{}", stdout(&help));
}

/// Audit case 50: a value a flag gave is named by its flag, not by the library's builder.
#[test]
fn a_flag_out_of_bounds_is_named_as_the_flag() {
    let dir = project();
    for (args, said) in [
        (
            &[
                "construct",
                "spec.md",
                "--dry-run",
                "--max-iterations",
                "4294967295",
            ][..],
            "ralph: invalid --max-iterations: max_iterations must be at most 100000",
        ),
        (
            &["construct", "spec.md", "--dry-run", "--timeout", "900000h"][..],
            "ralph: invalid --timeout: stage_timeout must be at most 7days",
        ),
    ] {
        let out = ralph(dir.path(), args, &[]);
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(said), "{err}");
        assert!(!err.contains("RalphBuilder"), "{err}");
    }
}

#[test]
fn json_events_carry_timestamps() {
    let parent = tempfile::tempdir().unwrap();
    let fresh = parent.path().join("demo");

    let out = ralph(
        parent.path(),
        &["demo", "--json", "--in", fresh.to_str().unwrap()],
        &[],
    );

    let lines: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!lines.is_empty());
    for line in &lines {
        let ts = line["ts"].as_str().unwrap();
        assert!(ts.parse::<jiff::Timestamp>().is_ok(), "{ts}");
    }
}

/// The whole path with the real pinned Claude CLI pointed at a scripted Messages API.
#[tokio::test(flavor = "multi_thread")]
async fn construct_with_the_real_claude_cli() {
    let Some(bin) = claude_or_skip() else {
        return;
    };
    let api = MessagesApi::with_script([
        Reply::tool_use(
            "StructuredOutput",
            json!({"tasks": [{"name": "Create hello.txt", "accept": "hello.txt says hello"}]}),
        ),
        Reply::text_then_tool(
            "Creating it.",
            "Bash",
            json!({"command": "echo hello > hello.txt"}),
        ),
        Reply::text("Created.\n<TASK_DONE>"),
        Reply::tool_use(
            "StructuredOutput",
            json!({"verdict": "accept", "reason": "says hello"}),
        ),
        Reply::tool_use("StructuredOutput", json!({"tasks": [], "issues": []})),
    ])
    .await;
    let home = ClaudeHome::new();
    let dir = project();
    let env: Vec<String> = api
        .env()
        .into_iter()
        .chain(home.env())
        .map(|(k, v)| format!("{k} = {v:?}"))
        .collect();
    std::fs::write(
        dir.path().join("ralph.toml"),
        format!(
            "[claude]\nbin = {bin:?}\nmax_retries = 0\npermission_mode = \"bypassPermissions\"\n\
             env = {{ {} }}\n\n[[gates]]\nname = \"hello\"\ncommand = \"grep -qx hello hello.txt\"\n",
            env.join(", ")
        ),
    )
    .unwrap();

    let workspace = dir.path().to_path_buf();
    let out =
        tokio::task::spawn_blocking(move || ralph(&workspace, &["construct", "spec.md"], &[]))
            .await
            .unwrap();

    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(stdout(&out).contains("Spec complete"), "{}", stdout(&out));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(),
        "hello\n"
    );
    assert_eq!(api.remaining(), 0, "every scripted reply was used");
    let status = ralph(dir.path(), &["status"], &[]);
    assert!(stdout(&status).contains("accepted"), "{}", stdout(&status));
}

/// Issue 38: the cache tokens the Messages API reports (`cache_read_input_tokens`,
/// `cache_creation_input_tokens`) reach, through the real Claude CLI, the ledger and every
/// view the same way, apart from the input: each agent's line, the `finished` event, the
/// summary and `ralph status`.
#[tokio::test(flavor = "multi_thread")]
async fn the_cache_tokens_agree_in_every_view() {
    let Some(bin) = claude_or_skip() else {
        return;
    };
    let api = MessagesApi::with_script(
        [
            Reply::tool_use(
                "StructuredOutput",
                json!({"tasks": [{"name": "Create hello.txt", "accept": "hello.txt says hello"}]}),
            ),
            Reply::text_then_tool(
                "Creating it.",
                "Bash",
                json!({"command": "echo hello > hello.txt"}),
            ),
            Reply::text("Created.\n<TASK_DONE>"),
            Reply::tool_use(
                "StructuredOutput",
                json!({"verdict": "accept", "reason": "says hello"}),
            ),
            Reply::tool_use("StructuredOutput", json!({"tasks": [], "issues": []})),
        ]
        .map(|reply| reply.usage(100, 1000, 40)),
    )
    .await;
    let home = ClaudeHome::new();
    let dir = project();
    let env: Vec<String> = api
        .env()
        .into_iter()
        .chain(home.env())
        .map(|(k, v)| format!("{k} = {v:?}"))
        .collect();
    std::fs::write(
        dir.path().join("ralph.toml"),
        format!(
            "[claude]\nbin = {bin:?}\nmax_retries = 0\nenv = {{ {} }}\n",
            env.join(", ")
        ),
    )
    .unwrap();
    let workspace = dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        ralph(&workspace, &["construct", "spec.md", "--json"], &[])
    })
    .await
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );

    let events: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let runs: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["event"] == "agent_finished")
        .collect();
    let sum = |key: &str| -> u64 { runs.iter().map(|e| e["usage"][key].as_u64().unwrap()).sum() };
    let (input, read, written) = (
        sum("input_tokens"),
        sum("cache_read_tokens"),
        sum("cache_creation_tokens"),
    );
    // Five API calls, each reporting 100 uncached, 1000 read and 40 written.
    assert_eq!((input, read, written), (500, 5000, 200), "{runs:#?}");
    let finished = events.iter().rfind(|e| e["event"] == "finished").unwrap();
    assert_eq!(finished["spent_cache_read_tokens"], read, "{finished}");
    assert_eq!(finished["spent_cache_creation_tokens"], written);
    let output = sum("output_tokens");
    assert_eq!(
        finished["spent_tokens"],
        input + output,
        "the cache is not counted in"
    );

    let status = stdout(&ralph(dir.path(), &["status"], &[]));
    let line = format!("{input} in / {output} out tokens (cache {read} read, {written} written)");
    assert!(status.contains(&line), "{line:?} not in\n{status}");
    let again = stdout(&ralph(dir.path(), &["construct", "spec.md"], &[]));
    let summary = format!(
        "tokens: {input} in, {output} out; cache {read} read, {written} written (88% of the input read from the cache)"
    );
    assert!(again.contains(&summary), "{summary:?} not in\n{again}");
}

/// In a real terminal (tmux) the demo shows a line that moves while an agent runs, then the
/// summary; through a pipe it prints plain lines with no escape codes.
#[test]
fn the_live_line_moves_in_a_terminal_and_a_pipe_gets_plain_lines() {
    let parent = tempfile::tempdir().unwrap();
    let piped = ralph(
        parent.path(),
        &["demo", "--in", parent.path().join("a").to_str().unwrap()],
        &[],
    );
    assert!(!stdout(&piped).contains('\u{1b}'), "escape codes in a pipe");

    if Command::new("tmux").arg("-V").output().is_err() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI needs tmux (.ci/run installs it)"
        );
        println!("skipped: no tmux");
        return;
    }
    let screens = demo_in_tmux(&parent.path().join("b"), "");
    let moving: Vec<&String> = screens
        .iter()
        .filter(|s| s.contains("build t-3 Document usage in README.md · 0 in / 0 out"))
        .collect();
    assert!(!moving.is_empty(), "no moving line in {screens:#?}");
    let last = screens.last().unwrap();
    assert!(
        last.contains("── summary ──") && last.contains("Spec complete"),
        "{last}"
    );
    assert!(
        !last.contains(" in / 0 out · $"),
        "the moving line is cleared at the end: {last}"
    );
}

/// With `NO_COLOR` the terminal gets plain lines too: no moving line.
#[test]
fn no_color_in_a_terminal_gives_plain_lines() {
    if Command::new("tmux").arg("-V").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "CI needs tmux");
        println!("skipped: no tmux");
        return;
    }
    let parent = tempfile::tempdir().unwrap();
    let screens = demo_in_tmux(&parent.path().join("demo"), "NO_COLOR=1 ");
    assert!(
        screens.iter().all(|s| !s.contains(" in / 0 out · $")),
        "a moving line despite NO_COLOR: {screens:#?}"
    );
    assert!(screens.last().unwrap().contains("── summary ──"));
}

/// Runs `ralph demo --in DIR` in a tmux pane (with `env` before the command) and returns
/// what the pane showed every 100 ms until the summary appeared.
fn demo_in_tmux(dir: &Path, env: &str) -> Vec<String> {
    let session = format!(
        "ralph-test-{}-{}",
        std::process::id(),
        dir.file_name().unwrap().to_string_lossy()
    );
    let command = format!(
        "{env}{} demo --in {}; sleep 60",
        ralph_bin().display(),
        dir.display()
    );
    // Each call has its own tmux server (`-L`): with the default one shared, one test's
    // `kill-session` could end the server while another test was starting its session.
    let tmux = || {
        let mut command = Command::new("tmux");
        command.args(["-L", &session]);
        command
    };
    let started = tmux()
        .args([
            "new-session",
            "-d",
            "-s",
            &session,
            "-x",
            "160",
            "-y",
            "50",
            &command,
        ])
        .status()
        .unwrap();
    assert!(started.success());
    let mut screens = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        let pane = tmux()
            .args(["capture-pane", "-p", "-t", &session])
            .output()
            .unwrap();
        let screen = String::from_utf8_lossy(&pane.stdout).into_owned();
        let finished = screen.contains("── summary ──");
        screens.push(screen);
        if finished {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = tmux().arg("kill-server").status();
    screens
}

const THREAD_SPEC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/thread/spec.md");
const THREAD_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/thread/script.toml");

/// `ralph thread …` with the bundled script, one process per command, in a repository that
/// does not ignore `.ralph/`: every checkpoint, the commit message read before committing,
/// and a diff without ralph's own state.
#[tokio::test]
async fn a_thread_from_spec_to_commit_with_the_message_read_first() {
    let dir = support::threads::repo().await;
    let ws = dir.path();
    let thread = |args: &[&str]| {
        let mut all = vec!["thread", "--script", THREAD_SCRIPT];
        all.extend_from_slice(args);
        let out = ralph(ws, &all, &[]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}\n{}",
            stdout(&out),
            stderr(&out)
        );
        stdout(&out)
    };
    thread(&["new", "--title", "Greeter", "--spec", THREAD_SPEC]);
    let edited = ws.join("edited.md");
    let spec = std::fs::read_to_string(THREAD_SPEC).unwrap();
    std::fs::write(&edited, format!("{spec}\nA line added while drafting.\n")).unwrap();
    assert!(thread(&["edit", "--file", edited.to_str().unwrap()]).contains("spec v2"));
    std::fs::remove_file(&edited).unwrap();
    let discussed = thread(&["discuss", "Is the spec clear?"]);
    assert!(
        discussed.contains("agent: The spec is clear") && discussed.contains("phase: Drafting"),
        "{discussed}"
    );
    let conversation = thread(&["conversation"]);
    assert!(
        conversation.contains("person: Is the spec clear?")
            && conversation.contains("agent: The spec is clear"),
        "{conversation}"
    );
    assert!(thread(&["assess"]).contains("phase: Assessing"));
    thread(&["finalize"]);
    assert!(thread(&["reopen"]).contains("phase: Drafting"));
    thread(&["finalize"]);
    let started = thread(&["start"]);
    assert!(started.contains("phase: Implemented"), "{started}");
    let shown = thread(&["show"]);
    assert!(
        shown.contains("(build, iteration 2): completed")
            && shown.contains("; transcript .ralph/runs/1-greeter-r"),
        "{shown}"
    );
    let diff = thread(&["diff"]);
    assert!(diff.contains("greet.sh"), "{diff}");
    assert!(
        !diff.contains(".ralph"),
        "ralph's own state is left out: {diff}"
    );
    assert!(thread(&["review"]).contains("recommend approve"));
    thread(&["approve"]);
    let message = thread(&["message"]);
    assert!(
        message.contains("Greeter") && message.contains("phase: ReadyToCommit"),
        "{message}"
    );
    let done = thread(&["commit"]);
    assert!(done.contains("phase: Done"), "{done}");
}

/// Seed 001's "This will reset changes. Continue?": `revise` of a thread under review
/// resets only with `--yes`; without it nothing changes and the refusal names the reset.
#[tokio::test]
async fn a_revise_that_would_reset_the_work_tree_asks_for_yes_first() {
    let dir = support::threads::repo().await;
    let ws = dir.path();
    let thread = |args: &[&str]| {
        let mut all = vec!["thread", "--script", THREAD_SCRIPT];
        all.extend_from_slice(args);
        ralph(ws, &all, &[])
    };
    for args in [
        &["new", "--title", "Greeter", "--spec", THREAD_SPEC][..],
        &["finalize"],
        &["start"],
        &["review"],
    ] {
        let out = thread(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    }
    let refused = thread(&["revise"]);
    assert_eq!(refused.status.code(), Some(1), "{}", stdout(&refused));
    let said = stderr(&refused);
    assert!(
        said.contains("resets the work tree") && said.contains("next: ralph thread revise --yes"),
        "{said}"
    );
    assert!(ws.join("greet.sh").exists(), "nothing reset without --yes");
    assert!(stdout(&thread(&["show"])).contains("PendingReview"));

    let revised = thread(&["revise", "--yes"]);
    assert_eq!(revised.status.code(), Some(0), "{}", stderr(&revised));
    assert!(stdout(&revised).contains("phase: Drafting"));
    assert!(!ws.join("greet.sh").exists(), "reset to the baseline");
}

/// A failed preflight is not success: exit 3, with what failed and what to do.
#[tokio::test]
async fn a_failed_preflight_exits_3() {
    let dir = support::threads::repo().await;
    let ws = dir.path();
    let spec = ws.join("spec.md");
    // No criteria: preflight refuses it.
    std::fs::write(&spec, "# Greeter\n<promise>SHIPPED</promise>\n").unwrap();
    let run = |args: &[&str]| {
        let mut all = vec!["thread", "--script", THREAD_SCRIPT];
        all.extend_from_slice(args);
        ralph(ws, &all, &[])
    };
    assert_eq!(
        run(&["new", "--title", "G", "--spec", spec.to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(run(&["finalize"]).status.code(), Some(0));
    let started = run(&["start"]);
    assert_eq!(
        started.status.code(),
        Some(3),
        "{}\n{}",
        stdout(&started),
        stderr(&started)
    );
    assert!(
        stdout(&started).contains("preflight:"),
        "{}",
        stdout(&started)
    );
    let fixed = run(&["fix-spec"]);
    assert!(
        stdout(&fixed).contains("phase: Drafting"),
        "{}\n{}",
        stdout(&fixed),
        stderr(&fixed)
    );
}

/// A broken gate stops `ralph construct` early with exit 3 and says what to do.
#[test]
fn a_broken_gate_stops_construct_with_what_to_do_next() {
    let dir = project();
    std::fs::write(
        dir.path().join("ralph.toml"),
        "retries = 0\n[[gates]]\nname = \"test\"\ncommand = \"cargoo test\"\n",
    )
    .unwrap();
    let script = dir.path().join("script.toml");
    std::fs::write(
        &script,
        r#"
[[run]]
role = "investigate"
subject = "i-1"
[[run.steps]]
json = { tasks = [{ name = "One", accept = "a" }, { name = "Two", accept = "b" }, { name = "Three", accept = "c" }] }

[[run]]
role = "build"
repeat = true
[[run.steps]]
answer = "Done.\n<TASK_DONE>"

[[run]]
role = "verify"
repeat = true
[[run.steps]]
json = { verdict = "accept", reason = "ok" }

[[run]]
role = "gap_analysis"
repeat = true
[[run.steps]]
json = { tasks = [], issues = [] }
"#,
    )
    .unwrap();

    let out = ralph(
        dir.path(),
        &["construct", "spec.md", "--script", script.to_str().unwrap()],
        &[],
    );

    assert_eq!(
        out.status.code(),
        Some(3),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    let text = stdout(&out);
    assert!(text.contains("gate test failed the same way"), "{text}");
    // The next step names the tasks the gate blocked, and the script the run was given.
    let command = format!(
        "ralph task unblock t-1 t-2 && ralph construct --script {}",
        script.display()
    );
    assert!(
        text.contains(&format!(
            "next: fix the gate test (ralph.toml), then `{command}`"
        )),
        "{text}"
    );
    std::fs::write(
        dir.path().join("ralph.toml"),
        "retries = 0\n[[gates]]\nname = \"test\"\ncommand = \"true\"\n",
    )
    .unwrap();
    let out = dead_ends::run_printed(dir.path(), &command);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("Spec complete"), "{}", stdout(&out));
}

/// A dry run writes nothing, in every mode of the command.
#[tokio::test]
async fn every_dry_run_of_the_command_writes_nothing() {
    let dir = support::threads::repo().await;
    let ws = dir.path();
    std::fs::create_dir_all(ws.join("specs")).unwrap();
    std::fs::write(ws.join("specs/a.md"), "# A\nWrite a.txt.\n").unwrap();
    let thread = |args: &[&str]| {
        let mut all = vec!["thread", "--script", THREAD_SCRIPT];
        all.extend_from_slice(args);
        ralph(ws, &all, &[])
    };
    assert_eq!(
        thread(&["new", "--title", "Greeter", "--spec", THREAD_SPEC])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(thread(&["finalize"]).status.code(), Some(0));
    let before = tree(ws);

    for (args, code) in [
        (vec!["construct", "specs/a.md", "--dry-run"], 0),
        (vec!["plan", "--dry-run"], 0),
        // No implementation.json yet: an error that says so, and still nothing written.
        (vec!["build", "--dry-run"], 1),
    ] {
        let out = ralph(ws, &args, &[]);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: {}{}",
            stdout(&out),
            stderr(&out)
        );
    }
    let out = thread(&["dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("Dry run of thread"),
        "{}",
        stdout(&out)
    );

    assert_eq!(tree(ws), before, "no dry run wrote anything");
}

/// Seed 000's `query issues` and `query tasks --done`: one JSON object per line (audit row
/// 000-R43).
#[test]
fn query_lists_the_open_issues_and_the_tasks() {
    let dir = project();
    let run = |args: &[&str]| {
        let out = ralph(dir.path(), args, &[]);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        stdout(&out)
    };
    run(&["issue", "add", "the greeting is rude"]);
    run(&["task", "add", r#"{"name":"a","accept":"a"}"#]);
    run(&["task", "add", r#"{"name":"b","accept":"b"}"#]);
    run(&["task", "done", "t-1"]);

    run(&["issue", "add", "the docs are thin", "--priority", "high"]);
    let issues: Vec<serde_json::Value> = run(&["query", "issues"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(issues.len(), 2);
    assert_eq!(issues[0]["text"], "the greeting is rude");
    assert_eq!(issues[0]["status"], "open");
    assert_eq!(issues[1]["priority"], "high", "ralph issue add --priority");
    let wrong = ralph(
        dir.path(),
        &["issue", "add", "x", "--priority", "urgent"],
        &[],
    );
    assert_eq!(wrong.status.code(), Some(64));
    assert!(
        stderr(&wrong).contains("low, medium or high"),
        "{}",
        stderr(&wrong)
    );
    let ids = |text: String| -> Vec<String> {
        text.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["id"].to_string())
            .collect()
    };
    assert_eq!(ids(run(&["query", "tasks"])), ["\"t-1\"", "\"t-2\""]);
    assert_eq!(ids(run(&["query", "tasks", "--done"])), ["\"t-1\""]);
    // An accepted task is listed too, with its status (newcomer audit, part 1 row 5).
    run(&["task", "accept", "t-1"]);
    let tasks: Vec<serde_json::Value> = run(&["query", "tasks"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(tasks.len(), 2);
    assert_eq!(tasks[0]["status"], "accepted", "{}", tasks[0]);
    assert!(run(&["query", "tasks", "--done"]).is_empty());
    assert_eq!(
        ralph(dir.path(), &["query", "stage", "--done"], &[])
            .status
            .code(),
        Some(1)
    );
}
