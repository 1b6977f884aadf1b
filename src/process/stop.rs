//! The stop token: how whoever started a run tells its processes to stop.

use tokio_util::sync::CancellationToken;

/// A run's stop token: stop it and the running agent or gate stops its processes (SIGTERM,
/// the grace, SIGKILL, then the sweep of everything they started), and the run ends.
///
/// Clones share one state. A [`child`](Self::child) stops with its parent and can also be
/// stopped alone, which is how a run stops one attempt without stopping itself. An agent or
/// gate adapter watches the token it is given ([`AgentRequest`](crate::agent::AgentRequest)'s
/// and [`GateContext`](crate::gate::GateContext)'s `stop`) and ends promptly once it stops.
///
/// ```
/// use ralph::StopToken;
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
#[derive(Clone, Debug, Default)]
pub struct StopToken(CancellationToken);

impl StopToken {
    /// A token that has not stopped.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stops the token, its clones and its children. Stopping twice is stopping once.
    pub fn stop(&self) {
        self.0.cancel();
    }

    /// Whether it has stopped.
    pub fn is_stopped(&self) -> bool {
        self.0.is_cancelled()
    }

    /// Waits until it stops (at once when it has).
    pub async fn stopped(&self) {
        self.0.cancelled().await;
    }

    /// A token that stops when this one does, and can be stopped alone.
    pub fn child(&self) -> Self {
        Self(self.0.child_token())
    }
}
