//! Unix systems other than Linux: no `/proc` to scan, so only the group is killed.
//!
//! Descendants that left the group (`setsid`, daemons) are out of reach here.

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::{Group, Sweep};

/// Nothing to prepare: orphans that left the group are out of reach here.
pub(super) fn before_spawn() {}

/// No sandbox is made here: nothing is inside one.
pub(super) fn first_child(_pid: i32) -> Option<i32> {
    None
}

/// Nothing to register: see [`before_spawn`].
pub(super) fn live(_group: &Group) {}

/// Kills the group. Processes cannot be counted without `/proc`: a group that still had
/// a member counts as one.
pub(super) fn sweep(group: &Group) -> Sweep {
    let hit = killpg(Pid::from_raw(group.leader), Signal::SIGKILL).is_ok();
    Sweep {
        killed: usize::from(hit),
        clean: true,
    }
}

/// A sweep in progress; here a sweep is one group signal, so there is never anything left
/// to finish.
#[derive(Debug)]
pub(in crate::process) struct Sweeper(Group);

impl Sweeper {
    pub(in crate::process) fn finish(self) -> Sweep {
        sweep(&self.0)
    }
}

pub(super) fn start_sweep(group: &Group) -> Result<Sweep, Box<Sweeper>> {
    Ok(sweep(group))
}
