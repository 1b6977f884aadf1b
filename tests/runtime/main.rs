//! What every mode goes through: process supervision, gates, signals (the matrix of every mode × signal), and the promises every mode keeps.

// Tests set up and look at their workspaces with git and the CLIs they start themselves,
// outside any run: the rule that processes start in ralph-loop-process is the library's.
#![allow(clippy::disallowed_types)]
// Tests write their fixtures and workspaces directly, outside any run: the rule
// that state is written through ralph-loop-process's `files` is the library's.
#![allow(clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

mod command_agent;
mod daemons;
mod ecosystems;
mod every_mode;
mod hooks;
mod hostile;
mod process;
mod shell_gate;
mod signal_matrix;
