//! The layers of the configuration, and where a value came from: built-in defaults <
//! `ralph.toml` < `RALPH_*` < the program's overrides. A `RALPH_…` variable that names no
//! setting is refused, naming the closest one.

use std::path::Path;

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use figment::value::{Dict, Value};
use serde::Serialize;

use super::{Config, ConfigError};

/// The config file ralph reads from the workspace.
pub const CONFIG_FILE: &str = "ralph.toml";
/// The prefix of environment overrides.
pub(crate) const ENV_PREFIX: &str = "RALPH_";

/// Builder-level overrides: dotted keys with values, merged above everything else.
#[derive(Clone, Debug, Default)]
#[doc(hidden)] // ralph's own: `Config`'s field, set through `ralph.toml` or the builder
pub struct Overrides(Vec<(String, Value)>);

impl Overrides {
    /// Sets `key` (dotted, e.g. `context.warn`) to `value`.
    ///
    /// # Errors
    ///
    /// When `value` cannot be represented as a config value.
    pub fn set(&mut self, key: &str, value: impl Serialize) -> Result<(), ConfigError> {
        let value = Value::serialize(value)?;
        self.0.push((key.to_owned(), value));
        Ok(())
    }

    fn dict(&self) -> Dict {
        let mut dict = Dict::new();
        for (key, value) in &self.0 {
            merge_nested(&mut dict, key, value.clone());
        }
        dict
    }
}

/// Where overrides come from, as errors name it.
const OVERRIDES_SOURCE: &str = "the program (RalphBuilder::config)";

impl figment::Provider for Overrides {
    fn metadata(&self) -> figment::Metadata {
        figment::Metadata::named(OVERRIDES_SOURCE)
    }

    fn data(&self) -> Result<figment::value::Map<figment::Profile, Dict>, figment::Error> {
        Serialized::defaults(self.dict()).data()
    }
}

fn merge_nested(dict: &mut Dict, key: &str, value: Value) {
    match key.split_once('.') {
        None => {
            dict.insert(key.to_owned(), value);
        }
        Some((head, rest)) => {
            let entry = dict
                .entry(head.to_owned())
                .or_insert_with(|| Value::from(Dict::new()));
            if let Value::Dict(_, inner) = entry {
                merge_nested(inner, rest, value);
            } else {
                let mut inner = Dict::new();
                merge_nested(&mut inner, rest, value);
                *entry = Value::from(inner);
            }
        }
    }
}

impl Config {
    /// The layered figment for `workspace`: defaults < `ralph.toml` < `RALPH_*`. Merge your
    /// own providers above it and [`extract`](Figment::extract) a `Config`, or read other
    /// keys of `ralph.toml` through it.
    pub fn figment(workspace: &Path) -> Figment {
        Self::figment_with(workspace, &Overrides::default())
    }

    /// [`figment`](Self::figment) with the builder's `overrides` on top.
    pub fn figment_with(workspace: &Path, overrides: &Overrides) -> Figment {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        let file = workspace.join(CONFIG_FILE);
        if file.exists() {
            // `file_exact`: a relative `Toml::file` would search parent directories.
            figment = figment.merge(Toml::file_exact(&file));
        }
        figment
            .merge(
                Env::prefixed(ENV_PREFIX)
                    .split("__")
                    .filter(|key| is_config_key(key.as_str())),
            )
            .merge(overrides.clone())
    }

    /// Loads and validates the configuration of `workspace`.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the key and where its value came from.
    pub fn load(workspace: &Path) -> Result<Config, ConfigError> {
        Self::load_with(workspace, &Overrides::default())
    }

    /// [`load`](Self::load) with the builder's `overrides` on top.
    pub fn load_with(workspace: &Path, overrides: &Overrides) -> Result<Config, ConfigError> {
        Self::load_traced(workspace, overrides).map(|(config, _)| config)
    }

    /// [`load_with`](Self::load_with), and where its list of gates came from.
    pub fn load_traced(
        workspace: &Path,
        overrides: &Overrides,
    ) -> Result<(Config, GatesOrigin), ConfigError> {
        check_env_names()?;
        let figment = Self::figment_with(workspace, overrides);
        let config: Config = figment.extract()?;
        check_agents(&config, &figment)?;
        let origin = GatesOrigin::of(&figment);
        config.validate().map_err(|mut e| {
            if let ConfigError::Invalid {
                key, source_name, ..
            } = &mut e
            {
                let lookup = key.split('[').next().unwrap_or(key);
                // A whole section (`context` out of order) was set by one of its variables.
                let section = matches!(figment.find_value(lookup), Ok(Value::Dict(..)));
                let key = match section {
                    true => format!("{lookup}.*"),
                    false => lookup.to_owned(),
                };
                *source_name = figment
                    .find_metadata(lookup)
                    .map(|meta| source_of(meta, &key));
            }
            e
        })?;
        Ok((config, origin))
    }
}

/// Where the list of gates came from, as figment's metadata for the `gates` key says: what
/// the warning that no gate is required names as the place to fix.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[doc(hidden)] // ralph's own: `Config`'s field, set through `ralph.toml` or the builder
pub enum GatesOrigin {
    /// Nothing set it: the built-in empty list.
    #[default]
    Default,
    /// `ralph.toml`, at this path.
    File(std::path::PathBuf),
    /// The environment variable `RALPH_GATES`.
    Env,
    /// The program: `RalphBuilder::config("gates", …)`.
    Program,
}

impl GatesOrigin {
    fn of(figment: &Figment) -> GatesOrigin {
        let Some(meta) = figment.find_metadata("gates") else {
            return GatesOrigin::Default;
        };
        match &meta.source {
            Some(figment::Source::File(path)) => GatesOrigin::File(path.clone()),
            _ if meta.name.contains("environment") => GatesOrigin::Env,
            _ if meta.name == OVERRIDES_SOURCE => GatesOrigin::Program,
            _ => GatesOrigin::Default,
        }
    }

    /// What to do when no gate is required, naming the place that set the list: `listed`
    /// when it lists gates (all optional), else it is empty.
    pub fn fix(&self, listed: bool) -> String {
        let var = env_var("gates");
        match (self, listed) {
            (GatesOrigin::Default, _) => "add [[gates]] to ralph.toml".into(),
            (GatesOrigin::File(path), false) => format!(
                "`gates = []` in {} turns every gate off: replace it with a [[gates]] table",
                path.display()
            ),
            (GatesOrigin::File(path), true) => format!(
                "every [[gates]] of {} has `required = false`: make one required",
                path.display()
            ),
            (GatesOrigin::Env, _) => format!(
                "the environment variable {var} sets the gates, over ralph.toml's [[gates]]: \
                 unset it, or give a required gate there"
            ),
            (GatesOrigin::Program, _) => format!(
                "the program sets the gates with RalphBuilder::config(\"gates\", …), over \
                 ralph.toml and {var}: give a required gate there"
            ),
        }
    }
}

/// Refuses `agents = []` written on purpose (in `ralph.toml`, a `RALPH_AGENTS` or the
/// program), which would otherwise fall back to `claude` in silence; the default empty
/// list is not refused.
fn check_agents(config: &Config, figment: &Figment) -> Result<(), ConfigError> {
    if !config.agents.is_empty() {
        return Ok(());
    }
    let Some(meta) = figment.find_metadata("agents") else {
        return Ok(());
    };
    let set = matches!(meta.source, Some(figment::Source::File(_)))
        || meta.name.contains("environment")
        || meta.name == OVERRIDES_SOURCE;
    if !set {
        return Ok(());
    }
    Err(ConfigError::Invalid {
        key: "agents".into(),
        message: "is empty: name at least one agent (claude, codex, gemini, opencode or an \
                  [agent.NAME] table), or remove the key to run claude"
            .into(),
        source_name: Some(source_of(meta, "agents")),
    })
}

/// Where the value of `key` came from, as a person set it: the file, the one environment
/// variable (not "`RALPH_` environment variable(s)"), or the program.
fn source_of(meta: &figment::Metadata, key: &str) -> String {
    match meta.name.contains("environment") {
        true => format!("environment variable {}", env_var(key)),
        false => describe_source(meta),
    }
}

/// The variable that sets the dotted `key`: `claude.max_turns` is `RALPH_CLAUDE__MAX_TURNS`,
/// and `context.*` one of `RALPH_CONTEXT__*`.
fn env_var(key: &str) -> String {
    format!(
        "{ENV_PREFIX}{}",
        key.replace('.', "__").to_ascii_uppercase()
    )
}

fn describe_source(meta: &figment::Metadata) -> String {
    match &meta.source {
        Some(figment::Source::File(path)) => path.display().to_string(),
        _ => meta.name.to_string(),
    }
}

/// figment's errors, said the way a person wrote the setting: the key without figment's
/// `default.` profile, and for an environment variable, the variable itself.
pub(super) fn describe(error: &figment::Error) -> String {
    error
        .clone()
        .into_iter()
        .map(|e| {
            let mut text = e.kind.to_string();
            if !e.path.is_empty() {
                text.push_str(&format!(" for key {:?}", e.path.join(".")));
            }
            if let Some(hint) = misplaced_setting(&e) {
                text.push_str(&hint);
            }
            if let Some(meta) = &e.metadata {
                if meta.name.contains("environment") {
                    let var = env_var(&e.path.join("."));
                    text.push_str(&format!(" in environment variable {var}"));
                } else {
                    text.push_str(&format!(" in {}", describe_source(meta)));
                }
            }
            text
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// For a top-level setting written below a `[table]` of `ralph.toml` (TOML puts every key
/// after a table header into that table), where it belongs.
fn misplaced_setting(error: &figment::Error) -> Option<String> {
    let figment::error::Kind::UnknownField(field, _) = &error.kind else {
        return None;
    };
    let table = error.path.first().filter(|_| error.path.len() >= 2)?;
    setting_names().contains(field).then(|| {
        format!(
            " (`{field}` is a top-level setting, not one of [{table}]: in ralph.toml, write it \
             above the first [table])"
        )
    })
}

/// `RALPH_…` variables that are not settings but that ralph (or its tests and CI) reads, and
/// so are not refused as typos: the Claude CLI's path, the run cookie ralph gives the
/// processes it starts, the event it gives a hook, the usage file it names to a command
/// agent (which may itself run `ralph status`), the `ralph` command's log filter, and the
/// switches of ralph's own test suite.
pub(crate) const ENV_ALLOWED: &[&str] = &[
    "RALPH_CLAUDE_BIN",
    "RALPH_LOG",
    "RALPH_RUN_COOKIE",
    "RALPH_SKIP_REAL_CLAUDE",
    "RALPH_CLAUDE_CACHE",
    HOOK_EVENT_VAR,
    USAGE_FILE_VAR,
];

/// The variable that names to a command agent the file it may write its usage to (see
/// [`CommandAgent`](https://docs.rs/ralph-loop/latest/ralph/agent/struct.CommandAgent.html)). Allowed in ralph's own environment, so
/// that the agent may run `ralph status`.
pub const USAGE_FILE_VAR: &str = "RALPH_USAGE_FILE";

/// The variable a `[[hooks]]` command is given: the name of the event it runs on. Allowed
/// in ralph's own environment, so that a hook may run `ralph status`.
pub const HOOK_EVENT_VAR: &str = "RALPH_EVENT";

/// The top-level settings, as `Config` serializes them: the one list, so a new field is a
/// new variable without a second list to keep.
fn setting_names() -> Vec<String> {
    match Value::serialize(Config::default()) {
        Ok(Value::Dict(_, dict)) => dict.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// Whether an environment key (after the prefix, split on `__`) names a config key.
fn is_config_key(key: &str) -> bool {
    let first = key.split('.').next().unwrap_or(key);
    setting_names()
        .iter()
        .any(|k| k.eq_ignore_ascii_case(first))
}

/// Refuses a `RALPH_…` variable that names no setting and is not in [`ENV_ALLOWED`].
fn check_env_names() -> Result<(), ConfigError> {
    let names = setting_names();
    for (var, _) in std::env::vars_os() {
        let Some(var) = var.to_str() else { continue };
        let Some(rest) = var.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        if ENV_ALLOWED.contains(&var) || rest.is_empty() {
            continue;
        }
        let first = rest.split("__").next().unwrap_or(rest).to_ascii_lowercase();
        if names.contains(&first) {
            continue;
        }
        // The whole variable against every setting's and every known variable's:
        // `RALPH_CLAUDE_BINN` is near `RALPH_CLAUDE_BIN`, which is no setting.
        let hint = names
            .iter()
            .map(|n| format!("{ENV_PREFIX}{}", n.to_ascii_uppercase()))
            .chain(ENV_ALLOWED.iter().map(|v| (*v).to_owned()))
            .map(|candidate| (edit_distance(&candidate, var), candidate))
            .filter(|(d, _)| *d <= 2)
            .min()
            .map(|(_, candidate)| candidate);
        return Err(ConfigError::UnknownEnv {
            var: var.to_owned(),
            hint,
        });
    }
    Ok(())
}

/// Levenshtein distance, for "did you mean".
pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
// `Jail` closures return figment's own (large) error type.
#[allow(clippy::result_large_err)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use figment::Jail;

    use super::*;
    use crate::config::{ContextThresholds, PermissionMode, StoreConfig};

    fn load_in(jail: &Jail) -> Result<Config, ConfigError> {
        Config::load(jail.directory())
    }

    #[test]
    fn layers_apply_in_order() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "ralph.toml",
                "max_iterations = 4\nretries = 7\nstage_timeout = \"90s\"\n[context]\nwarn = 0.5\n",
            )?;
            jail.set_env("RALPH_RETRIES", 1);
            jail.set_env("RALPH_CONTEXT__COMPACT", 0.8);
            jail.set_env("RALPH_CLAUDE_BIN", "/not/a/config/key");
            let mut overrides = Overrides::default();
            overrides.set("max_iterations", 3).unwrap();
            overrides.set("context.kill", 0.9).unwrap();
            let c = Config::load_with(jail.directory(), &overrides).unwrap();
            assert_eq!(c.max_iterations, 3, "builder beats file");
            assert_eq!(c.retries, 1, "env beats file");
            assert_eq!(
                c.stage_timeout,
                Duration::from_secs(90),
                "file beats default"
            );
            assert_eq!(c.context, ContextThresholds::new(0.5, 0.8, 0.9));
            Ok(())
        });
    }

    #[test]
    fn claude_section_loads_from_file_and_env() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "ralph.toml",
                "[claude]\nmodel = \"opus\"\nmax_turns = 9\nidle_timeout = \"90s\"\n\
                 read_only_mode = \"dontAsk\"\n[claude.env]\nAPI_TIMEOUT_MS = \"5000\"\n",
            )?;
            jail.set_env("RALPH_CLAUDE__MODEL", "sonnet");
            let c = load_in(jail).unwrap();
            assert_eq!(c.claude.model.as_deref(), Some("sonnet"), "env beats file");
            assert_eq!(c.claude.max_turns, Some(9));
            assert_eq!(c.claude.idle_timeout, Duration::from_secs(90));
            assert_eq!(c.claude.read_only_mode, PermissionMode::DontAsk);
            assert_eq!(c.claude.env["API_TIMEOUT_MS"], "5000");
            Ok(())
        });
    }

    #[test]
    fn unreachable_after_loads_from_file_and_env_and_zero_is_refused() {
        Jail::expect_with(|jail| {
            assert_eq!(
                load_in(jail).unwrap().unreachable_after,
                Duration::from_secs(60),
                "the default"
            );
            jail.create_file("ralph.toml", "unreachable_after = \"2m\"\n")?;
            assert_eq!(
                load_in(jail).unwrap().unreachable_after,
                Duration::from_secs(120)
            );
            jail.set_env("RALPH_UNREACHABLE_AFTER", "5s");
            assert_eq!(
                load_in(jail).unwrap().unreachable_after,
                Duration::from_secs(5),
                "env beats file"
            );
            jail.set_env("RALPH_UNREACHABLE_AFTER", "0s");
            let msg = load_in(jail).unwrap_err().to_string();
            assert!(
                msg.contains("unreachable_after") && msg.contains("longer than zero"),
                "{msg}"
            );
            Ok(())
        });
    }

    #[test]
    fn seed_003_keys_load_from_file_and_env() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "ralph.toml",
                "recent_attempts = 9\n[store]\nkind = \"progress\"\n",
            )?;
            jail.set_env("RALPH_ONCE", "true");
            jail.set_env("RALPH_RECENT_ATTEMPTS", "3");
            let c = load_in(jail).unwrap();
            assert!(c.once);
            assert_eq!(c.recent_attempts, 3, "env beats file");
            assert_eq!(c.store, StoreConfig::progress(), "its own default file");
            jail.create_file(
                "ralph.toml",
                "[store]\nkind = \"progress\"\npath = \"docs/P.md\"\n",
            )?;
            let c = load_in(jail).unwrap();
            assert_eq!(c.store.path(), Some(Path::new("docs/P.md")));
            // A path alone keeps the default kind; the environment can change the kind.
            jail.create_file("ralph.toml", "[store]\npath = \"state/plan.jsonl\"\n")?;
            assert_eq!(
                load_in(jail).unwrap().store,
                StoreConfig::jsonl().at("state/plan.jsonl")
            );
            jail.set_env("RALPH_STORE__KIND", "progress");
            assert_eq!(
                load_in(jail).unwrap().store,
                StoreConfig::progress().at("state/plan.jsonl")
            );
            // A memory store keeps no file: a path for it is a mistake, named.
            jail.clear_env();
            jail.create_file("ralph.toml", "[store]\nkind = \"memory\"\npath = \"x\"\n")?;
            let msg = load_in(jail).unwrap_err().to_string();
            assert!(msg.contains("path") && msg.contains("ralph.toml"), "{msg}");
            jail.create_file("ralph.toml", "[store]\nkind = \"memory\"\n")?;
            assert_eq!(load_in(jail).unwrap().store, StoreConfig::Memory {});
            Ok(())
        });
    }

    #[test]
    fn an_empty_agents_list_is_refused_naming_the_key_but_the_default_is_not() {
        Jail::expect_with(|jail| {
            jail.clear_env();
            jail.create_file("ralph.toml", "agents = []\n")?;
            let msg = load_in(jail).unwrap_err().to_string();
            assert!(
                msg.contains("agents is empty") && msg.contains("ralph.toml"),
                "{msg}"
            );
            jail.create_file("ralph.toml", "max_iterations = 3\n")?;
            assert!(load_in(jail).unwrap().agents.is_empty());
            jail.create_file("ralph.toml", "agents = [\"claude\"]\n")?;
            assert_eq!(load_in(jail).unwrap().agents, ["claude"]);
            Ok(())
        });
    }

    #[test]
    fn gates_from_toml() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "ralph.toml",
                "[[gates]]\nname = \"test\"\ncommand = \"cargo test\"\ntimeout = \"10m\"\n\n[[gates]]\nname = \"lint\"\ncommand = \"cargo clippy\"\nrequired = false\n",
            )?;
            let c = load_in(jail).unwrap();
            assert_eq!(c.gates.len(), 2);
            assert!(c.gates[0].required);
            assert_eq!(c.gates[0].timeout, Duration::from_secs(600));
            assert!(!c.gates[1].required);
            assert_eq!(c.gates[1].timeout, Duration::from_secs(300));
            Ok(())
        });
    }

    #[test]
    fn command_agents_load_from_toml_and_env_and_bad_keys_are_named() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "ralph.toml",
                "[agent.aider]\ncommand = [\"aider\", \"--message-file\", \"{prompt_file}\"]\nread_only_args = [\"--dry-run\"]\nidle_timeout = \"2m\"\n",
            )?;
            jail.set_env("RALPH_AGENT__AIDER__ANSWER_POINTER", "/result");
            let c = load_in(jail).unwrap();
            let aider = &c.agent["aider"];
            assert_eq!(aider.command[2], "{prompt_file}");
            assert_eq!(aider.read_only_args, ["--dry-run"]);
            assert_eq!(aider.idle_timeout, Some(Duration::from_secs(120)));
            assert_eq!(aider.answer_pointer.as_deref(), Some("/result"));

            jail.create_file("ralph.toml", "[agent.aider]\ncommnd = [\"aider\"]\n")?;
            let msg = load_in(jail).unwrap_err().to_string();
            assert!(
                msg.contains("commnd") && msg.contains("ralph.toml"),
                "{msg}"
            );
            Ok(())
        });
    }

    #[test]
    fn the_codex_section_loads_from_file_and_env() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "ralph.toml",
                "[codex]\nbin = \"/opt/codex\"\nargs = [\"-c\", \"x=1\"]\nidle_timeout = \"90s\"\n",
            )?;
            jail.set_env("RALPH_CODEX__MODEL", "gpt-5-codex");
            let c = load_in(jail).unwrap();
            assert_eq!(c.codex.bin, Some(PathBuf::from("/opt/codex")));
            assert_eq!(c.codex.args, ["-c", "x=1"]);
            assert_eq!(c.codex.idle_timeout, Duration::from_secs(90));
            assert_eq!(c.codex.model.as_deref(), Some("gpt-5-codex"));
            Ok(())
        });
    }

    /// What docs/configuration.md says of the agents' variables: a list or a table is one variable
    /// holding it whole, its keys as written (a variable per key would arrive lower-cased).
    #[test]
    fn lists_and_tables_come_whole_from_one_variable() {
        Jail::expect_with(|jail| {
            jail.set_env("RALPH_CODEX__ARGS", r#"["-c", "x=1"]"#);
            jail.set_env("RALPH_CLAUDE__ENV", r#"{API_TIMEOUT_MS="60000"}"#);
            jail.set_env("RALPH_CLAUDE__CONTEXT_WINDOWS", "{my-model=128000}");
            jail.set_env("RALPH_AGENT__AIDER__COMMAND", r#"["aider", "--yes"]"#);
            jail.set_env("RALPH_OPENCODE__IDLE_TIMEOUT", "90s");
            let c = load_in(jail).unwrap();
            assert_eq!(c.codex.args, ["-c", "x=1"]);
            assert_eq!(c.claude.env["API_TIMEOUT_MS"], "60000");
            assert_eq!(c.claude.context_windows["my-model"], 128_000);
            assert_eq!(c.agent["aider"].command, ["aider", "--yes"]);
            assert_eq!(c.opencode.idle_timeout, Duration::from_secs(90));

            jail.set_env("RALPH_GEMINI__ENV__FOO_BAR", "\"1\"");
            let c = load_in(jail).unwrap();
            assert_eq!(c.gemini.env.keys().collect::<Vec<_>>(), ["foo_bar"]);
            Ok(())
        });
    }

    #[test]
    fn unknown_key_names_key_and_file() {
        Jail::expect_with(|jail| {
            jail.create_file("ralph.toml", "max_iteration = 4\n")?;
            let msg = load_in(jail).unwrap_err().to_string();
            assert!(msg.contains("max_iteration"), "{msg}");
            assert!(msg.contains("ralph.toml"), "{msg}");
            Ok(())
        });
    }

    #[test]
    fn bad_type_names_key_and_file() {
        Jail::expect_with(|jail| {
            jail.create_file("ralph.toml", "max_iterations = \"many\"\n")?;
            let msg = load_in(jail).unwrap_err().to_string();
            assert!(msg.contains("max_iterations"), "{msg}");
            assert!(msg.contains("ralph.toml"), "{msg}");
            Ok(())
        });
    }

    #[test]
    fn a_misspelled_environment_variable_is_an_error_naming_it() {
        Jail::expect_with(|jail| {
            jail.set_env("RALPH_MAX_ITERATONS", "1");
            let e = load_in(jail).unwrap_err();
            assert!(matches!(e, ConfigError::UnknownEnv { .. }), "{e:?}");
            let msg = e.to_string();
            assert!(
                msg.contains("RALPH_MAX_ITERATONS")
                    && msg.contains("did you mean RALPH_MAX_ITERATIONS?"),
                "{msg}"
            );
            jail.clear_env();
            // Near a variable ralph reads that is no setting (audit case 8).
            jail.set_env("RALPH_CLAUDE_BINN", "/x");
            let msg = load_in(jail).unwrap_err().to_string();
            assert!(msg.contains("did you mean RALPH_CLAUDE_BIN?"), "{msg}");
            jail.clear_env();
            for allowed in ENV_ALLOWED {
                jail.set_env(allowed, "x");
            }
            load_in(jail).unwrap();
            jail.set_env("RALPH_GATES", "[]");
            load_in(jail).unwrap();
            Ok(())
        });
    }

    #[test]
    fn a_top_level_setting_under_a_table_says_where_it_belongs() {
        // Audit case 7: `agents = […]` appended after the generated `[claude]` table.
        Jail::expect_with(|jail| {
            jail.create_file(
                "ralph.toml",
                "[claude]\nmodel = \"x\"\nagents = [\"codex\"]\n",
            )?;
            let msg = load_in(jail).unwrap_err().to_string();
            assert!(
                msg.contains("`agents` is a top-level setting, not one of [claude]")
                    && msg.contains("above the first [table]"),
                "{msg}"
            );
            jail.create_file("ralph.toml", "[claude]\nmodle = \"x\"\n")?;
            let msg = load_in(jail).unwrap_err().to_string();
            assert!(!msg.contains("top-level"), "a plain typo: {msg}");
            Ok(())
        });
    }

    #[test]
    fn a_value_out_of_bounds_names_the_variable_that_set_it() {
        // Audit case 9: not "`RALPH_` environment variable(s)".
        Jail::expect_with(|jail| {
            jail.set_env("RALPH_BUILD_CONCURRENCY", "0");
            let msg = load_in(jail).unwrap_err().to_string();
            assert!(
                msg.contains("build_concurrency must be at least 1")
                    && msg.contains("(set in environment variable RALPH_BUILD_CONCURRENCY)"),
                "{msg}"
            );
            jail.clear_env();
            jail.set_env("RALPH_CONTEXT__WARN", "0.99");
            let msg = load_in(jail).unwrap_err().to_string();
            assert!(
                msg.contains("environment variable RALPH_CONTEXT__*"),
                "{msg}"
            );
            Ok(())
        });
    }

    #[test]
    fn keys_are_said_as_written_and_where_they_were_set() {
        Jail::expect_with(|jail| {
            jail.create_file("ralph.toml", "max_iteration = 4\n")?;
            let msg = load_in(jail).unwrap_err().to_string();
            assert!(msg.contains("for key \"max_iteration\""), "{msg}");
            assert!(!msg.contains("default."), "{msg}");
            jail.create_file("ralph.toml", "")?;
            jail.set_env("RALPH_CONTEXT__WARN", "lots");
            let msg = load_in(jail).unwrap_err().to_string();
            assert!(
                msg.contains("for key \"context.warn\"")
                    && msg.contains("in environment variable RALPH_CONTEXT__WARN"),
                "{msg}"
            );
            jail.clear_env();
            let mut overrides = Overrides::default();
            overrides.set("log_dirr", "x").unwrap();
            let msg = Config::load_with(jail.directory(), &overrides)
                .unwrap_err()
                .to_string();
            assert!(
                msg.contains("for key \"log_dirr\"")
                    && msg.contains("in the program (RalphBuilder::config)"),
                "{msg}"
            );
            assert!(
                !msg.contains("BTreeMap") && !msg.contains("src/config/"),
                "{msg}"
            );
            Ok(())
        });
    }
}
