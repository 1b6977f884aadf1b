//! A part of `ralph-loop`, with no stability promise of its own: use `ralph-loop`
//! (`use ralph::…`), which re-exports what users handle.
//!
//! The agents: [`ClaudeCli`](agent::claude::ClaudeCli), one adapter per other vendor CLI
//! (`CodexCli`, `GeminiCli`, `OpencodeCli`), `CommandAgent` for any command, and the
//! scripted `FakeAgent`. They implement `ralph-loop-core`'s `Agent` seam, and compile beside
//! the runtime, which knows them only through it.

#![cfg_attr(docsrs, feature(doc_cfg))]

// The modules below, under their own names (`crate::config::…`, `crate::process::…`).
#[cfg(test)]
use ralph_loop_core::answer;
use ralph_loop_core::{config, context, git};
#[cfg(feature = "fake")]
use ralph_loop_process::files;
use ralph_loop_process::{output, process};

/// The `Agent` seam ([`ralph_loop_core::agent`]) with the agents that implement it: one
/// module, as `ralph::agent` shows it.
pub mod agent {
    #[doc(inline)]
    pub use ralph_loop_core::agent::*;

    pub mod claude;
    mod cli;
    #[doc(hidden)] // ralph's own, not the API
    pub mod cli_files;
    #[cfg(feature = "fake")]
    mod fake;
    mod reach;

    #[doc(hidden)] // ralph's own: the runtime and its tests
    pub use cli::USAGE_FILE_VAR;
    #[doc(hidden)] // ralph's own: its tests
    pub use cli::{ANSWER_KEPT, EVENTS_KEPT};
    pub use cli::{CodexCli, CommandAgent, GeminiCli, OpencodeCli};
    #[cfg(feature = "fake")]
    pub use fake::{FakeAgent, Script};
    pub use reach::is_connection_error;
}
