//! A part of `ralph-loop`, with no stability promise of its own: use `ralph-loop`
//! (`use ralph::…`), which re-exports what users handle.
//!
//! The seams and the data, on top of `ralph-loop-process`: the four traits ([`agent`]'s
//! `Agent`, [`gate`]'s `Gate`, [`store`]'s `Store`, [`prioritize`]'s `Prioritizer`), what
//! they exchange ([`model`], [`event`], [`outcome`], [`answer`]), the configuration
//! ([`config`]), the prompts ([`prompt`]), the one marker parser ([`signal`]), git
//! ([`git`]). The agents that implement the seam are `ralph-loop-agents`. Cargo keeps this
//! crate from using anything of the agents, the runtime or the pipelines above it.

#![cfg_attr(docsrs, feature(doc_cfg))]

// The foundation's modules, under their own names (`crate::process::…`).
use ralph_loop_process::{files, output, process, time};

pub mod agent;
pub mod answer;
pub mod config;
pub mod context;
pub mod event;
pub mod gate;
pub mod git;
pub mod model;
pub mod outcome;
pub mod prioritize;
pub mod prompt;
pub mod signal;
pub mod store;

// The names the docs of this crate link to as the facade has them (`crate::Event`), which
// users read through `ralph`'s re-exports.
#[doc(no_inline)]
pub use agent::{Agent, AgentError, AgentRequest};
#[doc(no_inline)]
pub use config::Config;
#[doc(no_inline)]
pub use event::{Event, Observer};
#[doc(no_inline)]
pub use gate::{Gate, ShellGate};
#[doc(no_inline)]
pub use outcome::Outcome;
#[doc(no_inline)]
pub use store::{JsonlStore, MemoryStore, Store};
