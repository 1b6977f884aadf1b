//! `ralph init`: a commented `ralph.toml` with gates guessed from the repository,
//! `.ralph/` kept out of git, and, where a `specs/` folder exists, an empty
//! `implementation.json` for build mode (seed 004's init).

// `ralph init` writes files a person edits, before any run: `ralph.toml` and
// `implementation.json` only where none is, `.gitignore` by appending a line. None is state
// a run writes, so none goes through the library's durable writers.
#![allow(clippy::disallowed_methods)]

use std::io::Write as _;
use std::path::Path;

use crate::out::out;

/// A gate guessed from a file the repository has.
struct Guess {
    /// The file that suggests it.
    marker: &'static str,
    /// The commands the agent may run without asking (`--allowedTools`).
    tools: &'static [&'static str],
    /// `(name, command)` of each gate. Each name carries its ecosystem, so a repository
    /// with several (Cargo and npm and make) gets unique names, which ralph requires.
    gates: &'static [(&'static str, &'static str)],
}

const GUESSES: &[Guess] = &[
    Guess {
        marker: "Cargo.toml",
        tools: &["Bash(cargo *)"],
        gates: &[
            ("cargo-fmt", "cargo fmt --check"),
            ("cargo-clippy", "cargo clippy --all-targets -- -D warnings"),
            ("cargo-test", "cargo test"),
        ],
    },
    Guess {
        marker: "package.json",
        tools: &["Bash(npm *)", "Bash(npx *)"],
        gates: &[("npm-test", "npm test")],
    },
    Guess {
        marker: "pyproject.toml",
        tools: &["Bash(python *)", "Bash(pytest *)"],
        gates: &[("python-test", "python -m pytest")],
    },
    Guess {
        marker: "Makefile",
        tools: &["Bash(make *)"],
        gates: &[("make-test", "make test")],
    },
];

/// Writes `ralph.toml` (refusing to replace one) and adds `.ralph/` to `.gitignore`.
pub(crate) fn init(workspace: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let config = workspace.join("ralph.toml");
    if config.exists() {
        return Err(format!(
            "{} exists; ralph init does not replace it (edit it, or remove it first)",
            config.display()
        )
        .into());
    }
    let text = config_text(workspace);
    std::fs::write(&config, text)?;
    out!("wrote {}", config.display());
    if ignore_state(workspace)? {
        out!("added .ralph/ to .gitignore");
    }
    if let Some(path) = implementation_template(workspace)? {
        out!(
            "wrote {} (no specs yet: `ralph plan` fills it from specs/, `ralph build` builds it)",
            path.display()
        );
    }
    out!("next: {}", next_step(workspace));
    Ok(())
}

/// What to run after `init`, from what is there: the specs folder (plan mode), a spec file
/// at the top (the construct loop), or neither.
fn next_step(workspace: &Path) -> String {
    if workspace.join("specs").is_dir() {
        return "`ralph plan` breaks the specs in specs/ down into implementation.json, then \
                `ralph build` builds them"
            .into();
    }
    let spec = ["SPEC.md", "spec.md", "Spec.md"]
        .into_iter()
        .find(|name| workspace.join(name).is_file());
    match spec {
        Some(spec) => format!("`ralph construct {spec}` builds it"),
        None => "write a spec (spec.md), then `ralph construct spec.md`".into(),
    }
}

/// Writes an empty `implementation.json` when the repository has a `specs/` folder (build
/// mode's input) and no such file; the path written, if any. An existing file is never
/// replaced: it may hold finished work.
fn implementation_template(
    workspace: &Path,
) -> Result<Option<std::path::PathBuf>, Box<dyn std::error::Error>> {
    let path = workspace.join("implementation.json");
    if !workspace.join("specs").is_dir() || path.exists() {
        return Ok(None);
    }
    let mut plan = ralph::specs::Implementation::default();
    plan.updated_by = Some("ralph init".into());
    let mut text = serde_json::to_string_pretty(&plan)?;
    text.push('\n');
    std::fs::write(&path, text)?;
    Ok(Some(path))
}

/// The commented config, with the gates of every marker file found. Every top-level key
/// comes before the first table, so a key a person adds at the top stays top-level; the
/// file ends with a commented `[agent.NAME]` example for any other agent CLI.
fn config_text(workspace: &Path) -> String {
    let found: Vec<&Guess> = GUESSES
        .iter()
        .filter(|g| workspace.join(g.marker).exists())
        .collect();
    let mut text = String::from(TOP_LEVEL);
    text.push_str(&claude_section(&found));
    text.push_str(&gates_section(&found));
    text.push_str(AGENT_EXAMPLE);
    text
}

/// The top-level settings, `agents` among them: before any table, where TOML keeps them
/// top-level.
const TOP_LEVEL: &str = "\
# ralph's settings for this repository. Every key is optional; the values below are
# the defaults unless a comment says otherwise. RALPH_<KEY> variables override them.
# Top-level keys go here, above the first [table]: below it they belong to that table.

max_iterations = 10       # construct passes before ralph stops (exit 2)
stage_timeout = \"5m\"      # one step: an issue, a task (all attempts), a verifier, a decomposition
retries = 2               # more build attempts per task before it is blocked
decompose_after_rejections = 2  # verifier rejections before a task is split
build_concurrency = 1     # ready tasks built at once, each in a git work tree
# The agents to run, in fallback order: claude, codex, gemini, opencode, or the name of
# an [agent.NAME] table below. `--agent NAME` overrides it for one command.
agents = [\"claude\"]

";

/// The `[claude]` table: the budget and the permissions set, not left to defaults.
fn claude_section(found: &[&Guess]) -> String {
    let tools: Vec<String> = [
        "Read",
        "Edit",
        "Write",
        "Bash(git diff *)",
        "Bash(git status *)",
    ]
    .into_iter()
    .chain(found.iter().flat_map(|g| g.tools.iter().copied()))
    .map(|t| format!("{t:?}"))
    .collect();
    format!(
        "[claude]\n\
         # Set here, not left to defaults: what one agent run may cost, and what it may do.\n\
         max_budget_usd = 2.0\n\
         # BUILD may edit files and run the tools below without asking; anything else is\n\
         # refused (\"bypassPermissions\" allows everything). Read-only roles run in plan mode.\n\
         permission_mode = \"acceptEdits\"\n\
         allowed_tools = [{}]\n# model = \"sonnet\"\n\n",
        tools.join(", ")
    )
}

/// One `[[gates]]` table per guessed gate, or a commented example when nothing was found.
fn gates_section(found: &[&Guess]) -> String {
    if found.is_empty() {
        return "# No build files found: add the checks a task must pass, e.g.\n\
                # [[gates]]\n# name = \"test\"\n# command = \"make test\"\n\n"
            .into();
    }
    let mut text = String::new();
    for guess in found {
        text.push_str(&format!(
            "# Gates guessed from {}: every one must pass.\n",
            guess.marker
        ));
        for (name, command) in guess.gates {
            text.push_str(&format!(
                "[[gates]]\nname = \"{name}\"\ncommand = \"{command}\"\ntimeout = \"10m\"\n\n"
            ));
        }
    }
    text
}

/// Any other agent CLI, commented out: uncomment it and name it in `agents` to use it.
const AGENT_EXAMPLE: &str = "\
# Any other agent CLI, run from an argv template: uncomment, then name it in `agents`
# above (or pass `--agent mine`). Placeholders: {prompt_file} (else the prompt goes to
# stdin), {workspace}, {role}, {subject}.
# [agent.mine]
# command = [\"my-agent\", \"--yes\", \"--message-file\", \"{prompt_file}\"]
";

/// Adds `.ralph/` to `.gitignore` unless it is there; whether it added it.
fn ignore_state(workspace: &Path) -> std::io::Result<bool> {
    let path = workspace.join(".gitignore");
    let existing = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    if existing
        .lines()
        .any(|l| matches!(l.trim(), ".ralph" | ".ralph/" | "/.ralph" | "/.ralph/"))
    {
        return Ok(false);
    }
    // Appended, not rewritten: a crash midway cannot cut the person's own lines.
    let mut line = String::new();
    if !existing.is_empty() && !existing.ends_with('\n') {
        line.push('\n');
    }
    line.push_str(".ralph/\n");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)?;
    file.write_all(line.as_bytes())?;
    file.sync_data()?;
    Ok(true)
}
