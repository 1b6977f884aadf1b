//! A thread's moves through its lifecycle, as the calls a person (or quick mode) makes: the
//! spec, implementation (preflight, the loop, pause and resume, stuck), polish, review and
//! commit. The four human checkpoints are [`finalize`](Thread::finalize), the choices of a
//! stuck thread, [`approve`](Thread::approve) and [`commit`](Thread::commit).

use super::phase::{Phase, PhaseKind};
use super::record::{RunConfig, StuckReport, ThreadRecord, Turn};
use super::{ThreadError, Threads, preflight, spec, transition};
use crate::event::Event;
use crate::runtime::workspace::RunLock;

impl Threads {
    // ---- Phase 1: the spec --------------------------------------------------------------

    /// See [`Thread::edit_spec`].
    pub(crate) fn edit_spec(&self, id: &str, text: &str) -> Result<ThreadRecord, ThreadError> {
        let mut record = self.get(id)?;
        if record.phase.kind() != PhaseKind::Drafting {
            return Err(Self::wrong_phase(&record, "editing the spec", "Drafting"));
        }
        self.write_spec(&mut record, text)?;
        self.save(&mut record)?;
        Ok(record)
    }

    /// See [`Thread::finalize`].
    pub(crate) fn finalize(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        self.simple(id, Phase::Finalized)
    }

    /// See [`Thread::reopen`].
    pub(crate) fn reopen(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        self.only(id, &[PhaseKind::Finalized], PhaseKind::Drafting)?;
        self.simple(id, Phase::Drafting)
    }

    /// See [`Thread::fix_spec`].
    pub(crate) fn fix_spec(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        self.only(id, &[PhaseKind::PreflightFailed], PhaseKind::Drafting)?;
        self.simple(id, Phase::Drafting)
    }

    // ---- Phase 2: implementation --------------------------------------------------------

    /// See [`Thread::start`].
    pub(crate) async fn start(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        let mut lock = None;
        let result = self.start_locked(id, &mut lock).await;
        // Preflight passed and no loop ran: the thread waits to be configured and run (the
        // `ralph thread start` command runs it at once), so no run has ended yet.
        if let Ok(record) = &result
            && record.phase.kind() == PhaseKind::Configuring
        {
            return result;
        }
        self.ended(id, result).await
    }

    async fn start_locked(
        &self,
        id: &str,
        lock: &mut Option<RunLock>,
    ) -> Result<ThreadRecord, ThreadError> {
        let mut record = self.get(id)?;
        // A thread left in Preflight had its start cut short (its process died): preflight
        // holds no state of its own, so it runs again, once no other start holds the lock.
        let cut_short = record.phase.kind() == PhaseKind::Preflight;
        if !cut_short {
            record = self.load_for(id, PhaseKind::Preflight)?;
        }
        // Configuring starts from the defaults (seed 001: "can use defaults").
        record.config = self.run_config.clone();
        if !cut_short {
            self.advance(&mut record, Phase::Preflight)?;
        }
        // Held from the "no other thread running" check through the loop quick mode runs.
        *lock = match self.lock_runs().await {
            Ok(lock) => Some(lock),
            Err(busy @ ThreadError::Busy { .. }) if cut_short => return Err(busy),
            Err(busy @ ThreadError::Busy { .. }) => {
                let failures = vec![busy.to_string()];
                self.advance(&mut record, Phase::PreflightFailed { failures })?;
                return Ok(record);
            }
            Err(e) => return Err(e),
        };
        let failures = preflight::run(self, &mut record).await?;
        if !failures.is_empty() {
            self.advance(&mut record, Phase::PreflightFailed { failures })?;
            return Ok(record);
        }
        self.advance(&mut record, Phase::Configuring)?;
        if self.quick_for(&record) {
            return self.run_thread(record, lock.as_mut()).await;
        }
        Ok(record)
    }

    /// See [`Thread::configure`].
    pub(crate) fn configure(
        &self,
        id: &str,
        config: RunConfig,
    ) -> Result<ThreadRecord, ThreadError> {
        let mut record = self.get(id)?;
        if record.phase.kind() != PhaseKind::Configuring {
            return Err(Self::wrong_phase(&record, "configure", "Configuring"));
        }
        config
            .validate()
            .and_then(|()| self.every_agent(&config).map(drop))
            .map_err(|reason| ThreadError::Config {
                id: id.to_owned(),
                reason,
            })?;
        record.config = config;
        self.save(&mut record)?;
        Ok(record)
    }

    /// See [`Thread::run`].
    pub(crate) async fn run(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        let mut lock = None;
        let result = async {
            lock = Some(self.lock_runs().await?);
            let record = self.only(id, &[PhaseKind::Configuring], PhaseKind::Running)?;
            self.run_thread(record, lock.as_mut()).await
        }
        .await;
        self.ended(id, result).await
    }

    async fn run_thread(
        &self,
        mut record: ThreadRecord,
        lock: Option<&mut RunLock>,
    ) -> Result<ThreadRecord, ThreadError> {
        record
            .config
            .validate()
            .map_err(|reason| ThreadError::Config {
                id: record.id.clone(),
                reason,
            })?;
        // An unknown agent is refused before the thread moves.
        self.record_agents(&record)?;
        let first = record.attempts.last().map_or(1, |a| a.iteration + 1);
        record.iteration_limit =
            first.saturating_add(record.config.max_iterations.saturating_sub(1));
        record.runner_pid = Some(std::process::id());
        self.advance(&mut record, Phase::Running { iteration: first })?;
        self.drive(record, lock).await
    }

    /// See [`Thread::resume`].
    pub(crate) async fn resume(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        let mut lock = None;
        let result = self.resume_locked(id, &mut lock).await;
        self.ended(id, result).await
    }

    async fn resume_locked(
        &self,
        id: &str,
        lock: &mut Option<RunLock>,
    ) -> Result<ThreadRecord, ThreadError> {
        *lock = Some(self.lock_runs().await?);
        let mut record = self.get(id)?;
        // Under the lock no loop runs anywhere: a thread still Running or Verifying was left
        // by one that ended without saving Paused (its process died, or it stopped on an
        // error such as a record an agent changed), whatever its pid says.
        if matches!(
            record.phase.kind(),
            PhaseKind::Running | PhaseKind::Verifying
        ) {
            self.recover(&mut record)?;
        }
        let Phase::Paused { iteration, .. } = record.phase else {
            return Err(transition(&record, PhaseKind::Running));
        };
        record.runner_pid = Some(std::process::id());
        self.advance(&mut record, Phase::Running { iteration })?;
        self.drive(record, lock.as_mut()).await
    }

    /// A thread left Running or Verifying by a process that died is Paused at the iteration
    /// it was in (through Verifying → Running → Paused, all rows of the table): that
    /// iteration runs again.
    fn recover(&self, record: &mut ThreadRecord) -> Result<(), ThreadError> {
        let iteration = match record.phase {
            Phase::Verifying { iteration } => {
                self.advance(record, Phase::Running { iteration })?;
                iteration
            }
            Phase::Running { iteration } => iteration,
            _ => return Ok(()),
        };
        let criteria_passing = record.attempts.last().map_or(0, |a| a.passed.len());
        let criteria_total = self
            .spec_text(record)
            .ok()
            .and_then(|t| spec::ThreadSpec::parse(&t).ok())
            .map_or(0, |s| s.criteria.len());
        record.runner_pid = None;
        self.advance(
            record,
            Phase::Paused {
                iteration,
                criteria_passing,
                criteria_total,
            },
        )
    }

    /// See [`Thread::reconfigure`].
    pub(crate) fn reconfigure(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        self.only(
            id,
            &[PhaseKind::Paused, PhaseKind::Stuck],
            PhaseKind::Configuring,
        )?;
        self.simple(id, Phase::Configuring)
    }

    /// See [`Thread::manual_assist`].
    pub(crate) async fn manual_assist(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        let mut lock = None;
        let result = async {
            lock = Some(self.lock_runs().await?);
            let record = self.get(id)?;
            if record.phase.kind() != PhaseKind::Stuck {
                return Err(transition(&record, PhaseKind::Running));
            }
            self.run_thread(record, lock.as_mut()).await
        }
        .await;
        self.ended(id, result).await
    }

    /// See [`Thread::diagnose`].
    pub(crate) fn diagnose(&self, id: &str) -> Result<StuckReport, ThreadError> {
        let record = self.get(id)?;
        match (&record.phase, record.stuck) {
            (Phase::Stuck { .. }, Some(report)) => Ok(report),
            _ => Err(Self::wrong_phase(&self.get(id)?, "diagnose", "Stuck")),
        }
    }

    /// See [`Thread::revise`].
    pub(crate) async fn revise(
        &self,
        id: &str,
        new_spec: Option<&str>,
    ) -> Result<ThreadRecord, ThreadError> {
        let mut record = self.load_for(id, PhaseKind::Drafting)?;
        if !matches!(
            record.phase.kind(),
            PhaseKind::Stuck | PhaseKind::PendingReview
        ) {
            return Err(transition(&record, PhaseKind::Drafting));
        }
        self.reset_to_baseline(&mut record).await?;
        if let Some(text) = new_spec {
            self.write_spec(&mut record, text)?;
        }
        record.attempts.clear();
        record.closest = None;
        record.feedback.clear();
        self.advance(&mut record, Phase::Drafting)?;
        Ok(record)
    }

    async fn reset_to_baseline(&self, record: &mut ThreadRecord) -> Result<(), ThreadError> {
        let git = self.git();
        if let Some(baseline) = &record.baseline {
            // Leaves `ralph/<id>` for the baseline branch, or the baseline commit detached.
            git.reset_to(baseline, &self.kept_out()).await?;
            if let Some(branch) = &record.branch
                && git.branch_exists(branch).await?
            {
                git.delete_branch(branch).await?;
            }
        }
        record.baseline = None;
        record.branch = None;
        Ok(())
    }

    // ---- Phases 3–5: polish (the agent's run: `polish`), review, commit -----------------

    /// See [`Thread::polish_done`].
    pub(crate) fn polish_done(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        self.only(id, &[PhaseKind::Polishing], PhaseKind::Implemented)?;
        self.simple(id, Phase::Implemented)
    }

    /// See [`Thread::submit_for_review`].
    pub(crate) fn submit_for_review(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        let mut record = self.load_for(id, PhaseKind::PendingReview)?;
        let recommend_approve = all_passed(&record);
        self.advance(&mut record, Phase::PendingReview { recommend_approve })?;
        Ok(record)
    }

    /// See [`Thread::send_back`].
    pub(crate) async fn send_back(
        &self,
        id: &str,
        feedback: &str,
    ) -> Result<ThreadRecord, ThreadError> {
        let mut lock = None;
        let result = async {
            lock = Some(self.lock_runs().await?);
            let mut record = self.get(id)?;
            if record.phase.kind() != PhaseKind::PendingReview {
                return Err(transition(&record, PhaseKind::Running));
            }
            if feedback.trim().is_empty() {
                return Err(ThreadError::NoFeedback { id: id.to_owned() });
            }
            let said = Turn::new("reviewer", feedback.trim(), record.spec_version);
            record.feedback.push(said);
            record.approved_tree = None;
            self.run_thread(record, lock.as_mut()).await
        }
        .await;
        self.ended(id, result).await
    }

    /// Ends a call that ran thread `id`'s loop or preflight, an error included: its
    /// `Finished` event (the thread, the phase it was left in, whether it waits for a
    /// person) and the hooks on it, while the call still holds the workspace's lock.
    pub(super) async fn ended(
        &self,
        id: &str,
        result: Result<ThreadRecord, ThreadError>,
    ) -> Result<ThreadRecord, ThreadError> {
        let event = match &result {
            Ok(record) => {
                let kind = record.phase.kind();
                Event::finished(
                    "thread",
                    ended_message(record),
                    exit_code(kind),
                    kind.needs_person(),
                )
                .of_thread(id, Some(kind.as_str()))
            }
            Err(e) => {
                let phase = self.get(id).ok().map(|r| r.phase.kind().as_str());
                Event::failed("thread", &format!("thread {id}"), e).of_thread(id, phase)
            }
        };
        let scope = super::call::spend_scope(id);
        let event = crate::runtime::spend::stamped(event, &self.ctx.workspace, &scope);
        let hooks = self.emitter.finish(event).await;
        let record = result?;
        hooks?;
        Ok(record)
    }

    /// See [`Thread::approve`].
    pub(crate) async fn approve(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        let mut record = self.load_for(id, PhaseKind::Approved)?;
        record.approved_tree = Some(self.git().work_tree_id(&self.kept_out()).await?);
        self.advance(&mut record, Phase::Approved)?;
        if self.quick_for(&record) {
            return self.prepare_commit(id, None);
        }
        Ok(record)
    }

    /// See [`Thread::prepare_commit`].
    pub(crate) fn prepare_commit(
        &self,
        id: &str,
        message: Option<&str>,
    ) -> Result<ThreadRecord, ThreadError> {
        let mut record = self.load_for(id, PhaseKind::ReadyToCommit)?;
        let message = match message {
            Some(m) => m.to_owned(),
            None => format!(
                "{}\n\nImplemented by ralph (thread {}, spec v{}).",
                record.title, record.id, record.spec_version
            ),
        };
        self.advance(&mut record, Phase::ReadyToCommit { message })?;
        Ok(record)
    }

    /// See [`Thread::commit`].
    pub(crate) async fn commit(
        &self,
        id: &str,
        message: Option<&str>,
    ) -> Result<ThreadRecord, ThreadError> {
        let mut record = self.load_for(id, PhaseKind::Done)?;
        let Phase::ReadyToCommit { message: prepared } = &record.phase else {
            return Err(transition(&record, PhaseKind::Done));
        };
        let message = message.unwrap_or(prepared).to_owned();
        let git = self.git();
        if let Some(branch) = &record.branch
            && git.current_branch().await?.as_deref() != Some(branch.as_str())
        {
            git.switch(branch).await?;
        }
        self.check_approved(&mut record).await?;
        let commit = git.commit_all(&message, &self.kept_out()).await?;
        self.advance(&mut record, Phase::Done { commit })?;
        self.end_guidance(&record.id);
        Ok(record)
    }

    /// Refuses a work tree that is not the approved one, sending the thread back to review.
    /// A thread approved by an earlier ralph, which recorded no tree, is taken as it is.
    async fn check_approved(&self, record: &mut ThreadRecord) -> Result<(), ThreadError> {
        let Some(approved) = record.approved_tree.clone() else {
            return Ok(());
        };
        let git = self.git();
        let now = git.work_tree_id(&self.kept_out()).await?;
        if now == approved {
            return Ok(());
        }
        // The approved tree is an unreferenced object: a `git gc` may have pruned it.
        let paths = git
            .tree_changes(&approved, &now)
            .await
            .unwrap_or_else(|e| vec![format!("(the paths could not be listed: {e})")]);
        record.approved_tree = None;
        self.advance(
            record,
            Phase::PendingReview {
                recommend_approve: false,
            },
        )?;
        Err(ThreadError::ChangedSinceApproval {
            id: record.id.clone(),
            paths,
        })
    }

    /// See [`Thread::abandon`].
    pub(crate) async fn abandon(&self, id: &str) -> Result<ThreadRecord, ThreadError> {
        let mut record = self.load_for(id, PhaseKind::Abandoned)?;
        // A loop running elsewhere would overwrite the abandoned record with its next phase.
        let _lock = if matches!(
            record.phase.kind(),
            PhaseKind::Running | PhaseKind::Verifying
        ) {
            let lock = self.lock_runs().await?;
            record = self.load_for(id, PhaseKind::Abandoned)?;
            Some(lock)
        } else {
            None
        };
        self.leave_branch(&record).await?;
        record.runner_pid = None;
        self.advance(&mut record, Phase::Abandoned)?;
        self.end_guidance(&record.id);
        Ok(record)
    }

    /// Ends the guidance for thread `id` (`ralph tell --thread`): it is Done or Abandoned.
    fn end_guidance(&self, id: &str) {
        let journal = crate::runtime::guidance::Journal::in_state(&self.root);
        if let Err(e) = journal.end(|scope| scope == Some(id)) {
            self.emitter.emit(&crate::event::Event::Warning {
                message: format!("the guidance for thread {id} was not marked ended: {e}"),
            });
        }
    }

    /// Back to the baseline when on the thread's branch with nothing uncommitted.
    async fn leave_branch(&self, record: &ThreadRecord) -> Result<(), ThreadError> {
        let (Some(branch), Some(baseline)) = (&record.branch, &record.baseline) else {
            return Ok(());
        };
        let git = self.git();
        if git.current_branch().await?.as_deref() != Some(branch.as_str())
            || !git.changes(&self.kept_out()).await?.is_empty()
        {
            return Ok(());
        }
        match &baseline.branch {
            Some(base) => git.switch(base).await?,
            None => git.detach(&baseline.commit_sha).await?,
        }
        Ok(())
    }

    /// See [`Thread::diff`].
    pub(crate) async fn diff(&self, id: &str) -> Result<String, ThreadError> {
        let record = self.get(id)?;
        match &record.baseline {
            Some(b) => Ok(self
                .git()
                .diff_from(&b.commit_sha, &self.kept_out())
                .await?),
            None => Ok(String::new()),
        }
    }
}

/// Whether the latest attempt passed every criterion.
fn all_passed(record: &ThreadRecord) -> bool {
    record
        .attempts
        .last()
        .is_some_and(|a| a.failed.is_empty() && !a.passed.is_empty())
}

/// How a call that ran a thread's loop left it, as a person reads it: `thread 1 is Stuck:
/// Stopped: max iterations (5) reached`.
fn ended_message(record: &ThreadRecord) -> String {
    let id = &record.id;
    match &record.phase {
        Phase::Stuck { reason } => format!("thread {id} is Stuck: {reason}"),
        Phase::PreflightFailed { failures } => {
            format!("thread {id} is PreflightFailed: {}", failures.join("; "))
        }
        Phase::Paused {
            iteration,
            criteria_passing,
            criteria_total,
        } => format!(
            "thread {id} is Paused at iteration {iteration} ({criteria_passing}/{criteria_total} criteria passing)"
        ),
        Phase::PendingReview { recommend_approve } => format!(
            "thread {id} is PendingReview{}",
            if *recommend_approve {
                ": every criterion passed, review recommended"
            } else {
                ""
            }
        ),
        phase => format!("thread {id} is {phase}"),
    }
}

/// The exit code `ralph thread` uses for a call that left the thread in `phase`: 2 Stuck,
/// 3 PreflightFailed, 130 Paused (interrupted), 0 otherwise.
fn exit_code(phase: PhaseKind) -> i32 {
    match phase {
        PhaseKind::Stuck => 2,
        PhaseKind::PreflightFailed => 3,
        PhaseKind::Paused => 130,
        _ => 0,
    }
}
