//! The CLI's command line and environment for one run, from the config and the request.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::agent::Role;

use crate::config::{BIN_ENV, ClaudeConfig, PermissionMode};

/// Where the `claude` binary came from, for error messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Program {
    pub(super) path: OsString,
    /// `claude.bin in ralph.toml`, `$RALPH_CLAUDE_BIN`, `PATH`.
    pub(super) source: &'static str,
}

impl Program {
    /// `claude.bin`, else `$RALPH_CLAUDE_BIN`, else `claude` on `PATH`.
    pub(super) fn resolve(bin: Option<&PathBuf>) -> Self {
        if let Some(bin) = bin {
            return Program {
                path: bin.into(),
                source: "claude.bin",
            };
        }
        match std::env::var_os(BIN_ENV) {
            Some(path) if !path.is_empty() => Program {
                path,
                source: "$RALPH_CLAUDE_BIN",
            },
            _ => Program {
                path: "claude".into(),
                source: "PATH",
            },
        }
    }
}

/// What one process of a run is asked to do.
#[derive(Clone, Copy, Debug)]
pub(super) struct Invocation<'a> {
    pub(super) role: Role,
    /// The structured answer's JSON Schema, compact.
    pub(super) schema: Option<&'a str>,
    /// Resume this session instead of starting a new one.
    pub(super) resume: Option<&'a str>,
    /// Whether the session must be kept so a later process can resume it.
    pub(super) persist: bool,
    /// What is left of the run-wide budget (`AgentRequest::budget_usd`).
    pub(super) budget_usd: Option<f64>,
    /// The prompt's stable part (`AgentRequest::stable_prefix`), appended to the CLI's
    /// system prompt: the CLI sends its system prompt with a cache breakpoint at its end, so
    /// the provider's cache reuses ralph's stable part from the second call of a role on.
    pub(super) stable: Option<&'a str>,
}

/// The arguments: ralph's own, then the config's extra ones.
pub(super) fn args(config: &ClaudeConfig, invocation: Invocation<'_>) -> Vec<String> {
    let mut args: Vec<String> = ["-p", "--output-format", "stream-json", "--verbose"]
        .map(String::from)
        .into();
    if config.bare {
        args.push("--bare".into());
    }
    match mode(config, invocation.role) {
        PermissionMode::BypassPermissions => args.push("--dangerously-skip-permissions".into()),
        other => args.extend(["--permission-mode".into(), other.as_str().into()]),
    }
    if !invocation.persist {
        args.push("--no-session-persistence".into());
    }
    let mut option = |flag: &str, value: Option<String>| {
        if let Some(value) = value {
            args.extend([flag.to_owned(), value]);
        }
    };
    option("--model", config.model.clone());
    option("--max-turns", config.max_turns.map(|n| n.to_string()));
    // The tighter of the per-run cap and what is left of the run-wide budget.
    let cap = match (config.max_budget_usd, invocation.budget_usd) {
        (Some(own), Some(left)) => Some(own.min(left)),
        (own, left) => own.or(left),
    };
    option("--max-budget-usd", cap.map(|b| b.to_string()));
    let system = [config.append_system_prompt.as_deref(), invocation.stable]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>();
    option(
        "--append-system-prompt",
        (!system.is_empty()).then(|| system.join("\n\n")),
    );
    option("--json-schema", invocation.schema.map(str::to_owned));
    option("--resume", invocation.resume.map(str::to_owned));
    if !config.allowed_tools.is_empty() {
        // Variadic flags: the values run up to the next `--flag`.
        args.push("--allowedTools".to_owned());
        args.extend(config.allowed_tools.iter().cloned());
    }
    args.push("--disallowedTools".to_owned());
    args.extend(disallowed(config));
    args.extend(config.args.iter().cloned());
    args
}

/// The CLI's own question tool: headless, nobody answers it (it resolves with empty
/// answers and the agent goes on as if told), so ralph's runs never offer it. An agent asks
/// a person with `<TASK_QUESTION question="…">` instead, which waits for `ralph answer`.
pub(crate) const ASK_USER_QUESTION: &str = "AskUserQuestion";

/// The tools no run may use: the config's `disallowed_tools`, and the CLI's question tool.
fn disallowed(config: &ClaudeConfig) -> Vec<String> {
    let mut tools = config.disallowed_tools.clone();
    if !tools.iter().any(|t| t == ASK_USER_QUESTION) {
        tools.push(ASK_USER_QUESTION.to_owned());
    }
    tools
}

/// The permission mode of `role`: roles that must not write get the read-only mode.
pub(super) fn mode(config: &ClaudeConfig, role: Role) -> PermissionMode {
    if role.may_write() {
        config.permission_mode
    } else {
        config.read_only_mode
    }
}

/// The environment on top of ralph's own: the retry bound, `IS_SANDBOX` where the CLI needs
/// it, then the config's variables (which win). `sandboxed_root`: ralph runs as root, and
/// the run is confined (or the machine declared a sandbox); only then is the CLI told it
/// runs in a sandbox.
pub(super) fn env(
    config: &ClaudeConfig,
    role: Role,
    sandboxed_root: bool,
) -> Vec<(String, String)> {
    let mut env = vec![(
        "CLAUDE_CODE_MAX_RETRIES".to_owned(),
        config.max_retries.to_string(),
    )];
    // As root the CLI refuses to bypass permissions unless told it runs in a sandbox.
    if sandboxed_root && mode(config, role) == PermissionMode::BypassPermissions {
        env.push(("IS_SANDBOX".to_owned(), "1".to_owned()));
    }
    env.extend(config.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

/// Whether ralph runs as root.
pub(super) fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build() -> Invocation<'static> {
        Invocation {
            role: Role::Build,
            schema: None,
            resume: None,
            persist: false,
            budget_usd: None,
            stable: None,
        }
    }

    #[test]
    fn the_stable_part_follows_the_config_s_system_prompt() {
        let config = ClaudeConfig {
            append_system_prompt: Some("Be brief.".into()),
            ..ClaudeConfig::default()
        };
        let invocation = Invocation {
            stable: Some("# Rules\nthe spec\n"),
            ..build()
        };
        let given = args(&config, invocation);
        let at = given
            .iter()
            .position(|a| a == "--append-system-prompt")
            .unwrap();
        assert_eq!(given[at + 1], "Be brief.\n\n# Rules\nthe spec\n");
        assert!(
            !args(&ClaudeConfig::default(), build()).contains(&"--append-system-prompt".into())
        );
    }

    #[test]
    fn default_build_run_is_the_verified_invocation() {
        assert_eq!(
            args(&ClaudeConfig::default(), build()).join(" "),
            "-p --output-format stream-json --verbose --bare --dangerously-skip-permissions \
             --no-session-persistence --disallowedTools AskUserQuestion"
        );
    }

    #[test]
    fn read_only_roles_use_plan_mode_and_their_schema() {
        let invocation = Invocation {
            role: Role::Verify,
            schema: Some(r#"{"type":"object"}"#),
            ..build()
        };
        let args = args(&ClaudeConfig::default(), invocation).join(" ");
        assert!(args.contains("--permission-mode plan"), "{args}");
        assert!(
            args.contains(r#"--json-schema {"type":"object"}"#),
            "{args}"
        );
        assert!(!args.contains("--dangerously-skip-permissions"), "{args}");
    }

    #[test]
    fn the_budget_cap_is_the_tighter_of_the_run_cap_and_whats_left() {
        let cap = |own: Option<f64>, left: Option<f64>| {
            let config = ClaudeConfig {
                max_budget_usd: own,
                ..ClaudeConfig::default()
            };
            let invocation = Invocation {
                budget_usd: left,
                ..build()
            };
            let args = args(&config, invocation);
            let at = args.iter().position(|a| a == "--max-budget-usd");
            at.map(|at| args[at + 1].clone())
        };
        assert_eq!(cap(None, None), None);
        assert_eq!(cap(Some(1.5), None).as_deref(), Some("1.5"));
        assert_eq!(cap(None, Some(0.6)).as_deref(), Some("0.6"));
        assert_eq!(cap(Some(1.5), Some(0.6)).as_deref(), Some("0.6"));
        assert_eq!(cap(Some(0.5), Some(0.6)).as_deref(), Some("0.5"));
    }

    #[test]
    fn every_option_reaches_the_command_line() {
        let config = ClaudeConfig {
            bare: false,
            model: Some("sonnet".into()),
            max_turns: Some(7),
            max_budget_usd: Some(1.5),
            append_system_prompt: Some("Be brief.".into()),
            allowed_tools: vec!["Bash(cargo *)".into(), "Read".into()],
            disallowed_tools: vec!["WebFetch".into()],
            permission_mode: PermissionMode::AcceptEdits,
            args: vec!["--effort".into(), "high".into()],
            ..ClaudeConfig::default()
        };
        let invocation = Invocation {
            resume: Some("s-1"),
            persist: true,
            ..build()
        };
        assert_eq!(
            args(&config, invocation),
            [
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--permission-mode",
                "acceptEdits",
                "--model",
                "sonnet",
                "--max-turns",
                "7",
                "--max-budget-usd",
                "1.5",
                "--append-system-prompt",
                "Be brief.",
                "--resume",
                "s-1",
                "--allowedTools",
                "Bash(cargo *)",
                "Read",
                "--disallowedTools",
                "WebFetch",
                "AskUserQuestion",
                "--effort",
                "high",
            ]
        );
    }

    #[test]
    fn sandbox_flag_only_as_root_and_only_when_bypassing() {
        let config = ClaudeConfig::default();
        let has_sandbox =
            |env: Vec<(String, String)>| env.iter().any(|(k, v)| k == "IS_SANDBOX" && v == "1");
        assert!(has_sandbox(env(&config, Role::Build, true)));
        assert!(!has_sandbox(env(&config, Role::Build, false)));
        assert!(!has_sandbox(env(&config, Role::Verify, true)));
    }

    #[test]
    fn config_env_comes_last_and_wins() {
        let mut config = ClaudeConfig {
            max_retries: 5,
            ..ClaudeConfig::default()
        };
        config
            .env
            .insert("CLAUDE_CODE_MAX_RETRIES".into(), "1".into());
        let env = env(&config, Role::Build, false);
        assert_eq!(
            env.first().unwrap(),
            &("CLAUDE_CODE_MAX_RETRIES".into(), "5".into())
        );
        assert_eq!(
            env.last().unwrap(),
            &("CLAUDE_CODE_MAX_RETRIES".into(), "1".into())
        );
    }

    #[test]
    fn the_binary_comes_from_config_first() {
        let bin = PathBuf::from("/opt/claude");
        let program = Program::resolve(Some(&bin));
        assert_eq!(program.path, OsString::from("/opt/claude"));
        assert_eq!(program.source, "claude.bin");
    }
}
