//! A good guest in the user's repository (issue 26): `init` writes a config ralph accepts in
//! any repository, the workspace is found from a subdirectory, `status` tells a workspace
//! where nothing ran from a finished one, a closed stdout ends the
//! command quietly, `--json` is NDJSON, every end says what to do next, and bad specs are
//! refused.

use super::*;

/// A board of `n` pending tasks for `spec.md`, written by hand (seed 000's format).
fn long_board(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir.join(".ralph")).unwrap();
    let mut text = String::from(
        r#"{"t":"run","iteration":1,"spec":"spec.md","seeded":true,"next_task":1000}"#,
    );
    text.push('\n');
    for i in 1..=n {
        text.push_str(&format!(
            r#"{{"t":"task","id":"t-{i}","name":"Write t-{i}.txt","s":"p","accept":"it exists"}}"#
        ));
        text.push('\n');
    }
    std::fs::write(dir.join(".ralph/plan.jsonl"), text).unwrap();
}

/// Runs `ralph ARGS` in `dir` with its stdout a pipe whose reader is already closed.
fn with_reader_closed(dir: &Path, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    command(dir, args)
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap()
}

/// Audit row 60: a closed stdout ends `ralph demo` and `ralph status` on a long board
/// quietly, as SIGPIPE ends other commands: no panic, nothing on stderr.
#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let dir = project();
    long_board(dir.path(), 300);
    let parent = tempfile::tempdir().unwrap();
    let ws = parent.path().join("ws");
    for (at, args) in [
        (dir.path(), vec!["status"]),
        (parent.path(), vec!["demo", "--in", ws.to_str().unwrap()]),
    ] {
        let out = with_reader_closed(at, &args);
        assert_eq!(out.status.code(), Some(141), "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{args:?}");
    }
}

/// The marker files `init` guesses gates from, and the gate names it gives them.
const ECOSYSTEMS: [(&str, &str, &[&str]); 4] = [
    (
        "Cargo.toml",
        "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2024\"\n",
        &["cargo-fmt", "cargo-clippy", "cargo-test"],
    ),
    ("package.json", "{\"name\":\"demo\"}\n", &["npm-test"]),
    (
        "pyproject.toml",
        "[project]\nname = \"demo\"\n",
        &["python-test"],
    ),
    ("Makefile", "test:\n\ttrue\n", &["make-test"]),
];

/// Audit row 6: `init` in a repository with every combination of Cargo, npm, pyproject and
/// make writes a config the dry run accepts, with a gate name per ecosystem; every top-level
/// key comes before the first table, and the file shows `agents` and an `[agent.NAME]`.
#[test]
fn init_writes_a_config_the_dry_run_accepts_for_every_mix_of_ecosystems() {
    for mask in 0..16u32 {
        let dir = support::messages_api::git_repo();
        std::fs::write(dir.path().join("spec.md"), "# Hello\nCreate hello.txt.\n").unwrap();
        let chosen: Vec<_> = ECOSYSTEMS
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, e)| e)
            .collect();
        for (file, text, _) in &chosen {
            std::fs::write(dir.path().join(file), text).unwrap();
        }

        let init = ralph(dir.path(), &["init"], &[]);
        assert_eq!(init.status.code(), Some(0), "{mask}: {}", stderr(&init));
        let dry = ralph(dir.path(), &["construct", "spec.md", "--dry-run"], &[]);

        let config = std::fs::read_to_string(dir.path().join("ralph.toml")).unwrap();
        assert_eq!(dry.status.code(), Some(0), "{config}\n{}", stderr(&dry));
        let gates = stdout(&dry)
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix("gates:")
                    .map(str::trim)
                    .map(String::from)
            })
            .unwrap();
        for (_, _, names) in &chosen {
            for name in *names {
                assert!(gates.contains(name), "{mask}: {gates}");
            }
        }
        let first_table = config.lines().position(|l| l.starts_with('[')).unwrap();
        let agents = config
            .lines()
            .position(|l| l.starts_with("agents ="))
            .unwrap();
        assert!(agents < first_table, "{config}");
        assert!(config.contains("# [agent.mine]"), "{config}");
    }
}

/// Audit rows 12–14: an empty spec and a binary one are refused, naming the file and (for
/// the binary one) the byte offset; the dry run of a long spec says how much reaches the
/// agent.
#[test]
fn empty_and_binary_specs_are_refused_and_a_long_one_is_measured() {
    let dir = project();
    std::fs::write(dir.path().join("empty.md"), "\n  \n").unwrap();
    std::fs::write(dir.path().join("bin.md"), b"# Bin\n\x00\x01\x1b[31m").unwrap();
    std::fs::write(
        dir.path().join("big.md"),
        "# Big\n".to_owned() + &"words ".repeat(50_000),
    )
    .unwrap();
    for (spec, said) in [
        ("empty.md", "empty.md is empty"),
        ("bin.md", "U+0000 at byte offset 6"),
    ] {
        let script = Path::new(crate::demo::DEMO).join("script.toml");
        for dry in [true, false] {
            let args = match dry {
                true => vec!["construct", spec, "--dry-run"],
                false => vec!["construct", spec, "--script", script.to_str().unwrap()],
            };
            let out = ralph(dir.path(), &args, &[]);
            assert_eq!(out.status.code(), Some(1), "{spec} {dry}");
            assert!(stderr(&out).contains(said), "{spec}: {}", stderr(&out));
        }
    }
    let out = ralph(dir.path(), &["construct", "big.md", "--dry-run"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("spec:      300006 bytes; prompts carry"),
        "{}",
        stdout(&out)
    );
    // Plan mode's dry run measures each long spec of the specs folder too.
    std::fs::create_dir_all(dir.path().join("specs")).unwrap();
    std::fs::copy(dir.path().join("big.md"), dir.path().join("specs/big.md")).unwrap();
    let out = ralph(dir.path(), &["plan", "--dry-run"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("spec:      specs/big.md: 300006 bytes; prompts carry"),
        "{}",
        stdout(&out)
    );
    // And build mode's, for the spec it would work on.
    std::fs::write(
        dir.path().join("implementation.json"),
        r#"{"specs": [{"id": "big", "file": "specs/big.md", "tasks": [{"id": "big-1", "description": "All of it"}]}]}"#,
    )
    .unwrap();
    let out = ralph(dir.path(), &["build", "--dry-run"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("its text:  300006 bytes; prompts carry"),
        "{}",
        stdout(&out)
    );
}

/// The dry runs of plan mode and build mode check the specs' texts as construct's does: an
/// empty spec and a binary one are each refused, naming the file.
#[test]
fn plan_and_build_dry_runs_refuse_empty_and_binary_specs() {
    let dir = project();
    let ws = dir.path();
    std::fs::create_dir(ws.join("specs")).unwrap();
    std::fs::write(ws.join("specs/empty.md"), "\n  \n").unwrap();
    std::fs::write(ws.join("specs/bin.md"), b"# Bin\n\x00\x01\x1b[31m").unwrap();
    for (spec, said) in [
        ("empty.md", "empty.md is empty"),
        ("bin.md", "U+0000 at byte offset 6"),
    ] {
        let path = format!("specs/{spec}");
        let out = ralph(ws, &["plan", &path, "--dry-run"], &[]);
        assert_eq!(out.status.code(), Some(1), "plan {spec}: {}", stdout(&out));
        assert!(stderr(&out).contains(said), "plan {spec}: {}", stderr(&out));

        let implementation = serde_json::json!({"specs": [{
            "id": "s", "name": "S", "file": path, "priority": 1,
            "tasks": [{"id": "s-1", "description": "Do it"}],
        }]});
        std::fs::write(ws.join("implementation.json"), implementation.to_string()).unwrap();
        let out = ralph(ws, &["build", "--dry-run"], &[]);
        assert_eq!(out.status.code(), Some(1), "build {spec}: {}", stdout(&out));
        assert!(
            stderr(&out).contains(said),
            "build {spec}: {}",
            stderr(&out)
        );
    }
}

/// Every line of `out`'s stdout, as JSON.
fn ndjson(out: &Output) -> Vec<serde_json::Value> {
    stdout(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Issue 26 item 5: `--json` is NDJSON in every mode, dry runs included, with durations in
/// seconds as numbers, and the last line is the next step.
#[test]
fn json_output_is_ndjson_everywhere_with_durations_in_seconds() {
    let dir = project();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::write(dir.path().join("specs/a.md"), "# A\nWrite a.txt.\n").unwrap();
    assert_eq!(ralph(dir.path(), &["init"], &[]).status.code(), Some(0));
    for args in [
        &["construct", "spec.md", "--dry-run", "--json"][..],
        &["plan", "--dry-run", "--json"],
        &["build", "--dry-run", "--json"],
    ] {
        let out = ralph(dir.path(), args, &[]);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        let lines = ndjson(&out);
        assert_eq!(lines.len(), 1, "{args:?}");
        assert!(
            lines[0]["stage_timeout"].is_number(),
            "{args:?}: {}",
            lines[0]
        );
    }

    let parent = tempfile::tempdir().unwrap();
    let ws = parent.path().join("ws");
    let out = ralph(
        parent.path(),
        &["demo", "--json", "--in", ws.to_str().unwrap()],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let events = ndjson(&out);
    let gate = events
        .iter()
        .find(|e| e["event"] == "gate_finished")
        .unwrap();
    assert!(gate["duration"].is_number(), "{gate}");
    let last = events.last().unwrap();
    assert_eq!(last["event"], "next", "{last}");
    assert!(
        last["command"].as_str().unwrap().contains("status"),
        "{last}"
    );
}

/// Issue 26 item 5: a complete run says so once and still ends with a `next:` step.
#[test]
fn a_complete_run_ends_with_a_next_step() {
    let parent = tempfile::tempdir().unwrap();
    let ws = parent.path().join("ws");
    let out = ralph(parent.path(), &["demo", "--in", ws.to_str().unwrap()], &[]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert_eq!(text.matches("Spec complete").count(), 1, "{text}");
    assert!(text.contains("next: `ralph -C"), "{text}");
}

/// Issue 26 item 3: `ralph status` from a subdirectory shows the workspace's board (found
/// upward, up to the git root), and a spec path is taken from the current directory.
#[test]
fn status_from_a_subdirectory_shows_the_workspaces_board() {
    let dir = project();
    long_board(dir.path(), 2);
    std::fs::create_dir_all(dir.path().join("src/deep")).unwrap();
    let sub = dir.path().join("src/deep");

    let out = ralph(&sub, &["status"], &[]);

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("t-2") && text.contains("spec spec.md"),
        "{text}"
    );
    assert!(
        !sub.join(".ralph").exists(),
        "a new workspace was made in src/deep"
    );
    // The spec on record, named from where the person stands.
    let dry = ralph(&sub, &["construct", "../../spec.md", "--dry-run"], &[]);
    assert_eq!(dry.status.code(), Some(0), "{}", stderr(&dry));
    assert!(
        stdout(&dry).contains("Dry run of spec.md"),
        "{}",
        stdout(&dry)
    );
    let out = ralph(&sub, &["construct", "../../../x.md", "--dry-run"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("outside the workspace"),
        "{}",
        stderr(&out)
    );
}

/// Audit row 58: a `-C DIR` that does not exist is that error for every command, never a
/// missing agent; `agents = []` is an error naming the key.
#[test]
fn a_missing_workspace_is_that_error_for_every_command() {
    let dir = project();
    let missing = dir.path().join("nope");
    let missing = missing.to_str().unwrap();
    for args in [
        &["status"][..],
        &["construct", "spec.md"],
        &["init"],
        &["task", "list"],
        &["thread", "list"],
        &["build"],
        &["demo"],
    ] {
        let mut all = vec!["-C", missing];
        all.extend_from_slice(args);
        let out = ralph(dir.path(), &all, &[]);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let said = stderr(&out);
        assert!(
            said.contains(&format!("workspace {missing}")) && !said.contains("claude"),
            "{args:?}: {said}"
        );
    }
    std::fs::write(dir.path().join("ralph.toml"), "agents = []\n").unwrap();
    let out = ralph(dir.path(), &["construct", "spec.md"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("agents is empty"), "{}", stderr(&out));
}

/// Issue 26 item 4: before any run, `status` and `query stage` say so (not COMPLETE), and a
/// build-mode workspace is not told to run `ralph construct SPEC`.
#[test]
fn a_workspace_with_no_run_says_so_and_build_mode_is_advised_build() {
    let dir = project();
    let status = ralph(dir.path(), &["status"], &[]);
    assert_eq!(status.status.code(), Some(0), "{}", stderr(&status));
    let text = stdout(&status);
    assert!(
        text.contains("no construct run yet") && !text.contains("COMPLETE"),
        "{text}"
    );
    let stage = ralph(dir.path(), &["query", "stage"], &[]);
    assert_eq!(stdout(&stage), "NONE\n");
    let next = ralph(dir.path(), &["query", "next"], &[]);
    assert_eq!(stdout(&next), "{\"action\":\"none\",\"item\":null}\n");

    std::fs::create_dir(dir.path().join("specs")).unwrap();
    assert_eq!(ralph(dir.path(), &["init"], &[]).status.code(), Some(0));
    let text = stdout(&ralph(dir.path(), &["status"], &[]));
    assert!(
        text.contains("build mode") && text.contains("`ralph plan`"),
        "{text}"
    );
    assert!(!text.contains("construct SPEC"), "{text}");
}

/// The files a command line names besides specs (`--script`, `thread new --spec`,
/// `thread edit --file`) are taken from `-C DIR` too, as if ralph were started there, never
/// from the directory the command ran in; a spec file that cannot be read is named.
#[test]
fn script_and_thread_files_are_relative_to_dash_c() {
    let dir = project();
    let ws = dir.path();
    let elsewhere = tempfile::tempdir().unwrap();
    let dash_c = ws.to_str().unwrap();
    std::fs::copy(
        Path::new(crate::demo::DEMO).join("script.toml"),
        ws.join("script.toml"),
    )
    .unwrap();
    let spec =
        "# T\n\nDo it.\n\n<promise>DONE</promise>\n\n## Acceptance Criteria\n\n- [ ] ok: `true`\n";
    std::fs::write(ws.join("t.md"), spec).unwrap();
    std::fs::write(ws.join("t2.md"), spec.replace("Do it.", "Do it twice.")).unwrap();

    let out = ralph(
        elsewhere.path(),
        &[
            "-C",
            dash_c,
            "construct",
            "spec.md",
            "--dry-run",
            "--script",
            "script.toml",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for args in [
        &["new", "--title", "T", "--spec", "t.md"][..],
        &["edit", "--file", "t2.md"],
    ] {
        let out = ralph(
            elsewhere.path(),
            &[&["-C", dash_c, "thread"][..], args].concat(),
            &[],
        );
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    }
    let latest = std::fs::read_to_string(ws.join(".ralph/threads/1-t/spec/v2.md")).unwrap();
    assert!(latest.contains("Do it twice."), "{latest}");

    let out = ralph(
        ws,
        &["thread", "new", "--title", "U", "--spec", "/nope.md"],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("cannot read the spec /nope.md"),
        "{}",
        stderr(&out)
    );
}
