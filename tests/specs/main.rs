//! Plan mode and build mode over `implementation.json`: planning, building, verifying, committing, crash safety, logs.

#[path = "../support/mod.rs"]
mod support;

mod apart;
mod build;
mod build_crash;
mod evidence;
mod implementation_store;
mod mode_logs;
mod plan_mode;
mod planning_phase;
