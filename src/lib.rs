//! ralph drives autonomous coding agents through a written spec until it is implemented,
//! checked by real quality gates and verified.
//!
//! One fresh agent process per unit of work; the library, not the agent, owns the state,
//! the order, the limits, the gates and the verdict of "done". The construct loop of
//! [`Ralph::construct`] runs INVESTIGATE → BUILD → VERIFY (and DECOMPOSE when a task is
//! killed) with the stage derived from the persisted [`Board`](model::Board), so a killed
//! process resumes where the work stood.
//!
//! Beside it, each behind a feature (see [Features](#features)):
//!
//! * **Build mode** (seeds 004 and 002, feature `specs`): `Ralph::plan` turns markdown specs
//!   into `implementation.json` (`specs::Implementation`); `Ralph::build_specs` works through
//!   it spec by spec and task by task — a read-only planner writes the spec's plan first
//!   (`.ralph/plans/`), each task gets one fresh agent session and the gates, and a verified
//!   spec becomes a git commit named after it.
//! * **Threads** (seed 001, feature `threads`, the `thread` module): one piece of work from draft to commit, with human
//!   checkpoints, preflight, a git baseline and a managed branch.
//!
//! And always:
//!
//! * **The progress file** (seed 003): [`ProgressStore`] keeps the construct loop's board in a
//!   markdown file people edit; [`Config::once`] and [`Ralph::dry_run`] run one iteration, or
//!   none.
//!
//! Four seams, each usable as `dyn`: [`Agent`] (the real Claude CLI, or the deterministic
//! `FakeAgent` of the `test-util` feature), [`Gate`] ([`ShellGate`]), [`Store`] ([`JsonlStore`], [`MemoryStore`]) and
//! [`Prioritizer`] ([`CriticalPath`]). Observers receive an [`Event`] stream.
//!
//! # Features
//!
//! The construct loop, the four seams, the Claude CLI agent and the stores are always there.
//! The rest is opt-in, so a tool that uses one pipeline sees only its types:
//!
//! * `specs` — plan mode and build mode over `implementation.json` (`Ralph::plan`,
//!   `Ralph::build_specs`, the `specs` module).
//! * `threads` — threads with human checkpoints (the `thread` module).
//! * `full` — both.
//! * `fake` — the deterministic `FakeAgent` (scripts in Rust or TOML).
//! * `test-util` — `fake`, and the mockall mocks of the four seams (`mock`), for your tests.
//! * `cli` — the `ralph` command (`cargo install ralph-loop --features cli`).
//!
//! ```toml
//! [dependencies]
//! ralph-loop = { version = "0.1", features = ["full"] }
//!
//! [dev-dependencies]
//! ralph-loop = { version = "0.1", features = ["test-util"] }
//! ```
//!
//! # Example
//!
//! A spec, one real shell gate, and a scripted agent: the spec becomes an issue, the issue
//! becomes a task, the task is built (the fake writes a file the gate checks), verified and
//! accepted.
//!
//! ```
//! use ralph::{FakeAgent, MemoryStore, Outcome, Ralph, Role, ShellGate, agent::Script};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! std::fs::write(dir.path().join("spec.md"), "# Greeter\nWrite hello.txt.\n")?;
//!
//! let agent = FakeAgent::new()
//!     .on(Role::Investigate, "i-1", Script::new().json(json!({
//!         "tasks": [{"name": "Write hello.txt", "accept": "hello.txt says hello"}]
//!     })))
//!     .on(Role::Build, "t-1", Script::new()
//!         .write("hello.txt", "hello\n")
//!         .answer("Wrote the file.\n<TASK_DONE>"))
//!     .on(Role::Verify, "t-1", Script::new().json(json!({"verdict": "accept", "reason": "says hello"})))
//!     .always(Role::GapAnalysis, Script::new().json(json!({"tasks": [], "issues": []})));
//!
//! let ralph = Ralph::builder()
//!     .workspace(dir.path())
//!     .agent(agent)
//!     .gate(ShellGate::new("hello", "grep -q hello hello.txt"))
//!     .store(MemoryStore::new())
//!     .build()?;
//!
//! let outcome = ralph.construct("spec.md").await?;
//! assert!(matches!(outcome, Outcome::Complete { iterations: 1, accepted: 1, .. }));
//! # Ok(())
//! # }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

// Layers, top to bottom. Cargo keeps each crate from importing one above it; inside this
// crate a module imports only from its own layer or those below, and the pipelines never
// import one another (a rule of review here, as it is one crate):
//   facade      ralph, board, mock, the re-exports below
//   pipelines   construct, specs, thread
//   runtime     runtime, steer
//   agents      the crate ralph-loop-agents (crates/agents): the agents, in `agent` with
//               the seam they implement
//   seams       the crate ralph-loop-core (crates/core): agent, gate, store, prioritize,
//               the data they exchange (model, answer, prompt, event, outcome, context),
//               config, git, signal (the marker parser)
//   foundation  the crate ralph-loop-process (crates/process): process, files, time,
//               output, logfile, with no ralph types
//
// The inner crates' modules are used here under their own names (`crate::process::…`,
// `crate::agent::…`); the public ones are re-exported. What only an optional pipeline uses
// carries its `#[cfg]`. The crate's own tests and benches reach the inner crates directly,
// and the few items of this one they need are `#[doc(hidden)]`.
use ralph_loop_core::{answer, event, git, outcome, prompt, signal};
use ralph_loop_process::{files, logfile, output, process, time};

pub use ralph_loop_agents::agent;
pub use ralph_loop_core::{config, gate, model, prioritize, store};

mod board;
mod construct;
#[cfg(feature = "test-util")]
pub mod mock;
mod ralph;
mod runtime;
#[cfg(feature = "specs")]
pub mod specs;
pub mod steer;
#[cfg(feature = "threads")]
pub mod thread;

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The examples of `docs/running.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../docs/running.md")]
pub struct RunningDoctests;

/// The examples of `docs/configuration.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../docs/configuration.md")]
pub struct ConfigurationDoctests;

/// The examples of `docs/agent-clis.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../docs/agent-clis.md")]
pub struct AgentClisDoctests;

/// The examples of `docs/library.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../docs/library.md")]
pub struct LibraryDoctests;

/// The examples of `docs/adapters.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../docs/adapters.md")]
pub struct AdaptersDoctests;

/// The examples of `docs/design.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../docs/design.md")]
pub struct DesignDoctests;

/// The examples of `docs/benchmarks.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../docs/benchmarks.md")]
pub struct BenchmarksDoctests;

#[cfg(feature = "fake")]
#[doc(no_inline)] // a page of its own in its module
pub use agent::FakeAgent;
#[doc(no_inline)] // a page of its own in its module
pub use agent::claude::ClaudeCli;
#[doc(no_inline)] // a page of its own in its module
pub use agent::{Agent, AgentError, AgentExit, AgentRequest, AgentRun, Role};
#[doc(no_inline)] // a page of its own in its module
pub use config::Config;
pub use construct::dry_run::DryRun;
pub use event::{Event, Observer};
#[doc(no_inline)] // a page of its own in its module
pub use gate::{Gate, GateReport, GateStatus, ShellGate};
#[cfg(any(feature = "specs", feature = "threads"))]
pub use git::GitError;

/// The attribute every implementation of [`Agent`], [`Gate`], [`Store`] and [`Observer`]'s
/// async methods carries: `#[ralph::async_trait]`, with no dependency of your own.
pub use async_trait::async_trait;
pub use outcome::BlockedItem;
pub use outcome::Outcome;
#[cfg(feature = "specs")]
pub use outcome::SpecsOutcome;
#[doc(no_inline)] // a page of its own in its module
pub use prioritize::{CriticalPath, Prioritizer};
pub use process::StopToken;
pub use ralph::{Ralph, RalphBuilder, answer_schema};
pub use runtime::error::{BuildError, EditError, Error};
pub use runtime::spend::{Spent, Totals};
pub use runtime::workspace::STATE_DIR;
pub use steer::Steering;

#[doc(no_inline)] // a page of its own in its module
pub use store::{JsonlStore, MemoryStore, ProgressStore, Store};
