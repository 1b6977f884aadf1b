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
