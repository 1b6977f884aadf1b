//! An honest agent still builds to Complete in the sandbox (issue 34): a Cargo project with a
//! path dependency and a registry dependency already fetched (the registry read, `target/`
//! written), a Python project (a venv in the workspace with `--system-site-packages`,
//! pytest or unittest), and a Node project (`npm install` of a `file:` dependency into
//! `node_modules`). Each through the `ralph` command with a command agent, the gate run in
//! the sandbox without network, so no registry is reached. Skipped where bubblewrap cannot
//! run, or the ecosystem's tools are missing.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

use rstest::rstest;

/// The agent: one task, built by `build.sh` (the ecosystem's own steps), accepted.
const AGENT: &str = r#"cat > /dev/null
case "$1" in
  investigate) echo '{"tasks":[{"name":"Build it","accept":"the gate passes"}]}' ;;
  build) sh ./build.sh >&2 || exit 1; printf 'Built it.\n<TASK_DONE>\n' ;;
  verify) echo '{"verdict":"accept","reason":"it builds"}' ;;
  gap_analysis) echo '{"tasks":[],"issues":[]}' ;;
  *) exit 1 ;;
esac
"#;

#[derive(Clone, Copy, Debug)]
enum Ecosystem {
    Cargo,
    Python,
    Node,
}

impl Ecosystem {
    /// The programs it needs on `PATH`.
    fn tools(self) -> &'static [&'static str] {
        match self {
            Ecosystem::Cargo => &["cargo"],
            Ecosystem::Python => &["python3"],
            Ecosystem::Node => &["node", "npm"],
        }
    }

    /// The files of the project before the task (path, text), the agent's build steps, and
    /// the gate.
    fn project(
        self,
    ) -> (
        Vec<(&'static str, &'static str)>,
        &'static str,
        &'static str,
    ) {
        match self {
            Ecosystem::Cargo => (
                vec![
                    (
                        "Cargo.toml",
                        "[package]\nname = \"eco\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
                         [dependencies]\ndep = { path = \"dep\" }\nitoa = \"1\"\n",
                    ),
                    (
                        "dep/Cargo.toml",
                        "[package]\nname = \"dep\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
                    ),
                    ("dep/src/lib.rs", "pub fn two() -> u32 { 2 }\n"),
                ],
                "mkdir -p src && printf '%s\\n' 'pub fn two() -> String { itoa::Buffer::new().format(dep::two()).to_owned() }' \
                 '#[test] fn it_is_two() { assert_eq!(two(), \"2\"); }' > src/lib.rs",
                "cargo test --offline -q && test -d target",
            ),
            Ecosystem::Python => (
                vec![],
                "python3 -m venv --system-site-packages .venv && \
                 printf 'def add(a, b):\\n    return a + b\\n' > calc.py && \
                 printf 'import unittest\\nfrom calc import add\\n\\nclass T(unittest.TestCase):\\n    def test_add(self):\\n        self.assertEqual(add(1, 2), 3)\\n' > test_calc.py",
                "if .venv/bin/python -c 'import pytest' 2>/dev/null; then .venv/bin/python -m pytest -q; \
                 else .venv/bin/python -m unittest -q; fi",
            ),
            Ecosystem::Node => (
                vec![
                    (
                        "dep/package.json",
                        "{\"name\": \"dep\", \"version\": \"1.0.0\", \"main\": \"index.js\"}\n",
                    ),
                    ("dep/index.js", "module.exports = () => 2;\n"),
                ],
                "printf '{\"name\": \"eco\", \"version\": \"1.0.0\", \"dependencies\": {\"dep\": \"file:./dep\"}}\\n' > package.json && \
                 npm install --offline --no-audit --no-fund",
                "test -d node_modules/dep && node -e 'process.exit(require(\"dep\")() === 2 ? 0 : 1)'",
            ),
        }
    }
}

fn on_path(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn write(dir: &Path, rel: &str, text: &str) {
    crate::support::write(dir, rel, text);
}

#[rstest]
#[case::cargo(Ecosystem::Cargo)]
#[case::python(Ecosystem::Python)]
#[case::node(Ecosystem::Node)]
fn an_honest_agent_builds_each_ecosystem_to_complete_in_the_sandbox(#[case] eco: Ecosystem) {
    if ralph_loop_process::process::Sandbox::bubblewrap().is_err() {
        eprintln!("skipped: no bubblewrap here");
        return;
    }
    if let Some(missing) = eco.tools().iter().find(|t| !on_path(t)) {
        eprintln!("skipped: {missing} is not on PATH");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let (files, build, gate) = eco.project();
    for (path, text) in files {
        write(ws, path, text);
    }
    write(ws, "build.sh", build);
    write(ws, "agent.sh", AGENT);
    write(ws, "spec.md", "# Build\nBuild the project.\n");
    write(
        ws,
        "ralph.toml",
        &format!(
            "agents = [\"honest\"]\nretries = 0\nstage_timeout = \"5m\"\nagent_timeout = \"4m\"\n\n\
             [sandbox]\nmode = \"required\"\n\n\
             [agent.honest]\ncommand = [\"sh\", \"agent.sh\", \"{{role}}\"]\n\n\
             [[gates]]\nname = \"build\"\ncommand = {gate:?}\ntimeout = \"4m\"\n"
        ),
    );
    let out = Command::new(crate::support::ralph_bin())
        .args(["construct", "spec.md"])
        .current_dir(ws)
        .env_remove("RALPH_CLAUDE_BIN")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let logs = crate::support::tree(&ws.join("build/ralph-logs"))
        .into_values()
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{eco:?}:\n{text}\n{}\n{logs}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("Spec complete"), "{text}");
    assert!(text.contains("sandbox: bubblewrap"), "{text}");
}
