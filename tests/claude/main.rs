//! The Claude Code CLI: the real pinned CLI against a scripted Messages API, and `ClaudeCli` against the `fake-claude` stand-in.

#[path = "../support/mod.rs"]
mod support;

mod api_harness;
mod cli;
mod conformance;
mod fake_claude;
mod stream;
mod unreachable;
