//! `[claude]` in `ralph.toml`: how [`ClaudeCli`](super::ClaudeCli) runs the CLI.

use std::path::PathBuf;
use std::time::Duration;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::config::duration;

/// The environment variable naming the `claude` binary when `claude.bin` is not set.
pub const BIN_ENV: &str = "RALPH_CLAUDE_BIN";

/// How the CLI treats tool calls that need approval (its `--permission-mode`; fixtures/claude/PROTOCOL.md §8).
///
/// In `-p` mode nothing ever prompts: a refused tool call is reported to the model, which
/// carries on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum PermissionMode {
    /// Every tool call is allowed (`--dangerously-skip-permissions`; as root ralph also sets
    /// `IS_SANDBOX=1`, without which the CLI refuses). Run it in a sandbox or a throwaway
    /// checkout.
    #[default]
    BypassPermissions,
    /// File edits and shell writes inside the working directory are allowed.
    AcceptEdits,
    /// The CLI's classifier decides.
    Auto,
    /// Calls that need approval are refused.
    Default,
    /// Every call that would need approval is refused.
    DontAsk,
    /// Read-only: edits and shell commands are refused.
    Plan,
}

impl PermissionMode {
    /// The CLI's spelling (`bypassPermissions`).
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::BypassPermissions => "bypassPermissions",
            PermissionMode::AcceptEdits => "acceptEdits",
            PermissionMode::Auto => "auto",
            PermissionMode::Default => "default",
            PermissionMode::DontAsk => "dontAsk",
            PermissionMode::Plan => "plan",
        }
    }
}

/// How the Claude CLI is run: the `[claude]` table of `ralph.toml`, also settable from the
/// environment (`RALPH_CLAUDE__MODEL=sonnet`) and with [`ClaudeCli`](super::ClaudeCli)'s
/// builder methods.
///
/// ```toml
/// [claude]
/// bin = "/opt/claude/bin/claude"   # else $RALPH_CLAUDE_BIN, else `claude` on PATH
/// model = "sonnet"
/// max_turns = 40
/// max_budget_usd = 5.0
/// permission_mode = "bypassPermissions"   # of BUILD runs
/// read_only_mode = "plan"                 # of the roles that must not write
/// allowed_tools = ["Bash(cargo *)", "Edit", "Read"]
/// disallowed_tools = ["WebFetch"]
/// append_system_prompt = "Never push to a remote."
/// bare = true
/// session_persistence = false
/// max_retries = 3
/// idle_timeout = "3m"
/// result_grace = "2s"
/// args = ["--effort", "high"]
///
/// [claude.env]
/// API_TIMEOUT_MS = "60000"
///
/// [claude.context_windows]
/// "my-gateway-model" = 128000
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ClaudeConfig {
    /// The `claude` binary. Default: `$RALPH_CLAUDE_BIN`, else `claude` on `PATH`.
    pub bin: Option<PathBuf>,
    /// `--model`; the CLI's default when unset.
    pub model: Option<String>,
    /// `--max-turns`: API round trips per run.
    pub max_turns: Option<u32>,
    /// `--max-budget-usd`: spend per run.
    pub max_budget_usd: Option<f64>,
    /// The permission mode of roles that write (BUILD). Default `bypassPermissions`.
    pub permission_mode: PermissionMode,
    /// The permission mode of roles that must not write (investigate, verify, gap analysis,
    /// decompose, plan). Default `plan`, in which the CLI refuses edits and shell commands.
    pub read_only_mode: PermissionMode,
    /// `--allowedTools`, e.g. `"Bash(cargo *)"`.
    pub allowed_tools: Vec<String>,
    /// `--disallowedTools`.
    pub disallowed_tools: Vec<String>,
    /// `--append-system-prompt`.
    pub append_system_prompt: Option<String>,
    /// `--bare`: tools Bash, Edit and Read only, no CLAUDE.md, hooks or plugins, and auth by
    /// `ANTHROPIC_API_KEY` only. Default true: runs are reproducible.
    pub bare: bool,
    /// Keep the CLI's session transcripts (`~/.claude/projects/…`). Default false
    /// (`--no-session-persistence`). Compaction needs the session to be resumable, so runs
    /// always persist their session when the context thresholds could trigger one; see
    /// [`ClaudeCli`](super::ClaudeCli).
    pub session_persistence: bool,
    /// `CLAUDE_CODE_MAX_RETRIES`: the CLI's own retries of a failed API call before it gives
    /// up (its default, 10, can take three minutes). Default 3; ralph's engine retries
    /// transient failures with its own backoff (`transient_retries`).
    pub max_retries: u32,
    /// Stop a run whose stdout stayed silent this long (the CLI has no heartbeat and waits
    /// forever on a stalled stream). Size it above the longest silent tool call. Default 3m.
    #[serde(with = "duration")]
    pub idle_timeout: Duration,
    /// How long the CLI may keep running after its `result` line before it is stopped.
    /// Default 2s.
    #[serde(with = "duration")]
    pub result_grace: Duration,
    /// Extra arguments, after ralph's own.
    pub args: Vec<String>,
    /// Extra environment variables of the CLI (`ANTHROPIC_BASE_URL`, `API_TIMEOUT_MS`, …).
    pub env: IndexMap<String, String>,
    /// Context windows by model name, ahead of the built-in table of known models.
    pub context_windows: IndexMap<String, u64>,
}

impl Default for ClaudeConfig {
    fn default() -> Self {
        ClaudeConfig {
            bin: None,
            model: None,
            max_turns: None,
            max_budget_usd: None,
            permission_mode: PermissionMode::BypassPermissions,
            read_only_mode: PermissionMode::Plan,
            allowed_tools: Vec::new(),
            disallowed_tools: Vec::new(),
            append_system_prompt: None,
            bare: true,
            session_persistence: false,
            max_retries: 3,
            idle_timeout: Duration::from_secs(180),
            result_grace: Duration::from_secs(2),
            args: Vec::new(),
            env: IndexMap::new(),
            context_windows: IndexMap::new(),
        }
    }
}

impl ClaudeConfig {
    /// Checks values the CLI would reject or that would make every run fail.
    ///
    /// # Errors
    ///
    /// The offending key (relative to `[claude]`) and why.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let invalid = |key: &str, why: &str| Err((key.to_owned(), why.to_owned()));
        if self.max_turns == Some(0) {
            return invalid("max_turns", "must be at least 1");
        }
        if let Some(budget) = self.max_budget_usd
            && !(budget.is_finite() && budget > 0.0)
        {
            return invalid("max_budget_usd", "must be a positive number of dollars");
        }
        if self.idle_timeout.is_zero() {
            return invalid("idle_timeout", "must be longer than zero");
        }
        if self.bin.as_ref().is_some_and(|b| b.as_os_str().is_empty()) {
            return invalid("bin", "is empty");
        }
        if let Some((model, _)) = self.context_windows.iter().find(|(_, w)| **w == 0) {
            return Err((
                format!("context_windows.{model}"),
                "must be at least 1 token".to_owned(),
            ));
        }
        if let Some((model, w)) = self
            .context_windows
            .iter()
            .find(|(_, w)| **w > MAX_CONTEXT_WINDOW)
        {
            return Err((
                format!("context_windows.{model}"),
                format!("must be at most {MAX_CONTEXT_WINDOW} tokens, got {w}"),
            ));
        }
        let bounded = [
            (
                "max_turns",
                u64::from(self.max_turns.unwrap_or(0)),
                MAX_TURNS,
            ),
            ("max_retries", u64::from(self.max_retries), MAX_RETRIES),
        ];
        for (key, value, max) in bounded {
            if value > max {
                return Err((
                    key.to_owned(),
                    format!("must be at most {max}, got {value}"),
                ));
            }
        }
        if let Some(budget) = self.max_budget_usd.filter(|b| *b > MAX_BUDGET_USD) {
            return Err((
                "max_budget_usd".to_owned(),
                format!("must be at most {MAX_BUDGET_USD} dollars, got {budget}"),
            ));
        }
        for (key, value, max) in [
            (
                "idle_timeout",
                self.idle_timeout,
                crate::config::bounds::MAX_TIMEOUT,
            ),
            (
                "result_grace",
                self.result_grace,
                crate::config::bounds::MAX_WAIT,
            ),
        ] {
            if value > max {
                return Err((
                    key.to_owned(),
                    format!(
                        "must be at most {}, got {}",
                        humantime::format_duration(max),
                        humantime::format_duration(value)
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The largest `max_turns`: far above any task, and safe to count up to.
const MAX_TURNS: u64 = 10_000;
/// The largest `max_retries` the CLI is told (each retry can wait minutes).
const MAX_RETRIES: u64 = 100;
/// The largest `max_budget_usd`: a typo guard, not a policy.
const MAX_BUDGET_USD: f64 = 1_000_000.0;
/// The largest context window a model name may be given, in tokens.
const MAX_CONTEXT_WINDOW: u64 = 100_000_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permission_modes_use_the_cli_spelling() {
        let modes: Vec<PermissionMode> =
            serde_json::from_str(r#"["bypassPermissions","acceptEdits","plan","dontAsk"]"#)
                .unwrap();
        assert_eq!(
            modes.iter().map(|m| m.as_str()).collect::<Vec<_>>(),
            ["bypassPermissions", "acceptEdits", "plan", "dontAsk"]
        );
    }

    #[test]
    fn validation_names_the_key() {
        let mut config = ClaudeConfig::default();
        config.validate().unwrap();
        config.max_turns = Some(0);
        assert_eq!(config.validate().unwrap_err().0, "max_turns");
        config.max_turns = None;
        config.max_budget_usd = Some(-1.0);
        assert_eq!(config.validate().unwrap_err().0, "max_budget_usd");
        config.max_budget_usd = None;
        config.context_windows.insert("m".into(), 0);
        assert_eq!(config.validate().unwrap_err().0, "context_windows.m");
    }
}
