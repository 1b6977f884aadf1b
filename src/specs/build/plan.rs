//! The planning step of a spec: reuse, adopt or write its plan by the resume rules of
//! [`plan_files`](crate::specs::plan_files), with a read-only planner when one is needed.

use std::path::Path;

use serde::Serialize;

use super::SpecBuild;
use crate::agent::{AgentExit, Role};
use crate::event::Event;
use crate::runtime::call::Call;
use crate::runtime::deadline;
use crate::runtime::error::Error;
use crate::runtime::workspace::state_dir;
use crate::specs::implementation::SpecEntry;
use crate::specs::logs::folder_log;
use crate::specs::plan_files::{Resume, plan_from_answer};
use crate::specs::scratchpad;

/// What the planning step gave.
pub(super) enum PlanStep {
    Ready(String),
    Failed(String),
    /// The planner asked a person this question, and no answer came within
    /// `question_wait`: the spec waits for it.
    Asked(String),
    Interrupted,
}

impl SpecBuild {
    /// An active plan's text, by the resume rules.
    pub(super) async fn ensure_plan(
        &mut self,
        dir: &Path,
        id: &str,
        rel: &str,
    ) -> Result<PlanStep, Error> {
        let (attempt, reason) = match self.plans.resume(rel)? {
            Resume::UseActive => return self.active_plan(rel),
            Resume::Adopt => {
                self.plans.adopt(rel, id)?;
                return self.active_plan(rel);
            }
            Resume::Replan { attempt, reason } => {
                self.keep_invalidated(id, rel, reason.as_deref())?;
                (attempt, reason)
            }
            _ => (1, None),
        };
        let previous = match attempt {
            1 => None,
            n => self.plans.archived(rel, n - 1)?,
        };
        self.run_planner(dir, id, rel, attempt, previous, reason)
            .await
    }

    /// A plan invalidated by hand (its metadata's status set to `invalidated`, the plan
    /// left in place) goes where ralph's own invalidation puts one, `<rel>.attempt-N.md`,
    /// and is announced the same way: the re-planner is then shown it, and it survives.
    fn keep_invalidated(&self, id: &str, rel: &str, reason: Option<&str>) -> Result<(), Error> {
        if let Some(archived) = self.plans.keep_invalidated(rel)? {
            self.emit(Event::PlanInvalidated {
                spec: id.to_owned(),
                reason: reason.unwrap_or("by hand, no reason given").to_owned(),
                archived: crate::runtime::workspace::relative(&self.ctx.workspace, &archived),
            });
        }
        Ok(())
    }

    fn active_plan(&self, rel: &str) -> Result<PlanStep, Error> {
        Ok(match self.plans.load_content(rel)? {
            Some(text) => PlanStep::Ready(text.trim().to_owned()),
            None => PlanStep::Failed("the plan file disappeared".into()),
        })
    }

    /// Runs the read-only planner for spec `id` (its `attempt`-th plan, after the
    /// `previous_plan` invalidated for `reason`), and writes the plan of a valid answer, with
    /// the notes the answer keeps in the scratchpad.
    async fn run_planner(
        &mut self,
        dir: &Path,
        id: &str,
        rel: &str,
        attempt: u32,
        previous_plan: Option<String>,
        reason: Option<String>,
    ) -> Result<PlanStep, Error> {
        let mut call = Call {
            announce: None,
            role: Role::Planner,
            subject: Some(id.to_owned()),
            attempt,
            prompt: self.planner_prompt(dir, id, rel, previous_plan, reason)?,
            deadline: deadline::after(self.ctx.config.stage_timeout),
            log: folder_log(dir, Role::Planner, attempt),
        };
        let run = loop {
            let run = self.caller.call(&mut call).await?;
            if let Some(short) = self.planner_cut_short(&call, &run.exit)? {
                return Ok(short);
            }
            let crate::signal::TaskSignal::Question { question } =
                crate::signal::parse(&run.final_text).task
            else {
                break run;
            };
            if !self.answered(id, &question).await? {
                return Ok(PlanStep::Asked(question));
            }
            // Answered: the planner runs again, with the question and the answer.
            call.attempt += 1;
            call.log = folder_log(dir, Role::Planner, call.attempt);
        };
        self.step = Some(format!("planned {id} (attempt {attempt})"));
        let (answer, notes) = match scratchpad::split(&run.final_text) {
            Ok(split) => split,
            Err(why) => return Ok(PlanStep::Failed(why)),
        };
        let phrase = self.ctx.config.planning.magic_phrase.as_str();
        let text = match plan_from_answer(&answer, phrase) {
            Ok(text) => text,
            Err(why) => return Ok(PlanStep::Failed(why)),
        };
        self.plans.write_plan(rel, id, &text, attempt)?;
        // After the plan: notes of an answer that gave no plan are not kept either.
        if let Some(notes) = notes {
            scratchpad::save(&scratchpad::path(&state_dir(&self.ctx.workspace)), &notes)?;
        }
        self.emit(Event::PlanWritten {
            spec: id.to_owned(),
            attempt,
            path: crate::runtime::workspace::relative(
                &self.ctx.workspace,
                &self.plans.plan_path(rel),
            ),
        });
        Ok(PlanStep::Ready(text))
    }

    /// Records the question spec `id`'s planner asked a person, and waits `question_wait`
    /// for the answer: whether it came.
    async fn answered(&self, id: &str, question: &str) -> Result<bool, Error> {
        let workspace = &self.ctx.workspace;
        let asked = crate::runtime::questions::record(workspace, id, Role::Planner, question)?;
        self.emit(asked);
        Ok(crate::runtime::questions::wait(&self.ctx, &self.emitter, id).await)
    }

    /// The planner's prompt: the spec, where its plan and the scratchpad go, the phrase that
    /// ends the plan, and the previous plan with why it was invalidated when there is one.
    fn planner_prompt(
        &self,
        dir: &Path,
        id: &str,
        rel: &str,
        previous_plan: Option<String>,
        reason: Option<String>,
    ) -> Result<String, Error> {
        #[derive(Serialize)]
        struct PlannerPrompt<'a> {
            spec: &'a SpecEntry,
            spec_text: String,
            workspace: String,
            ralph_home: String,
            log_dir: String,
            spec_path: String,
            plan_path: String,
            scratchpad_path: String,
            phrase: &'a str,
            scratchpad: Option<String>,
            scratchpad_bytes: usize,
            previous_plan: Option<String>,
            reason: Option<String>,
        }
        let entry = self.spec(id)?;
        let workspace = &self.ctx.workspace;
        let shown = |p: &Path| p.display().to_string();
        let scratchpad_path = scratchpad::path(&state_dir(workspace));
        let ctx = PlannerPrompt {
            spec: entry,
            spec_text: self.spec_text(entry)?,
            workspace: shown(workspace),
            ralph_home: shown(&state_dir(workspace)),
            log_dir: shown(dir),
            spec_path: shown(&workspace.join(&entry.file)),
            plan_path: shown(&self.plans.plan_path(rel)),
            scratchpad_path: shown(&scratchpad_path),
            phrase: self.ctx.config.planning.magic_phrase.as_str(),
            scratchpad: scratchpad::read(&scratchpad_path),
            scratchpad_bytes: scratchpad::BYTES,
            previous_plan,
            reason,
        };
        Ok(self.ctx.prompts.render("planner", &ctx)?)
    }

    /// What a planner that did not complete gives (`None` if it completed); an error for a
    /// failure that ends the run.
    fn planner_cut_short(&self, call: &Call, exit: &AgentExit) -> Result<Option<PlanStep>, Error> {
        Ok(Some(match exit {
            AgentExit::Completed => return Ok(None),
            AgentExit::Stopped => PlanStep::Interrupted,
            AgentExit::Failed { reason, kind } if kind.ends_the_run() => {
                return Err(self.caller.fatal(call, reason.clone(), *kind));
            }
            AgentExit::Failed { reason, .. } => PlanStep::Failed(reason.clone()),
            // Ridden out by build mode's caller; kept total.
            AgentExit::RateLimited { .. } => {
                PlanStep::Failed("the planner was rate limited".into())
            }
            exit => {
                let why = exit
                    .kill_reason()
                    .map_or_else(|| "stopped".into(), |r| r.to_string());
                PlanStep::Failed(format!("the planner was stopped ({why})"))
            }
        }))
    }
}
