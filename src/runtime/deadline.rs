//! The one deadline rule of every agent run and gate, in every mode.
//!
//! A step (a task's attempts, a verifier, a criterion's command) has a deadline. At the
//! deadline, or when the run is stopped, the step's token is stopped and the agent or gate
//! stops its processes (SIGTERM, the grace, SIGKILL, the sweep). If it has not returned a
//! [`backstop`] later, ralph drops it, which kills what is left: a stop never hangs the
//! loop.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::process::StopToken;

/// Time a stopped agent or gate gets beyond its grace to return before it is dropped.
const BACKSTOP_EXTRA: Duration = Duration::from_secs(5);

/// How long after being told to stop an agent or gate with `grace` is dropped.
pub(crate) fn backstop(grace: Duration) -> Duration {
    grace.saturating_add(BACKSTOP_EXTRA)
}

/// A deadline `limit` from now, saturating far in the future instead of overflowing
/// (`Instant + Duration` panics past the platform's range).
pub(crate) fn after(limit: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(limit)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

/// Runs `fut` until it finishes. At `deadline` (or when `token` is stopped from above) it
/// stops `token` and gives `fut` [`backstop`]`(grace)` more to return; past that, `fut` is
/// dropped (agents and gates kill their processes on drop) and `None` is returned.
pub(crate) async fn until_deadline<T>(
    deadline: Instant,
    token: &StopToken,
    grace: Duration,
    fut: impl Future<Output = T>,
) -> Option<T> {
    tokio::pin!(fut);
    tokio::select! {
        out = &mut fut => return Some(out),
        () = tokio::time::sleep_until(deadline) => token.stop(),
        () = token.stopped() => {}
    }
    tokio::time::timeout(backstop(grace), fut).await.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn far_deadlines_saturate() {
        let far = after(Duration::MAX);
        assert!(far > Instant::now() + Duration::from_secs(24 * 3600));
        assert_eq!(backstop(Duration::MAX), Duration::MAX);
    }
}
