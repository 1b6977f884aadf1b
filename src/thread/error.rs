//! What a thread operation can fail with.

use std::path::PathBuf;

use super::phase::{PhaseKind, TransitionError};
use crate::git::GitError;

/// A thread operation failed. Refused moves name both phases.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ThreadError {
    /// The move is not in seed 001's tables.
    #[error("thread {id}: a thread cannot go from {from} to {to}")]
    Transition {
        /// The thread.
        id: String,
        /// The phase the thread is in.
        from: PhaseKind,
        /// The phase asked for.
        to: PhaseKind,
    },
    /// The call needs a phase the thread is not in (a data-only call such as `configure`).
    #[error("thread {id} is {phase}; {action} needs it to be {needed}")]
    WrongPhase {
        /// The thread.
        id: String,
        /// Its phase.
        phase: PhaseKind,
        /// What was asked.
        action: &'static str,
        /// The phase(s) it needs.
        needed: &'static str,
    },
    /// No such thread.
    #[error("no thread {0} (looked in {1})")]
    NotFound(String, PathBuf),
    /// A file could not be read or written.
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why (its message is part of this one's).
        error: std::io::Error,
    },
    /// `thread.json` or `run.json` is not what ralph wrote.
    #[error("{path} is corrupt: {message}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What serde said (with line and column), or what is missing.
        message: String,
    },
    /// `thread.json` was deleted, replaced or rewritten by someone else while this handle
    /// used it; nothing was written over it.
    #[error(
        "{path} {how} while ralph was using it; stopped without writing over it (restore the file, or check which other process changed it)"
    )]
    Changed {
        /// The file.
        path: PathBuf,
        /// What happened to it.
        how: String,
    },
    /// `thread.json` or a `run.json` is not what ralph wrote: edited or replaced since (by
    /// an agent, say). Nothing is read from it.
    #[error(
        "{path} was changed by something other than ralph ({how}); `ralph repair` puts back the last version ralph wrote (keeping this one beside it), `ralph repair --adopt` keeps it as yours"
    )]
    NotWritten {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        how: String,
    },
    /// `thread.json` comes from a newer ralph.
    #[error(
        "{path} has schema_version {found}, but this ralph knows versions up to {known}; upgrade ralph"
    )]
    NewerSchema {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: u64,
        /// The newest this build reads.
        known: u32,
    },
    /// git failed.
    #[error(transparent)]
    Git(#[from] GitError),
    /// The threads' context could not be built: the workspace, `ralph.toml` or a prompt
    /// override cannot be used.
    #[error(transparent)]
    Build(#[from] crate::runtime::error::BuildError),
    /// The work tree is not the one approved: nothing was committed, and the thread is back
    /// in PendingReview for a review of the changes.
    #[error(
        "thread {id}: the work tree changed since it was approved ({}); nothing was committed and the thread is back in PendingReview: review the changes (`ralph thread diff`), then approve again",
        paths.join(", ")
    )]
    ChangedSinceApproval {
        /// The thread.
        id: String,
        /// The paths that differ from the approved tree.
        paths: Vec<String>,
    },
    /// `send_back` without the reviewer's feedback.
    #[error(
        "thread {id}: sending back needs the reviewer's feedback: what is wrong, and what to fix"
    )]
    NoFeedback {
        /// The thread.
        id: String,
    },
    /// A prompt could not be rendered.
    #[error("{}", crate::runtime::error::prompt_message(template, file, message))]
    Prompt {
        /// The template's name (`thread`, `thread_verify`).
        template: String,
        /// Its override file, when it is not the built-in one.
        file: Option<String>,
        /// What is wrong, with the line when the template engine knows it.
        message: String,
    },
    /// The loop's settings cannot be used (an unknown agent name, a number out of range).
    #[error("thread {id}: {reason}")]
    Config {
        /// The thread.
        id: String,
        /// What is wrong.
        reason: String,
    },
    /// Another process or handle runs a thread of this workspace, or another mode (it
    /// holds `.ralph/ralph.lock`).
    #[error("{}", busy_message(lock, holder, running))]
    Busy {
        /// The lock file.
        lock: PathBuf,
        /// What the lock file says about its holder (`pid N, since T`), if anything.
        holder: Option<String>,
        /// The thread that runs, when a thread holds the lock: its id, its phase (Running or
        /// Verifying) and the process that runs it.
        running: Option<(String, PhaseKind, u32)>,
    },
    /// The AI review of the spec gave no usable feedback; the thread stays Assessing.
    #[error(
        "thread {id}: the assessment failed: {reason}; the thread stays Assessing, call `assess` again or `finalize`"
    )]
    Assessment {
        /// The thread.
        id: String,
        /// Why (the agent's failure, or the parse error of its second answer).
        reason: String,
    },
    /// A `[[hooks]]` entry marked `required` failed during the thread's run or on its end
    /// (the run went on to its end, and its `Finished` event was sent).
    #[error("required hook {hook} failed on {event}: {reason}")]
    Hook {
        /// The hook: its `name`, or `hooks[<index>]`.
        hook: String,
        /// The event it ran on (`finished`, `gate_finished`).
        event: String,
        /// How it failed.
        reason: String,
    },
    /// The Drafting conversation got no usable reply; the person's message stays in the
    /// conversation log.
    #[error(
        "thread {id}: no usable reply from the agent: {reason}; your message is kept in the conversation, call `discuss` again"
    )]
    Discussion {
        /// The thread.
        id: String,
        /// Why (the agent's failure, or the parse error of its second answer).
        reason: String,
    },
}

impl From<crate::prompt::PromptError> for ThreadError {
    fn from(e: crate::prompt::PromptError) -> Self {
        ThreadError::Prompt {
            template: e.name,
            file: e.origin,
            message: e.message,
        }
    }
}

/// `thread 1 is Running in process 42 (it holds .ralph/ralph.lock); pause or finish it
/// first`, or, when no thread's record says it runs, who holds the lock.
fn busy_message(
    lock: &std::path::Path,
    holder: &Option<String>,
    running: &Option<(String, PhaseKind, u32)>,
) -> String {
    let note = holder
        .as_ref()
        .map(|h| format!(" ({h})"))
        .unwrap_or_default();
    match running {
        Some((id, phase, pid)) => format!(
            "thread {id} is {phase} in process {pid} (it holds {}{note}); pause or finish it first",
            lock.display()
        ),
        None => format!(
            "another ralph process holds {}{note}; wait for it to finish",
            lock.display()
        ),
    }
}

impl ThreadError {
    /// The refused move `refused` of thread `id`.
    pub(super) fn transition(id: &str, refused: TransitionError) -> Self {
        ThreadError::Transition {
            id: id.to_owned(),
            from: refused.from,
            to: refused.to,
        }
    }
}

impl From<crate::runtime::hooks::HookFailed> for ThreadError {
    fn from(e: crate::runtime::hooks::HookFailed) -> Self {
        ThreadError::Hook {
            hook: e.hook,
            event: e.event,
            reason: e.reason,
        }
    }
}
