//! The Claude Code CLI as an agent: [`ClaudeCli`] (which also holds its `[claude]` table),
//! and the parser of its
//! `--output-format stream-json` stdout.

mod cli;
mod command;
mod compact;
mod segment;
mod session;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub))] // pub for `__internals`
pub(crate) mod stream;

pub use cli::ClaudeCli;
