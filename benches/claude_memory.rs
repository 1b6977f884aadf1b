//! ralph's peak memory while the Claude CLI prints a huge answer: one `ClaudeCli::run`
//! against `fake_claude` with `FAKE_CLAUDE_HUGE=200MiB`, which prints a 200 MiB answer twice
//! (the assistant line and the result line, ≈ 400 MiB of stdout, two lines of 200 MiB).
//!
//! Reported: this process's peak resident set (`VmHWM` of `/proc/self/status`) before the
//! run and after it; the fake is a separate process and not counted. Twice: without a log
//! file, then with one (the engine always logs; the log gets every byte). The peak is reset
//! between the two (`5` to `/proc/self/clear_refs`). Target: a peak of at most 64 MB
//! (printed in MiB: 64 MB is 61 MiB).
//!
//! Not a divan bench: one run is the measurement. `cargo bench --bench claude_memory` prints
//! the numbers; without `--bench` (`cargo test --benches`) it checks itself with 1 MiB.
//! `fake_claude` is built by the bench (see `common::fake_claude`).

#![allow(clippy::print_stdout)]
// Benches write their fixtures and workspaces directly, outside any run: the rule
// that state is written through ralph-loop-process's `files` is the library's.
#![allow(clippy::disallowed_methods)]

mod common;

use std::path::Path;
use std::time::Instant;

use ralph::ClaudeCli;
use ralph::agent::{Agent, AgentExit, AgentRequest, Role};

fn main() {
    let size = if common::measuring() {
        "200MiB"
    } else {
        "1MiB"
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).expect("workspace");
    let cli = ClaudeCli::new()
        .bin(common::fake_claude())
        .env("FAKE_CLAUDE_HUGE", size)
        .env(
            "CLAUDE_CONFIG_DIR",
            dir.path().join("config").to_str().expect("UTF-8 path"),
        );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!("FAKE_CLAUDE_HUGE={size}: the answer twice, as the assistant and the result line");
    // Under Cargo's target dir, a real disk: /tmp may be a tmpfs, which is memory.
    let logs = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("log dir");
    for log in [None, Some(logs.path().join("run.jsonl"))] {
        common::reset_peak();
        let before = common::peak_kib();
        let mut request = AgentRequest::new(Role::Build, "Print it all.", &workspace);
        if let Some(log) = &log {
            request = request.log_path(log);
        }
        let started = Instant::now();
        let run = runtime.block_on(cli.run(request)).expect("run");
        let elapsed = started.elapsed();
        assert_eq!(run.exit, AgentExit::Completed);
        assert!(run.final_text.ends_with("\n<TASK_DONE>"));
        let after = common::peak_kib();
        let logged = log.as_deref().map_or(String::new(), |log| {
            format!(", log {:.1} MiB", log_size(log) as f64 / f64::from(1 << 20))
        });
        println!(
            "{}: peak RSS {:.1} MiB (before the run {:.1} MiB), {:.2} s{logged}",
            if log.is_some() {
                "with a log"
            } else {
                "no log"
            },
            after as f64 / 1024.0,
            before as f64 / 1024.0,
            elapsed.as_secs_f64(),
        );
    }
}

fn log_size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}
