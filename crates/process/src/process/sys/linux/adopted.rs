//! Orphans that shed both marks of their run: adopted, then swept.
//!
//! The cookie reaches every descendant that keeps its environment, and the group signal
//! every one that stays in the group. A daemon does neither: `env -i setsid sh -c …`
//! clears the environment and leaves the session. Only its ancestry ties it to the run,
//! and when its parent exits the kernel hands it to a new parent: the nearest ancestor
//! that is a *child subreaper*, or else init. So ralph makes its own process a child
//! subreaper before it starts its first supervised process ([`become_subreaper`]); such
//! an orphan then becomes ralph's child, where a sweep finds it.
//!
//! Which run an adopted process belongs to is not written anywhere once its parent is
//! gone, and several runs may share this process (an application embedding ralph, tests
//! in parallel, tasks built at once). What is known: it started after its run's leader,
//! and it is not in ralph's session (it left with `setsid`; the processes ralph starts
//! and its application's own children stay in the session). So a sweep claims a child of
//! this process that
//!
//! - started no earlier than the swept run's leader,
//! - is in another session than this process, and
//! - carries the cookie of no other run still live here (registered by
//!   [`Runs::register`], until its sweep begins): a process that left the session but kept
//!   its environment is that run's, and its sweep finds it by the cookie;
//! - started before every run still live here — otherwise that run may own it, and its
//!   sweep, or the sweep of the last such run, claims it instead. A daemon may so live
//!   until the end of the last run that overlapped it, never longer.
//!
//! A sweep also reaps the adopted processes it claims once they are dead: nobody else
//! waits for them.
//!
//! What stays out of reach: a process that left the group with `setpgid` but not the
//! session, and cleared its environment, whose parent exited; an application's own child
//! that it started in a new session while a run was live is taken for an orphan of that
//! run. And once ralph itself is killed with SIGKILL, its adopted orphans pass to init:
//! the next run on the workspace finds only those that kept the cookie.

use std::sync::{Arc, Mutex, OnceLock};

use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

/// Makes this process a child subreaper, once. Failing (a kernel before 3.4, a seccomp
/// filter) only leaves orphans to init, as without it.
pub(in crate::process) fn become_subreaper() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let _ = nix::sys::prctl::set_child_subreaper(true);
    });
}

/// This process's session id.
pub(super) fn my_session() -> i32 {
    static SESSION: OnceLock<i32> = OnceLock::new();
    *SESSION.get_or_init(|| nix::unistd::getsid(None).map_or(0, Pid::as_raw))
}

/// The runs of this process that are not swept yet: leader, cookie, and whether the
/// sweep has begun.
static RUNS: Mutex<Vec<Run>> = Mutex::new(Vec::new());

#[derive(Clone, Debug)]
struct Run {
    leader: i32,
    cookie: Arc<str>,
    /// Its sweep has begun: it owns no orphan without its cookie any more.
    ending: bool,
}

/// The registry of the runs of this process.
pub(in crate::process) struct Runs;

impl Runs {
    /// Counts the run led by `leader`, with `cookie`, as live.
    pub(in crate::process) fn register(leader: i32, cookie: Arc<str>) {
        super::lock(&RUNS).push(Run {
            leader,
            cookie,
            ending: false,
        });
    }

    /// The run led by `leader` is ending: its sweep has begun.
    pub(in crate::process) fn ending(leader: i32) {
        for run in super::lock(&RUNS).iter_mut().filter(|r| r.leader == leader) {
            run.ending = true;
        }
    }

    /// The run led by `leader` is swept.
    pub(in crate::process) fn swept(leader: i32) {
        super::lock(&RUNS).retain(|run| run.leader != leader);
    }
}

/// What a sweep makes of a child of this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Adopted {
    /// An orphan of the swept run: kill it (alive) or reap it (dead).
    Claimed,
    /// Not an orphan of the swept run, or maybe one of a run still live.
    NotOurs,
}

/// A child of this process, as a sweep sees it.
pub(super) struct Child<'a> {
    pub(super) pid: i32,
    pub(super) session: i32,
    pub(super) start: u64,
    /// Its environment; `None` when unreadable (a zombie has none).
    pub(super) environ: Option<&'a [u8]>,
}

/// Whether `child` is an orphan of the run led by `leader`, which started at `since`.
pub(super) fn judge(child: &Child<'_>, leader: i32, since: u64) -> Adopted {
    let runs = super::lock(&RUNS).clone();
    let mut buf = Vec::with_capacity(1024);
    claim(child, leader, since, &runs, |pid| {
        super::read_stat(pid, &mut buf)
            .ok()
            .and_then(super::parse_stat)
            .map(|stat| stat.start)
    })
}

/// [`judge`] with the registry given, and `start_of` a process's start time.
fn claim(
    child: &Child<'_>,
    leader: i32,
    since: u64,
    runs: &[Run],
    mut start_of: impl FnMut(i32) -> Option<u64>,
) -> Adopted {
    if child.start < since || child.session == my_session() {
        return Adopted::NotOurs;
    }
    let others = || runs.iter().filter(|run| run.leader != leader);
    // The cookie of another run names its owner, though the process left the session.
    let owned_by_another = child
        .environ
        .is_some_and(|environ| others().any(|run| super::carries_cookie(environ, &run.cookie)));
    // A live run's leader may have exited already (a zombie until its sweep): it is live.
    let mut older_live_run = || {
        others()
            .filter(|run| !run.ending && run.leader != child.pid)
            .any(|run| start_of(run.leader).is_some_and(|start| start <= child.start))
    };
    if owned_by_another || older_live_run() {
        Adopted::NotOurs
    } else {
        Adopted::Claimed
    }
}

/// Reaps the dead child `pid`; it was a zombie, so this cannot block.
pub(super) fn reap(pid: i32) {
    // ECHILD: someone else reaped it meanwhile, which is as good.
    let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(leader: i32, cookie: &str, ending: bool) -> Run {
        Run {
            leader,
            cookie: cookie.into(),
            ending,
        }
    }

    fn orphan(start: u64, environ: Option<&[u8]>) -> Child<'_> {
        Child {
            pid: 900,
            session: my_session() + 1,
            start,
            environ,
        }
    }

    /// Leaders' start times: run 10 started at 100, run 20 at 200, run 30 at 300.
    fn start_of(pid: i32) -> Option<u64> {
        u64::try_from(pid).ok().map(|pid| pid * 10)
    }

    #[test]
    fn an_orphan_in_another_session_younger_than_the_run_is_claimed() {
        let runs = [run(20, "mine", true)];
        let claimed = |child: &Child<'_>| claim(child, 20, 200, &runs, start_of);
        assert_eq!(claimed(&orphan(250, Some(b""))), Adopted::Claimed);
        assert_eq!(claimed(&orphan(250, None)), Adopted::Claimed);
        // Older than the run: not its descendant.
        assert_eq!(claimed(&orphan(150, None)), Adopted::NotOurs);
        // In this process's session: an application's own child.
        let mut child = orphan(250, None);
        child.session = my_session();
        assert_eq!(claimed(&child), Adopted::NotOurs);
    }

    #[test]
    fn an_orphan_an_older_live_run_may_own_is_left_to_it() {
        // Run 10 is live and started before the orphan: it may be its orphan.
        let runs = [run(10, "older", false), run(20, "mine", true)];
        assert_eq!(
            claim(&orphan(250, None), 20, 200, &runs, start_of),
            Adopted::NotOurs
        );
        // A live run younger than the orphan cannot own it; an ending one sweeps already.
        let runs = [run(30, "younger", false), run(10, "ending", true)];
        assert_eq!(
            claim(&orphan(250, None), 20, 200, &runs, start_of),
            Adopted::Claimed
        );
    }

    #[test]
    fn an_orphan_carrying_another_runs_cookie_is_that_runs() {
        let runs = [run(30, "theirs", true), run(20, "mine", true)];
        let environ = b"RALPH_RUN_COOKIE=ws-1:theirs\0".as_slice();
        assert_eq!(
            claim(&orphan(350, Some(environ)), 20, 200, &runs, start_of),
            Adopted::NotOurs
        );
        let environ = b"RALPH_RUN_COOKIE=ws-1:mine\0".as_slice();
        assert_eq!(
            claim(&orphan(350, Some(environ)), 20, 200, &runs, start_of),
            Adopted::Claimed
        );
    }
}
