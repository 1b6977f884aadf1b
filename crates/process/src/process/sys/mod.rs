//! The operating-system side of supervision: process groups, cookies and the sweep.
//!
//! `nix` types stay in here; the rest of `process` sees plain pids and methods.

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
use linux as imp;
#[cfg(all(unix, not(target_os = "linux")))]
mod other;
#[cfg(all(unix, not(target_os = "linux")))]
use other as imp;

use std::ffi::OsString;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

pub(super) use imp::Sweeper;
#[cfg(target_os = "linux")]
pub(super) use linux::{exit_notice, peek_exit};

use super::COOKIE_VAR;

/// One supervised run's process group and cookie.
#[derive(Clone, Debug)]
pub(super) struct Group {
    /// The main process's pid, which is also the group id.
    leader: i32,
    cookie: Arc<str>,
    /// When the leader was spawned: a short run may be swept the cheap way.
    spawned: Instant,
    /// Whether the leader was seen to exit (it stays unreaped until its sweep is clean).
    exited: bool,
    /// Whether the leader is bubblewrap, which runs the process in a sandbox (see
    /// [`Group::inner`]).
    pub(super) sandboxed: bool,
}

/// The processes inside a running sandbox (see [`Group::inner`]).
#[derive(Clone, Copy, Debug)]
struct SandboxPids {
    /// bubblewrap's init in the sandbox, which leads the sandbox's process group.
    init: i32,
    /// The process the run is for, once started.
    main: Option<i32>,
}

/// What a sweep did.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sweep {
    /// Live processes other than the leader that were killed.
    pub(super) killed: usize,
    /// Whether the last scan found nothing left alive.
    pub(super) clean: bool,
}

impl Group {
    /// The group of a process just spawned as its leader: a run live until its sweep.
    /// `sandboxed`: the leader is bubblewrap.
    pub(super) fn launched(leader: u32, cookie: Arc<str>, sandboxed: bool) -> Self {
        let mut group = Group::new(leader, cookie);
        group.sandboxed = sandboxed;
        imp::live(&group);
        group
    }

    pub(super) fn new(leader: u32, cookie: Arc<str>) -> Self {
        // Pids fit in an i32 on every unix. The fallback is above any pid_max, so it
        // addresses nobody (0 or -1 would address our own group or everyone).
        let leader = i32::try_from(leader).unwrap_or(i32::MAX);
        Group {
            leader,
            cookie,
            spawned: Instant::now(),
            exited: false,
            sandboxed: false,
        }
    }

    /// Notes that the leader was seen to exit.
    pub(super) fn seen_exit(&mut self) {
        self.exited = true;
    }

    pub(super) fn cookie(&self) -> &str {
        &self.cookie
    }

    /// Asks the whole group to exit.
    pub(super) fn terminate(&self) {
        self.signal(Signal::SIGTERM);
    }

    /// Kills the whole group, without the sweep.
    pub(super) fn kill(&self) {
        self.signal(Signal::SIGKILL);
    }

    /// Sends SIGINT to the leader alone: a polite interrupt that the process answers in its
    /// own way (the Claude CLI ends its turn and writes a final `result` line).
    pub(super) fn interrupt(&self) {
        let target = match self.inner() {
            Some(inner) => inner.main,
            // bubblewrap is still setting up: there is nothing to interrupt yet, and
            // bubblewrap itself would die of it.
            None if self.sandboxed => return,
            None => Some(self.leader),
        };
        // ESRCH: it already exited, which is what an interrupt asks for.
        if let Some(pid) = target {
            let _ = kill(Pid::from_raw(pid), Signal::SIGINT);
        }
    }

    /// Sends `signal` to the group: in a sandbox, to the sandbox's own group, so that
    /// bubblewrap outside stays to report how the process inside ended. Before the sandbox
    /// is up, bubblewrap is signalled instead.
    fn signal(&self, signal: Signal) {
        let group = self.inner().map_or(self.leader, |inner| inner.init);
        // ESRCH (nobody left) is the common, good case; nothing else can be done about
        // EPERM, and the sweep follows anyway.
        let _ = killpg(Pid::from_raw(group), signal);
    }

    /// Kills the group, and in a sandbox the sandbox's group too: the backstop of a sweep.
    pub(super) fn kill_everything(&self) {
        if let Some(inner) = self.inner() {
            let _ = killpg(Pid::from_raw(inner.init), Signal::SIGKILL);
        }
        let _ = killpg(Pid::from_raw(self.leader), Signal::SIGKILL);
    }

    /// The processes of a sandboxed run inside bubblewrap, while bubblewrap runs: its
    /// first child is the sandbox's init (pid 1 inside, the leader of a new session and
    /// group), whose first child is the process the run is for.
    fn inner(&self) -> Option<SandboxPids> {
        if !self.sandboxed || self.exited {
            return None;
        }
        let init = imp::first_child(self.leader)?;
        Some(SandboxPids {
            init,
            main: imp::first_child(init),
        })
    }

    /// Kills the group and, where the platform allows, every process carrying the
    /// cookie. Blocks for a few milliseconds.
    pub(super) fn kill_all(&self) -> Sweep {
        imp::sweep(self)
    }

    /// The first round of [`kill_all`](Self::kill_all), cheap enough for an async thread:
    /// the whole sweep when nothing was left behind, else the rest to
    /// [`finish`](Sweeper::finish) on a blocking thread, since it pauses between rounds.
    pub(super) fn start_sweep(&self) -> Result<Sweep, Box<Sweeper>> {
        imp::start_sweep(self)
    }
}

/// What must hold before a supervised process is spawned: on Linux, this process is a
/// child subreaper, so the run's orphans that shed cookie and group become its children.
pub(super) fn before_spawn() {
    imp::before_spawn();
}

/// A cookie no other run, in this process or any other, has used.
pub(super) fn new_cookie() -> Arc<str> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{:x}.{seq:x}.{nanos:x}", std::process::id()).into()
}

/// The value of [`COOKIE_VAR`] for a child: our own ancestors' cookies, then `owner` if
/// any, then `cookie`.
pub(super) fn cookie_chain(owner: Option<&str>, cookie: &str) -> OsString {
    let mut chain = std::env::var_os(COOKIE_VAR).unwrap_or_default();
    for entry in owner.into_iter().chain([cookie]) {
        if !chain.is_empty() {
            chain.push(":");
        }
        chain.push(entry);
    }
    chain
}

/// Kills every process carrying `owner` in its cookie chain (never this process); returns
/// how many. Blocks for a few milliseconds.
pub(super) fn sweep_owner(owner: &str) -> usize {
    // A group id no process has, so only the cookie scan finds anything.
    Group::new(u32::MAX, owner.into()).kill_all().killed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_unique_and_separator_free() {
        let a = new_cookie();
        let b = new_cookie();
        assert_ne!(a, b);
        assert!(!a.contains(':') && !a.contains('='));
    }

    #[test]
    fn chain_ends_with_the_new_cookie() {
        let chain = cookie_chain(None, "abc");
        let chain = chain.to_string_lossy();
        assert!(chain == "abc" || chain.ends_with(":abc"), "{chain}");
        let chain = cookie_chain(Some("ws-1"), "abc");
        let chain = chain.to_string_lossy();
        assert!(
            chain == "ws-1:abc" || chain.ends_with(":ws-1:abc"),
            "{chain}"
        );
    }
}
