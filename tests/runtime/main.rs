//! What every mode goes through: process supervision, gates, signals (the matrix of every mode × signal), and the promises every mode keeps.

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
