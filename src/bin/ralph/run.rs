//! The commands that run an agent: `demo`, `construct`, `plan`, `build`.

use std::path::{Path, PathBuf};

use ralph::agent::{CodexCli, CommandAgent, Fallback, GeminiCli, OpencodeCli};
use ralph::{Agent, ClaudeCli, FakeAgent, Ralph, RalphBuilder, StopToken};

use std::sync::Arc;

use crate::display::{self, Console};
use crate::next::Again;
use crate::{ConstructArgs, RunFlags};

use crate::Result;
use crate::out::out;

/// The bundled demo, embedded so the installed binary needs no source tree.
const DEMO_SPEC: &str = include_str!("../../../fixtures/demo/spec.md");
const DEMO_CONFIG: &str = include_str!("../../../fixtures/demo/ralph.toml");
const DEMO_SCRIPT: &str = include_str!("../../../fixtures/demo/script.toml");
/// Marks a directory as one the demo made, so a second `demo --in` may resume it.
const DEMO_MARK: &str = ".ralph/demo";
/// Where a scripted agent's requests are appended, one NDJSON line each, so runs across
/// several processes (a crash, a resume) can be checked afterwards.
pub(crate) const FAKE_REQUESTS: &str = ".ralph/fake-requests.jsonl";

/// `ralph demo`: the bundled spec, config and script in a fresh directory; never anywhere
/// that holds anything else.
// The demo writes its own new workspace (spec, config) before any run: no state.
#[allow(clippy::disallowed_methods)]
pub(crate) async fn demo(dir: Option<PathBuf>, json: bool) -> Result<u8> {
    let dir = match dir {
        Some(dir) => claim_demo_dir(&dir)?,
        None => tempfile::Builder::new()
            .prefix("ralph-demo-")
            .tempdir()?
            .keep(),
    };
    if !dir.join(DEMO_MARK).exists() {
        std::fs::write(dir.join("spec.md"), DEMO_SPEC)?;
        std::fs::write(dir.join("ralph.toml"), DEMO_CONFIG)?;
        std::fs::write(dir.join(".gitignore"), ".ralph/\nbuild/\n")?;
        std::fs::create_dir_all(dir.join(".ralph"))?;
        std::fs::write(dir.join(DEMO_MARK), "")?;
        init_demo_repo(&dir);
    }
    if !json {
        out!("ralph demo · workspace {}", dir.display());
    }
    let agent = FakeAgent::from_toml(DEMO_SCRIPT, "the bundled demo script")?
        .record_to(dir.join(FAKE_REQUESTS));
    let lines = display::observer(json);
    let ralph = Ralph::builder()
        .workspace(&dir)
        .agent(agent)
        .observer(lines.clone())
        .build()?;
    let spec = PathBuf::from("spec.md");
    let again = Again::demo(&dir);
    run_construct(&ralph, &lines, Some(spec), json, &again, false).await
}

/// Makes the demo's directory a git repository of its own, with its files as the first
/// commit, so the demo shows each task committed, and so that ralph, in a demo made inside
/// someone's repository (`--in sub`), commits to the demo's repository, never theirs.
/// Without git the demo runs all the same, committing nothing.
// Sets up the demo's folder before any run: nothing to confine or sweep.
#[allow(clippy::disallowed_types)]
fn init_demo_repo(dir: &Path) {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args([
                "-c",
                "user.name=ralph demo",
                "-c",
                "user.email=demo@ralph.invalid",
            ])
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let _ = git(&["init", "-q", "-b", "main"])
        && git(&["add", "-A"])
        && git(&["commit", "-q", "-m", "the demo's spec and config"]);
}

/// A directory the demo may use: missing, empty, or made by an earlier demo.
fn claim_demo_dir(dir: &Path) -> Result<PathBuf> {
    if dir.join(DEMO_MARK).exists() {
        return Ok(dir.to_path_buf());
    }
    if dir.exists() && std::fs::read_dir(dir)?.next().is_some() {
        return Err(format!(
            "{} is not empty and no demo ran there: the demo writes its own spec, config and \
             files, so it only runs in a new or empty directory",
            dir.display()
        )
        .into());
    }
    std::fs::create_dir_all(dir)?;
    Ok(dir.to_path_buf())
}

/// `ralph construct [SPEC]`.
pub(crate) async fn construct(workspace: &Path, args: ConstructArgs) -> Result<u8> {
    let lines = display::observer(args.run.json);
    let mut builder = builder(workspace, &args.run, &lines).await?;
    if let Some(timeout) = args.timeout {
        builder = builder.stage_timeout(timeout);
    }
    if let Some(n) = args.max_iterations {
        builder = builder.max_iterations(n);
    }
    let ralph = builder.build()?;
    if let (true, Some(spec)) = (args.switch, &args.spec) {
        if args.run.dry_run {
            return switch_dry_run(&ralph, spec).await;
        }
        switch_to(&ralph, spec, args.run.json).await?;
    }
    if args.run.dry_run {
        return construct_dry_run(&ralph, args.spec, args.plan_only, args.run.json).await;
    }
    // A refused spec is said before anything else is: no header for a run that never starts.
    if let Some(spec) = &args.spec {
        ralph.check_spec(spec)?;
    }
    if !args.run.json {
        out!(
            "ralph construct · workspace {}",
            ralph.workspace().display()
        );
    }
    let again = Again::new(workspace, "construct").flags(
        args.run.agent.as_deref(),
        args.run.script.as_deref(),
        args.timeout,
    );
    run_construct(
        &ralph,
        &lines,
        args.spec,
        args.run.json,
        &again,
        args.plan_only,
    )
    .await
}

/// `construct SPEC --switch`: the board of the spec on record archived, SPEC's brought back
/// or started afresh, and (unless the output is `json`) what was done said.
async fn switch_to(ralph: &Ralph, spec: &Path, json: bool) -> Result<()> {
    let from = ralph.board().await?.run.spec;
    let archived = ralph.switch_spec(spec).await?;
    if let (Some(from), Some(dir), false) = (from, archived, json) {
        let back = match ralph.board().await?.run.spec.is_some() {
            true => "its own board brought back from its archive",
            false => "its board starts afresh",
        };
        out!(
            "switched to {}: the board of {from} archived in {}; {back}",
            spec.display(),
            dir.display()
        );
    }
    Ok(())
}

/// `construct --dry-run`: the run `spec` (the spec on record when `None`) would make, and
/// with `plan_only` that it stops before the first BUILD.
async fn construct_dry_run(
    ralph: &Ralph,
    spec: Option<PathBuf>,
    plan_only: bool,
    json: bool,
) -> Result<u8> {
    let spec = match spec {
        Some(spec) => spec,
        None => recorded_spec(ralph).await?,
    };
    let dry = ralph.dry_run(spec).await?;
    match (plan_only, json) {
        (false, json) => display::report(&dry, json)?,
        (true, true) => {
            let mut value = serde_json::to_value(&dry)?;
            value["plan_only"] = serde_json::Value::Bool(true);
            out!("{value}");
        }
        (true, false) => {
            display::report(&dry, false)?;
            out!("  plan only: the run stops before the first BUILD, its tasks made");
        }
    }
    Ok(0)
}

/// `construct SPEC --switch --dry-run`: what the switch would do, said from the board on
/// record; a dry run moves nothing, so the dry run of SPEC's board comes after the switch.
async fn switch_dry_run(ralph: &Ralph, spec: &Path) -> Result<u8> {
    let rel = ralph.check_spec(spec)?;
    let rel = rel.display();
    match ralph.board().await?.run.spec {
        Some(recorded) if recorded != rel.to_string() => out!(
            "switch:    would archive the board of {recorded} under .ralph/archive/ and bring              back {rel}'s latest archived board, if it has one (a dry run moves nothing)"
        ),
        _ => out!("switch:    nothing to switch: the board is {rel}'s or holds no spec yet"),
    }
    Ok(0)
}

/// The spec on record, for a command given none.
async fn recorded_spec(ralph: &Ralph) -> Result<PathBuf> {
    match ralph.board().await?.run.spec {
        Some(spec) => Ok(PathBuf::from(spec)),
        None => Err("no spec on record here: name one, as in `ralph construct spec.md`".into()),
    }
}

/// Runs (or resumes) the loop with the signals handled, up to its plan with `plan_only`;
/// the exit code.
async fn run_construct(
    ralph: &Ralph,
    lines: &Console,
    spec: Option<PathBuf>,
    json: bool,
    again: &Again,
    plan_only: bool,
) -> Result<u8> {
    let interrupts = interrupts(ralph)?;
    let ended = match (spec, plan_only) {
        (spec, true) => ralph.construct_plan(spec.as_deref()).await,
        (Some(spec), false) => ralph.construct(spec).await,
        (None, false) => ralph.resume().await,
    };
    let outcome = match ended.inspect_err(|e| display::after_hook_failure(lines, e)) {
        Ok(outcome) => outcome,
        Err(e) => return ended_by(e, json, again),
    };
    match json {
        true => display::json_next(&display::construct_next(ralph, &outcome, again).await?),
        false => display::summary(ralph, lines, &outcome, again).await?,
    }
    Ok(exit_code(&interrupts, outcome.exit_code()))
}

/// `ralph plan [SPECS]`.
pub(crate) async fn plan(workspace: &Path, specs: Vec<PathBuf>, flags: RunFlags) -> Result<u8> {
    let lines = display::observer(flags.json);
    let ralph = builder(workspace, &flags, &lines).await?.build()?;
    if flags.dry_run {
        display::report(&ralph.dry_run_plan(&specs)?, flags.json)?;
        return Ok(0);
    }
    let interrupts = interrupts(&ralph)?;
    let again =
        Again::plan(workspace, &specs).flags(flags.agent.as_deref(), flags.script.as_deref(), None);
    let implementation = match ralph.plan(&specs).await {
        Ok(implementation) => implementation,
        // Plan mode stopped by a signal saves nothing; the exit code is the signal's.
        Err(e) if interrupts.signal().is_some() => {
            eprintln!("{e}");
            return Ok(exit_code(&interrupts, 130));
        }
        // As construct and build stop at the budget: the reason on stderr, the way on where
        // every `next:` goes (stdout, or a JSON line), exit 2.
        Err(e @ ralph::Error::BudgetExhausted { spent_usd, .. }) => {
            display::after_hook_failure(&lines, &e);
            eprintln!("{e}");
            let next = crate::next::over_budget(&again, spent_usd);
            match flags.json {
                true => display::json_next(&next),
                false => out!("next: {next}"),
            }
            return Ok(2);
        }
        // The agent asked a person: as every mode that waits for an answer, exit 3.
        Err(e @ ralph::Error::Specs(ralph::specs::SpecsError::AwaitingAnswer { .. })) => {
            display::after_hook_failure(&lines, &e);
            eprintln!("ralph: {e}");
            let next = crate::next::answer_then(&again, "plan-mode", &again.command(""));
            match flags.json {
                true => display::json_next(&next),
                false => out!("next: {next}"),
            }
            return Ok(3);
        }
        Err(e) => {
            display::after_hook_failure(&lines, &e);
            return ended_by(e, flags.json, &again);
        }
    };
    let tasks: usize = implementation.specs.iter().map(|s| s.tasks.len()).sum();
    let next = crate::next::after_plan(&build_again(workspace, &flags));
    if flags.json {
        display::json_next(&next);
    } else {
        let specs = implementation.specs.len();
        out!(
            "planned {specs} {}, {tasks} {} into implementation.json\nnext: {next}",
            display::plural(specs, "spec", "specs"),
            display::plural(tasks, "task", "tasks"),
        );
    }
    Ok(0)
}

/// `ralph build [--force SPEC]`.
pub(crate) async fn build(workspace: &Path, force: Option<&str>, flags: RunFlags) -> Result<u8> {
    let lines = display::observer(flags.json);
    let ralph = builder(workspace, &flags, &lines).await?.build()?;
    if flags.dry_run {
        display::report(&ralph.dry_run_build()?, flags.json)?;
        return Ok(0);
    }
    let interrupts = interrupts(&ralph)?;
    let again = build_again(workspace, &flags);
    let run = match force {
        Some(spec) => ralph.rebuild(spec).await,
        None => ralph.build_specs().await,
    };
    let outcome = match run {
        Ok(outcome) => outcome,
        Err(e) => {
            display::after_hook_failure(&lines, &e);
            return ended_by(e, flags.json, &again);
        }
    };
    let next = crate::next::after_build(&outcome, &again);
    if flags.json {
        display::json_next(&next);
    } else {
        out!("{outcome}\nnext: {next}");
    }
    Ok(exit_code(&interrupts, outcome.exit_code()))
}

/// A run ended by `error`: when a person can act on it (the agent cannot reach its API, or
/// said no retry can fix its failure), the error on stderr and then the next step, as every
/// end has one, with exit 1; any other error is returned as it is.
fn ended_by(error: ralph::Error, json: bool, again: &Again) -> Result<u8> {
    let Some(next) = crate::next::after_error(&error, again) else {
        return Err(error.into());
    };
    eprintln!("ralph: {error}");
    match json {
        true => display::json_next(&next),
        false => out!("next: {next}"),
    }
    Ok(1)
}

/// `ralph build` again, with the flags that chose the agent.
fn build_again(workspace: &Path, flags: &RunFlags) -> Again {
    Again::new(workspace, "build").flags(flags.agent.as_deref(), flags.script.as_deref(), None)
}

/// A builder with the agent the flags name, checked to be there (unless this is a dry run,
/// which starts no agent), and the display.
async fn builder(workspace: &Path, flags: &RunFlags, lines: &Arc<Console>) -> Result<RalphBuilder> {
    let agent: Box<dyn Agent> = match &flags.script {
        Some(script) => {
            Box::new(FakeAgent::from_toml_file(script)?.record_to(workspace.join(FAKE_REQUESTS)))
        }
        None => {
            let agent = named_agents(workspace, flags.agent.as_deref())?;
            if !flags.dry_run {
                agent.check().await?;
            }
            agent
        }
    };
    let mut builder = Ralph::builder()
        .workspace(workspace)
        .agent(agent)
        .observer(lines.clone());
    if flags.once {
        builder = builder.once(true);
    }
    if let Some(dollars) = flags.max_cost {
        builder = builder.max_cost_usd(dollars);
    }
    Ok(builder)
}

/// Listens for SIGINT, SIGTERM and SIGHUP: the first stops the run cleanly, a second at once.
fn interrupts(ralph: &Ralph) -> std::io::Result<StopToken> {
    let stop = ralph.stop_token();
    ralph::steer::listen_for_signals(ralph.workspace(), stop.clone(), |signal| {
        eprintln!(
            "\n{signal}: stopping the running agent or gate and saving the state… (again to stop at once)"
        );
    })?;
    Ok(stop)
}

/// The outcome's exit code, or the signal's that interrupted the run.
fn exit_code(interrupts: &StopToken, code: i32) -> u8 {
    let code = match interrupts.signal_exit_code() {
        Some(signal) if code == 130 => i32::from(signal),
        _ => code,
    };
    u8::try_from(code).unwrap_or(1)
}

/// `--agent`'s value checked as clap parses it: a comma-separated list with no empty name
/// (`mine,` or `,mine` is a stray comma, which would otherwise ask for an agent called "").
pub(crate) fn agent_list(list: &str) -> std::result::Result<String, String> {
    match list.split(',').any(|name| name.trim().is_empty()) {
        true => Err(format!(
            "the --agent list {list:?} has an empty name (a stray comma?): name the agents \
             separated by single commas, as in `claude,codex`"
        )),
        false => Ok(list.to_owned()),
    }
}

/// The agents `--agent` names (a comma-separated list), else `agents` of ralph.toml, else
/// `claude`: in every mode, threads too.
pub(crate) fn agent_names(config: &ralph::Config, flag: Option<&str>) -> Vec<String> {
    match flag {
        Some(list) => list.split(',').map(|n| n.trim().to_owned()).collect(),
        None if !config.agents.is_empty() => config.agents.clone(),
        None => vec!["claude".to_owned()],
    }
}

/// The agent `--agent` names (or `agents` of ralph.toml, or `claude`); several names make a
/// fallback chain.
fn named_agents(workspace: &Path, flag: Option<&str>) -> Result<Box<dyn Agent>> {
    let config = ralph::Config::load(workspace)?;
    let names = agent_names(&config, flag);
    let mut agents = Vec::new();
    for name in &names {
        agents.push((name.clone(), one_agent(workspace, &config, name)?));
    }
    if agents.len() == 1 {
        return Ok(agents.remove(0).1);
    }
    Ok(Box::new(
        agents
            .into_iter()
            .fold(Fallback::new(), |chain, (name, agent)| {
                chain.agent(name, agent)
            }),
    ))
}

/// The agent called `name`: `claude`, `codex`, `gemini`, `opencode`, or an `[agent.NAME]`
/// table of ralph.toml (which wins over a built-in name).
pub(crate) fn one_agent(
    workspace: &Path,
    config: &ralph::Config,
    name: &str,
) -> Result<Box<dyn Agent>> {
    if name == "claude" {
        let claude = ClaudeCli::from_workspace(workspace)?;
        return Ok(Box::new(claude));
    }
    if !config.agent.contains_key(name) {
        match name {
            "codex" => return Ok(Box::new(CodexCli::from_config(config))),
            "gemini" => return Ok(Box::new(GeminiCli::from_config(config))),
            "opencode" => return Ok(Box::new(OpencodeCli::from_config(config))),
            _ => {}
        }
    }
    let agent = CommandAgent::from_config(name, config).map_err(|e| {
        let known: Vec<&str> = ["claude", "codex", "gemini", "opencode"]
            .into_iter()
            .chain(config.agent.keys().map(String::as_str))
            .collect();
        format!("{e} (the agents this workspace has: {})", known.join(", "))
    })?;
    Ok(Box::new(agent))
}
