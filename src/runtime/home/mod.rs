//! The user's branch: recorded when a run starts, checked after every agent run, and put
//! back when an agent moved it; and the turns of work ralph commits on it.
//!
//! ralph's work lands on the branch the user had checked out when the run started (in the
//! construct loop, one commit per task; in build mode, one per spec). An agent runs with
//! the repository at hand and can switch branch, reset, or rewrite what ralph committed;
//! without a check the run would report work done that never reached the user's branch, and
//! could leave the user on the agent's branch. After every agent run the branch is checked:
//! still checked out, and still holding the newest commit ralph knows on it (commits on top,
//! the agent's own or the user's, are fine). When not, ralph puts it back and the attempt
//! fails with what happened as its retry feedback.
//!
//! # Turns
//!
//! Work done in the user's own work tree (a task of the construct loop, one at a time; a
//! spec of build mode) is a *turn*. So that ralph never sweeps the user's own edits into
//! its commits:
//!
//! - a run refuses to start over uncommitted changes to tracked files
//!   ([`Home::uncommitted`]), unless they are an interrupted turn's;
//! - a turn notes the untracked files already there (`.ralph/turn.json`) and leaves them
//!   out of its commit ([`Home::commit_turn`]);
//! - what a turn that ends without passing changed is moved into a stash entry
//!   ([`Home::set_aside`]), so the next turn starts from the branch and nothing is lost.
//!
//! The note outlives a crash or a stop. It holds a record of the tree as the turn's last
//! attempt left it ([`TreeRecord`]), so the next run takes up the same turn with nothing
//! but its work ([`Home::resume`]): after a stop in order, a change a person made since
//! is refused; after a kill or a crash, the cut-short attempt's work is set aside and the
//! attempt runs again.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod gates;
mod record;

pub(crate) use self::gates::GatesWatch;
use self::record::TreeRecord;
use crate::event::Event;
use crate::files::atomic;
use crate::git::{Git, GitError};
use crate::runtime::error::Error;
use crate::runtime::workspace;

/// The user's branch as ralph last saw it.
#[derive(Clone, Debug)]
pub(crate) struct Home {
    git: Git,
    /// The branch checked out when the run started; `None` for a detached HEAD.
    branch: Option<String>,
    /// The newest commit ralph knows on it: the start, then each commit ralph made or
    /// merged, or found on top.
    head: String,
    /// ralph's own paths (its state, its logs), which putting the branch back leaves alone.
    kept_out: Vec<String>,
    /// Where the workspace is in the work tree (`sub/`, or empty at its top).
    prefix: String,
    /// Files ralph keeps for people in the work tree (`implementation.json`, a progress
    /// file): committed with the work, never counted as the user's edits.
    bookkeeping: Vec<String>,
    /// Folders ralph itself writes in between a turn's attempts (build mode's plan files,
    /// archived and invalidated by ralph), relative to the top of the work tree and ending
    /// in `/`: left out of the turn's record.
    written_between: Vec<String>,
    /// Where the current turn is noted.
    note: PathBuf,
    /// The top of the work tree, where git's paths start.
    top: PathBuf,
}

/// A turn of work in the user's work tree, as noted when it began.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TurnNote {
    /// What the turn works on: a task (`t-3`) or a spec.
    pub(crate) subject: String,
    /// The branch's head when it began.
    pub(crate) head: String,
    /// The untracked files that were there before (the user's), relative to the top of the
    /// work tree: never committed or set aside by ralph.
    pub(crate) untracked: Vec<String>,
    /// New files its gates wrote (a report, a cache): never its work, so never committed
    /// or set aside with it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) gate_output: Vec<String>,
    /// The tree as its last finished attempt left it; `None` before the first ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) record: Option<TreeRecord>,
}

/// How [`Home::resume`] found the work tree.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Resumed {
    /// No turn was left, or it was taken up as it was left.
    AsLeft,
    /// A run was killed during an attempt: what the attempt changed (and anything since)
    /// is in this stash entry, these paths; the rest of the turn is taken up.
    SetAside { entry: String, paths: Vec<String> },
}

impl Resumed {
    /// The warning that names what was set aside, if anything.
    pub(crate) fn warning(self) -> Option<Event> {
        let Resumed::SetAside { entry, paths } = self else {
            return None;
        };
        Some(Event::Warning {
            message: format!(
                "an attempt was cut short by a kill or a crash: what it changed ({}) is kept \
                 in `git stash list` as \"{entry}\", unjudged and uncommitted; the attempt \
                 runs again",
                crate::output::list_some(&paths, 5)
            ),
        })
    }
}

impl Home {
    /// The branch checked out in `git`'s folder, the workspace, now; `None` outside a git
    /// repository or before its first commit (ralph then commits nothing). `kept_out` are
    /// ralph's own paths, relative to the workspace (which may be a folder inside the
    /// repository).
    ///
    /// # Errors
    ///
    /// [`GitError::Unavailable`] in a repository where git cannot run (a run would say
    /// Complete and commit nothing); [`GitError`] when git fails.
    pub(crate) async fn record(git: Git, kept_out: Vec<String>) -> Result<Option<Home>, GitError> {
        let dir = git.dir().to_path_buf();
        if !git.is_repo().await {
            git.refuse_unrunnable().await?;
            return Ok(None);
        }
        let Some(head) = git.head().await? else {
            return Ok(None);
        };
        let prefix = git.prefix().await?;
        let kept_out = kept_out
            .into_iter()
            .map(|path| format!("{prefix}{path}"))
            .collect();
        let note = workspace::state_dir(&dir).join(TURN_NOTE);
        let depth = Path::new(&prefix).components().count();
        let top = dir.ancestors().nth(depth).unwrap_or(&dir).to_path_buf();
        let home = Home {
            branch: git.current_branch().await?,
            head,
            git,
            kept_out,
            prefix,
            bookkeeping: Vec::new(),
            written_between: Vec::new(),
            note,
            top,
        };
        // A run killed while its gates ran left the user's files aside.
        home.restore_aside();
        Ok(Some(home))
    }

    /// With `paths` (relative to the workspace) as ralph's files for people: committed with
    /// the work, never counted as the user's edits or untracked files; and with `folders`
    /// (relative to the workspace) as those ralph writes in between a turn's attempts (build
    /// mode's plans): their files are committed with the work, and left out of the turn's
    /// record.
    #[must_use]
    pub(crate) fn with_bookkeeping(mut self, paths: &[String], folders: &[&Path]) -> Self {
        self.bookkeeping = paths
            .iter()
            .map(|p| format!("{}{p}", self.prefix))
            .collect();
        self.written_between = folders
            .iter()
            .map(|folder| {
                let folder = folder.to_string_lossy();
                format!("{}{}/", self.prefix, folder.trim_end_matches('/'))
            })
            .collect();
        self
    }

    /// `main`, or `the detached HEAD`.
    pub(crate) fn name(&self) -> String {
        match &self.branch {
            Some(branch) => format!("branch {branch}"),
            None => "the detached HEAD".to_owned(),
        }
    }

    /// The newest commit ralph knows on the branch.
    pub(crate) fn head(&self) -> &str {
        &self.head
    }

    /// Git in the user's work tree.
    pub(crate) fn git(&self) -> &Git {
        &self.git
    }

    /// ralph's own paths, relative to the top of the work tree.
    pub(crate) fn kept_out(&self) -> Vec<&str> {
        self.kept_out.iter().map(String::as_str).collect()
    }

    /// ralph moved the branch itself (its commit, a merge) to `head`.
    pub(crate) fn advanced(&mut self, head: String) {
        self.head = head;
    }

    /// Whether `commit` is on the branch (the newest commit ralph knows, or before it).
    ///
    /// # Errors
    ///
    /// [`GitError`] when git cannot run.
    pub(crate) async fn holds(&self, commit: &str) -> Result<bool, GitError> {
        self.git.is_ancestor(commit, &self.head).await
    }

    /// Checks that the branch is still checked out and still holds what ralph committed.
    /// `Ok(None)` when it does (commits on top are taken in); otherwise ralph puts it back and
    /// says what the agent did, in words meant for the agent's next attempt.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails, or the branch cannot be put back.
    pub(crate) async fn check(&mut self) -> Result<Option<String>, GitError> {
        let mut moved = Vec::new();
        let (branch, mut head) = self.git.position().await?;
        if branch != self.branch {
            moved.push(match &branch {
                Some(other) => format!("switched to branch {other}"),
                None => "detached HEAD".to_owned(),
            });
            self.switch_back(branch.as_deref()).await?;
            // Back on the branch: its head is what counts, not the other one's.
            head = self.git.head().await?;
        }
        match head {
            Some(head) if self.git.is_ancestor(&self.head, &head).await? => self.head = head,
            head => {
                moved.push(format!(
                    "moved {} from {} to {} (a reset, or a rewrite of what ralph committed)",
                    self.name(),
                    short(&self.head),
                    head.as_deref().map_or("nothing", short)
                ));
                self.git.reset_keep(&self.head).await?;
            }
        }
        Ok((!moved.is_empty()).then(|| {
            format!(
                "The agent {}. ralph commits each task's work on {} itself and put it back: \
                 stay on the checked-out branch, and do not create branches, reset, or rewrite \
                 commits.",
                moved.join(" and "),
                self.name()
            )
        }))
    }

    /// Checks the user's branch out again. Only when what the agent left uncommitted on the
    /// other branch is in the way is it moved into a stash entry first (the user's own
    /// untracked files, noted when the turn began, stay where they are), so the switch cannot
    /// fail on it or lose it.
    async fn switch_back(&self, from: Option<&str>) -> Result<(), GitError> {
        if self.switch_home().await.is_ok() {
            return Ok(());
        }
        let theirs: Vec<String> = self.noted()?.map(|t| t.untracked).unwrap_or_default();
        let left: Vec<String> = self
            .git
            .changed_paths(&self.kept_out())
            .await?
            .into_iter()
            .map(|(path, _)| path)
            .filter(|path| !theirs.contains(path))
            .collect();
        let place = from.map_or_else(|| "a detached HEAD".to_owned(), |b| format!("branch {b}"));
        self.git
            .stash_paths(&format!("ralph: what an agent left on {place}"), &left)
            .await?;
        self.switch_home().await
    }

    async fn switch_home(&self) -> Result<(), GitError> {
        match &self.branch {
            Some(branch) => self.git.switch(branch).await,
            None => self.git.detach(&self.head).await,
        }
    }
}

/// The file that notes the current turn, in ralph's state folder.
const TURN_NOTE: &str = "turn.json";

/// How the tree a turn's record notes was left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Left {
    /// By an attempt that ended: what a kill during the next leaves beyond it is that one's.
    Attempt,
    /// By a run that stopped in order: a later change is a person's.
    Stopped,
    /// By a commit git refused: the person's fix is the turn's.
    Refused,
}

impl Home {
    /// The turn noted by an earlier run that did not end it, if any. A note that does not
    /// parse counts as none: it only says whose leftovers the work tree holds.
    ///
    /// # Errors
    ///
    /// [`GitError::Io`] naming the note when it cannot be read.
    pub(crate) fn noted(&self) -> Result<Option<TurnNote>, GitError> {
        match std::fs::read_to_string(&self.note) {
            Ok(text) => Ok(serde_json::from_str(&text).ok()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(self.io(source)),
        }
    }

    /// The tracked files with uncommitted changes that are not ralph's own nor an
    /// interrupted turn's: the user's edits, which a run that commits in the user's work
    /// tree must not start over.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails.
    pub(crate) async fn uncommitted(&self) -> Result<Vec<String>, GitError> {
        if self.noted()?.is_some() {
            return Ok(Vec::new());
        }
        Ok(self
            .changed()
            .await?
            .into_iter()
            .filter(|(path, untracked)| !untracked && !self.bookkeeping.contains(path))
            .map(|(path, _)| path)
            .collect())
    }

    /// Refuses to work in the user's work tree over their uncommitted edits to tracked
    /// files ([`Error::Uncommitted`], which says how to go on).
    ///
    /// # Errors
    ///
    /// [`Error::Uncommitted`]; [`Error::Git`] when git fails.
    pub(crate) async fn refuse_uncommitted(&self) -> Result<(), Error> {
        let paths = self.uncommitted().await?;
        match paths.is_empty() {
            true => Ok(()),
            false => Err(Error::Uncommitted {
                paths,
                branch: self.name(),
                since: None,
            }),
        }
    }

    /// Refuses to hand the work tree to another board (a spec switch) while it holds work
    /// the next run would commit as that board's: an interrupted turn's or the user's edits
    /// of tracked files ([`Error::Uncommitted`], which says how to set them aside). The
    /// note of a turn that left nothing is forgotten: it belongs to the board switched from.
    ///
    /// # Errors
    ///
    /// [`Error::Uncommitted`]; [`Error::Git`] when git fails.
    pub(crate) async fn hand_over(&self) -> Result<(), Error> {
        let turn = self.noted()?;
        let mut paths = match &turn {
            Some(turn) => self.turn_paths(turn).await?,
            None => self.uncommitted().await?,
        };
        paths.retain(|path| !self.bookkeeping.contains(path));
        if !paths.is_empty() {
            return Err(Error::Uncommitted {
                paths,
                branch: self.name(),
                since: turn.map(|t| t.subject),
            });
        }
        Ok(self.end_turn()?)
    }

    /// Begins a turn on `subject`, noting the untracked files already there. Returns the
    /// turn of another subject an earlier run left unfinished, for the caller to
    /// [`set_aside`](Self::set_aside) first; the same subject's turn is simply taken up.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails or the note cannot be written.
    pub(crate) async fn begin_turn(&self, subject: &str) -> Result<Option<TurnNote>, GitError> {
        let left = match self.noted()? {
            Some(turn) if turn.subject == subject => return Ok(None),
            other => other,
        };
        if left.is_some() {
            return Ok(left);
        }
        let turn = TurnNote {
            subject: subject.to_owned(),
            head: self.head.clone(),
            untracked: self
                .changed()
                .await?
                .into_iter()
                .filter(|(path, untracked)| *untracked && !self.bookkeeping.contains(path))
                .map(|(path, _)| path)
                .collect(),
            gate_output: Vec::new(),
            record: None,
        };
        self.write_note(&turn)?;
        Ok(None)
    }

    fn write_note(&self, turn: &TurnNote) -> Result<(), GitError> {
        let bytes = serde_json::to_vec(turn).unwrap_or_default();
        atomic::replace(&self.note, &bytes).map_err(|e| self.io(e))
    }

    /// Notes the tree as the attempt that just ended left it, in the noted turn (if any):
    /// what a kill during the next attempt leaves beyond it is that attempt's.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails or the note cannot be written.
    pub(crate) async fn note_attempt(&self) -> Result<(), GitError> {
        self.note_record(Left::Attempt).await
    }

    /// Notes the tree as a run that stops in order leaves it, its agents stopped: what
    /// changes before the next run is a person's.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails or the note cannot be written.
    pub(crate) async fn note_stop(&self) -> Result<(), GitError> {
        self.note_record(Left::Stopped).await
    }

    async fn note_record(&self, left: Left) -> Result<(), GitError> {
        let Some(mut turn) = self.noted()? else {
            return Ok(());
        };
        let mut record = self.record_now(&turn).await?;
        record.stopped = left == Left::Stopped;
        record.refused = left == Left::Refused;
        turn.record = Some(record);
        self.write_note(&turn)
    }

    /// The turn's paths as they are now, ralph's files for people and the folders it
    /// writes in between attempts left out (they are checked as the board's files are).
    async fn record_now(&self, turn: &TurnNote) -> Result<TreeRecord, GitError> {
        let paths: Vec<String> = self
            .turn_paths(turn)
            .await?
            .into_iter()
            .filter(|path| !self.bookkeeping.contains(path))
            .filter(|path| !self.written_between.iter().any(|f| path.starts_with(f)))
            .collect();
        Ok(TreeRecord::of(&self.top, &paths))
    }

    /// Takes up the turn an earlier run left, at the start of a run, so that nothing but
    /// the turn's work reaches its commit; with no turn left, refuses the user's own
    /// uncommitted edits ([`refuse_uncommitted`](Self::refuse_uncommitted)).
    ///
    /// After a stop in order, a change beyond the tree as that run left it is a person's:
    /// refused, naming it ([`Error::Uncommitted`] with `since`). After a kill or a crash,
    /// what changed beyond the last finished attempt is the cut-short attempt's unjudged
    /// work, or a person's since: moved into a stash entry ([`Resumed::SetAside`]).
    ///
    /// # Errors
    ///
    /// [`Error::Uncommitted`]; [`Error::Git`] when git fails.
    pub(crate) async fn resume(&self) -> Result<Resumed, Error> {
        let Some(mut turn) = self.noted()? else {
            self.refuse_uncommitted().await?;
            return Ok(Resumed::AsLeft);
        };
        let record = turn.record.take().unwrap_or_default();
        let now = self.record_now(&turn).await?;
        let beyond = record.beyond(&now);
        if record.stopped && !beyond.is_empty() {
            return Err(Error::Uncommitted {
                paths: beyond,
                branch: self.name(),
                since: Some(turn.subject),
            });
        }
        let resumed = match beyond.is_empty() {
            true => Resumed::AsLeft,
            false => {
                let entry = format!(
                    "ralph: {}'s attempt cut short by a kill or a crash",
                    turn.subject
                );
                self.git.stash_paths(&entry, &beyond).await?;
                Resumed::SetAside {
                    entry,
                    paths: beyond,
                }
            }
        };
        // This run's own attempts are judged against the tree as it is now.
        let mut taken_up = self.record_now(&turn).await?;
        taken_up.stopped = false;
        turn.record = Some(taken_up);
        self.write_note(&turn)?;
        Ok(resumed)
    }

    /// Commits what the noted turn changed with `message`; returns the new commit, or
    /// `None` when there is no turn or nothing to commit. The turn stays noted until
    /// [`end_turn`](Self::end_turn); when git refuses the commit it is noted as refused,
    /// and the next run takes the tree up as it finds it.
    ///
    /// # Errors
    ///
    /// [`GitError::CommitRefused`] when a hook refuses the commit or git cannot sign it;
    /// [`GitError`] when git fails otherwise.
    pub(crate) async fn commit_turn(&mut self, message: &str) -> Result<Option<String>, GitError> {
        let Some(turn) = self.noted()? else {
            return Ok(None);
        };
        let paths = self.turn_paths(&turn).await?;
        let commit = match self.git.commit_paths(message, &paths).await {
            // The work stays the turn's, as the refusal left it (a hook may have rewritten
            // files); the next run takes it up with the person's fix.
            Err(refused @ GitError::CommitRefused { .. }) => {
                self.note_record(Left::Refused).await?;
                return Err(refused);
            }
            other => other?,
        };
        if let Some(commit) = &commit {
            self.head = commit.clone();
        }
        Ok(commit)
    }

    /// Moves what `turn` changed into a stash entry named `ralph: <subject>'s unfinished
    /// work (<why>)` and ends it; returns the entry's name, or `None` when it changed
    /// nothing.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails.
    pub(crate) async fn set_aside(
        &mut self,
        turn: &TurnNote,
        why: &str,
    ) -> Result<Option<String>, GitError> {
        let label = format!("ralph: {}'s unfinished work", turn.subject);
        self.set_aside_as(turn, &label, why).await
    }

    /// [`set_aside`](Self::set_aside) into an entry named `<label> (<why>)`.
    ///
    /// # Errors
    ///
    /// [`GitError`] when git fails.
    pub(crate) async fn set_aside_as(
        &mut self,
        turn: &TurnNote,
        label: &str,
        why: &str,
    ) -> Result<Option<String>, GitError> {
        let mut paths = self.turn_paths(turn).await?;
        // ralph's files for people hold the run's state (implementation.json, a progress
        // file): they stay, whatever the turn's work.
        paths.retain(|path| !self.bookkeeping.contains(path));
        let message = format!("{label} ({why})");
        let stashed = self.git.stash_paths(&message, &paths).await?;
        self.end_turn()?;
        Ok(stashed.then_some(message))
    }

    /// Forgets the noted turn.
    ///
    /// # Errors
    ///
    /// [`GitError::Io`] naming the note when it cannot be removed.
    pub(crate) fn end_turn(&self) -> Result<(), GitError> {
        match std::fs::remove_file(&self.note) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(self.io(e)),
            _ => Ok(()),
        }
    }

    /// The paths `turn` changed: every change in the work tree but ralph's own files, the
    /// untracked files that were there before it, and the files its gates wrote.
    async fn turn_paths(&self, turn: &TurnNote) -> Result<Vec<String>, GitError> {
        let not_its: HashSet<&str> = turn
            .untracked
            .iter()
            .chain(&turn.gate_output)
            .map(String::as_str)
            .collect();
        Ok(self
            .changed()
            .await?
            .into_iter()
            .filter(|(path, untracked)| !(*untracked && not_its.contains(path.as_str())))
            .map(|(path, _)| path)
            .collect())
    }

    /// Every change in the work tree but ralph's own files.
    async fn changed(&self) -> Result<Vec<(String, bool)>, GitError> {
        self.git.changed_paths(&self.kept_out()).await
    }

    fn io(&self, source: std::io::Error) -> GitError {
        GitError::Io {
            path: self.note.clone(),
            source,
        }
    }
}

/// The first 12 hex digits of a commit.
fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}
