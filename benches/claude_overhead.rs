//! ralph's overhead per agent run of the Claude CLI: one `ClaudeCli::run` against the same
//! fake executable spawned and drained by hand.
//!
//! - `bare`: `tokio::process::Command` spawns `fake_claude` with the arguments and
//!   environment ralph would pass, writes the prompt to its stdin and closes it, reads stdout
//!   to EOF and waits for the exit. The least any agent runner can do.
//! - `claude_cli`: `ClaudeCli::run` of a BUILD request with the same prompt: a process group
//!   and a run cookie, stdout through the line reader and the stream parser, the clocks, the
//!   `/proc` sweep for leftover processes, the removal of the CLI's session files.
//! - `claude_cli_logged`: the same with the run's log file (what the engine always asks for).
//! - `sweep`: of which, the `/proc` sweep for processes left behind, once the main process
//!   has exited (`SupervisedChild::kill_all` after `true` exited). A run this short probes
//!   only the pids handed out since its leader's; a run longer than 100 ms lists `/proc`,
//!   which grows with the number of processes on the machine (`ps -e | wc -l`).
//!
//! The difference `claude_cli` − `bare` is ralph's overhead (target ≤ 0.3 ms). The fake's
//! default run prints three lines (≈ 1.3 KB) and exits; the prompt is 4 KiB.
//!
//! Spawning a process on a shared VM is noisy, and divan measures one bench after the other,
//! so the difference of two medians drifts with the machine's load. After divan, the bench
//! also runs 1,000 pairs (`bare` then `claude_cli`, or the other way round, alternately) and
//! prints the quartiles of the per-pair difference: `paired overhead`.
//!
//! `fake-claude` is the `fixtures` feature's binary target (`fixtures/bin/fake_claude.rs`),
//! built by cargo for the bench's profile and reached through `CARGO_BIN_EXE_fake-claude`
//! (see `common::fake_claude`).
//!
//! Run with `cargo bench --bench claude_overhead`. Results: `benches/RESULTS.md`.

// Benches and examples set up their workspaces with git and the programs they measure,
// outside any run: the rule that processes start in ralph-loop-process is the library's.
#![allow(clippy::disallowed_types)]
// Benches write their fixtures and workspaces directly, outside any run: the rule
// that state is written through ralph-loop-process's `files` is the library's.
#![allow(clippy::disallowed_methods)]
mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::LazyLock;

use divan::{Bencher, black_box};
use ralph::ClaudeCli;
use ralph::agent::{Agent, AgentExit, AgentRequest, Role};
use ralph_loop_process::process::ProcessSpec;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::runtime::Runtime;

fn main() {
    divan::main();
    if common::measuring() {
        paired_overhead(1000);
    }
}

/// Prints the quartiles of `claude_cli` − `bare` over `pairs` back-to-back pairs.
#[allow(clippy::print_stdout)]
fn paired_overhead(pairs: usize) {
    let setup = &*SETUP;
    let cli = setup.cli();
    let args = cli.command_line(&setup.request());
    let time_bare = || {
        let started = std::time::Instant::now();
        setup.runtime.block_on(bare_run(setup, &args));
        started.elapsed()
    };
    let time_cli = || {
        let started = std::time::Instant::now();
        let run = setup
            .runtime
            .block_on(cli.run(setup.request()))
            .expect("run");
        assert_eq!(run.exit, AgentExit::Completed);
        started.elapsed()
    };
    let mut differences: Vec<f64> = (0..pairs)
        .map(|i| {
            let (bare, ralph) = if i % 2 == 0 {
                (time_bare(), time_cli())
            } else {
                let ralph = time_cli();
                (time_bare(), ralph)
            };
            (ralph.as_secs_f64() - bare.as_secs_f64()) * 1e3
        })
        .collect();
    differences.sort_by(f64::total_cmp);
    let quartile = |q: usize| differences[(differences.len() - 1) * q / 4];
    println!(
        "paired overhead (claude_cli - bare, {pairs} pairs): median {:.3} ms \
         (quartiles {:.3} / {:.3} ms)",
        quartile(2),
        quartile(1),
        quartile(3)
    );
}

/// Everything the runs share: the fake, a workspace, the CLI's config dir, a runtime.
struct Setup {
    fake: PathBuf,
    dir: TempDir,
    runtime: Runtime,
    prompt: String,
}

static SETUP: LazyLock<Setup> = LazyLock::new(|| {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("config/projects/-ws")).expect("config dir");
    std::fs::create_dir_all(dir.path().join("ws")).expect("workspace");
    Setup {
        fake: common::fake_claude(),
        dir,
        runtime: tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime"),
        prompt: "Implement the next task of the spec.\n".repeat(112), // 4 KiB
    }
});

impl Setup {
    fn workspace(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    fn cli(&self) -> ClaudeCli {
        ClaudeCli::new().bin(&self.fake).env(
            "CLAUDE_CONFIG_DIR",
            self.dir.path().join("config").to_str().expect("UTF-8 path"),
        )
    }

    fn request(&self) -> AgentRequest {
        AgentRequest::new(Role::Build, self.prompt.as_str(), self.workspace())
    }
}

/// Spawn, feed the prompt, read stdout to EOF, wait.
#[divan::bench(sample_count = 1000)]
fn bare(bencher: Bencher<'_, '_>) {
    let setup = &*SETUP;
    let args = setup.cli().command_line(&setup.request());
    bencher.bench(|| setup.runtime.block_on(bare_run(setup, &args)));
}

/// One bare run: the fake with ralph's arguments, the prompt on stdin, stdout to EOF.
async fn bare_run(setup: &Setup, args: &[String]) -> Vec<u8> {
    // The environment ralph adds (`IS_SANDBOX` as root); the fake ignores both.
    let env = [("CLAUDE_CODE_MAX_RETRIES", "3"), ("IS_SANDBOX", "1")];
    let mut child = tokio::process::Command::new(&setup.fake)
        .args(args)
        .envs(env)
        .current_dir(setup.workspace())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = child.stdout.take().expect("stdout");
    let feed = async {
        stdin
            .write_all(setup.prompt.as_bytes())
            .await
            .expect("write");
        drop(stdin);
    };
    let mut out = Vec::with_capacity(4096);
    let ((), read) = tokio::join!(feed, stdout.read_to_end(&mut out));
    read.expect("read");
    let status = child.wait().await.expect("wait");
    assert!(status.success());
    black_box(out)
}

/// `ClaudeCli::run`, no log file.
#[divan::bench(sample_count = 1000)]
fn claude_cli(bencher: Bencher<'_, '_>) {
    let setup = &*SETUP;
    let cli = setup.cli();
    bencher.bench(|| {
        let run = setup
            .runtime
            .block_on(cli.run(setup.request()))
            .expect("run");
        assert_eq!(run.exit, AgentExit::Completed);
        black_box(run)
    });
}

/// `ClaudeCli::run` with a log file (a new one per run, as the engine does).
#[divan::bench(sample_count = 1000)]
fn claude_cli_logged(bencher: Bencher<'_, '_>) {
    let setup = &*SETUP;
    let cli = setup.cli();
    let logs = setup.dir.path().join("logs");
    let mut n = 0_u64;
    bencher
        .with_inputs(|| {
            n += 1;
            setup.request().log_path(logs.join(format!("{n}.jsonl")))
        })
        .bench_local_values(|request| {
            let run = setup.runtime.block_on(cli.run(request)).expect("run");
            assert_eq!(run.exit, AgentExit::Completed);
            black_box(run)
        });
}

/// The sweep alone, after the process exited (spawning and waiting are not measured).
#[divan::bench(sample_count = 1000)]
fn sweep(bencher: Bencher<'_, '_>) {
    let setup = &*SETUP;
    bencher
        .with_inputs(|| {
            setup.runtime.block_on(async {
                let mut child = ProcessSpec::new("true").spawn().expect("spawn");
                child.wait().await.expect("wait");
                child
            })
        })
        .bench_local_values(|mut child| {
            let killed = setup.runtime.block_on(child.kill_all());
            assert_eq!(killed, 0);
            child
        });
}
