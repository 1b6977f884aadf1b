//! `construct`: ralph's construct loop as a ready binary.
//!
//! With no arguments it runs the bundled demo (`fixtures/demo/`: a small spec, a `ralph.toml`
//! with real shell gates, and a FakeAgent script) in a fresh temporary workspace, showing each
//! stage and task live and a summary at the end:
//!
//! ```text
//! cargo run --example construct
//! cargo run --example construct -- --workspace /tmp/ws      # use, or resume, that workspace
//! cargo run --example construct -- --json                    # NDJSON events on stdout
//! cargo run --example construct -- --once                    # one iteration, then stop
//! cargo run --example construct -- --dry-run                 # show the next step; run nothing
//! ```
//!
//! With `--agent claude` it runs the real Claude Code CLI instead, in the current directory (or
//! `--workspace`), on the spec you name, with your own credentials from the environment
//! (`ANTHROPIC_API_KEY`; `[claude]` of the workspace's `ralph.toml` sets the model, limits and
//! permissions):
//!
//! ```text
//! cargo run --example construct -- --agent claude --spec SPEC.md
//! ```
//!
//! Plan mode and build mode over `implementation.json` (seeds 004 and 002) run on the bundled
//! plan demo (`fixtures/demo-plan/`: two markdown specs, real shell gates, a FakeAgent script),
//! in a git repository made for it:
//!
//! ```text
//! cargo run --example construct -- plan --workspace /tmp/ws   # specs/*.md -> implementation.json
//! cargo run --example construct -- build --workspace /tmp/ws  # plan, implement, verify, commit each spec
//! ```
//!
//! Exit codes: 0 spec complete, 2 stopped at a limit, 3 blocked, 1 error; 130, 143 or 129
//! when SIGINT (Ctrl+C), SIGTERM or SIGHUP stopped it. In every mode a signal stops the
//! running agent or gate cleanly (everything it started is killed) and saves the state; a
//! second signal stops at once; the same command resumes. `--dry-run` works in every mode and
//! writes nothing.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use ralph::model::TaskStatus;
use ralph::{
    Agent, ClaudeCli, Event, FakeAgent, Interrupts, Observer, Outcome, Ralph, SpecsOutcome,
};

/// Where the bundled demo lives.
const DEMO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/demo");
/// Marks a directory this example seeded with the demo, so later runs may resume there.
const DEMO_MARK: &str = ".ralph/demo";
/// Where the plan-mode demo lives.
const DEMO_PLAN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/demo-plan");

/// Run ralph's construct loop on a spec.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// `plan`: plan mode (specs → implementation.json); `build`: build mode from
    /// implementation.json. Without it: the construct loop.
    #[arg(value_enum)]
    mode: Option<Mode>,
    /// Same as the `plan` mode.
    #[arg(long, conflicts_with = "mode")]
    plan: bool,
    /// The workspace to use, or resume. Default: a fresh temporary copy of the bundled demo.
    #[arg(long)]
    workspace: Option<PathBuf>,
    /// The spec, relative to the workspace. Default: the one on record, else `spec.md`.
    #[arg(long)]
    spec: Option<PathBuf>,
    /// The agent: the scripted `fake` of the demo, or the real `claude` CLI.
    #[arg(long, value_enum, default_value_t = AgentKind::Fake)]
    agent: AgentKind,
    /// The FakeAgent script (TOML). Default: the bundled demo's.
    #[arg(long)]
    script: Option<PathBuf>,
    /// Stop after this many iterations (overrides ralph.toml).
    #[arg(long)]
    max_iterations: Option<u32>,
    /// Print events as NDJSON on stdout instead of the live display.
    #[arg(long)]
    json: bool,
    /// Run one iteration (in build mode: one agent session), then stop (exit 0); run again
    /// for the next.
    #[arg(long)]
    once: bool,
    /// Show what the run would do next (stage or step, task, prompt template, limits); run
    /// and write nothing.
    #[arg(long)]
    dry_run: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    /// Plan mode: the markdown specs become implementation.json.
    Plan,
    /// Build mode: implementation.json is planned, built, verified and committed spec by spec.
    Build,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum AgentKind {
    /// The FakeAgent and its script.
    Fake,
    /// The Claude Code CLI (`claude.bin` in ralph.toml, else $RALPH_CLAUDE_BIN, else PATH).
    Claude,
}

#[tokio::main]
pub(crate) async fn main() -> ExitCode {
    let mut args = Args::parse();
    if args.plan {
        args.mode = Some(Mode::Plan);
    }
    let result = match args.mode {
        Some(mode) => run_specs(args, mode).await.map(Some),
        None => run(args).await,
    };
    match result {
        Ok(Some(code)) => ExitCode::from(code as u8),
        Ok(None) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", chain(&*e));
            ExitCode::from(1)
        }
    }
}

/// Listens for SIGINT, SIGTERM and SIGHUP: the first stops the run cleanly.
fn interrupts(ralph: &Ralph) -> std::io::Result<Interrupts> {
    Interrupts::listen(ralph.workspace(), ralph.stop_token(), |signal| {
        eprintln!(
            "\n{signal}: stopping the running agent or gate and saving the state… (again to stop at once)"
        );
    })
}

/// The exit code: the outcome's, or the signal's that interrupted the run.
fn exit_code(interrupts: &Interrupts, code: i32) -> i32 {
    match interrupts.received() {
        Some(signal) if code == 130 => i32::from(signal.exit_code()),
        _ => code,
    }
}

/// Runs the loop; `None` for a dry run.
async fn run(args: Args) -> Result<Option<i32>, Box<dyn std::error::Error>> {
    let (workspace, agent, fake) = match args.agent {
        AgentKind::Fake => {
            let workspace = prepare_workspace(
                args.workspace.as_deref(),
                args.dry_run,
                args.script.is_some(),
            )?;
            let script = args
                .script
                .clone()
                .unwrap_or_else(|| Path::new(DEMO).join("script.toml"));
            let fake = Arc::new(
                FakeAgent::from_toml_file(&script)?
                    .record_to(workspace.join(".ralph/fake-requests.jsonl")),
            );
            (workspace, fake.clone() as Arc<dyn Agent>, Some(fake))
        }
        AgentKind::Claude => {
            if args.spec.is_none() {
                return Err("--agent claude needs --spec FILE (the spec to implement)".into());
            }
            let workspace = match &args.workspace {
                Some(dir) => dir.clone(),
                None => std::env::current_dir()?,
            };
            let claude = ClaudeCli::from_workspace(&workspace)?;
            (workspace, Arc::new(claude) as Arc<dyn Agent>, None)
        }
    };

    let observer: Arc<dyn Observer> = if args.json {
        Arc::new(Ndjson)
    } else {
        Arc::new(Display)
    };
    let mut builder = Ralph::builder()
        .workspace(&workspace)
        .agent(agent.clone())
        .observer(observer);
    if let Some(n) = args.max_iterations {
        builder = builder.max_iterations(n);
    }
    if args.once {
        builder = builder.once(true);
    }
    let ralph = builder.build()?;
    if args.dry_run {
        let board = ralph.board().await?;
        let spec = match (&args.spec, &board.run.spec) {
            (Some(spec), _) => spec.clone(),
            (None, Some(recorded)) => PathBuf::from(recorded),
            (None, None) => PathBuf::from("spec.md"),
        };
        println!("{}", ralph.dry_run(spec).await?);
        return Ok(None);
    }

    let interrupts = interrupts(&ralph)?;
    let started = Instant::now();
    let board = ralph.board().await?;
    if !args.json {
        println!("ralph construct · workspace {}", workspace.display());
    }
    let outcome = match (&args.spec, &board.run.spec) {
        (None, Some(_)) => ralph.resume().await?,
        (spec, _) => {
            let spec = spec.clone().unwrap_or_else(|| PathBuf::from("spec.md"));
            ralph.construct(spec).await?
        }
    };
    if !args.json {
        summary(&ralph, &outcome, started).await?;
    }
    // A fresh run to completion should have used the whole script; a resumed one cannot.
    let fresh = board.tasks.is_empty();
    if matches!(outcome, Outcome::Complete { .. })
        && fresh
        && let Some(fake) = fake
        && let Err(e) = fake.verify()
    {
        eprintln!("note: {e}");
    }
    Ok(Some(exit_code(&interrupts, outcome.exit_code())))
}

/// The workspace: the given one (seeded with the demo's spec and config if it has neither,
/// unless this is a dry run, which writes nothing), or a fresh temporary copy of the demo
/// that is kept for inspection. The demo's script only runs in a directory that is new,
/// empty or an earlier run's, never in a repository of yours, unless you name a script.
fn prepare_workspace(
    given: Option<&Path>,
    dry_run: bool,
    own_script: bool,
) -> Result<PathBuf, Box<dyn std::error::Error>> {
    let dir = match given {
        Some(dir) if dry_run => return Ok(dir.to_path_buf()),
        Some(dir) if !own_script && holds_other_files(dir) => {
            return Err(format!(
                "{} holds files of its own: the demo only runs in a new or empty directory \
                 (or one with just its spec.md and ralph.toml). For your own project use \
                 `ralph construct` (cargo install --path . --features cli), or --agent claude, \
                 or name a --script",
                dir.display()
            )
            .into());
        }
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            dir.to_path_buf()
        }
        None => tempfile::Builder::new()
            .prefix("ralph-demo-")
            .tempdir()?
            .keep(),
    };
    for file in ["spec.md", "ralph.toml"] {
        let target = dir.join(file);
        if !target.exists() && !dir.join(".ralph").exists() {
            std::fs::copy(Path::new(DEMO).join(file), &target)?;
        }
    }
    if !own_script {
        std::fs::create_dir_all(dir.join(".ralph"))?;
        std::fs::write(dir.join(DEMO_MARK), "")?;
    }
    Ok(dir)
}

/// Whether `dir` holds anything but the demo's own files (its spec and config, or an earlier
/// run of this example, which marks it): a project not to touch.
fn holds_other_files(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    if dir.join(DEMO_MARK).exists() {
        return false;
    }
    entries.flatten().any(|e| {
        !matches!(
            e.file_name().to_str(),
            Some("spec.md" | "ralph.toml" | ".ralph")
        )
    })
}

/// Plan mode or build mode over implementation.json.
async fn run_specs(args: Args, mode: Mode) -> Result<i32, Box<dyn std::error::Error>> {
    let (workspace, agent): (PathBuf, Arc<dyn Agent>) = match args.agent {
        AgentKind::Fake => {
            let workspace = match &args.workspace {
                // A dry run writes nothing: the workspace is taken as it is.
                Some(dir) if args.dry_run => dir.clone(),
                given => prepare_plan_workspace(given.as_deref()).await?,
            };
            let script = args
                .script
                .clone()
                .unwrap_or_else(|| Path::new(DEMO_PLAN).join("script.toml"));
            (workspace, Arc::new(FakeAgent::from_toml_file(&script)?))
        }
        AgentKind::Claude => {
            let workspace = match &args.workspace {
                Some(dir) => dir.clone(),
                None => std::env::current_dir()?,
            };
            let claude = ClaudeCli::from_workspace(&workspace)?;
            (workspace, Arc::new(claude))
        }
    };
    let observer: Arc<dyn Observer> = if args.json {
        Arc::new(Ndjson)
    } else {
        Arc::new(Display)
    };
    let mut builder = Ralph::builder()
        .workspace(&workspace)
        .agent(agent)
        .observer(observer);
    if args.once {
        builder = builder.once(true);
    }
    let ralph = builder.build()?;
    if args.dry_run {
        match mode {
            Mode::Plan => println!("{}", ralph.dry_run_plan(args.spec.iter())?),
            Mode::Build => println!("{}", ralph.dry_run_build()?),
        }
        return Ok(0);
    }
    let interrupts = interrupts(&ralph)?;
    if !args.json {
        let name = match mode {
            Mode::Plan => "plan",
            Mode::Build => "build",
        };
        println!("ralph {name} · workspace {}", workspace.display());
    }
    match mode {
        Mode::Plan => {
            let plan = match ralph.plan(args.spec.iter()).await {
                Ok(plan) => plan,
                // Plan mode stopped by a signal saves nothing and reports it as an error.
                Err(e) if interrupts.received().is_some() => {
                    eprintln!("{e}");
                    return Ok(exit_code(&interrupts, 130));
                }
                Err(e) => return Err(e.into()),
            };
            if !args.json {
                println!("\n── implementation.json ──");
                for spec in &plan.specs {
                    println!(
                        "  {} {} (priority {})",
                        spec.id,
                        spec.display_name(),
                        spec.priority
                    );
                    for task in &spec.tasks {
                        println!("    {} {} [{:?}]", task.id, task.description, task.status);
                    }
                }
                println!(
                    "\nnext: cargo run --example construct -- build --workspace {}",
                    workspace.display()
                );
            }
            Ok(0)
        }
        Mode::Build => {
            let outcome: SpecsOutcome = ralph.build_specs().await?;
            if !args.json {
                println!("\n── summary ──\n  {outcome}");
                println!(
                    "  progress: {}",
                    workspace.join(&ralph.config().planning.progress).display()
                );
            }
            Ok(exit_code(&interrupts, outcome.exit_code()))
        }
    }
}

/// The plan demo's workspace: the given one, or a fresh temporary folder, seeded with the
/// demo's specs and config when it has none, and made a git repository with a first commit.
async fn prepare_plan_workspace(
    given: Option<&Path>,
) -> Result<PathBuf, Box<dyn std::error::Error>> {
    let dir = match given {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            dir.to_path_buf()
        }
        None => tempfile::Builder::new()
            .prefix("ralph-plan-demo-")
            .tempdir()?
            .keep(),
    };
    let demo = Path::new(DEMO_PLAN);
    for (from, to) in [
        ("ralph.toml", "ralph.toml"),
        ("gitignore", ".gitignore"),
        ("specs/greeter.md", "specs/greeter.md"),
        ("specs/farewell.md", "specs/farewell.md"),
    ] {
        let target = dir.join(to);
        if !target.exists() && !dir.join("implementation.json").exists() {
            std::fs::create_dir_all(target.parent().unwrap_or(&dir))?;
            std::fs::copy(demo.join(from), &target)?;
        }
    }
    if !dir.join(".git").exists() {
        git(&dir, &["init", "-q", "-b", "main"])?;
        git(&dir, &["add", "-A"])?;
        git(
            &dir,
            &[
                "-c",
                "user.name=ralph demo",
                "-c",
                "user.email=demo@ralph.invalid",
                "commit",
                "-q",
                "-m",
                "Specs of the plan demo",
            ],
        )?;
    }
    Ok(dir)
}

/// Runs git in `dir`; an error names the command that failed.
fn git(dir: &Path, args: &[&str]) -> std::io::Result<()> {
    let status = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "git {} failed: {status}",
            args.join(" ")
        )))
    }
}

async fn summary(ralph: &Ralph, outcome: &Outcome, started: Instant) -> Result<(), ralph::Error> {
    let board = ralph.board().await?;
    let count = |s: TaskStatus| board.tasks.values().filter(|t| t.status == s).count();
    println!();
    println!("── summary ──");
    println!("  {outcome}");
    println!(
        "  tasks: {} accepted, {} decomposed, {} blocked, {} pending, {} done",
        count(TaskStatus::Accepted),
        count(TaskStatus::Decomposed),
        count(TaskStatus::Blocked),
        count(TaskStatus::Pending),
        count(TaskStatus::Done)
    );
    println!(
        "  logs: {}   state: {}",
        ralph.workspace().join(&ralph.config().log_dir).display(),
        ralph
            .workspace()
            .join(ralph.config().store.effective_path())
            .display()
    );
    println!("  time: {:.1}s", started.elapsed().as_secs_f64());
    Ok(())
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

/// Events as NDJSON on stdout, flushed per line so a reader sees them as they happen.
struct Ndjson;

impl Observer for Ndjson {
    fn on_event(&self, event: &Event) {
        if let Ok(line) = serde_json::to_string(event) {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }
}

/// The live display.
struct Display;

impl Observer for Display {
    fn on_event(&self, event: &Event) {
        // Each event says itself in one line; the summary says how the run ended.
        let line = event.to_string();
        if !line.is_empty() && !matches!(event, Event::Finished { .. } | Event::Agent { .. }) {
            println!("{line}");
        }
    }
}
