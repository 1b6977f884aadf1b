//! Context windows by model name.

/// The context window of each model, for live context pressure.
///
/// The CLI reports the window (`result.modelUsage[m].contextWindow`) only in its last line,
/// so live checks need a table. Lookup order:
///
/// 1. the entries added with [`with`](Self::with): the longest one that is the model name or
///    a prefix of it followed by `-` or `[` wins;
/// 2. a `[1m]` suffix (`claude-sonnet-4-5[1m]`): 1,000,000;
/// 3. the built-in table below, matched the same way as 1;
/// 4. the default, [`DEFAULT_WINDOW`](Self::DEFAULT_WINDOW) unless changed with
///    [`with_default`](Self::with_default).
///
/// | model (or prefix) | window |
/// |---|---|
/// | `claude-opus-5-5`, `claude-sonnet-5-5`, `claude-haiku-5-5`, `claude-fable-5-2`, the aliases `opus`, `sonnet`, `haiku`, `fable` | 1,000,000 |
/// | `claude-sonnet-4-5`, `claude-haiku-4-5` (and dated names such as `claude-sonnet-4-5-20250929`) | 200,000 |
///
/// These are the windows CLI 2.1.328 reported for those names (fixtures/claude/PROTOCOL.md §5).
///
/// ```
/// use ralph_loop_agents::agent::claude::stream::ContextWindows;
///
/// let windows = ContextWindows::new().with("my-gateway-model", 128_000);
/// assert_eq!(windows.window("claude-opus-5-5"), 1_000_000);
/// assert_eq!(windows.window("claude-sonnet-4-5-20250929"), 200_000);
/// assert_eq!(windows.window("claude-sonnet-4-5[1m]"), 1_000_000);
/// assert_eq!(windows.window("my-gateway-model"), 128_000);
/// assert_eq!(windows.window("something-else"), ContextWindows::DEFAULT_WINDOW);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContextWindows {
    overrides: Vec<(String, u64)>,
    default: Option<u64>,
}

/// CLI 2.1.328's windows for the names it knows.
const BUILT_IN: [(&str, u64); 10] = [
    ("claude-opus-5-5", 1_000_000),
    ("claude-sonnet-5-5", 1_000_000),
    ("claude-haiku-5-5", 1_000_000),
    ("claude-fable-5-2", 1_000_000),
    ("opus", 1_000_000),
    ("sonnet", 1_000_000),
    ("haiku", 1_000_000),
    ("fable", 1_000_000),
    ("claude-sonnet-4-5", 200_000),
    ("claude-haiku-4-5", 200_000),
];

impl ContextWindows {
    /// The window of a model the table does not know: 200,000.
    ///
    /// The CLI itself reports 1,000,000 for any name it does not know (a custom gateway
    /// model, say), but the model behind the name may be smaller. Under-estimating the window
    /// only makes context pressure show earlier; over-estimating it lets the context overflow
    /// unseen. Set the real value with [`with`](Self::with) or [`with_default`](Self::with_default).
    pub const DEFAULT_WINDOW: u64 = 200_000;

    /// The built-in table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the window of `model` (and of the names it is a `-`/`[` prefix of), ahead of the
    /// built-in table.
    #[must_use]
    pub fn with(mut self, model: impl Into<String>, window: u64) -> Self {
        self.overrides.push((model.into(), window));
        self
    }

    /// Sets the window of the models nothing else matches.
    #[must_use]
    pub fn with_default(mut self, window: u64) -> Self {
        self.default = Some(window);
        self
    }

    /// The window of `model`.
    pub fn window(&self, model: &str) -> u64 {
        self.overridden(model)
            .or_else(|| model.ends_with("[1m]").then_some(1_000_000))
            .or_else(|| longest_match(BUILT_IN.iter().map(|(m, w)| (*m, *w)), model))
            .unwrap_or(self.default.unwrap_or(Self::DEFAULT_WINDOW))
    }

    /// The window set with [`with`](Self::with) for `model`, if any.
    pub fn overridden(&self, model: &str) -> Option<u64> {
        longest_match(self.overrides.iter().map(|(m, w)| (m.as_str(), *w)), model)
    }
}

/// The window of the longest entry that names `model` or a `-`/`[`-separated prefix of it.
fn longest_match<'a>(entries: impl Iterator<Item = (&'a str, u64)>, model: &str) -> Option<u64> {
    entries
        .filter(|(name, _)| names(name, model))
        .max_by_key(|(name, _)| name.len())
        .map(|(_, window)| window)
}

fn names(name: &str, model: &str) -> bool {
    model
        .strip_prefix(name)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['-', '[']))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_match_only_at_a_separator() {
        let windows = ContextWindows::new();
        assert_eq!(windows.window("claude-haiku-4-5"), 200_000);
        assert_eq!(windows.window("claude-haiku-5-5-20260101"), 1_000_000);
        assert_eq!(windows.window("claude-fable-5-2"), 1_000_000);
        assert_eq!(windows.window("opus"), 1_000_000);
        assert_eq!(windows.window("opus[1m]"), 1_000_000);
        assert_eq!(
            windows.window("claude-sonnet-4-50"),
            ContextWindows::DEFAULT_WINDOW
        );
        assert_eq!(windows.window("opusx"), ContextWindows::DEFAULT_WINDOW);
        assert_eq!(windows.window(""), ContextWindows::DEFAULT_WINDOW);
    }

    #[test]
    fn overrides_come_first_and_the_longest_wins() {
        let windows = ContextWindows::new()
            .with("claude-sonnet-4-5", 150_000)
            .with("claude-sonnet-4-5-custom", 50_000)
            .with("claude-sonnet-4-5[1m]", 900_000)
            .with_default(64_000);
        assert_eq!(windows.window("claude-sonnet-4-5-20250929"), 150_000);
        assert_eq!(windows.window("claude-sonnet-4-5-custom-x"), 50_000);
        assert_eq!(windows.window("claude-sonnet-4-5[1m]"), 900_000);
        assert_eq!(windows.window("claude-opus-5-5"), 1_000_000);
        assert_eq!(windows.window("mystery"), 64_000);
        assert_eq!(windows.overridden("mystery"), None);
        assert_eq!(windows.overridden("claude-sonnet-4-5"), Some(150_000));
    }
}
