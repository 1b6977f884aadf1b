//! Short tools ralph runs for itself (git): all of their output, under the same
//! supervision as an agent or a gate.

use super::supervise::{Clocks, Listener, Streams};
use super::{Exit, ProcessError, ProcessSpec};

/// What [`ProcessSpec::capture`] returns: the exit and all of stdout and stderr.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Captured {
    /// How it ended.
    pub exit: Exit,
    /// All it printed on stdout.
    pub stdout: Vec<u8>,
    /// All it printed on stderr.
    pub stderr: Vec<u8>,
}

impl ProcessSpec {
    /// Runs the process to its end and returns all it printed; then kills whatever it left
    /// behind, like every supervised run.
    ///
    /// Unbounded: for ralph's own calls of a trusted tool whose output it parses (git),
    /// never for an agent or a gate. The spec's timeout, stop token and log do not apply;
    /// dropping the future kills the process.
    pub async fn capture(&self) -> Result<Captured, ProcessError> {
        let mut all = All::default();
        let run = self
            .supervise(Streams::Separate, Clocks::default(), &mut all)
            .await?;
        let io = |source| ProcessError::Io {
            program: self.program_name(),
            source,
        };
        if let Some(source) = run.read_error {
            return Err(io(source));
        }
        let exit = run
            .exit
            .ok_or_else(|| io(std::io::Error::other("its end was not seen")))?;
        Ok(Captured {
            exit,
            stdout: all.stdout,
            stderr: all.stderr,
        })
    }
}

/// All of both streams.
#[derive(Default)]
struct All {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl Listener for All {
    /// A capture sets no clock: a stopped one is an error, "its end was not seen".
    type Cut = ();

    fn stopped(&mut self) {}

    fn past_deadline(&mut self) {}

    fn silent(&mut self) {}

    fn stdout(&mut self, bytes: &[u8]) -> Option<()> {
        self.stdout.extend_from_slice(bytes);
        None
    }

    fn stderr(&mut self, bytes: &[u8]) {
        self.stderr.extend_from_slice(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn captures_both_streams_whole_and_the_exit() {
        let script = "head -c 300000 /dev/zero | tr '\\0' o; echo err >&2; exit 4";
        let captured = ProcessSpec::new("sh")
            .args(["-c", script])
            .capture()
            .await
            .unwrap();
        assert_eq!(captured.exit, Exit::Code(4));
        assert_eq!(captured.stdout.len(), 300_000);
        assert_eq!(captured.stderr, b"err\n");
    }

    #[tokio::test]
    async fn a_background_job_is_killed_and_does_not_hold_the_capture() {
        let captured = ProcessSpec::new("sh")
            .args(["-c", "sleep 1000 & echo started"])
            .capture()
            .await
            .unwrap();
        assert!(captured.exit.success());
        assert_eq!(captured.stdout, b"started\n");
    }
}
