//! What each agent CLI needs of the sandbox it runs in: its own state writable (sessions,
//! logs, caches), its settings and instruction files read-only, its key file readable
//! (the run's sandbox hides every CLI's key file from the others and from gates), and its
//! own variables passed.
//!
//! The folders are each CLI's documented defaults, moved by the variables that move them
//! (`CLAUDE_CONFIG_DIR`, `CODEX_HOME`, `HOME`, the XDG folders), read from the agent's own
//! `env` first and ralph's environment after. `docs/sandbox.md` lists them.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::process::Sandbox;

/// An agent CLI ralph knows the files of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cli {
    /// Claude Code (`claude`).
    Claude,
    /// OpenAI's Codex CLI (`codex`).
    Codex,
    /// Google's Gemini CLI (`gemini`).
    Gemini,
    /// opencode.
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

/// The variables a CLI's folders are found by.
struct FilesEnv<'a> {
    var: &'a dyn Fn(&str) -> Option<OsString>,
    home: Option<PathBuf>,
}

impl FilesEnv<'_> {
    /// `rel` under the home, if there is one.
    fn under_home(&self, rel: &str) -> Option<PathBuf> {
        self.home.as_ref().map(|h| h.join(rel))
    }

    /// The folder the variable `name` names, or else `rel` under the home.
    fn named_or(&self, name: &str, rel: &str) -> Option<PathBuf> {
        (self.var)(name)
            .map(PathBuf::from)
            .or_else(|| self.under_home(rel))
    }
}

/// Each of `names` in `dir`.
fn each_in(dir: &Path, names: &[&str]) -> Vec<PathBuf> {
    names.iter().map(|name| dir.join(name)).collect()
}

/// Claude's: its config folder (`CLAUDE_CONFIG_DIR`, or `~/.claude`), and without that
/// variable the state file beside the folder.
fn claude_files(env: &FilesEnv<'_>) -> Files {
    let mut files = Files::default();
    let set = (env.var)("CLAUDE_CONFIG_DIR").map(PathBuf::from);
    if let Some(dir) = set.clone().or_else(|| env.under_home(".claude")) {
        files.protect = each_in(
            &dir,
            &[
                "settings.json",
                "settings.local.json",
                "CLAUDE.md",
                "agents",
                "commands",
                "skills",
            ],
        );
        files.key.push(dir.join(".credentials.json"));
        files.write.push(dir);
    }
    // Without CLAUDE_CONFIG_DIR the CLI keeps its state file beside the folder.
    if set.is_none() {
        files.write.extend(env.under_home(".claude.json"));
    }
    files
}

/// Codex's: its home (`CODEX_HOME`, or `~/.codex`).
fn codex_files(env: &FilesEnv<'_>) -> Files {
    let mut files = Files::default();
    if let Some(dir) = env.named_or("CODEX_HOME", ".codex") {
        files.protect = each_in(
            &dir,
            &["config.toml", "AGENTS.md", "AGENTS.override.md", "rules"],
        );
        files.key.push(dir.join("auth.json"));
        files.write.push(dir);
    }
    files
}

/// Gemini's: `~/.gemini`.
fn gemini_files(env: &FilesEnv<'_>) -> Files {
    let mut files = Files::default();
    if let Some(dir) = env.under_home(".gemini") {
        files.protect = each_in(&dir, &["settings.json", "GEMINI.md", "commands"]);
        files.key = each_in(&dir, &["oauth_creds.json", "google_accounts.json"]);
        files.write.push(dir);
    }
    files
}

/// opencode's: its `opencode` folder in each XDG base folder (data, state, cache, config).
fn opencode_files(env: &FilesEnv<'_>) -> Files {
    let mut files = Files::default();
    let xdg = |name: &str, rel: &str| env.named_or(name, rel).map(|d| d.join("opencode"));
    if let Some(data) = xdg("XDG_DATA_HOME", ".local/share") {
        files.key.push(data.join("auth.json"));
        files.write.push(data);
    }
    files.write.extend(xdg("XDG_STATE_HOME", ".local/state"));
    files.write.extend(xdg("XDG_CACHE_HOME", ".cache"));
    if let Some(config) = xdg("XDG_CONFIG_HOME", ".config") {
        files.protect = each_in(
            &config,
            &["opencode.json", "opencode.jsonc", "AGENTS.md", "agent"],
        );
        files.write.push(config);
    }
    files
}

impl Cli {
    /// The CLI's name: its program and its section of `ralph.toml`.
    pub fn name(self) -> &'static str {
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
        let env = FilesEnv {
            home: var("HOME").map(PathBuf::from),
            var,
        };
        match self {
            Cli::Claude => claude_files(&env),
            Cli::Codex => codex_files(&env),
            Cli::Gemini => gemini_files(&env),
            Cli::Opencode => opencode_files(&env),
        }
    }

    /// Every CLI's key file under `var`'s home: what the run's sandbox hides from the other
    /// CLIs, command agents and gates.
    pub fn key_files(var: &dyn Fn(&str) -> Option<OsString>) -> Vec<PathBuf> {
        [Cli::Claude, Cli::Codex, Cli::Gemini, Cli::Opencode]
            .into_iter()
            .flat_map(|cli| cli.files(var).key)
            .collect()
    }

    /// `sandbox` with what this CLI needs, its variables read from `own` (the agent's own
    /// `env`) and then ralph's environment. Its state folders are made when missing, as the CLI
    /// would make them: in the read-only home it could not.
    pub fn sandbox(self, sandbox: Sandbox, own: impl Fn(&str) -> Option<String>) -> Sandbox {
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
