//! How threads run: quick or methodical, the loop's default settings, the grace and the
//! backoff; and a person's confirmation of a reset.

use std::time::Duration;

use super::record::RunConfig;

/// How threads run.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ThreadOptions {
    /// Quick mode: skip assessment, configuration and polish, advancing to the next human
    /// checkpoint (never past it).
    pub quick: bool,
    /// The loop's settings for new threads (and for quick mode).
    pub config: RunConfig,
    /// Time a stopped agent gets to return before it is dropped (which kills it).
    pub grace: Duration,
    /// The wait before the loop tries again after a transient failure (overload, 5xx); it
    /// doubles with each failure in a row, up to a minute. Default: the workspace
    /// [`Config`](crate::Config)'s `transient_backoff` (2 s).
    pub transient_backoff: Duration,
}

impl Default for ThreadOptions {
    fn default() -> Self {
        ThreadOptions {
            quick: false,
            config: RunConfig::default(),
            grace: crate::process::DEFAULT_GRACE,
            transient_backoff: crate::config::Config::default().transient_backoff,
        }
    }
}

impl ThreadOptions {
    /// Sets quick mode.
    #[must_use]
    pub fn quick(mut self, quick: bool) -> Self {
        self.quick = quick;
        self
    }

    /// Sets the default loop settings.
    #[must_use]
    pub fn config(mut self, config: RunConfig) -> Self {
        self.config = config;
        self
    }

    /// Sets the first wait after a transient failure (see
    /// [`transient_backoff`](Self::transient_backoff)).
    #[must_use]
    pub fn transient_backoff(mut self, wait: Duration) -> Self {
        self.transient_backoff = wait;
        self
    }

    /// The workspace settings threads share with the engine: `grace` and
    /// `transient_backoff` of `config`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ralph::Config;
    /// use ralph::thread::ThreadOptions;
    ///
    /// let mut config = Config::default();
    /// config.transient_backoff = Duration::from_millis(500);
    /// let options = ThreadOptions::from_config(&config);
    /// assert_eq!(options.transient_backoff, Duration::from_millis(500));
    /// ```
    #[must_use]
    pub fn from_config(config: &crate::config::Config) -> Self {
        ThreadOptions {
            grace: config.grace,
            transient_backoff: config.transient_backoff,
            ..ThreadOptions::default()
        }
    }
}

/// Whether the person agreed to reset the work tree (see [`Threads::revise`](super::Threads::revise)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Confirm {
    /// Not confirmed: the call is refused and nothing changes.
    No,
    /// "This will reset changes. Continue?" — yes.
    ResetToBaseline,
}
