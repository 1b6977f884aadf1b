//! `ralph`: the construct loop, build mode and the board from the shell, built on the
//! library's public API (`cargo install ralph-loop --features cli`).
//!
//! Exit codes: 0 complete, 1 error, 2 stopped at a limit, 3 blocked or waiting for an
//! answer (`ralph answer`), 4 stopped on request
//! (`ralph stop`), 64 a usage error,
//! 130 / 143 / 129 stopped by SIGINT / SIGTERM / SIGHUP.

#![allow(clippy::print_stdout, clippy::print_stderr)] // a program that talks to a person

mod board;
mod display;
mod init;
mod next;
mod out;
mod place;
mod run;
mod schema;
mod steer;
mod thread;

use std::io::IsTerminal;
use std::path::PathBuf;

use place::Place;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// What a command returns; its error, unless it says otherwise, is printed with its chain of
/// causes.
type Result<T, E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

/// Exit code of a command line ralph cannot make sense of (BSD's EX_USAGE).
const USAGE: u8 = 64;

const EXIT_CODES: &str = "\
Exit codes:
  0    complete, one iteration done with --once, or the command did what it says
  1    error (the message names the file, key or task)
  2    stopped at a limit (iterations, timeout, budget)
  3    blocked, or an agent's question waits for `ralph answer`: a person must act
  4    stopped on request (`ralph stop`); the same command resumes
  64   usage error
  130  stopped by SIGINT (Ctrl+C); 143 SIGTERM; 129 SIGHUP";

/// Drive a coding agent through a written spec until it is implemented, checked by real
/// gates, verified and committed.
#[derive(Debug, Parser)]
#[command(name = "ralph", version, about, after_help = EXIT_CODES)]
struct CommandLine {
    /// Run as if started in DIR: the workspace is found from there upward (the nearest
    /// folder with ralph.toml or .ralph/, up to the top of the git repository), and spec
    /// paths are relative to it.
    #[arg(long, short = 'C', global = true, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Diagnostics on stderr: -v the events, -vv debug, -vvv everything. `RALPH_LOG` takes a
    /// filter of its own (`ralph=debug`).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the bundled demo (a scripted agent, real gates) in a fresh temporary workspace,
    /// never in your project (`-C` only says where a relative `--in` is).
    Demo {
        /// Run it in this directory instead (created if missing; must be empty or a demo;
        /// relative to `-C DIR` when given).
        #[arg(long = "in")]
        dir: Option<PathBuf>,
        /// Print events as NDJSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Write a commented ralph.toml for this repository (gates guessed from what is there)
    /// and add .ralph/ to .gitignore.
    Init,
    /// The construct loop: INVESTIGATE, BUILD, VERIFY (and DECOMPOSE) until the spec is done.
    Construct(ConstructArgs),
    /// Plan mode: the markdown specs become implementation.json.
    Plan {
        /// Specs to plan (relative to the current directory, inside the specs folder).
        /// Default: every spec in the specs folder.
        specs: Vec<PathBuf>,
        #[command(flatten)]
        run: RunFlags,
    },
    /// Build mode: implementation.json is planned, built, verified and committed spec by spec.
    Build {
        /// Build this spec again (its id, or its file as implementation.json names it), even
        /// when it is done: it and its tasks go back to pending, its plan is kept.
        #[arg(long, value_name = "SPEC", conflicts_with = "dry_run")]
        force: Option<String>,
        #[command(flatten)]
        run: RunFlags,
    },
    /// The board: stage, iteration, each task, and what to do next.
    Status,
    /// One fact of the board, for scripts.
    Query {
        #[arg(value_enum)]
        what: board::Query,
        /// With `tasks`: the done tasks only (those VERIFY takes next).
        #[arg(long)]
        done: bool,
    },
    /// Change the tasks between runs.
    #[command(subcommand)]
    Task(board::TaskCommand),
    /// Add work for INVESTIGATE.
    #[command(subcommand)]
    Issue(board::IssueCommand),
    /// Repair ralph's state when it holds what ralph did not write: roll .ralph/plan.jsonl
    /// back to the last record ralph wrote, and put back the last thread.json and run.json
    /// ralph wrote (what is removed is kept in a copy beside each).
    Repair {
        /// Accept the changes as your own instead: ralph signs them and trusts them.
        #[arg(long)]
        adopt: bool,
    },
    /// Threads: one piece of work from draft to commit, with human checkpoints.
    Thread(thread::ThreadArgs),
    /// Guidance for the agents, while a run is in progress or between runs: the last section
    /// of the prompt of every agent call of its scope from the next one on, until withdrawn
    /// or its scope ends (the task accepted, the thread Done or Abandoned, the spec complete).
    Tell {
        /// What to tell them.
        #[arg(required_unless_present = "withdraw", conflicts_with = "withdraw")]
        text: Option<String>,
        /// For one task only (`t-3`); in build mode a spec's id (its planner and verifier)
        /// or a task's (that task, in any spec).
        #[arg(long, value_name = "ID", conflicts_with = "thread")]
        task: Option<String>,
        /// For one thread only.
        #[arg(long, value_name = "ID")]
        thread: Option<String>,
        /// Who says it (default: $USER).
        #[arg(long, value_name = "NAME")]
        from: Option<String>,
        /// Withdraw the guidance ID instead (`g-1`; `ralph status` lists them).
        #[arg(long, value_name = "ID")]
        withdraw: Option<String>,
    },
    /// Answer the question an agent asked (`ralph status` lists them): the task (`t-3`; in
    /// build mode `SPEC/t-3`), spec or thread waiting on it goes on, in the run in progress or
    /// the next one, and its next agent call gets the question and the answer.
    Answer {
        /// What asked: the task, spec or thread id `ralph status` names.
        subject: String,
        /// The answer.
        text: String,
        /// Who answers (default: $USER).
        #[arg(long, value_name = "NAME")]
        from: Option<String>,
    },
    /// Stop the run in progress here once its agent runs and gates in flight are done and
    /// recorded (it exits 4; the same command resumes). Refused when no run is in progress.
    Stop {
        /// Stop at once instead, as SIGTERM does: the running agent or gate is stopped.
        #[arg(long)]
        now: bool,
    },
    /// The JSON Schema of a structured role's answer, exactly as ralph sends it to the agent:
    /// investigate, verify, gap_analysis, decompose, breakdown (plan mode; `plan` is accepted too),
    /// assess or draft. Without a role
    /// (or with another one) it names them and exits 64 (a usage error).
    Schema {
        /// The role.
        role: Option<String>,
    },
}

/// What every run of an agent takes.
#[derive(Debug, Args)]
struct RunFlags {
    /// Show what the run would do next; start nothing, write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Run one iteration (in build mode: one agent session), then stop.
    #[arg(long)]
    once: bool,
    /// Print events as NDJSON (with RFC 3339 timestamps) on stdout.
    #[arg(long)]
    json: bool,
    /// The agent: `claude` (the Claude Code CLI), `codex` (the Codex CLI), `gemini` (the Gemini CLI), `opencode`, or the name of an `[agent.NAME]` table
    /// of ralph.toml (any CLI run from an argv template). A comma-separated list is a
    /// fallback chain (`claude,aider`). Default: `agents` of ralph.toml, else `claude`.
    #[arg(long, value_parser = run::agent_list)]
    agent: Option<String>,
    /// Use a scripted FakeAgent from this TOML file (relative to the current directory, or
    /// to DIR with -C) instead of a real agent; its requests are appended to
    /// .ralph/fake-requests.jsonl. The format: docs/fake-agent.md.
    #[arg(long, conflicts_with = "agent")]
    script: Option<PathBuf>,
    /// Dollars the agents may spend over the board (in build mode: the run over
    /// implementation.json), counted across resumes; overrides `max_cost_usd`. At the limit
    /// no new agent run starts and the run stops "budget exhausted" (exit 2).
    #[arg(long, value_name = "DOLLARS")]
    max_cost: Option<f64>,
}

impl RunFlags {
    /// With `--script` as this process opens it (relative to `-C DIR`, as every path).
    fn resolved(mut self, place: &Place) -> RunFlags {
        self.script = self.script.map(|s| place.file(&s));
        self
    }
}

#[derive(Debug, Args)]
struct ConstructArgs {
    /// The spec (relative to the current directory, inside the workspace). Without it:
    /// resume the spec on record.
    spec: Option<PathBuf>,
    /// The stage timeout (`90s`, `5m`; a bare number is milliseconds, as in seed 000's
    /// `--timeout 300000`), over ralph.toml.
    #[arg(long, value_parser = positive_duration)]
    timeout: Option<Duration>,
    /// Stop after this many iterations (at least 1), over ralph.toml.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_iterations: Option<u32>,
    /// Stop before the first BUILD: investigate the spec (and any open issue) into tasks,
    /// then stop, so you can read them (`ralph status`) and change them (`ralph task`)
    /// before any code is written. `ralph construct` then builds them.
    #[arg(long)]
    plan_only: bool,
    /// Work on SPEC though the board holds another spec's work: that board (its spend
    /// included) is archived under .ralph/archive/<spec>-<date>/, and SPEC's own archived
    /// board, if it has one, comes back. One board at a time, so task ids stay unique.
    #[arg(long, requires = "spec")]
    switch: bool,
    #[command(flatten)]
    run: RunFlags,
}

// One thread: the loop waits on one agent (or a few) at a time, and each event a
// multi-thread runtime sees (a line of output, an exit) is handed from the worker that
// polled it to the thread running the loop. Blocking work (syncs, sweeps) still goes to
// tokio's blocking pool.
#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = match CommandLine::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    diagnostics(cli.verbose);
    match dispatch(cli).await {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("ralph: {}", chain(&*e));
            ExitCode::from(1)
        }
    }
}

async fn dispatch(cli: CommandLine) -> Result<u8> {
    let given = cli.workspace.as_deref();
    let place = match &cli.command {
        // The demo makes its own workspace, `init` writes where it is run and `schema` needs
        // none; a `-C` that is not a directory is refused all the same.
        Command::Demo { .. } | Command::Init | Command::Schema { .. } => Place::here(given)?,
        _ => Place::find(given)?,
    };
    let workspace = place.workspace.as_path();
    match cli.command {
        Command::Demo { dir, json } => run::demo(dir.map(|d| workspace.join(d)), json).await,
        Command::Init => init::init(workspace).map(|()| 0),
        Command::Construct(mut args) => {
            args.spec = args.spec.map(|s| place.spec(&s)).transpose()?;
            args.run = args.run.resolved(&place);
            run::construct(workspace, args).await
        }
        Command::Plan { specs, run } => {
            let specs = place.specs(specs)?;
            run::plan(workspace, specs, run.resolved(&place)).await
        }
        Command::Build { force, run } => {
            run::build(workspace, force.as_deref(), run.resolved(&place)).await
        }
        Command::Status => board::status(workspace).await.map(|()| 0),
        Command::Query { what, done } => board::query(workspace, what, done).await.map(|()| 0),
        Command::Task(mut command) => {
            if let board::TaskCommand::Prioritize { spec: Some(spec) } = &mut command {
                *spec = place.spec(spec)?;
            }
            board::task(workspace, command).await.map(|()| 0)
        }
        Command::Issue(command) => board::issue(workspace, command).await.map(|()| 0),
        Command::Repair { adopt } => board::repair(workspace, adopt).await.map(|()| 0),
        Command::Schema { role } => Ok(schema::schema(role.as_deref())),
        Command::Thread(args) => thread::thread(workspace, args.resolved(&place)).await,
        Command::Stop { now } => steer::stop(workspace, now),
        Command::Answer {
            subject,
            text,
            from,
        } => steer::answer(workspace, &subject, &text, from.as_deref()),
        Command::Tell {
            text,
            task,
            thread,
            from,
            withdraw,
        } => steer::tell(workspace, text, task.or(thread), from, withdraw),
    }
}

/// A duration longer than zero, as `90s` or `5m`, or a bare number of milliseconds (seed
/// 000 writes `--timeout 300000`; humantime refuses a number without its unit).
fn positive_duration(text: &str) -> Result<Duration, String> {
    let parsed = match text.trim().parse::<u64>() {
        Ok(millis) => Ok(Duration::from_millis(millis)),
        Err(_) => humantime::parse_duration(text),
    };
    match parsed {
        Ok(d) if d.is_zero() => Err("must be longer than zero".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

/// ralph's `tracing` spans and events on stderr, as `-v` or `RALPH_LOG` ask; nothing otherwise.
fn diagnostics(verbose: u8) {
    let filter = match (std::env::var("RALPH_LOG"), verbose) {
        (Ok(filter), _) => filter,
        (Err(_), 0) => return,
        (Err(_), 1) => "ralph=info".into(),
        (Err(_), 2) => "ralph=debug".into(),
        (Err(_), _) => "ralph=trace".into(),
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .try_init();
}

/// An error and its causes, once each: a cause whose text the error already shows is skipped.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = said(e);
    let mut source = e.source();
    while let Some(cause) = source {
        let said = said(cause);
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

/// What `e` says, a value this command's flags gave named by its flag: the library names
/// its builder (`set in the program (RalphBuilder::config)`), which a person never wrote.
fn said(e: &(dyn std::error::Error + 'static)) -> String {
    let config = match e.downcast_ref::<ralph::BuildError>() {
        Some(ralph::BuildError::Config(config)) => Some(config),
        _ => e.downcast_ref::<ralph::config::ConfigError>(),
    };
    if let Some(ralph::config::ConfigError::Invalid {
        key,
        message,
        source_name: Some(source),
    }) = config
        && source.contains("RalphBuilder::config")
        && let Some(flag) = flag_of(key)
    {
        return format!("invalid {flag}: {key} {message}");
    }
    e.to_string()
}

/// The flag of the commands that sets config `key`.
fn flag_of(key: &str) -> Option<&'static str> {
    match key {
        "max_iterations" => Some("--max-iterations"),
        "stage_timeout" => Some("--timeout"),
        "max_cost_usd" => Some("--max-cost"),
        "agents" => Some("--agent"),
        _ => None,
    }
}
