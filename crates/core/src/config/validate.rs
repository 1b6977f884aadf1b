//! What a loaded configuration must satisfy: counts and timeouts within their bounds, the
//! files ralph writes inside the workspace, names that are not empty or repeated, and each
//! agent's table usable.

use super::{ClaudeConfig, Config, ConfigError, HOOK_EVENTS, TEMPLATES};

/// The largest values of the settings: far above what any run needs, and low enough that no
/// arithmetic on them can overflow (a deadline is `now + timeout`, a count is incremented and
/// compared). A value above its bound is refused at load, naming the key.
pub mod bounds {
    use std::time::Duration;

    /// `max_iterations`.
    pub const MAX_ITERATIONS: u32 = 100_000;
    /// `retries`, `transient_retries`, `planning.max_attempts`,
    /// `decompose_after_rejections`.
    pub const MAX_RETRIES: u32 = 1_000;
    /// `verify_concurrency`, `build_concurrency`.
    pub const MAX_CONCURRENCY: usize = 1_024;
    /// `recent_attempts`.
    pub const MAX_RECENT_ATTEMPTS: usize = 10_000;
    /// `log_files_kept`: a stage's own logs must outlive its pruning.
    pub const MIN_LOG_FILES_KEPT: usize = 20;
    /// Every timeout (`stage_timeout`, `agent_timeout`, `unreachable_after`, a gate's or a
    /// hook's `timeout`, the claude section's `idle_timeout`): a week.
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);
    /// `grace`, `transient_backoff`, the claude section's `result_grace`: an hour.
    pub const MAX_WAIT: Duration = Duration::from_secs(3600);
    /// `claude.max_turns`: far above any task, and safe to count up to.
    pub const MAX_TURNS: u64 = 10_000;
    /// `claude.max_retries`, the CLI's own retries (each can wait minutes).
    pub const MAX_CLI_RETRIES: u64 = 100;
    /// `claude.max_budget_usd`: a typo guard, not a policy.
    pub const MAX_BUDGET_USD: f64 = 1_000_000.0;
    /// A rate of `[prices]`, in dollars per million tokens: a typo guard (the dearest
    /// models cost well under a thousand).
    pub const MAX_PRICE_USD: f64 = 100_000.0;
    /// A context window of `claude.context_windows`, in tokens.
    pub const MAX_CONTEXT_WINDOW: u64 = 100_000_000;
}

impl Config {
    /// Checks values that parse but make no sense.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] naming the first bad key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        // The order is the order keys are reported in when several are bad.
        self.check_paths()?;
        self.check_bounds()?;
        self.check_minimums()?;
        self.context
            .validate()
            .map_err(|m| invalid("context", format!("is out of order: {m}")))?;
        self.check_planning()?;
        self.check_prompts()?;
        check_sandbox(&self.sandbox)
            .map_err(|(key, why)| invalid(&format!("sandbox.{key}"), why))?;
        check_claude(&self.claude).map_err(|(key, why)| invalid(&format!("claude.{key}"), why))?;
        self.check_gates()?;
        self.check_hooks()?;
        self.check_prices()
    }

    /// Each price a known rate, `input` and `output` given, every rate a number of dollars.
    fn check_prices(&self) -> Result<(), ConfigError> {
        const RATES: [&str; 4] = ["input", "cached_input", "cache_write", "output"];
        for (model, rates) in &self.prices {
            // `prices["gemini-2.5-pro"].input`: a model's name may hold dots.
            let key = |rate: &str| format!("prices[{model:?}].{rate}");
            if model.trim().is_empty() {
                return Err(invalid("prices", "names a model with no name".into()));
            }
            if let Some(unknown) = rates.keys().find(|r| !RATES.contains(&r.as_str())) {
                return Err(invalid(
                    &key(unknown),
                    format!("is no rate (the rates: {})", RATES.join(", ")),
                ));
            }
            if let Some(missing) = ["input", "output"]
                .iter()
                .find(|r| !rates.contains_key(**r))
            {
                return Err(invalid(&key(missing), "is missing".into()));
            }
            for (rate, dollars) in rates {
                if !(dollars.is_finite() && (0.0..=bounds::MAX_PRICE_USD).contains(dollars)) {
                    return Err(invalid(
                        &key(rate),
                        format!(
                            "must be dollars per million tokens, from 0 to {}, got {dollars}",
                            bounds::MAX_PRICE_USD
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The counts a run needs at least one of, the budgets positive, enough log files kept,
    /// and no timeout of zero.
    fn check_minimums(&self) -> Result<(), ConfigError> {
        for (key, is_zero) in [
            ("max_iterations", self.max_iterations == 0),
            (
                "decompose_after_rejections",
                self.decompose_after_rejections == 0,
            ),
            ("verify_concurrency", self.verify_concurrency == 0),
            ("build_concurrency", self.build_concurrency == 0),
        ] {
            if is_zero {
                return Err(invalid(key, "must be at least 1".into()));
            }
        }
        if let Some(cost) = self.max_cost_usd
            && !(cost.is_finite() && cost > 0.0 && cost <= bounds::MAX_BUDGET_USD)
        {
            return Err(invalid(
                "max_cost_usd",
                format!(
                    "must be a positive number of dollars, at most {}, got {cost}",
                    bounds::MAX_BUDGET_USD
                ),
            ));
        }
        if self.max_tokens == Some(0) {
            return Err(invalid("max_tokens", "must be at least 1".into()));
        }
        if self.log_files_kept < bounds::MIN_LOG_FILES_KEPT {
            return Err(invalid(
                "log_files_kept",
                format!(
                    "must be at least {} (a run's own logs are kept), got {}",
                    bounds::MIN_LOG_FILES_KEPT,
                    self.log_files_kept
                ),
            ));
        }
        for (key, d) in [
            ("stage_timeout", self.stage_timeout),
            ("agent_timeout", self.agent_timeout),
            ("unreachable_after", self.unreachable_after),
        ] {
            if d.is_zero() {
                return Err(invalid(key, "must be longer than zero".into()));
            }
        }
        Ok(())
    }

    /// `[planning]` allows at least one attempt and has a phrase to end a session with.
    fn check_planning(&self) -> Result<(), ConfigError> {
        if self.planning.max_attempts == 0 {
            return Err(invalid(
                "planning.max_attempts",
                "must be at least 1".into(),
            ));
        }
        if self.planning.magic_phrase.trim().is_empty() {
            return Err(invalid("planning.magic_phrase", "is empty".into()));
        }
        Ok(())
    }

    /// Every `[[gates]]` entry has a name of its own, a command and a timeout.
    fn check_gates(&self) -> Result<(), ConfigError> {
        let mut names = std::collections::HashSet::new();
        for (i, gate) in self.gates.iter().enumerate() {
            if gate.name.trim().is_empty() {
                return Err(invalid(&format!("gates[{i}].name"), "is empty".into()));
            }
            if gate.command.trim().is_empty() {
                return Err(invalid(&format!("gates[{i}].command"), "is empty".into()));
            }
            if gate.timeout.is_zero() {
                return Err(invalid(
                    &format!("gates[{i}].timeout"),
                    "must be longer than zero".into(),
                ));
            }
            if !names.insert(gate.name.as_str()) {
                return Err(invalid(
                    &format!("gates[{i}].name"),
                    format!("repeats the gate name {:?}", gate.name),
                ));
            }
        }
        Ok(())
    }

    /// Every `[[hooks]]` entry runs something on events that exist, within its bounds, under
    /// a name of its own.
    fn check_hooks(&self) -> Result<(), ConfigError> {
        let invalid_field = |i: usize, field: &str, message: String| ConfigError::Invalid {
            key: format!("hooks[{i}].{field}"),
            message,
            source_name: None,
        };
        let mut names = std::collections::HashSet::new();
        for (i, hook) in self.hooks.iter().enumerate() {
            check_hook_events(&hook.on).map_err(|why| invalid_field(i, "on", why))?;
            if hook.command.first().is_none_or(|p| p.trim().is_empty()) {
                return Err(invalid_field(
                    i,
                    "command",
                    "is empty: give the program and its arguments, as [\"notify-send\", \"ralph\"]"
                        .into(),
                ));
            }
            if hook.timeout.is_zero() {
                return Err(invalid_field(
                    i,
                    "timeout",
                    "must be longer than zero".into(),
                ));
            }
            if let Some(name) = &hook.name {
                if name.trim().is_empty() {
                    return Err(invalid_field(i, "name", "is empty".into()));
                }
                if !names.insert(name.as_str()) {
                    return Err(invalid_field(
                        i,
                        "name",
                        format!("repeats the hook name {name:?}"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Every count and duration within its bound (see [`bounds`]).
    fn check_bounds(&self) -> Result<(), ConfigError> {
        self.check_count_bounds()?;
        self.check_duration_bounds()
    }

    /// The counts within theirs: iterations, retries, concurrency, attempts kept.
    fn check_count_bounds(&self) -> Result<(), ConfigError> {
        use bounds::*;
        let at_most = |key: &str, value: u64, max: u64| {
            if value > max {
                Err(invalid(key, format!("must be at most {max}, got {value}")))
            } else {
                Ok(())
            }
        };
        at_most(
            "max_iterations",
            self.max_iterations.into(),
            MAX_ITERATIONS.into(),
        )?;
        at_most("retries", self.retries.into(), MAX_RETRIES.into())?;
        at_most(
            "transient_retries",
            self.transient_retries.into(),
            MAX_RETRIES.into(),
        )?;
        at_most(
            "decompose_after_rejections",
            self.decompose_after_rejections.into(),
            MAX_RETRIES.into(),
        )?;
        at_most(
            "planning.max_attempts",
            self.planning.max_attempts.into(),
            MAX_RETRIES.into(),
        )?;
        let usize_at_most =
            |key: &str, value: usize, max: usize| at_most(key, value as u64, max as u64);
        usize_at_most(
            "verify_concurrency",
            self.verify_concurrency,
            MAX_CONCURRENCY,
        )?;
        usize_at_most("build_concurrency", self.build_concurrency, MAX_CONCURRENCY)?;
        usize_at_most("recent_attempts", self.recent_attempts, MAX_RECENT_ATTEMPTS)
    }

    /// The timeouts and waits within theirs, the gates' and hooks' included.
    fn check_duration_bounds(&self) -> Result<(), ConfigError> {
        use bounds::{MAX_TIMEOUT, MAX_WAIT};
        let durations = [
            ("stage_timeout", self.stage_timeout, MAX_TIMEOUT),
            ("agent_timeout", self.agent_timeout, MAX_TIMEOUT),
            ("unreachable_after", self.unreachable_after, MAX_TIMEOUT),
            ("grace", self.grace, MAX_WAIT),
            ("transient_backoff", self.transient_backoff, MAX_WAIT),
            (
                "question_wait",
                self.question_wait.unwrap_or_default(),
                MAX_TIMEOUT,
            ),
        ];
        let gates = self.gates.iter().enumerate().map(|(i, g)| (i, g.timeout));
        let hooks = self.hooks.iter().enumerate().map(|(i, h)| (i, h.timeout));
        for (key, value, max) in durations
            .into_iter()
            .map(|(k, v, m)| (k.to_owned(), v, m))
            .chain(gates.map(|(i, t)| (format!("gates[{i}].timeout"), t, MAX_TIMEOUT)))
            .chain(hooks.map(|(i, t)| (format!("hooks[{i}].timeout"), t, MAX_TIMEOUT)))
        {
            if value > max {
                return Err(invalid(&key, too_long(value, max)));
            }
        }
        Ok(())
    }

    /// Every `[prompts]` entry names a template (with the closest one when it is a typo).
    fn check_prompts(&self) -> Result<(), ConfigError> {
        let Some(name) = self
            .prompts
            .keys()
            .find(|k| !TEMPLATES.contains(&k.as_str()))
        else {
            return Ok(());
        };
        let closest = TEMPLATES
            .iter()
            .map(|t| (super::load::edit_distance(t, name), t))
            .filter(|(d, _)| *d <= 2)
            .min()
            .map(|(_, t)| format!(" (did you mean {t}?)"))
            .unwrap_or_default();
        Err(ConfigError::Invalid {
            key: format!("prompts.{name}"),
            message: format!(
                "names no prompt template{closest}; the templates: {}",
                TEMPLATES.join(", ")
            ),
            source_name: None,
        })
    }

    /// The files and folders ralph writes stay inside the workspace: relative, not empty,
    /// never going up with `..` (the rule spec paths follow too). A state file or log folder
    /// outside it would escape the workspace's lock.
    fn check_paths(&self) -> Result<(), ConfigError> {
        let store = self.store.path().map(|path| ("store.path", path));
        for (key, path) in store.into_iter().chain([
            ("log_dir", self.log_dir.as_path()),
            ("planning.specs_dir", self.planning.specs_dir.as_path()),
            (
                "planning.implementation",
                self.planning.implementation.as_path(),
            ),
            ("planning.progress", self.planning.progress.as_path()),
        ]) {
            let message = if path.as_os_str().is_empty() {
                "is empty"
            } else if path.is_absolute() {
                "is absolute; give it relative to the workspace"
            } else if path
                .components()
                .any(|c| c == std::path::Component::ParentDir)
            {
                "goes up with `..`; it must stay inside the workspace"
            } else {
                continue;
            };
            return Err(ConfigError::Invalid {
                key: key.to_owned(),
                message: format!("{message} (got {:?})", path.display().to_string()),
                source_name: None,
            });
        }
        Ok(())
    }
}

/// Checks `[sandbox]`: each path given, each variable a name (`PREFIX*` for a prefix).
fn check_sandbox(sandbox: &super::SandboxConfig) -> Result<(), (String, String)> {
    for (key, paths) in [
        ("write", &sandbox.write),
        ("protect", &sandbox.protect),
        ("hide", &sandbox.hide),
    ] {
        if let Some(i) = paths.iter().position(|p| p.as_os_str().is_empty()) {
            return Err((format!("{key}[{i}]"), "is empty".into()));
        }
    }
    for (i, name) in sandbox.env.iter().enumerate() {
        let stem = name.strip_suffix('*').unwrap_or(name);
        if stem.is_empty() || !stem.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err((
                format!("env[{i}]"),
                format!("must be a variable's name, or a prefix ending in `*` (got {name:?})"),
            ));
        }
    }
    Ok(())
}

/// Checks `[claude]` values the CLI would reject or that would make every run fail: the
/// offending key (relative to `[claude]`) and why.
fn check_claude(claude: &ClaudeConfig) -> Result<(), (String, String)> {
    check_claude_usable(claude)?;
    check_context_windows(claude)?;
    check_claude_bounds(claude)
}

/// The `[claude]` values no run could work with: no turns, no budget, no idle time, no
/// program.
fn check_claude_usable(claude: &ClaudeConfig) -> Result<(), (String, String)> {
    let invalid = |key: &str, why: &str| Err((key.to_owned(), why.to_owned()));
    if claude.max_turns == Some(0) {
        return invalid("max_turns", "must be at least 1");
    }
    if let Some(budget) = claude.max_budget_usd
        && !(budget.is_finite() && budget > 0.0)
    {
        return invalid("max_budget_usd", "must be a positive number of dollars");
    }
    if claude.idle_timeout.is_zero() {
        return invalid("idle_timeout", "must be longer than zero");
    }
    if claude
        .bin
        .as_ref()
        .is_some_and(|b| b.as_os_str().is_empty())
    {
        return invalid("bin", "is empty");
    }
    Ok(())
}

/// Each of `claude.context_windows` between one token and [`bounds::MAX_CONTEXT_WINDOW`].
fn check_context_windows(claude: &ClaudeConfig) -> Result<(), (String, String)> {
    use bounds::MAX_CONTEXT_WINDOW;
    if let Some((model, _)) = claude.context_windows.iter().find(|(_, w)| **w == 0) {
        return Err((
            format!("context_windows.{model}"),
            "must be at least 1 token".to_owned(),
        ));
    }
    if let Some((model, w)) = claude
        .context_windows
        .iter()
        .find(|(_, w)| **w > MAX_CONTEXT_WINDOW)
    {
        return Err((
            format!("context_windows.{model}"),
            format!("must be at most {MAX_CONTEXT_WINDOW} tokens, got {w}"),
        ));
    }
    Ok(())
}

/// The `[claude]` counts, budget and durations within their [`bounds`].
fn check_claude_bounds(claude: &ClaudeConfig) -> Result<(), (String, String)> {
    use bounds::{MAX_BUDGET_USD, MAX_CLI_RETRIES, MAX_TIMEOUT, MAX_TURNS, MAX_WAIT};
    let bounded = [
        (
            "max_turns",
            u64::from(claude.max_turns.unwrap_or(0)),
            MAX_TURNS,
        ),
        (
            "max_retries",
            u64::from(claude.max_retries),
            MAX_CLI_RETRIES,
        ),
    ];
    for (key, value, max) in bounded {
        if value > max {
            return Err((
                key.to_owned(),
                format!("must be at most {max}, got {value}"),
            ));
        }
    }
    if let Some(budget) = claude.max_budget_usd.filter(|b| *b > MAX_BUDGET_USD) {
        return Err((
            "max_budget_usd".to_owned(),
            format!("must be at most {MAX_BUDGET_USD} dollars, got {budget}"),
        ));
    }
    for (key, value, max) in [
        ("idle_timeout", claude.idle_timeout, MAX_TIMEOUT),
        ("result_grace", claude.result_grace, MAX_WAIT),
    ] {
        if value > max {
            return Err((key.to_owned(), too_long(value, max)));
        }
    }
    Ok(())
}

/// A hook's `on`: at least one event, each one that exists (with the closest one when it is
/// a typo). Why it is not, otherwise.
fn check_hook_events(on: &[String]) -> Result<(), String> {
    if on.is_empty() {
        return Err(format!(
            "is empty: name the events that run the hook ({})",
            HOOK_EVENTS.join(", ")
        ));
    }
    if let Some(name) = on.iter().find(|n| !HOOK_EVENTS.contains(&n.as_str())) {
        let closest = HOOK_EVENTS
            .iter()
            .map(|e| (super::load::edit_distance(e, name), *e))
            .filter(|(d, _)| *d <= 3)
            .min()
            .map(|(_, e)| format!(" (did you mean {e}?)"))
            .unwrap_or_default();
        return Err(format!(
            "names no event: {name:?}{closest}; the events: {}",
            HOOK_EVENTS.join(", ")
        ));
    }
    Ok(())
}

/// The error for `key`, found in no file in particular (validation runs on the merged
/// configuration).
fn invalid(key: &str, message: String) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_owned(),
        message,
        source_name: None,
    }
}

/// Why a duration of `value` is refused when `max` is its bound.
fn too_long(value: std::time::Duration, max: std::time::Duration) -> String {
    format!(
        "must be at most {}, got {}",
        humantime::format_duration(max),
        humantime::format_duration(value)
    )
}

#[cfg(test)]
// `Jail` closures return figment's own (large) error type.
#[allow(clippy::result_large_err)]
mod tests {
    use figment::Jail;

    use super::*;
    use crate::config::Overrides;

    fn load_in(jail: &Jail) -> Result<Config, ConfigError> {
        Config::load(jail.directory())
    }

    #[test]
    fn bad_claude_keys_are_named() {
        Jail::expect_with(|jail| {
            jail.create_file("ralph.toml", "[claude]\nmax_turns = 0\n")?;
            let e = load_in(jail).unwrap_err().to_string();
            assert!(e.contains("claude.max_turns must be at least 1"), "{e}");
            assert!(e.contains("ralph.toml"), "{e}");
            jail.create_file("ralph.toml", "[claude]\nmodle = \"opus\"\n")?;
            let e = load_in(jail).unwrap_err().to_string();
            assert!(e.contains("modle"), "{e}");
            jail.create_file("ralph.toml", "[claude]\npermission_mode = \"yolo\"\n")?;
            let e = load_in(jail).unwrap_err().to_string();
            assert!(e.contains("yolo") && e.contains("bypassPermissions"), "{e}");
            Ok(())
        });
    }

    #[test]
    fn bad_sandbox_keys_are_named() {
        Jail::expect_with(|jail| {
            jail.create_file("ralph.toml", "[sandbox]\nmode = \"sometimes\"\n")?;
            let e = load_in(jail).unwrap_err().to_string();
            assert!(e.contains("sometimes") && e.contains("required"), "{e}");
            jail.create_file("ralph.toml", "[sandbox]\nenv = [\"A*B\"]\n")?;
            let e = load_in(jail).unwrap_err().to_string();
            assert!(
                e.contains("sandbox.env[0]") && e.contains("ralph.toml"),
                "{e}"
            );
            jail.create_file("ralph.toml", "[sandbox]\nwrite = [\"\"]\n")?;
            let e = load_in(jail).unwrap_err().to_string();
            assert!(e.contains("sandbox.write[0] is empty"), "{e}");
            jail.create_file(
                "ralph.toml",
                "[sandbox]\nmode = \"off\"\nenv = [\"FOO_*\"]\n",
            )?;
            assert_eq!(
                load_in(jail).unwrap().sandbox.mode,
                super::super::SandboxMode::Off
            );
            Ok(())
        });
    }

    #[test]
    fn invalid_value_names_key_and_file() {
        Jail::expect_with(|jail| {
            jail.create_file("ralph.toml", "verify_concurrency = 0\n")?;
            let msg = load_in(jail).unwrap_err().to_string();
            assert!(msg.contains("verify_concurrency"), "{msg}");
            assert!(msg.contains("ralph.toml"), "{msg}");
            Ok(())
        });
    }

    #[test]
    fn a_bad_price_names_its_model_and_rate() {
        Jail::expect_with(|jail| {
            for (toml, says) in [
                (
                    "input = 1.0\noutptu = 2.0\n",
                    "prices[\"gpt-5\"].outptu is no rate",
                ),
                ("input = 1.0\n", "prices[\"gpt-5\"].output is missing"),
                (
                    "input = -1.0\noutput = 2.0\n",
                    "prices[\"gpt-5\"].input must be dollars",
                ),
            ] {
                jail.create_file("ralph.toml", &format!("[prices.\"gpt-5\"]\n{toml}"))?;
                let msg = load_in(jail).unwrap_err().to_string();
                assert!(
                    msg.contains(says) && msg.contains("ralph.toml"),
                    "{toml}: {msg}"
                );
            }
            jail.create_file(
                "ralph.toml",
                "[prices.\"gpt-5\"]\ninput = 1.25\noutput = 10.0\n",
            )?;
            let config = load_in(jail).unwrap();
            assert_eq!(config.prices["gpt-5"]["output"], 10.0);
            Ok(())
        });
    }

    #[test]
    fn invalid_env_value_names_env() {
        Jail::expect_with(|jail| {
            jail.set_env("RALPH_MAX_ITERATIONS", 0);
            let msg = load_in(jail).unwrap_err().to_string();
            assert!(msg.contains("max_iterations"), "{msg}");
            assert!(msg.to_lowercase().contains("environment"), "{msg}");
            Ok(())
        });
    }

    #[test]
    fn hooks_from_toml() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "ralph.toml",
                "[[hooks]]\non = [\"finished\", \"needs_person\", \"budget_exhausted\"]\ncommand = [\"notify-send\", \"ralph\"]\n\n[[hooks]]\nname = \"web\"\non = [\"task_blocked\"]\ncommand = [\"sh\", \"-c\", \"cat\"]\ntimeout = \"5s\"\nrequired = true\n",
            )?;
            let c = load_in(jail).unwrap();
            assert_eq!(c.hooks.len(), 2);
            assert_eq!(c.hooks[0].command, ["notify-send", "ralph"]);
            assert_eq!(c.hooks[0].timeout, std::time::Duration::from_secs(30));
            assert!(!c.hooks[0].required && c.hooks[0].name.is_none());
            assert_eq!(c.hooks[1].name.as_deref(), Some("web"));
            assert_eq!(c.hooks[1].timeout, std::time::Duration::from_secs(5));
            assert!(c.hooks[1].required);
            Ok(())
        });
    }

    #[test]
    fn a_hook_on_an_unknown_event_is_refused_naming_the_key_and_the_closest_event() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "ralph.toml",
                "[[hooks]]\non = [\"finished\"]\ncommand = [\"true\"]\n[[hooks]]\non = [\"task_blokced\"]\ncommand = [\"true\"]\n",
            )?;
            let e = load_in(jail).unwrap_err().to_string();
            assert!(
                e.contains(
                    "hooks[1].on names no event: \"task_blokced\" (did you mean task_blocked?)"
                ),
                "{e}"
            );
            assert!(e.contains("ralph.toml"), "{e}");
            for (toml, key) in [
                ("on = []\ncommand = [\"true\"]", "hooks[0].on is empty"),
                (
                    "on = [\"finished\"]\ncommand = []",
                    "hooks[0].command is empty",
                ),
                (
                    "on = [\"finished\"]\ncommand = [\"\"]",
                    "hooks[0].command is empty",
                ),
                (
                    "on = [\"finished\"]\ncommand = [\"true\"]\ntimeout = \"0s\"",
                    "hooks[0].timeout must be longer than zero",
                ),
                (
                    "on = [\"finished\"]\ncommand = [\"true\"]\ntimeout = \"30d\"",
                    "hooks[0].timeout must be at most",
                ),
                (
                    "on = [\"finished\"]\ncommand = [\"true\"]\nname = \" \"",
                    "hooks[0].name is empty",
                ),
                (
                    "on = [\"finished\"]\ncommand = [\"true\"]\nshell = true",
                    "shell",
                ),
            ] {
                jail.create_file("ralph.toml", &format!("[[hooks]]\n{toml}\n"))?;
                let e = load_in(jail).unwrap_err().to_string();
                assert!(e.contains(key), "{toml}: {e}");
            }
            jail.create_file(
                "ralph.toml",
                "[[hooks]]\nname = \"n\"\non = [\"finished\"]\ncommand = [\"true\"]\n[[hooks]]\nname = \"n\"\non = [\"warning\"]\ncommand = [\"true\"]\n",
            )?;
            let e = load_in(jail).unwrap_err().to_string();
            assert!(
                e.contains("hooks[1].name repeats the hook name \"n\""),
                "{e}"
            );
            Ok(())
        });
    }

    #[test]
    fn duplicate_gate_names_are_refused() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "ralph.toml",
                "[[gates]]\nname = \"t\"\ncommand = \"true\"\n[[gates]]\nname = \"t\"\ncommand = \"false\"\n",
            )?;
            let msg = load_in(jail).unwrap_err().to_string();
            assert!(msg.contains("gates[1].name"), "{msg}");
            Ok(())
        });
    }

    #[test]
    fn every_count_and_duration_has_a_bound_named_with_the_value_and_the_file() {
        Jail::expect_with(|jail| {
            for (toml, key, said) in [
                (
                    "retries = 4294967295",
                    "retries",
                    "must be at most 1000, got 4294967295",
                ),
                (
                    "max_iterations = 100001",
                    "max_iterations",
                    "at most 100000",
                ),
                (
                    "transient_retries = 1001",
                    "transient_retries",
                    "at most 1000",
                ),
                (
                    "verify_concurrency = 1025",
                    "verify_concurrency",
                    "at most 1024",
                ),
                (
                    "recent_attempts = 10001",
                    "recent_attempts",
                    "at most 10000",
                ),
                (
                    "stage_timeout = \"100000000000000h\"",
                    "stage_timeout",
                    "at most 7days",
                ),
                ("agent_timeout = \"8d\"", "agent_timeout", "at most 7days"),
                (
                    "unreachable_after = \"8d\"",
                    "unreachable_after",
                    "at most 7days",
                ),
                ("grace = \"2h\"", "grace", "at most 1h"),
                (
                    "transient_backoff = \"2h\"",
                    "transient_backoff",
                    "at most 1h",
                ),
                (
                    "[planning]\nmax_attempts = 5000",
                    "planning.max_attempts",
                    "at most 1000",
                ),
                (
                    "[[gates]]\nname = \"t\"\ncommand = \"true\"\ntimeout = \"5000000000y\"",
                    "gates[0].timeout",
                    "at most 7days",
                ),
                (
                    "[claude]\nmax_turns = 10001",
                    "claude.max_turns",
                    "at most 10000",
                ),
                (
                    "[claude]\nmax_retries = 101",
                    "claude.max_retries",
                    "at most 100",
                ),
                (
                    "[claude]\nmax_budget_usd = 1e9",
                    "claude.max_budget_usd",
                    "at most",
                ),
                (
                    "[claude]\nidle_timeout = \"8d\"",
                    "claude.idle_timeout",
                    "at most 7days",
                ),
                (
                    "[claude]\nresult_grace = \"2h\"",
                    "claude.result_grace",
                    "at most 1h",
                ),
                (
                    "[claude.context_windows]\nbig = 1000000000",
                    "claude.context_windows.big",
                    "at most 100000000 tokens",
                ),
            ] {
                jail.create_file("ralph.toml", toml)?;
                let msg = load_in(jail).unwrap_err().to_string();
                assert!(msg.contains(key) && msg.contains(said), "{toml}: {msg}");
                assert!(msg.contains("ralph.toml"), "{toml}: {msg}");
            }
            jail.create_file("ralph.toml", "retries = 1000\nmax_iterations = 100000\n")?;
            let c = load_in(jail).unwrap();
            assert_eq!(
                (c.retries, c.max_iterations),
                (1000, 100_000),
                "the bounds load"
            );
            Ok(())
        });
    }

    #[test]
    fn a_value_set_by_the_program_is_named_as_such() {
        Jail::expect_with(|jail| {
            let mut overrides = Overrides::default();
            overrides.set("max_iterations", 0).unwrap();
            let msg = Config::load_with(jail.directory(), &overrides)
                .unwrap_err()
                .to_string();
            assert!(
                msg.contains("max_iterations must be at least 1")
                    && msg.contains("set in the program (RalphBuilder::config)"),
                "{msg}"
            );
            assert!(!msg.contains("BTreeMap"), "{msg}");
            jail.set_env("RALPH_RETRIES", "5000");
            let msg = load_in(jail).unwrap_err().to_string();
            assert!(msg.contains("RALPH_"), "{msg}");
            Ok(())
        });
    }

    #[test]
    fn decompose_after_rejections_is_at_least_1_and_bounded() {
        Jail::expect_with(|jail| {
            assert_eq!(load_in(jail).unwrap().decompose_after_rejections, 2);
            jail.create_file("ralph.toml", "decompose_after_rejections = 0\n")?;
            let msg = load_in(jail).unwrap_err().to_string();
            assert!(
                msg.contains("decompose_after_rejections must be at least 1")
                    && msg.contains("ralph.toml"),
                "{msg}"
            );
            jail.create_file("ralph.toml", "decompose_after_rejections = 1001\n")?;
            let msg = load_in(jail).unwrap_err().to_string();
            assert!(
                msg.contains("decompose_after_rejections must be at most 1000, got 1001"),
                "{msg}"
            );
            jail.create_file("ralph.toml", "decompose_after_rejections = 1\n")?;
            assert_eq!(load_in(jail).unwrap().decompose_after_rejections, 1);
            Ok(())
        });
    }

    #[test]
    fn validation_names_the_key() {
        let mut config = crate::config::ClaudeConfig::default();
        check_claude(&config).unwrap();
        config.max_turns = Some(0);
        assert_eq!(check_claude(&config).unwrap_err().0, "max_turns");
        config.max_turns = None;
        config.max_budget_usd = Some(-1.0);
        assert_eq!(check_claude(&config).unwrap_err().0, "max_budget_usd");
        config.max_budget_usd = None;
        config.context_windows.insert("m".into(), 0);
        assert_eq!(check_claude(&config).unwrap_err().0, "context_windows.m");
    }

    #[test]
    fn a_prompts_entry_names_a_template_or_is_refused_naming_the_closest() {
        Jail::expect_with(|jail| {
            jail.create_file("ralph.toml", "[prompts]\nbiuld = \"p/build.md\"\n")?;
            let msg = load_in(jail).unwrap_err().to_string();
            assert!(
                msg.contains("prompts.biuld names no prompt template (did you mean build?)")
                    && msg.contains("ralph.toml"),
                "{msg}"
            );
            jail.create_file("ralph.toml", "[prompts]\nthread_draft = \"p/draft.md\"\n")?;
            let c = load_in(jail).unwrap();
            assert_eq!(
                c.prompts["thread_draft"],
                std::path::Path::new("p/draft.md")
            );
            Ok(())
        });
    }

    #[test]
    fn context_thresholds_are_in_order() {
        use crate::config::ContextThresholds;
        assert!(ContextThresholds::default().validate().is_ok());
        assert!(ContextThresholds::new(0.9, 0.85, 0.95).validate().is_err());
        assert!(ContextThresholds::new(0.7, 0.85, 1.5).validate().is_err());
    }
}
