//! Supervised child processes: nothing a run starts may outlive it.
//!
//! Every process is started in a process group of its own and with a per-run cookie in
//! its environment ([`COOKIE_VAR`]), which its descendants inherit. When a run ends — the
//! main process exits, times out, is stopped, or its handle is dropped — ralph kills the
//! group and then *sweeps*: on Linux it scans `/proc` for processes carrying the cookie
//! and kills them too, which catches descendants that left the group with `setsid` and
//! daemons reparented to pid 1. A daemon that also cleared its environment is caught by
//! its ancestry: ralph's process is a child subreaper, so it becomes ralph's child when its
//! parent exits (see `sys/linux/adopted.rs` for how a sweep tells whose orphan it is, and
//! what stays out of reach). On other unix systems only the group is killed.
//!
//! This is the only module that starts processes (the workspace's `clippy.toml` forbids
//! `Command` everywhere else): git too runs
//! through it ([`ProcessSpec::capture`]).
//!
//! Inside the crate every run goes through one supervisor, `ProcessSpec::supervise`
//! (`supervise.rs`): the spawn, the log, the clocks, the stop, the grace, the sweep and the
//! drain, with the consumer's listener handed the output (by reads, or by lines). Gates,
//! git, the command agent, the vendor CLIs and Claude are listeners. The public levels:
//!
//! - [`ProcessSpec::run`] runs to completion and returns a [`ProcessReport`] with the
//!   exit, timing, bounded interleaved output and the number of leaked processes killed.
//! - [`ProcessSpec::spawn`] returns a [`SupervisedChild`] for streaming consumers; it
//!   kills everything left when dropped.
//!
//! ```
//! use std::time::Duration;
//! use ralph_loop_process::process::ProcessSpec;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ralph_loop_process::process::ProcessError> {
//! let report = ProcessSpec::new("sh")
//!     .args(["-c", "echo hello; echo oops >&2; exit 3"])
//!     .timeout(Duration::from_secs(10))
//!     .run()
//!     .await?;
//! assert_eq!(report.code(), Some(3));
//! assert_eq!(report.output.to_string(), "hello\noops\n");
//! assert_eq!(report.leaked, 0);
//! # Ok(())
//! # }
//! ```

#[cfg(not(unix))]
compile_error!("ralph::process supports unix systems only");

mod capture;
mod child;
mod drain;
pub mod lines;
mod run;
mod sandbox;
mod spec;
mod stop;
mod supervise;
mod sys;

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

pub use capture::Captured;
pub use child::{SupervisedChild, Termination};
use drain::Drain;
pub use run::ProcessReport;
pub use sandbox::{Access, Sandbox, Unavailable};
pub use spec::ProcessSpec;
/// The standard library's command, as the seams name it where they hand one to an
/// embedder's code to start (`AgentRequest::command`): outside this module the crate only
/// builds commands, it never starts one (the layering test looks for the standard name).
pub use std::process::Command as StdCommand;
pub use stop::StopToken;
pub use supervise::{Clocks, LineListener, Lines, Listener, OwnClock, Streams};

/// The environment variable carrying the run cookies of every supervised ancestor.
///
/// Its value is a `:`-separated list, so a supervised process that itself supervises
/// processes (ralph running its own test suite as a gate) keeps its ancestors' cookies
/// and stays reachable by their sweeps. Reserved: a value given in [`ProcessSpec::env`]
/// is replaced.
pub const COOKIE_VAR: &str = "RALPH_RUN_COOKIE";

/// The default time between SIGTERM and SIGKILL when ralph stops a process: the one
/// default of every mode, gate and agent (`grace` in the config overrides it).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// Where, inside a workspace, ralph keeps the git work trees of tasks built at once
/// (`build_concurrency`): `.ralph/worktrees/<task>`.
pub const WORKTREES: [&str; 2] = [".ralph", "worktrees"];

/// The owner tag of the processes ralph runs for `workspace` (see [`ProcessSpec::owner`]):
/// `ws-` and a hash of its canonical path, the same in every ralph process. A task's work
/// tree (under `.ralph/worktrees/`) has its workspace's tag, so that the sweeps of the workspace
/// (at the next start, on SIGTERM) reach what an agent or gate left running there.
pub fn owner_of(workspace: &Path) -> String {
    // Every agent run and gate asks, nearly always for the same workspace; resolving the
    // canonical path costs a `readlink` per component. The last answer is kept (one entry:
    // a process that walks through many workspaces keeps no more). A relative path is
    // not kept: it names another folder once the process changes directory.
    if workspace.is_relative() {
        return owner_uncached(workspace);
    }
    static LAST: std::sync::Mutex<Option<(std::path::PathBuf, String)>> =
        std::sync::Mutex::new(None);
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((path, owner)) = last.as_ref()
        && path == workspace
    {
        return owner.clone();
    }
    let owner = owner_uncached(workspace);
    *last = Some((workspace.to_path_buf(), owner.clone()));
    owner
}

fn owner_uncached(workspace: &Path) -> String {
    let path = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_owned());
    let path = workspace_of_worktree(&path).unwrap_or(path);
    // FNV-1a: stable across builds and Rust versions, unlike `DefaultHasher`.
    let hash = path
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        });
    format!("ws-{hash:016x}")
}

/// The workspace holding `path` when `path` is a task's work tree (`<ws>/.ralph/worktrees/<task>`).
fn workspace_of_worktree(path: &Path) -> Option<std::path::PathBuf> {
    let task = path.parent()?;
    let state = task.parent()?;
    let names = [state.file_name()?, task.file_name()?];
    (names == WORKTREES.map(std::ffi::OsStr::new)).then(|| state.parent().map(Path::to_path_buf))?
}

/// Kills every process tagged with `owner` (never the calling process) and returns how many.
///
/// A supervisor that is killed with SIGKILL cannot clean up: whatever it ran lives on. The next
/// supervisor of the same workspace calls this first, while it holds the workspace's lock, so
/// nothing of the earlier run can still be wanted. On other unix systems than Linux it finds
/// nothing. Scans `/proc`; blocks for milliseconds.
pub fn sweep_owner(owner: &str) -> usize {
    sys::sweep_owner(owner)
}

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// It was killed by this signal.
    Signal(i32),
}

impl Exit {
    /// The exit code, if it exited.
    pub fn code(self) -> Option<i32> {
        match self {
            Exit::Code(code) => Some(code),
            Exit::Signal(_) => None,
        }
    }

    /// The signal that killed it, if one did.
    pub fn signal(self) -> Option<i32> {
        match self {
            Exit::Code(_) => None,
            Exit::Signal(signal) => Some(signal),
        }
    }

    /// Whether it exited with code 0.
    pub fn success(self) -> bool {
        self == Exit::Code(0)
    }
}

impl Exit {
    /// How the process inside a sandbox ended, from bubblewrap's exit: bubblewrap exits
    /// with the code of the process it ran, or with 128 + N when a signal N killed it, as
    /// a shell reports it (so a process that itself exits with 130 reads as killed by
    /// SIGINT).
    pub fn through_sandbox(self) -> Exit {
        match self {
            Exit::Code(code @ 129..=192) => Exit::Signal(code - 128),
            other => other,
        }
    }
}

impl From<ExitStatus> for Exit {
    fn from(status: ExitStatus) -> Self {
        match (status.code(), status.signal()) {
            (Some(code), _) => Exit::Code(code),
            (None, Some(signal)) => Exit::Signal(signal),
            // wait(2) reports only exits and kills for a reaped child; keep a marker value
            // rather than panic should a platform ever report something else.
            (None, None) => Exit::Code(-1),
        }
    }
}

/// A supervised process could not be started or watched. Exhaustive on purpose: ralph's
/// agents and gates handle each case, and a new one must reach them.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The program could not be started.
    #[error("could not start `{program}`")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The working directory is missing or not a directory.
    #[error("working directory {} is not usable", cwd.display())]
    Cwd {
        /// The directory.
        cwd: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The log file could not be opened or written.
    #[error("could not write log file {}", path.display())]
    Log {
        /// The log file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Waiting for the process or reading its output failed.
    #[error("i/o error while supervising `{program}`")]
    Io {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: io::Error,
    },
}

impl ProcessError {
    fn io_source(&self) -> &io::Error {
        match self {
            ProcessError::Spawn { source, .. }
            | ProcessError::Cwd { source, .. }
            | ProcessError::Log { source, .. }
            | ProcessError::Io { source, .. } => source,
        }
    }
}

impl From<ProcessError> for io::Error {
    /// Keeps the kind of the underlying error; the message names what failed.
    fn from(err: ProcessError) -> Self {
        io::Error::new(err.io_source().kind(), err)
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn exit_accessors() {
        assert!(Exit::Code(0).success());
        assert!(!Exit::Code(1).success());
        assert!(!Exit::Signal(9).success());
        assert_eq!(Exit::Code(3).code(), Some(3));
        assert_eq!(Exit::Signal(15).signal(), Some(15));
        assert_eq!(Exit::Signal(15).code(), None);
    }

    #[test]
    fn exit_from_std_status() {
        assert_eq!(Exit::from(ExitStatus::from_raw(3 << 8)), Exit::Code(3));
        assert_eq!(Exit::from(ExitStatus::from_raw(9)), Exit::Signal(9));
    }

    #[test]
    fn io_error_keeps_kind_message_and_chain() {
        let err = ProcessError::Spawn {
            program: "nope".into(),
            source: io::Error::from(io::ErrorKind::NotFound),
        };
        let io = io::Error::from(err);
        assert_eq!(io.kind(), io::ErrorKind::NotFound);
        assert_eq!(io.to_string(), "could not start `nope`");
        assert!(io.source().is_some());
    }

    #[test]
    fn a_task_worktree_has_its_workspaces_owner_tag() {
        let ws = tempfile::tempdir().unwrap();
        let tree = ws.path().join(".ralph/worktrees/t-3");
        std::fs::create_dir_all(&tree).unwrap();
        assert_eq!(owner_of(&tree), owner_of(ws.path()));
        let other = ws.path().join(".ralph/elsewhere/t-3");
        std::fs::create_dir_all(&other).unwrap();
        assert_ne!(owner_of(&other), owner_of(ws.path()));
    }
}
