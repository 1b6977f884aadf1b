//! Plan mode: the agent, in the read-only plan role, reads the freeform markdown
//! specs and answers with structured specs, tasks, acceptance criteria and priorities
//! ([`PlanAnswer`]); ralph merges that into `implementation.json`, so build mode never has
//! to parse prose.
//!
//! Merging keeps what was done: a completed spec is left as it is (only its priority
//! follows the answer); in other specs every completed task stays, with its id and history,
//! a proposed task whose description matches a completed one is not added again, a still
//! pending task with the same description keeps its id and attempts (a blocked one becomes
//! pending again, with a fresh budget), tasks the answer no longer lists are dropped, and new
//! tasks get the next free id `<spec-id>-<n>`. Specs the answer does not mention are kept.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use super::implementation::{Implementation, ImplementationStore, SpecEntry, Status, TaskEntry};
use super::plan_files::{PlanFiles, find_specs};
use crate::agent::Role;
use crate::answer::{PlanAnswer, PlannedSpec};
use crate::event::Event;
use crate::git::Git;
use crate::runtime::Context;
use crate::runtime::call::{Call, Caller, Structured};
use crate::runtime::deadline;
use crate::runtime::error::{Error, SpecsError};
use crate::runtime::logs::{Emitter, Logs};
use crate::runtime::spec;

/// Runs plan mode over `specs` (all markdown specs of the specs folder when empty) and saves
/// the merged `implementation.json`. Its events also go to the run log
/// `<log_dir>/ralph-<timestamp>-plan-mode.log`, which ends with its `Finished` event: what
/// was saved, or the error. The hooks on that event run while the run still holds the
/// workspace's lock.
pub(crate) async fn run(ctx: Arc<Context>, specs: Vec<PathBuf>) -> Result<Implementation, Error> {
    let emitter = ctx.emitter(&[]);
    let mut lock = None;
    let result = plan(&ctx, specs, &emitter, &mut lock).await;
    let event = match &result {
        Ok(plan) => {
            let specs = plan.specs.len();
            let tasks: usize = plan.specs.iter().map(|s| s.tasks.len()).sum();
            let path = ctx.config.planning.implementation.display();
            Event::finished(
                "plan",
                format!("planned {specs} spec(s), {tasks} task(s) into {path}"),
                0,
                false,
            )
        }
        Err(e) => Event::failed("plan", "plan mode", e),
    };
    let event = crate::runtime::spend::stamped(event, &ctx.workspace, super::SPEND_SCOPE);
    let hooks = emitter.finish(event).await;
    drop(lock);
    crate::runtime::error::after_hooks(result, hooks)
}

/// Plan mode itself: the workspace's lock goes to `lock`, for the run's end to hold.
async fn plan(
    ctx: &Arc<Context>,
    specs: Vec<PathBuf>,
    emitter: &Emitter,
    lock: &mut Option<crate::runtime::workspace::RunLock>,
) -> Result<Implementation, Error> {
    let mut logs = Logs::new(
        &ctx.workspace,
        &ctx.config.log_dir,
        ctx.config.log_files_kept,
    )?;
    logs.open_run("plan-mode", emitter)?;
    *lock = Some(ctx.begin(emitter).await?);
    // Refused before any agent runs: finding out at the commit would waste the plan.
    ctx.git(&ctx.workspace).refuse_unrunnable().await?;
    ctx.sandbox.record([ctx.config.planning.specs_dir.clone()]);
    let emitter = emitter.clone();
    let planning = &ctx.config.planning;
    let (files, skipped) = spec_files(&ctx.workspace, &planning.specs_dir, specs)?;
    for message in skipped {
        emitter.emit(&Event::Warning {
            message: format!("plan mode skips {message}"),
        });
    }
    let store = ImplementationStore::new(ctx.workspace.join(&planning.implementation))
        .copies_in(crate::runtime::workspace::state_dir(&ctx.workspace));
    let existing = existing_plan(ctx, &store)?;
    let prompt = prompt(ctx, &files, &existing)?;

    let run_dir = crate::specs::logs::run_folder(&ctx.workspace, &ctx.config.log_dir, "plan-mode")?;
    let caller = ctx.spending_caller(emitter, super::SPEND_SCOPE)?;
    let call = Call {
        announce: None,
        role: Role::Breakdown,
        subject: Some("plan-mode".into()),
        attempt: 1,
        prompt,
        deadline: deadline::after(ctx.config.stage_timeout),
        log: crate::specs::logs::folder_log(&run_dir, Role::Breakdown, 1),
    };
    let answer = ask_for_plan(ctx, &caller, call, &files, &store).await?;
    let mut plan = merge(existing, answer);
    store.save(&mut plan, "plan-mode")?;
    let specs = plan.specs.len();
    let tasks = plan.specs.iter().map(|s| s.tasks.len()).sum();
    let path = crate::runtime::workspace::relative(&ctx.workspace, store.path());
    let commit = commit_plan(ctx.git(&ctx.workspace), &path, specs, tasks).await?;
    caller.emitter.emit(&Event::PlanSaved {
        path,
        specs,
        tasks,
        commit,
    });
    Ok(plan)
}

/// The plan on record, or an empty one when there is none yet (and then the spend of an
/// earlier plan's run no longer counts).
fn existing_plan(ctx: &Context, store: &ImplementationStore) -> Result<Implementation, Error> {
    Ok(match store.load()? {
        Some(existing) => existing,
        None => {
            ctx.budget(super::SPEND_SCOPE)?.ledger().reset()?;
            Implementation::default()
        }
    })
}

/// Asks the breakdown agent, by `call`, for the plan of `files`: its answer, or an error
/// naming `store`'s file when there is no usable one or the run was stopped. A question it
/// asks a person waits for the answer up to `question_wait`, then is asked again with it.
async fn ask_for_plan(
    ctx: &Context,
    caller: &Caller,
    mut call: Call,
    files: &[String],
    store: &ImplementationStore,
) -> Result<PlanAnswer, Error> {
    let implementation = store.path().to_path_buf();
    let answer = loop {
        let (answer, runs) = caller
            .structured::<PlanAnswer>(call.clone(), |a| {
                match crate::answer::asked(a.question.as_ref()) {
                    Some(_) => Ok(()),
                    None => check_files(a, files),
                }
            })
            .await?;
        let question = match &answer {
            Structured::Answer(a) => crate::answer::asked(a.question.as_ref()).map(str::to_owned),
            _ => None,
        };
        let Some(question) = question else {
            break answer;
        };
        let subject = call.subject.clone().unwrap_or_default();
        let asked = crate::runtime::questions::record(
            &ctx.workspace,
            &subject,
            Role::Breakdown,
            &question,
        )?;
        caller.emitter.emit(&asked);
        if !crate::runtime::questions::wait(ctx, &caller.emitter, &subject).await {
            return Err(SpecsError::AwaitingAnswer {
                question,
                implementation,
            }
            .into());
        }
        call.attempt += runs;
    };
    match answer {
        Structured::Answer(answer) => Ok(answer),
        Structured::Unusable { reason, .. } => Err(SpecsError::NoUsablePlan {
            reason,
            implementation,
        }
        .into()),
        Structured::Interrupted => Err(SpecsError::Stopped { implementation }.into()),
    }
}

/// Commits the saved plan, and only it, in a git repository that has a commit: the plan is
/// on record, and build mode starts from a clean work tree (ralph's files never linger in
/// `git status`). `None` outside git, before the first commit, for a file git ignores or
/// that did not change.
async fn commit_plan(
    git: Git,
    path: &Path,
    specs: usize,
    tasks: usize,
) -> Result<Option<String>, Error> {
    if !git.is_repo().await {
        git.refuse_unrunnable().await?;
        return Ok(None);
    }
    if git.head().await?.is_none() {
        return Ok(None);
    }
    // Checked from the workspace, where git runs; committed by its path from the top.
    if path.is_absolute() || git.ignored(&path.to_string_lossy()).await? {
        return Ok(None);
    }
    let rel = format!("{}{}", git.prefix().await?, path.display());
    let message = format!(
        "ralph plan: {specs} spec{}, {tasks} task{}",
        if specs == 1 { "" } else { "s" },
        if tasks == 1 { "" } else { "s" }
    );
    Ok(git.commit_paths(&message, &[rel]).await?)
}

/// The specs to plan, relative to the workspace, each checked to stay inside the specs
/// folder; then, for a scan of the folder, the `.md` files it left out and why (see
/// [`find_specs`]), for the caller to warn of.
///
/// # Errors
///
/// [`SpecsError::NoSpecs`] (naming what was left out) when there is nothing to plan;
/// [`Error::SpecPath`] for a named spec outside the folder.
pub(crate) fn spec_files(
    workspace: &Path,
    specs_dir: &Path,
    given: Vec<PathBuf>,
) -> Result<(Vec<String>, Vec<String>), Error> {
    let (files, skipped) = if given.is_empty() {
        find_specs(workspace, specs_dir)?
    } else {
        let files = given.into_iter().map(|p| p.to_string_lossy().into_owned());
        (files.collect(), Vec::new())
    };
    if files.is_empty() {
        let dir = workspace.join(specs_dir);
        return Err(SpecsError::NoSpecs { dir, skipped }.into());
    }
    let plans = PlanFiles::new(workspace, specs_dir);
    for file in &files {
        plans.spec_rel(file)?;
    }
    Ok((files, skipped))
}

fn prompt(ctx: &Context, files: &[String], existing: &Implementation) -> Result<String, Error> {
    #[derive(Serialize)]
    struct SpecFile<'a> {
        file: &'a str,
        text: String,
    }
    #[derive(Serialize)]
    struct KnownSpec<'a> {
        id: &'a str,
        file: &'a str,
        status: Status,
        completed: Vec<&'a str>,
    }
    #[derive(Serialize)]
    struct BreakdownPrompt<'a> {
        specs: Vec<SpecFile<'a>>,
        existing: Vec<KnownSpec<'a>>,
    }
    let mut specs = Vec::new();
    for file in files {
        specs.push(SpecFile {
            file,
            text: spec::for_prompt(&ctx.workspace, file)?,
        });
    }
    let existing = existing
        .specs
        .iter()
        .map(|s| KnownSpec {
            id: &s.id,
            file: &s.file,
            status: s.status,
            completed: s
                .tasks
                .iter()
                .filter(|t| t.status == Status::Completed)
                .map(|t| t.description.as_str())
                .collect(),
        })
        .collect();
    Ok(ctx
        .prompts
        .render("plan_mode", &BreakdownPrompt { specs, existing })?)
}

/// Every planned spec must be one of the specs given.
fn check_files(answer: &PlanAnswer, files: &[String]) -> Result<(), String> {
    for (i, spec) in answer.specs.iter().enumerate() {
        if !files.contains(&spec.file) {
            return Err(format!(
                "specs[{i}].file {:?} is not one of the specs given: {}",
                spec.file,
                files.join(", ")
            ));
        }
    }
    if answer.specs.is_empty() {
        return Err("give at least one spec".into());
    }
    Ok(())
}

/// Merges plan mode's answer into the existing file (see the module docs).
pub(crate) fn merge(mut plan: Implementation, answer: PlanAnswer) -> Implementation {
    for planned in answer.specs {
        let found = plan
            .specs
            .iter()
            .position(|s| s.id == planned.id || s.file == planned.file);
        match found {
            Some(i) => update_spec(&mut plan.specs[i], planned),
            None => plan.specs.push(new_spec(planned)),
        }
    }
    plan
}

fn new_spec(planned: PlannedSpec) -> SpecEntry {
    let mut spec = SpecEntry::new(planned.id.trim(), planned.file);
    spec.name = planned.name.trim().to_owned();
    spec.priority = planned.priority;
    spec.context = planned.context;
    spec.acceptance_criteria = planned.acceptance_criteria;
    for task in planned.tasks {
        let id = spec.next_task_id();
        spec.tasks.push(
            TaskEntry::new(id, task.description.trim()).with_criteria(task.acceptance_criteria),
        );
    }
    spec
}

fn update_spec(spec: &mut SpecEntry, planned: PlannedSpec) {
    spec.priority = planned.priority;
    if spec.status == Status::Completed {
        return;
    }
    spec.name = planned.name.trim().to_owned();
    spec.context = planned.context;
    spec.acceptance_criteria = planned.acceptance_criteria;
    let same = |a: &str, b: &str| a.trim().eq_ignore_ascii_case(b.trim());
    let (mut tasks, mut open): (Vec<TaskEntry>, Vec<TaskEntry>) = std::mem::take(&mut spec.tasks)
        .into_iter()
        .partition(|t| t.status == Status::Completed);
    // New ids continue above every id the spec ever used, dropped tasks' included.
    let mut numbering = SpecEntry::new(spec.id.clone(), "");
    numbering.tasks = tasks.iter().chain(&open).cloned().collect();
    for proposed in planned.tasks {
        if tasks
            .iter()
            .any(|t| t.status == Status::Completed && same(&t.description, &proposed.description))
        {
            continue;
        }
        let task = match open
            .iter()
            .position(|t| same(&t.description, &proposed.description))
        {
            Some(i) => {
                let mut kept = open.remove(i);
                kept.acceptance_criteria = proposed.acceptance_criteria;
                if kept.status == Status::Blocked {
                    // Planning again is the person's answer to the block: a fresh budget.
                    kept.status = Status::Pending;
                    kept.blocked_reason = None;
                    kept.attempts = 0;
                }
                kept
            }
            None => {
                let id = numbering.next_task_id();
                let task = TaskEntry::new(id, proposed.description.trim())
                    .with_criteria(proposed.acceptance_criteria);
                numbering.tasks.push(task.clone());
                task
            }
        };
        tasks.push(task);
    }
    spec.tasks = tasks;
    // The tasks may have changed: an acceptance of the old ones no longer stands.
    spec.verified = false;
    if spec.status == Status::Blocked {
        spec.status = Status::Pending;
        spec.blocked_reason = None;
        spec.attempts = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answer::PlannedTask;

    fn planned(id: &str, tasks: &[&str]) -> PlannedSpec {
        PlannedSpec {
            id: id.into(),
            name: format!("Spec {id}"),
            file: format!("specs/{id}.md"),
            priority: 1,
            context: String::new(),
            tasks: tasks
                .iter()
                .map(|d| PlannedTask {
                    description: (*d).into(),
                    acceptance_criteria: vec![],
                })
                .collect(),
            acceptance_criteria: vec![],
        }
    }

    #[test]
    fn merging_keeps_completed_tasks_and_gives_new_ones_fresh_ids() {
        let first = merge(
            Implementation::default(),
            PlanAnswer {
                specs: vec![planned("a", &["one", "two", "three"])],
                question: None,
            },
        );
        let ids: Vec<&str> = first.specs[0].tasks.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["a-1", "a-2", "a-3"]);

        let mut done = first.clone();
        done.specs[0].tasks[0].status = Status::Completed;
        done.specs[0].tasks[0].attempts = 2;
        done.specs[0].tasks[1].attempts = 1;
        done.specs[0].tasks[2].status = Status::Blocked;
        let again = merge(
            done,
            PlanAnswer {
                specs: vec![planned("a", &["One", "two", "four", "three"])],
                question: None,
            },
        );
        let tasks: Vec<(&str, &str, Status, u32)> = again.specs[0]
            .tasks
            .iter()
            .map(|t| (t.id.as_str(), t.description.as_str(), t.status, t.attempts))
            .collect();
        assert_eq!(
            tasks,
            [
                ("a-1", "one", Status::Completed, 2),
                ("a-2", "two", Status::Pending, 1),
                ("a-4", "four", Status::Pending, 0),
                ("a-3", "three", Status::Pending, 0),
            ]
        );
    }

    #[test]
    fn completed_specs_are_left_alone() {
        let mut plan = merge(
            Implementation::default(),
            PlanAnswer {
                specs: vec![planned("a", &["one"])],
                question: None,
            },
        );
        plan.specs[0].status = Status::Completed;
        let mut later = planned("a", &["something else"]);
        later.priority = 5;
        let plan = merge(
            plan,
            PlanAnswer {
                specs: vec![later],
                question: None,
            },
        );
        assert_eq!(plan.specs[0].tasks.len(), 1);
        assert_eq!(plan.specs[0].priority, 5);
    }
}
