//! The stop token: how whoever started a run tells its processes to stop.

use std::sync::{Arc, OnceLock};

use tokio_util::sync::CancellationToken;

/// A run's stop token: stop it and the running agent or gate stops its processes (SIGTERM,
/// the grace, SIGKILL, then the sweep of everything they started), and the run ends.
///
/// Clones share one state. A [`child`](Self::child) stops with its parent and can also be
/// stopped alone, which is how a run stops one attempt without stopping itself. An agent or
/// gate adapter watches the token it is given ([`AgentRequest`](https://docs.rs/ralph-loop/latest/ralph/agent/struct.AgentRequest.html)'s
/// and [`GateContext`](https://docs.rs/ralph-loop/latest/ralph/gate/struct.GateContext.html)'s `stop`) and ends promptly once it stops.
///
/// ```
/// # use ralph_loop_process::process::StopToken;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let run = StopToken::new();
/// let attempt = run.child();
/// attempt.stop();
/// assert!(attempt.is_stopped() && !run.is_stopped());
///
/// run.stop();
/// run.stopped().await; // returns at once: it has stopped
/// # }
/// ```
///
/// A token that a signal stopped ([`steer::listen_for_signals`](https://docs.rs/ralph-loop/latest/ralph/steer/fn.listen_for_signals.html))
/// says which: [`signal`](Self::signal), and the exit code a shell gives a process it ends.
#[derive(Clone, Debug, Default)]
pub struct StopToken {
    token: CancellationToken,
    /// The signal that stopped it, with its exit code; shared by its clones and children.
    signal: Arc<OnceLock<(&'static str, u8)>>,
}

impl StopToken {
    /// A token that has not stopped.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stops the token, its clones and its children. Stopping twice is stopping once.
    pub fn stop(&self) {
        self.token.cancel();
    }

    /// Stops it for the signal `name`, which ends a process with exit code `code`.
    pub fn stop_by_signal(&self, name: &'static str, code: u8) {
        let _ = self.signal.set((name, code));
        self.stop();
    }

    /// Whether it has stopped.
    pub fn is_stopped(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Waits until it stops (at once when it has).
    pub async fn stopped(&self) {
        self.token.cancelled().await;
    }

    /// A token that stops when this one does, and can be stopped alone.
    pub fn child(&self) -> Self {
        Self {
            token: self.token.child_token(),
            signal: Arc::clone(&self.signal),
        }
    }

    /// The signal that stopped the run (`SIGINT`, `SIGTERM`, `SIGHUP`), when one did.
    pub fn signal(&self) -> Option<&'static str> {
        self.signal.get().map(|(name, _)| *name)
    }

    /// The exit code a shell gives a process the signal that stopped the run ends: 128 +
    /// its number (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP); `None` when no signal
    /// stopped it.
    pub fn signal_exit_code(&self) -> Option<u8> {
        self.signal.get().map(|(_, code)| *code)
    }
}
