//! `thread`: drive one piece of work through ralph's thread lifecycle, one command at a time
//! (each command is a new process; the state lives in `<workspace>/.ralph/`).
//!
//! ```text
//! git init -q -b main /tmp/greeter && git -C /tmp/greeter commit -q --allow-empty -m init
//! alias thread='cargo run -q --example thread -- --workspace /tmp/greeter'  # default: the current directory
//! thread new --title "Greeter" --spec fixtures/thread/spec.md
//! thread assess         # optional AI review of the spec
//! thread finalize       # checkpoint: you approve the spec
//! thread start          # preflight, default settings, the loop
//! thread status
//! thread review         # Implemented → PendingReview (--quick: automatic)
//! thread approve        # checkpoint: you approve the changes
//! thread commit         # checkpoint: commits on ralph/<id>
//! ```
//!
//! Ctrl+C (SIGINT), SIGTERM or SIGHUP while the loop runs stops the agent cleanly and saves
//! the thread as Paused (exit 130, 143 or 129; a second signal stops at once); `resume`
//! continues from the same iteration. `--dry-run` shows what `start`, `resume` or `assist`
//! would do, and runs and writes nothing. A stuck thread offers `diagnose`,
//! `reconfigure`, `assist` (after you edited files), `revise --spec FILE --yes` (resets the
//! work tree to the baseline) and `abandon`. Commands act on the active thread unless
//! `--id` names another.
//!
//! The agent is the FakeAgent with `fixtures/thread/script.toml` (or `--script`); with
//! `--agent claude` it is the Claude Code CLI.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ralph::thread::{Confirm, Phase, RunConfig, ThreadOptions, ThreadRecord, Threads};
use ralph::{Agent, ClaudeCli, Event, FakeAgent, Interrupts, Observer};

/// The bundled FakeAgent script.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/thread/script.toml");

/// Drive a ralph thread: spec → implementation → review → commit.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// The workspace (a git repository). Default: the current directory.
    #[arg(long, global = true)]
    workspace: Option<PathBuf>,
    /// The thread. Default: the active one.
    #[arg(long, global = true)]
    id: Option<String>,
    /// The agent: the scripted `fake`, or the real `claude` CLI.
    #[arg(long, global = true, value_enum, default_value_t = AgentKind::Fake)]
    agent: AgentKind,
    /// The FakeAgent script (TOML).
    #[arg(long, global = true)]
    script: Option<PathBuf>,
    /// Quick mode: skip assessment and polish, stop only at the human checkpoints.
    #[arg(long, global = true)]
    quick: bool,
    /// Iterations per round of the loop.
    #[arg(long, global = true, default_value_t = 5)]
    max_iterations: u32,
    /// Show what `start`, `resume` or `assist` would do; run and write nothing.
    #[arg(long, global = true)]
    dry_run: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum AgentKind {
    /// The FakeAgent and its script.
    Fake,
    /// The Claude Code CLI.
    Claude,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create a thread from a spec file (Drafting).
    New {
        /// The title.
        #[arg(long)]
        title: String,
        /// The spec (markdown with `<promise>TAG</promise>` and `## Acceptance Criteria`).
        #[arg(long)]
        spec: PathBuf,
    },
    /// List the threads.
    List,
    /// Ask for an AI review of the spec (Drafting → Assessing; back to Drafting on issues).
    Assess,
    /// Approve the spec (Drafting or Assessing → Finalized).
    Finalize,
    /// Preflight, default settings, and the loop.
    Start,
    /// Show the thread.
    Status,
    /// Continue a paused loop from the interrupted iteration.
    Resume,
    /// Paused or Stuck → Configuring, then run the loop again.
    Reconfigure,
    /// Stuck → Running after you edited files.
    Assist,
    /// The stuck report.
    Diagnose,
    /// Back to Drafting with a new spec; resets the work tree to the baseline.
    Revise {
        /// The new spec.
        #[arg(long)]
        spec: Option<PathBuf>,
        /// Confirm the reset.
        #[arg(long)]
        yes: bool,
    },
    /// Implemented → PendingReview (quick mode does this itself).
    Review,
    /// Approve the changes under review.
    Approve,
    /// Commit the changes on the thread's branch.
    Commit {
        /// The message. Default: the prepared one.
        #[arg(long)]
        message: Option<String>,
    },
    /// Abandon the thread.
    Abandon,
    /// The diff from the baseline.
    Diff,
}

#[tokio::main]
pub(crate) async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            let mut message = e.to_string();
            let mut source = e.source();
            while let Some(s) = source {
                message.push_str(&format!(": {s}"));
                source = s.source();
            }
            eprintln!("error: {message}");
            ExitCode::from(1)
        }
    }
}

/// Runs the command; the exit code is 0, or the signal's that paused the loop.
async fn run(args: Args) -> Result<u8, Box<dyn std::error::Error>> {
    let workspace = match &args.workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir()?,
    };
    let agent: Box<dyn Agent> = match args.agent {
        AgentKind::Fake => Box::new(FakeAgent::from_toml_file(
            args.script.clone().unwrap_or_else(|| SCRIPT.into()),
        )?),
        AgentKind::Claude => Box::new(ClaudeCli::from_workspace(&workspace)?),
    };
    // The workspace's ralph.toml gives the grace and the transient backoff.
    let config = ralph::Config::load(&workspace)?;
    let options = ThreadOptions::from_config(&config)
        .quick(args.quick)
        .config(RunConfig::default().max_iterations(args.max_iterations));
    let threads = Threads::new(&workspace, agent)?
        .options(options)
        .observer(Warnings);
    // SIGINT, SIGTERM or SIGHUP pause the loop: the agent is stopped and the thread saved
    // as Paused.
    let interrupts = Interrupts::listen(threads.workspace(), threads.stop_token(), |signal| {
        eprintln!("\n{signal}: stopping the agent and pausing the thread… (again to stop at once)");
    })?;
    let id = || -> Result<String, Box<dyn std::error::Error>> {
        args.id
            .clone()
            .or_else(|| threads.active())
            .ok_or_else(|| "no active thread: create one with `new` or pass --id".into())
    };
    if args.dry_run {
        println!("{}", threads.dry_run(&id()?)?);
        return Ok(0);
    }
    let thread = match &args.command {
        Command::New { title, spec } => threads.create(title, &std::fs::read_to_string(spec)?)?,
        Command::List => {
            for id in threads.list()? {
                let t = threads.get(&id)?;
                println!("{id}  {}  {}", t.phase, t.title);
            }
            return Ok(0);
        }
        Command::Assess => threads.assess(&id()?).await?,
        Command::Finalize => threads.finalize(&id()?)?,
        Command::Start => {
            let t = threads.start(&id()?).await?;
            match t.phase {
                Phase::Configuring => threads.run(&t.id).await?,
                _ => t,
            }
        }
        Command::Status => threads.get(&id()?)?,
        Command::Resume => threads.resume(&id()?).await?,
        Command::Reconfigure => {
            let id = id()?;
            threads.reconfigure(&id)?;
            threads.configure(
                &id,
                RunConfig::default().max_iterations(args.max_iterations),
            )?;
            threads.run(&id).await?
        }
        Command::Assist => threads.manual_assist(&id()?).await?,
        Command::Diagnose => {
            let report = threads.diagnose(&id()?)?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            return Ok(0);
        }
        Command::Revise { spec, yes } => {
            let text = spec.as_ref().map(std::fs::read_to_string).transpose()?;
            let confirm = if *yes {
                Confirm::ResetToBaseline
            } else {
                Confirm::No
            };
            threads.revise(&id()?, text.as_deref(), confirm).await?
        }
        Command::Review => threads.submit_for_review(&id()?)?,
        Command::Approve => threads.approve(&id()?).await?,
        Command::Commit { message } => {
            let id = id()?;
            if matches!(threads.get(&id)?.phase, Phase::Approved) {
                threads.prepare_commit(&id, message.as_deref())?;
            }
            threads.commit(&id, message.as_deref()).await?
        }
        Command::Abandon => threads.abandon(&id()?).await?,
        Command::Diff => {
            print!("{}", threads.diff(&id()?).await?);
            return Ok(0);
        }
    };
    show(&thread);
    Ok(match (interrupts.received(), &thread.phase) {
        (Some(signal), Phase::Paused { .. }) => signal.exit_code(),
        _ => 0,
    })
}

/// Prints warnings (a killed run's leftovers killed) to stderr.
struct Warnings;

impl Observer for Warnings {
    fn on_event(&self, event: &Event) {
        if let Event::Warning { message } = event {
            eprintln!("warning: {message}");
        }
    }
}

/// Prints the thread's phase and what a person can do next.
fn show(thread: &ThreadRecord) {
    println!(
        "{}  {}  (spec v{})",
        thread.id, thread.title, thread.spec_version
    );
    for attempt in &thread.attempts {
        println!("  iteration {}: {}", attempt.iteration, attempt.summary);
        for failed in &attempt.failed {
            println!("    failed: {}", failed.lines().next().unwrap_or(""));
        }
    }
    // The review matters while the spec is open; after it, the attempts do.
    if let Some(a) = thread
        .assessment
        .as_ref()
        .filter(|_| matches!(thread.phase, Phase::Drafting | Phase::Assessing))
    {
        println!(
            "  assessment of spec v{}: {}",
            a.spec_version,
            a.recommendation()
        );
        for issue in &a.issues {
            println!(
                "    {}: {} (suggestion: {})",
                issue.subject(),
                issue.problem,
                issue.suggestion
            );
        }
    }
    if let Some(agent) = &thread.current_agent {
        println!("  current model: {agent}");
    }
    for given_up in &thread.exhausted {
        println!("  agent given up: {given_up}");
    }
    let next = match &thread.phase {
        Phase::Drafting => "edit the spec, then `assess` or `finalize`".to_owned(),
        Phase::Assessing => "`finalize` (you approve the spec) or `assess` again".to_owned(),
        Phase::Finalized => "`start`".to_owned(),
        Phase::PreflightFailed { failures } => {
            for f in failures {
                println!("  preflight: {f}");
            }
            "fix the above, then `start` again".to_owned()
        }
        Phase::Configuring => "`start` runs the loop".to_owned(),
        Phase::Paused {
            iteration,
            criteria_passing,
            criteria_total,
        } => format!(
            "paused at iteration {iteration}/{} ({criteria_passing}/{criteria_total} criteria passing): `resume`, `reconfigure` or `abandon`",
            thread.iteration_limit
        ),
        Phase::Stuck { reason } => format!(
            "{reason}\n  `diagnose`, `reconfigure`, `assist`, `revise --spec FILE --yes` or `abandon`"
        ),
        Phase::Implemented => "`review` (after any polish)".to_owned(),
        Phase::PendingReview { recommend_approve } => format!(
            "review the changes (`diff`), then `approve`{}",
            if *recommend_approve {
                "  [recommend approve: all criteria pass]"
            } else {
                ""
            }
        ),
        Phase::Approved | Phase::ReadyToCommit { .. } => "`commit`".to_owned(),
        Phase::Abandoned => format!(
            "abandoned; nothing was deleted{}",
            thread
                .branch
                .as_deref()
                .map(|b| format!(": the changes stay on {b}"))
                .unwrap_or_default()
        ),
        Phase::Done { commit } => format!(
            "committed {} on {}; merge it when you are ready",
            commit.as_deref().unwrap_or("(nothing to commit)"),
            thread.branch.as_deref().unwrap_or("the branch")
        ),
        _ => String::new(),
    };
    println!("phase: {}\n  {next}", thread.phase);
}
