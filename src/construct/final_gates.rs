//! Complete rests on the required gates having passed on the tree the run ends with.
//!
//! Each task's gates run on the tree of its attempt. A board can still reach COMPLETE with
//! no gate run on its final tree: no task was needed (an investigation found the spec
//! already built), a person accepted every task, or tasks were merged from work trees (each
//! gated on its own branch, not on the merge). So before the verdict, unless the required
//! gates last passed on the current commit, they run once on the work tree; a failure
//! becomes work (an issue naming the gate and its output), never Complete.

use super::{Engine, Flow};
use crate::event::Event;
use crate::model::{Change, Issue, TaskId};
use crate::output::bounded_failure;
use crate::runtime::attempt::{self, AttemptEnd, gate_log_name};
use crate::runtime::error::Error;

/// What the final gate run checks, as the gates' environment names it (no task is built).
const SUBJECT: &str = "final";

/// The origin of an issue a failing final gate run opens.
const ORIGIN: &str = "gates";

impl Engine {
    /// Runs the required gates on the final tree unless they last passed on it: `None`
    /// when they passed (or none is required), so the board is complete;
    /// `Some(Flow::Continue)` when one failed and its issue was opened.
    pub(super) async fn gates_on_final_tree(&mut self) -> Result<Option<Flow>, Error> {
        if !self.ctx.gates.iter().any(|g| g.required()) {
            return Ok(None);
        }
        let tree = self.tree().await?;
        if self.board.run.gates_passed_on.as_deref() == Some(tree.as_str()) {
            return Ok(None);
        }
        self.emit(Event::Warning {
            message: "running the required gates once on the final tree before the \
                      verdict: no run of them passed on it yet (no task needed building, a \
                      person accepted the work, or tasks were merged from their work trees)"
                .to_owned(),
        });
        let subject = TaskId::new(SUBJECT);
        let deadline = crate::runtime::deadline::after(self.config().stage_timeout);
        let run = self
            .ctx
            .gate_run(&self.emitter, deadline, (&subject, "the final tree", 1));
        let logs = &self.logs;
        let log = |gate: &str| logs.stage_file(&gate_log_name(gate, SUBJECT, 1));
        let (end, gate) = attempt::check_gates(&self.ctx.gates, run, log).await?;
        let gate = gate.unwrap_or_default();
        let failure = match end {
            AttemptEnd::Done => {
                self.gates_passed_on(tree).await?;
                return Ok(None);
            }
            AttemptEnd::Failed(failure) => format!(
                "The required gate `{gate}` fails on the final tree:\n\n{}",
                bounded_failure(&failure)
            ),
            AttemptEnd::Killed(_) => {
                format!("The required gate `{gate}` did not finish in time on the final tree.")
            }
            // Interrupted: a check of the gates ends no other way.
            _ => return Ok(Some(Flow::Interrupted)),
        };
        let mut run = self.board.run.clone();
        let id = run.next_issue_id(|id| self.board.issues.contains_key(id));
        let issue = Issue::new(id, failure).with_origin(ORIGIN);
        self.commit(vec![Change::Run(run), Change::Issue(issue)])
            .await?;
        Ok(Some(Flow::Continue))
    }

    /// Records that every required gate passed on `tree` (see [`tree`](Self::tree)).
    pub(super) async fn gates_passed_on(&mut self, tree: String) -> Result<(), Error> {
        let mut run = self.board.run.clone();
        run.gates_passed_on = Some(tree);
        if run != self.board.run {
            self.commit(vec![Change::Run(run)]).await?;
        }
        Ok(())
    }

    /// The tree the workspace holds, as the record of a gate run names it: the branch's
    /// commit, or empty outside git (where a pass on this board counts).
    pub(super) async fn tree(&self) -> Result<String, Error> {
        Ok(match &self.home {
            Some(home) => home.git().head().await?.unwrap_or_default(),
            None => String::new(),
        })
    }
}
