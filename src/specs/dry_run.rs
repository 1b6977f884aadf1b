//! Dry runs of plan mode and build mode: what the next call would do, worked out from
//! `implementation.json`, the plan files and the config, without starting an agent or a
//! gate, without taking the workspace's lock and without writing anything. The specs'
//! texts are checked as the run would read them (`Error::SpecText`).

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use super::implementation::{ImplementationStore, SpecEntry};
use super::plan_files::{PlanFiles, Resume};
use super::plan_mode::spec_files;
use crate::runtime::Context;
use crate::runtime::error::{Error, SpecsError};
use crate::runtime::spec;

/// What [`Ralph::dry_run_plan`](crate::Ralph::dry_run_plan) found: the specs plan mode would
/// read, the file it would write, and the prompt it would use.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct PlanDryRun {
    /// The markdown specs, relative to the workspace.
    pub specs: Vec<String>,
    /// `implementation.json`, relative to the workspace.
    pub implementation: PathBuf,
    /// Whether it exists (plan mode then merges into it).
    pub exists: bool,
    /// The override file of the `plan_mode` template; `None` for the built-in one.
    pub template_source: Option<String>,
    /// `stage_timeout`.
    #[serde(serialize_with = "crate::time::secs")]
    pub stage_timeout: Duration,
    /// The specs longer than a prompt carries: each with its size and how much of it (head
    /// and tail) reaches the agent. Empty when all of every spec does.
    pub spec_cuts: Vec<String>,
    /// The `.md` files of the specs folder plan mode leaves out, each with why (a link that
    /// leads outside the folder).
    pub skipped: Vec<String>,
    /// How the planner would be confined ("Sandbox" in docs/running.md).
    pub sandbox: String,
}

impl fmt::Display for PlanDryRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Dry run of plan mode (nothing was run or written)")?;
        writeln!(f, "  specs:     {}", self.specs.join(", "))?;
        for cut in &self.spec_cuts {
            writeln!(f, "  spec:      {cut}")?;
        }
        for skipped in &self.skipped {
            writeln!(f, "  skipped:   {skipped}")?;
        }
        writeln!(
            f,
            "  writes:    {} ({})",
            self.implementation.display(),
            if self.exists { "merged into" } else { "new" }
        )?;
        let source = self.template_source.as_deref().unwrap_or("built-in");
        writeln!(f, "  prompt:    plan_mode ({source})")?;
        writeln!(f, "  sandbox:   {}", self.sandbox)?;
        write!(
            f,
            "  limits:    stage timeout {}",
            humantime::format_duration(self.stage_timeout)
        )
    }
}

/// What [`Ralph::dry_run_build`](crate::Ralph::dry_run_build) found: the spec build mode
/// would work on, its next step and the prompt template of that step, and the limits.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct BuildDryRun {
    /// The spec the next call works on (id), if any is left.
    pub spec: Option<String>,
    /// The next step: `plan`, `task <id>: <description> (session N)`, `verify`.
    pub next: Option<String>,
    /// The prompt template of that step (`planner`, `task`, `task_retry`, `spec_verify`).
    pub template: Option<String>,
    /// The override file of that template; `None` for the built-in one.
    pub template_source: Option<String>,
    /// Why the call would stop at once, if it would.
    pub stop: Option<String>,
    /// Specs not yet completed, in build order.
    pub remaining: Vec<String>,
    /// The gates run after each session, by name; optional ones are marked `(optional)`.
    pub gates: Vec<String>,
    /// The agent that would run ([`Agent::name`](crate::Agent::name)).
    pub agent: String,
    /// How the agent and gates would be confined ("Sandbox" in docs/running.md).
    pub sandbox: String,
    /// `retries`.
    pub retries: u32,
    /// `planning.max_attempts`.
    pub max_attempts: u32,
    /// `stage_timeout`.
    #[serde(serialize_with = "crate::time::secs")]
    pub stage_timeout: Duration,
    /// `agent_timeout`.
    #[serde(serialize_with = "crate::time::secs")]
    pub agent_timeout: Duration,
    /// `once`.
    pub once: bool,
    /// How long the run would wait for an answer to an agent's question
    /// ([`Config::question_wait_or_default`](crate::Config::question_wait_or_default)).
    #[serde(serialize_with = "crate::time::secs")]
    pub question_wait: Duration,
    /// The run-wide limits (`max_cost_usd`, `max_tokens`) and what the run over
    /// `implementation.json` spent against them; `None` without limits.
    pub budget: Option<String>,
    /// When the next spec is longer than a prompt carries: its size and how much of it
    /// (head and tail) reaches the agent. `None` when all of it does.
    pub spec_cut: Option<String>,
}

impl fmt::Display for BuildDryRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Dry run of build mode (nothing was run or written)")?;
        if let Some(spec) = &self.spec {
            writeln!(f, "  spec:      {spec}")?;
        }
        if let Some(cut) = &self.spec_cut {
            writeln!(f, "  its text:  {cut}")?;
        }
        if let Some(next) = &self.next {
            writeln!(f, "  next:      {next}")?;
        }
        if let Some(template) = &self.template {
            let source = self.template_source.as_deref().unwrap_or("built-in");
            writeln!(f, "  prompt:    {template} ({source})")?;
        }
        if let Some(stop) = &self.stop {
            writeln!(f, "  would stop: {}", stop.lines().next().unwrap_or(""))?;
        }
        writeln!(f, "  remaining: {}", list(&self.remaining))?;
        writeln!(f, "  agent:     {}", self.agent)?;
        writeln!(f, "  sandbox:   {}", self.sandbox)?;
        if self.gates.iter().all(|g| g.ends_with(" (optional)")) {
            writeln!(
                f,
                "  gates:     no required gate: a task is done on the agent's word and the verifier's{}",
                match self.gates.as_slice() {
                    [] => String::new(),
                    optional => format!(" ({})", optional.join(", ")),
                }
            )?;
        } else {
            writeln!(f, "  gates:     {}", list(&self.gates))?;
        }
        write!(
            f,
            "  limits:    retries {}, max attempts {}, stage timeout {}, agent timeout {}, once {}, \
             question wait {}",
            self.retries,
            self.max_attempts,
            humantime::format_duration(self.stage_timeout),
            humantime::format_duration(self.agent_timeout),
            if self.once { "yes" } else { "no" },
            humantime::format_duration(self.question_wait),
        )?;
        if let Some(budget) = &self.budget {
            write!(f, "\n  budget:    {budget}")?;
        }
        Ok(())
    }
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
    }
}

/// Works out the [`PlanDryRun`] for `specs` (all of the specs folder when empty).
pub(crate) fn plan(ctx: &Context, specs: Vec<PathBuf>) -> Result<PlanDryRun, Error> {
    let planning = &ctx.config.planning;
    let (specs, skipped) = spec_files(&ctx.workspace, &planning.specs_dir, specs)?;
    // Each text is checked as plan mode would read it into its prompt: an empty or binary
    // spec is the dry run's error too.
    let mut spec_cuts = Vec::new();
    for file in &specs {
        if let Some(cut) = spec::read(&ctx.workspace, file)?.cut_note() {
            spec_cuts.push(format!("{file}: {cut}"));
        }
    }
    Ok(PlanDryRun {
        specs,
        implementation: planning.implementation.clone(),
        exists: ctx.workspace.join(&planning.implementation).exists(),
        template_source: ctx.prompts.origin("plan_mode").map(str::to_owned),
        stage_timeout: ctx.config.stage_timeout,
        spec_cuts,
        skipped,
        sandbox: ctx.sandbox_line(),
    })
}

/// Works out the [`BuildDryRun`].
pub(crate) fn build(ctx: &Context) -> Result<BuildDryRun, Error> {
    let config = &ctx.config;
    let store = ImplementationStore::new(ctx.workspace.join(&config.planning.implementation));
    let plan = store.load()?.ok_or_else(|| SpecsError::NoImplementation {
        path: store.path().to_path_buf(),
    })?;
    let plans = PlanFiles::new(&ctx.workspace, &config.planning.specs_dir);
    let order = plan.build_order();
    let mut report = BuildDryRun {
        spec: None,
        next: None,
        template: None,
        template_source: None,
        stop: None,
        remaining: order.iter().map(|&i| plan.specs[i].id.clone()).collect(),
        gates: gate_names(ctx),
        agent: ctx.agent.name().to_owned(),
        sandbox: ctx.sandbox_line(),
        retries: config.retries,
        max_attempts: config.planning.max_attempts,
        stage_timeout: config.stage_timeout,
        agent_timeout: config.agent_timeout,
        once: config.once,
        question_wait: config.question_wait_or_default(),
        budget: ctx.budget_line(super::SPEND_SCOPE)?,
        spec_cut: None,
    };
    let Some(&first) = order.first() else {
        report.stop = Some("every spec is complete".into());
        return Ok(report);
    };
    let spec = &plan.specs[first];
    report.spec = Some(spec.id.clone());
    if let Some(outcome) = super::build::stuck(spec) {
        report.stop = Some(outcome.to_string());
        return Ok(report);
    }
    if spec.attempts >= config.planning.max_attempts {
        report.stop = Some(format!(
            "Stopped: spec {} used its {} attempt(s)",
            spec.id, spec.attempts
        ));
        return Ok(report);
    }
    let rel = plans.spec_rel(&spec.file)?;
    // Its text, as every step of the spec reads it into its prompt.
    report.spec_cut = spec::read(&ctx.workspace, &spec.file)?.cut_note();
    let needs_plan = !matches!(plans.resume(&rel)?, Resume::UseActive | Resume::Adopt)
        || spec.plan_invalidation.is_some();
    let (next, template) = next_step(spec, needs_plan);
    report.next = Some(next);
    report.template_source = ctx.prompts.origin(template).map(str::to_owned);
    report.template = Some(template.to_owned());
    Ok(report)
}

/// The gates by name, in order, the optional ones marked.
fn gate_names(ctx: &Context) -> Vec<String> {
    ctx.gates
        .iter()
        .map(|g| match g.required() {
            true => g.name().to_owned(),
            false => format!("{} (optional)", g.name()),
        })
        .collect()
}

/// The spec's next step, and the template its agent would be given: a plan first when the
/// spec needs one, else its next task, else the spec's verification.
fn next_step(spec: &SpecEntry, needs_plan: bool) -> (String, &'static str) {
    if needs_plan {
        (
            "plan (a read-only planner writes the spec's plan)".to_owned(),
            "planner",
        )
    } else if let Some(index) = spec.next_task() {
        let task = &spec.tasks[index];
        let session = task.attempts.saturating_add(1);
        (
            format!("task {}: {} (session {session})", task.id, task.description),
            super::build::tasks::template(task),
        )
    } else {
        ("verify the spec".to_owned(), "spec_verify")
    }
}
