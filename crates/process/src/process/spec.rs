//! What to run and how to supervise it.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::time::Duration;

use crate::process::StopToken;

use super::{DEFAULT_GRACE, Sandbox};
use crate::output::{DEFAULT_HEAD, DEFAULT_TAIL};

/// A program to run under supervision: its arguments, environment, input, limits and log.
///
/// Build one with [`ProcessSpec::new`] and the setters, then [`run`](ProcessSpec::run) it
/// to completion or [`spawn`](ProcessSpec::spawn) it for streaming.
#[derive(Clone, Debug)]
pub struct ProcessSpec {
    pub(super) program: OsString,
    pub(super) args: Vec<OsString>,
    pub(super) cwd: Option<PathBuf>,
    pub(super) env: Vec<(OsString, OsString)>,
    pub(super) stdin: Option<Vec<u8>>,
    pub(super) timeout: Option<Duration>,
    pub(super) grace: Duration,
    pub(super) stop: StopToken,
    pub(super) log_path: Option<PathBuf>,
    pub(super) head: usize,
    pub(super) tail: usize,
    pub(super) owner: Option<String>,
    pub(super) sandbox: Sandbox,
}

impl ProcessSpec {
    /// Runs `program` (looked up in `PATH`) with no arguments, no input, no timeout, a
    /// 5-second grace period, a fresh stop token, no log, and the default output limits.
    pub fn new(program: impl AsRef<OsStr>) -> Self {
        ProcessSpec {
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            cwd: None,
            env: Vec::new(),
            stdin: None,
            timeout: None,
            grace: DEFAULT_GRACE,
            stop: StopToken::new(),
            log_path: None,
            head: DEFAULT_HEAD,
            tail: DEFAULT_TAIL,
            owner: None,
            sandbox: Sandbox::unconfined(),
        }
    }

    /// Appends an argument.
    #[must_use]
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Appends arguments.
    #[must_use]
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Sets the working directory; by default the caller's.
    #[must_use]
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Adds an environment variable on top of the inherited environment.
    #[must_use]
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Adds environment variables on top of the inherited environment; a later value of the
    /// same key wins.
    #[must_use]
    pub fn envs<I, K, V>(mut self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        self.env.extend(
            vars.into_iter()
                .map(|(k, v)| (k.as_ref().to_owned(), v.as_ref().to_owned())),
        );
        self
    }

    /// Tags the process and its descendants as `owner`'s (see [`owner_of`](super::owner_of)),
    /// so that [`sweep_owner`](super::sweep_owner) finds them even after the supervisor was
    /// killed without a chance to clean up.
    #[must_use]
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// Runs the process under `sandbox` (by default unconfined): confined, it gets only the
    /// sandbox's variables of the inherited environment, and those set here.
    #[must_use]
    pub fn sandbox(mut self, sandbox: Sandbox) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// Bytes written to the process's stdin, which is then closed. Without this, stdin is
    /// `/dev/null`.
    #[must_use]
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }

    /// Wall-clock limit for [`run`](ProcessSpec::run), after which the process is
    /// terminated and the report says `timed_out`.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Time between SIGTERM and SIGKILL when terminating.
    #[must_use]
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// A token that, once stopped, makes [`run`](ProcessSpec::run) terminate the process
    /// and report `stopped`.
    #[must_use]
    pub fn stop(mut self, stop: StopToken) -> Self {
        self.stop = stop;
        self
    }

    /// A file the full stdout+stderr stream is appended to (its folder made when missing).
    #[must_use]
    pub fn log_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.log_path = Some(path.into());
        self
    }

    /// How many leading and trailing bytes of output [`run`](ProcessSpec::run) keeps in
    /// memory; the middle is only counted.
    #[must_use]
    pub fn output_limits(mut self, head: usize, tail: usize) -> Self {
        self.head = head;
        self.tail = tail;
        self
    }

    /// The program.
    pub fn program(&self) -> &OsStr {
        &self.program
    }

    /// The program, for messages.
    pub(super) fn program_name(&self) -> String {
        self.program.to_string_lossy().into_owned()
    }
}
