//! What the benches that run `fake_claude` share.

#![allow(dead_code)] // each bench uses a part

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `fake_claude` example (`examples/fake_claude.rs`), a stand-in for the `claude` binary,
/// built by `cargo build --example fake_claude` for the profile this bench was built with:
/// `bench` when it runs from `target/release` (`cargo bench`), else `dev` (`cargo test
/// --benches` runs benches once, from `target/debug`). A no-op when it is up to date.
///
/// Robust where a path guessed in advance is not: a stale or missing binary is rebuilt, into
/// the target dir this bench was built in (so `CARGO_TARGET_DIR` and `--target-dir` hold),
/// next to this bench's own binary (`target/<profile>/examples/`).
pub(crate) fn fake_claude() -> PathBuf {
    let exe = std::env::current_exe().expect("the bench's path");
    // target/<profile dir>/deps/<bench>-<hash>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps");
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("release") => "bench",
        _ => "dev",
    };
    let target_dir = profile_dir.parent().expect("target/<profile>");
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "--quiet",
            "--profile",
            profile,
            "--example",
            "fake_claude",
        ])
        .arg("--target-dir")
        .arg(target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("run cargo build");
    assert!(status.success(), "cargo build --example fake_claude failed");
    let path = profile_dir.join("examples").join("fake_claude");
    assert!(path.exists(), "{} is missing", path.display());
    path
}

/// The arguments of `cargo bench` mean a measurement; anything else (`cargo test --benches`)
/// a quick check that the bench still works.
pub(crate) fn measuring() -> bool {
    std::env::args().any(|arg| arg == "--bench")
}
