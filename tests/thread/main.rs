//! Threads: the lifecycle, checkpoints, preflight, git safety, the loop, fallback and the example.

#[path = "../support/mod.rs"]
mod support;

mod assess;
mod example;
mod fallback;
mod lifecycle;
mod preflight;
mod record;
mod retry;
mod safety;
mod transitions;
