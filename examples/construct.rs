//! The construct loop through the library: the bundled demo (a small spec, a `ralph.toml`
//! with real shell gates, and a scripted [`FakeAgent`]) in a fresh temporary workspace.
//!
//! ```text
//! cargo run --example construct
//! ```
//!
//! On a project of your own, swap the FakeAgent for `ClaudeCli::from_workspace(dir)?`, or use
//! the `ralph` command (`cargo install ralph-loop --features cli`, then `ralph init` and
//! `ralph construct SPEC.md`), which adds the live display, signals, `--dry-run` and the board.

#![allow(clippy::print_stdout)]
// Examples write their fixtures and workspaces directly, outside any run: the rule
// that state is written through ralph-loop-process's `files` is the library's.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::ExitCode;

use ralph::{Event, FakeAgent, Observer, Ralph};

/// Prints every event as one line: stages, tasks, gates, verdicts.
struct Print;

impl Observer for Print {
    fn on_event(&self, event: &Event) {
        println!("{event}");
    }
}

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/demo");
    // Kept after the run, so you can look at what the agent and the gates left.
    let workspace = tempfile::Builder::new()
        .prefix("ralph-example-")
        .tempdir()?
        .keep();
    for file in ["spec.md", "ralph.toml"] {
        std::fs::copy(demo.join(file), workspace.join(file))?;
    }

    let ralph = Ralph::builder()
        .workspace(&workspace)
        .agent(FakeAgent::from_toml_file(demo.join("script.toml"))?)
        .observer(Print)
        .build()?;
    let outcome = ralph.construct("spec.md").await?;

    println!("\nthe board:");
    for task in ralph.board().await?.tasks() {
        println!("  {:<5} {:<28} {}", task.id, task.name, task.status);
    }
    println!("workspace: {}", workspace.display());
    Ok(ExitCode::from(
        u8::try_from(outcome.exit_code()).unwrap_or(1),
    ))
}
