//! One thread, by id: the handle its lifecycle runs through ([`Threads::thread`]), its
//! methods grouped by the phases of seed 001.

use std::path::PathBuf;

use super::{RunConfig, StuckReport, ThreadDryRun, ThreadError, ThreadRecord, Threads, Turn};

/// One thread of a workspace: every step of its lifecycle, from its spec to its commit.
///
/// Made by [`Threads::thread`]; it holds the thread's id and borrows the [`Threads`] it
/// came from, whose settings (agents, quick mode, observers) its calls use. Each call reads
/// the thread's record afresh, so two handles of one thread see each other's changes, and
/// a call in a phase that does not allow it is refused with [`ThreadError::Transition`].
///
/// ```no_run
/// use ralph::{FakeAgent, Ralph};
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let ralph = Ralph::builder().workspace(".").agent(FakeAgent::new()).build()?;
/// let threads = ralph.threads();
/// let record = threads.create("Greeter", "# Greeter\n\n## Acceptance Criteria\n- [ ] `test -f greet.sh`\n")?;
/// let thread = threads.thread(&record.id);
/// thread.finalize()?;
/// let record = thread.start().await?;
/// println!("{}", record.phase);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Thread<'a> {
    threads: &'a Threads,
    id: String,
}

impl<'a> Thread<'a> {
    pub(super) fn new(threads: &'a Threads, id: &str) -> Self {
        Thread {
            threads,
            id: id.to_owned(),
        }
    }

    /// The thread's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The thread's record as it stands now.
    ///
    /// # Errors
    ///
    /// As [`Threads::get`].
    pub fn record(&self) -> Result<ThreadRecord, ThreadError> {
        self.threads.get(&self.id)
    }

    /// The handle that steers this thread's loop while it runs (and between runs): its
    /// guidance, its question's answer, a gentle stop. [`Steering`](crate::steer::Steering)
    /// narrowed to the thread's id.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let ralph = ralph::Ralph::builder().workspace(".").agent(ralph::FakeAgent::new()).build()?;
    /// let threads = ralph.threads();
    /// let steering = threads.thread("greeter").steering().from("ana");
    /// steering.tell("Print the greeting in lower case.")?;
    /// if !steering.questions().is_empty() {
    ///     steering.answer("Yes, a trailing newline.")?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn steering(&self) -> crate::steer::Steering {
        crate::steer::Steering::new(self.threads.workspace()).about(&self.id)
    }

    // ---- The spec, while Drafting and Assessing (checkpoint 1) --------------

    /// Replaces the spec while Drafting: writes the next revision `spec/v<N+1>.md`.
    ///
    /// # Errors
    ///
    /// [`ThreadError::WrongPhase`] outside Drafting.
    pub fn edit_spec(&self, text: &str) -> Result<ThreadRecord, ThreadError> {
        self.threads.edit_spec(&self.id, text)
    }

    /// Drafting: says `message` to a read-only agent about the thread's spec and returns
    /// its reply. The message and the reply are appended to the thread's conversation log
    /// (see [`conversation`](Self::conversation)); the agent sees the spec, the last turns
    /// and what ralph's own parse of the spec finds. When the reply revises the spec, ralph
    /// writes the next revision and the returned turn says so. An unusable answer is
    /// retried once with the parse error shown.
    ///
    /// # Errors
    ///
    /// [`ThreadError::WrongPhase`] outside Drafting; [`ThreadError::Discussion`] when the
    /// agent failed or answered unusably twice (the message stays in the log).
    pub async fn discuss(&self, message: &str) -> Result<Turn, ThreadError> {
        self.threads.discuss(&self.id, message).await
    }

    /// The thread's Drafting conversation, oldest turn first (empty before the first
    /// [`discuss`](Self::discuss)). A final line torn by a crash mid-write is left out.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Corrupt`] naming the file and line of a turn that does not parse;
    /// [`ThreadError::Io`] when the log cannot be read.
    pub fn conversation(&self) -> Result<Vec<Turn>, ThreadError> {
        self.threads.conversation(&self.id)
    }

    /// `threads/<id>/spec/conversation.jsonl`.
    pub fn conversation_path(&self) -> PathBuf {
        self.threads.conversation_path(&self.id)
    }

    /// Drafting → Assessing: the person asks for an AI review of the spec (also from
    /// Assessing, to run it again). The reviewer's feedback is stored in the thread; when it
    /// found issues the thread goes back to Drafting with them, otherwise it stays Assessing
    /// with "ready to finalize". It never finalizes: that is [`finalize`](Self::finalize).
    /// An unusable answer is retried once with the parse error shown.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase; [`ThreadError::Assessment`] when
    /// the agent failed or answered unusably twice (the thread stays Assessing).
    pub async fn assess(&self) -> Result<ThreadRecord, ThreadError> {
        self.threads.assess(&self.id).await
    }

    /// **Checkpoint 1**, Drafting or Assessing → Finalized: the person approves the spec.
    /// Quick mode stops here too: starting is the person's next call.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase.
    pub fn finalize(&self) -> Result<ThreadRecord, ThreadError> {
        self.threads.finalize(&self.id)
    }

    /// Finalized → Drafting: reopen the spec.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase.
    pub fn reopen(&self) -> Result<ThreadRecord, ThreadError> {
        self.threads.reopen(&self.id)
    }

    /// PreflightFailed → Drafting: the spec needs fixes.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase.
    pub fn fix_spec(&self) -> Result<ThreadRecord, ThreadError> {
        self.threads.fix_spec(&self.id)
    }

    // ---- The loop: preflight, configuration and iterations ------------------

    /// Finalized (or PreflightFailed, to retry; or Preflight, when a start was cut short)
    /// → Preflight, then Configuring or
    /// PreflightFailed. The thread takes this handle's settings
    /// ([`run_config`](Threads::run_config)), which Configuring may
    /// change, and preflight checks the agents they name. Entering Preflight from Finalized
    /// captures the git baseline; passing moves the work to the branch `ralph/<id>`. In
    /// quick mode the loop then runs with those settings, up to the next checkpoint.
    ///
    /// The call ends with a [`Finished`](crate::Event::Finished) event (and the hooks on it)
    /// when it fails, when preflight fails, or when quick mode ran the loop; a start that
    /// leaves the thread Configuring ends no run yet.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase; I/O and git errors. Failed checks
    /// are not errors: the thread is PreflightFailed with one message per check.
    /// [`ThreadError::Hook`] when a `required` hook failed (see [`Config`](crate::Config)'s
    /// Hooks); the call's `Finished` event was sent first.
    pub async fn start(&self) -> Result<ThreadRecord, ThreadError> {
        self.threads.start(&self.id).await
    }

    /// Sets the loop's settings while Configuring (seed 001: "models, iterations,
    /// verifiers"): the models ([`RunConfig::agents`], a fallback chain), the verifier
    /// ([`RunConfig::verifier`]), the iterations per round and the limits.
    ///
    /// # Errors
    ///
    /// [`ThreadError::WrongPhase`] outside Configuring; [`ThreadError::Config`] when a
    /// setting is out of range, or `config.agents` or `config.verifier` names an agent not
    /// registered with [`agent`](Threads::agent).
    pub fn configure(&self, config: RunConfig) -> Result<ThreadRecord, ThreadError> {
        self.threads.configure(&self.id, config)
    }

    /// Configuring → Running: runs the loop from iteration 1 until it needs a person
    /// (Implemented, Stuck, Paused; PendingReview in quick mode). Ends with a
    /// [`Finished`](crate::Event::Finished) event, an error included, as
    /// [`resume`](Self::resume), [`manual_assist`](Self::manual_assist) and
    /// [`send_back`](Self::send_back) do.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase; I/O and git errors.
    /// [`ThreadError::Busy`] while a loop runs in another process or handle.
    /// [`ThreadError::Hook`] when a `required` hook failed (see [`Config`](crate::Config)'s
    /// Hooks); the call's `Finished` event was sent first.
    ///
    /// # Cancel safety
    ///
    /// Stop it through [`stop_token`](Threads::stop_token), which saves the thread as Paused;
    /// dropping the future kills the agent but may leave the thread Running.
    pub async fn run(&self) -> Result<ThreadRecord, ThreadError> {
        self.threads.run(&self.id).await
    }

    /// Paused → Running: continues from the interrupted iteration. A thread left Running or
    /// Verifying by a loop that is gone (its process was killed or crashed, the machine went
    /// down, or it stopped on an error) is first recovered as Paused at that iteration, which
    /// then runs again.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase; I/O and git errors.
    /// [`ThreadError::Busy`] while a loop runs in another process or handle.
    /// [`ThreadError::Hook`] when a `required` hook failed (see [`Config`](crate::Config)'s
    /// Hooks); the call's `Finished` event was sent first.
    pub async fn resume(&self) -> Result<ThreadRecord, ThreadError> {
        self.threads.resume(&self.id).await
    }

    /// What the next call that runs thread `id`'s loop would do (see [`ThreadDryRun`]).
    /// Starts no agent or check, takes no lock, writes nothing.
    ///
    /// # Errors
    ///
    /// [`ThreadError::NotFound`], a corrupt record, or an unreadable spec revision.
    pub fn dry_run(&self) -> Result<ThreadDryRun, ThreadError> {
        self.threads.dry_run(&self.id)
    }

    // ---- A stuck thread: the person's choices (checkpoint 2) ----------------

    /// **Checkpoint 2** (Stuck), diagnose: the stuck report; the thread stays Stuck.
    ///
    /// # Errors
    ///
    /// [`ThreadError::WrongPhase`] unless Stuck.
    pub fn diagnose(&self) -> Result<StuckReport, ThreadError> {
        self.threads.diagnose(&self.id)
    }

    /// Paused or Stuck → Configuring: change the settings, keeping the changes made.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase.
    pub fn reconfigure(&self) -> Result<ThreadRecord, ThreadError> {
        self.threads.reconfigure(&self.id)
    }

    /// **Checkpoint 2** (Stuck), manual assist → Running: the person edited files; the loop
    /// runs another round of `max_iterations`.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] unless Stuck.
    /// [`ThreadError::Busy`] while a loop runs in another process or handle.
    /// [`ThreadError::Hook`] when a `required` hook failed (see [`Config`](crate::Config)'s
    /// Hooks); the call's `Finished` event was sent first.
    pub async fn manual_assist(&self) -> Result<ThreadRecord, ThreadError> {
        self.threads.manual_assist(&self.id).await
    }

    /// **Checkpoint 2** (Stuck) or review (PendingReview) → Drafting: the spec was wrong.
    /// Resets the work tree to the baseline, deletes `ralph/<id>`, and writes `new_spec` (if
    /// given) as the next revision.
    ///
    /// The thread's changes are lost: ask the person first ("This will reset changes.
    /// Continue?"), as the `ralph` command does (`ralph thread revise` refuses without
    /// `--yes`).
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from another phase (nothing changes), git errors.
    pub async fn revise(&self, new_spec: Option<&str>) -> Result<ThreadRecord, ThreadError> {
        self.threads.revise(&self.id, new_spec).await
    }

    // ---- Polishing and review (checkpoint 3) --------------------------------

    /// Implemented (or Polishing, to polish again) → Polishing, then one agent run on the
    /// `thread_polish` prompt (docs, tests, cleanup; seed 001's Polishing) and, when it
    /// claims done, every criterion checked as in the loop: all pass → Implemented; else
    /// the thread stays Polishing with the result as its latest attempt (polish again, or
    /// fix by hand and [`polish_done`](Self::polish_done)). An interrupt leaves it
    /// Polishing. Ends with a [`Finished`](crate::Event::Finished) event.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase; [`ThreadError::Busy`] while a
    /// loop runs; I/O and git errors; [`ThreadError::Hook`] when a `required` hook failed.
    pub async fn polish(&self) -> Result<ThreadRecord, ThreadError> {
        self.threads.polish(&self.id).await
    }

    /// Polishing → Implemented.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase.
    pub fn polish_done(&self) -> Result<ThreadRecord, ThreadError> {
        self.threads.polish_done(&self.id)
    }

    /// Implemented → PendingReview, with "recommend approve" when every criterion passed
    /// at the last verification.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase.
    pub fn submit_for_review(&self) -> Result<ThreadRecord, ThreadError> {
        self.threads.submit_for_review(&self.id)
    }

    /// PendingReview → Running: the review found implementation bugs. `feedback` (what the
    /// reviewer found, and what to fix) is kept in the thread
    /// ([`ThreadRecord::feedback`]) and shown in every prompt of the loop, which runs
    /// another round in the same work tree.
    ///
    /// # Errors
    ///
    /// [`ThreadError::NoFeedback`] when `feedback` is empty (nothing changes);
    /// [`ThreadError::Transition`] unless PendingReview.
    /// [`ThreadError::Busy`] while a loop runs in another process or handle.
    /// [`ThreadError::Hook`] when a `required` hook failed (see [`Config`](crate::Config)'s
    /// Hooks); the call's `Finished` event was sent first.
    pub async fn send_back(&self, feedback: &str) -> Result<ThreadRecord, ThreadError> {
        self.threads.send_back(&self.id, feedback).await
    }

    /// **Checkpoint 3**, PendingReview → Approved: seed 001's "this is what will be
    /// committed". The work tree as it is now (ralph's `.ralph/` left out) is recorded as a
    /// git tree ([`ThreadRecord::approved_tree`]); [`commit`](Self::commit) commits only
    /// that tree. Quick mode then prepares the commit message (ReadyToCommit) and stops
    /// there.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase; git errors.
    pub async fn approve(&self) -> Result<ThreadRecord, ThreadError> {
        self.threads.approve(&self.id).await
    }

    // ---- The end: the commit (checkpoint 4), or abandoning it ---------------

    /// Approved → ReadyToCommit with `message`, or one generated from the title and spec.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from any other phase.
    pub fn prepare_commit(&self, message: Option<&str>) -> Result<ThreadRecord, ThreadError> {
        self.threads.prepare_commit(&self.id, message)
    }

    /// **Checkpoint 4**, ReadyToCommit → Done: the person's explicit commit. Commits every
    /// change (except `.ralph/`) on the thread's branch `ralph/<id>` with `message` or the
    /// prepared one; merging it is left to the person.
    ///
    /// Only what was approved is committed: when the work tree is not the tree recorded by
    /// [`approve`](Self::approve) (an edit since, by a person or a tool), nothing is
    /// committed and the thread goes back to PendingReview, since any change needs a review
    /// of its own (seed 001: "Any code changes require re-review").
    ///
    /// # Errors
    ///
    /// [`ThreadError::ChangedSinceApproval`] naming the changed paths (the thread is then
    /// PendingReview); [`ThreadError::Transition`] from any other phase; git errors (a
    /// refusing hook).
    pub async fn commit(&self, message: Option<&str>) -> Result<ThreadRecord, ThreadError> {
        self.threads.commit(&self.id, message).await
    }

    /// The diff of the work tree from the thread's baseline (empty before Preflight).
    ///
    /// # Errors
    ///
    /// git errors.
    pub async fn diff(&self) -> Result<String, ThreadError> {
        self.threads.diff(&self.id).await
    }

    /// Any non-terminal phase → Abandoned. Nothing is deleted: the branch `ralph/<id>`
    /// and every change on it are kept for the person (to read, cherry-pick or delete), and
    /// the spec revisions and run records stay in `.ralph/`. When the work tree is on
    /// `ralph/<id>` and clean (the changes were committed there, or there were none), HEAD
    /// goes back to the baseline branch (or the baseline commit, detached) so the person is
    /// where they started; with uncommitted changes it stays on `ralph/<id>`, since switching
    /// would carry them along or fail.
    ///
    /// # Errors
    ///
    /// [`ThreadError::Transition`] from Done or Abandoned; [`ThreadError::Busy`] when the
    /// thread's loop runs in another live process (pause it first); git errors.
    pub async fn abandon(&self) -> Result<ThreadRecord, ThreadError> {
        self.threads.abandon(&self.id).await
    }
}
