//! Context pressure: seed 000's tiers (warn 0.70, compact 0.85, kill 0.95).
//!
//! [`ContextMonitor`] is pure: an agent feeds it the context size after each API call and
//! acts on the answer. Only the agent knows how to compact its own session, so the agent
//! owns the action; the monitor owns the policy.

use crate::config::ContextThresholds;

/// After a compaction the ratio must fall to this or below, or the run is killed (seed 000).
pub const COMPACTION_MUST_REACH: f64 = 0.80;

/// What the agent should do about the context after an observation.
#[derive(Clone, Copy, Debug, PartialEq)]
// Exhaustive: the Claude agent acts on each; a new one must reach it.
pub enum ContextAction {
    /// Nothing.
    Continue,
    /// The warn tier was crossed for the first time: report it.
    Warn(f64),
    /// Compact the session, then call [`ContextMonitor::after_compaction`].
    Compact(f64),
    /// Stop the run: `kill_reason: context_limit`.
    Kill(f64),
}

/// Tracks one run's context ratio against the tiers.
#[derive(Clone, Debug)]
pub struct ContextMonitor {
    thresholds: ContextThresholds,
    window: u64,
    warned: bool,
    ratio: f64,
}

impl ContextMonitor {
    /// A monitor for a model with a `window`-token context.
    pub fn new(thresholds: ContextThresholds, window: u64) -> Self {
        ContextMonitor {
            thresholds,
            window: window.max(1),
            warned: false,
            ratio: 0.0,
        }
    }

    /// The latest ratio seen.
    #[cfg(feature = "fake")]
    pub fn ratio(&self) -> f64 {
        self.ratio
    }

    /// Feeds the context size after an API call.
    ///
    /// ```
    /// use ralph_loop_core::context::{ContextAction, ContextMonitor};
    /// use ralph::config::ContextThresholds;
    ///
    /// let mut m = ContextMonitor::new(ContextThresholds::default(), 1000);
    /// assert_eq!(m.observe(500), ContextAction::Continue);
    /// assert_eq!(m.observe(720), ContextAction::Warn(0.72));
    /// assert_eq!(m.observe(750), ContextAction::Continue); // warned once
    /// assert_eq!(m.observe(900), ContextAction::Compact(0.9));
    /// assert_eq!(m.observe(960), ContextAction::Kill(0.96));
    /// ```
    pub fn observe(&mut self, context_tokens: u64) -> ContextAction {
        self.ratio = context_tokens as f64 / self.window as f64;
        let t = &self.thresholds;
        if self.ratio >= t.kill {
            ContextAction::Kill(self.ratio)
        } else if self.ratio >= t.compact {
            ContextAction::Compact(self.ratio)
        } else if self.ratio >= t.warn && !self.warned {
            self.warned = true;
            ContextAction::Warn(self.ratio)
        } else {
            ContextAction::Continue
        }
    }

    /// Feeds the context size after a compaction: [`ContextAction::Continue`] if it fell to
    /// [`COMPACTION_MUST_REACH`] or below, else [`ContextAction::Kill`].
    pub fn after_compaction(&mut self, context_tokens: u64) -> ContextAction {
        self.ratio = context_tokens as f64 / self.window as f64;
        if self.ratio > COMPACTION_MUST_REACH {
            ContextAction::Kill(self.ratio)
        } else {
            self.warned = self.ratio >= self.thresholds.warn;
            ContextAction::Continue
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_compaction_kills() {
        let mut m = ContextMonitor::new(ContextThresholds::default(), 100);
        assert_eq!(m.observe(86), ContextAction::Compact(0.86));
        assert_eq!(m.after_compaction(81), ContextAction::Kill(0.81));
        assert_eq!(m.after_compaction(40), ContextAction::Continue);
    }
}
