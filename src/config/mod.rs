//! Layered configuration: built-in defaults < `ralph.toml` in the workspace < `RALPH_*`
//! environment variables (nested keys split on `__`) < builder overrides.
//!
//! ```toml
//! # ralph.toml
//! max_iterations = 10
//! stage_timeout = "5m"
//! agent_timeout = "5m"
//! retries = 2
//! decompose_after_rejections = 2   # verifier rejections of a task before it is split
//! verify_concurrency = 4
//! build_concurrency = 1   # ready tasks built at once, each in its own git work tree
//! transient_retries = 4
//! transient_backoff = "2s"
//! log_dir = "build/ralph-logs"
//! once = false            # stop after one iteration (seed 003's --once)
//! recent_attempts = 5     # BUILD attempts remembered in the next prompts
//!
//! [context]
//! warn = 0.70
//! compact = 0.85
//! kill = 0.95
//!
//! [store]
//! kind = "jsonl"          # or "progress" (a markdown PROGRESS.md), or "memory"
//! path = ".ralph/plan.jsonl"
//!
//! [claude]          # how ClaudeCli runs the CLI: see ClaudeConfig
//! model = "sonnet"
//! max_turns = 40
//!
//! [[gates]]
//! name = "test"
//! command = "cargo test"
//! required = true
//! timeout = "10m"
//! ```
//!
//! `RALPH_MAX_ITERATIONS=3` or `RALPH_CONTEXT__WARN=0.6` override single keys. A
//! `RALPH_…` variable that names no setting is an error naming it (with the closest setting),
//! like an unknown key in `ralph.toml`, so a typo is never silently ignored; the few
//! variables ralph reads otherwise are listed in [`ENV_ALLOWED`].

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The layered configuration [`Config::figment`] returns (the `figment` crate).
#[doc(no_inline)]
pub use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use figment::value::{Dict, Value};
use serde::{Deserialize, Serialize};

use crate::agent::claude::ClaudeConfig;
pub use crate::context::ContextThresholds;
pub use crate::prompt::PromptError;

/// The config file ralph reads from the workspace.
pub const CONFIG_FILE: &str = "ralph.toml";
/// The prefix of environment overrides.
pub const ENV_PREFIX: &str = "RALPH_";

/// Everything the loop needs to know about limits, gates, state and logs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct Config {
    /// Iterations (INVESTIGATE → BUILD → VERIFY) before the loop stops. Default 10 (seed
    /// 000's; seed 003's 20 loses, see the [differences from the seeds](https://github.com/ralph-rs/ralph/blob/main/docs/seed-differences.md)).
    pub max_iterations: u32,
    /// Wall-clock limit of one stage step: investigating one issue, building one task (all
    /// its attempts, agent and gates), one VERIFY fork/join, one gap analysis, decomposing
    /// one task. Time spent waiting out a rate limit does not count. Default 5m (seed 000's;
    /// why a step and not a stage, and why not seed 003's 10m: the [differences from the seeds](https://github.com/ralph-rs/ralph/blob/main/docs/seed-differences.md)).
    #[serde(with = "duration")]
    pub stage_timeout: Duration,
    /// Wall-clock limit of one agent run. Default 5m.
    #[serde(with = "duration")]
    pub agent_timeout: Duration,
    /// Time between SIGTERM and SIGKILL when ralph stops a process. Default 5s.
    #[serde(with = "duration")]
    pub grace: Duration,
    /// Retries of a task after its first attempt fails (gates, missing marker). Default 2.
    pub retries: u32,
    /// Verifier rejections of one task after which it goes to DECOMPOSE instead of being
    /// built again (seed 000: a rejected task "remains for retry or decomposition"): the
    /// decomposer sees the rejections' reasons and the head and tail of its last build's
    /// log. Only a verifier's judgement of the work counts, not a verifier that gave no
    /// usable answer, nor a person's rejection. Default 2; 1 decomposes at the first
    /// rejection.
    pub decompose_after_rejections: u32,
    /// Verifier runs at once in VERIFY. Default 4 (seed 000 runs them all at once; why
    /// not: the [differences from the seeds](https://github.com/ralph-rs/ralph/blob/main/docs/seed-differences.md)).
    pub verify_concurrency: usize,
    /// Ready tasks built at once in BUILD, each by its own agent in its own git work tree
    /// (`.ralph/worktrees/<task>`, branch `ralph-task/<task>`), rebased onto the checked-out
    /// branch and fast-forwarded into it when it passes its gates, in the order the attempts
    /// started (priority order). Default 1 (one at a time,
    /// in the workspace itself). Needs a git repository with a commit; without one BUILD
    /// goes one at a time and says why.
    pub build_concurrency: usize,
    /// Retries of an agent run that failed transiently (overloaded, 5xx), on top of the task's
    /// own retries: they do not count as attempts. Default 4.
    pub transient_retries: u32,
    /// The first wait before such a retry; it doubles each time, up to a minute. Default 2s.
    #[serde(with = "duration")]
    pub transient_backoff: Duration,
    /// Context-pressure tiers.
    pub context: ContextThresholds,
    /// Quality gates, run in order after an agent claims a task done.
    pub gates: Vec<GateConfig>,
    /// Where the board is kept.
    pub store: StoreConfig,
    /// Where stage and agent logs go, relative to the workspace. Default `build/ralph-logs`.
    pub log_dir: PathBuf,
    /// Prompt template overrides.
    pub prompts: PromptPaths,
    /// How [`ClaudeCli`](crate::agent::claude::ClaudeCli) runs the Claude CLI.
    pub claude: ClaudeConfig,
    /// How [`CodexCli`](crate::agent::CodexCli) runs the OpenAI Codex CLI.
    pub codex: crate::agent::CliConfig,
    /// How [`GeminiCli`](crate::agent::GeminiCli) runs the Google Gemini CLI.
    pub gemini: crate::agent::CliConfig,
    /// How [`OpencodeCli`](crate::agent::OpencodeCli) runs opencode.
    pub opencode: crate::agent::CliConfig,
    /// Agent CLIs run from an argv template, by name (`[agent.aider]`): see
    /// [`CommandAgent`](crate::agent::CommandAgent).
    pub agent: std::collections::BTreeMap<String, crate::agent::CommandConfig>,
    /// The agents the `ralph` command runs, in fallback order (`["claude", "aider"]`): on a
    /// rate limit or an unavailable agent the next one takes the run (see
    /// [`Fallback`](crate::agent::Fallback)). Empty: `claude`, or `--agent`.
    pub agents: Vec<String>,
    /// Plan mode and build mode over `implementation.json` (seeds 004 and 002).
    pub planning: PlanningConfig,
    /// Run one iteration, then return [`Outcome::Once`](crate::Outcome::Once) (seed 003's
    /// `--once`, with an iteration a whole construct pass: see the [differences from the seeds](https://github.com/ralph-rs/ralph/blob/main/docs/seed-differences.md)). Default false.
    pub once: bool,
    /// BUILD attempts remembered in the run state and shown in the next BUILD prompts
    /// (seed 003's "Recent Attempts"); older ones are dropped. Default 5.
    pub recent_attempts: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_iterations: 10,
            stage_timeout: Duration::from_secs(300),
            agent_timeout: Duration::from_secs(300),
            grace: crate::process::DEFAULT_GRACE,
            retries: 2,
            decompose_after_rejections: 2,
            verify_concurrency: 4,
            build_concurrency: 1,
            transient_retries: 4,
            transient_backoff: Duration::from_secs(2),
            context: ContextThresholds::default(),
            gates: Vec::new(),
            store: StoreConfig::default(),
            log_dir: PathBuf::from("build/ralph-logs"),
            prompts: PromptPaths::default(),
            claude: ClaudeConfig::default(),
            codex: crate::agent::CliConfig::default(),
            gemini: crate::agent::CliConfig::default(),
            opencode: crate::agent::CliConfig::default(),
            agent: std::collections::BTreeMap::new(),
            agents: Vec::new(),
            planning: PlanningConfig::default(),
            once: false,
            recent_attempts: 5,
        }
    }
}

/// `[planning]`: where plan mode and build mode keep their files, and their limits.
///
/// ```toml
/// [planning]
/// specs_dir = "specs"                      # the markdown specs; plans go to specs/plans
/// implementation = "implementation.json"
/// progress = "PROGRESS.md"
/// max_attempts = 3                         # failed rounds per spec (planner, verifier)
/// magic_phrase = "PLAN_COMPLETE"           # the planner's last line
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct PlanningConfig {
    /// The folder of the markdown specs, relative to the workspace. Default `specs`.
    pub specs_dir: PathBuf,
    /// The file plan mode writes and build mode reads. Default `implementation.json`.
    pub implementation: PathBuf,
    /// The append-only audit trail of completed specs. Default `PROGRESS.md`.
    pub progress: PathBuf,
    /// Failed rounds of one spec (a planner run without a plan, a verifier rejection)
    /// before build mode gives up on it. Default 3.
    pub max_attempts: u32,
    /// The line that must end the planner's answer. Default `PLAN_COMPLETE`.
    pub magic_phrase: String,
}

impl Default for PlanningConfig {
    fn default() -> Self {
        PlanningConfig {
            specs_dir: PathBuf::from("specs"),
            implementation: PathBuf::from("implementation.json"),
            progress: PathBuf::from("PROGRESS.md"),
            max_attempts: 3,
            magic_phrase: "PLAN_COMPLETE".into(),
        }
    }
}

/// One `[[gates]]` entry: a shell command run as a [`ShellGate`](crate::ShellGate).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct GateConfig {
    /// The gate's name.
    pub name: String,
    /// Run with `sh -c` in the workspace.
    pub command: String,
    /// Whether a failure blocks the task. Default true.
    #[serde(default = "yes")]
    pub required: bool,
    /// Wall-clock limit. Default 5m.
    #[serde(with = "duration", default = "five_minutes")]
    pub timeout: Duration,
}

impl GateConfig {
    /// A required gate with a 5-minute timeout.
    pub fn new(name: impl Into<String>, command: impl Into<String>) -> Self {
        GateConfig {
            name: name.into(),
            command: command.into(),
            required: true,
            timeout: five_minutes(),
        }
    }
}

fn yes() -> bool {
    true
}

fn five_minutes() -> Duration {
    Duration::from_secs(300)
}

/// Which [`Store`](crate::Store) the builder creates when none is given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum StoreKind {
    /// [`JsonlStore`](crate::JsonlStore) at `store.path`.
    #[default]
    Jsonl,
    /// [`MemoryStore`](crate::MemoryStore): nothing survives the process.
    Memory,
    /// [`ProgressStore`](crate::store::ProgressStore): a markdown progress file people can
    /// edit (seed 003), at `store.path` (default `PROGRESS.md`).
    Progress,
}

/// `[store]`: the kind and its file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct StoreConfig {
    /// The kind. Default `jsonl`.
    pub kind: StoreKind,
    /// The state file, relative to the workspace. Default `.ralph/plan.jsonl`; for
    /// `kind = "progress"` left at that default, `PROGRESS.md` (see
    /// [`effective_path`](Self::effective_path)).
    pub path: PathBuf,
}

/// The default file of `kind = "progress"`.
pub const PROGRESS_FILE: &str = "PROGRESS.md";

impl StoreConfig {
    /// The file the store uses: `path`, except that a progress store whose `path` was left
    /// at the JSONL default uses [`PROGRESS_FILE`] (one default cannot suit both formats).
    ///
    /// ```
    /// use ralph::config::{Config, StoreKind};
    ///
    /// let mut config = Config::default();
    /// assert_eq!(config.store.effective_path(), std::path::Path::new(".ralph/plan.jsonl"));
    /// config.store.kind = StoreKind::Progress;
    /// assert_eq!(config.store.effective_path(), std::path::Path::new("PROGRESS.md"));
    /// ```
    pub fn effective_path(&self) -> PathBuf {
        if self.kind == StoreKind::Progress && self.path == StoreConfig::default().path {
            PathBuf::from(PROGRESS_FILE)
        } else {
            self.path.clone()
        }
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            kind: StoreKind::Jsonl,
            path: PathBuf::from(".ralph/plan.jsonl"),
        }
    }
}

/// `[prompts]`: template files that replace the built-in ones (minijinja syntax), relative to
/// the workspace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct PromptPaths {
    /// The BUILD prompt of a task's first attempt.
    pub build: Option<PathBuf>,
    /// The BUILD prompt of a retry (carries the previous failure).
    pub retry: Option<PathBuf>,
    /// The INVESTIGATE prompt.
    pub investigate: Option<PathBuf>,
    /// The verifier prompt.
    pub verify: Option<PathBuf>,
    /// The gap-analysis prompt.
    pub gap_analysis: Option<PathBuf>,
    /// The decomposer prompt.
    pub decompose: Option<PathBuf>,
    /// Build mode's prompt of a task (seed 004).
    pub task: Option<PathBuf>,
    /// Build mode's prompt of a task's retry (carries the gate failures).
    pub task_retry: Option<PathBuf>,
    /// The per-spec planner's prompt (seed 002).
    pub planner: Option<PathBuf>,
    /// Build mode's verifier of a whole spec.
    pub spec_verify: Option<PathBuf>,
    /// Plan mode's prompt (specs → implementation.json).
    pub plan_mode: Option<PathBuf>,
    /// A thread's iteration (the loop's prompt, with the reviewer's feedback after a
    /// send-back).
    pub thread: Option<PathBuf>,
    /// A thread's read-only verifier of one acceptance criterion.
    pub thread_verify: Option<PathBuf>,
    /// A thread's AI review of its spec (Assessing).
    pub thread_assess: Option<PathBuf>,
    /// A thread's Drafting conversation.
    pub thread_draft: Option<PathBuf>,
}

/// The configuration could not be loaded or is invalid.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A value could not be read. The message names the key as written (`context.warn`) and
    /// where it was set: the file, the `RALPH_…` variable, or the program.
    #[error("{}", describe_load(.0))]
    Load(Box<figment::Error>),
    /// A `RALPH_…` environment variable names no setting (a typo would otherwise be
    /// silently ignored). Variables ralph reads itself are allowed: see [`ENV_ALLOWED`].
    #[error(
        "environment variable {var} names no setting of ralph{}; unset it, or see the settings in ralph.toml's docs",
        .hint.as_ref().map(|h| format!(" (did you mean {h}?)")).unwrap_or_default()
    )]
    UnknownEnv {
        /// The variable.
        var: String,
        /// The variable of the closest setting, if one is close.
        hint: Option<String>,
    },
    /// A value was read but is not acceptable.
    #[error("invalid config: {key} {message}{}", origin_suffix(.source_name))]
    Invalid {
        /// The key, dotted (`context.warn`, `gates[1].name`).
        key: String,
        /// What is wrong with it.
        message: String,
        /// Where the value came from (`/ws/ralph.toml`, `RALPH_ environment variable(s)`).
        source_name: Option<String>,
    },
}

fn origin_suffix(source: &Option<String>) -> String {
    source
        .as_ref()
        .map(|s| format!(" (set in {s})"))
        .unwrap_or_default()
}

impl From<figment::Error> for ConfigError {
    fn from(e: figment::Error) -> Self {
        ConfigError::Load(Box::new(e))
    }
}

/// Builder-level overrides: dotted keys with values, merged above everything else.
#[derive(Clone, Debug, Default)]
pub(crate) struct Overrides(Vec<(String, Value)>);

impl Overrides {
    /// Sets `key` (dotted, e.g. `context.warn`) to `value`.
    ///
    /// # Errors
    ///
    /// When `value` cannot be represented as a config value.
    pub(crate) fn set(&mut self, key: &str, value: impl Serialize) -> Result<(), ConfigError> {
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
    pub(crate) fn figment_with(workspace: &Path, overrides: &Overrides) -> Figment {
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
    pub(crate) fn load_with(
        workspace: &Path,
        overrides: &Overrides,
    ) -> Result<Config, ConfigError> {
        check_env_names()?;
        let figment = Self::figment_with(workspace, overrides);
        let config: Config = figment.extract()?;
        config.validate().map_err(|mut e| {
            if let ConfigError::Invalid {
                key, source_name, ..
            } = &mut e
            {
                let lookup = key.split('[').next().unwrap_or(key);
                *source_name = figment.find_metadata(lookup).map(describe_source);
            }
            e
        })?;
        Ok(config)
    }

    /// Checks values that parse but make no sense.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] naming the first bad key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check_paths()?;
        self.check_bounds()?;
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            key: key.to_owned(),
            message,
            source_name: None,
        };
        if self.max_iterations == 0 {
            return Err(invalid("max_iterations", "must be at least 1".into()));
        }
        if self.decompose_after_rejections == 0 {
            return Err(invalid(
                "decompose_after_rejections",
                "must be at least 1".into(),
            ));
        }
        if self.verify_concurrency == 0 {
            return Err(invalid("verify_concurrency", "must be at least 1".into()));
        }
        if self.build_concurrency == 0 {
            return Err(invalid("build_concurrency", "must be at least 1".into()));
        }
        for (key, d) in [
            ("stage_timeout", self.stage_timeout),
            ("agent_timeout", self.agent_timeout),
        ] {
            if d.is_zero() {
                return Err(invalid(key, "must be longer than zero".into()));
            }
        }
        self.context
            .validate()
            .map_err(|m| invalid("context", format!("is out of order: {m}")))?;
        if self.planning.max_attempts == 0 {
            return Err(invalid(
                "planning.max_attempts",
                "must be at least 1".into(),
            ));
        }
        if self.planning.magic_phrase.trim().is_empty() {
            return Err(invalid("planning.magic_phrase", "is empty".into()));
        }
        self.claude
            .validate()
            .map_err(|(key, why)| invalid(&format!("claude.{key}"), why))?;
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
}

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
    /// Every timeout (`stage_timeout`, `agent_timeout`, a gate's `timeout`, the claude
    /// section's `idle_timeout`): a week.
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);
    /// `grace`, `transient_backoff`, the claude section's `result_grace`: an hour.
    pub const MAX_WAIT: Duration = Duration::from_secs(3600);
}

impl Config {
    /// Every count and duration within its bound (see [`bounds`]).
    fn check_bounds(&self) -> Result<(), ConfigError> {
        use bounds::*;
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            key: key.to_owned(),
            message,
            source_name: None,
        };
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
        usize_at_most("recent_attempts", self.recent_attempts, MAX_RECENT_ATTEMPTS)?;
        let durations = [
            ("stage_timeout", self.stage_timeout, MAX_TIMEOUT),
            ("agent_timeout", self.agent_timeout, MAX_TIMEOUT),
            ("grace", self.grace, MAX_WAIT),
            ("transient_backoff", self.transient_backoff, MAX_WAIT),
        ];
        let gates = self.gates.iter().enumerate().map(|(i, g)| (i, g.timeout));
        for (key, value, max) in durations
            .into_iter()
            .map(|(k, v, m)| (k.to_owned(), v, m))
            .chain(gates.map(|(i, t)| (format!("gates[{i}].timeout"), t, MAX_TIMEOUT)))
        {
            if value > max {
                return Err(invalid(
                    &key,
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

    /// The files and folders ralph writes stay inside the workspace: relative, not empty,
    /// never going up with `..` (the rule spec paths follow too). A state file or log folder
    /// outside it would escape the workspace's lock.
    fn check_paths(&self) -> Result<(), ConfigError> {
        let store = self.store.effective_path();
        for (key, path) in [
            ("store.path", store.as_path()),
            ("log_dir", self.log_dir.as_path()),
            ("planning.specs_dir", self.planning.specs_dir.as_path()),
            (
                "planning.implementation",
                self.planning.implementation.as_path(),
            ),
            ("planning.progress", self.planning.progress.as_path()),
        ] {
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

fn describe_source(meta: &figment::Metadata) -> String {
    match &meta.source {
        Some(figment::Source::File(path)) => path.display().to_string(),
        _ => meta.name.to_string(),
    }
}

/// figment's errors, said the way a person wrote the setting: the key without figment's
/// `default.` profile, and for an environment variable, the variable itself.
fn describe_load(error: &figment::Error) -> String {
    error
        .clone()
        .into_iter()
        .map(|e| {
            let mut text = e.kind.to_string();
            if !e.path.is_empty() {
                text.push_str(&format!(" for key {:?}", e.path.join(".")));
            }
            if let Some(meta) = &e.metadata {
                if meta.name.contains("environment") {
                    let var = format!("{ENV_PREFIX}{}", e.path.join("__").to_ascii_uppercase());
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

/// `RALPH_…` variables that are not settings but that ralph (or its tests and CI) reads, and
/// so are not refused as typos: the Claude CLI's path, the run cookie ralph gives the
/// processes it starts, the `ralph` command's log filter, and the switches of ralph's own
/// test suite.
pub const ENV_ALLOWED: &[&str] = &[
    "RALPH_CLAUDE_BIN",
    "RALPH_LOG",
    "RALPH_RUN_COOKIE",
    "RALPH_SKIP_REAL_CLAUDE",
    "RALPH_CLAUDE_CACHE",
];

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
        let hint = names
            .iter()
            .map(|n| (edit_distance(n, &first), n))
            .filter(|(d, _)| *d <= 2)
            .min()
            .map(|(_, n)| format!("{ENV_PREFIX}{}", n.to_ascii_uppercase()));
        return Err(ConfigError::UnknownEnv {
            var: var.to_owned(),
            hint,
        });
    }
    Ok(())
}

/// Levenshtein distance, for "did you mean".
fn edit_distance(a: &str, b: &str) -> usize {
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

/// Serde for durations as human strings: `"5m"`, `"90s"`, `"1h 30m"`, `"250ms"`.
pub(crate) mod duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    /// Writes `"5m"`.
    ///
    /// # Errors
    ///
    /// Never, beyond the serializer's own.
    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(*d))
    }

    /// Reads `"5m"`; a bare number is refused because its unit would be a guess.
    ///
    /// # Errors
    ///
    /// When the value is not a duration string.
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Number(f64),
        }
        match Raw::deserialize(d)? {
            Raw::Text(text) => humantime::parse_duration(text.trim()).map_err(|e| {
                D::Error::custom(format!(
                    "invalid duration {text:?}: {e} (write e.g. \"90s\", \"5m\", \"1h\")"
                ))
            }),
            Raw::Number(n) => Err(D::Error::custom(format!(
                "a duration needs a unit: write \"{n}s\" or \"{n}ms\", not {n}"
            ))),
        }
    }

    /// The same for an optional duration.
    pub(crate) mod option {
        use std::time::Duration;

        use serde::{Deserialize, Deserializer, Serializer};

        /// Writes `"5m"`, or nothing.
        ///
        /// # Errors
        ///
        /// Never, beyond the serializer's own.
        pub(crate) fn serialize<S: Serializer>(
            d: &Option<Duration>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match d {
                Some(d) => super::serialize(d, s),
                None => s.serialize_none(),
            }
        }

        /// Reads `"5m"` or nothing.
        ///
        /// # Errors
        ///
        /// When the value is not a duration string.
        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<Duration>, D::Error> {
            #[derive(Deserialize)]
            struct Text(#[serde(with = "super")] Duration);
            Ok(Option::<Text>::deserialize(d)?.map(|t| t.0))
        }
    }
}

#[cfg(test)]
// `Jail` closures return figment's own (large) error type.
#[allow(clippy::result_large_err)]
mod tests {
    use super::*;
    use figment::Jail;

    fn load_in(jail: &Jail) -> Result<Config, ConfigError> {
        Config::load(jail.directory())
    }

    #[test]
    fn defaults_match_seed_000() {
        let c = Config::default();
        assert_eq!(c.max_iterations, 10);
        assert_eq!(c.stage_timeout, Duration::from_secs(300));
        assert_eq!(c.context, ContextThresholds::new(0.70, 0.85, 0.95));
        assert_eq!(c.log_dir, PathBuf::from("build/ralph-logs"));
        assert_eq!(c.store.path, PathBuf::from(".ralph/plan.jsonl"));
        c.validate().unwrap();
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
            assert_eq!(
                c.claude.read_only_mode,
                crate::agent::claude::PermissionMode::DontAsk
            );
            assert_eq!(c.claude.env["API_TIMEOUT_MS"], "5000");
            Ok(())
        });
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
            assert_eq!(c.store.kind, StoreKind::Progress);
            assert_eq!(c.store.effective_path(), PathBuf::from(PROGRESS_FILE));
            jail.create_file(
                "ralph.toml",
                "[store]\nkind = \"progress\"\npath = \"docs/P.md\"\n",
            )?;
            let c = load_in(jail).unwrap();
            assert_eq!(c.store.effective_path(), PathBuf::from("docs/P.md"));
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
    fn unitless_duration_is_refused() {
        Jail::expect_with(|jail| {
            jail.create_file("ralph.toml", "stage_timeout = 300\n")?;
            let msg = load_in(jail).unwrap_err().to_string();
            assert!(
                msg.contains("stage_timeout") && msg.contains("needs a unit"),
                "{msg}"
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
                !msg.contains("BTreeMap") && !msg.contains("src/config.rs"),
                "{msg}"
            );
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
    fn durations_round_trip_as_strings() {
        let text = toml::to_string(&Config::default()).unwrap();
        assert!(text.contains("stage_timeout = \"5m\""), "{text}");
    }
}

#[cfg(test)]
#[path = "config_props.rs"]
mod props;
