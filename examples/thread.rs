//! A thread through the library: one piece of work from a spec to a commit, with the person's
//! checkpoints as calls (finalize the spec, approve the changes, commit). The agent is a
//! scripted [`FakeAgent`] (`fixtures/thread/script.toml`); the repository is a fresh one.
//!
//! ```text
//! cargo run --example thread
//! ```
//!
//! `ralph thread …` offers every transition as a command, one process each, with Ctrl+C
//! pausing the loop.

#![allow(clippy::print_stdout)]
// Benches and examples set up their workspaces with git and the programs they measure,
// outside any run: the rule that processes start in ralph-loop-process is the library's.
#![allow(clippy::disallowed_types)]
// Examples write their fixtures and workspaces directly, outside any run: the rule
// that state is written through ralph-loop-process's `files` is the library's.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::Command;

use ralph::FakeAgent;
use ralph::thread::{Phase, RunConfig, Threads};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/thread");
    let repo = tempfile::Builder::new()
        .prefix("ralph-thread-")
        .tempdir()?
        .keep();
    git(&repo, &["init", "-q", "-b", "main"])?;
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "init"])?;

    let agent = FakeAgent::from_toml_file(fixtures.join("script.toml"))?;
    let threads = Threads::new(&repo, agent)?;
    let spec = std::fs::read_to_string(fixtures.join("spec.md"))?;

    let thread = threads.create("Greeter", &spec)?; // Drafting
    threads.thread(&thread.id).finalize()?; // checkpoint 1: the person approves the spec
    let mut record = threads.thread(&thread.id).start().await?; // preflight
    if matches!(record.phase, Phase::Configuring) {
        threads
            .thread(&thread.id)
            .configure(RunConfig::default().max_iterations(5))?;
        record = threads.thread(&thread.id).run().await?; // the loop, until the promise holds
    }
    for attempt in &record.attempts {
        println!("iteration {}: {}", attempt.iteration, attempt.summary);
    }
    println!("phase: {}", record.phase);

    threads.thread(&thread.id).submit_for_review()?;
    println!("\n{}", threads.thread(&thread.id).diff().await?);
    threads.thread(&thread.id).approve().await?; // checkpoint 3: the person approves the changes
    if let Phase::ReadyToCommit { message } = threads.thread(&thread.id).prepare_commit(None)?.phase
    {
        println!("commit message:\n{message}\n");
    }
    let done = threads.thread(&thread.id).commit(None).await?; // checkpoint 4
    println!("phase: {}  branch: {:?}", done.phase, done.branch);
    println!("repository: {}", repo.display());
    Ok(())
}

/// Runs git in `dir`, as a person with a throwaway identity.
fn git(dir: &Path, args: &[&str]) -> std::io::Result<()> {
    let status = Command::new("git")
        .args([
            "-c",
            "user.name=ralph example",
            "-c",
            "user.email=example@ralph.invalid",
        ])
        .args(args)
        .current_dir(dir)
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("git {args:?}: {status}")))
    }
}
