//! A thread's loop holds the workspace's lock (`.ralph/ralph.lock`, the one every mode
//! takes) from preflight's "no other thread is running" check through the loop, so two
//! `start`s racing in two processes cannot both see no thread Running and both go on, and a
//! construct or build run cannot work on the same tree at the same time. It is taken as
//! every mode takes it ([`Context::begin`](crate::runtime::Context::begin)), which also
//! kills what an earlier, killed run left running. The lock dies with its process, so a
//! crashed runner never blocks the next.

use super::phase::PhaseKind;
use super::{ThreadError, Threads};
use crate::runtime::error::Error;
use crate::runtime::workspace::RunLock;

impl Threads {
    /// Takes the lock, or says which thread holds it (and in which process).
    pub(super) async fn lock_runs(&self) -> Result<RunLock, ThreadError> {
        // A thread's loop runs its own agents and its criteria's commands, not the
        // context's: it always starts processes.
        match self.ctx.begin_starting(&self.emitter, true).await {
            Ok(lock) => Ok(lock),
            Err(Error::Busy { path, holder }) => Err(ThreadError::Busy {
                lock: path,
                holder,
                running: self.running(),
            }),
            Err(Error::Io { path, source }) => Err(ThreadError::Io {
                path,
                error: source,
            }),
            // `begin` fails only with the two above.
            Err(other) => Err(ThreadError::Io {
                path: self.root.clone(),
                error: std::io::Error::other(other.to_string()),
            }),
        }
    }

    /// The thread whose record says it runs, its phase and its process, if one does.
    fn running(&self) -> Option<(String, PhaseKind, u32)> {
        self.list().unwrap_or_default().into_iter().find_map(|id| {
            let record = self.get(&id).ok()?;
            let phase = record.phase.kind();
            let pid = record.runner_pid?;
            matches!(phase, PhaseKind::Running | PhaseKind::Verifying).then_some((id, phase, pid))
        })
    }
}
