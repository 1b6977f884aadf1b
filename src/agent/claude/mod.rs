//! The Claude Code CLI as an agent: the parser of its `--output-format stream-json` stdout.

pub mod stream;
