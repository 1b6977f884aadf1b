//! Stopping a run from outside, the same way in every mode: see [`Interrupts`].

use std::path::Path;
use std::sync::{Arc, OnceLock};

use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::process::StopToken;

/// A signal that stops a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Interrupt {
    /// SIGINT: Ctrl+C in a terminal.
    Int,
    /// SIGTERM: CI runners cancelling a job, `timeout`, `kill`.
    Term,
    /// SIGHUP: the terminal went away.
    Hup,
}

impl Interrupt {
    /// The exit code a shell gives a process this signal ended: 128 + its number (130 for
    /// SIGINT, 143 for SIGTERM, 129 for SIGHUP).
    fn exit_code(self) -> u8 {
        match self {
            Interrupt::Int => 130,
            Interrupt::Term => 143,
            Interrupt::Hup => 129,
        }
    }
}

impl Interrupt {
    /// The signal's name: `SIGINT`, `SIGTERM`, `SIGHUP`.
    fn name(self) -> &'static str {
        match self {
            Interrupt::Int => "SIGINT",
            Interrupt::Term => "SIGTERM",
            Interrupt::Hup => "SIGHUP",
        }
    }
}

/// Stopping a run from outside, the same way in every mode: SIGINT (Ctrl+C), SIGTERM (what
/// CI runners, `timeout` and `kill` send) and SIGHUP (a closed terminal).
///
/// The first signal stops the run's stop token: the running agent or gate stops its
/// processes (SIGTERM, the grace, SIGKILL, then the sweep of everything they started), the
/// state is saved, and the run returns its interrupted outcome (a thread is Paused). An
/// attempt cut short this way is not counted against the task's retries. A second signal
/// does not wait out the grace: it kills at once every process the runs on the workspace
/// started, and exits the process.
///
/// ```no_run
/// use ralph::{FakeAgent, Interrupts, Ralph};
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let ralph = Ralph::builder().workspace(".").agent(FakeAgent::new()).build()?;
/// let interrupts = Interrupts::listen(ralph.workspace(), ralph.stop_token(), |signal| {
///     eprintln!("{signal}: stopping the running agent or gate and saving the state…");
/// })?;
/// let outcome = ralph.resume().await?;
/// let code = interrupts.exit_code().map_or(outcome.exit_code(), i32::from);
/// std::process::exit(code);
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Interrupts {
    first: Arc<OnceLock<Interrupt>>,
}

impl Interrupts {
    /// Starts listening. The first signal stops `stop` and calls `on_first` with its name
    /// (`SIGINT`, to tell the person what happens now); a second one kills every process
    /// that runs on `workspace` started, at once, and exits the process with the first
    /// signal's [`exit_code`](Self::exit_code). Call it inside a tokio runtime.
    ///
    /// # Errors
    ///
    /// When a signal handler cannot be installed.
    pub fn listen(
        workspace: &Path,
        stop: StopToken,
        on_first: impl Fn(&'static str) + Send + 'static,
    ) -> std::io::Result<Interrupts> {
        let streams = [
            (Interrupt::Int, signal(SignalKind::interrupt())?),
            (Interrupt::Term, signal(SignalKind::terminate())?),
            (Interrupt::Hup, signal(SignalKind::hangup())?),
        ];
        let first = Arc::new(OnceLock::new());
        let owner = crate::process::owner_of(workspace);
        let seen = Arc::clone(&first);
        tokio::spawn(async move {
            let mut streams = streams;
            let signal = next(&mut streams).await;
            let _ = seen.set(signal);
            on_first(signal.name());
            stop.stop();
            next(&mut streams).await;
            // The person asked twice: no grace. Everything the runs started carries the
            // workspace's owner tag; kill it all now, then go.
            crate::process::sweep_owner(&owner);
            std::process::exit(i32::from(signal.exit_code()));
        });
        Ok(Interrupts { first })
    }

    /// The name of the first signal received (`SIGINT`, `SIGTERM`, `SIGHUP`), if any.
    pub fn received(&self) -> Option<&'static str> {
        self.first.get().map(|signal| signal.name())
    }

    /// The exit code a shell gives a process the first signal received ends: 128 + its
    /// number (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP); `None` while none came.
    pub fn exit_code(&self) -> Option<u8> {
        self.first.get().map(|signal| signal.exit_code())
    }
}

/// The next of the three signals.
async fn next(streams: &mut [(Interrupt, Signal); 3]) -> Interrupt {
    let [(a, sa), (b, sb), (c, sc)] = streams;
    tokio::select! {
        _ = sa.recv() => *a,
        _ = sb.recv() => *b,
        _ = sc.recv() => *c,
    }
}
