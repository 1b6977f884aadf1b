//! The one drain rule: how long a run's output is still read once the run has ended.
//!
//! When the main process has exited (or been stopped) and the sweep is over, whatever is
//! still in the pipes is read: normally EOF comes at once, after at most a pipe's worth of
//! bytes. But a process that escaped the sweep may hold a pipe open, silent or writing
//! forever. So reading goes on while bytes keep coming, and ends after [`DRAIN_QUIET`]
//! without any, or [`DRAIN_CAP`] in all. Gates, command agents, the vendor CLIs and Claude
//! all read by this rule.

use std::time::Duration;

use tokio::time::{Instant, sleep_until};

/// Silence on the pipes, after the end, that ends the reading.
pub(super) const DRAIN_QUIET: Duration = Duration::from_millis(500);
/// The longest the reading goes on after the end, however much keeps coming.
pub(super) const DRAIN_CAP: Duration = Duration::from_secs(10);

/// The drain of one run, from the moment it ended.
#[derive(Clone, Copy, Debug)]
pub(super) struct Drain {
    quiet_by: Instant,
    cap: Instant,
}

impl Drain {
    /// The run has ended now.
    pub(super) fn begin() -> Self {
        Drain::from(Instant::now())
    }

    fn from(end: Instant) -> Self {
        Drain {
            quiet_by: end + DRAIN_QUIET,
            cap: end + DRAIN_CAP,
        }
    }

    /// Bytes came: the silence starts again.
    pub(super) fn heard(&mut self) {
        self.heard_at(Instant::now());
    }

    fn heard_at(&mut self, now: Instant) {
        self.quiet_by = (now + DRAIN_QUIET).min(self.cap);
    }

    /// When the reading ends, unless more bytes come first.
    fn until(&self) -> Instant {
        self.quiet_by.min(self.cap)
    }

    /// Resolves when the reading should end (never, for a drain not begun).
    pub(super) async fn over(drain: Option<&Drain>) {
        match drain {
            Some(drain) => sleep_until(drain.until()).await,
            None => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_after_a_quiet_spell_that_bytes_restart_up_to_the_cap() {
        let end = Instant::now();
        let mut drain = Drain::from(end);
        assert_eq!(drain.until(), end + DRAIN_QUIET);
        drain.heard_at(end + Duration::from_secs(3));
        assert_eq!(drain.until(), end + Duration::from_secs(3) + DRAIN_QUIET);
        drain.heard_at(end + DRAIN_CAP - Duration::from_millis(1));
        assert_eq!(drain.until(), end + DRAIN_CAP);
    }

    #[tokio::test]
    async fn a_drain_not_begun_never_ends() {
        let never = Drain::over(None);
        let waited = tokio::time::timeout(Duration::from_millis(20), never).await;
        assert!(waited.is_err());
    }
}
