//! What each agent CLI needs of the sandbox it runs in: its own state writable (sessions,
//! logs, caches), its settings and instruction files read-only, its key file readable
//! (the run's sandbox hides every CLI's key file from the others and from gates), and its
//! own variables passed.
//!
//! The folders are each CLI's documented defaults, moved by the variables that move them
//! (`CLAUDE_CONFIG_DIR`, `CODEX_HOME`, `HOME`, the XDG folders), read from the agent's own
//! `env` first and ralph's environment after. The README's "Sandbox" section lists them.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::process::Sandbox;

/// An agent CLI ralph knows the files of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cli {
    Claude,
    Codex,
    Gemini,
    Opencode,
}

/// The variables of the providers opencode may be set up to use: it reads the key of
/// whichever its config names.
const OPENCODE_PROVIDERS: &[&str] = &[
    "OPENCODE_*",
    "ANTHROPIC_*",
    "OPENAI_*",
    "GEMINI_*",
    "GOOGLE_GENERATIVE_AI_API_KEY",
    "OPENROUTER_*",
    "GROQ_*",
    "MISTRAL_*",
    "DEEPSEEK_*",
    "XAI_*",
    "TOGETHER_*",
    "FIREWORKS_*",
];

/// The files of one CLI: see the module docs.
#[derive(Debug, Default)]
struct Files {
    write: Vec<PathBuf>,
    protect: Vec<PathBuf>,
    key: Vec<PathBuf>,
}

impl Cli {
    /// The CLI's name: its program and its section of `ralph.toml`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Cli::Claude => "claude",
            Cli::Codex => "codex",
            Cli::Gemini => "gemini",
            Cli::Opencode => "opencode",
        }
    }

    /// The variables the CLI reads: its key, its endpoint, its own settings.
    fn env(self) -> &'static [&'static str] {
        match self {
            Cli::Claude => &[
                "ANTHROPIC_*",
                "CLAUDE_*",
                "DISABLE_*",
                "API_TIMEOUT_MS",
                "BASH_DEFAULT_TIMEOUT_MS",
                "BASH_MAX_TIMEOUT_MS",
                "BASH_MAX_OUTPUT_LENGTH",
                "MAX_THINKING_TOKENS",
                "MAX_MCP_OUTPUT_TOKENS",
                "MCP_TIMEOUT",
                "MCP_TOOL_TIMEOUT",
            ],
            Cli::Codex => &["OPENAI_*", "CODEX_*"],
            Cli::Gemini => &["GEMINI_*", "GOOGLE_*"],
            Cli::Opencode => OPENCODE_PROVIDERS,
        }
    }

    /// Where the CLI keeps its files, given how `var` reads a variable.
    fn files(self, var: &dyn Fn(&str) -> Option<OsString>) -> Files {
        let home = var("HOME").map(PathBuf::from);
        let under_home = |rel: &str| home.as_ref().map(|h| h.join(rel));
        let named_or = |name: &str, rel: &str| var(name).map(PathBuf::from).or(under_home(rel));
        let mut files = Files::default();
        match self {
            Cli::Claude => {
                let set = var("CLAUDE_CONFIG_DIR").map(PathBuf::from);
                let dir = set.clone().or(under_home(".claude"));
                if let Some(dir) = dir {
                    files.protect = ["settings.json", "settings.local.json", "CLAUDE.md"]
                        .iter()
                        .chain(&["agents", "commands", "skills"])
                        .map(|f| dir.join(f))
                        .collect();
                    files.key.push(dir.join(".credentials.json"));
                    files.write.push(dir);
                }
                // Without CLAUDE_CONFIG_DIR the CLI keeps its state file beside the folder.
                if set.is_none() {
                    files.write.extend(under_home(".claude.json"));
                }
            }
            Cli::Codex => {
                if let Some(dir) = named_or("CODEX_HOME", ".codex") {
                    files.protect = ["config.toml", "AGENTS.md", "AGENTS.override.md", "rules"]
                        .iter()
                        .map(|f| dir.join(f))
                        .collect();
                    files.key.push(dir.join("auth.json"));
                    files.write.push(dir);
                }
            }
            Cli::Gemini => {
                if let Some(dir) = under_home(".gemini") {
                    files.protect = ["settings.json", "GEMINI.md", "commands"]
                        .iter()
                        .map(|f| dir.join(f))
                        .collect();
                    files.key = ["oauth_creds.json", "google_accounts.json"]
                        .iter()
                        .map(|f| dir.join(f))
                        .collect();
                    files.write.push(dir);
                }
            }
            Cli::Opencode => {
                let xdg = |name: &str, rel: &str| named_or(name, rel).map(|d| d.join("opencode"));
                if let Some(data) = xdg("XDG_DATA_HOME", ".local/share") {
                    files.key.push(data.join("auth.json"));
                    files.write.push(data);
                }
                files.write.extend(xdg("XDG_STATE_HOME", ".local/state"));
                files.write.extend(xdg("XDG_CACHE_HOME", ".cache"));
                if let Some(config) = xdg("XDG_CONFIG_HOME", ".config") {
                    files.protect = ["opencode.json", "opencode.jsonc", "AGENTS.md", "agent"]
                        .iter()
                        .map(|f| config.join(f))
                        .collect();
                    files.write.push(config);
                }
            }
        }
        files
    }

    /// Every CLI's key file under `var`'s home: what the run's sandbox hides from the other
    /// CLIs, command agents and gates.
    pub(crate) fn key_files(var: &dyn Fn(&str) -> Option<OsString>) -> Vec<PathBuf> {
        [Cli::Claude, Cli::Codex, Cli::Gemini, Cli::Opencode]
            .into_iter()
            .flat_map(|cli| cli.files(var).key)
            .collect()
    }

    /// `sandbox` with what this CLI needs, its variables read from `own` (the agent's own
    /// `env`) and then ralph's environment. Its state folders are made when missing, as the CLI
    /// would make them: in the read-only home it could not.
    pub(crate) fn sandbox(self, sandbox: Sandbox, own: impl Fn(&str) -> Option<String>) -> Sandbox {
        if !sandbox.confines() {
            return sandbox;
        }
        let var = |name: &str| {
            own(name)
                .map(OsString::from)
                .or_else(|| std::env::var_os(name))
        };
        let files = self.files(&var);
        // A temporary folder of its own, given in its `env`: the sandbox's private /tmp
        // would hide it.
        let own_tmp = own("TMPDIR").map(PathBuf::from);
        let mut sandbox = self
            .env()
            .iter()
            .fold(sandbox, |sandbox, name| sandbox.pass_env(name));
        for dir in &files.write {
            if dir.extension().is_none() {
                // A folder the CLI makes on its first run; failing, the CLI says why.
                let _ = std::fs::create_dir_all(dir);
            }
            sandbox = sandbox.write(dir);
        }
        if let Some(tmp) = own_tmp {
            sandbox = sandbox.write(tmp);
        }
        for path in files.key {
            sandbox = sandbox.reveal(&path);
        }
        files
            .protect
            .into_iter()
            .fold(sandbox, |sandbox, path| sandbox.protect(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn a_cli_keeps_its_state_where_its_variables_say() {
        let codex = Cli::Codex.files(&var(&[("HOME", "/h"), ("CODEX_HOME", "/c")]));
        assert_eq!(codex.write, [PathBuf::from("/c")]);
        assert!(codex.protect.contains(&PathBuf::from("/c/config.toml")));
        let claude = Cli::Claude.files(&var(&[("HOME", "/h")]));
        assert_eq!(
            claude.write,
            [
                PathBuf::from("/h/.claude"),
                PathBuf::from("/h/.claude.json")
            ]
        );
        assert!(
            claude
                .protect
                .contains(&PathBuf::from("/h/.claude/settings.json"))
        );
        let claude = Cli::Claude.files(&var(&[("HOME", "/h"), ("CLAUDE_CONFIG_DIR", "/d")]));
        assert_eq!(claude.write, [PathBuf::from("/d")]);
        let opencode = Cli::Opencode.files(&var(&[("HOME", "/h"), ("XDG_DATA_HOME", "/x")]));
        assert_eq!(opencode.write[0], PathBuf::from("/x/opencode"));
        assert_eq!(opencode.write[1], PathBuf::from("/h/.local/state/opencode"));
    }

    #[test]
    fn every_clis_key_file_is_known() {
        let keys = Cli::key_files(&var(&[("HOME", "/h")]));
        for key in [
            "/h/.claude/.credentials.json",
            "/h/.codex/auth.json",
            "/h/.gemini/oauth_creds.json",
            "/h/.local/share/opencode/auth.json",
        ] {
            assert!(keys.contains(&PathBuf::from(key)), "{key}");
        }
    }
}
