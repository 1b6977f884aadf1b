//! Running a process to completion: its output bounded in memory, all of it in the log.

use std::time::Duration;

use tokio::time::Instant;

use super::supervise::{Clocks, Listener, Streams};
use super::{Exit, ProcessError, ProcessSpec};
use crate::output::BoundedOutput;

/// What [`ProcessSpec::run`] observed.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ProcessReport {
    /// How the main process ended; `None` if it was never started (the stop token was
    /// already stopped) or was not seen to die even after SIGKILL.
    pub exit: Option<Exit>,
    /// The timeout fired and the process was terminated.
    pub timed_out: bool,
    /// The stop token has stopped and the process was terminated.
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

impl ProcessSpec {
    /// Runs the process to completion and reports how it went.
    ///
    /// The run ends when the main process exits, the timeout fires, or the stop token
    /// has stopped; the latter two terminate the group (SIGTERM, grace, SIGKILL). Either
    /// way every process left in the group or carrying the cookie is then killed and
    /// counted as leaked, and the output is drained for at most a short while, so a
    /// background job holding the pipe cannot make this hang. If the stop token is
    /// already stopped, nothing is started.
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
        let mut output = Kept::new(BoundedOutput::new(self.head, self.tail));
        if self.stop.is_stopped() {
            return Ok(ProcessReport {
                exit: None,
                timed_out: false,
                stopped: true,
                duration: started.elapsed(),
                output: output.output,
                leaked: 0,
            });
        }
        let clocks = Clocks {
            // A timeout too large to represent is no timeout.
            deadline: self.timeout.and_then(|t| started.checked_add(t)),
            ..Clocks::default()
        };
        let run = self.supervise(Streams::Merged, clocks, &mut output).await?;
        if let Some(source) = run.log_error {
            let path = self.log_path.clone().unwrap_or_default();
            return Err(ProcessError::Log { path, source });
        }
        if let Some(source) = run.read_error {
            let program = self.program_name();
            return Err(ProcessError::Io { program, source });
        }
        Ok(ProcessReport {
            exit: run.exit,
            timed_out: output.timed_out,
            stopped: output.stopped,
            duration: run.duration,
            output: output.output,
            leaked: run.leaked,
        })
    }
}

/// All output, bounded: the head and tail kept, the middle counted; and which clock, if
/// any, ended the run.
struct Kept {
    output: BoundedOutput,
    timed_out: bool,
    stopped: bool,
}

impl Kept {
    fn new(output: BoundedOutput) -> Self {
        Kept {
            output,
            timed_out: false,
            stopped: false,
        }
    }
}

impl Listener for Kept {
    /// The report says which clock ended the run: the cut itself says nothing more.
    type Cut = ();

    fn stopped(&mut self) {
        self.stopped = true;
    }

    fn past_deadline(&mut self) {
        self.timed_out = true;
    }

    /// No idle clock is set for a run to completion.
    fn silent(&mut self) {
        self.timed_out = true;
    }

    fn stdout(&mut self, bytes: &[u8]) -> Option<()> {
        self.output.push(bytes);
        None
    }
}
