//! Threads: the lifecycle, checkpoints, preflight, git safety, the loop and fallback.

#[path = "../support/mod.rs"]
mod support;

mod assess;
mod context;
mod draft;
mod fallback;
mod forged;
mod lifecycle;
mod preflight;
mod record;
mod retry;
mod review;
mod safety;
mod transitions;
