//! A refusal names what to change: the setting, the flag, the field, the file (re-audit of
//! the newcomer and bad-input audit).

use super::*;

/// The stderr of `ralph ARGS` in a fresh project, which must fail.
fn refused(args: &[&str], env: &[(&str, &str)]) -> String {
    let dir = project();
    let out = ralph(dir.path(), args, env);
    assert_ne!(out.status.code(), Some(0), "{}", stdout(&out));
    stderr(&out)
}

/// First table, Codex row: a vendor CLI that is not there is named by its documented
/// setting, wherever its path came from, not by a command agent's `command`.
#[test]
fn a_missing_vendor_cli_names_its_bin_setting() {
    for (agent, variable) in [
        ("codex", "RALPH_CODEX__BIN"),
        ("gemini", "RALPH_GEMINI__BIN"),
        ("opencode", "RALPH_OPENCODE__BIN"),
    ] {
        let error = refused(
            &["construct", "spec.md", "--agent", agent],
            &[(variable, "/nope/cli")],
        );
        assert!(
            error.contains(&format!("/nope/cli (from {agent}.bin)"))
                && error.contains(&format!("([{agent}] bin) or {variable}"))
                && !error.contains(&format!("agent.{agent}.command")),
            "{error}"
        );
    }
}

/// Case 17: a gate that runs past its timeout says which timeout, in the gate's line and in
/// the reason its task was blocked for.
#[test]
fn a_gate_timeout_names_the_configured_value() {
    let dir = super::dead_ends::project_with_agents(
        "works",
        "retries = 0\n[[gates]]\nname = \"slow\"\ncommand = \"sleep 30\"\ntimeout = \"1s\"\n",
    );

    let out = ralph(dir.path(), &["construct", "spec.md"], &[]);

    let text = stdout(&out);
    assert!(
        text.contains("gate slow: timed out after 1s")
            && text.contains("Quality gate `slow` timed out after 1s"),
        "{text}\n{}",
        stderr(&out)
    );
}

/// Case 53: JSON that is not an object is refused with the shape of a task, not serde's
/// name for ralph's own type.
#[test]
fn task_add_of_json_that_is_not_an_object_shows_the_shape() {
    for json in ["[]", "[\"n\", \"a\"]", "\"n\"", "3"] {
        let error = refused(&["task", "add", json], &[]);
        assert!(
            error.contains(r#"a task is a JSON object, {"name": "…", "accept": "…"}"#)
                && !error.contains("NewTask"),
            "{json}: {error}"
        );
    }
    let error = refused(&["task", "add", r#"{"nme": "n"}"#], &[]);
    assert!(
        error.contains("unknown field `nme`") && !error.contains("NewTask"),
        "{error}"
    );
}

/// Re-audit N3 and N6: control characters and a case-only id clash are refused at add time,
/// and text an agent wrote into the board is listed with its control characters escaped.
#[test]
fn task_add_refuses_control_characters_and_task_list_escapes_them() {
    let dir = project();
    let refused_here = |args: &[&str]| {
        let out = ralph(dir.path(), args, &[]);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stdout(&out));
        stderr(&out)
    };
    let error = refused_here(&["task", "add", r#"{"name":"esc\u001b[31mred","accept":"a"}"#]);
    assert!(
        error.contains("name holds the control character U+001B"),
        "{error}"
    );
    let error = refused_here(&["issue", "add", "bad\x1b[31m"]);
    assert!(
        error.contains("text holds the control character U+001B"),
        "{error}"
    );
    let added = ralph(
        dir.path(),
        &["task", "add", r#"{"id":"t-1","name":"n","accept":"a"}"#],
        &[],
    );
    assert!(added.status.success(), "{}", stderr(&added));
    let error = refused_here(&["task", "add", r#"{"id":"T-1","name":"n","accept":"a"}"#]);
    assert!(error.contains("differs from t-1 only in case"), "{error}");

    // What an agent wrote reaches the board unchecked; the listing escapes it.
    let plan = dir.path().join(".ralph/plan.jsonl");
    let mut text = std::fs::read_to_string(&plan).unwrap();
    text = text.replace(r#""name":"n""#, r#""name":"esc\u001b[31mred\tx""#);
    std::fs::write(&plan, text).unwrap();
    let adopted = ralph(dir.path(), &["repair", "--adopt"], &[]);
    assert!(adopted.status.success(), "{}", stderr(&adopted));
    let list = ralph(dir.path(), &["task", "list"], &[]);
    let listed = stdout(&list);
    assert!(
        listed.contains(r"esc\u{1b}[31mred\tx") && !listed.contains('\u{1b}'),
        "{listed:?}\n{}",
        stderr(&list)
    );
}

/// Case 64: a stray comma in `--agent` is named as such, not as an agent called "".
#[test]
fn a_stray_comma_in_the_agent_list_is_named() {
    for list in ["mine,", ",mine", "mine,,mine", "mine, "] {
        for args in [
            &["construct", "spec.md", "--dry-run", "--agent", list][..],
            &["thread", "--agent", list, "list"],
        ] {
            let error = refused(args, &[]);
            assert!(
                error.contains("--agent") && error.contains("has an empty name"),
                "{args:?}: {error}"
            );
            assert!(!error.contains("no agent \"\""), "{args:?}: {error}");
        }
    }
}

/// Case 15 (and 12, 13): a spec refused for its path or its text is said first; the run
/// prints no header and writes nothing, not even `.ralph/`.
#[test]
fn a_refused_spec_prints_no_header_and_writes_nothing() {
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("secret.md");
    std::fs::write(&target, "# Secret\n").unwrap();
    let dir = project();
    std::os::unix::fs::symlink(&target, dir.path().join("pw.md")).unwrap();
    std::fs::write(dir.path().join("empty.md"), "  \n").unwrap();
    for (spec, said) in [("pw.md", "outside the workspace"), ("empty.md", "is empty")] {
        let out = ralph(
            dir.path(),
            &["construct", spec, "--agent", "mine"],
            &[("RALPH_AGENT__MINE__COMMAND", r#"["/bin/false"]"#)],
        );

        assert_eq!(out.status.code(), Some(1), "{spec}: {}", stdout(&out));
        assert!(stderr(&out).contains(said), "{spec}: {}", stderr(&out));
        assert_eq!(stdout(&out), "", "{spec}: no header for a refused run");
        assert!(
            !dir.path().join(".ralph").exists(),
            "{spec}: a refused run wrote .ralph/"
        );
    }
}

/// When ralph.toml itself empties the gates (`gates = []`), the no-gate warning names that
/// file and its setting, not a variable that did nothing.
#[test]
fn the_no_gate_warning_names_ralph_toml_when_it_emptied_them() {
    let dir = super::dead_ends::project_with_agents("works", "gates = []\n");

    let out = ralph(dir.path(), &["construct", "spec.md"], &[]);

    let text = stdout(&out) + &stderr(&out);
    let file = dir.path().canonicalize().unwrap().join("ralph.toml");
    assert!(
        text.contains("warning: no required gate")
            && text.contains(&format!("`gates = []` in {}", file.display())),
        "{text}"
    );
    assert!(!text.contains("RALPH_GATES"), "{text}");
}

/// Case 10: when `RALPH_GATES` emptied the gates of ralph.toml, the no-gate warning names
/// the variable, not the file that has a gate.
#[test]
fn the_no_gate_warning_names_ralph_gates_when_it_emptied_them() {
    let dir = super::dead_ends::project_with_agents(
        "works",
        "[[gates]]\nname = \"exists\"\ncommand = \"true\"\n",
    );

    let out = ralph(
        dir.path(),
        &["construct", "spec.md"],
        &[("RALPH_GATES", "[]")],
    );

    let text = stdout(&out) + &stderr(&out);
    assert!(
        text.contains("warning: no required gate") && text.contains("RALPH_GATES sets the gates"),
        "{text}"
    );
    assert!(!text.contains("add [[gates]] to ralph.toml"), "{text}");
}
