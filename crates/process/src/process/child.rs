//! The low-level handle: a supervised child whose descendants die with it.

use std::io;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::task::JoinHandle;
use tokio::time::timeout;

use super::sys::{self, Group};
use super::{COOKIE_VAR, Exit, ProcessError, ProcessSpec, Sandbox};

/// How long a SIGKILLed main process may take to be reported dead before its exit is
/// given up on (a process stuck in the kernel ignores even SIGKILL for a while).
const KILL_WAIT: Duration = Duration::from_secs(5);

/// Longest pause between exit checks, should the exit's pidfd not wake us (or be missing).
#[cfg(target_os = "linux")]
const EXIT_POLL: Duration = Duration::from_millis(100);

/// A running supervised process, for consumers that stream its output.
///
/// Take its output with [`take_stdout`](Self::take_stdout) and
/// [`take_stderr`](Self::take_stderr), then [`wait`](Self::wait) for it and
/// [`kill_all`](Self::kill_all) whatever it left behind, or [`terminate`](Self::terminate)
/// it. Dropping the handle before that kills the process group and sweeps the cookie
/// synchronously, so dropping a future that owns it leaks nothing.
///
/// ```
/// use tokio::io::{AsyncBufReadExt, BufReader};
/// use ralph_loop_process::process::ProcessSpec;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut child = ProcessSpec::new("sh").args(["-c", "echo one; echo two"]).spawn()?;
/// let mut lines = BufReader::new(child.take_stdout().expect("piped")).lines();
/// let mut seen = Vec::new();
/// while let Some(line) = lines.next_line().await? {
///     seen.push(line);
/// }
/// assert_eq!(seen, ["one", "two"]);
/// assert!(child.wait().await?.success());
/// assert_eq!(child.kill_all().await, 0);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct SupervisedChild {
    child: Child,
    pid: u32,
    group: Group,
    program: String,
    stdin_writer: Option<JoinHandle<()>>,
    exit: Option<Exit>,
    /// Set once a sweep found nothing left; the drop guard then has nothing to do.
    swept: bool,
    /// Readable once the main process exits (see `sys::exit_notice`).
    #[cfg(target_os = "linux")]
    exited: Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>,
}

/// How [`SupervisedChild::terminate`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Termination {
    /// How the main process ended; `None` if it was not seen to die even after SIGKILL.
    pub exit: Option<Exit>,
    /// Other processes still alive after the main process ended, which were killed.
    pub leaked: usize,
}

impl ProcessSpec {
    /// Starts the process with piped stdout and stderr.
    ///
    /// Must be called within a Tokio runtime. The spec's timeout, stop token and log
    /// path are for [`run`](ProcessSpec::run); a streaming consumer applies its own.
    ///
    /// # Errors
    ///
    /// [`ProcessError::Cwd`] when the working directory is unusable,
    /// [`ProcessError::Spawn`] when the program cannot be started.
    pub fn spawn(&self) -> Result<SupervisedChild, ProcessError> {
        SupervisedChild::launch(self, Stdio::piped(), Stdio::piped())
    }

    /// Starts the process with stdout written to `file` and stderr piped: for a program
    /// that exits before a pipe has taken all it wrote (Node's `process.exit` drops what is
    /// still queued for a pipe, never for a file).
    ///
    /// # Errors
    ///
    /// As [`spawn`](Self::spawn).
    pub fn spawn_stdout_to(&self, file: std::fs::File) -> Result<SupervisedChild, ProcessError> {
        SupervisedChild::launch(self, Stdio::from(file), Stdio::piped())
    }
}

impl SupervisedChild {
    /// Starts `spec` in a new process group with a fresh cookie.
    pub(super) fn launch(
        spec: &ProcessSpec,
        stdout: Stdio,
        stderr: Stdio,
    ) -> Result<Self, ProcessError> {
        let spawn_error = |source| ProcessError::Spawn {
            program: spec.program_name(),
            source,
        };
        if spec.sandbox.confines() {
            let path = spec
                .env
                .iter()
                .rev()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| v.as_os_str());
            Sandbox::find_program(&spec.program, spec.cwd.as_deref(), path)
                .map_err(|e| check_cwd(spec).err().unwrap_or_else(|| spawn_error(e)))?;
        }
        sys::before_spawn();
        let cookie = sys::new_cookie();
        let (mut command, sandboxed) = command(spec, &cookie, stdout, stderr);
        let mut child = command
            .spawn()
            .map_err(|e| check_cwd(spec).err().unwrap_or_else(|| spawn_error(e)))?;
        // The command holds the parent's copies of any output pipe's write end; EOF can
        // only come once they are closed.
        drop(command);
        let pid = child
            .id()
            .ok_or_else(|| spawn_error(io::Error::other("no pid right after spawn")))?;
        let stdin_writer = match (spec.stdin.clone(), child.stdin.take()) {
            (Some(bytes), Some(stdin)) => Some(feed(stdin, bytes)),
            _ => None,
        };
        Ok(SupervisedChild {
            child,
            pid,
            group: Group::launched(pid, cookie, sandboxed),
            program: spec.program_name(),
            stdin_writer,
            exit: None,
            swept: false,
            // Opened before any look at the exit: an exit before it is seen by that look,
            // and the process stays a zombie, so its pid is still its own.
            #[cfg(target_os = "linux")]
            exited: sys::exit_notice(pid),
        })
    }

    /// The main process's pid, which is also its process group id.
    pub fn id(&self) -> u32 {
        self.pid
    }

    /// This run's cookie, found in [`COOKIE_VAR`] of the process and its descendants.
    pub fn cookie(&self) -> &str {
        self.group.cookie()
    }

    /// The main process's stdout; `None` once taken.
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.stdout.take()
    }

    /// The main process's stderr; `None` once taken.
    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.child.stderr.take()
    }

    /// Waits for the main process to exit. Cancel-safe; returns the same exit when called
    /// again.
    ///
    /// Descendants keep running: call [`kill_all`](Self::kill_all) next. Until then, on
    /// Linux, the main process is left unreaped, so its group id cannot be reused by an
    /// unrelated process before the group is killed.
    ///
    /// # Errors
    ///
    /// [`ProcessError::Io`] if the operating system will not report the exit.
    pub async fn wait(&mut self) -> Result<Exit, ProcessError> {
        if let Some(exit) = self.exit {
            return Ok(exit);
        }
        let mut exit = self
            .observe_exit()
            .await
            .map_err(|source| self.io_error(source))?;
        if self.group.sandboxed {
            exit = exit.through_sandbox();
        }
        self.exit = Some(exit);
        self.group.seen_exit();
        Ok(exit)
    }

    /// The main process's exit, once [`wait`](Self::wait) has seen it.
    pub fn exited(&self) -> Option<Exit> {
        self.exit
    }

    /// Sends SIGINT to the main process only (not its group); it decides what to do about
    /// it. Use [`wait`](Self::wait) with a timeout, then [`terminate`](Self::terminate).
    pub fn interrupt(&self) {
        if self.exit.is_none() {
            self.group.interrupt();
        }
    }

    /// Sends SIGTERM to the process group, waits up to `grace` for the main process,
    /// sends SIGKILL to the group, then kills everything left ([`kill_all`](Self::kill_all)).
    ///
    /// # Errors
    ///
    /// [`ProcessError::Io`] if the operating system will not report the exit; the group
    /// has been killed regardless.
    pub async fn terminate(&mut self, grace: Duration) -> Result<Termination, ProcessError> {
        self.group.terminate();
        let exit = match timeout(grace, self.wait()).await {
            Ok(exit) => Some(exit),
            Err(_elapsed) => {
                self.group.kill();
                timeout(KILL_WAIT, self.wait()).await.ok()
            }
        };
        let leaked = self.kill_all().await;
        Ok(Termination {
            exit: exit.transpose()?,
            leaked,
        })
    }

    /// Kills the process group and every process carrying the cookie, main process
    /// included if it still runs, and returns how many processes other than the main one
    /// it killed.
    ///
    /// The first scan of `/proc` runs on this thread (a fraction of a millisecond, and
    /// usually all there is to do); a sweep that found something continues on a blocking
    /// thread, pausing between scans for the killed processes to die.
    pub async fn kill_all(&mut self) -> usize {
        let sweep = match self.group.start_sweep() {
            Ok(sweep) => sweep,
            Err(rest) => match tokio::task::spawn_blocking(move || rest.finish()).await {
                Ok(sweep) => sweep,
                // No blocking pool (the runtime is shutting down): sweep on this thread.
                Err(_) => self.group.kill_all(),
            },
        };
        self.swept = sweep.clean;
        self.stop_feeding();
        if sweep.clean && self.exit.is_some() {
            // Everything in the group is dead, so the group id may now be released. The
            // leader is a zombie: reaping cannot block. Should it fail, tokio reaps the
            // child when the handle drops.
            let _ = self.child.try_wait();
        }
        sweep.killed
    }

    pub(super) fn io_error(&self, source: io::Error) -> ProcessError {
        ProcessError::Io {
            program: self.program.clone(),
            source,
        }
    }

    /// Stops writing stdin: everything that could read it is dead.
    fn stop_feeding(&mut self) {
        if let Some(writer) = self.stdin_writer.take() {
            writer.abort();
        }
    }

    /// Waits for the exit without reaping, so the process group id stays ours.
    #[cfg(target_os = "linux")]
    async fn observe_exit(&mut self) -> io::Result<Exit> {
        loop {
            match sys::peek_exit(self.pid) {
                Ok(Some(exit)) => return Ok(exit),
                Ok(None) => {}
                // A status nix cannot decode (a real-time signal): reaping reads it.
                Err(_) => return self.reap().await,
            }
            // The pidfd wakes us at the exit; the poll covers a kernel without pidfds. The
            // readiness is cleared each time: the look above, not the pidfd, decides.
            match &self.exited {
                Some(exited) => {
                    if let Ok(Ok(mut ready)) = timeout(EXIT_POLL, exited.readable()).await {
                        ready.clear_ready();
                    }
                }
                None => tokio::time::sleep(EXIT_POLL).await,
            }
        }
    }

    #[cfg(not(target_os = "linux"))]
    async fn observe_exit(&mut self) -> io::Result<Exit> {
        self.reap().await
    }

    async fn reap(&mut self) -> io::Result<Exit> {
        self.child.wait().await.map(Exit::from)
    }
}

impl Drop for SupervisedChild {
    /// Kills the group and sweeps the cookie unless a sweep already found nothing left.
    /// Synchronous on purpose: a dropped future gets no chance to await.
    fn drop(&mut self) {
        self.stop_feeding();
        if !self.swept {
            // Fails only when tokio already reaped the child, which then needs no signal.
            let _ = self.child.start_kill();
            self.group.kill_all();
        }
    }
}

/// The command for `spec`: its own process group, the cookie chain, stdin as asked; in
/// its sandbox, if it confines (then the second value is true).
fn command(spec: &ProcessSpec, cookie: &Arc<str>, stdout: Stdio, stderr: Stdio) -> (Command, bool) {
    let wrapped = spec
        .sandbox
        .wrap(spec.cwd.as_deref(), &spec.program, &spec.args);
    let sandboxed = wrapped.is_some();
    let mut command = match wrapped {
        Some((bwrap, args)) => {
            let mut command = Command::new(bwrap);
            command
                .args(args)
                .env_clear()
                .envs(spec.sandbox.environment());
            command
        }
        None => {
            let mut command = Command::new(&spec.program);
            command.args(&spec.args);
            command
        }
    };
    command
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .env(COOKIE_VAR, sys::cookie_chain(spec.owner.as_deref(), cookie))
        .stdin(if spec.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(stdout)
        .stderr(stderr)
        // A group of its own: one signal reaches it and every descendant that stays.
        .process_group(0);
    if let Some(cwd) = &spec.cwd {
        command.current_dir(cwd);
    }
    (command, sandboxed)
}

/// Asked when a spawn failed: in a missing directory it fails with the same `NotFound` as
/// a missing program, and the error should say which it was. (Not asked before every
/// spawn: the directory nearly always exists, and each agent run would pay a `stat`.)
fn check_cwd(spec: &ProcessSpec) -> Result<(), ProcessError> {
    let Some(cwd) = &spec.cwd else {
        return Ok(());
    };
    let cwd_error = |source| ProcessError::Cwd {
        cwd: cwd.clone(),
        source,
    };
    let meta = std::fs::metadata(cwd).map_err(cwd_error)?;
    if meta.is_dir() {
        Ok(())
    } else {
        Err(cwd_error(io::ErrorKind::NotADirectory.into()))
    }
}

/// Writes `bytes` to the child's stdin, then closes it.
fn feed(mut stdin: ChildStdin, bytes: Vec<u8>) -> JoinHandle<()> {
    tokio::spawn(async move {
        // A process that exits without reading all its input is not an error here: its
        // exit says how it went.
        let _ = stdin.write_all(&bytes).await;
        // Dropping `stdin` closes the pipe: the process sees EOF.
    })
}
