//! What the benches that run `fake-claude` share.

#![allow(dead_code)] // each bench uses a part

use std::path::PathBuf;

/// `fake-claude` (`fixtures/bin/fake_claude.rs`), a stand-in for the `claude` binary, built by
/// cargo for this bench's profile.
pub(crate) fn fake_claude() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fake-claude"))
}

/// The arguments of `cargo bench` mean a measurement; anything else (`cargo test --benches`)
/// a quick check that the bench still works.
pub(crate) fn measuring() -> bool {
    std::env::args().any(|arg| arg == "--bench")
}
