//! The Claude Code CLI as an agent: [`ClaudeCli`], its [`ClaudeConfig`], and the parser of
//! its `--output-format stream-json` stdout ([`stream`]).

mod cli;
mod command;
mod config;
mod segment;
mod session;
pub mod stream;

pub use cli::ClaudeCli;
pub use config::{BIN_ENV, ClaudeConfig, PermissionMode};
