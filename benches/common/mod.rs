//! What the benches that run agents share: `fake-claude`, and the peak resident set.

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

/// `VmHWM` of this process, in KiB.
pub(crate) fn peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

/// Sets `VmHWM` back to the current resident set (Linux 4.0+).
pub(crate) fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak RSS");
}
