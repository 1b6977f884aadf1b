//! Running a process to completion: supervise it while pumping its output.

use std::io::pipe;
use std::path::Path;
use std::time::Duration;

use tokio::fs::{File, OpenOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe::Receiver;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::{Drain, Exit, ProcessError, ProcessSpec, SupervisedChild};
use crate::output::BoundedOutput;

/// The one read buffer: output is streamed through it, never collected whole.
const READ_CHUNK: usize = 64 * 1024;

/// What [`ProcessSpec::run`] observed.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ProcessReport {
    /// How the main process ended; `None` if it was never started (the stop token was
    /// already cancelled) or was not seen to die even after SIGKILL.
    pub exit: Option<Exit>,
    /// The timeout fired and the process was terminated.
    pub timed_out: bool,
    /// The stop token was cancelled and the process was terminated.
    pub stopped: bool,
    /// Wall time.
    pub duration: Duration,
    /// stdout and stderr, interleaved in the order they were written, bounded.
    pub output: BoundedOutput,
    /// Processes still alive after the main process ended, which were then killed.
    pub leaked: usize,
}

impl ProcessReport {
    /// The exit code, if the main process exited.
    pub fn code(&self) -> Option<i32> {
        self.exit.and_then(Exit::code)
    }

    /// The signal that ended the main process, if one did.
    pub fn signal(&self) -> Option<i32> {
        self.exit.and_then(Exit::signal)
    }

    /// Whether the main process exited with code 0 on its own.
    pub fn success(&self) -> bool {
        !self.timed_out && !self.stopped && self.exit.is_some_and(Exit::success)
    }
}

/// Why supervision ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cause {
    Exited(Exit),
    TimedOut,
    Stopped,
}

impl ProcessSpec {
    /// Runs the process to completion and reports how it went.
    ///
    /// The run ends when the main process exits, the timeout fires, or the stop token
    /// is cancelled; the latter two terminate the group (SIGTERM, grace, SIGKILL). Either
    /// way every process left in the group or carrying the cookie is then killed and
    /// counted as leaked, and the output is drained for at most a short while, so a
    /// background job holding the pipe cannot make this hang. If the stop token is
    /// already cancelled, nothing is started.
    ///
    /// Dropping the returned future kills everything the run started.
    ///
    /// # Errors
    ///
    /// [`ProcessError::Cwd`] or [`ProcessError::Spawn`] when the process cannot be
    /// started, [`ProcessError::Log`] when the log file cannot be opened or written,
    /// [`ProcessError::Io`] when its output or exit cannot be read. Processes are killed
    /// before any error is returned.
    pub async fn run(&self) -> Result<ProcessReport, ProcessError> {
        let started = Instant::now();
        let mut output = BoundedOutput::new(self.head, self.tail);
        if self.stop.is_cancelled() {
            return Ok(report(started, Cause::Stopped, None, output, 0));
        }
        let log = self.open_log().await?;
        let (mut child, reader) = self.launch_merged()?;
        let done = CancellationToken::new();
        let (pumped, ended) = tokio::join!(pump(reader, &mut output, log, &done), async {
            let ended = supervise(self, &mut child, started).await;
            done.cancel();
            ended
        });
        let (cause, exit, leaked) = ended?;
        pumped.map_err(|err| err.with_context(self))?;
        Ok(report(started, cause, exit, output, leaked))
    }

    async fn open_log(&self) -> Result<Option<File>, ProcessError> {
        let Some(path) = &self.log_path else {
            return Ok(None);
        };
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .await
            .map_err(|source| log_error(path, source))?;
        Ok(Some(file))
    }

    /// Starts the process with stdout and stderr on one pipe, which keeps their
    /// interleaving exactly as written.
    fn launch_merged(&self) -> Result<(SupervisedChild, Receiver), ProcessError> {
        let spawn_error = |source| ProcessError::Spawn {
            program: self.program_name(),
            source,
        };
        let (reader, writer) = pipe().map_err(spawn_error)?;
        let stderr = writer.try_clone().map_err(spawn_error)?;
        let child = SupervisedChild::launch(self, writer.into(), stderr.into())?;
        // Should this fail, dropping `child` kills the process.
        match Receiver::from_owned_fd(reader.into()) {
            Ok(reader) => Ok((child, reader)),
            Err(source) => Err(child.io_error(source)),
        }
    }
}

fn report(
    started: Instant,
    cause: Cause,
    exit: Option<Exit>,
    output: BoundedOutput,
    leaked: usize,
) -> ProcessReport {
    ProcessReport {
        exit,
        timed_out: cause == Cause::TimedOut,
        stopped: cause == Cause::Stopped,
        duration: started.elapsed(),
        output,
        leaked,
    }
}

fn log_error(path: &Path, source: std::io::Error) -> ProcessError {
    ProcessError::Log {
        path: path.to_owned(),
        source,
    }
}

/// Waits for the end of the run, terminates if it was cut short, and kills what is left.
/// Returns why it ended, the main process's exit, and how many others were killed.
async fn supervise(
    spec: &ProcessSpec,
    child: &mut SupervisedChild,
    started: Instant,
) -> Result<(Cause, Option<Exit>, usize), ProcessError> {
    // A timeout too large to represent is no timeout.
    let deadline = spec.timeout.and_then(|t| started.checked_add(t));
    let cause = tokio::select! {
        // An exit that coincides with the deadline is an exit, not a timeout.
        biased;
        exit = child.wait() => Cause::Exited(exit?),
        () = sleep_until_some(deadline) => Cause::TimedOut,
        () = spec.stop.cancelled() => Cause::Stopped,
    };
    if let Cause::Exited(exit) = cause {
        let leaked = child.kill_all().await;
        return Ok((cause, Some(exit), leaked));
    }
    let ended = child.terminate(spec.grace).await?;
    Ok((cause, ended.exit, ended.leaked))
}

/// A failure while pumping output, before it is given context.
enum PumpError {
    Read(std::io::Error),
    Log(std::io::Error),
}

impl PumpError {
    fn with_context(self, spec: &ProcessSpec) -> ProcessError {
        match (self, &spec.log_path) {
            (PumpError::Log(source), Some(path)) => log_error(path, source),
            (PumpError::Read(source) | PumpError::Log(source), _) => ProcessError::Io {
                program: spec.program_name(),
                source,
            },
        }
    }
}

/// Streams the pipe into `output` and the log until EOF, or until the drain after `done`
/// is cancelled is over (see [`Drain`]).
///
/// A log that fails is dropped and its error returned at the end: the process keeps
/// running as it would have, and its output keeps being read. A read error returns at
/// once; dropping the reader then makes further writes fail instead of block.
async fn pump(
    mut reader: Receiver,
    output: &mut BoundedOutput,
    mut log: Option<File>,
    done: &CancellationToken,
) -> Result<(), PumpError> {
    let mut buf = vec![0; READ_CHUNK];
    let mut drain: Option<Drain> = None;
    let mut log_failure = None;
    loop {
        // `done` and the drain come first, so a pipe that never stops being readable
        // cannot starve them.
        let read = tokio::select! {
            biased;
            () = done.cancelled(), if drain.is_none() => {
                drain = Some(Drain::begin());
                continue;
            }
            () = Drain::over(drain.as_ref()) => break,
            read = reader.read(&mut buf) => read,
        };
        let n = read.map_err(PumpError::Read)?;
        if n == 0 {
            break;
        }
        if let Some(drain) = &mut drain {
            drain.heard();
        }
        output.push(&buf[..n]);
        if let Some(file) = &mut log
            && let Err(err) = file.write_all(&buf[..n]).await
        {
            log_failure = Some(err);
            log = None;
        }
    }
    if let Some(file) = &mut log
        && let Err(err) = file.flush().await
    {
        log_failure = Some(err);
    }
    log_failure.map_or(Ok(()), |err| Err(PumpError::Log(err)))
}

async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
