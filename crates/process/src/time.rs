//! Clocks and waits: timestamps for records and file names, and the waits every mode
//! shares (a transient failure's backoff, a rate limit's reset, a cancellable sleep).

use std::time::{Duration, SystemTime};

use crate::process::StopToken;

/// The longest a rate limit is waited out: a reset time further ahead is taken as a wrong
/// clock, not as a reason to sleep for days.
pub const MAX_RATE_LIMIT_WAIT: Duration = Duration::from_secs(24 * 3600);

/// The longest one transient backoff lasts, however often it doubled.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// `base` doubled `n` times, at most a minute.
pub fn backoff(base: Duration, n: u32) -> Duration {
    base.saturating_mul(1 << n.min(16)).min(MAX_BACKOFF)
}

/// How long from now until `until` (zero when it has passed), at most
/// [`MAX_RATE_LIMIT_WAIT`].
pub fn wait_until(until: SystemTime) -> Duration {
    until
        .duration_since(SystemTime::now())
        .unwrap_or(Duration::ZERO)
        .min(MAX_RATE_LIMIT_WAIT)
}

/// A duration as JSON shows it: seconds, as a number (`1.5`), not serde's `{"secs", "nanos"}`,
/// so a script reads it as it is (`#[serde(serialize_with = "crate::time::secs")]`).
pub fn secs<S: serde::Serializer>(d: &std::time::Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// Reads a duration [`secs`] wrote.
pub fn from_secs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<std::time::Duration, D::Error> {
    let secs = <f64 as serde::Deserialize>::deserialize(d)?;
    std::time::Duration::try_from_secs_f64(secs).map_err(serde::de::Error::custom)
}

/// Whole seconds of `wait`, rounded up: a wait of 0.9 s is reported as 1 s, never as
/// "0 seconds".
pub fn whole_secs(wait: Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}

/// Sleeps `wait` unless `stop` stops first; returns whether the whole wait passed.
pub async fn sleep(wait: Duration, stop: &StopToken) -> bool {
    tokio::select! {
        () = tokio::time::sleep(wait) => true,
        () = stop.stopped() => false,
    }
}

/// The current time as RFC 3339 (`2026-01-19T10:30:00.123Z`).
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Millisecond)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// `20260119T103000.123Z`: sortable, no colons (valid on every file system).
pub fn file_stamp() -> String {
    let now = jiff::Timestamp::now();
    format!(
        "{}.{:03}Z",
        now.strftime("%Y%m%dT%H%M%S"),
        now.subsec_millisecond()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_a_minute() {
        let base = Duration::from_secs(2);
        assert_eq!(backoff(base, 0), base);
        assert_eq!(backoff(base, 1), Duration::from_secs(4));
        assert_eq!(backoff(base, 2), Duration::from_secs(8));
        assert_eq!(backoff(base, 10), MAX_BACKOFF);
        assert_eq!(backoff(base, u32::MAX), MAX_BACKOFF);
    }

    #[test]
    fn a_past_reset_waits_nothing_and_a_far_one_is_capped() {
        let past = SystemTime::now() - Duration::from_secs(5);
        assert_eq!(wait_until(past), Duration::ZERO);
        let far = SystemTime::now() + Duration::from_secs(7 * 24 * 3600);
        assert_eq!(wait_until(far), MAX_RATE_LIMIT_WAIT);
        let soon = wait_until(SystemTime::now() + Duration::from_secs(60));
        assert!(soon > Duration::from_secs(50) && soon <= Duration::from_secs(60));
    }

    #[test]
    fn whole_seconds_round_up() {
        assert_eq!(whole_secs(Duration::ZERO), 0);
        assert_eq!(whole_secs(Duration::from_millis(900)), 1);
        assert_eq!(whole_secs(Duration::from_secs(3)), 3);
    }

    #[tokio::test]
    async fn a_stopped_token_ends_the_sleep() {
        let stop = StopToken::new();
        assert!(sleep(Duration::ZERO, &stop).await);
        stop.stop();
        assert!(!sleep(MAX_RATE_LIMIT_WAIT, &stop).await);
    }
}
