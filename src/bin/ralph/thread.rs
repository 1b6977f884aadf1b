//! `ralph thread …`: one piece of work from draft to commit with the human checkpoints, every
//! transition the library has, one subcommand each.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use ralph::thread::{IterationRecord, Phase, PhaseKind, RunConfig, ThreadRecord, Threads};
use ralph::{Agent, FakeAgent, Ralph};

use crate::Result;
use crate::out::out;
use crate::place::Place;

/// `ralph thread [--id ID] …`.
#[derive(Debug, Args)]
pub(crate) struct ThreadArgs {
    /// The thread. Default: the active one.
    #[arg(long, global = true)]
    id: Option<String>,
    /// Quick mode: skip assessment and polish, stop only at the human checkpoints.
    #[arg(long, global = true)]
    quick: bool,
    /// Iterations per round of the loop (`start`, `configure`, `reconfigure`).
    #[arg(long, global = true, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    max_iterations: u32,
    /// The models the loop runs with, set where the thread is configured (`start`,
    /// `configure`, `reconfigure`) and asked by `discuss` and `assess`: `claude`, `codex`,
    /// `gemini`, `opencode` or an `[agent.NAME]` table of ralph.toml; a comma-separated list
    /// is a fallback chain (`claude,codex`). Default: `agents` of ralph.toml, else `claude`.
    #[arg(long, global = true, value_parser = crate::run::agent_list)]
    agent: Option<String>,
    /// The read-only verifier of the criteria that have no command, by the same names as
    /// --agent (`start`, `configure`, `reconfigure`). Default: the models of --agent.
    #[arg(long, global = true)]
    verifier: Option<String>,
    /// Use a scripted FakeAgent from this TOML file (relative to the current directory, or
    /// to DIR with -C) instead of a real agent; its requests are appended to
    /// .ralph/fake-requests.jsonl. The format: docs/fake-agent.md.
    #[arg(long, global = true, conflicts_with = "agent")]
    script: Option<PathBuf>,
    /// Dollars the agents may spend on the thread, counted across resumes; overrides
    /// `max_cost_usd`. At the limit the thread stops Stuck, "budget exhausted" (exit 2).
    #[arg(long, global = true, value_name = "DOLLARS")]
    max_cost: Option<f64>,
    #[command(subcommand)]
    command: ThreadCommand,
}

impl ThreadArgs {
    /// With the files the command line names (`--script`, `new --spec`, `edit --file`,
    /// `revise --file`) as this process opens them: relative to `-C DIR`, as every path.
    pub(crate) fn resolved(mut self, place: &Place) -> ThreadArgs {
        self.script = self.script.map(|s| place.file(&s));
        match &mut self.command {
            ThreadCommand::New { spec, .. } => *spec = place.file(spec),
            ThreadCommand::Edit { file } | ThreadCommand::Revise { file, .. } => {
                *file = file.as_deref().map(|f| place.file(f));
            }
            _ => {}
        }
        self
    }
}

#[derive(Debug, Subcommand)]
enum ThreadCommand {
    /// Create a thread in Drafting from a spec file.
    New {
        /// The title.
        #[arg(long)]
        title: String,
        /// The spec (markdown with `<promise>TAG</promise>` and `## Acceptance Criteria`),
        /// relative to the current directory (to DIR with -C).
        #[arg(long)]
        spec: PathBuf,
    },
    /// The threads, one per line.
    List,
    /// The thread: phase, attempts, and what to do next.
    Show,
    /// Edit the spec while Drafting: from --file, else in $EDITOR.
    Edit {
        /// The new spec (relative to the current directory, to DIR with -C).
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// Talk with the agent about the spec while Drafting; a reply may revise it (the next
    /// spec revision). Every turn is kept in the thread's conversation log.
    Discuss {
        /// What you say to the agent.
        message: String,
    },
    /// The Drafting conversation so far.
    Conversation,
    /// Ask the agent to review the spec (Drafting → Assessing).
    Assess,
    /// Approve the spec (checkpoint 1: Drafting or Assessing → Finalized).
    Finalize,
    /// A finalized spec back to Drafting.
    Reopen,
    /// After a failed preflight: back to Drafting to fix the spec.
    FixSpec,
    /// Preflight, the settings, and the loop.
    Start,
    /// Set the loop's settings while Configuring (--agent: the models, a fallback chain;
    /// --verifier; --max-iterations), then run it.
    Configure,
    /// Continue a paused loop.
    Resume,
    /// Paused or Stuck → Configuring with new settings, then run the loop again.
    Reconfigure,
    /// Stuck → Running after you changed files yourself.
    Assist,
    /// The stuck report (ralph's own state left out).
    Diagnose,
    /// Back to Drafting with a new spec, the work tree reset to the baseline.
    Revise {
        /// The new spec (relative to the current directory, to DIR with -C).
        #[arg(long)]
        file: Option<PathBuf>,
        /// Confirm the reset.
        #[arg(long)]
        yes: bool,
    },
    /// Implemented → Polishing: an agent adds docs and tests and cleans up (the
    /// `thread_polish` prompt), then every criterion is checked as in the loop: all pass →
    /// Implemented; else it stays Polishing (polish again, or fix by hand and `polish-done`).
    Polish,
    /// Polishing (your own polish) done → Implemented.
    PolishDone,
    /// Implemented → PendingReview.
    Review,
    /// PendingReview → back to the loop with your feedback, which every prompt of the next
    /// round shows the agent.
    SendBack {
        /// What is wrong, and what to fix.
        feedback: String,
    },
    /// Approve the changes under review (checkpoint 3).
    Approve,
    /// Prepare the commit message and show it (Approved → ReadyToCommit); commit after
    /// reading it.
    Message {
        /// The message. Default: one made from the title and the spec.
        #[arg(long)]
        message: Option<String>,
    },
    /// Commit on the thread's branch with the message you read (checkpoint 4).
    Commit {
        /// A message instead of the prepared one.
        #[arg(long)]
        message: Option<String>,
    },
    /// Abandon the thread; nothing is deleted.
    Abandon,
    /// The diff from the baseline, ralph's own state left out.
    Diff,
    /// What `start`, `resume` or `assist` would do; run and write nothing.
    DryRun,
}

/// Runs a thread command; the exit code.
pub(crate) async fn thread(workspace: &Path, args: ThreadArgs) -> Result<u8> {
    let config = ralph::Config::load(workspace)?;
    // A script stands for every agent; otherwise the names choose them, as in every mode.
    let names = match &args.script {
        Some(_) => Vec::new(),
        None => crate::run::agent_names(&config, args.agent.as_deref()),
    };
    let mut settings = RunConfig::default()
        .max_iterations(args.max_iterations)
        .agents(names.clone());
    if let Some(verifier) = &args.verifier {
        settings = settings.verifier(verifier.clone());
    }
    let agent: Box<dyn Agent> = match (&args.script, names.first()) {
        (Some(script), _) => Box::new(
            FakeAgent::from_toml_file(script)?.record_to(workspace.join(crate::run::FAKE_REQUESTS)),
        ),
        (None, Some(first)) => crate::run::one_agent(workspace, &config, first)?,
        (None, None) => return Err("--agent names no agent".into()),
    };
    let mut builder = Ralph::builder()
        .workspace(workspace)
        .agent(agent)
        .observer(crate::display::Warnings);
    if let Some(dollars) = args.max_cost {
        builder = builder.max_cost_usd(dollars);
    }
    let threads = builder
        .build()?
        .threads()
        .quick(args.quick)
        .run_config(settings.clone());
    let selected = args.id.clone().or_else(|| threads.active());
    let configured = selected.as_deref().and_then(|id| threads.get(id).ok());
    check_agent_flags(&args, configured.as_ref())?;
    let threads = register(threads, workspace, &config, &settings, configured.as_ref())?;
    let interrupts = threads.stop_token();
    ralph::steer::listen_for_signals(threads.workspace(), interrupts.clone(), |signal| {
        eprintln!("\n{signal}: stopping the agent and pausing the thread… (again to stop at once)");
    })?;
    let id = || -> Result<String> {
        args.id.clone().or_else(|| threads.active()).ok_or_else(|| {
            "no active thread: create one with `ralph thread new` or pass --id".into()
        })
    };
    // The last iteration on record before this command: a loop prints only those it ran.
    let before = configured
        .as_ref()
        .and_then(|t| t.attempts.last())
        .map_or(0, |a| a.iteration);
    let view = View::of(&args.command, before);
    let writes_spec = matches!(
        args.command,
        ThreadCommand::New { .. } | ThreadCommand::Edit { .. } | ThreadCommand::Finalize
    );
    // Only these drive the loop, which a person's `ralph stop` pauses.
    let loops = matches!(args.command, ThreadCommand::Start | ThreadCommand::Resume);
    let record = match args.command {
        ThreadCommand::New { title, spec } => threads.create(&title, &read_spec(&spec)?)?,
        ThreadCommand::List => {
            for id in threads.list()? {
                let t = threads.get(&id)?;
                out!("{id}  {}  {}", t.phase, t.title);
            }
            return Ok(0);
        }
        ThreadCommand::Show => threads.get(&id()?)?,
        ThreadCommand::Edit { file } => {
            let id = id()?;
            let text = match file {
                Some(file) => read_spec(&file)?,
                None => edit_in_editor(&threads.spec_text(&threads.get(&id)?)?)?,
            };
            threads.thread(&id).edit_spec(&text)?
        }
        ThreadCommand::Discuss { message } => {
            let id = id()?;
            let reply = threads.thread(&id).discuss(&message).await?;
            out!("agent: {}", reply.text);
            if reply.revised {
                out!(
                    "\nspec revised: v{} ({})",
                    reply.spec_version,
                    threads.spec_path(&id, reply.spec_version).display()
                );
            }
            threads.get(&id)?
        }
        ThreadCommand::Conversation => {
            let id = id()?;
            for turn in threads.thread(&id).conversation()? {
                let revised = if turn.revised {
                    format!(" [spec v{}]", turn.spec_version)
                } else {
                    String::new()
                };
                out!("{} {}:{revised} {}", turn.at, turn.by, turn.text);
            }
            return Ok(0);
        }
        ThreadCommand::Assess => threads.thread(&id()?).assess().await?,
        ThreadCommand::Finalize => threads.thread(&id()?).finalize()?,
        ThreadCommand::Reopen => threads.thread(&id()?).reopen()?,
        ThreadCommand::FixSpec => threads.thread(&id()?).fix_spec()?,
        ThreadCommand::Start => {
            let started = threads.thread(&id()?).start().await?;
            configure_and_run(&threads, started, &settings).await?
        }
        ThreadCommand::Configure => {
            let record = threads.get(&id()?)?;
            configure_and_run(&threads, record, &settings).await?
        }
        ThreadCommand::Resume => threads.thread(&id()?).resume().await?,
        ThreadCommand::Reconfigure => {
            let record = threads.thread(&id()?).reconfigure()?;
            configure_and_run(&threads, record, &settings).await?
        }
        ThreadCommand::Assist => threads.thread(&id()?).manual_assist().await?,
        ThreadCommand::Diagnose => {
            out!(
                "{}",
                serde_json::to_string_pretty(&threads.thread(&id()?).diagnose()?)?
            );
            return Ok(0);
        }
        ThreadCommand::Revise { file, yes } => {
            let id = id()?;
            if !yes {
                refuse_reset(&threads.get(&id)?)?;
            }
            let text = file.as_deref().map(read_spec).transpose()?;
            threads.thread(&id).revise(text.as_deref()).await?
        }
        ThreadCommand::Polish => threads.thread(&id()?).polish().await?,
        ThreadCommand::PolishDone => threads.thread(&id()?).polish_done()?,
        ThreadCommand::Review => threads.thread(&id()?).submit_for_review()?,
        ThreadCommand::SendBack { feedback } => threads.thread(&id()?).send_back(&feedback).await?,
        ThreadCommand::Approve => threads.thread(&id()?).approve().await?,
        ThreadCommand::Message { message } => {
            let record = threads.thread(&id()?).prepare_commit(message.as_deref())?;
            if let Phase::ReadyToCommit { message } = &record.phase {
                out!("{message}\n");
            }
            record
        }
        ThreadCommand::Commit { message } => {
            threads.thread(&id()?).commit(message.as_deref()).await?
        }
        ThreadCommand::Abandon => threads.thread(&id()?).abandon().await?,
        ThreadCommand::Diff => {
            crate::out::text(&threads.thread(&id()?).diff().await?.to_string());
            return Ok(0);
        }
        ThreadCommand::DryRun => {
            out!("{}", threads.thread(&id()?).dry_run()?);
            return Ok(0);
        }
    };
    if writes_spec {
        warn_if_start_refuses(&threads, &record);
    }
    show(&threads, &record, view);
    let signal = interrupts.signal_exit_code();
    Ok(exit_code(workspace, &record, signal, loops))
}

/// The exit code of a thread command that left `record`: the signal's for a pause by one,
/// 3 for a pause waiting for a person's answer (which is then said, with its `next:`), 4 for
/// a pause by `ralph stop` (`loops`: the command drove the loop), 3 a failed preflight, 2
/// stuck.
fn exit_code(workspace: &Path, record: &ThreadRecord, signal: Option<u8>, loops: bool) -> u8 {
    let asked = ralph::steer::questions(workspace)
        .into_iter()
        .find(|(subject, ..)| *subject == record.id);
    match (signal, &record.phase) {
        (Some(code), Phase::Paused { .. }) => code,
        (None, Phase::Paused { .. }) if asked.is_some() => {
            if let Some((id, question, _)) = asked {
                out!("{id} asks: {question}");
                let again = crate::next::Again::new(workspace, "thread");
                out!(
                    "next: read the question above, then `{} answer {id} \"ANSWER\" && {}` gives the thread your ANSWER and goes on",
                    again.command("").trim_end_matches(" thread"),
                    again.command(&format!(" --id {id} resume"))
                );
            }
            3
        }
        // Paused with no signal: a person's `ralph stop` between two iterations.
        (None, Phase::Paused { .. }) if loops => 4,
        (_, Phase::PreflightFailed { .. }) => 3,
        (_, Phase::Stuck { .. }) => 2,
        _ => 0,
    }
}

/// The spec file a command line names, read; an error names the file.
fn read_spec(path: &Path) -> Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the spec {}: {e}", path.display()).into())
}

/// A spec `start` would refuse (no promise tag, no criteria), said where it is written or
/// approved, in the words of start's preflight. Only a warning: a draft may be finished
/// later, and `start` refuses it anyway.
fn warn_if_start_refuses(threads: &Threads, record: &ThreadRecord) {
    let Ok(Some(why)) = threads.spec_refusal(record) else {
        return;
    };
    eprintln!(
        "warning: spec v{} ({}): {why}; `start` refuses the spec until this is fixed",
        record.spec_version,
        threads.spec_path(&record.id, record.spec_version).display()
    );
}

/// Registers every agent the command may run by name: the models and verifier `settings`
/// name, and those `thread` was configured with (a resume in this process runs those).
fn register(
    mut threads: Threads,
    workspace: &Path,
    config: &ralph::Config,
    settings: &RunConfig,
    thread: Option<&ThreadRecord>,
) -> Result<Threads> {
    let configured = thread.map(|t| &t.config);
    let names = [settings]
        .into_iter()
        .chain(configured)
        .flat_map(|c| c.agents.iter().chain(&c.verifier));
    let mut done: Vec<&String> = Vec::new();
    for name in names {
        if !done.contains(&name) {
            threads = threads.agent(
                name.clone(),
                crate::run::one_agent(workspace, config, name)?,
            );
            done.push(name);
        }
    }
    Ok(threads)
}

/// `--agent` and `--verifier` set a thread's agents where it is configured (and choose the
/// agent `discuss` and `assess` ask); a loop that goes on (`resume`, `assist`, `send-back`)
/// runs with the agents it was configured with, so other ones are refused, not ignored.
fn check_agent_flags(args: &ThreadArgs, thread: Option<&ThreadRecord>) -> Result<()> {
    let goes_on = matches!(
        args.command,
        ThreadCommand::Resume | ThreadCommand::Assist | ThreadCommand::SendBack { .. }
    );
    let (Some(thread), true) = (thread, goes_on) else {
        return Ok(());
    };
    let asked: Option<Vec<String>> = args
        .agent
        .as_deref()
        .map(|list| list.split(',').map(|n| n.trim().to_owned()).collect());
    let differs = asked.is_some_and(|names| names != thread.config.agents)
        || args
            .verifier
            .as_ref()
            .is_some_and(|v| thread.config.verifier.as_ref() != Some(v));
    if differs {
        return Err(format!(
            "thread {} runs with {} (set while Configuring); --agent and --verifier change that \
             in `start`, `configure` or `reconfigure`",
            thread.id,
            describe_agents(&thread.config)
        )
        .into());
    }
    Ok(())
}

/// `claude → codex (verifier: gemini)`, or `the default agent`.
fn describe_agents(config: &RunConfig) -> String {
    let models = match config.agents.as_slice() {
        [] => "the default agent".to_owned(),
        names => names.join(" → "),
    };
    match &config.verifier {
        Some(verifier) => format!("{models} (verifier: {verifier})"),
        None => models,
    }
}

/// A thread waiting in Configuring gets `settings` and runs; any other is returned as it is.
async fn configure_and_run(
    threads: &Threads,
    record: ThreadRecord,
    settings: &RunConfig,
) -> Result<ThreadRecord> {
    if !matches!(record.phase, Phase::Configuring) {
        return Ok(record);
    }
    threads.thread(&record.id).configure(settings.clone())?;
    Ok(threads.thread(&record.id).run().await?)
}

/// Opens `text` in `$EDITOR` (else `vi`) and returns what the person saved.
// The person's editor must own the terminal, outside any run and any sandbox.
#[allow(clippy::disallowed_types)]
fn edit_in_editor(text: &str) -> Result<String> {
    let mut file = tempfile::Builder::new().suffix(".md").tempfile()?;
    file.write_all(text.as_bytes())?;
    file.flush()?;
    let editor = std::env::var("EDITOR").unwrap_or_else(|_| "vi".into());
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("editor")
        .arg(file.path())
        .status()?;
    if !status.success() {
        return Err(format!("{editor} exited with {status}; the spec is unchanged").into());
    }
    Ok(std::fs::read_to_string(file.path())?)
}

/// How much of the thread a command prints after it: `thread show` the whole history; a
/// command that ran the loop the iterations it ran and the agents; a checkpoint only where
/// the thread now stands (the history did not change, and `show` has it).
#[derive(Clone, Copy, Debug)]
enum View {
    Whole,
    RanSince(u32),
    Standing,
}

impl View {
    /// For `command`, run on a thread whose last iteration on record was `before` (0: none).
    fn of(command: &ThreadCommand, before: u32) -> View {
        match command {
            ThreadCommand::Show | ThreadCommand::New { .. } => View::Whole,
            ThreadCommand::Start
            | ThreadCommand::Configure
            | ThreadCommand::Resume
            | ThreadCommand::Reconfigure
            | ThreadCommand::Assist
            | ThreadCommand::SendBack { .. } => View::RanSince(before),
            _ => View::Standing,
        }
    }

    /// The iterations to print (the record keeps the last few, numbered on across rounds).
    fn attempts(self, thread: &ThreadRecord) -> impl Iterator<Item = &IterationRecord> {
        let after = match self {
            View::Whole => 0,
            View::RanSince(before) => before,
            View::Standing => u32::MAX,
        };
        thread.attempts.iter().filter(move |a| a.iteration > after)
    }
}

/// The thread's phase and what a person can do next, with as much of its history as `view`
/// asks for.
fn show(threads: &Threads, thread: &ThreadRecord, view: View) {
    out!(
        "{}  {}  (spec v{})",
        thread.id,
        thread.title,
        thread.spec_version
    );
    for attempt in view.attempts(thread) {
        out!("  iteration {}: {}", attempt.iteration, attempt.summary);
        for failed in &attempt.failed {
            out!("    failed: {}", failed.lines().next().unwrap_or(""));
        }
    }
    if let Some(a) = thread
        .assessment
        .as_ref()
        .filter(|_| matches!(thread.phase, Phase::Drafting | Phase::Assessing))
    {
        out!(
            "  assessment of spec v{}: {}",
            a.spec_version,
            a.recommendation()
        );
        for issue in &a.issues {
            out!(
                "    {}: {} (suggestion: {})",
                issue.subject(),
                issue.problem,
                issue.suggestion
            );
        }
    }
    if !matches!(view, View::Standing) {
        show_run(threads, thread);
    }
    if let Phase::PreflightFailed { failures } = &thread.phase {
        for failure in failures {
            out!("  preflight: {failure}");
        }
    }
    let waiting = match thread.phase.kind().needs_person() {
        true => "  (a person's decision)",
        false => "",
    };
    out!("phase: {}{waiting}\nnext: {}", thread.phase, next(thread));
}

/// The loop's agents, the model it ran last and that run, and the review feedback it got.
fn show_run(threads: &Threads, thread: &ThreadRecord) {
    if thread.phase.kind() != ralph::thread::PhaseKind::Drafting {
        out!("  agents: {}", describe_agents(&thread.config));
    }
    if let Some(agent) = &thread.current_agent {
        match &thread.agent_reason {
            Some(why) => out!("  current model: {agent} ({why})"),
            None => out!("  current model: {agent}"),
        }
    }
    if let Some(run_id) = &thread.current_run_id {
        out!("  last run: {}", last_run(threads, run_id));
    }
    if let Some(feedback) = thread.feedback.last() {
        out!("  review feedback: {}", feedback.text);
    }
}

/// Run `run_id` in a line: `1-hello-r2 (build, iteration 2): completed; transcript
/// .ralph/runs/1-hello-r2/output.log`.
fn last_run(threads: &Threads, run_id: &str) -> String {
    let transcript = threads.run_dir(run_id).join("output.log");
    let transcript = transcript
        .strip_prefix(threads.workspace())
        .unwrap_or(&transcript)
        .display();
    match threads.run_record(run_id) {
        Ok(run) => format!(
            "{run_id} ({}, iteration {}): {}; transcript {transcript}",
            run.role,
            run.iteration,
            run.outcome.as_deref().unwrap_or("not ended")
        ),
        Err(error) => format!("{run_id}: {error}"),
    }
}

/// Whether the thread is not over: `ralph status` then says its next step, which for a loop
/// is to wait for it (its process lives) or `resume` it (its process died), never that
/// every run is complete.
pub(crate) fn has_a_next_step(thread: &ThreadRecord) -> bool {
    !matches!(thread.phase, Phase::Done { .. } | Phase::Abandoned)
}

/// What to do next in each phase.
pub(crate) fn next(thread: &ThreadRecord) -> String {
    match &thread.phase {
        Phase::Drafting => {
            "`ralph thread discuss \"…\"` or `edit`, then `assess` or `finalize`".into()
        }
        Phase::Assessing => "`finalize` (you approve the spec), `edit`, or `assess` again".into(),
        Phase::Finalized => "`start` (or `reopen` to change the spec)".into(),
        // Preflight takes no agent and holds no state: a start cut short starts again.
        Phase::Preflight => {
            "the preflight was cut short: `ralph thread start` runs it again".into()
        }
        Phase::PreflightFailed { .. } => "fix the above, then `start` again, or `fix-spec`".into(),
        Phase::Configuring => {
            "`configure` runs the loop with --agent, --verifier and --max-iterations".into()
        }
        Phase::Running { iteration } | Phase::Verifying { iteration } => {
            in_the_loop(thread, *iteration)
        }
        Phase::Paused {
            iteration,
            criteria_passing,
            criteria_total,
        } => format!(
            "paused at iteration {iteration}/{} ({criteria_passing}/{criteria_total} criteria \
             passing): `resume`, `reconfigure` or `abandon`",
            thread.iteration_limit
        ),
        // A limit, not the work: raising it and running the loop again goes on.
        Phase::Stuck { reason } if reason.contains("budget exhausted") => format!(
            "{reason}: raise the limit and run the loop again, `ralph thread reconfigure --max-cost DOLLARS` (what was spent counts), or `abandon`"
        ),
        Phase::Stuck { reason } => {
            format!(
                "{reason}: `diagnose`, `reconfigure`, `assist`, `revise --file SPEC --yes` or `abandon`"
            )
        }
        Phase::Implemented => "`review` (or `polish` first)".into(),
        Phase::Polishing => "add the docs and tests you want, then `polish-done`".into(),
        Phase::PendingReview { recommend_approve } => format!(
            "read `ralph thread diff`, then `approve` or `send-back \"what to fix\"`{}",
            if *recommend_approve {
                "  [recommend approve: all criteria pass]"
            } else {
                ""
            }
        ),
        Phase::Approved => {
            "`message` prepares the commit message for you to read, then `commit`".into()
        }
        Phase::ReadyToCommit { .. } => "`commit` (or `message --message TEXT` to change it)".into(),
        Phase::Done { commit } => format!(
            "committed {} on {}; merge it when you are ready",
            commit.as_deref().unwrap_or("(nothing to commit)"),
            thread.branch.as_deref().unwrap_or("the branch")
        ),
        Phase::Abandoned => format!(
            "nothing was deleted{}; the records are kept",
            thread
                .branch
                .as_deref()
                .map(|b| format!(": the changes stay on {b}"))
                .unwrap_or_default()
        ),
        // Phase is non-exhaustive: a phase added to the library names itself here rather
        // than print an empty `next:` line.
        other => format!("{other}: `ralph thread show` prints where the thread stands"),
    }
}

/// Running or Verifying: a loop that runs now can only be waited for or paused; one whose
/// process died (killed, the machine restarted) was cut short, and `resume` runs its
/// iteration again.
fn in_the_loop(thread: &ThreadRecord, iteration: u32) -> String {
    match thread.runner_pid {
        Some(pid) if !thread.is_orphaned() => {
            format!("the loop runs in process {pid}: wait for it, or Ctrl+C there to pause it")
        }
        _ => format!(
            "the run was cut short at iteration {iteration} (its process is gone): `ralph \
             thread resume` runs that iteration again"
        ),
    }
}

/// `revise` without `--yes`: refused where it would reset the work tree (Stuck,
/// PendingReview), naming what would be lost. Elsewhere `revise` says why it cannot.
fn refuse_reset(thread: &ThreadRecord) -> Result<()> {
    if !matches!(
        thread.phase.kind(),
        PhaseKind::Stuck | PhaseKind::PendingReview
    ) {
        return Ok(());
    }
    let baseline = thread.baseline_commit().unwrap_or("the baseline");
    Err(format!(
        "thread {}: going back to Drafting resets the work tree to {baseline} and deletes its \
         changes on ralph/{}\nnext: ralph thread revise --yes (add --file SPEC for a new spec)",
        thread.id, thread.id
    )
    .into())
}
