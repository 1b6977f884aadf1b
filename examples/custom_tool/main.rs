//! A tool of your own on ralph: a custom gate, prioritizer, store and observer
//! (`parts.rs`), driven here by a scripted agent in a fresh temporary workspace.
//!
//! ```text
//! cargo run --example custom_tool
//! ```
//!
//! Swap the [`FakeAgent`] for `ralph::ClaudeCli::new()` and the temporary directory for
//! your repository and the same parts drive the real Claude CLI.

#![allow(clippy::print_stdout, clippy::print_stderr)]
// a program that talks to a person
// Examples write their fixtures and workspaces directly, outside any run: the rule
// that state is written through ralph-loop-process's `files` is the library's.
#![allow(clippy::disallowed_methods)]

mod parts;

use std::process::ExitCode;

use ralph::Outcome;
use ralph::agent::{FakeAgent, Role, Script};
use serde_json::json;

/// The spec: a tool that needs a config file.
const SPEC: &str = "# Settings\n\nShip a `config.json` with the service's port and a README.\n";

/// The agent's part, scripted: two tasks; the config is broken on the first try, so the
/// JSON gate fails and the retry fixes it; both are verified.
fn scripted_agent() -> FakeAgent {
    let tasks = json!({"tasks": [
        {"name": "Write the README", "accept": "README.md says what the port is", "complexity": "medium"},
        {"name": "Write config.json", "accept": "config.json holds the port", "complexity": "small"},
    ]});
    let accept = |why: &str| Script::new().json(json!({"verdict": "accept", "reason": why}));
    FakeAgent::new()
        .on(Role::Investigate, "i-1", Script::new().json(tasks))
        .on_attempt(
            Role::Build,
            "t-2",
            1,
            Script::new()
                .write("config.json", "{\"port\": 8080,}\n")
                .answer("Wrote the config.\n<TASK_DONE>"),
        )
        .on_attempt(
            Role::Build,
            "t-2",
            2,
            Script::new()
                .write("config.json", "{\"port\": 8080}\n")
                .answer("Fixed the trailing comma.\n<TASK_DONE>"),
        )
        .on(
            Role::Build,
            "t-1",
            Script::new()
                .write("README.md", "The service listens on port 8080.\n")
                .answer("Wrote the README.\n<TASK_DONE>"),
        )
        .on(Role::Verify, "t-1", accept("the README names the port"))
        .on(
            Role::Verify,
            "t-2",
            accept("config.json parses and holds the port"),
        )
        .always(
            Role::GapAnalysis,
            Script::new().json(json!({"tasks": [], "issues": []})),
        )
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(Outcome::Complete { .. }) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(2),
        Err(e) => {
            eprintln!("custom_tool: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<Outcome, Box<dyn std::error::Error>> {
    let workspace = tempfile::tempdir()?;
    std::fs::write(workspace.path().join("spec.md"), SPEC)?;
    println!("workspace: {}", workspace.path().display());
    let ralph = parts::assemble(workspace.path(), scripted_agent(), std::io::stdout())?;
    // Ctrl+C stops the run cleanly; a second one kills what it started and exits.
    ralph::steer::listen_for_signals(ralph.workspace(), ralph.stop_token(), |signal| {
        eprintln!("{signal}: stopping; again to kill at once");
    })?;
    let outcome = ralph.construct("spec.md").await?;
    let kept = std::fs::read_to_string(workspace.path().join("state.json"))?;
    println!(
        "state.json: {} changes",
        serde_json::from_str::<Vec<serde_json::Value>>(&kept)?.len()
    );
    Ok(outcome)
}
