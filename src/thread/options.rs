//! How threads run: quick or methodical, and the loop's default settings; and a person's
//! confirmation of a reset. The grace, the backoff and the context thresholds are the
//! workspace's config, as in every mode.

use super::record::RunConfig;

/// How threads run.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ThreadOptions {
    /// Quick mode: skip assessment, configuration and polish, advancing to the next human
    /// checkpoint (never past it).
    pub quick: bool,
    /// The loop's settings a thread takes when it starts (Configuring may change them),
    /// and the models a thread not yet started asks (`discuss`, `assess`).
    pub config: RunConfig,
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
