//! Linux: the `/proc` cookie sweep, and exit detection that leaves the leader a zombie.

use std::cell::OnceCell;
use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::DirEntryExt;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;

mod adopted;
mod recent;

use super::{Group, Sweep};
use crate::process::{COOKIE_VAR, Exit};

/// Scans before giving up on processes that keep appearing (a fork loop) or will not die.
const MAX_ROUNDS: usize = 50;
/// Listings of `/proc` in one scan, each for the processes that appeared during the last.
const MAX_LISTINGS: usize = 8;
/// Scans during which a process that may be in the middle of `execve` keeps the sweep going
/// (see [`Membership::Unsure`]); an `execve` that takes longer is a process stopped in it.
const UNSURE_ROUNDS: usize = 10;
/// Time for killed processes to turn into zombies before the next scan.
const ROUND_PAUSE: Duration = Duration::from_millis(2);
/// `PF_KTHREAD` in the flags of `/proc/<pid>/stat`.
const PF_KTHREAD: u64 = 0x0020_0000;

/// See [`adopted::become_subreaper`].
pub(super) fn before_spawn() {
    adopted::become_subreaper();
}

/// The first child of `pid` (the oldest still alive), from its main thread's `children`.
pub(super) fn first_child(pid: i32) -> Option<i32> {
    let mut buf = Vec::with_capacity(64);
    let children = read_proc(pid, &format!("task/{pid}/children"), &mut buf).ok()?;
    std::str::from_utf8(children)
        .ok()?
        .split_ascii_whitespace()
        .next()?
        .parse()
        .ok()
}

/// See [`adopted::Runs`].
pub(super) fn live(group: &Group) {
    adopted::Runs::register(group.leader, group.cookie.clone());
}

/// Kills every live process in the group, carrying the cookie, or adopted from the run
/// (see [`adopted`]), scanning until a scan
/// finds none (or [`MAX_ROUNDS`] pass).
///
/// Each process is found before it is killed so it can be counted; the group signal
/// after each scan is a backstop for processes `/proc` does not show us.
///
/// Two races would let a descendant that left the group (a `setsid` shell starting
/// `nohup sleep 300 &`, as the CLI's Bash tool does) slip past a scan that finds nothing
/// else, so that the sweep declares itself clean with the descendant alive:
///
/// * A process may fork and exit between the listing of `/proc` and the look at its entry:
///   it is a zombie (or gone) by then, and its child was not listed. So a scan that saw
///   such a process, started no earlier than the leader, lists `/proc` again and looks at
///   whatever appeared, until nothing new appears. (A leader already dead when the sweep
///   began died before any listing: its children are listed.)
/// * A process in the middle of `execve` shows an empty environment, or none: its new
///   memory is in place but its environment not yet copied there. So a scan that sees a
///   user process like that, which we may signal and which started no earlier than the
///   leader, is not clean: the next scans look at it again, for [`UNSURE_ROUNDS`] at most.
pub(super) fn sweep(group: &Group) -> Sweep {
    let mut sweeper = Sweeper::new(group.clone());
    loop {
        if let Some(sweep) = sweeper.round() {
            return sweep;
        }
        thread::sleep(ROUND_PAUSE);
    }
}

/// The first round of a sweep, on this thread: the whole sweep when it finds nothing,
/// otherwise the sweep in progress, to be finished where pausing is fine.
pub(super) fn start_sweep(group: &Group) -> Result<Sweep, Box<Sweeper>> {
    let mut sweeper = Sweeper::new(group.clone());
    sweeper.round().ok_or_else(|| Box::new(sweeper))
}

/// A sweep in progress, one scan-and-kill round at a time, so that the first round (all a
/// sweep takes when nothing was left behind, the common case) can run on the caller's
/// thread and only a sweep that found something moves to a blocking thread.
#[derive(Debug)]
pub(in crate::process) struct Sweeper {
    group: Group,
    me: i32,
    leader: Leader,
    killed: HashSet<i32>,
    rounds: usize,
}

/// What a sweep knows of the run's leader.
#[derive(Debug)]
struct Leader {
    pid: i32,
    /// Whether it was dead when the sweep began.
    dead: bool,
    /// Its start time, read from its stat when first needed: most sweeps of a leader seen
    /// to exit find nothing alive to judge against it, and read no stat. The leader is not
    /// reaped before the sweep is clean, so the stat is there to read.
    start: OnceCell<Option<u64>>,
}

impl Leader {
    fn at_sweep(group: &Group) -> Self {
        let pid = group.leader;
        if group.exited {
            return Leader {
                pid,
                dead: true,
                start: OnceCell::new(),
            };
        }
        let stat = stat_of(pid);
        Leader {
            pid,
            dead: stat.is_some_and(|stat| !stat.is_alive()),
            start: OnceCell::from(stat.map(|stat| stat.start)),
        }
    }

    fn start(&self) -> Option<u64> {
        *self
            .start
            .get_or_init(|| stat_of(self.pid).map(|stat| stat.start))
    }

    /// Whether a judgment was made without the start time (it could not be read).
    fn judged_without_start(&self) -> bool {
        self.start.get() == Some(&None)
    }
}

impl Sweeper {
    pub(super) fn new(group: Group) -> Self {
        // The run is ending: orphans it shares with no older live run are this sweep's.
        adopted::Runs::ending(group.leader);
        let me = i32::try_from(std::process::id()).unwrap_or(0);
        Sweeper {
            leader: Leader::at_sweep(&group),
            group,
            me,
            killed: HashSet::new(),
            rounds: 0,
        }
    }

    /// One round: scan, kill what it found, signal the group. `Some` when the sweep is
    /// over (clean, or out of rounds); `None` when another round must follow, after a
    /// pause that lets the killed processes die.
    pub(super) fn round(&mut self) -> Option<Sweep> {
        let context = SweepContext {
            group: &self.group,
            me: self.me,
            leader: &self.leader,
        };
        let scan = scan(&context);
        for &pid in scan.found.iter().chain(&scan.wrappers) {
            // ESRCH: it died meanwhile, which is what we want.
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        self.group.kill_everything();
        let round = self.rounds;
        self.rounds += 1;
        let leader = self.group.leader;
        let settled = scan.found.is_empty() && scan.wrappers.is_empty();
        if settled && (scan.unsure == 0 || round >= UNSURE_ROUNDS) {
            adopted::Runs::swept(leader);
            return Some(Sweep {
                killed: count_without(&self.killed, leader),
                clean: true,
            });
        }
        self.killed.extend(scan.found);
        (self.rounds >= MAX_ROUNDS).then(|| {
            adopted::Runs::swept(leader);
            Sweep {
                killed: count_without(&self.killed, leader),
                clean: false,
            }
        })
    }

    /// The remaining rounds, pausing between them.
    pub(in crate::process) fn finish(mut self) -> Sweep {
        loop {
            thread::sleep(ROUND_PAUSE);
            if let Some(sweep) = self.round() {
                return sweep;
            }
        }
    }

    /// Every round, the first one now.
    #[cfg(test)]
    fn finish_now(mut self) -> Sweep {
        self.round().unwrap_or_else(|| self.finish())
    }
}

fn count_without(killed: &HashSet<i32>, leader: i32) -> usize {
    killed.len() - usize::from(killed.contains(&leader))
}

/// What one scan of `/proc` found.
#[derive(Debug, Default)]
struct Scan {
    /// Live processes, other than ralph, in the group or carrying the cookie.
    found: Vec<i32>,
    /// Live members that are the run's own bubblewrap (its sandbox's init, which outlives
    /// the process it ran by a moment, or holds what it left behind): killed, not counted.
    wrappers: Vec<i32>,
    /// Processes that may carry the cookie but could not be told yet.
    unsure: usize,
}

/// Start times of the processes earlier scans looked at, by pid, each with the inode number
/// of its `/proc/<pid>` (see [`Stamp`]).
static KNOWN: Mutex<BTreeMap<i32, Stamp>> = Mutex::new(BTreeMap::new());

/// A process's start time, and which process it is: the inode number of its `/proc/<pid>`.
///
/// Reading a process's `stat` (open, read, close) costs microseconds, and most processes on
/// a machine are older than any leader, so never ours: a scan learns their start times once,
/// and later scans only check that the pid is still the same process, by the inode number
/// the listing of `/proc` gives for free. A procfs inode belongs to one process; a reused
/// pid gets a new inode, with a new number (unless 2³² inodes were made in between and the
/// number came round to the same pid). An inode dropped from the cache and made again only
/// costs a `stat` read.
#[derive(Clone, Copy, Debug)]
struct Stamp {
    ino: u64,
    start: u64,
}

/// What every look of a sweep needs.
struct SweepContext<'a> {
    group: &'a Group,
    /// Ralph's pid.
    me: i32,
    leader: &'a Leader,
}

impl SweepContext<'_> {
    /// The leader's start time.
    fn since(&self) -> Option<u64> {
        self.leader.start()
    }

    /// Whether the leader was dead when the sweep began.
    fn dead_leader(&self) -> bool {
        self.leader.dead
    }
}

/// Looks at every process, listing `/proc` again for those that appeared meanwhile, if one
/// that could have forked them died meanwhile.
fn scan(context: &SweepContext<'_>) -> Scan {
    recent::scan(context).unwrap_or_else(|| scan_all(context))
}

/// Looks at every process `/proc` lists.
fn scan_all(context: &SweepContext<'_>) -> Scan {
    let mut scan = Scan::default();
    let mut seen = HashSet::new();
    let mut buf = Vec::with_capacity(4096);
    let known = std::mem::take(&mut *lock(&KNOWN));
    let mut learned = BTreeMap::new();
    for _ in 0..MAX_LISTINGS {
        // Without /proc there is nothing to scan; the group signal still runs.
        let Ok(entries) = fs::read_dir("/proc") else {
            break;
        };
        // The whole listing first: what a look at one entry finds must not change it. A
        // pid seen again with another inode is another process.
        let fresh: Vec<(i32, u64)> = entries
            .filter_map(|entry| {
                let entry = entry.ok()?;
                let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
                Some((pid, entry.ino()))
            })
            .filter(|&(pid, ino)| pid != context.me && seen.insert((pid, ino)))
            .collect();
        let mut relist = false;
        for (pid, ino) in fresh {
            let look = Look {
                context,
                known: known.get(&pid).copied(),
            };
            let seen = look.at(pid, ino, &mut buf);
            if let Some(learnt) = seen.learnt {
                learned.insert(pid, learnt);
            }
            relist |= seen.died;
            match seen.membership {
                Membership::Member => scan.found.push(pid),
                Membership::Wrapper => scan.wrappers.push(pid),
                Membership::Unsure => scan.unsure += 1,
                Membership::Other => {}
            }
        }
        if !relist {
            break;
        }
    }
    // Only the processes listed now: the others are gone, and their pids free.
    *lock(&KNOWN) = learned;
    scan
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The map is rebuilt by every scan: a poisoned one is as good as any.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a scan makes of one process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Membership {
    /// Alive, and in the group or carrying the cookie.
    Member,
    /// A member that is the run's own bubblewrap (see [`Scan::wrappers`]).
    Wrapper,
    /// Alive, ours to signal, young enough to be a descendant, and without a readable
    /// environment: maybe in the middle of `execve` (see [`sweep`]).
    Unsure,
    /// Not ours, or dead.
    Other,
}

/// What a scan needs to look at one process.
struct Look<'a> {
    context: &'a SweepContext<'a>,
    /// What an earlier scan learned about this pid.
    known: Option<Stamp>,
}

/// What a look at one process found.
struct Finding {
    membership: Membership,
    /// Its start time, to remember.
    learnt: Option<Stamp>,
    /// It died since the listing, or may have, and may have forked a process the listing
    /// does not show.
    died: bool,
}

impl Look<'_> {
    /// The process's membership, and what was learned about it. `ino` is the inode number
    /// of its `/proc/<pid>` as listed: procfs lists the real one, or 1 when it has none.
    fn at(&self, pid: i32, ino: u64, buf: &mut Vec<u8>) -> Finding {
        let seen = |membership, learnt, died| Finding {
            membership,
            learnt,
            died,
        };
        if let Some(known) = self.known
            && ino > 1
            && known.ino == ino
            && self
                .context
                .since()
                .is_some_and(|since| known.start < since)
        {
            // The same process as before, older than the leader: see `Self::older`.
            return seen(Membership::Other, Some(known), false);
        }
        // Gone: it was listed, so it died since, and was reaped (or is not ours to look at).
        let Ok(stat) = read_stat(pid, buf) else {
            return seen(Membership::Other, None, true);
        };
        let Some(stat) = parse_stat(stat) else {
            return seen(Membership::Other, None, false);
        };
        // The pid may have changed hands since the listing: then the next scan reads again.
        let learnt = (ino > 1).then_some(Stamp {
            ino,
            start: stat.start,
        });
        let leader_before = self.context.dead_leader() && pid == self.context.group.leader;
        let died = !stat.is_alive() && !self.older(&stat) && !leader_before;
        seen(self.judge_live(pid, &stat, buf), learnt, died)
    }

    fn judge_live(&self, pid: i32, stat: &Stat, buf: &mut Vec<u8>) -> Membership {
        match self.judge_alive(pid, stat, buf) {
            Membership::Member if stat.bwrap && self.context.group.sandboxed => Membership::Wrapper,
            membership => membership,
        }
    }

    fn judge_alive(&self, pid: i32, stat: &Stat, buf: &mut Vec<u8>) -> Membership {
        if !stat.is_alive() {
            if self.adopted(pid, stat, None) {
                adopted::reap(pid);
            }
            return Membership::Other;
        }
        if stat.pgrp == self.context.group.leader {
            return Membership::Member;
        }
        if self.older(stat) {
            return Membership::Other;
        }
        let environ = read_proc(pid, "environ", buf).ok();
        if self.adopted(pid, stat, environ) {
            return Membership::Member;
        }
        match judge(
            stat,
            environ,
            self.context.group.cookie(),
            self.context.since(),
        ) {
            // Signal 0 checks the permission only: a process we may not signal is not ours.
            Membership::Unsure if kill(Pid::from_raw(pid), None).is_err() => Membership::Other,
            membership => membership,
        }
    }

    /// A child of this process that was in the run's group, or that is an orphan of the
    /// run (see [`adopted`]). Never the leader, which its owner reaps.
    fn adopted(&self, pid: i32, stat: &Stat, environ: Option<&[u8]>) -> bool {
        let context = self.context;
        if stat.ppid != context.me || pid == context.group.leader {
            return false;
        }
        let Some(since) = context.since() else {
            return false;
        };
        let child = adopted::Child {
            pid,
            session: stat.session,
            start: stat.start,
            environ,
        };
        stat.pgrp == context.group.leader
            || adopted::judge(&child, context.group.leader, since) == adopted::Adopted::Claimed
    }

    /// Older than the leader: not a descendant, so neither in its group nor carrying the
    /// cookie, which is new with the leader. Most processes are; their environment is not
    /// read, and later scans do not read even their `stat`.
    fn older(&self, stat: &Stat) -> bool {
        self.context.since().is_some_and(|since| stat.start < since)
    }
}

/// The parsed stat of `pid`, if it can be read.
fn stat_of(pid: i32) -> Option<Stat> {
    let mut buf = Vec::with_capacity(1024);
    read_stat(pid, &mut buf).ok().and_then(parse_stat)
}

/// Reads `/proc/<pid>/<file>` into `buf`: open, reads to EOF, close. Procfs files fit in
/// one read; `fs::read` would also ask for the size (always 0 here) first.
/// `/proc/<pid>/stat`, usually in one read: the kernel renders the whole line at once, so
/// a read that ends with its newline has it all.
fn read_stat(pid: i32, buf: &mut Vec<u8>) -> io::Result<&[u8]> {
    buf.clear();
    buf.resize(buf.capacity().max(1024), 0);
    let mut f = fs::File::open(format!("/proc/{pid}/stat"))?;
    let n = loop {
        match f.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => break other?,
        }
    };
    if n > 0 && n < buf.len() && buf[n - 1] == b'\n' {
        buf.truncate(n);
        return Ok(buf);
    }
    read_proc(pid, "stat", buf)
}

fn read_proc<'a>(pid: i32, file: &str, buf: &'a mut Vec<u8>) -> io::Result<&'a [u8]> {
    buf.clear();
    let mut f = fs::File::open(format!("/proc/{pid}/{file}"))?;
    loop {
        if buf.len() == buf.capacity() {
            buf.reserve(4096);
        }
        let len = buf.len();
        buf.resize(buf.capacity(), 0);
        match f.read(&mut buf[len..]) {
            Ok(0) => {
                buf.truncate(len);
                return Ok(buf);
            }
            Ok(n) => buf.truncate(len + n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => buf.truncate(len),
            Err(e) => {
                buf.truncate(len);
                return Err(e);
            }
        }
    }
}

/// Membership of a live process outside the group, from its stat and environment (`None`:
/// unreadable).
fn judge(stat: &Stat, environ: Option<&[u8]>, cookie: &str, since: Option<u64>) -> Membership {
    match environ {
        Some(environ) if carries_cookie(environ, cookie) => Membership::Member,
        None | Some([])
            if stat.flags & PF_KTHREAD == 0 && since.is_some_and(|since| stat.start >= since) =>
        {
            Membership::Unsure
        }
        _ => Membership::Other,
    }
}

/// The fields of `/proc/<pid>/stat` a sweep needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stat {
    /// Its command name is `bwrap`.
    bwrap: bool,
    state: char,
    ppid: i32,
    pgrp: i32,
    session: i32,
    flags: u64,
    /// Start time, in clock ticks since boot.
    start: u64,
}

impl Stat {
    fn is_alive(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// The fields of a `/proc/<pid>/stat` line that a sweep needs.
///
/// The command name may hold any byte but NUL, spaces and parentheses included, so fields
/// are counted from the last `)`.
fn parse_stat(stat: &[u8]) -> Option<Stat> {
    let after_name = stat.iter().rposition(|&b| b == b')')? + 1;
    let name = stat.iter().position(|&b| b == b'(')? + 1;
    let bwrap = stat.get(name..after_name - 1) == Some(b"bwrap".as_slice());
    let rest = std::str::from_utf8(&stat[after_name..]).ok()?;
    // Field 3 (state) is the first after the name: field n is at index n - 3.
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    let session = fields.next()?.parse().ok()?;
    let mut fields = fields.skip(2); // tty_nr, tpgid
    let flags = fields.next()?.parse().ok()?;
    let start = fields.nth(12)?.parse().ok()?; // after minflt … nice, num_threads, itrealvalue
    Some(Stat {
        bwrap,
        state,
        ppid,
        pgrp,
        session,
        flags,
        start,
    })
}

/// Whether a NUL-separated environment block lists `cookie` in [`COOKIE_VAR`].
fn carries_cookie(environ: &[u8], cookie: &str) -> bool {
    let prefix = format!("{COOKIE_VAR}=");
    environ
        .split(|&b| b == 0)
        .filter_map(|entry| entry.strip_prefix(prefix.as_bytes()))
        .any(|chain| chain.split(|&b| b == b':').any(|c| c == cookie.as_bytes()))
}

/// The exit of child `pid`, if it has exited, without reaping it.
///
/// While the child stays a zombie its pid, and so its process group id, cannot be
/// reused, which makes signalling the group after the exit safe.
pub(in crate::process) fn peek_exit(pid: u32) -> io::Result<Option<Exit>> {
    let pid = Pid::from_raw(i32::try_from(pid).map_err(|_| Errno::ESRCH)?);
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG;
    match waitid(Id::Pid(pid), flags) {
        Ok(WaitStatus::Exited(_, code)) => Ok(Some(Exit::Code(code))),
        Ok(WaitStatus::Signaled(_, signal, _)) => Ok(Some(Exit::Signal(signal as i32))),
        Ok(_) | Err(Errno::EINTR) => Ok(None),
        Err(errno) => Err(errno.into()),
    }
}

/// A pidfd for the child `pid`, registered with the runtime: it turns readable when the
/// child exits, without reaping it. `None` on a kernel without pidfds (before 5.3), where
/// the exit is polled for.
///
/// Why not SIGCHLD: a signal wakes the runtime once for the signal and once more for its
/// handler's message, and every exit of every child of the process (an embedding
/// application's, tests in parallel) wakes every run listening; a pidfd wakes only its own
/// run, once, in the same turn as tokio's own pidfd for the child.
pub(in crate::process) fn exit_notice(
    pid: u32,
) -> Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).ok()?)?;
    let fd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()?;
    // Deprecated for a type that may close its descriptor behind the registration's back
    // (tokio#8587); an `OwnedFd` closes it only when the `AsyncFd` drops, after it
    // deregistered, which is what the replacement's `unsafe` contract asks (and this crate
    // forbids `unsafe`).
    #[allow(deprecated)]
    tokio::io::unix::AsyncFd::with_interest(fd, tokio::io::Interest::READABLE).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stat line with these fields, the rest as a real one.
    fn stat_line(comm: &str, state: char, pgrp: i32, flags: u64, start: u64) -> String {
        format!(
            "4242 ({comm}) {state} 1 {pgrp} {pgrp} 0 -1 {flags} 176 0 0 0 0 0 0 0 20 0 1 0 \
             {start} 2990080 390 18446744073709551615"
        )
    }

    fn stat(state: char, flags: u64, start: u64) -> Stat {
        Stat {
            bwrap: false,
            state,
            ppid: 1,
            pgrp: 4240,
            session: 4240,
            flags,
            start,
        }
    }

    #[test]
    fn parses_stat_with_awkward_command_names() {
        let line = stat_line("a) b) c", 'S', 4240, 4_194_560, 847_929);
        assert_eq!(
            parse_stat(line.as_bytes()),
            Some(stat('S', 4_194_560, 847_929))
        );
        let zombie = parse_stat(stat_line("init", 'Z', 1, 0, 7).as_bytes()).unwrap();
        assert!(!zombie.is_alive());
        assert_eq!(parse_stat(b"garbage"), None);
        assert_eq!(parse_stat(b"1 (x) R 0 1 1"), None);
        // A name is bytes, not always UTF-8.
        let mut latin1 = stat_line("caf_", 'S', 4240, 0, 9).into_bytes();
        let at = latin1.iter().position(|&b| b == b'_').unwrap();
        latin1[at] = 0xe9;
        assert_eq!(parse_stat(&latin1).map(|s| s.start), Some(9));
    }

    #[test]
    fn the_real_stat_of_this_process_parses() {
        let line = fs::read("/proc/self/stat").unwrap();
        let stat = parse_stat(&line).unwrap();
        let mut buf = Vec::new();
        let pid = i32::try_from(std::process::id()).unwrap();
        let again = parse_stat(read_proc(pid, "stat", &mut buf).unwrap()).unwrap();
        assert_eq!((again.pgrp, again.start), (stat.pgrp, stat.start));
        let environ = read_proc(pid, "environ", &mut buf).unwrap();
        assert_eq!(environ, fs::read("/proc/self/environ").unwrap());
        assert!(stat.is_alive());
        assert_eq!(stat.flags & PF_KTHREAD, 0);
        assert!(stat.start > 0);
    }

    #[test]
    fn a_missing_environment_is_unsure_only_for_young_user_processes() {
        let cookie = "abc";
        let mine = b"RALPH_RUN_COOKIE=abc\0".as_slice();
        let young = stat('S', 4_194_304, 100);
        let judged =
            |stat: &Stat, environ: Option<&[u8]>, since| judge(stat, environ, cookie, since);
        assert_eq!(judged(&young, Some(mine), Some(100)), Membership::Member);
        assert_eq!(judged(&young, Some(b"A=1\0"), Some(100)), Membership::Other);
        assert_eq!(judged(&young, Some(b""), Some(100)), Membership::Unsure);
        assert_eq!(judged(&young, None, Some(100)), Membership::Unsure);
        // Older than the leader: not a descendant (PID 1 often has no environment).
        assert_eq!(judged(&young, Some(b""), Some(101)), Membership::Other);
        assert_eq!(judged(&young, None, None), Membership::Other);
        // Kernel threads have no environment at all.
        let kthread = stat('S', 69_238_880, 200);
        assert_eq!(judged(&kthread, None, Some(100)), Membership::Other);
    }

    #[test]
    fn finds_the_cookie_in_a_chain_only_as_a_whole_entry() {
        let env = b"PATH=/bin\0RALPH_RUN_COOKIE=outer:abc\0HOME=/root\0";
        assert!(carries_cookie(env, "abc"));
        assert!(carries_cookie(env, "outer"));
        assert!(!carries_cookie(env, "ab"));
        assert!(!carries_cookie(b"OTHER=abc\0", "abc"));
        assert!(!carries_cookie(b"X_RALPH_RUN_COOKIE=abc\0", "abc"));
        assert!(!carries_cookie(b"", "abc"));
    }

    #[test]
    fn a_leader_seen_to_exit_has_its_start_read_only_when_a_judgment_needs_it() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        while peek_exit(child.id()).unwrap().is_none() {
            thread::sleep(Duration::from_millis(1));
        }
        let mut group = Group::new(child.id(), "lazy-start-test".into());
        group.seen_exit();
        let leader = Leader::at_sweep(&group);
        assert!(leader.dead);
        assert_eq!(leader.start.get(), None, "nothing read yet");
        // A zombie keeps its stat: the start time is there when a live process is judged.
        let mut buf = Vec::new();
        let start = parse_stat(read_stat(pid, &mut buf).unwrap()).unwrap().start;
        assert_eq!(leader.start(), Some(start));
        assert!(!leader.judged_without_start());
        child.wait().unwrap();
        // Not seen to exit: read at once, alive or dead.
        let unseen = Leader::at_sweep(&Group::new(u32::MAX, "x".into()));
        assert!(!unseen.dead && unseen.judged_without_start());
    }

    #[test]
    fn peek_exit_of_a_non_child_is_an_error() {
        // pid 1 is never our child.
        assert!(peek_exit(1).is_err());
    }
}
