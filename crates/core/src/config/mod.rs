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
//! unreachable_after = "60s" # an agent printing only connection errors this long is stopped
//! question_wait = "30m"     # how long a run waits for `ralph answer` (default 0s under CI)
//! log_dir = "build/ralph-logs"
//! log_files_kept = 1000   # the oldest logs beyond it are deleted
//! once = false            # stop after one iteration (seed 003's --once)
//! recent_attempts = 5     # BUILD attempts remembered in the next prompts
//! max_cost_usd = 20.0     # dollars over the board, a build-mode run or a thread
//! max_tokens = 5000000    # input + output tokens over the same
//!
//! [prices."gpt-5-codex"]  # dollars per million tokens, for agents that report none
//! input = 1.25
//! cached_input = 0.125
//! output = 10.0
//!
//! [context]
//! warn = 0.70
//! compact = 0.85
//! kill = 0.95
//!
//! [store]
//! kind = "jsonl"          # or "progress" (markdown), or "memory" (no file)
//! path = ".ralph/plan.jsonl" # the default of jsonl; progress defaults to PROGRESS.md
//!
//! [claude]          # how ClaudeCli runs the CLI: see ClaudeCli
//! model = "sonnet"
//! max_turns = 40
//!
//! [sandbox]               # see SandboxConfig
//! mode = "auto"
//!
//! [[gates]]
//! name = "test"
//! command = "cargo test"
//! required = true
//! timeout = "10m"
//! network = false         # the default: a gate runs without network
//!
//! [[hooks]]               # see Config's docs
//! on = ["finished", "needs_person"]
//! command = ["notify-send", "ralph"]
//! timeout = "30s"
//! required = false
//! ```
//!
//! `RALPH_MAX_ITERATIONS=3` or `RALPH_CONTEXT__WARN=0.6` override single keys. A
//! `RALPH_…` variable that names no setting is an error naming it (with the closest setting),
//! like an unknown key in `ralph.toml`, so a typo is never silently ignored (the few
//! variables ralph reads otherwise, such as `RALPH_CLAUDE_BIN` and `RALPH_LOG`, are allowed).
//!
//! The module by role: this file is the schema's top ([`Config`], [`ConfigError`]);
//! `sections` holds the tables of the loop itself (`[context]`, `[store]`, `[planning]`,
//! `[prompts]`, `[[gates]]`, `[[hooks]]`), `agents` the tables of each agent (`[claude]`, `[codex]`,
//! `[gemini]`, `[opencode]`, `[agent.NAME]`), `load` the layers and where a value came from,
//! `validate` what a loaded value must satisfy, and `duration` how `"5m"` is read and written.
//!
//! Config is foundation: it imports no agent, gate or store. Agents take their own table
//! from here ([`Agent::configure`](crate::Agent::configure)).

mod agents;
pub mod duration;
mod load;
#[cfg(test)]
mod props;
mod sections;
mod validate;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use agents::BIN_ENV;
#[doc(hidden)] // ralph's own, not the API
pub use agents::{ClaudeConfig, CliConfig};
pub use agents::{CommandConfig, PermissionMode};
#[doc(hidden)] // ralph's own, not the API
pub use load::{CONFIG_FILE, GatesOrigin, HOOK_EVENT_VAR, Overrides, USAGE_FILE_VAR};
pub use sections::{ContextThresholds, GateConfig, PlanningConfig, StoreConfig};
#[doc(hidden)] // ralph's own, not the API
pub use sections::{HOOK_EVENTS, HookConfig, NEEDS_PERSON, TEMPLATES};
#[doc(hidden)] // ralph's own, not the API
pub use sections::{SandboxConfig, SandboxMode};
pub use validate::bounds;

/// Everything the loop needs to know about limits, gates, hooks, state and logs.
///
/// # Hooks
///
/// `[[hooks]]` entries run a command when a run emits an event, in every mode (the
/// construct loop, plan mode, build mode, a thread's loop):
///
/// ```toml
/// [[hooks]]
/// on = ["finished", "task_blocked", "needs_person"]
/// command = ["notify-send", "ralph"]  # argv; no shell unless you write ["sh", "-c", "…"]
/// name = "notify"                     # optional: how messages call it (default hooks[0])
/// timeout = "30s"                     # optional, the default
/// required = false                    # optional, the default
/// ```
///
/// * `on` names events by the `event` tag `--json` prints ([`Event`](crate::Event)'s
///   variants in snake case: `finished`, `task_blocked`, `warning`, …), or `needs_person`.
///   An unknown name is refused at load, naming the key (`hooks[0].on`) and the closest
///   name.
/// * `finished` is the last event of every run, in every mode, a run that failed with an
///   error included ([`Event::Finished`](crate::Event::Finished)).
/// * `needs_person` is that `finished` event when the run ended in a state only a person
///   can move on from ([`Event::Finished`](crate::Event::Finished)'s `needs_person`): the
///   construct loop blocked, unverified, or stopped by a broken gate; build mode blocked,
///   unverified, or out of attempts on a spec; a run-wide budget used up (issue 27's
///   `budget_exhausted` outcome, once it lands); a thread's loop leaving it at a checkpoint
///   or waiting ([`PhaseKind::needs_person`](https://docs.rs/ralph-loop/latest/ralph/thread/enum.PhaseKind.html#method.needs_person):
///   PreflightFailed, Paused, Stuck, PendingReview, …); and any run that failed with an
///   error. Not a complete run, a `--once` step, the iteration limit or an interrupt. It is
///   also an agent's question for a person ([`Event::QuestionAsked`](crate::Event::QuestionAsked)),
///   when it is asked: the run goes on meanwhile with what does not depend on it.
/// * The command runs in the workspace with the event's JSON on stdin (the line `--json`
///   prints, `ts` included) and `RALPH_EVENT` set to the event's name, supervised as a gate
///   is: killed with its process group at its `timeout` (and everything it started when it
///   ends), tagged so that a later run sweeps what a killed ralph left.
/// * Hooks run one at a time, in the order of the events, beside the run (a slow webhook
///   never holds up the loop); the run waits for all of them, the `finished` ones last,
///   before it returns, so none outlives it.
/// * A hook that fails (a non-zero exit, a timeout, a program that cannot start) is a
///   [`Warning`](crate::Event::Warning) naming it; a `required = true` one then also fails
///   the run when it ends: the call returns an error naming the hook (`ralph` exits 1).
///   Warnings about hooks run no hooks.
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
    /// How long an agent may print only connection errors (`Reconnecting... waiting for
    /// network`), with no successful API exchange, before it is stopped as unreachable
    /// ([`FailureKind::Unreachable`](crate::agent::FailureKind::Unreachable)); a
    /// [`Fallback`](crate::agent::Fallback) chain then gives the run to its next agent.
    /// Runs that each end early for a connection error (a CLI that gives up on a refused
    /// connection) are run again after a backoff, past `transient_retries`, until they have
    /// failed so for this long in a row. With no agent left, the run ends naming the agent
    /// and its last error ([`Error::AgentUnreachable`](https://docs.rs/ralph-loop/latest/ralph/enum.Error.html#variant.AgentUnreachable)).
    /// Not the task's fault: the attempt is not counted and nothing is decomposed. A wait
    /// the agent announced for a rate limit is no connection error. Default 60s.
    #[serde(with = "duration")]
    pub unreachable_after: Duration,
    /// How long a run waits for a person's answer (`ralph answer`) once an agent's question
    /// is all that keeps it from going on (every other task done or waiting on it); then it
    /// ends waiting for the answer (exit 3), its state saved. `ralph stop` and a signal end
    /// the wait. Default: none set, which is 0s under `CI=true` or without a terminal, 30m
    /// otherwise ([`question_wait_or_default`](Self::question_wait_or_default)).
    #[serde(with = "duration::option", skip_serializing_if = "Option::is_none")]
    pub question_wait: Option<Duration>,
    /// Context-pressure tiers.
    pub context: ContextThresholds,
    /// Quality gates, run in order after an agent claims a task done.
    pub gates: Vec<GateConfig>,
    /// `[[hooks]]`: commands run on events (see [Hooks](#hooks)). Not public: hooks are set
    /// in `ralph.toml`; code reacts to events through an [`Observer`](crate::Observer).
    pub hooks: Vec<HookConfig>,
    /// Where the board is kept.
    pub store: StoreConfig,
    /// Where stage and agent logs go, relative to the workspace. Default `build/ralph-logs`.
    /// A folder ralph makes for them ignores itself (a `.gitignore` of `*`), so logs never
    /// show in `git status`. Each log keeps the first MiB and the last 4 MiB of what was
    /// written to it, with the number of bytes skipped between them.
    pub log_dir: PathBuf,
    /// Log files kept in `log_dir` (counted through its subfolders): when a run starts, and
    /// every 64 stages, the oldest beyond this many are deleted. Default 1000; at least 20.
    /// Threads' transcripts (`.ralph/runs/*/output.log`) are kept to as many, pruned when a
    /// thread's agent run starts; their run records stay.
    pub log_files_kept: usize,
    /// `[prompts]`: template files that replace the built-in ones, by template name,
    /// relative to the workspace (minijinja syntax; a name that is no template is refused,
    /// naming it):
    ///
    /// | name | the prompt of |
    /// |---|---|
    /// | `build` | a task's first BUILD attempt |
    /// | `retry` | a BUILD retry (carries the previous failure) |
    /// | `investigate` | INVESTIGATE |
    /// | `verify` | the verifier |
    /// | `gap_analysis` | the gap analysis |
    /// | `decompose` | the decomposer |
    /// | `task` | build mode's task (seed 004) |
    /// | `task_retry` | build mode's task retry (carries the gate failures) |
    /// | `planner` | build mode's per-spec planner (seed 002) |
    /// | `spec_verify` | build mode's verifier of a whole spec |
    /// | `plan_mode` | plan mode (specs → `implementation.json`) |
    /// | `thread` | a thread's iteration (with the reviewer's feedback after a send-back) |
    /// | `thread_verify` | a thread's read-only verifier of one acceptance criterion |
    /// | `thread_assess` | a thread's AI review of its spec (Assessing) |
    /// | `thread_draft` | a thread's Drafting conversation |
    /// | `thread_polish` | a thread's Polishing run (docs, tests, cleanup) |
    ///
    /// A template stays cache-friendly when what every call of its role shares (the
    /// instructions, the spec) comes first and the line
    /// `<!-- ralph: what follows is this call's own -->` then starts what changes (the task,
    /// the feedback): the built-in ones are written so. Without that line it works the same,
    /// its prompt only counts as changing from its first byte.
    pub prompts: BTreeMap<String, PathBuf>,
    /// How [`ClaudeCli`](https://docs.rs/ralph-loop/latest/ralph/agent/claude/struct.ClaudeCli.html) runs the Claude CLI.
    pub claude: ClaudeConfig,
    /// How [`CodexCli`](https://docs.rs/ralph-loop/latest/ralph/agent/struct.CodexCli.html) runs the OpenAI Codex CLI.
    pub codex: CliConfig,
    /// How [`GeminiCli`](https://docs.rs/ralph-loop/latest/ralph/agent/struct.GeminiCli.html) runs the Google Gemini CLI.
    pub gemini: CliConfig,
    /// How [`OpencodeCli`](https://docs.rs/ralph-loop/latest/ralph/agent/struct.OpencodeCli.html) runs opencode.
    pub opencode: CliConfig,
    /// Agent CLIs run from an argv template, by name (`[agent.aider]`): see
    /// [`CommandAgent`](https://docs.rs/ralph-loop/latest/ralph/agent/struct.CommandAgent.html).
    pub agent: std::collections::BTreeMap<String, CommandConfig>,
    /// The agents the `ralph` command runs, in fallback order (`["claude", "aider"]`): on a
    /// rate limit or an unavailable agent the next one takes the run (see
    /// [`Fallback`](crate::agent::Fallback)). Empty: `claude`, or `--agent`.
    pub agents: Vec<String>,
    /// Plan mode and build mode over `implementation.json` (seeds 004 and 002).
    pub planning: PlanningConfig,
    /// `[sandbox]`: how agents, gates and git hooks are confined ("Sandbox" in docs/running.md).
    /// Not public: set in `ralph.toml`, `RALPH_SANDBOX__…`, or
    /// [`RalphBuilder::config`](https://docs.rs/ralph-loop/latest/ralph/struct.RalphBuilder.html#method.config) (`"sandbox.mode"`).
    pub sandbox: SandboxConfig,
    /// Run one iteration, then return [`Outcome::Once`](crate::Outcome::Once) (seed 003's
    /// `--once`, with an iteration a whole construct pass: see the [differences from the seeds](https://github.com/ralph-rs/ralph/blob/main/docs/seed-differences.md)). Default false.
    pub once: bool,
    /// BUILD attempts remembered in the run state and shown in the next BUILD prompts
    /// (seed 003's "Recent Attempts"); older ones are dropped. Default 5.
    pub recent_attempts: usize,
    /// Dollars the agents may spend over the whole of the state a run belongs to (the
    /// construct board, build mode's run over `implementation.json`, one thread), counted
    /// across resumes: once reached, no new agent run starts and the run ends "budget
    /// exhausted" (exit 2). Each Claude run gets `--max-budget-usd` no higher than what is
    /// left. Runs of an agent that reports no cost count their tokens only. Default: none.
    pub max_cost_usd: Option<f64>,
    /// Input and output tokens the agents may use over the same scope (cache reads and
    /// writes are shown apart and not counted). Default: none.
    pub max_tokens: Option<u64>,
    /// What a run costs where its agent reports no dollars (Codex, Gemini, opencode): per
    /// model (the agent's `model`, as its section sets it), dollars per million tokens of
    /// `input` (uncached), `cached_input` (read from the provider's cache; default: `input`),
    /// `cache_write` (written to it; default: `input`) and `output`. Such a run's cost counts
    /// against `max_cost_usd` and shows as the agents' own do; ralph keeps no price table of
    /// its own, so a run of a model without a price stays "unpriced" (its dollars unknown,
    /// its tokens counted). A cost the agent reports always wins. Default: none.
    ///
    /// ```toml
    /// [codex]
    /// model = "gpt-5-codex"
    ///
    /// [prices."gpt-5-codex"]
    /// input = 1.25
    /// cached_input = 0.125
    /// output = 10.0
    /// ```
    pub prices: BTreeMap<String, BTreeMap<String, f64>>,
}

impl Config {
    /// [`question_wait`](Self::question_wait), or its default where none is set: 0s under
    /// `CI=true` or without a terminal on standard input (nobody is there to answer), 30m
    /// otherwise.
    pub fn question_wait_or_default(&self) -> Duration {
        use std::io::IsTerminal;
        self.question_wait.unwrap_or_else(|| {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
            match ci || !std::io::stdin().is_terminal() {
                true => Duration::ZERO,
                false => Duration::from_secs(30 * 60),
            }
        })
    }
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
            unreachable_after: Duration::from_secs(60),
            question_wait: None,
            context: ContextThresholds::default(),
            gates: Vec::new(),
            hooks: Vec::new(),
            store: StoreConfig::default(),
            log_dir: PathBuf::from("build/ralph-logs"),
            log_files_kept: 1000,
            prompts: BTreeMap::new(),
            claude: ClaudeConfig::default(),
            codex: CliConfig::default(),
            gemini: CliConfig::default(),
            opencode: CliConfig::default(),
            agent: std::collections::BTreeMap::new(),
            agents: Vec::new(),
            planning: PlanningConfig::default(),
            sandbox: SandboxConfig::default(),
            once: false,
            recent_attempts: 5,
            max_cost_usd: None,
            max_tokens: None,
            prices: BTreeMap::new(),
        }
    }
}

/// The configuration could not be loaded or is invalid.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A value could not be read. The message names the key as written (`context.warn`) and
    /// where it was set: the file, the `RALPH_…` variable, or the program.
    #[error("{}", load::describe(.0))]
    Load(Box<figment::Error>),
    /// A `RALPH_…` environment variable names no setting (a typo would otherwise be
    /// silently ignored). Variables ralph reads itself (`RALPH_CLAUDE_BIN`, `RALPH_LOG`, …)
    /// are allowed.
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
        /// Where the value came from (`/ws/ralph.toml`, `environment variable RALPH_MAX_ITERATIONS`).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_seed_000() {
        let c = Config::default();
        assert_eq!(c.max_iterations, 10);
        assert_eq!(c.stage_timeout, Duration::from_secs(300));
        assert_eq!(c.context, ContextThresholds::new(0.70, 0.85, 0.95));
        assert_eq!(c.log_dir, PathBuf::from("build/ralph-logs"));
        assert_eq!(
            c.store.path(),
            Some(std::path::Path::new(".ralph/plan.jsonl"))
        );
        c.validate().unwrap();
    }

    /// Seed 003, pitfall 2: a process ralph stops (an agent, a gate) gets 5 s to end on its
    /// own before it is killed.
    #[test]
    fn the_grace_is_seed_003s_five_seconds() {
        assert_eq!(Config::default().grace, Duration::from_secs(5));
        assert_eq!(crate::process::DEFAULT_GRACE, Duration::from_secs(5));
    }
}
