//! The cheap scan for short runs: look only at the pids handed out since the leader's.
//!
//! Listing `/proc` costs about a microsecond per process on the machine, every time. But
//! the kernel hands out pids in increasing order (`/proc/sys/kernel/ns_last_pid` is the
//! last one), and every process a run started got its pid after the leader's. So while
//! the pid counter has not wrapped since the leader was spawned, probing the pids from the
//! leader's to the last one finds every candidate, and a short run has handed out few.
//!
//! The counter could wrap all the way round to just past the leader only if more than
//! `pid_max` (at least 32,768) pids were handed out meanwhile; within [`WINDOW`] that would
//! take hundreds of thousands of forks a second. Anything else unusual — a run longer than
//! [`WINDOW`], a wrapped counter, more than [`MAX_PIDS`] pids to probe, a `/proc` of
//! another pid namespace, no `ns_last_pid` — falls back to the full listing.
//!
//! Like the listing, a probe pass is repeated while it is not settled: a process may fork
//! and exit during the pass, and its child's pid is then above the range probed. So after
//! each pass the last pid is read again, and the pids handed out meanwhile are probed
//! next, until a pass ends with the counter where it began.

use std::fs;
use std::os::unix::fs::FileExt;
use std::sync::OnceLock;
use std::time::Duration;

use super::{Look, MAX_LISTINGS, Membership, Scan, SweepContext, read_proc};

/// Runs shorter than this are swept by probing recent pids.
const WINDOW: Duration = Duration::from_millis(100);
/// More pids than this to probe, and the listing is cheaper.
const MAX_PIDS: i32 = 512;

/// The scan, or `None` when only the full listing is safe (see the module docs).
pub(super) fn scan(context: &SweepContext<'_>) -> Option<Scan> {
    if context.group.spawned.elapsed() > WINDOW || !proc_is_ours() {
        return None;
    }
    let leader = context.group.leader;
    let mut scan = Scan::default();
    let mut buf = Vec::with_capacity(4096);
    let mut first = leader;
    let mut last = last_pid()?;
    for _ in 0..MAX_LISTINGS {
        // Below the leader: the counter wrapped. Far above: the listing is cheaper.
        if last < leader || last - leader > MAX_PIDS {
            return None;
        }
        for pid in first..=last {
            // A leader dead before the sweep began is a zombie until its owner reaps it
            // after the sweep: nothing to kill, and its stat was read when the sweep began.
            let dead_leader = context.dead_leader() && pid == leader;
            if pid != context.me && !dead_leader {
                probe(context, pid, &mut buf, &mut scan);
            }
        }
        let now = last_pid()?;
        if now == last {
            // Without the leader's start time nothing could be judged older than the run.
            return (!context.leader.judged_without_start()).then_some(scan);
        }
        if now < last {
            return None;
        }
        first = last + 1;
        last = now;
    }
    None
}

/// Looks at one pid, which may be a process, a thread, or nothing any more.
fn probe(context: &SweepContext<'_>, pid: i32, buf: &mut Vec<u8>, scan: &mut Scan) {
    let look = Look {
        context,
        known: None,
    };
    // A pid that died is no concern here: what it forked has a later pid, probed later.
    match look.at(pid, 0, buf).membership {
        // A thread reads as its process; count and kill each process once, by its own pid.
        Membership::Member if is_process(pid, buf) => scan.found.push(pid),
        Membership::Wrapper if is_process(pid, buf) => scan.wrappers.push(pid),
        Membership::Member | Membership::Wrapper | Membership::Other => {}
        Membership::Unsure => scan.unsure += 1,
    }
}

/// Whether `pid` is a process (a thread group's leader) rather than one of its threads.
fn is_process(pid: i32, buf: &mut Vec<u8>) -> bool {
    let Ok(status) = read_proc(pid, "status", buf) else {
        // Gone: nothing to kill, and its children are probed on their own.
        return false;
    };
    let tgid = status
        .split(|&b| b == b'\n')
        .find_map(|line| line.strip_prefix(b"Tgid:"))
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.trim().parse::<i32>().ok());
    // Unreadable: count it; a kill of a thread's id kills its process anyway.
    tgid.is_none_or(|tgid| tgid == pid)
}

/// The last pid the kernel handed out in our pid namespace.
///
/// The file is opened once and read from its start each time (a sysctl file renders its
/// value afresh on every read at offset 0): two reads per sweep, a sweep per run.
fn last_pid() -> Option<i32> {
    static FILE: OnceLock<Option<fs::File>> = OnceLock::new();
    let file = FILE
        .get_or_init(|| fs::File::open("/proc/sys/kernel/ns_last_pid").ok())
        .as_ref()?;
    let mut buf = [0_u8; 16];
    let n = file.read_at(&mut buf, 0).ok()?;
    std::str::from_utf8(&buf[..n]).ok()?.trim().parse().ok()
}

/// Whether `/proc` shows our pid namespace, so its pids and `ns_last_pid` agree.
fn proc_is_ours() -> bool {
    static OURS: OnceLock<bool> = OnceLock::new();
    *OURS.get_or_init(|| {
        fs::read_link("/proc/self")
            .ok()
            .and_then(|target| target.to_str()?.parse::<u32>().ok())
            == Some(std::process::id())
    })
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    use super::super::{Group, Sweeper, peek_exit};
    use super::*;
    use crate::process::COOKIE_VAR;

    /// A shell that starts a `setsid` grandchild carrying the cookie, prints its pid and
    /// exits; its leader is left unreaped, as a sweep finds it.
    fn short_run(cookie: &str) -> (Group, i32, std::process::Child) {
        let mut shell = Command::new("sh")
            .args(["-c", "setsid sleep 30 >/dev/null 2>&1 & echo $!"])
            .env(COOKIE_VAR, cookie)
            .process_group(0)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn sh");
        let mut out = String::new();
        shell
            .stdout
            .take()
            .expect("stdout")
            .read_to_string(&mut out)
            .expect("read");
        while peek_exit(shell.id()).expect("peek").is_none() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let grandchild = out.trim().parse().expect("a pid");
        (Group::new(shell.id(), cookie.into()), grandchild, shell)
    }

    #[test]
    fn a_short_run_is_probed_and_its_setsid_grandchild_found() {
        // The cheap path rightly declines when the machine handed out more than `MAX_PIDS`
        // pids meanwhile (parallel tests, builds): try again then, until it is taken.
        for attempt in 0..20 {
            let (mut group, grandchild, mut shell) = short_run(&format!("recent-test-1-{attempt}"));
            // However slow the machine was to start the shell, the run counts as short.
            group.spawned = std::time::Instant::now();
            let sweeper = Sweeper::new(group.clone());
            let context = SweepContext {
                group: &group,
                me: i32::try_from(std::process::id()).expect("pid"),
                leader: &sweeper.leader,
            };
            let scan = scan(&context);
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(grandchild),
                nix::sys::signal::Signal::SIGKILL,
            );
            shell.wait().expect("reap");
            if let Some(scan) = scan {
                assert_eq!(scan.found, vec![grandchild]);
                return;
            }
        }
        panic!("a short run never took the cheap path in 20 tries");
    }

    #[test]
    fn a_long_run_takes_the_full_listing() {
        let (mut group, grandchild, mut shell) = short_run("recent-test-2");
        group.spawned -= WINDOW * 2;
        let sweeper = Sweeper::new(group.clone());
        let context = SweepContext {
            group: &group,
            me: i32::try_from(std::process::id()).expect("pid"),
            leader: &sweeper.leader,
        };
        assert!(scan(&context).is_none());
        // And the whole sweep still finds the grandchild.
        assert_eq!(Sweeper::new(group).finish_now().killed, 1);
        shell.wait().expect("reap");
        assert!(peek_gone(grandchild));
    }

    fn peek_gone(pid: i32) -> bool {
        for _ in 0..500 {
            match fs::read(format!("/proc/{pid}/stat")) {
                Err(_) => return true,
                Ok(stat) if super::super::parse_stat(&stat).is_some_and(|s| !s.is_alive()) => {
                    return true;
                }
                Ok(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
        false
    }
}
