//! The Claude Code CLI as an agent: [`ClaudeCli`] (which also holds its `[claude]` table),
//! and the parser of its
//! `--output-format stream-json` stdout.

mod cli;
mod command;
mod compact;
mod segment;
mod session;
#[doc(hidden)] // ralph's own, not the API
pub mod stream;

pub use cli::ClaudeCli;
