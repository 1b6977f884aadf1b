//! The tables of each agent: `[claude]` ([`ClaudeCli`](https://docs.rs/ralph-loop/latest/ralph/agent/claude/struct.ClaudeCli.html)), `[codex]`,
//! `[gemini]` and `[opencode]` (the vendor CLIs), and `[agent.NAME]`
//! ([`CommandAgent`](https://docs.rs/ralph-loop/latest/ralph/agent/struct.CommandAgent.html)). The agents take their table from here;
//! nothing here knows an agent.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration;

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
/// environment (`RALPH_CLAUDE__MODEL=sonnet`) and with [`ClaudeCli`](https://docs.rs/ralph-loop/latest/ralph/agent/claude/struct.ClaudeCli.html)'s
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
#[doc(hidden)] // ralph's own: `Config`'s field, set through `ralph.toml` or the builder
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
    /// [`ClaudeCli`](https://docs.rs/ralph-loop/latest/ralph/agent/claude/struct.ClaudeCli.html).
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
    pub env: BTreeMap<String, String>,
    /// Context windows by model name, ahead of the built-in table of known models.
    pub context_windows: BTreeMap<String, u64>,
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
            env: BTreeMap::new(),
            context_windows: BTreeMap::new(),
        }
    }
}

/// `[codex]`, `[gemini]` or `[opencode]` of `ralph.toml`: how ralph runs that vendor's CLI
/// ([`CodexCli`](https://docs.rs/ralph-loop/latest/ralph/agent/struct.CodexCli.html), [`GeminiCli`](https://docs.rs/ralph-loop/latest/ralph/agent/struct.GeminiCli.html),
/// [`OpencodeCli`](https://docs.rs/ralph-loop/latest/ralph/agent/struct.OpencodeCli.html)). Every key is optional.
///
/// ```toml
/// [codex]
/// bin = "/opt/codex/bin/codex"          # default: the CLI's name, on PATH
/// model = "gpt-5-codex"                 # default: the CLI's own
/// args = ["-c", "model_reasoning_effort=\"high\""]
/// env = { CODEX_HOME = "/home/me/.codex" }
/// idle_timeout = "5m"
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[doc(hidden)] // ralph's own: `Config`'s field, set through `ralph.toml` or the builder
pub struct CliConfig {
    /// The program. Default: the CLI's name (`codex`, `gemini`), looked up on `PATH`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bin: Option<PathBuf>,
    /// The model. Default: the CLI's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// More arguments, before the prompt.
    pub args: Vec<String>,
    /// Environment variables for the CLI.
    pub env: BTreeMap<String, String>,
    /// Longest silence on the CLI's output before the run is cut as timed out. Default 5m;
    /// opencode's is at least 30s, as it is silent from its start to its first answer.
    #[serde(with = "duration")]
    pub idle_timeout: Duration,
}

impl Default for CliConfig {
    fn default() -> Self {
        CliConfig {
            bin: None,
            model: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            idle_timeout: Duration::from_secs(300),
        }
    }
}

/// One `[agent.<name>]` table of `ralph.toml`: a [`CommandAgent`](https://docs.rs/ralph-loop/latest/ralph/agent/struct.CommandAgent.html),
/// any agent CLI run from an argv template.
///
/// ```toml
/// [agent.aider]
/// command = ["aider", "--yes-always", "--no-git", "--message-file", "{prompt_file}"]
/// read_only_args = ["--dry-run"]
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct CommandConfig {
    /// The argv template: the program, then its arguments, with `{prompt_file}`,
    /// `{workspace}`, `{role}` and `{subject}` replaced.
    pub command: Vec<String>,
    /// Arguments appended for read-only roles (the CLI's sandbox or approval flags).
    pub read_only_args: Vec<String>,
    /// A JSON pointer (`/result`) into the last JSON object line of stdout: the final
    /// answer. Unset: the whole stdout is the answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer_pointer: Option<String>,
    /// Longest silence on stdout and stderr before the run is cut as timed out. Unset: none.
    #[serde(with = "duration::option", skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<Duration>,
    /// Environment variables set for the command.
    pub env: BTreeMap<String, String>,
    /// Whether the command has the network in the sandbox. Default true: an agent needs
    /// its API. `false` leaves it only a loopback of its own.
    pub network: bool,
}

impl Default for CommandConfig {
    fn default() -> Self {
        CommandConfig {
            command: Vec::new(),
            read_only_args: Vec::new(),
            answer_pointer: None,
            idle_timeout: None,
            env: BTreeMap::new(),
            network: true,
        }
    }
}

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
}
