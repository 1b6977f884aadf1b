//! Linux: the `/proc` cookie sweep, and exit detection that leaves the leader a zombie.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::thread;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;

use super::{Group, Sweep};
use crate::process::{COOKIE_VAR, Exit};

/// Scans before giving up on processes that keep appearing (a fork loop) or will not die.
const MAX_ROUNDS: usize = 50;
/// Time for killed processes to turn into zombies before the next scan.
const ROUND_PAUSE: Duration = Duration::from_millis(2);

/// Kills every live process in the group or carrying the cookie, scanning until a scan
/// finds none (or [`MAX_ROUNDS`] pass).
///
/// Each process is found before it is killed so it can be counted; the group signal
/// after each scan is a backstop for processes `/proc` does not show us.
pub(super) fn sweep(group: &Group) -> Sweep {
    let me = i32::try_from(std::process::id()).unwrap_or(0);
    let mut killed = HashSet::new();
    for _ in 0..MAX_ROUNDS {
        let found = members(group, me);
        for &pid in &found {
            // ESRCH: it died meanwhile, which is what we want.
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        group.kill();
        if found.is_empty() {
            return Sweep {
                killed: count_without(&killed, group.leader),
                clean: true,
            };
        }
        killed.extend(found);
        thread::sleep(ROUND_PAUSE);
    }
    Sweep {
        killed: count_without(&killed, group.leader),
        clean: false,
    }
}

fn count_without(killed: &HashSet<i32>, leader: i32) -> usize {
    killed.len() - usize::from(killed.contains(&leader))
}

/// Live processes, other than `me`, in the group or carrying the cookie.
fn members(group: &Group, me: i32) -> Vec<i32> {
    // Without /proc there is nothing to scan; the group signal still runs.
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me && belongs(pid, group))
        .collect()
}

fn belongs(pid: i32, group: &Group) -> bool {
    // Unreadable means gone (or not ours to read): either way, not ours to kill.
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some((state, pgrp)) = parse_stat(&stat) else {
        return false;
    };
    if matches!(state, 'Z' | 'X' | 'x') {
        return false;
    }
    pgrp == group.leader
        || fs::read(format!("/proc/{pid}/environ"))
            .is_ok_and(|environ| carries_cookie(&environ, group.cookie()))
}

/// The state letter and process group of a `/proc/<pid>/stat` line.
///
/// The command name may contain spaces and parentheses, so fields are counted from the
/// last `)`.
fn parse_stat(stat: &str) -> Option<(char, i32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_awkward_command_names() {
        let stat = "4242 (a) b) c) S 1 4240 4240 0 -1 4194560";
        assert_eq!(parse_stat(stat), Some(('S', 4240)));
        assert_eq!(parse_stat("1 (init) Z 0 1 1"), Some(('Z', 1)));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) R"), None);
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
    fn peek_exit_of_a_non_child_is_an_error() {
        // pid 1 is never our child.
        assert!(peek_exit(1).is_err());
    }
}
