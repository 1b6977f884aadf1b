//! Supervised child processes.
