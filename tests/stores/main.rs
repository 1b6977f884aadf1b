//! The stores (`plan.jsonl`, the progress file) and real git.

#[path = "../support/mod.rs"]
mod support;

mod chain;
mod git;
mod jsonl;
mod progress;
