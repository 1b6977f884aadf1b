//! How far a run is confined is never silent (issue 34, item 5): without bubblewrap the
//! default mode warns at the start, in the summary and in `--json`, and the required mode
//! refuses naming the cause and the fix; a run told to go unconfined, or on a machine
//! declared a sandbox, says so in its dry run and its summary; an agent that runs in ralph's
//! own process is named as never confined.

use std::path::Path;
use std::process::{Command, Output};

use super::hooks::SCRIPT;
use super::{ralph_bin, stderr, stdout};

/// A workspace (no git) with the spec, the script and `ralph.toml` holding `config`.
fn workspace(config: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("spec.md"), "# Hello\nWrite hello.txt.\n").unwrap();
    std::fs::write(dir.path().join("script.toml"), SCRIPT).unwrap();
    std::fs::write(dir.path().join("ralph.toml"), config).unwrap();
    dir
}

/// `ralph construct spec.md --script script.toml EXTRA` in `dir`, with `path` as `PATH`.
fn construct(dir: &Path, extra: &[&str], path: &str) -> Output {
    Command::new(ralph_bin())
        .args(["construct", "spec.md", "--script", "script.toml"])
        .args(extra)
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("RALPH_CLAUDE_BIN")
        .output()
        .unwrap()
}

/// A `PATH` with no `bwrap` on it: `sh` alone, for the gate (the FakeAgent needs no
/// program).
fn no_bwrap() -> String {
    let dir = std::env::temp_dir().join(format!("ralph-test-sh-only-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sh = dir.join("sh");
    if !sh.exists() {
        std::os::unix::fs::symlink("/bin/sh", &sh).unwrap();
    }
    dir.display().to_string()
}

/// A gate: the run starts a process, which the sandbox would confine.
const GATE: &str = "[[gates]]\nname = \"hello\"\ncommand = \"test -f hello.txt\"\n";

#[test]
fn without_bubblewrap_the_default_mode_warns_everywhere_and_the_required_mode_refuses() {
    let dir = workspace(GATE);
    let out = construct(dir.path(), &[], &no_bwrap());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let all = stdout(&out) + &stderr(&out);
    assert!(
        all.contains("running unconfined: bwrap (bubblewrap) is not on PATH")
            && all.contains("install bubblewrap"),
        "{all}"
    );
    assert!(
        stdout(&out).contains("sandbox: unconfined (bwrap (bubblewrap) is not on PATH)"),
        "{}",
        stdout(&out)
    );
    let dry = construct(workspace(GATE).path(), &["--dry-run"], &no_bwrap());
    assert!(
        stdout(&dry).contains("sandbox:   UNCONFINED: bwrap (bubblewrap) is not on PATH"),
        "{}",
        stdout(&dry)
    );
    let json = construct(workspace(GATE).path(), &["--json"], &no_bwrap());
    let finished: Vec<serde_json::Value> = stdout(&json)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|e: &serde_json::Value| e["event"] == "finished")
        .collect();
    assert_eq!(
        finished[0]["sandbox"],
        "unconfined (bwrap (bubblewrap) is not on PATH)"
    );

    let required = workspace(&format!("[sandbox]\nmode = \"required\"\n\n{GATE}"));
    let out = construct(required.path(), &[], &no_bwrap());
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains(
            "[sandbox] mode = \"required\", but no sandbox can be made here: bwrap \
             (bubblewrap) is not on PATH; install bubblewrap"
        ),
        "{}",
        stderr(&out)
    );
    assert!(
        !required.path().join(".ralph").exists(),
        "a refused run wrote nothing"
    );
}

/// With an agent in ralph's own process and no gate, nothing would be confined: no warning.
#[test]
fn a_run_that_starts_no_process_has_nothing_to_warn_of() {
    let out = construct(workspace("").path(), &[], &no_bwrap());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("running unconfined"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn unconfined_and_declared_runs_say_so_and_in_process_agents_are_named() {
    let path = std::env::var("PATH").unwrap();
    for (mode, said) in [
        ("off", "unconfined, as [sandbox] mode = \"off\" says"),
        (
            "machine",
            "the machine itself, as [sandbox] mode = \"machine\" declares",
        ),
    ] {
        let dir = workspace(&format!("[sandbox]\nmode = \"{mode}\"\n"));
        let dry = construct(dir.path(), &["--dry-run"], &path);
        let text = stdout(&dry);
        assert!(text.contains(&format!("sandbox:   {said}")), "{text}");
        assert!(
            text.contains("in-process, so never confined: agent fake"),
            "{text}"
        );
        let out = construct(dir.path(), &[], &path);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let summary = stdout(&out);
        let label = if mode == "off" {
            "sandbox: off (unconfined)"
        } else {
            "sandbox: machine (declared a sandbox)"
        };
        assert!(summary.contains(label), "{summary}");
        assert!(
            !stderr(&out).contains("running unconfined"),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn with_bubblewrap_the_dry_run_and_the_summary_say_bubblewrap() {
    if ralph_loop_process::process::Sandbox::bubblewrap().is_err() {
        eprintln!("skipped: no bubblewrap here");
        return;
    }
    let path = std::env::var("PATH").unwrap();
    let dir = workspace("");
    let dry = construct(dir.path(), &["--dry-run"], &path);
    assert!(
        stdout(&dry).contains("sandbox:   bubblewrap: agents and gates write only their work tree"),
        "{}",
        stdout(&dry)
    );
    let out = construct(dir.path(), &[], &path);
    assert!(
        stdout(&out).contains("sandbox: bubblewrap"),
        "{}",
        stdout(&out)
    );
}
